//! `kubefold backup` and `kubefold restore` on a stopped kubefold's data
//! dir, printing their progress on stderr as they go: bytes done, the share
//! of the whole and the time left (redrawn in place on a terminal, a line
//! every few seconds otherwise).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::admin_cli::human_bytes;

/// How often progress is redrawn on a terminal...
const TERMINAL_INTERVAL: Duration = Duration::from_millis(250);
/// ... and written as a new line otherwise (a log file, the journal).
const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// Progress of one operation over about `total` bytes, written to `sink`
/// (stderr).
pub(crate) struct Progress {
    what: &'static str,
    total: u64,
    start: Instant,
    last: Option<Instant>,
    /// Redrawn in place (a terminal), or a line at a time.
    terminal: bool,
    interval: Duration,
    width: usize,
    done: u64,
    sink: Box<dyn Write>,
}

impl Progress {
    /// Progress of `what` (a verb: "backing up") over about `total` bytes,
    /// on stderr.
    pub(crate) fn new(what: &'static str, total: u64) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let interval = if terminal { TERMINAL_INTERVAL } else { LINE_INTERVAL };
        Progress::to(Box::new(std::io::stderr()), terminal, interval, what, total)
    }

    fn to(sink: Box<dyn Write>, terminal: bool, interval: Duration, what: &'static str, total: u64) -> Progress {
        Progress { what, total, start: Instant::now(), last: None, terminal, interval, width: 0, done: 0, sink }
    }

    /// Reports `done` bytes, unless the last report is too recent.
    pub(crate) fn update(&mut self, done: u64) {
        self.done = done;
        if self.last.unwrap_or(self.start).elapsed() < self.interval {
            return;
        }
        self.last = Some(Instant::now());
        let text = progress_text(self.what, done, self.total, self.start.elapsed());
        self.draw(&text, false);
    }

    /// Reports where the operation ended (`failed` or not) and ends the line.
    pub(crate) fn finish(&mut self, failed: bool) {
        let text = if failed {
            format!("{} failed after {}", self.what, human_bytes(self.done))
        } else {
            format!("{}: {} in {:.1}s", self.what, human_bytes(self.done), self.start.elapsed().as_secs_f64())
        };
        self.draw(&text, true);
    }

    fn draw(&mut self, text: &str, last: bool) {
        if self.terminal {
            let len = text.chars().count();
            let pad = self.width.saturating_sub(len);
            self.width = self.width.max(len);
            let _ = write!(self.sink, "\r{text}{:pad$}{}", "", if last { "\n" } else { "" });
        } else {
            let _ = writeln!(self.sink, "{text}");
        }
        let _ = self.sink.flush();
    }
}

/// `backing up: 12.0 MiB of 48.0 MiB (25%), 30s left`: `done` of about
/// `total` bytes after `elapsed`; the time left at the pace so far (once
/// there is a pace).
pub(crate) fn progress_text(what: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let share = if total == 0 { 1.0 } else { (done as f64 / total as f64).min(1.0) };
    let text = format!("{what}: {} of {} ({:.0}%)", human_bytes(done), human_bytes(total), share * 100.0);
    if share == 0.0 {
        return text;
    }
    let left = if share < 1.0 { elapsed.mul_f64((1.0 - share) / share) } else { Duration::ZERO };
    format!("{text}, {} left", human_duration(left))
}

/// `45s`, `3m 05s`, `2h 01m`.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

/// A writer that reports the bytes written through it.
struct Counted<'a, W> {
    inner: W,
    bytes: u64,
    progress: &'a mut Progress,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        self.progress.update(self.bytes);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that reports the bytes read through it.
struct CountedRead<'a, R> {
    inner: R,
    bytes: u64,
    progress: &'a mut Progress,
}

impl<R: Read> Read for CountedRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        self.progress.update(self.bytes);
        Ok(n)
    }
}

/// `kubefold backup`: a copy of the data dir in `out` (mode 0600).
pub(crate) fn backup(data_dir: &Path, out: &Path, include_credentials: bool) -> anyhow::Result<()> {
    let store = kubefold_store::Store::open(data_dir, &kubefold_store::Options::default())
        .map_err(|e| anyhow::anyhow!("{e} (is kubefold running on it? stop it first)"))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(out).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let mut progress = Progress::new("backing up", store.backup_bytes()?);
    let mut writer = Counted { inner: std::io::BufWriter::new(file), bytes: 0, progress: &mut progress };
    let records = kubefold_actors::cluster::backup(&store, &mut writer, include_credentials);
    let bytes = writer.bytes;
    progress.finish(records.is_err());
    let records = records?;
    let credentials = if include_credentials { "with" } else { "without" };
    println!(
        "backup of {} written to {}: {records} records ({}), head resourceVersion {}, min-resource-version {}, {credentials} member credentials",
        data_dir.display(),
        out.display(),
        human_bytes(bytes),
        store.head_rv()?,
        store.backup_min_rv_now()?
    );
    Ok(())
}

/// `kubefold restore`: a new data dir from the backup `input`, which
/// continues above the minimum resourceVersion of the backup's header and
/// `min_rv`.
pub(crate) fn restore(input: &Path, data_dir: &Path, min_rv: u64) -> anyhow::Result<()> {
    let file = std::fs::File::open(input).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", input.display()))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut progress = Progress::new("restoring", total);
    let mut reader = std::io::BufReader::new(CountedRead { inner: file, bytes: 0, progress: &mut progress });
    let restored = kubefold_store::Store::restore_above(data_dir, &mut reader, &kubefold_store::Options::default(), min_rv);
    drop(reader);
    progress.finish(restored.is_err());
    let (_store, head, above) = restored?;
    println!(
        "restored {} into {}: head resourceVersion {head}, continuing above resourceVersion {above} (watches from between them answer 410; the members are listed again)",
        input.display(),
        data_dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_bytes_share_and_time_left() {
        let mib = 1024 * 1024;
        assert_eq!(progress_text("backing up", 12 * mib, 48 * mib, Duration::from_secs(10)), "backing up: 12.0 MiB of 48.0 MiB (25%), 30s left");
        assert_eq!(progress_text("restoring", 0, 100, Duration::from_secs(1)), "restoring: 0 B of 100 B (0%)");
        // An estimate passed: 100 %, nothing left.
        assert_eq!(progress_text("backing up", 200, 100, Duration::from_secs(1)), "backing up: 200 B of 100 B (100%), 0s left");
        assert_eq!(progress_text("restoring", 1, 3601, Duration::from_secs(1)), "restoring: 1 B of 3.5 KiB (0%), 1h 00m left");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m 05s");
    }

    /// A shared buffer for a [`Progress`] to write to.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_backup_and_its_restore_report_their_progress() {
        let tmp = tempfile::tempdir().unwrap();
        let store = kubefold_store::Store::open(&tmp.path().join("a"), &kubefold_store::Options::default()).unwrap();
        store.put_meta("padding", &vec![7u8; 300_000]).unwrap();
        let total = store.backup_bytes().unwrap();
        let shared = Shared::default();
        let mut progress = Progress::to(Box::new(shared.clone()), false, Duration::ZERO, "backing up", total);
        let mut file = Vec::new();
        let mut writer = Counted { inner: std::io::BufWriter::with_capacity(4096, &mut file), bytes: 0, progress: &mut progress };
        store.backup(&mut writer).unwrap();
        drop(writer);
        progress.finish(false);
        let text = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 10, "{text}");
        assert!(lines.iter().any(|l| l.starts_with("backing up: ") && l.contains("%), ") && l.ends_with(" left")), "{text}");
        assert!(lines[lines.len() - 2].contains("(100%)"), "{text}");
        assert!(lines[lines.len() - 1].starts_with(&format!("backing up: {} in ", human_bytes(file.len() as u64))), "{text}");

        let shared = Shared::default();
        let mut progress = Progress::to(Box::new(shared.clone()), true, Duration::ZERO, "restoring", file.len() as u64);
        let mut reader = std::io::BufReader::with_capacity(4096, CountedRead { inner: &file[..], bytes: 0, progress: &mut progress });
        kubefold_store::Store::restore(&tmp.path().join("b"), &mut reader, &kubefold_store::Options::default()).unwrap();
        drop(reader);
        progress.finish(false);
        let text = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
        // On a terminal: one line redrawn in place, ended at the finish.
        assert!(text.starts_with("\rrestoring: ") && text.ends_with('\n') && text.matches('\n').count() == 1, "{text:?}");
        assert!(text.contains("(100%)"), "{text:?}");
    }
}
