//! Streaming subresources with kubectl 1.33 (WebSocket, `v5.channel.k8s.io`)
//! and port-forward over `v4.channel.k8s.io` with a small WebSocket client:
//! `exec` (plain, `-i` with stdin, exit codes), `cp` both ways and `attach`,
//! through kubefold (qualified names, and member names under
//! `/clusters/{c}`) and against the simulator directly.

mod common;

use std::process::{Command, Stdio};

use common::*;

/// The kubectl 1.33 binary beside the dispatcher, or `None` (the test is
/// then skipped with a message naming it).
fn kubectl_133() -> Option<String> {
    let dispatcher = Command::new("which").arg("kubectl").output().ok()?;
    let dispatcher = std::fs::canonicalize(String::from_utf8_lossy(&dispatcher.stdout).trim()).ok()?;
    let path = dispatcher.with_file_name("kubectl.1.33");
    if path.exists() {
        Some(path.to_string_lossy().into_owned())
    } else {
        eprintln!("skipped: {} is not installed", path.display());
        None
    }
}

/// kubectl against `server` with a 60 s bound; (exit code, stdout, stderr).
fn run(bin: &str, server: &str, args: &[&str], stdin: Option<&[u8]>) -> (i32, Vec<u8>, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(bin).arg("--server").arg(server);
    if std::env::var("STREAM_DEBUG").is_ok() {
        cmd.arg("-v=7");
    }
    cmd.args(args);
    cmd.env("KUBECONFIG", "/dev/null").env("HOME", std::env::temp_dir());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    // Written from a thread: kubectl may stop reading (a failure must show
    // its message, not a broken pipe).
    let writer = stdin.map(|input| {
        let input = input.to_vec();
        let mut pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = pipe.write_all(&input);
        })
    });
    let out = child.wait_with_output().unwrap();
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    (out.status.code().unwrap_or(-1), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The same checks against one server, naming the pod `pod`.
fn exec_cp_attach(bin: &str, server: &str, pod: &str, scratch: &std::path::Path) {
    let exec = |args: &[&str], stdin: Option<&[u8]>| {
        let mut all = vec!["exec", "-n", "default"];
        if stdin.is_some() {
            all.push("-i");
        }
        all.push(pod);
        all.push("--");
        all.extend_from_slice(args);
        run(bin, server, &all, stdin)
    };
    // Plain exec: the pod's own name, as the member calls it.
    let (code, out, err) = exec(&["hostname"], None);
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (0, "web-0\n"), "{server} hostname: {err}");
    let (code, out, err) = exec(&["sh", "-c", "echo one && echo two; ls /etc"], None);
    assert_eq!(code, 0, "{server}: {err}");
    assert_eq!(String::from_utf8_lossy(&out), "one\ntwo\nhostname\nos-release\n", "{server}");
    // -i: stdin reaches the command and its end ends it (v5's close signal).
    let input: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let (code, out, err) = exec(&["cat"], Some(&input));
    assert_eq!(code, 0, "{server} cat: {err}");
    assert!(out == input, "{server}: cat returned {} bytes of {}", out.len(), input.len());
    // Exit codes come back as kubectl's own.
    let (code, _, err) = exec(&["sh", "-c", "echo failing >&2; exit 3"], None);
    assert_eq!(code, 3, "{server}: {err}");
    assert!(err.contains("command terminated with exit code 3"), "{server}: {err}");
    let (code, _, err) = exec(&["no-such-command"], None);
    assert_ne!(code, 0, "{server}: {err}");
    assert!(err.contains("executable file not found"), "{server}: {err}");

    // cp both ways, byte for byte.
    let local = scratch.join("payload.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = format!("default/{pod}:/tmp/payload.bin");
    let (code, _, err) = run(bin, server, &["cp", local.to_str().unwrap(), &remote], None);
    assert_eq!(code, 0, "{server} cp to the pod: {err}");
    let back = scratch.join("back.bin");
    let (code, _, err) = run(bin, server, &["cp", &remote, back.to_str().unwrap()], None);
    assert_eq!(code, 0, "{server} cp from the pod: {err}");
    assert!(std::fs::read(&back).unwrap() == data, "{server}: the copy differs");
    let (code, out, _) = exec(&["ls", "/tmp"], None);
    assert_eq!((code, String::from_utf8_lossy(&out).as_ref()), (0, "payload.bin\n"), "{server}");

    // attach: the container's output as it comes, until kubectl is stopped.
    let out = Command::new("timeout")
        .args(["4", bin, "--server", server, "attach", "-n", "default", pod])
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{server} attach ended early: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.is_empty(), "{server} attach printed nothing: {}", String::from_utf8_lossy(&out.stderr));
}

/// One member and kubefold over it, once the member's `web-0` runs (exec
/// needs a running container, as kubelet does).
struct OnePod {
    kf: Kubefold,
    /// The member's own URL.
    direct: String,
    _members: Vec<(String, kubefold_testdata::SimHandle)>,
    _dir: tempfile::TempDir,
}

impl OnePod {
    fn start() -> OnePod {
        let members = demo_members(1, 0.0);
        let (dir, data) = data_dir();
        let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
        kf.wait_ready();
        let direct = members[0].1.url();
        wait_for(std::time::Duration::from_secs(30), "web-0 running", || {
            let (_, body) = http_get(&format!("{direct}/api/v1/namespaces/default/pods/web-0"));
            body.contains("\"phase\":\"Running\"")
        });
        OnePod { kf, direct, _members: members, _dir: dir }
    }

    /// Waits until kubefold counts no open stream.
    fn no_stream_left_open(&self) {
        wait_for(std::time::Duration::from_secs(10), "no stream left open", || {
            let (_, metrics) = http_get(&format!("{}/metrics", self.kf.url));
            metrics.lines().filter(|l| l.starts_with("kubefold_streams{")).all(|l| l.ends_with(" 0"))
        });
    }
}

#[test]
fn exec_cp_and_attach_with_kubectl_through_kubefold_and_directly() {
    let Some(bin) = kubectl_133() else { return };
    let setup = OnePod::start();
    let (kf, direct) = (&setup.kf, &setup.direct);
    let scratch = tempfile::tempdir().unwrap();
    exec_cp_attach(&bin, direct, "web-0", scratch.path());
    exec_cp_attach(&bin, &kf.url, "web-0_member1", scratch.path());
    exec_cp_attach(&bin, &format!("{}/clusters/member1", kf.url), "web-0", scratch.path());
    // The streams were counted, with their bytes, and none is left open.
    let (_, metrics) = http_get(&format!("{}/metrics", kf.url));
    let value = |series: &str| -> f64 {
        metrics.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    };
    assert!(value("kubefold_stream_bytes_total{direction=\"to_member\"}") > 400_000.0, "{metrics}");
    assert!(value("kubefold_stream_bytes_total{direction=\"from_member\"}") > 400_000.0, "{metrics}");
    setup.no_stream_left_open();
    // A pod the member does not have: the member's own 404.
    let (code, _, err) = run(&bin, &kf.url, &["exec", "-n", "default", "nothere_member1", "--", "hostname"], None);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");
}

/// A minimal WebSocket client (RFC 6455) for port-forward's
/// `v4.channel.k8s.io` protocol, which client libraries speak (kubectl
/// tunnels SPDY in WebSocket instead).
struct Ws(std::net::TcpStream);

impl Ws {
    fn connect(base: &str, path: &str, protocol: &str) -> Ws {
        use std::io::{Read, Write};
        let host = base.trim_start_matches("http://").split('/').next().unwrap().to_string();
        let prefix = base.trim_start_matches("http://").strip_prefix(&host).unwrap_or("");
        let mut stream = std::net::TcpStream::connect(&host).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        write!(
            stream,
            "GET {prefix}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{base}{path}: {head}");
        assert!(head.to_ascii_lowercase().contains(&format!("sec-websocket-protocol: {protocol}")), "{head}");
        Ws(stream)
    }

    fn send(&mut self, payload: &[u8]) {
        use std::io::Write;
        let mut frame = vec![0x82u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        // A zero masking key leaves the payload as it is.
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.extend_from_slice(payload);
        self.0.write_all(&frame).unwrap();
    }

    fn recv(&mut self) -> Vec<u8> {
        use std::io::Read;
        let mut head = [0u8; 2];
        self.0.read_exact(&mut head).unwrap();
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.0.read_exact(&mut b).unwrap();
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                self.0.read_exact(&mut b).unwrap();
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        self.0.read_exact(&mut payload).unwrap();
        assert_eq!(head[0] & 0x0f, 2, "a binary frame");
        payload
    }
}

#[test]
fn port_forward_over_websocket_through_kubefold_and_directly() {
    let setup = OnePod::start();
    let (kf, direct) = (&setup.kf, &setup.direct);
    let (_, pod) = http_get(&format!("{direct}/api/v1/namespaces/default/pods/web-0"));
    let pod: serde_json::Value = serde_json::from_str(&pod).unwrap();
    let port = pod["spec"]["containers"][0]["ports"][0]["containerPort"].as_u64().expect("web-0 declares a port") as u16;
    for (base, name) in [(direct.as_str(), "web-0"), (kf.url.as_str(), "web-0_member1")] {
        let path = format!("/api/v1/namespaces/default/pods/{name}/portforward?ports={port}&ports=1");
        let mut ws = Ws::connect(base, &path, "v4.channel.k8s.io");
        // Each channel's first frame carries its port, little-endian.
        let mut firsts: Vec<Vec<u8>> = (0..4).map(|_| ws.recv()).collect();
        firsts.sort();
        let p = port.to_le_bytes();
        assert_eq!(firsts, vec![vec![0, p[0], p[1]], vec![1, p[0], p[1]], vec![2, 1, 0], vec![3, 1, 0]], "{base}");
        let mut request = vec![0u8];
        request.extend_from_slice(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
        ws.send(&request);
        let answer = ws.recv();
        let text = String::from_utf8_lossy(&answer[1..]).into_owned();
        assert_eq!(answer[0], 0, "{base}: {text}");
        assert!(text.starts_with("HTTP/1.1 200 OK") && text.ends_with("\r\n\r\nweb-0\n"), "{base}: {text}");
        // Nothing listens on port 1: its error channel says so.
        ws.send(b"\x02GET / HTTP/1.1\r\n\r\n");
        let error = ws.recv();
        assert_eq!(error[0], 3, "{base}");
        assert!(String::from_utf8_lossy(&error[1..]).contains("connection refused"), "{base}");
    }
}

/// kubectl 1.27 speaks SPDY/3.1 upgrades of HTTP for exec, attach, cp and
/// port-forward (1.30 still for port-forward): the same checks, through
/// kubefold (qualified names, and member names under `/clusters/{c}`) and
/// against the simulator directly.
#[test]
fn exec_cp_attach_and_port_forward_over_spdy_with_kubectl_127() {
    require_kubectl!("1.27", "1.30");
    let setup = OnePod::start();
    let (kf, direct) = (&setup.kf, &setup.direct);
    let scratch = tempfile::tempdir().unwrap();
    let servers = [(direct.clone(), "web-0"), (kf.url.clone(), "web-0_member1"), (format!("{}/clusters/member1", kf.url), "web-0")];
    for (server, pod) in &servers {
        exec_cp_attach(&kubectl_version("1.27"), server, pod, scratch.path());
        for minor in ["1.27", "1.30"] {
            let forward = PortForward::start(&kubectl_version(minor), server, &["-n", "default", &format!("pod/{pod}"), "0:80"]);
            for path in ["/", "/again"] {
                let (code, body) = forward.get(path);
                assert_eq!((code, body.as_str()), (200, "web-0\n"), "{minor} {server} {pod} {path}: {}", forward.stderr.lock().unwrap());
            }
        }
    }
    // The SPDY streams were counted as the WebSocket ones, and none is left open.
    let (_, metrics) = http_get(&format!("{}/metrics", kf.url));
    let bytes = metrics.lines().find(|l| l.starts_with("kubefold_stream_bytes_total{direction=\"to_member\"}")).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(bytes.is_some_and(|b| b > 400_000.0), "{metrics}");
    setup.no_stream_left_open();
}
