//! `kubectl exec -it` and `kubectl debug -it` through kubefold with a real
//! terminal: kubectl 1.33
//! runs under a pseudo-terminal (python3's `pty` module drives it), sends
//! the terminal's size on the resize channel (4) at the start and again
//! when the window changes, and the shell in the pod sees both sizes
//! (`stty size`); the exit code comes back as kubectl's own.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

/// Runs the command after `--` under a pseudo-terminal of 33 rows and 101
/// columns; types `stty size` until that size shows, resizes to 40x120 (and signals kubectl, as a
/// terminal does), types `stty size` until the new size shows, then
/// `exit $EXIT_CODE` (5 by default). Prints a JSON report: what each step
/// saw and the exit code.
const DRIVER: &str = r##"
import fcntl, json, os, pty, select, signal, struct, subprocess, sys, termios, time

def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

master, slave = pty.openpty()
set_size(slave, 33, 101)
child = subprocess.Popen(sys.argv[1:], stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
os.close(slave)
seen = b""

def read_until(text, limit):
    global seen
    deadline = time.time() + limit
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return False
            if not chunk:
                return False
            seen += chunk
            if text in seen:
                return True
    return text in seen

def prompt():
    """The shell's prompt. kubectl may miss the first one (its websocket
    client drops output that comes before it has set up its streams:
    "Unknown stream id 1, discarding message"), and says so itself: "If
    you don't see a command prompt, try pressing enter". After 3 s without
    it, enter is pressed as a user would, once a second for 15 s."""
    if read_until(b"# ", 3):
        return True
    for _ in range(15):
        os.write(master, b"\r")
        if read_until(b"# ", 1):
            return True
    return False

report = {}
report["prompt"] = prompt()
def size_shows(size):
    """Types `stty size` until the shell prints `size` (at most 10 s)."""
    for _ in range(20):
        os.write(master, b"stty size\r")
        if read_until(size, 0.5):
            return True
    return False

# kubectl sends the first size from its own goroutine, racing with the
# first typed line; ask until it has arrived (no resize has happened yet).
report["first_size"] = size_shows(b"33 101")
set_size(master, 40, 120)
os.kill(child.pid, signal.SIGWINCH)
report["second_size"] = size_shows(b"40 120")
os.write(master, b"echo typed through\r")
report["echo"] = read_until(b"typed through\r\n", 10)
os.write(master, ("exit %s\r" % os.environ.get("EXIT_CODE", "5")).encode())
try:
    report["code"] = child.wait(timeout=20)
except subprocess.TimeoutExpired:
    child.kill()
    report["code"] = None
read_until(b"\x00", 0.3)
report["transcript"] = seen.decode("utf-8", "replace")
print(json.dumps(report))
"##;

#[test]
fn exec_and_debug_with_a_terminal_pass_its_size_and_resizes() {
    if let Some(missing) = kubectl_missing(&["1.33"]) {
        println!("SKIPPED: {missing}");
        return;
    }
    if Command::new("python3").arg("--version").output().is_err() {
        println!("SKIPPED: python3 is not installed");
        return;
    }
    let members = demo_members(1, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    wait_for(std::time::Duration::from_secs(30), "web-0 and web-1 running", || {
        ["web-0", "web-1"].iter().all(|p| kf.get(&format!("/api/v1/namespaces/default/pods/{p}_member1")).1.contains("\"phase\":\"Running\""))
    });
    let run = |args: &[&str], exit_code: &str| -> Value {
        let output = Command::new("timeout")
            .args(["90", "python3", "-c", DRIVER])
            .arg(kubectl_version("1.33"))
            .args(["--server", &kf.url])
            .args(args)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", std::env::temp_dir())
            .env("EXIT_CODE", exit_code)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("driver: {e}: {stdout}{}", String::from_utf8_lossy(&output.stderr)))
    };
    let check = |what: &str, report: &Value, code: i64| {
        let transcript = report["transcript"].as_str().unwrap_or_default();
        assert_eq!(report["prompt"], true, "{what}: the shell's prompt: {transcript:?}");
        assert_eq!(report["first_size"], true, "{what}: the terminal's size at the start: {transcript:?}");
        assert_eq!(report["second_size"], true, "{what}: the size after a resize: {transcript:?}");
        assert_eq!(report["echo"], true, "{what}: typed input echoed and run: {transcript:?}");
        assert_eq!(report["code"], code, "{what}: kubectl's exit code: {transcript:?}");
    };
    let exec = run(&["exec", "-it", "-n", "default", "web-0_member1", "--", "sh"], "5");
    check("exec -it", &exec, 5);
    // kubectl debug -it: a new ephemeral container's shell, attached with the terminal.
    let debug = run(&["debug", "-it", "-n", "default", "web-1_member1", "--image=busybox", "--container=tty-debug", "--", "sh"], "0");
    check("debug -it", &debug, 0);
    kf.stop();
}
