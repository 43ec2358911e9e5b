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

/// Events taken from the fan-out at once and sent to a client as one chunk ...
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
/// into its name.
fn encoded_line(event_type: EventType, event: &StoredEvent, suffix: Option<String>) -> Bytes {
    LINES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((.., line)) = cache.lines.get(&event.rv).and_then(|lines| lines.iter().find(|(t, s, _)| *t == event_type && *s == suffix)) {
            return line.clone();
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
        line
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

struct Watch {
    state: Arc<ApiState>,
    scope: Scope,
    filter: Filter,
    table: Option<TablePrinter>,
    headers_sent: bool,
    bookmarks: bool,
    tx: mpsc::Sender<Bytes>,
    /// Bytes sent into `tx` and not yet taken by the response body.
    queued: Arc<std::sync::atomic::AtomicUsize>,
    /// The RV of the last event or bookmark handed to the client.
    sent_rv: u64,
    /// Lines of live events being gathered into one chunk (`Some` while
    /// the events ready in the fan-out are taken), and the RV of the last.
    batch: Option<Vec<u8>>,
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
    let (tx, mut rx) = mpsc::channel::<Bytes>(CLIENT_BUFFER + 1);
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
    let watch = Watch { state, scope, filter, table, headers_sent: false, bookmarks, tx, queued: queued.clone(), sent_rv: 0, batch: None, batch_rv: 0, resource_key: String::new() };
    let registered = Registered::new(user_agent);
    let deadline = tokio::time::Instant::now() + timeout;
    actix_web::rt::spawn(async move {
        let _registered = registered;
        let end = tokio::time::sleep_until(deadline);
        tokio::pin!(end);
        let run = watch.run(start, (snapshot, pin), compacted, events, deadline);
        tokio::select! {
            _ = run => {}
            _ = &mut end => {}
        }
    });
    let body = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|chunk| {
            chunk.map(|bytes| {
                queued.fetch_sub(bytes.len(), std::sync::atomic::Ordering::Relaxed);
                Ok::<_, actix_web::Error>(bytes)
            })
        })
    });
    Ok(HttpResponse::Ok().content_type("application/json").streaming(body))
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
        loop {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => {
                        // The events committed with it are usually ready
                        // too (one commit publishes them together): they go
                        // to the client as one chunk, one write and one
                        // wake-up instead of one per event.
                        self.batch = Some(Vec::new());
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
                            if taken == BATCH_EVENTS || self.batch.as_ref().is_some_and(|b| b.len() >= BATCH_BYTES) {
                                break None;
                            }
                            next = events.try_recv();
                        };
                        if !self.flush().await {
                            return;
                        }
                        if let Some(n) = lagged {
                            self.lagged(n, last).await;
                            return;
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
        metrics::counter!("kubefold_watch_slow_closed_total").increment(1);
        tracing::info!(skipped = n, last, "Slow watch client closed.");
        let status = Status::expired(format!("watch fell {n} events behind and was closed; resume with resourceVersion={last}"));
        self.send_error(&status).await;
    }

    /// Hands the batched lines to the client as one chunk (see `batch`).
    async fn flush(&mut self) -> bool {
        let Some(batch) = self.batch.take() else { return true };
        if batch.is_empty() {
            return true;
        }
        let sent = self.push(Bytes::from(batch)).await;
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
        let line = match &mut self.table {
            None => encoded_line(event_type, event, suffix),
            Some(printer) => {
                printer.at_now();
                let mut line = Vec::with_capacity(event.body.json.len() + 64);
                line.extend_from_slice(format!("{{\"type\":\"{}\",\"object\":", event_type.as_str()).as_bytes());
                line.extend_from_slice(&printer.single(&event.body, suffix.as_deref(), event.rv, &event.key.cluster, self.headers_sent));
                self.headers_sent = true;
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            }
        };
        if let Some(batch) = &mut self.batch {
            batch.extend_from_slice(&line);
            self.batch_rv = event.rv;
            return true;
        }
        let sent = self.push(line).await;
        if sent {
            self.sent_rv = event.rv;
        }
        sent
    }

    /// Hands one line to the client within its buffer budget; a client
    /// whose buffer stays full for [`SLOW_CLIENT_GRACE`] is closed with a
    /// 410 ERROR event (it resumes from the last RV it received, or
    /// relists) and `false` is returned, as when the client went away.
    async fn push(&mut self, line: Bytes) -> bool {
        use std::sync::atomic::Ordering;
        let mut slow_since: Option<tokio::time::Instant> = None;
        loop {
            let queued = self.queued.load(Ordering::Relaxed);
            let room = queued == 0 || queued + line.len() <= CLIENT_BUFFER_BYTES;
            if room && self.tx.capacity() > 1 {
                break;
            }
            if self.tx.is_closed() {
                return false;
            }
            let since = *slow_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= SLOW_CLIENT_GRACE {
                metrics::counter!("kubefold_watch_slow_closed_total").increment(1);
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
        self.queued.fetch_add(line.len(), Ordering::Relaxed);
        self.tx.send(line).await.is_ok()
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
        let sent = self.push(Bytes::from(line)).await;
        if sent {
            self.sent_rv = self.sent_rv.max(rv);
        }
        sent
    }

    async fn send_error(&mut self, status: &Status) {
        let line = format!("{}\n", json!({"type": "ERROR", "object": status.to_json()}));
        // Never waits: the channel keeps one slot beyond the budget for it.
        let len = line.len();
        self.queued.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        if self.tx.try_send(Bytes::from(line)).is_err() {
            self.queued.fetch_sub(len, std::sync::atomic::Ordering::Relaxed);
        }
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
}
