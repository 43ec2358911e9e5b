//! The built-in commands of the simulator's `pods/exec` ([`super::exec`]):
//! `echo`, `cat`, `env`, `hostname`, `ls`, `sleep`, `true`, `false`,
//! `stty size`, `exit N`, `sh -c` of these (`;`, `&&`, `||`), an
//! interactive `sh` for `kubectl exec -it`, and `tar` enough for
//! `kubectl cp` both ways (kubectl runs `tar cf - PATH` to copy from a pod
//! and `tar xmf - -C DIR` to copy into one; Kubernetes docs "kubectl cp").
//!
//! Each container has an in-memory filesystem, kept per pod uid and
//! container for the life of the simulator process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

/// A container's files and directories (absolute, normalised paths).
#[derive(Debug, Default)]
pub struct Filesystem {
    /// Regular files and their content.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Directories (`/` is always one).
    pub dirs: BTreeSet<String>,
}

impl Filesystem {
    fn new(pod: &str) -> Filesystem {
        let mut fs = Filesystem::default();
        for dir in ["/", "/etc", "/tmp", "/var", "/var/log"] {
            fs.dirs.insert(dir.to_string());
        }
        fs.files.insert("/etc/hostname".into(), format!("{pod}\n").into_bytes());
        fs.files.insert("/etc/os-release".into(), b"NAME=\"kubefold simulator\"\n".to_vec());
        fs
    }

    pub(crate) fn mkdirs(&mut self, path: &str) {
        let mut current = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            current.push('/');
            current.push_str(part);
            self.dirs.insert(current.clone());
        }
    }

    pub(crate) fn write(&mut self, path: &str, data: Vec<u8>) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.mkdirs(parent);
        }
        self.files.insert(path.to_string(), data);
    }
}

/// The filesystem of container `container` of the pod with `uid`.
pub fn filesystem(uid: &str, pod: &str, container: &str) -> Arc<Mutex<Filesystem>> {
    static ALL: OnceLock<Mutex<HashMap<(String, String), Arc<Mutex<Filesystem>>>>> = OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    all.entry((uid.to_string(), container.to_string())).or_insert_with(|| Arc::new(Mutex::new(Filesystem::new(pod)))).clone()
}

/// What a running command reads and writes.
pub struct Io {
    /// Standard input; `None` once the client closed it.
    pub stdin: mpsc::UnboundedReceiver<Bytes>,
    /// Output: (channel, bytes), channel 1 stdout, 2 stderr.
    pub out: mpsc::UnboundedSender<(u8, Bytes)>,
    /// The pod's name (`hostname`).
    pub pod: String,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// The container's filesystem.
    pub fs: Arc<Mutex<Filesystem>>,
    /// The terminal size (rows, columns) when a TTY was asked for.
    pub tty: Option<Arc<Mutex<(u16, u16)>>>,
}

impl Io {
    fn stdout(&self, data: impl Into<Bytes>) {
        let _ = self.out.send((1, data.into()));
    }

    fn stderr(&self, data: impl Into<Bytes>) {
        // With a TTY, stderr goes to the terminal as stdout does.
        let channel = if self.tty.is_some() { 1 } else { 2 };
        let _ = self.out.send((channel, data.into()));
    }

    async fn read_all(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(chunk) = self.stdin.recv().await {
            all.extend_from_slice(&chunk);
        }
        all
    }
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and exited with this code.
    Exit(i32),
    /// It could not be started (the runtime's message).
    NotFound(String),
}

/// Splits a shell line into words (single and double quotes, backslash).
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut has = false;
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => word.extend(chars.next()),
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (None, '\\') => {
                word.extend(chars.next());
                has = true;
            }
            (None, c) if c.is_whitespace() => {
                if has || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                has = false;
            }
            (None, c) => word.push(c),
        }
    }
    if has || !word.is_empty() {
        out.push(word);
    }
    out
}

/// Runs a `sh -c` script: commands separated by `;`, `&&` and `||`.
async fn script(io: &mut Io, text: &str) -> i32 {
    let mut code = 0;
    let mut rest = text;
    let mut run_next = true;
    while !rest.trim().is_empty() {
        let (part, op, tail) = next_command(rest);
        if run_next {
            let argv = words(part);
            if !argv.is_empty() {
                code = match Box::pin(run(io, &argv, true)).await {
                    Outcome::Exit(c) => c,
                    Outcome::NotFound(_) => 127,
                };
                if argv[0] == "exit" {
                    return code;
                }
            }
        }
        run_next = match op {
            "&&" => if run_next { code == 0 } else { false },
            "||" => if run_next { code != 0 } else { true },
            _ => true,
        };
        rest = tail;
    }
    code
}

/// The first command of a script, its separator and the rest.
fn next_command(text: &str) -> (&str, &str, &str) {
    let bytes = text.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b';') | (None, b'\n') => return (&text[..i], ";", &text[i + 1..]),
            (None, b'&') if bytes.get(i + 1) == Some(&b'&') => return (&text[..i], "&&", &text[i + 2..]),
            (None, b'|') if bytes.get(i + 1) == Some(&b'|') => return (&text[..i], "||", &text[i + 2..]),
            _ => {}
        }
        i += 1;
    }
    (text, ";", "")
}

fn absolute(dir: &str, path: &str) -> String {
    let joined = if path.starts_with('/') { path.to_string() } else { format!("{dir}/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Runs one command; `in_shell`: inside `sh`, where an unknown command is
/// the shell's "not found" (exit 127) rather than the runtime's error.
pub async fn run(io: &mut Io, argv: &[String], in_shell: bool) -> Outcome {
    let args: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    let code = match argv[0].as_str() {
        "echo" => {
            let (newline, args) = match args.first() {
                Some(&"-n") => (false, &args[1..]),
                _ => (true, &args[..]),
            };
            let mut text = args.join(" ");
            if newline {
                text.push('\n');
            }
            io.stdout(text);
            0
        }
        "true" => 0,
        "false" => 1,
        "hostname" => {
            io.stdout(format!("{}\n", io.pod));
            0
        }
        "env" | "printenv" => {
            let text: String = io.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            io.stdout(text);
            0
        }
        "exit" => args.first().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0),
        "sleep" => {
            let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(0.0);
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 86_400.0))).await;
            0
        }
        "stty" if args == ["size"] => match &io.tty {
            Some(size) => {
                let (rows, cols) = *size.lock().unwrap_or_else(|p| p.into_inner());
                io.stdout(format!("{rows} {cols}\r\n"));
                0
            }
            None => {
                io.stderr("stty: standard input: Not a tty\n");
                1
            }
        },
        "cat" => cat(io, &args).await,
        "ls" => ls(io, &args),
        "tar" => super::tar::command(io, &args).await,
        "sh" | "bash" => match args.as_slice() {
            ["-c", text, ..] => script(io, text).await,
            [] => interactive(io).await,
            _ => {
                io.stderr("sh: only -c and an interactive shell are supported\n");
                2
            }
        },
        other if in_shell => {
            io.stderr(format!("sh: {other}: not found\n"));
            127
        }
        other => {
            return Outcome::NotFound(format!(
                "failed to exec in container: exec: \"{other}\": executable file not found in $PATH"
            ))
        }
    };
    Outcome::Exit(code)
}

async fn cat(io: &mut Io, args: &[&str]) -> i32 {
    if args.is_empty() || args == ["-"] {
        while let Some(chunk) = io.stdin.recv().await {
            io.stdout(chunk);
        }
        return 0;
    }
    let mut code = 0;
    for path in args {
        let path = absolute("/", path);
        let data = io.fs.lock().unwrap_or_else(|p| p.into_inner()).files.get(&path).cloned();
        match data {
            Some(data) => io.stdout(data),
            None => {
                io.stderr(format!("cat: can't open '{path}': No such file or directory\n"));
                code = 1;
            }
        }
    }
    code
}

fn ls(io: &mut Io, args: &[&str]) -> i32 {
    let paths: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with('-')).collect();
    let paths = if paths.is_empty() { vec!["/"] } else { paths };
    let fs = io.fs.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    let mut code = 0;
    for path in paths {
        let path = absolute("/", path);
        if fs.files.contains_key(&path) {
            out.push_str(&path);
            out.push('\n');
        } else if fs.dirs.contains(&path) {
            let prefix = if path == "/" { "/".to_string() } else { format!("{path}/") };
            let children: BTreeSet<&str> = fs
                .files
                .keys()
                .chain(fs.dirs.iter())
                .filter_map(|p| p.strip_prefix(&prefix))
                .filter(|rest| !rest.is_empty() && !rest.contains('/'))
                .collect();
            for child in children {
                out.push_str(child);
                out.push('\n');
            }
        } else {
            out.push_str(&format!("ls: {path}: No such file or directory\n"));
            code = 1;
        }
    }
    drop(fs);
    if code == 0 {
        io.stdout(out);
    } else {
        io.stderr(out);
    }
    code
}

/// `sh` without arguments: reads lines from stdin and runs them; with a
/// TTY it echoes what is typed and prints a prompt, as a terminal does.
async fn interactive(io: &mut Io) -> i32 {
    let tty = io.tty.is_some();
    let mut line = Vec::new();
    let mut code = 0;
    if tty {
        io.stdout("# ");
    }
    while let Some(chunk) = io.stdin.recv().await {
        for &b in chunk.iter() {
            match b {
                b'\r' | b'\n' => {
                    if tty {
                        io.stdout("\r\n");
                    }
                    let text = String::from_utf8_lossy(&std::mem::take(&mut line)).into_owned();
                    let argv = words(&text);
                    if argv.first().map(String::as_str) == Some("exit") {
                        return argv.get(1).and_then(|c| c.parse().ok()).unwrap_or(code);
                    }
                    code = Box::pin(script(io, &text)).await;
                    if tty {
                        io.stdout("# ");
                    }
                }
                4 if tty && line.is_empty() => return code,
                _ => {
                    if tty {
                        io.stdout(Bytes::copy_from_slice(&[b]));
                    }
                    line.push(b);
                }
            }
        }
    }
    code
}

/// Reads all of stdin (for `tar x`).
pub(crate) async fn stdin_all(io: &mut Io) -> Vec<u8> {
    io.read_all().await
}

/// Writes to stdout and stderr (for `tar`).
pub(crate) fn emit(io: &Io, channel: u8, data: Vec<u8>) {
    match channel {
        1 => io.stdout(data),
        _ => io.stderr(data),
    }
}

/// An absolute path of `path` relative to `dir`.
pub(crate) fn resolve(dir: &str, path: &str) -> String {
    absolute(dir, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_shell_quoting() {
        assert_eq!(words("echo 'a b' \"c d\" e\\ f"), vec!["echo", "a b", "c d", "e f"]);
        assert_eq!(words("echo ''"), vec!["echo", ""]);
        assert_eq!(next_command("echo a && exit 3; b"), ("echo a ", "&&", " exit 3; b"));
    }

    #[test]
    fn paths_are_normalised() {
        assert_eq!(absolute("/tmp", "../etc/./hostname"), "/etc/hostname");
        assert_eq!(absolute("/", "tmp/"), "/tmp");
    }
}
