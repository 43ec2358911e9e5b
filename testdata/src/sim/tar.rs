//! `tar` of the simulator's containers, enough for `kubectl cp` (Kubernetes
//! docs "kubectl cp"): `tar cf - PATH...` writes a ustar archive of files
//! and directories to stdout (leading `/` stripped, as GNU tar does), and
//! `tar xf - [-C DIR]` (with `m`, `v`, `o` accepted) reads one from stdin
//! into the container's filesystem. PAX extended headers (`x`, which Go's
//! archive/tar writes for long names) are read for their `path`.

use super::shell::{emit, resolve, stdin_all, Filesystem, Io};

const BLOCK: usize = 512;

/// Runs `tar` with `args`; its exit code.
pub async fn command(io: &mut Io, args: &[&str]) -> i32 {
    let Some(flags) = args.first() else {
        emit(io, 2, b"tar: no command given\n".to_vec());
        return 1;
    };
    let flags = flags.trim_start_matches('-');
    let mut rest: Vec<&str> = args[1..].to_vec();
    let mut dir = "/".to_string();
    if let Some(i) = rest.iter().position(|a| *a == "-C") {
        if let Some(d) = rest.get(i + 1) {
            dir = resolve("/", d);
        }
        rest.drain(i..(i + 2).min(rest.len()));
    }
    if flags.contains('f') {
        if rest.first() != Some(&"-") {
            emit(io, 2, b"tar: only an archive on stdin or stdout (f -) is supported\n".to_vec());
            return 1;
        }
        rest.remove(0);
    }
    if flags.contains('c') {
        let fs = io.fs.clone();
        let fs = fs.lock().unwrap_or_else(|p| p.into_inner());
        match create(&fs, &dir, &rest) {
            Ok(archive) => {
                drop(fs);
                emit(io, 1, archive);
                0
            }
            Err(message) => {
                drop(fs);
                emit(io, 2, message.into_bytes());
                2
            }
        }
    } else if flags.contains('x') {
        let archive = stdin_all(io).await;
        let fs = io.fs.clone();
        let mut fs = fs.lock().unwrap_or_else(|p| p.into_inner());
        match extract(&mut fs, &dir, &archive) {
            Ok(()) => 0,
            Err(message) => {
                drop(fs);
                emit(io, 2, message.into_bytes());
                2
            }
        }
    } else {
        emit(io, 2, b"tar: only c and x are supported\n".to_vec());
        1
    }
}

fn header(name: &str, size: usize, dir: bool) -> Vec<u8> {
    let mut h = vec![0u8; BLOCK];
    let name = if dir { format!("{name}/") } else { name.to_string() };
    let (prefix, short) = if name.len() > 100 {
        match name[..name.len().min(155)].rfind('/') {
            Some(i) if name.len() - i - 1 <= 100 => (&name[..i], &name[i + 1..]),
            _ => ("", name.as_str()),
        }
    } else {
        ("", name.as_str())
    };
    let short = &short.as_bytes()[..short.len().min(100)];
    h[..short.len()].copy_from_slice(short);
    let octal = |h: &mut Vec<u8>, at: usize, len: usize, value: u64| {
        let text = format!("{value:0width$o}\0", width = len - 1);
        h[at..at + len].copy_from_slice(text.as_bytes());
    };
    octal(&mut h, 100, 8, if dir { 0o755 } else { 0o644 });
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, size as u64);
    octal(&mut h, 136, 12, chrono::Utc::now().timestamp().max(0) as u64);
    h[156] = if dir { b'5' } else { b'0' };
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// A ustar archive of `paths` (relative to `dir`).
pub fn create(fs: &Filesystem, dir: &str, paths: &[&str]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for path in paths {
        let path = resolve(dir, path);
        let entries: Vec<(String, Option<&Vec<u8>>)> = if let Some(data) = fs.files.get(&path) {
            vec![(path.clone(), Some(data))]
        } else if fs.dirs.contains(&path) {
            let prefix = if path == "/" { "/".to_string() } else { format!("{path}/") };
            let mut all = vec![(path.clone(), None)];
            all.extend(fs.dirs.iter().filter(|d| d.starts_with(&prefix)).map(|d| (d.clone(), None)));
            all.extend(fs.files.iter().filter(|(f, _)| f.starts_with(&prefix)).map(|(f, d)| (f.clone(), Some(d))));
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        } else {
            return Err(format!("tar: {}: Cannot stat: No such file or directory\n", path.trim_start_matches('/')));
        };
        for (name, data) in entries {
            let name = name.trim_start_matches('/');
            match data {
                Some(data) => {
                    out.extend(header(name, data.len(), false));
                    out.extend_from_slice(data);
                    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
                }
                None if !name.is_empty() => out.extend(header(name, 0, true)),
                None => {}
            }
        }
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn number(field: &[u8]) -> Result<usize, String> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256.
        return Ok(field[1..].iter().fold(0usize, |n, &b| n.saturating_mul(256).saturating_add(b as usize)));
    }
    let t = text(field);
    let t = t.trim_matches(|c: char| c == ' ' || c == '\0');
    if t.is_empty() {
        return Ok(0);
    }
    usize::from_str_radix(t, 8).map_err(|_| "tar: invalid header: bad number\n".to_string())
}

/// Extracts a tar archive into `dir`.
pub fn extract(fs: &mut Filesystem, dir: &str, archive: &[u8]) -> Result<(), String> {
    let mut at = 0;
    let mut pax_path: Option<String> = None;
    while at + BLOCK <= archive.len() {
        let h = &archive[at..at + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size = number(&h[124..136])?;
        let kind = h[156];
        let start = at + BLOCK;
        let end = start.checked_add(size).filter(|e| *e <= archive.len()).ok_or("tar: unexpected end of archive\n")?;
        let data = &archive[start..end];
        at = start + size.div_ceil(BLOCK) * BLOCK;
        let mut name = text(&h[0..100]);
        let prefix = text(&h[345..500]);
        if &h[257..262] == b"ustar" && !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        if let Some(p) = pax_path.take() {
            name = p;
        }
        match kind {
            b'x' => {
                pax_path = pax_records(data);
            }
            b'g' => {}
            b'5' => fs.mkdirs(&resolve(dir, &name)),
            b'0' | 0 | b'7' => fs.write(&resolve(dir, &name), data.to_vec()),
            _ => {}
        }
    }
    Ok(())
}

/// The `path` of PAX extended header records (`"%d path=%s\n"`).
fn pax_records(data: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(data);
    let mut rest: &str = &text;
    let mut path = None;
    while let Some((len, _)) = rest.split_once(' ') {
        let n: usize = len.parse().ok()?;
        let record = rest.get(..n)?;
        if let Some(value) = record[len.len() + 1..].strip_prefix("path=") {
            path = Some(value.trim_end_matches('\n').to_string());
        }
        rest = &rest[n..];
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_round_trip_through_another_directory() {
        let mut fs = Filesystem::default();
        fs.dirs.insert("/".into());
        fs.mkdirs("/data/sub");
        let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        fs.files.insert("/data/a.bin".into(), big.clone());
        fs.files.insert("/data/sub/b.txt".into(), b"hello\n".to_vec());
        let archive = create(&fs, "/", &["/data"]).unwrap();
        assert_eq!(archive.len() % BLOCK, 0);
        extract(&mut fs, "/copy", &archive).unwrap();
        assert_eq!(fs.files["/copy/data/a.bin"], big);
        assert_eq!(fs.files["/copy/data/sub/b.txt"], b"hello\n");
        assert!(fs.dirs.contains("/copy/data/sub"));
        assert!(create(&fs, "/", &["/missing"]).unwrap_err().contains("No such file"));
        assert!(extract(&mut fs, "/", &archive[..2 * BLOCK + 10]).is_err());
    }
}
