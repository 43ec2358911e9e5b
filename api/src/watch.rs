//! Watch: a stream of JSON lines, one event each, from a start point
//! (unset/"0": the current state as synthetic ADDED events; N: every event
//! after N, replayed from the durable log) and then live from the aggregator's
//! fan-out. Never waits on a member: a dead cluster only stops sending.
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>

use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::HttpResponse;
use kubefold_engine::event::{EventType, StoredEvent};
use kubefold_engine::status::Status;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use crate::query::{flag, Query};
use crate::read::{Filter, IncludeObject, Scope, TablePrinter};
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

/// Events buffered towards one watch client before it counts as slow.
const CLIENT_BUFFER: usize = 1024;
/// Bytes buffered towards one watch client before it counts as slow (one
/// event may pass it alone).
const CLIENT_BUFFER_BYTES: usize = 4 << 20;
/// How long a watch client may stay slow (its buffer full) before it is
/// closed with a 410 Expired ERROR event and counted in
/// `kubefold_watch_slow_closed_total`: kube-apiserver, too, closes a
/// watcher whose buffer stays full ("Forcing watcher close due to
/// unresponsiveness"), so that one client never holds the others back.
const SLOW_CLIENT_GRACE: Duration = Duration::from_secs(5);

/// The entry a filter without label or field selectors is matched against
/// (it reads neither).
static NO_CONTENT: std::sync::LazyLock<kubefold_engine::event::IndexEntry> =
    std::sync::LazyLock::new(|| kubefold_engine::event::IndexEntry::new(0, "", "", [], []));

/// Events taken from the fan-out at once and handed to a client as one message ...
const BATCH_EVENTS: usize = 256;
/// ... up to about this many bytes.
const BATCH_BYTES: usize = 1 << 20;

/// Events whose lines are kept per worker thread: more than a burst of
/// watches resuming together replays (see `Fleet::recent_events`), so that
/// each replays shared lines rather than encoding its own copies ...
const LINE_CACHE_EVENTS: usize = 1024;
/// ... and at most about this many bytes of lines.
const LINE_CACHE_BYTES: usize = 8 << 20;

/// Lines encoded lately on one worker thread, by event RV, oldest first.
#[derive(Default)]
struct LineCache {
    lines: std::collections::HashMap<u64, Vec<(EventType, Option<String>, Bytes)>>,
    order: std::collections::VecDeque<u64>,
    bytes: usize,
}

thread_local! {
    /// Every JSON watch of an event sends the same line (per event type and
    /// name suffix), and watches run on a few worker threads: a thousand
    /// watches of one event cost one encoding per thread, not a thousand.
    static LINES: std::cell::RefCell<LineCache> = std::cell::RefCell::new(LineCache::default());
}

/// The JSON watch line of `event` as `event_type`, with `suffix` spliced
/// into its name, and whether it was encoded now (else it is shared with
/// the watches that sent it before).
fn encoded_line(event_type: EventType, event: &StoredEvent, suffix: Option<String>) -> (Bytes, bool) {
    LINES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((.., line)) = cache.lines.get(&event.rv).and_then(|lines| lines.iter().find(|(t, s, _)| *t == event_type && *s == suffix)) {
            return (line.clone(), false);
        }
        let mut line = Vec::with_capacity(event.body.json.len() + 64);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(event_type.as_str().as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        event.body.write(&mut line, suffix.as_deref(), event.rv);
        line.extend_from_slice(b"}\n");
        let line = Bytes::from(line);
        let cache = &mut *cache;
        cache.bytes += line.len();
        let variants = cache.lines.entry(event.rv).or_default();
        if variants.is_empty() {
            cache.order.push_back(event.rv);
        }
        variants.push((event_type, suffix, line.clone()));
        while cache.order.len() > LINE_CACHE_EVENTS || (cache.bytes > LINE_CACHE_BYTES && cache.order.len() > 1) {
            let Some(rv) = cache.order.pop_front() else { break };
            for (.., old) in cache.lines.remove(&rv).unwrap_or_default() {
                cache.bytes -= old.len();
            }
        }
        (line, true)
    })
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The current state as synthetic ADDED events first.
    State {
        /// Then a BOOKMARK with `k8s.io/initial-events-end: "true"`.
        end_bookmark: bool,
    },
    /// Every event after this RV.
    After(u64),
    /// Only what happens from now on.
    Now,
}

/// Lines handed to a watch's response body at once, and how many of their
/// bytes are the watch's own (counted into its client's budget, see
/// [`crate::watch_budget`]) rather than shared with other watches.
type Message = (Vec<Bytes>, usize);

struct Watch {
    state: Arc<ApiState>,
    scope: Scope,
    filter: Filter,
    table: Option<TablePrinter>,
    headers_sent: bool,
    bookmarks: bool,
    /// Lines towards the response body, a message of one or more at a
    /// time. A line is the shared `Bytes` of [`encoded_line`]: a thousand
    /// watches behind by a second hold a thousand references to each line
    /// of that second, not a thousand copies.
    tx: mpsc::Sender<Message>,
    /// Bytes sent into `tx` and not yet taken by the response body, also
    /// counted into its client's (see [`crate::watch_budget`]).
    queued: Arc<Queued>,
    /// The RV of the last event or bookmark handed to the client.
    sent_rv: u64,
    /// Lines of live events gathered into one message (`Some` while the
    /// events ready in the fan-out are taken), their bytes, and the RV of
    /// the last.
    batch: Option<Vec<Bytes>>,
    batch_bytes: usize,
    /// Of them, the watch's own (see [`crate::watch_budget`]).
    batch_own: usize,
    batch_rv: u64,
    /// The watched type's key (`v1/pods`), for matching events.
    resource_key: String,
}

/// Starts a watch and returns its streaming response.
///
/// `send_initial` is `sendInitialEvents` (already validated): `Some(true)`
/// streams the state as ADDED events and then a BOOKMARK annotated
/// `k8s.io/initial-events-end` ("Streaming lists", API Concepts);
/// `Some(false)` with no resourceVersion starts at the most recent state
/// without replaying it.
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
    let filter = Filter::parse(&scope.resource, query)?;
    let start = match (send_initial, query.resource_version()?) {
        (Some(true), _) => Start::State { end_bookmark: true },
        (Some(false), None | Some(0)) => Start::Now,
        (None, None | Some(0)) => Start::State { end_bookmark: false },
        (_, Some(n)) => Start::After(n),
    };
    let bookmarks = flag(&query.allow_watch_bookmarks)?;
    let timeout = match query.timeout_seconds()? {
        Some(s) => Duration::from_secs(s),
        // kube-apiserver picks a random timeout in [minRequestTimeout, 2x) so
        // that clients do not reconnect all at once.
        None => {
            let min = state.config.min_watch_timeout;
            min + min.mul_f64(rand::random::<f64>())
        }
    };
    let table = if table {
        Some(TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?))
    } else {
        None
    };
    // One slot more than the budget: the closing ERROR event of a slow client.
    let (tx, rx) = mpsc::channel::<Message>(CLIENT_BUFFER + 1);
    let budget = usize::try_from(state.config.auth.watch_buffer_bytes_per_client).unwrap_or(usize::MAX);
    let queued = Queued::new(client, budget);
    // Subscribe before reading the snapshot so that no event falls between them.
    let events = state.fleet.subscribe();
    // What the watch reads from the store before its live events is kept
    // from compaction until it is sent: the snapshot's objects (initial
    // state) or the events after its resourceVersion (replay). The floor is
    // read after the pin is taken (see `Store::pin_after`).
    let store = state.fleet.store().clone();
    let (snapshot, state_pin) = store.pin(|| Ok::<_, std::convert::Infallible>(state.fleet.snapshot())).unwrap_or_else(|e| match e {});
    let pin = match start {
        Start::State { .. } => Some(state_pin),
        Start::After(from) => Some(store.pin_after(from)),
        Start::Now => None,
    };
    let compacted = state.fleet.compacted_rv();
    let watch = Watch { state, scope, filter, table, headers_sent: false, bookmarks, tx, queued: queued.clone(), sent_rv: 0, batch: None, batch_bytes: 0, batch_own: 0, batch_rv: 0, resource_key: String::new() };
    let registered = Registered::new(user_agent);
    let deadline = tokio::time::Instant::now() + timeout;
    // Resolves once the response body is dropped (its client went away):
    // the watch then ends at once, even if it has nothing to send.
    let body_gone = watch.tx.clone();
    actix_web::rt::spawn(async move {
        let _registered = registered;
        let end = tokio::time::sleep_until(deadline);
        tokio::pin!(end);
        let run = watch.run(start, (snapshot, pin), compacted, events, deadline);
        tokio::select! {
            _ = run => {}
            _ = &mut end => {}
            _ = body_gone.closed() => {}
        }
    });
    let body = line_stream(rx, queued, socket);
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

impl Watch {
    async fn run(
        mut self,
        start: Start,
        (snapshot, pin): (Arc<kubefold_engine::index::Index>, Option<kubefold_store::ReadPin>),
        compacted: u64,
        mut events: broadcast::Receiver<Arc<StoredEvent>>,
        deadline: tokio::time::Instant,
    ) {
        self.resource_key = self.scope.resource.key();
        let mut last = snapshot.head_rv();
        match start {
            Start::Now => {}
            Start::State { end_bookmark } => {
                // Read lazily from the snapshot (immutable, shared): a client
                // that reads slowly holds no copy of the state.
                let key = self.scope.resource.key();
                let namespace = self.scope.namespace.clone();
                let store = self.state.fleet.store().clone();
                for (i, (k, e)) in snapshot.range(&key, namespace.as_deref(), None).enumerate() {
                    if !self.filter.matches(&self.scope, k, e) {
                        continue;
                    }
                    yield_every(i).await;
                    let Ok(Some(event)) = store.event(e.rv) else { continue };
                    if !self.send_event(EventType::Added, &event).await {
                        return;
                    }
                }
                if end_bookmark && !self.send_bookmark(last, true).await {
                    return;
                }
            }
            Start::After(from) if from < compacted => {
                let status = Status::expired(format!("too old resource version: {from} ({})", compacted + 1));
                self.send_error(&status).await;
                return;
            }
            Start::After(from) => {
                match self.state.fleet.recent_events(from, last) {
                    // Recent events come from memory, shared with every
                    // other watch replaying them (see `Fleet::recent_events`).
                    Some(recent) => {
                        for (i, event) in recent.iter().enumerate() {
                            yield_every(i).await;
                            if !self.forward(event).await {
                                return;
                            }
                        }
                    }
                    // Older ones are replayed lazily from the log: a client
                    // that reads slowly costs its buffer, not a copy of the
                    // backlog.
                    None => {
                        let store = self.state.fleet.store().clone();
                        for (i, event) in store.events_after(from).enumerate() {
                            let Ok(event) = event else { continue };
                            yield_every(i).await;
                            if event.rv > last {
                                break;
                            }
                            if !self.forward(&event).await {
                                return;
                            }
                        }
                    }
                }
                last = last.max(from);
            }
        }
        // From here on only live events, handed on from memory.
        drop(pin);
        let interval = self.state.config.bookmark_interval;
        let mut next_bookmark = next_bookmark_time(tokio::time::Instant::now(), interval, deadline);
        // Without a next bookmark time its branch is disabled and the sleep
        // is not polled.
        let bookmark_due = tokio::time::sleep_until(next_bookmark.unwrap_or(deadline));
        tokio::pin!(bookmark_due);
        // Events are taken from the fan-out at most once per flush tick
        // (see `FlushClock`): after a take the watch sleeps to the next
        // tick, and then takes all that came meanwhile, without waking for
        // each. At a fleet's event rates, a thousand watches that each
        // woke, matched and wrote once per commit spent most of kubefold's
        // CPU (and their clients') on those wake-ups and writes, not on
        // bytes. An event after a quieter spell goes at once.
        let clock = FlushClock(self.state.config.watch_flush_interval);
        loop {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => {
                        // The events committed with it (one commit
                        // publishes them together) and those of the flush
                        // interval go to the client as one message: one
                        // wake-up and one write, not one per event.
                        self.batch = Some(Vec::new());
                        self.batch_bytes = 0;
                        self.batch_own = 0;
                        let mut next = Ok(event);
                        let mut taken = 0;
                        let lagged = loop {
                            match next {
                                Ok(event) => {
                                    if event.rv > last {
                                        last = event.rv;
                                        if !self.forward(&event).await {
                                            return;
                                        }
                                    }
                                }
                                Err(broadcast::error::TryRecvError::Lagged(n)) => break Some(n),
                                Err(broadcast::error::TryRecvError::Closed) => break None,
                                Err(broadcast::error::TryRecvError::Empty) => break None,
                            }
                            taken += 1;
                            if taken == BATCH_EVENTS || self.batch_bytes >= BATCH_BYTES {
                                break None;
                            }
                            next = events.try_recv();
                        };
                        // A full batch leaves more ready: those are taken at once.
                        let full = taken == BATCH_EVENTS || self.batch_bytes >= BATCH_BYTES;
                        if !self.flush().await {
                            return;
                        }
                        if let Some(n) = lagged {
                            self.lagged(n, last).await;
                            return;
                        }
                        if let Some(at) = clock.next_tick(tokio::time::Instant::now()).filter(|_| !full) {
                            tokio::time::sleep_until(at).await;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        self.lagged(n, last).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = &mut bookmark_due, if self.bookmarks && next_bookmark.is_some() => {
                    if !self.send_bookmark(last, false).await {
                        return;
                    }
                    next_bookmark = next_bookmark_time(tokio::time::Instant::now(), interval, deadline);
                    if let Some(at) = next_bookmark {
                        bookmark_due.as_mut().reset(at);
                    }
                }
                _ = self.tx.closed() => return,
            }
        }
    }

    /// Closes a watch that fell `n` events behind the fan-out (`last`: the
    /// last event it took).
    async fn lagged(&mut self, n: u64, last: u64) {
        metrics::counter!("kubefold_watch_slow_closed_total", "reason" => "watch_bound").increment(1);
        tracing::info!(skipped = n, last, "Slow watch client closed.");
        let status = Status::expired(format!("watch fell {n} events behind and was closed; resume with resourceVersion={last}"));
        self.send_error(&status).await;
    }

    /// Hands the batched lines to the client as one message (see `batch`).
    async fn flush(&mut self) -> bool {
        let Some(batch) = self.batch.take() else { return true };
        if batch.is_empty() {
            return true;
        }
        let sent = self.push(batch, self.batch_bytes, self.batch_own).await;
        if sent {
            self.sent_rv = self.sent_rv.max(self.batch_rv);
        }
        sent
    }

    /// Sends a committed event if it concerns this watch, turning selector
    /// transitions into ADDED/DELETED as the watch cache does.
    async fn forward(&mut self, event: &StoredEvent) -> bool {
        if event.resource != self.resource_key {
            return true;
        }
        if let Some(ns) = &self.scope.namespace {
            if &event.key.namespace != ns {
                return true;
            }
        }
        // Labels and fields are only read (and copied out of the event) when
        // a selector needs them; most watches select by type and namespace.
        let now = if self.filter.depends_on_content() {
            self.filter.matches(&self.scope, &event.key, &event.index_entry())
        } else {
            self.filter.matches(&self.scope, &event.key, &NO_CONTENT)
        };
        let event_type = match event.event_type {
            EventType::Modified if event.prev_rv != 0 && self.filter.depends_on_content() => {
                let before = match self.state.fleet.store().event(event.prev_rv) {
                    Ok(Some(prev)) => self.filter.matches(&self.scope, &prev.key, &prev.index_entry()),
                    _ => now,
                };
                match (before, now) {
                    (true, true) => EventType::Modified,
                    (false, true) => EventType::Added,
                    (true, false) => EventType::Deleted,
                    (false, false) => return true,
                }
            }
            other if now => other,
            _ => return true,
        };
        self.send_event(event_type, event).await
    }

    async fn send_event(&mut self, event_type: EventType, event: &StoredEvent) -> bool {
        let suffix = self.scope.name_suffix(&event.key.cluster);
        // A line encoded now is the watch's own; one it shares is not.
        let (line, encoded) = match &mut self.table {
            None => encoded_line(event_type, event, suffix),
            Some(printer) => {
                printer.at_now();
                let mut line = Vec::with_capacity(event.body.json.len() + 64);
                line.extend_from_slice(format!("{{\"type\":\"{}\",\"object\":", event_type.as_str()).as_bytes());
                line.extend_from_slice(&printer.single(&event.body, suffix.as_deref(), event.rv, &event.key.cluster, self.headers_sent));
                self.headers_sent = true;
                line.extend_from_slice(b"}\n");
                (Bytes::from(line), true)
            }
        };
        let own = if encoded { line.len() } else { 0 };
        if let Some(batch) = &mut self.batch {
            self.batch_bytes += line.len();
            self.batch_own += own;
            batch.push(line);
            self.batch_rv = event.rv;
            return true;
        }
        let len = line.len();
        let sent = self.push(vec![line], len, own).await;
        if sent {
            self.sent_rv = event.rv;
        }
        sent
    }

    /// Hands lines (`len` bytes, `own` of them the watch's own, see
    /// [`crate::watch_budget`]) to the client within its buffer budget and
    /// its client's; a client
    /// whose buffer stays full for [`SLOW_CLIENT_GRACE`] is closed with a
    /// 410 ERROR event (it resumes from the last RV it received, or
    /// relists) and `false` is returned, as when the client went away.
    async fn push(&mut self, lines: Vec<Bytes>, len: usize, own: usize) -> bool {
        let mut slow_since: Option<tokio::time::Instant> = None;
        loop {
            let queued = self.queued.bytes();
            let room = (queued == 0 || queued + len <= CLIENT_BUFFER_BYTES) && (own == 0 || self.queued.client_room(own));
            if room && self.tx.capacity() > 1 {
                break;
            }
            if self.tx.is_closed() {
                return false;
            }
            let since = *slow_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= SLOW_CLIENT_GRACE {
                metrics::counter!("kubefold_watch_slow_closed_total", "reason" => "watch_bound").increment(1);
                let unread = CLIENT_BUFFER + 1 - self.tx.capacity();
                tracing::info!(unread_events = unread, unread_bytes = queued, last = self.sent_rv, "Slow watch client closed.");
                let status = Status::expired(format!(
                    "watch client too slow: {unread} events ({queued} bytes) unread for {}s; closed. Resume with resourceVersion={}",
                    SLOW_CLIENT_GRACE.as_secs(),
                    self.sent_rv
                ));
                self.send_error(&status).await;
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.queued.add(len, own);
        metrics::counter!("kubefold_watch_messages_total").increment(1);
        metrics::counter!("kubefold_watch_lines_total").increment(lines.len() as u64);
        self.tx.send((lines, own)).await.is_ok()
    }

    async fn send_bookmark(&mut self, rv: u64, initial_events_end: bool) -> bool {
        let (kind, api_version) = match &self.table {
            Some(_) => ("Table".to_string(), "meta.k8s.io/v1".to_string()),
            None => (self.scope.resource.kind.clone(), self.scope.resource.api_version()),
        };
        let mut object: Value = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": rv.to_string()}});
        if initial_events_end {
            object["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let line = format!("{}\n", json!({"type": "BOOKMARK", "object": object}));
        let len = line.len();
        let sent = self.push(vec![Bytes::from(line)], len, len).await;
        if sent {
            self.sent_rv = self.sent_rv.max(rv);
        }
        sent
    }

    async fn send_error(&mut self, status: &Status) {
        let line = format!("{}\n", json!({"type": "ERROR", "object": status.to_json()}));
        // Never waits: the channel keeps one slot beyond the budget for it.
        let len = line.len();
        self.queued.add(len, len);
        if self.tx.try_send((vec![Bytes::from(line)], len)).is_err() {
            self.queued.sub(len, len);
        }
    }
}

/// The ticks every watch takes its events on: intervals of `.0` counted
/// from one instant for the whole process, so that under load the watches
/// wake together, once a tick, and each takes every event of the tick
/// before (zero: no ticks, every commit is taken at once).
#[derive(Debug, Clone, Copy)]
struct FlushClock(Duration);

/// The instant the flush ticks count from.
static FLUSH_EPOCH: std::sync::LazyLock<tokio::time::Instant> = std::sync::LazyLock::new(tokio::time::Instant::now);

impl FlushClock {
    /// The start of the tick after the one `now` falls in; `None` without
    /// ticks.
    fn next_tick(self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        if self.0.is_zero() {
            return None;
        }
        let interval = self.0.as_nanos();
        let since = now.saturating_duration_since(*FLUSH_EPOCH).as_nanos();
        let next = (since / interval + 1) * interval;
        Some(*FLUSH_EPOCH + Duration::from_nanos(u64::try_from(next).unwrap_or(u64::MAX)))
    }
}

/// How long before its end a watch gets its last bookmark: kube-apiserver's
/// watch cache sends bookmarks "periodically every bookmarkFrequency ... and
/// at least 2s before the watcher timeout" (`cacheWatcher.nextBookmarkTime`
/// in k8s.io/apiserver/pkg/storage/cacher), so that a client reconnecting
/// after the timeout resumes from a recent resourceVersion instead of an
/// old one that may have been compacted meanwhile ("Watch bookmarks", API
/// Concepts).
/// <https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks>
const PRE_TIMEOUT_BOOKMARK: Duration = Duration::from_secs(2);

/// When the next bookmark is due, seen at `now` (the start of the watch or
/// the last bookmark): after `interval`, or [`PRE_TIMEOUT_BOOKMARK`] before
/// `deadline` if that comes first; `None` once the pre-timeout bookmark is
/// past (or the watch is too short to have one).
fn next_bookmark_time(now: tokio::time::Instant, interval: Duration, deadline: tokio::time::Instant) -> Option<tokio::time::Instant> {
    let pre_timeout = deadline.checked_sub(PRE_TIMEOUT_BOOKMARK)?;
    let heartbeat = now + interval;
    if heartbeat < pre_timeout {
        Some(heartbeat)
    } else if pre_timeout > now {
        Some(pre_timeout)
    } else {
        None
    }
}

/// Gives the worker thread back every [`YIELD_EVERY`] events while a watch
/// sends a snapshot or a backlog to a client that keeps up: a large initial
/// state would otherwise be sent in one turn, and the worker's other
/// connections would wait behind it.
async fn yield_every(i: usize) {
    if i % YIELD_EVERY == YIELD_EVERY - 1 {
        tokio::task::yield_now().await;
    }
}

/// Events sent per turn of the worker during initial state and replay.
const YIELD_EVERY: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

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

    #[test]
    fn bookmarks_every_interval_and_once_shortly_before_the_end() {
        let start = Instant::now();
        let s = |n: u64| Duration::from_secs(n);
        let deadline = start + s(300);
        // Every minute, then 2 s before the deadline, then none.
        assert_eq!(next_bookmark_time(start, s(60), deadline), Some(start + s(60)));
        assert_eq!(next_bookmark_time(start + s(240), s(60), deadline), Some(start + s(298)));
        assert_eq!(next_bookmark_time(start + s(298), s(60), deadline), None);
        assert_eq!(next_bookmark_time(start + s(299), s(60), deadline), None);
        // A watch shorter than the interval still gets the pre-timeout one.
        assert_eq!(next_bookmark_time(start, s(60), start + s(5)), Some(start + s(3)));
        // One that ends within 2 s gets none.
        assert_eq!(next_bookmark_time(start, s(60), start + s(1)), None);
    }

    /// Every watch sleeps to the same tick boundaries, whenever its own
    /// take ended: the next boundary after now, never more than one
    /// interval on; none without an interval.
    #[test]
    fn flush_ticks_are_shared_boundaries_at_most_an_interval_on() {
        let ms = Duration::from_millis;
        let clock = FlushClock(ms(20));
        let epoch = *FLUSH_EPOCH;
        for at in [0, 1, 7, 19, 20, 21, 39, 40, 1_000_003] {
            let now = epoch + ms(at);
            let next = clock.next_tick(now).unwrap();
            assert!(next > now && next <= now + ms(20), "{at} ms: {:?}", next - now);
            assert_eq!((next - epoch).as_nanos() % ms(20).as_nanos(), 0, "{at} ms: a boundary");
        }
        // Two watches whose takes ended at different moments of one tick
        // wake together.
        assert_eq!(clock.next_tick(epoch + ms(41)), clock.next_tick(epoch + ms(59)));
        assert_eq!(FlushClock(Duration::ZERO).next_tick(epoch + ms(5)), None);
    }
}
