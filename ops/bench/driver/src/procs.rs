//! Child processes (simulators, kubefold): spawned with their logs in files,
//! told apart by the `listening on http://ADDR` line they print, measured
//! through /proc, and always stopped: on drop, and by the kernel
//! (`PR_SET_PDEATHSIG`) if the driver itself dies.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// A running child process.
pub struct Proc {
    /// What it is (`member3`, `kubefold`).
    pub name: String,
    child: Option<Child>,
    /// Its process id.
    pub pid: u32,
    /// When it was spawned.
    pub spawned: Instant,
    listening: mpsc::Receiver<String>,
    /// Its address, once [`Proc::wait_listening`] returned.
    pub addr: Option<SocketAddr>,
    /// Its log file (stdout and stderr).
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `bin args...`; stdout and stderr go to `log`. Must be called
    /// from the main thread: the death signal follows the spawning thread.
    pub fn spawn(name: &str, bin: &Path, args: &[String], log: &Path) -> Result<Proc> {
        let err = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut out = err.try_clone()?;
        let mut command = Command::new(bin);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            // Warnings, and when the aggregator wrote index snapshots and
            // compacted the log (a stall in a measure lines up with them).
            .env("RUST_LOG", "warn,kubefold_actors::aggregator=info,kubefold_store=info");
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().with_context(|| format!("cannot start {}", bin.display()))?;
        let spawned = Instant::now();
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(out, "{line}");
                if !sent {
                    if let Some(i) = line.find("listening on http://") {
                        let rest = &line[i + "listening on http://".len()..];
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = tx.send(addr);
                        sent = true;
                    }
                }
            }
        });
        let pid = child.id();
        Ok(Proc { name: name.to_string(), child: Some(child), pid, spawned, listening: rx, addr: None, log: log.to_path_buf() })
    }

    /// Waits for the `listening on` line; returns the address.
    pub fn wait_listening(&mut self, timeout: Duration) -> Result<SocketAddr> {
        let deadline = self.spawned + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.listening.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(addr) => {
                    let addr: SocketAddr = addr.parse().with_context(|| format!("{}: bad address {addr:?}", self.name))?;
                    self.addr = Some(addr);
                    return Ok(addr);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                        bail!("{} exited ({status}) before listening; see {}", self.name, self.log.display());
                    }
                    if Instant::now() >= deadline {
                        bail!("{} did not listen within {:?}; see {}", self.name, timeout, self.log.display());
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("{} closed its stdout before listening; see {}", self.name, self.log.display())
                }
            }
        }
    }

    /// Its address (after [`Proc::wait_listening`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("wait_listening first")
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL, and reap it.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Resident memory now and its high-water mark, in bytes.
    pub fn memory(&self) -> (u64, u64) {
        (status_kb(self.pid, "VmRSS:") * 1024, status_kb(self.pid, "VmHWM:") * 1024)
    }

    /// CPU seconds used so far (user + system).
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) of a process; `std::process::id()` for the driver.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return 0.0 };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based in proc(5)).
    let ticks: f64 = fields.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz.max(1.0)
}

/// The whole machine's CPU time so far, in seconds, from `/proc/stat`:
/// (idle, iowait, steal). Steal is time the hypervisor gave this VM's
/// runnable CPUs to others.
pub fn machine_cpu_seconds() -> (f64, f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return (0.0, 0.0, 0.0) };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return (0.0, 0.0, 0.0) };
    // user nice system idle iowait irq softirq steal ... (proc(5)), in USER_HZ ticks.
    let ticks: Vec<f64> = line.split_whitespace().skip(1).map(|v| v.parse().unwrap_or(0.0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0) / hz.max(1.0);
    (at(3), at(4), at(7))
}

/// Bytes of the files under `dir`: (apparent size, allocated blocks).
pub fn dir_bytes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut apparent = 0;
    let mut allocated = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                apparent += meta.len();
                allocated += meta.blocks() * 512;
            }
        }
    }
    (apparent, allocated)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
pub fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// A process's resident memory (bytes), minor and major page faults so far
/// and CPU seconds, from `/proc/<pid>/stat` (proc(5)).
pub fn sample(pid: u32) -> (u64, u64, u64, f64) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return (0, 0, 0, 0.0) };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else { return (0, 0, 0, 0.0) };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command, counted from state (field 3): minflt 10, majflt 12, rss 24 (pages).
    let at = |field: usize| fields.get(field - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    (at(24) * page, at(10), at(12), cpu_seconds(pid))
}

/// The kernel's pressure stall totals (PSI, microseconds since boot):
/// memory some, memory full, io full, cpu some; zeros where the kernel has
/// none. <https://docs.kernel.org/accounting/psi.html>
pub fn pressure() -> [u64; 4] {
    let total = |resource: &str, kind: &str| {
        std::fs::read_to_string(format!("/proc/pressure/{resource}"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(kind))
                    .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total=")))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    };
    [total("memory", "some"), total("memory", "full"), total("io", "full"), total("cpu", "some")]
}
