//! A watch below the HTTP layer: its events from a start point (unset/"0":
//! the current state as synthetic ADDED events; N: every event after N,
//! replayed from memory or the durable log) and then live from the
//! aggregator's fan-out, matched against its scope and selectors, encoded
//! as JSON lines or Table rows, with bookmarks, within its client's
//! buffer budget. Never waits on a member: a dead cluster only stops
//! sending. The response body that writes the lines is [`crate::watch`].
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kubefold_actors::fleet::{Fleet, Subscription};
use kubefold_engine::event::{EventType, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::status::Status;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use super::params::{flag, Query};
use super::scope::{Filter, Scope};
use super::table::{IncludeObject, TablePrinter};
use crate::watch_budget::Queued;

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

/// What taking the events ready in a watch's channel came to.
enum Took {
    /// Every event taken was handed on; `full`: a whole batch was taken,
    /// so more may be ready.
    Handed { full: bool },
    /// The watch ended (its client went away, it fell behind its channel
    /// and was closed, or the fan-out closed).
    Ended,
}

/// Lines handed to a watch's response body at once, and how many of their
/// bytes are the watch's own (counted into its client's budget, see
/// [`crate::watch_budget`]) rather than shared with other watches.
pub type Message = (Vec<Bytes>, usize);

struct Watch {
    fleet: Arc<Fleet>,
    /// Interval of bookmarks (`allowWatchBookmarks=true`).
    bookmark_interval: Duration,
    /// How often the watch takes newly committed events (see [`FlushClock`]).
    flush_interval: Duration,
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

/// A watch's settings (from the server's configuration).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Interval of bookmarks (`allowWatchBookmarks=true`).
    pub bookmark_interval: Duration,
    /// A watch takes newly committed events at most once per this interval
    /// and writes them together (zero: each commit at once).
    pub flush_interval: Duration,
    /// Lower bound of the randomised default timeout.
    pub min_timeout: Duration,
    /// Bytes of events all the watches of one client may hold unread
    /// together (0: no bound beyond each watch's own), see
    /// [`crate::watch_budget`].
    pub client_budget_bytes: u64,
}

/// An opened watch: its task, to be run until it ends, and what it hands
/// its client.
pub struct Opened {
    /// The watch's task (see [`Running::run`]).
    pub running: Running,
    /// The lines for the client's response body, a message at a time.
    pub messages: mpsc::Receiver<Message>,
    /// Bytes sent into `messages` and not yet taken, also counted into its
    /// client's budget: the response body counts out what it takes.
    pub queued: Arc<Queued>,
}

/// A watch's task.
pub struct Running {
    watch: Watch,
    start: Start,
    snapshot: Arc<Index>,
    pin: Option<kubefold_store::ReadPin>,
    compacted: u64,
    events: Subscription,
    deadline: tokio::time::Instant,
}

impl Running {
    /// Runs the watch until its timeout, its end (an ERROR event, the
    /// fan-out closed), or its client going away (its messages' receiver
    /// dropped with the response body), whichever comes first.
    pub async fn run(self) {
        let Running { watch, start, snapshot, pin, compacted, events, deadline } = self;
        // Resolves once the response body is dropped (its client went away):
        // the watch then ends at once, even if it has nothing to send.
        let body_gone = watch.tx.clone();
        let end = tokio::time::sleep_until(deadline);
        tokio::pin!(end);
        let run = watch.run(start, (snapshot, pin), compacted, events, deadline);
        tokio::select! {
            _ = run => {}
            _ = &mut end => {}
            _ = body_gone.closed() => {}
        }
    }
}

/// Opens a watch of `scope` as `query` asks (`send_initial`:
/// `sendInitialEvents`, already validated; `table`: the client asked for
/// Table rows) for `client` (its budget's key).
///
/// `Some(true)` streams the state as ADDED events and then a BOOKMARK
/// annotated `k8s.io/initial-events-end` ("Streaming lists", API Concepts);
/// `Some(false)` with no resourceVersion starts at the most recent state
/// without replaying it.
pub fn open(
    fleet: Arc<Fleet>,
    settings: Settings,
    scope: Scope,
    query: &Query,
    send_initial: Option<bool>,
    table: bool,
    client: Option<&str>,
) -> Result<Opened, Status> {
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
            let min = settings.min_timeout;
            min + min.mul_f64(rand::random::<f64>())
        }
    };
    let table = if table {
        Some(TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?))
    } else {
        None
    };
    // One slot more than the budget: the closing ERROR event of a slow client.
    let (tx, messages) = mpsc::channel::<Message>(CLIENT_BUFFER + 1);
    let budget = usize::try_from(settings.client_budget_bytes).unwrap_or(usize::MAX);
    let queued = Queued::new(client, budget);
    // Subscribe before reading the snapshot so that no event falls between
    // them: to the events of the watched type in the watched namespace, or
    // in every namespace, so that the watch is woken only by those (the
    // filter still checks each event, and the cluster and selectors).
    let events = fleet.subscribe(&scope.resource.key(), scope.namespace.as_deref());
    // What the watch reads from the store before its live events is kept
    // from compaction until it is sent: the snapshot's objects (initial
    // state) or the events after its resourceVersion (replay). The floor is
    // read after the pin is taken (see `Store::pin_after`).
    let store = fleet.store().clone();
    let (snapshot, state_pin) = store.pin(|| Ok::<_, std::convert::Infallible>(fleet.snapshot())).unwrap_or_else(|e| match e {});
    let pin = match start {
        Start::State { .. } => Some(state_pin),
        Start::After(from) => Some(store.pin_after(from)),
        Start::Now => None,
    };
    let compacted = fleet.compacted_rv();
    let watch = Watch {
        fleet,
        bookmark_interval: settings.bookmark_interval,
        flush_interval: settings.flush_interval,
        scope,
        filter,
        table,
        headers_sent: false,
        bookmarks,
        tx,
        queued: queued.clone(),
        sent_rv: 0,
        batch: None,
        batch_bytes: 0,
        batch_own: 0,
        batch_rv: 0,
        resource_key: String::new(),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let running = Running { watch, start, snapshot, pin, compacted, events, deadline };
    Ok(Opened { running, messages, queued })
}

impl Watch {
    async fn run(
        mut self,
        start: Start,
        (snapshot, pin): (Arc<kubefold_engine::index::Index>, Option<kubefold_store::ReadPin>),
        compacted: u64,
        mut events: Subscription,
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
                let store = self.fleet.store().clone();
                let (filter, scope) = (self.filter.clone(), self.scope.clone());
                for (i, (k, e)) in filter.candidates(&snapshot, &key, &scope, None).enumerate() {
                    if !filter.matches(&scope, k, e) {
                        continue;
                    }
                    yield_every(i).await;
                    let event = match store.event(e.rv) {
                        Ok(Some(event)) => event,
                        Ok(None) => continue,
                        // A damaged record: the state cannot be sent whole.
                        Err(e) => {
                            self.send_error(&Status::internal(e.to_string())).await;
                            return;
                        }
                    };
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
            Start::After(from) if self.fleet.store().in_lost_history(from) => {
                let status = Status::expired(format!("too old resource version: {from} (the event log's history there was lost to storage damage)"));
                self.send_error(&status).await;
                return;
            }
            Start::After(from) => {
                match self.fleet.recent_events(from, last) {
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
                        let store = self.fleet.store().clone();
                        for (i, event) in store.events_after(from).enumerate() {
                            let event = match event {
                                Ok(event) => event,
                                // A damaged record (the store logs and
                                // counts it): the history cannot be
                                // replayed, never skipped over.
                                Err(e) => {
                                    let status = Status::expired(format!("too old resource version: {from} (the event log cannot be read after it: {e})"));
                                    self.send_error(&status).await;
                                    return;
                                }
                            };
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
        let interval = self.bookmark_interval;
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
        let clock = FlushClock(self.flush_interval);
        loop {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => {
                        let full = match self.take(Ok(event), &mut events, &mut last).await {
                            Took::Handed { full } => full,
                            Took::Ended => return,
                        };
                        // A full batch leaves more ready: those are taken at once.
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
                    // A bookmark carries the fleet's head, as
                    // kube-apiserver's do even when nothing of the
                    // watch's type happens: its client resumes from there
                    // and need not replay the other types' events. Every
                    // event of the watch's channel up to that head is in
                    // the channel once the head is read (see
                    // `Fleet::sent_head`): they are taken first, so that
                    // the bookmark follows every one of them.
                    let head = self.fleet.sent_head();
                    loop {
                        match self.take(events.try_recv(), &mut events, &mut last).await {
                            Took::Handed { full: true } => {}
                            Took::Handed { full: false } => break,
                            Took::Ended => return,
                        }
                    }
                    last = last.max(head);
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

    /// Takes `first` and the events ready after it in the watch's channel
    /// (at most a batch) and hands those that concern it to the client as
    /// one message: the events committed together (one commit publishes
    /// them together) and those of the flush interval make one wake-up and
    /// one write, not one per event. `last`: the RV of the last event
    /// taken; events at or below it (committed before the watch's start
    /// point) are skipped.
    async fn take(
        &mut self,
        first: Result<Arc<StoredEvent>, broadcast::error::TryRecvError>,
        events: &mut Subscription,
        last: &mut u64,
    ) -> Took {
        self.batch = Some(Vec::new());
        self.batch_bytes = 0;
        self.batch_own = 0;
        let mut next = first;
        let mut taken = 0;
        let (lagged, closed) = loop {
            match next {
                Ok(event) => {
                    if event.rv > *last {
                        *last = event.rv;
                        if !self.forward(&event).await {
                            return Took::Ended;
                        }
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(n)) => break (Some(n), false),
                Err(broadcast::error::TryRecvError::Closed) => break (None, true),
                Err(broadcast::error::TryRecvError::Empty) => break (None, false),
            }
            taken += 1;
            if taken == BATCH_EVENTS || self.batch_bytes >= BATCH_BYTES {
                break (None, false);
            }
            next = events.try_recv();
        };
        let full = taken == BATCH_EVENTS || self.batch_bytes >= BATCH_BYTES;
        if !self.flush().await {
            return Took::Ended;
        }
        if let Some(n) = lagged {
            self.lagged(n, *last).await;
            return Took::Ended;
        }
        if closed {
            return Took::Ended;
        }
        Took::Handed { full }
    }

    /// Closes a watch that fell `n` events behind its channel of the
    /// fan-out (`last`: the last event it took).
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
                let before = match self.fleet.store().event(event.prev_rv) {
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
