//! Watch over HTTP: a streaming response of JSON lines, one event each,
//! from the watch [`crate::query::watch`] runs; the open watches by client;
//! the connection's socket, looked at so that a watch neither overfills
//! actix-http's write buffer nor outlives its client.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::HttpResponse;
use kubefold_engine::status::Status;
use serde_json::json;
use tokio::sync::mpsc;

use crate::query::watch::Message;
use crate::query::{Query, Scope};
use crate::watch_budget::Queued;
use crate::ApiState;

/// Open watches by client user agent.
static WATCH_CLIENTS: std::sync::Mutex<std::collections::BTreeMap<String, usize>> = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Number of open watches.
pub fn open_watches() -> usize {
    WATCH_CLIENTS.lock().map(|m| m.values().sum()).unwrap_or(0)
}

/// Open watches by the client's User-Agent (its first word).
pub fn watch_clients_by_user_agent() -> std::collections::BTreeMap<String, usize> {
    WATCH_CLIENTS.lock().map(|m| m.clone()).unwrap_or_default()
}

/// Counts a watch while it is open.
struct Registered(String);

impl Registered {
    fn new(user_agent: &str) -> Registered {
        let agent = user_agent.split_whitespace().next().unwrap_or("unknown").to_string();
        if let Ok(mut m) = WATCH_CLIENTS.lock() {
            *m.entry(agent.clone()).or_default() += 1;
        }
        metrics::gauge!("kubefold_watches").increment(1.0);
        Registered(agent)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut m) = WATCH_CLIENTS.lock() {
            if let Some(n) = m.get_mut(&self.0) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.0);
                }
            }
        }
        metrics::gauge!("kubefold_watches").decrement(1.0);
    }
}

/// Starts a watch ([`crate::query::watch`]) and returns its streaming response.
pub fn watch(
    state: Arc<ApiState>,
    scope: Scope,
    query: &Query,
    send_initial: Option<bool>,
    table: bool,
    user_agent: &str,
    client: Option<&str>,
    socket: Option<ConnectionSocket>,
) -> Result<HttpResponse, Status> {
    let config = &state.config;
    let settings = crate::query::watch::Settings {
        bookmark_interval: config.bookmark_interval,
        flush_interval: config.watch_flush_interval,
        min_timeout: config.min_watch_timeout,
        client_budget_bytes: config.auth.watch_buffer_bytes_per_client,
    };
    let opened = crate::query::watch::open(state.fleet.clone(), settings, scope, query, send_initial, table, client)?;
    let registered = Registered::new(user_agent);
    let running = opened.running;
    actix_web::rt::spawn(async move {
        let _registered = registered;
        running.run().await;
    });
    let body = line_stream(opened.messages, opened.queued, socket);
    Ok(HttpResponse::Ok().content_type("application/json").streaming(body))
}

/// The socket of an accepted connection (a second descriptor of it), kept
/// in the connection's data, which actix drops with the connection: a
/// watch looks whether it can take more before handing actix-http more
/// lines (see [`line_stream`]).
#[derive(Debug, Clone)]
pub struct ConnectionSocket(Arc<std::os::fd::OwnedFd>);

impl ConnectionSocket {
    /// A descriptor of `socket`'s (dup(2)), or `None` when the process has
    /// none left (its watches then go without the look).
    pub fn of(socket: &impl std::os::fd::AsFd) -> Option<ConnectionSocket> {
        socket.as_fd().try_clone_to_owned().ok().map(|fd| ConnectionSocket(Arc::new(fd)))
    }

    /// Whether the client is gone: it closed its side (a FIN, after a TLS
    /// close_notify or not: POLLRDHUP), or the connection failed or was
    /// reset (POLLHUP, POLLERR). An HTTP/1.1 client does not half-close a
    /// connection it still reads a watch from: kube-apiserver (Go's
    /// net/http) likewise ends a request whose connection reads EOF.
    fn peer_closed(&self) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&*self.0, PollFlags::RDHUP)];
        match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(0) => false,
            Ok(_) => fds[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
            Err(_) => false,
        }
    }

    /// Shuts the connection down both ways, so that actix-http, reading or
    /// writing it next, finds it closed and drops it (and its descriptors).
    fn shut_down(&self) {
        let _ = rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Both);
    }

    /// Whether the socket can take more bytes now (or has failed, which
    /// actix-http then finds out by writing).
    fn writable(&self) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&*self.0, PollFlags::OUT)];
        match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(0) => false,
            Ok(_) => fds[0].revents().intersects(PollFlags::OUT | PollFlags::ERR | PollFlags::HUP),
            Err(_) => true,
        }
    }
}

/// How often a watch body looks whether its client closed the connection,
/// whether or not it has events to send: a watch whose selector matches
/// nothing writes nothing, and would otherwise keep its connection (two
/// descriptors, a socket in CLOSE-WAIT) until its timeout.
const HANGUP_CHECK: Duration = Duration::from_millis(500);

/// The connection's socket, for other looks at it (a request body's
/// decoding watches whether its client went away, `decode`).
impl std::os::fd::AsFd for ConnectionSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Bytes of lines a watch hands actix-http between two looks at whether
/// its socket can take more ...
const SOCKET_CHECK_BYTES: usize = 64 << 10;
/// ... and how soon it looks again after finding the socket full, unless
/// actix-http polls it first (it does when the socket drains and it still
/// had bytes to write).
const SOCKET_RECHECK: Duration = Duration::from_millis(20);

/// The response body of a watch: the lines of each message from `rx`, a
/// lone line as it is, several joined into chunks of up to
/// [`SOCKET_CHECK_BYTES`] (a chunk per line cost kubefold and a client
/// reading a thousand watches 10 to 15 % of a core more each); `queued`
/// drops by each chunk's length as it is taken. actix-http copies each
/// chunk into its write buffer, and polls for the next until that is full.
///
/// actix-http's write buffer is sized for lists (1 MiB, see `serve`): a
/// watch that fed it whenever polled would fill it whenever its client
/// fell behind, a fresh MiB per connection, and a thousand watches
/// catching up after a stall spent more CPU on faulting in and copying
/// that memory than on sending. So after every [`SOCKET_CHECK_BYTES`] it
/// hands on lines only once `socket` can take more: what a client has not
/// read waits in the watch's queue, where each line is shared.
fn line_stream(
    mut rx: mpsc::Receiver<Message>,
    queued: Arc<Queued>,
    socket: Option<ConnectionSocket>,
) -> impl futures::Stream<Item = Result<Bytes, actix_web::Error>> {
    use std::future::Future;
    use std::task::Poll;
    let mut lines = Vec::<Bytes>::new().into_iter().peekable();
    // Bytes of the message being sent that are the watch's own, not yet
    // counted out (counted out first, as its chunks go).
    let mut own = 0;
    let mut since_check = 0;
    let mut recheck: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let mut flushed = false;
    let mut hangup: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let mut closed = false;
    futures::stream::poll_fn(move |cx| {
        if closed {
            return Poll::Ready(None);
        }
        if queued.evicted() {
            // Closed for its client's budget: what it holds is dropped now
            // (the watch task, finding `rx` closed, ends), and the client,
            // if it reads again, finds a 410 to resume after.
            closed = true;
            rx.close();
            queued.sub(lines.by_ref().map(|l| l.len()).sum(), own);
            while let Ok((message, message_own)) = rx.try_recv() {
                queued.sub(message.iter().map(Bytes::len).sum(), message_own);
            }
            let status = Status::expired(
                "watch closed: this client's watches hold more unread events than its budget (auth.watchBufferBytesPerClient); resume from the last resourceVersion read",
            );
            return Poll::Ready(Some(Ok(Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": status.to_json()}))))));
        }
        if let Some(socket) = socket.as_ref() {
            let timer = hangup.get_or_insert_with(|| Box::pin(tokio::time::sleep(HANGUP_CHECK)));
            while timer.as_mut().poll(cx).is_ready() {
                if socket.peer_closed() {
                    // The watch task sees its receiver dropped with this
                    // body and ends too (see `watch`).
                    metrics::counter!("kubefold_watch_client_closed_total").increment(1);
                    socket.shut_down();
                    return Poll::Ready(None);
                }
                timer.as_mut().reset(tokio::time::Instant::now() + HANGUP_CHECK);
            }
        }
        loop {
            if let Some(socket) = socket.as_ref().filter(|_| since_check >= SOCKET_CHECK_BYTES) {
                // actix-http keeps polling the body until its buffer is full,
                // and writes it out after: first let it write what it has.
                if !flushed {
                    flushed = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                if !socket.writable() {
                    let sleep = recheck.get_or_insert_with(|| Box::pin(tokio::time::sleep(SOCKET_RECHECK)));
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    recheck = None;
                    continue;
                }
                recheck = None;
                since_check = 0;
                flushed = false;
            }
            if let Some(first) = lines.next() {
                let chunk = match lines.peek() {
                    Some(next) if first.len() + next.len() <= SOCKET_CHECK_BYTES => {
                        let mut chunk = bytes::BytesMut::with_capacity(SOCKET_CHECK_BYTES.max(first.len()));
                        chunk.extend_from_slice(&first);
                        while let Some(line) = lines.next_if(|l| chunk.len() + l.len() <= SOCKET_CHECK_BYTES) {
                            chunk.extend_from_slice(&line);
                        }
                        chunk.freeze()
                    }
                    _ => first,
                };
                since_check += chunk.len();
                let chunk_own = own.min(chunk.len());
                own -= chunk_own;
                queued.sub(chunk.len(), chunk_own);
                return Poll::Ready(Some(Ok(chunk)));
            }
            match rx.poll_recv(cx) {
                Poll::Ready(Some((message, message_own))) => {
                    lines = message.into_iter().peekable();
                    own = message_own;
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a watch queues are references to the lines its worker thread
    /// encoded once for every watch (a copy per client would cost a
    /// thousand watches behind by a second a thousand copies of that
    /// second). The body sends small lines of a message joined, up to
    /// 64 KiB a chunk, and a line that joins none as it is; in order; and
    /// counts out what it takes.
    #[test]
    fn a_watch_body_joins_small_lines_hands_on_large_ones_and_counts_them_out() {
        use futures::StreamExt;
        let small = |s: &str| Bytes::from(format!("{{\"type\":\"{s}\"}}\n"));
        let large = |c: u8| Bytes::from(vec![c; 40 << 10]);
        let messages = vec![vec![small("ADDED"), small("MODIFIED")], vec![large(b'a'), large(b'b')], vec![small("DELETED")]];
        let (tx, rx) = mpsc::channel(4);
        let queued = Queued::new(None, 0);
        for m in &messages {
            let len = m.iter().map(Bytes::len).sum();
            queued.add(len, len);
            tx.try_send((m.clone(), len)).unwrap();
        }
        drop(tx);
        let sent: Vec<Bytes> = futures::executor::block_on(line_stream(rx, queued.clone(), None).map(Result::unwrap).collect());
        let joined = [&messages[0][0][..], &messages[0][1][..]].concat();
        assert_eq!(sent.len(), 4, "the first message's lines joined, then one chunk per other line");
        assert_eq!(&sent[0][..], &joined[..]);
        for (out, line) in sent[1..].iter().zip([&messages[1][0], &messages[1][1], &messages[2][0]]) {
            assert_eq!(out.as_ptr(), line.as_ptr(), "a line alone is the shared line itself, not a copy");
        }
        assert_eq!(queued.bytes(), 0, "what was queued is counted out as it is taken");
    }

    /// A watch whose socket is full hands actix-http no more than its
    /// 64 KiB since the last look: once that went out it waits (what its
    /// client has not read stays in the watch's queue, shared), and goes
    /// on once the client has read and the socket takes more.
    #[test]
    fn a_watch_body_waits_for_its_socket_to_take_more() {
        use futures::StreamExt;
        use std::io::{Read, Write};
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        // Fill the server's socket: the client reads nothing yet.
        server.set_nonblocking(true).unwrap();
        let filler = vec![b'x'; 64 << 10];
        while server.write(&filler).is_ok() {}
        let (tx, rx) = mpsc::channel(64);
        for c in b'a'..b'k' {
            tx.try_send((vec![Bytes::from(vec![c; 64 << 10])], 64 << 10)).unwrap();
        }
        let queued = Queued::new(None, 0);
        queued.add(640 << 10, 640 << 10);
        let mut body = Box::pin(line_stream(rx, queued, ConnectionSocket::of(&server)));
        rt.block_on(async {
            let first = futures::poll!(body.next());
            assert!(matches!(&first, std::task::Poll::Ready(Some(Ok(c))) if c[0] == b'a'), "the first 64 KiB go at once");
            for _ in 0..5 {
                assert!(futures::poll!(body.next()).is_pending(), "nothing more while the socket is full");
            }
        });
        // The client reads everything sent so far; the socket drains.
        client.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let next = rt.block_on(async {
            for _ in 0..200 {
                while client.read(&mut buf).is_ok() {}
                if let std::task::Poll::Ready(next) = futures::poll!(body.next()) {
                    return next;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            None
        });
        assert!(matches!(&next, Some(Ok(c)) if c[0] == b'b'), "the next 64 KiB once the socket takes more");
    }

    /// A watch body with nothing to send ends within about a second of
    /// its client closing the connection (FIN), and shuts the socket down
    /// so that actix-http drops the connection; until then it waits.
    #[test]
    fn a_watch_body_with_nothing_to_send_ends_when_its_client_closes() {
        use futures::StreamExt;
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let socket = ConnectionSocket::of(&server).unwrap();
        assert!(!socket.peer_closed());
        let (_tx, rx) = mpsc::channel::<Message>(4);
        let mut body = Box::pin(line_stream(rx, Queued::new(None, 0), Some(socket.clone())));
        rt.block_on(async {
            let waited = tokio::time::timeout(Duration::from_millis(1200), body.next()).await;
            assert!(waited.is_err(), "the body waits while its client is there");
        });
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let started = std::time::Instant::now();
        let end = rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), body.next()).await });
        assert!(matches!(end, Ok(None)), "the body ends once its client closed");
        assert!(started.elapsed() < Duration::from_millis(1500), "within about a second: {:?}", started.elapsed());
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &server, &mut buf).unwrap(), 0, "the socket is shut down");
    }
}
