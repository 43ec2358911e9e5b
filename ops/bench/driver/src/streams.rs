//! `--streams`: streaming subresources through kubefold against the member
//! directly, side by side in one run. One simulated member (the demo
//! workload, whose pod `web-0` runs and declares port 80) and one kubefold
//! over it; then, against the member and against kubefold in turn:
//!
//! - `STREAMS` concurrent execs of `cat` over WebSocket
//!   (`v5.channel.k8s.io`, what kubectl 1.30+ speaks), each sending its
//!   bytes on stdin and reading them back on stdout, then closing stdin
//!   and reading the exit status (`Success`);
//! - `STREAMS` concurrent port-forward streams over WebSocket
//!   (`v4.channel.k8s.io`), each an HTTP POST of its bytes to the pod's
//!   port 80, answered by the pod with its name.
//!
//! Every stream must end as expected (a stream that fails is a failed
//! phase). The figures are the bytes each round moved per second (exec:
//! both directions; port-forward: the uploads), kubefold's against the
//! member's, and their ratio.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::phases::spawn_kubefold;
use crate::report::{Figure, Report};
use crate::Ctx;

/// Concurrent streams of each kind.
pub const STREAMS: usize = 100;

/// Bytes each stream carries: 10 MB (the full run), 1 MB (`--quick`).
pub fn bytes_per_stream(quick: bool) -> usize {
    if quick {
        1_000_000
    } else {
        10_000_000
    }
}

/// Payload bytes per WebSocket message sent.
const CHUNK: usize = 32 * 1024;

/// A minimal WebSocket client connection (RFC 6455): binary messages, as
/// kubectl's streams use.
struct Ws {
    read: tokio::io::ReadHalf<TcpStream>,
    write: tokio::io::WriteHalf<TcpStream>,
}

/// Opens a WebSocket to `path` on `addr` with `protocol`.
async fn connect(addr: SocketAddr, path: &str, protocol: &str) -> Result<Ws> {
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            bail!("{path}: connection closed during the handshake");
        }
        head.push(byte[0]);
        if head.len() > 64 * 1024 {
            bail!("{path}: handshake answer too long");
        }
    }
    if !head.starts_with(b"HTTP/1.1 101") {
        bail!("{path}: {}", String::from_utf8_lossy(&head).lines().next().unwrap_or_default());
    }
    let (read, write) = tokio::io::split(stream);
    Ok(Ws { read, write })
}

impl Ws {
    /// Sends one binary message (masked with a zero key, which leaves the
    /// payload as it is).
    async fn send(write: &mut tokio::io::WriteHalf<TcpStream>, channel: u8, payload: &[u8]) -> Result<()> {
        let n = payload.len() + 1;
        let mut frame = Vec::with_capacity(n + 14);
        frame.push(0x82);
        match n {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.push(channel);
        frame.extend_from_slice(payload);
        write.write_all(&frame).await?;
        Ok(())
    }

    /// The next message: (opcode, payload); `None` at the end of the connection.
    async fn recv(read: &mut tokio::io::ReadHalf<TcpStream>) -> Result<Option<(u8, Vec<u8>)>> {
        let mut head = [0u8; 2];
        if read.read_exact(&mut head).await.is_err() {
            return Ok(None);
        }
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                read.read_exact(&mut b).await?;
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                read.read_exact(&mut b).await?;
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        read.read_exact(&mut payload).await?;
        Ok(Some((head[0] & 0x0f, payload)))
    }
}

/// One exec of `cat`: `size` bytes in, the same bytes out, exit status Success.
async fn exec_cat(addr: SocketAddr, pod: &str, size: usize) -> Result<()> {
    let path = format!("/api/v1/namespaces/default/pods/{pod}/exec?command=cat&stdin=true&stdout=true&stderr=true");
    let Ws { mut read, mut write } = connect(addr, &path, "v5.channel.k8s.io").await?;
    let writer = tokio::spawn(async move {
        let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        while sent < size {
            let n = CHUNK.min(size - sent);
            Ws::send(&mut write, 0, &chunk[..n]).await?;
            sent += n;
        }
        // v5's close signal: stdin (channel 0) is done.
        Ws::send(&mut write, 255, &[0]).await?;
        Ok::<_, anyhow::Error>(write)
    });
    let mut received = 0usize;
    let mut status = None;
    while let Some((opcode, payload)) = Ws::recv(&mut read).await? {
        match (opcode, payload.first()) {
            (2, Some(1)) => received += payload.len() - 1,
            (2, Some(3)) => status = Some(String::from_utf8_lossy(&payload[1..]).into_owned()),
            (8, _) => break,
            _ => {}
        }
    }
    let _write = writer.await.map_err(|e| anyhow!("stdin writer: {e}"))??;
    let status = status.ok_or_else(|| anyhow!("exec ended without a status ({received} of {size} bytes back)"))?;
    if !status.contains("\"Success\"") || received != size {
        bail!("exec: {received} of {size} bytes back, status {status}");
    }
    Ok(())
}

/// One port-forward stream: an HTTP POST of `size` bytes to port 80, answered with the pod's name.
async fn forward_post(addr: SocketAddr, pod: &str, member_pod: &str, size: usize) -> Result<()> {
    let path = format!("/api/v1/namespaces/default/pods/{pod}/portforward?ports=80");
    let Ws { mut read, mut write } = connect(addr, &path, "v4.channel.k8s.io").await?;
    // Each channel's first message carries its port.
    for _ in 0..2 {
        Ws::recv(&mut read).await?.ok_or_else(|| anyhow!("port-forward closed before its ports"))?;
    }
    let writer = tokio::spawn(async move {
        let head = format!("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {size}\r\n\r\n");
        Ws::send(&mut write, 0, head.as_bytes()).await?;
        let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        while sent < size {
            let n = CHUNK.min(size - sent);
            Ws::send(&mut write, 0, &chunk[..n]).await?;
            sent += n;
        }
        Ok::<_, anyhow::Error>(write)
    });
    let mut answer = Vec::new();
    let expected = format!("\r\n\r\n{member_pod}\n");
    while !answer.ends_with(expected.as_bytes()) {
        match Ws::recv(&mut read).await? {
            Some((2, payload)) if payload.first() == Some(&0) => answer.extend_from_slice(&payload[1..]),
            Some((2, payload)) if payload.first() == Some(&1) => bail!("port-forward error: {}", String::from_utf8_lossy(&payload[1..])),
            Some((8, _)) | None => bail!("port-forward closed before the answer: {}", String::from_utf8_lossy(&answer)),
            Some(_) => {}
        }
    }
    let _write = writer.await.map_err(|e| anyhow!("upload writer: {e}"))??;
    if !answer.starts_with(b"HTTP/1.1 200 OK") {
        bail!("port-forward answer: {}", String::from_utf8_lossy(&answer));
    }
    Ok(())
}

/// Runs `STREAMS` streams of one kind at once against `addr`; the seconds
/// the whole round took.
async fn round(addr: SocketAddr, pod: &str, size: usize, exec: bool) -> Result<f64> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|_| {
            let pod = pod.to_string();
            tokio::spawn(async move {
                if exec {
                    exec_cat(addr, &pod, size).await
                } else {
                    forward_post(addr, &pod, "web-0", size).await
                }
            })
        })
        .collect();
    let mut failed = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{e:#}")),
            Err(e) => failed.push(e.to_string()),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if !failed.is_empty() {
        bail!("{} of {STREAMS} streams failed; first: {}", failed.len(), failed[0]);
    }
    Ok(seconds)
}

/// The streams phase (see the module docs).
pub async fn streams_phase(ctx: &Ctx, report: &mut Report) -> Result<()> {
    let size = bytes_per_stream(ctx.plan.quick);
    let mut sims = spawn_sims_demo(ctx)?;
    let member = sims[0].addr();
    let data_dir = ctx.scratch.join("streams-data");
    std::fs::create_dir_all(&data_dir)?;
    let mut kubefold = spawn_kubefold(ctx, "streams-kubefold", &data_dir, &[member])?;
    let addr = kubefold.wait_listening(Duration::from_secs(120))?;
    // Ready once the pod is known and running through kubefold.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = crate::http::get_once(addr, "/api/v1/namespaces/default/pods/web-0_member1", Duration::from_secs(5))
            .await
            .is_ok_and(|(code, body)| code == 200 && memchr::memmem::find(&body, b"\"phase\":\"Running\"").is_some());
        if running {
            break;
        }
        if Instant::now() > deadline || !kubefold.alive() {
            bail!("web-0_member1 not running through kubefold; see {}", kubefold.log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mb = (STREAMS * size) as f64 / 1e6;
    for (exec, name) in [(true, "exec cat"), (false, "port-forward POST")] {
        // Side by side: the member, kubefold, the member again; the member's
        // better round is the reference.
        let direct_a = round(member, "web-0", size, exec).await.with_context(|| format!("{name} against the member"))?;
        let through = round(addr, "web-0_member1", size, exec).await.with_context(|| format!("{name} through kubefold"))?;
        let direct_b = round(member, "web-0", size, exec).await.with_context(|| format!("{name} against the member"))?;
        let moved = if exec { 2.0 * mb } else { mb };
        let direct = direct_a.min(direct_b);
        report.add(
            Figure::new("streams", &format!("{STREAMS} concurrent {name}, {} MB each: throughput", size / 1_000_000), None, "MB/s", moved / through)
                .reference("the member directly", moved / direct)
                .note(format!(
                    "all {STREAMS} ended as expected; {through:.2} s through kubefold, {direct_a:.2} / {direct_b:.2} s direct (WebSocket, {})",
                    if exec { "v5.channel.k8s.io, bytes in and out counted" } else { "v4.channel.k8s.io, uploads counted" }
                )),
        );
    }
    kubefold.stop(Duration::from_secs(5));
    for sim in &mut sims {
        sim.stop(Duration::from_secs(5));
    }
    Ok(())
}

/// One member with the demo workload (its pods run and declare ports).
fn spawn_sims_demo(ctx: &Ctx) -> Result<Vec<crate::procs::Proc>> {
    let args: Vec<String> = ["sim", "--name", "member1", "--listen", "127.0.0.1:0", "--workload", "demo", "--churn-per-sec", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut sim = crate::procs::Proc::spawn("member1", &ctx.kubefold, &args, &ctx.logs.join("streams-member1.log"))?;
    sim.wait_listening(Duration::from_secs(60))?;
    Ok(vec![sim])
}

/// `--streams`: the streams phase alone; a failure is a failed phase.
pub async fn run(ctx: &Ctx, report: &mut Report) -> Result<()> {
    eprintln!("== phase streams");
    let started = Instant::now();
    if let Err(e) = streams_phase(ctx, report).await {
        report.failures += 1;
        report.note(format!("phase streams failed after {:.1} s: {e:#}", started.elapsed().as_secs_f64()));
    } else {
        eprintln!("== phase streams done in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}
