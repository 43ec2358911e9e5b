//! Fault injection: the ways a real member cluster misbehaves, switchable at
//! runtime, so that kubefold's tests can prove it keeps serving through them.
//!
//! A [`Faults`] value is the whole set in force; `PUT /sim/faults` (JSON, the
//! fields below in camelCase, every one optional) or
//! [`SimHandle::set_faults`](super::SimHandle::set_faults) replaces it, `GET
//! /sim/faults` and [`SimHandle::faults`](super::SimHandle::faults) read it,
//! and `{}` (or `Faults::default()`) clears every fault.
//!
//! | field | what the member does |
//! | --- | --- |
//! | `latencyMs`, `latencyJitterMs` | waits `latencyMs` plus a random `[0, latencyJitterMs]` before answering each request |
//! | `errorRate`, `errorCode` | answers that fraction of requests with `errorCode` (default 500 InternalError; 503 ServiceUnavailable, ...) |
//! | `throttleRate`, `retryAfterSecs` | answers that fraction with 429 TooManyRequests and `Retry-After` (default 1 s) |
//! | `listResetRate` | resets that fraction of list connections (paged lists, and streaming lists: watches with `sendInitialEvents=true`) halfway through the first chunk of the body |
//! | `watchResetAfterEvents` | resets every watch connection after that many events (no terminating chunk) |
//! | `watchCloseAfterEvents`, `watchCloseAfterMs` | ends every watch stream cleanly after that many events or milliseconds |
//! | `expireWatches` | a 410 storm: open watches end with an ERROR event 410 Expired when it is set, and every watch that starts from a resourceVersion gets only that event |
//! | `noStreamingLists` | refuses streaming lists (`sendInitialEvents=true`) with 422, as a kube-apiserver without the `WatchList` feature does |
//! | `holdWatchEvents` | a lagging watch: events (and bookmarks) of open watches are held back while it is set and sent, in order, once it is cleared; a watch that ends meanwhile drops what it held (its client resumes from the last version it received) |
//! | `noBookmarks` | never sends progress BOOKMARK events (the one ending a streaming list's initial events still goes) |
//! | `ignoreSendInitialEvents` | serves a streaming list as kube-apiserver before 1.27 did, ignoring the parameter: a watch from "now" with the state as ADDED events and no initial-events-end bookmark |
//! | `offline` | `{"mode":"refuse"}`: the server is down (connections refused, open ones dropped); `{"mode":"hang"}`: connections are accepted and nothing is answered, open watches stall; `forMs` ends it by itself |
//! | `clockSkewSecs` | the member's clock is that far off: timestamps it writes (creations, churn, controllers) move |
//! | `corruptEvents` | `{"kind":K,"every":N}`: watch events whose resourceVersion is a multiple of N are sent corrupted (see [`CorruptionKind`]) |
//!
//! Counters (`after N events`, `after T ms`) start when a stream starts or
//! when the faults are set, whichever is later, so a fault set while
//! kubefold's watches are open hits those watches too.
//!
//! Two more disturbances are actions rather than states:
//! `POST /sim/restore` ([`SimHandle::restore`](super::SimHandle::restore)), a
//! restore of etcd from a backup: every object keeps existing but gets a new,
//! lower resourceVersion, the history is gone and open watches are dropped;
//! and `POST /sim/burst` ([`SimHandle::burst`](super::SimHandle::burst)),
//! many pods created at once. `PUT /sim/churn` changes the churn rate.
//!
//! Cost when no fault is set: requests check one atomic flag; watch streams
//! also poll the (idle) fault channel beside their events; list bodies are
//! not touched. The simulator's own `/sim/*` endpoints are never faulted.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::list::ListOptions;
use super::status::ApiError;
use super::store;

/// The faults in force in one simulator. The default is none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Faults {
    /// Milliseconds every answer is delayed.
    pub latency_ms: u64,
    /// Up to this many more milliseconds, uniformly at random per request.
    pub latency_jitter_ms: u64,
    /// Fraction (0 to 1) of requests answered with `error_code`.
    pub error_rate: f64,
    /// The code of those answers, 500 to 599 (0: 500 InternalError).
    pub error_code: u16,
    /// Fraction (0 to 1) of requests answered 429 TooManyRequests.
    pub throttle_rate: f64,
    /// Seconds the 429 answers ask to wait in `Retry-After` (0: 1).
    pub retry_after_secs: u64,
    /// Fraction (0 to 1) of list responses whose connection is reset
    /// after half of the first chunk of the body.
    pub list_reset_rate: f64,
    /// Watch connections are reset after this many events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_reset_after_events: Option<u64>,
    /// Watch streams end cleanly after this many events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_close_after_events: Option<u64>,
    /// Watch streams end cleanly after this many milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_close_after_ms: Option<u64>,
    /// Open watches end with an ERROR event 410 Expired, and every watch
    /// from a resourceVersion gets only that event.
    pub expire_watches: bool,
    /// Streaming lists are refused (422), as without the `WatchList` feature.
    pub no_streaming_lists: bool,
    /// Progress BOOKMARK events are dropped.
    pub no_bookmarks: bool,
    /// Watch events are held back until this is cleared (a watch lagging
    /// behind the member's writes: clients' views are stale meanwhile).
    pub hold_watch_events: bool,
    /// `sendInitialEvents` is ignored, as by kube-apiserver before 1.27.
    pub ignore_send_initial_events: bool,
    /// The member is unreachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<Offline>,
    /// Seconds added to the member's clock (negative: behind).
    pub clock_skew_secs: i64,
    /// Outgoing watch events are corrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt_events: Option<Corruption>,
}

/// How the member is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Offline {
    /// Refused or hanging connections.
    pub mode: OfflineMode,
    /// Back online by itself after this many milliseconds (unset: until cleared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_ms: Option<u64>,
}

/// The two ways a member is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OfflineMode {
    /// The API server is down: nothing listens on the port (connection
    /// refused) and open connections are dropped.
    Refuse,
    /// A network partition: connections are accepted (by the kernel) but
    /// never answered, requests in progress and open watches stall.
    Hang,
}

/// Which watch events are corrupted and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Corruption {
    /// What is done to them.
    pub kind: CorruptionKind,
    /// Events whose resourceVersion is a multiple of this (1: every event).
    /// Chosen by resourceVersion, a resumed watch meets the same bad event.
    #[serde(default = "default_every")]
    pub every: u64,
}

fn default_every() -> u64 {
    1
}

/// A corruption of watch events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CorruptionKind {
    /// `metadata.name` removed.
    NoName,
    /// An annotation of 1.6 MB added (kube-apiserver's limit is 1.5 MiB).
    Huge,
    /// Bytes that are not UTF-8 inside an annotation value.
    InvalidUtf8,
    /// The event is sent twice.
    Duplicate,
    /// The event is held back and sent after the next event, whose
    /// resourceVersion is higher.
    OutOfOrder,
}

impl Faults {
    /// Whether any fault is set.
    pub fn any(&self) -> bool {
        *self != Faults::default()
    }

    /// Checks the ranges; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [("errorRate", self.error_rate), ("throttleRate", self.throttle_rate), ("listResetRate", self.list_reset_rate)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name} must be between 0 and 1, not {rate}"));
            }
        }
        if self.error_code != 0 && !(500..=599).contains(&self.error_code) {
            return Err(format!("errorCode must be between 500 and 599, not {}", self.error_code));
        }
        if self.corrupt_events.is_some_and(|c| c.every == 0) {
            return Err("corruptEvents.every must be at least 1".into());
        }
        // chrono's range ends in year 262143; stay well inside it.
        if self.clock_skew_secs.unsigned_abs() > 100 * 366 * 86_400 {
            return Err("clockSkewSecs must be within 100 years".into());
        }
        Ok(())
    }
}

/// What every stream and request sees: the faults and when they were set.
#[derive(Debug, Default)]
pub struct FaultSet {
    /// The faults in force.
    pub faults: Faults,
    /// Bumped on every change: counters restart.
    pub generation: u64,
    /// Bumped by a restore: every open watch is dropped.
    pub epoch: u64,
}

/// The fault state of one simulator, shared by its HTTP workers.
pub struct FaultState {
    active: AtomicBool,
    skew_secs: AtomicI64,
    set: watch::Sender<Arc<FaultSet>>,
    offline_until: Mutex<Option<Instant>>,
    /// The newest generation whose `offline` mode the server has acted on
    /// (stopped listening, paused, or listens and answers again).
    offline_applied: watch::Sender<u64>,
}

impl FaultState {
    /// The state with `faults` in force.
    pub fn new(faults: Faults) -> FaultState {
        let state = FaultState {
            active: AtomicBool::new(false),
            skew_secs: AtomicI64::new(0),
            set: watch::channel(Arc::new(FaultSet::default())).0,
            offline_until: Mutex::new(None),
            offline_applied: watch::channel(0).0,
        };
        state.replace(faults);
        state
    }

    /// Whether any fault is set (one atomic load: the normal path's only cost).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.set.borrow().faults.clone()
    }

    /// The current set.
    pub fn current(&self) -> Arc<FaultSet> {
        self.set.borrow().clone()
    }

    /// A receiver of every change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<FaultSet>> {
        self.set.subscribe()
    }

    /// Seconds the member's clock is off.
    pub fn clock_skew(&self) -> i64 {
        self.skew_secs.load(Ordering::Relaxed)
    }

    /// Puts `faults` in force (the caller validated them); returns their
    /// generation.
    pub fn replace(&self, faults: Faults) -> u64 {
        let until = faults.offline.and_then(|o| o.for_ms).map(|ms| Instant::now() + Duration::from_millis(ms));
        *self.offline_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
        self.active.store(faults.any(), Ordering::Relaxed);
        self.skew_secs.store(faults.clock_skew_secs, Ordering::Relaxed);
        let mut generation = 0;
        self.set.send_modify(|set| {
            generation = set.generation + 1;
            *set = Arc::new(FaultSet { faults, generation, epoch: set.epoch });
        });
        generation
    }

    /// Records that the server acted on the `offline` mode of `generation`.
    pub fn offline_applied(&self, generation: u64) {
        self.offline_applied.send_if_modified(|applied| {
            let newer = generation > *applied;
            if newer {
                *applied = generation;
            }
            newer
        });
    }

    /// Blocks (a caller's thread, not the server's) until the server acted
    /// on the `offline` mode of `generation` or `limit` passed; whether it did.
    pub fn wait_offline_applied(&self, generation: u64, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if *self.offline_applied.borrow() >= generation {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Drops every open watch (a restart of the API server).
    pub fn restart_watches(&self) {
        self.set.send_modify(|set| {
            *set = Arc::new(FaultSet { faults: set.faults.clone(), generation: set.generation + 1, epoch: set.epoch + 1 });
        });
    }

    /// When an offline period with `forMs` ends.
    pub fn offline_until(&self) -> Option<Instant> {
        *self.offline_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends an offline period (its `forMs` passed), keeping the other faults.
    pub fn end_offline(&self) {
        let mut faults = self.faults();
        if faults.offline.take().is_some() {
            tracing::info!("Offline period over.");
            self.replace(faults);
        }
    }

    fn hanging(&self) -> bool {
        self.set.borrow().faults.offline.is_some_and(|o| o.mode == OfflineMode::Hang)
    }

    /// Waits while the member hangs.
    async fn wait_while_hanging(&self) {
        let mut rx = self.subscribe();
        while rx.borrow_and_update().faults.offline.is_some_and(|o| o.mode == OfflineMode::Hang) {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// A Status answer of a fault.
fn status_response(code: u16, reason: &str, message: &str, retry_after: Option<u64>) -> actix_web::HttpResponse {
    let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code});
    if let Some(seconds) = retry_after {
        status["details"] = json!({"retryAfterSeconds": seconds});
    }
    let http = actix_web::http::StatusCode::from_u16(code).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = actix_web::HttpResponse::build(http);
    response.content_type("application/json");
    if let Some(seconds) = retry_after {
        response.insert_header(("Retry-After", seconds.to_string()));
    }
    response.body(status.to_string())
}

/// The per-request faults: hang, latency, then an error or 429 answer
/// instead of the real one. Only called when [`FaultState::active`].
pub async fn before_request(state: &FaultState) -> Option<actix_web::HttpResponse> {
    if state.hanging() {
        state.wait_while_hanging().await;
    }
    let faults = state.faults();
    let (delay, error, throttle) = {
        let mut rng = rand::rng();
        let jitter = if faults.latency_jitter_ms > 0 { rng.random_range(0..=faults.latency_jitter_ms) } else { 0 };
        (faults.latency_ms + jitter, rng.random_bool(faults.error_rate), rng.random_bool(faults.throttle_rate))
    };
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if error {
        let code = if faults.error_code == 0 { 500 } else { faults.error_code };
        let (reason, message) = match code {
            503 => ("ServiceUnavailable", "the server is currently unable to handle the request"),
            504 => ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
            _ => ("InternalError", "Internal error occurred: injected fault"),
        };
        return Some(status_response(code, reason, message, None));
    }
    if throttle {
        let seconds = faults.retry_after_secs.max(1);
        return Some(status_response(429, "TooManyRequests", "Too many requests, please try again later.", Some(seconds)));
    }
    None
}

/// The faults that answer a watch request at once: a streaming list
/// refused (`noStreamingLists`: 422, as kube-apiserver's validation without
/// the `WatchList` feature) or, in a 410 storm, a watch from a
/// resourceVersion answered with one ERROR event, as kube-apiserver answers
/// a watch from a compacted version.
pub fn refused_watch(state: &FaultState, options: &ListOptions, head: u64) -> Option<actix_web::HttpResponse> {
    if !state.active() {
        return None;
    }
    let faults = state.faults();
    if options.send_initial_events == Some(true) {
        if !faults.no_streaming_lists {
            return None;
        }
        let error = ApiError::Invalid {
            group: "meta.k8s.io".into(),
            kind: "ListOptions".into(),
            name: String::new(),
            causes: vec![super::status::Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            )],
        };
        return Some(actix_web::ResponseError::error_response(&error));
    }
    if !faults.expire_watches {
        return None;
    }
    let rv = options.resource_version.as_deref().filter(|rv| !rv.is_empty() && *rv != "0")?;
    let frame = expired_frame(&format!("too old resource version: {rv} ({head})"));
    Some(actix_web::HttpResponse::Ok().content_type("application/json").insert_header(("Cache-Control", "no-cache, private")).body(frame))
}

/// An ERROR event line, 410 Expired.
fn expired_frame(message: &str) -> Bytes {
    let error = ApiError::Expired { message: message.to_string(), continue_token: None };
    store::frame("ERROR", &serde_json::to_vec(&error.to_status()).unwrap_or_default())
}

/// A body that cannot fail, as one that can (for [`list_body`]).
pub fn infallible<S>(body: S) -> impl Stream<Item = Result<Bytes, std::io::Error>> + 'static
where
    S: Stream<Item = Result<Bytes, std::convert::Infallible>> + 'static,
{
    body.map(|chunk| chunk.map_err(|never| match never {}))
}

/// An injected connection reset: the body ends with an error, so the
/// connection is closed without the terminating chunk.
fn reset() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected connection reset")
}

/// A list body (or a streaming list's), reset halfway through its first
/// chunk at the fault's rate. The reset waits a moment after the partial
/// chunk, so that it reaches the client before the connection closes.
pub fn list_body<S>(state: &FaultState, body: S) -> impl Stream<Item = Result<Bytes, std::io::Error>> + 'static
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + 'static,
{
    let reset_now = state.active() && rand::rng().random_bool(state.set.borrow().faults.list_reset_rate);
    if !reset_now {
        return futures::future::Either::Left(body);
    }
    let truncated = body.take(1).flat_map(|chunk| match chunk {
        Ok(bytes) => futures::stream::once(futures::future::ready(Ok(bytes.slice(..bytes.len() / 2))))
            .chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(reset())
            }))
            .boxed_local(),
        Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed_local(),
    });
    futures::future::Either::Right(truncated)
}

/// A watch body under the faults in force, re-read as they change.
pub fn watch_body<S>(state: &FaultState, body: S) -> impl Stream<Item = Result<Bytes, std::io::Error>> + 'static
where
    S: Stream<Item = Result<Bytes, std::convert::Infallible>> + 'static,
{
    let faults = state.subscribe();
    let set = faults.borrow().clone();
    let stream = WatchFaults {
        inner: Box::pin(body),
        generation: set.generation,
        epoch: set.epoch,
        faults,
        events: 0,
        window: Instant::now(),
        held: None,
        lagging: VecDeque::new(),
        out: VecDeque::new(),
        end: None,
    };
    futures::stream::unfold(stream, |mut s| async move { s.next_chunk().await.map(|chunk| (chunk, s)) })
}

/// How a faulted watch stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Cleanly (terminating chunk).
    Close,
    /// With a connection reset.
    Reset,
}

struct WatchFaults {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, std::convert::Infallible>>>>,
    faults: watch::Receiver<Arc<FaultSet>>,
    generation: u64,
    epoch: u64,
    /// Events sent since `window` began.
    events: u64,
    /// When the stream started or the faults last changed.
    window: Instant,
    /// An out-of-order event waiting for the next one.
    held: Option<Bytes>,
    /// Chunks held back by `holdWatchEvents`, oldest first.
    lagging: VecDeque<Bytes>,
    /// Event lines ready to send.
    out: VecDeque<Bytes>,
    /// Set once the stream must end, after `out` is sent.
    end: Option<End>,
}

impl WatchFaults {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if let Some(chunk) = self.ready() {
                return Some(Ok(chunk));
            }
            match self.end {
                Some(End::Close) => return None,
                Some(End::Reset) => {
                    self.end = Some(End::Close);
                    // Let the events before the reset reach the client first.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return Some(Err(reset()));
                }
                None => {}
            }
            let set = self.faults.borrow_and_update().clone();
            if set.epoch != self.epoch {
                // The API server restarted: the connection is gone.
                self.end = Some(End::Reset);
                continue;
            }
            if set.generation != self.generation {
                self.generation = set.generation;
                self.events = 0;
                self.window = Instant::now();
                if set.faults.expire_watches {
                    // A 410 storm begins: open watches are told their version is gone.
                    self.out.push_back(expired_frame("too old resource version"));
                    self.end = Some(End::Close);
                    continue;
                }
            }
            if !set.faults.hold_watch_events && !self.lagging.is_empty() {
                // The lag is over: what was held goes out first, in order.
                self.out.extend(self.lagging.drain(..));
                continue;
            }
            let faults = &set.faults;
            if faults.offline.is_some_and(|o| o.mode == OfflineMode::Hang) {
                // Partitioned: nothing flows until the faults change.
                if self.faults.changed().await.is_err() {
                    return None;
                }
                continue;
            }
            let close_at = faults.watch_close_after_ms.map(|ms| self.window + Duration::from_millis(ms));
            let idle = async {
                match close_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // A change of the faults first: a chunk that became ready
                // together with it must meet the new faults (a watch held
                // from now on must not let it through).
                biased;
                changed = self.faults.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = idle => self.end = Some(End::Close),
                chunk = self.inner.next() => match chunk {
                    None => {
                        if let Some(held) = self.held.take() {
                            self.out.push_back(held);
                        }
                        self.end = Some(End::Close);
                    }
                    Some(Ok(chunk)) if set.faults.hold_watch_events => self.lagging.push_back(chunk),
                    Some(Ok(chunk)) if !set.faults.any() && self.held.is_none() => return Some(Ok(chunk)),
                    Some(Ok(chunk)) => self.apply(&set.faults, &chunk),
                    Some(Err(never)) => match never {},
                },
            }
        }
    }

    /// The event lines ready, as one chunk.
    fn ready(&mut self) -> Option<Bytes> {
        if self.out.is_empty() {
            return None;
        }
        let mut chunk = BytesMut::new();
        for line in self.out.drain(..) {
            chunk.put_slice(&line);
        }
        Some(chunk.freeze())
    }

    /// Applies the per-event faults to the lines of one chunk.
    fn apply(&mut self, faults: &Faults, chunk: &Bytes) {
        let mut start = 0;
        while start < chunk.len() && self.end.is_none() {
            let end = chunk[start..].iter().position(|b| *b == b'\n').map_or(chunk.len(), |i| start + i + 1);
            let line = chunk.slice(start..end);
            start = end;
            if line.starts_with(b"{\"type\":\"BOOKMARK\"") {
                let ends_initial_events = line.windows(INITIAL_EVENTS_END.len()).any(|w| w == INITIAL_EVENTS_END);
                if !faults.no_bookmarks || ends_initial_events {
                    self.out.push_back(line);
                }
                continue;
            }
            if self.limit_reached(faults) {
                break;
            }
            self.events += 1;
            self.send_event(faults, line);
            self.limit_reached(faults);
        }
    }

    /// Ends the stream when its event budget is spent.
    fn limit_reached(&mut self, faults: &Faults) -> bool {
        if faults.watch_reset_after_events.is_some_and(|n| self.events >= n) {
            self.end = Some(End::Reset);
        } else if faults.watch_close_after_events.is_some_and(|n| self.events >= n) {
            self.end = Some(End::Close);
        }
        self.end.is_some()
    }

    /// Sends one event line, corrupted when its version says so.
    fn send_event(&mut self, faults: &Faults, line: Bytes) {
        let corruption = faults.corrupt_events.filter(|c| event_rv(&line).is_some_and(|rv| rv % c.every == 0));
        let Some(corruption) = corruption else {
            self.out.push_back(line);
            if let Some(held) = self.held.take() {
                self.out.push_back(held);
            }
            return;
        };
        match corruption.kind {
            CorruptionKind::Duplicate => {
                self.out.push_back(line.clone());
                self.out.push_back(line);
            }
            CorruptionKind::OutOfOrder => match self.held.take() {
                // Two in a row: the later one goes first.
                Some(held) => {
                    self.out.push_back(line);
                    self.out.push_back(held);
                }
                None => self.held = Some(line),
            },
            kind => self.out.push_back(corrupt(&line, kind)),
        }
        if corruption.kind != CorruptionKind::OutOfOrder {
            if let Some(held) = self.held.take() {
                self.out.push_back(held);
            }
        }
    }
}

/// The `metadata.resourceVersion` of an event line's object.
fn event_rv(line: &[u8]) -> Option<u64> {
    let event: Value = serde_json::from_slice(line).ok()?;
    event["object"]["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &[u8] = b"k8s.io/initial-events-end";

/// Where invalid UTF-8 goes in a line ([`CorruptionKind::InvalidUtf8`]).
const INVALID_UTF8_MARK: &str = "sim-invalid-utf8-mark";

/// The annotation that carries a corruption.
const CORRUPT_ANNOTATION: &str = "sim.kubefold.io/corrupt";

/// Size of the annotation of [`CorruptionKind::Huge`]: over kube-apiserver's 1.5 MiB object limit.
pub const HUGE_BYTES: usize = 1_600_000;

/// One event line corrupted by `kind` (`NoName`, `Huge`, `InvalidUtf8`).
fn corrupt(line: &Bytes, kind: CorruptionKind) -> Bytes {
    let Ok(mut event) = serde_json::from_slice::<Value>(line) else { return line.clone() };
    let metadata = &mut event["object"]["metadata"];
    match kind {
        CorruptionKind::NoName => {
            if let Some(m) = metadata.as_object_mut() {
                m.remove("name");
            }
        }
        CorruptionKind::Huge => {
            metadata["annotations"][CORRUPT_ANNOTATION] = json!("x".repeat(HUGE_BYTES));
        }
        CorruptionKind::InvalidUtf8 => {
            metadata["annotations"][CORRUPT_ANNOTATION] = json!(INVALID_UTF8_MARK);
        }
        CorruptionKind::Duplicate | CorruptionKind::OutOfOrder => return line.clone(),
    }
    let mut text = serde_json::to_vec(&event).unwrap_or_default();
    if kind == CorruptionKind::InvalidUtf8 {
        if let Some(at) = text.windows(INVALID_UTF8_MARK.len()).position(|w| w == INVALID_UTF8_MARK.as_bytes()) {
            text.splice(at..at + INVALID_UTF8_MARK.len(), [b'b', b'a', b'd', 0xff, 0xfe, 0xc3, b'(']);
        }
    }
    text.push(b'\n');
    Bytes::from(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(event_type: &str, name: &str, rv: u64) -> Bytes {
        let object = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "a", "resourceVersion": rv.to_string()}});
        store::frame(event_type, object.to_string().as_bytes())
    }

    fn stream_of(lines: Vec<Bytes>) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + 'static {
        futures::stream::iter(lines.into_iter().map(Ok))
    }

    /// The events (type, name, rv) a faulted watch sends, and whether it ended with a reset.
    async fn run(state: &FaultState, lines: Vec<Bytes>) -> (Vec<(String, String, u64)>, bool) {
        let mut body = Box::pin(watch_body(state, stream_of(lines)));
        let mut events = Vec::new();
        let mut reset = false;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => {
                    for l in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                        let e: Value = serde_json::from_slice(l).unwrap_or(json!({"type": "UNREADABLE"}));
                        events.push((
                            e["type"].as_str().unwrap_or_default().to_string(),
                            e["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                            e["object"]["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0),
                        ));
                    }
                }
                Err(_) => {
                    reset = true;
                    break;
                }
            }
        }
        (events, reset)
    }

    fn five() -> Vec<Bytes> {
        (1..=5).map(|i| line("MODIFIED", &format!("p{i}"), 10 + i)).collect()
    }

    #[tokio::test]
    async fn without_faults_the_stream_is_unchanged() {
        let state = FaultState::new(Faults::default());
        assert!(!state.active());
        let (events, reset) = run(&state, five()).await;
        assert_eq!(events.iter().map(|e| e.2).collect::<Vec<_>>(), [11, 12, 13, 14, 15]);
        assert!(!reset);
    }

    #[tokio::test]
    async fn watches_reset_or_close_after_n_events() {
        let state = FaultState::new(Faults { watch_reset_after_events: Some(2), ..Faults::default() });
        let (events, reset) = run(&state, five()).await;
        assert_eq!((events.len(), reset), (2, true));
        state.replace(Faults { watch_close_after_events: Some(3), ..Faults::default() });
        let (events, reset) = run(&state, five()).await;
        assert_eq!((events.len(), reset), (3, false));
    }

    #[tokio::test]
    async fn progress_bookmarks_can_be_suppressed() {
        let state = FaultState::new(Faults { no_bookmarks: true, ..Faults::default() });
        let mut lines = five();
        lines.insert(2, line("BOOKMARK", "", 12));
        let end = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "10", "annotations": {"k8s.io/initial-events-end": "true"}}});
        lines.insert(0, store::frame("BOOKMARK", end.to_string().as_bytes()));
        let (events, _) = run(&state, lines).await;
        assert_eq!(events.iter().filter(|e| e.0 == "BOOKMARK").count(), 1, "only the initial-events-end bookmark");
        assert_eq!(events.len(), 6);
    }

    #[tokio::test]
    async fn corruptions_follow_the_resource_version() {
        let corrupt = |kind| Faults { corrupt_events: Some(Corruption { kind, every: 2 }), ..Faults::default() };
        let state = FaultState::new(corrupt(CorruptionKind::Duplicate));
        let (events, _) = run(&state, five()).await;
        assert_eq!(events.iter().map(|e| e.2).collect::<Vec<_>>(), [11, 12, 12, 13, 14, 14, 15]);
        state.replace(corrupt(CorruptionKind::OutOfOrder));
        let (events, _) = run(&state, five()).await;
        assert_eq!(events.iter().map(|e| e.2).collect::<Vec<_>>(), [11, 13, 12, 15, 14]);
        state.replace(corrupt(CorruptionKind::NoName));
        let (events, _) = run(&state, five()).await;
        assert_eq!(events.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(), ["p1", "", "p3", "", "p5"]);
        state.replace(corrupt(CorruptionKind::Huge));
        let mut body = Box::pin(watch_body(&state, stream_of(five())));
        let mut bytes = 0;
        while let Some(Ok(chunk)) = body.next().await {
            bytes += chunk.len();
        }
        assert!(bytes > 2 * HUGE_BYTES);
        state.replace(corrupt(CorruptionKind::InvalidUtf8));
        let mut body = Box::pin(watch_body(&state, stream_of(five())));
        let mut all = Vec::new();
        while let Some(Ok(chunk)) = body.next().await {
            all.extend_from_slice(&chunk);
        }
        let lines: Vec<&[u8]> = all.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        let invalid: Vec<bool> = lines.iter().map(|l| std::str::from_utf8(l).is_err()).collect();
        assert_eq!(invalid, [false, true, false, true, false]);
    }

    #[tokio::test]
    async fn a_restart_resets_open_watches() {
        let state = FaultState::new(Faults::default());
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::convert::Infallible>>();
        let mut body = Box::pin(watch_body(&state, rx));
        tx.unbounded_send(Ok(line("ADDED", "a", 5))).unwrap();
        assert!(body.next().await.unwrap().is_ok());
        state.restart_watches();
        assert!(body.next().await.unwrap().is_err(), "the connection is reset");
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn held_watch_events_are_sent_in_order_once_released() {
        let state = FaultState::new(Faults { hold_watch_events: true, ..Faults::default() });
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::convert::Infallible>>();
        let mut body = Box::pin(watch_body(&state, rx));
        for (i, name) in ["a", "b"].into_iter().enumerate() {
            tx.unbounded_send(Ok(line("ADDED", name, 5 + i as u64))).unwrap();
        }
        let waited = tokio::time::timeout(Duration::from_millis(100), body.next()).await;
        assert!(waited.is_err(), "nothing is sent while the events are held");
        state.replace(Faults::default());
        let chunk = body.next().await.unwrap().unwrap();
        let names: Vec<String> = chunk
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<Value>(l).unwrap()["object"]["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
        tx.unbounded_send(Ok(line("MODIFIED", "c", 7))).unwrap();
        assert!(body.next().await.unwrap().is_ok(), "later events flow again");
    }

    #[tokio::test]
    async fn a_410_storm_ends_open_watches_with_an_expired_event() {
        let state = FaultState::new(Faults::default());
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::convert::Infallible>>();
        let mut body = Box::pin(watch_body(&state, rx));
        tx.unbounded_send(Ok(line("ADDED", "a", 5))).unwrap();
        assert!(body.next().await.unwrap().is_ok());
        state.replace(Faults { expire_watches: true, ..Faults::default() });
        let last = body.next().await.unwrap().unwrap();
        let event: Value = serde_json::from_slice(&last).unwrap();
        assert_eq!((event["type"].as_str(), event["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn list_resets_send_part_of_the_body_then_fail() {
        let state = FaultState::new(Faults { list_reset_rate: 1.0, ..Faults::default() });
        let body = futures::stream::iter([Ok(Bytes::from_static(b"0123456789")), Ok(Bytes::from_static(b"rest"))]);
        let chunks: Vec<Result<Bytes, std::io::Error>> = list_body(&state, body).collect().await;
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].as_ref().unwrap().as_ref(), b"01234");
        assert!(chunks[1].is_err());
    }

    #[test]
    fn faults_are_camel_case_json_and_validated() {
        let faults: Faults = serde_json::from_value(json!({
            "latencyMs": 5, "errorRate": 0.5, "errorCode": 503, "offline": {"mode": "refuse", "forMs": 100},
            "corruptEvents": {"kind": "invalidUtf8"}
        }))
        .unwrap();
        assert_eq!(faults.corrupt_events, Some(Corruption { kind: CorruptionKind::InvalidUtf8, every: 1 }));
        assert_eq!(faults.offline, Some(Offline { mode: OfflineMode::Refuse, for_ms: Some(100) }));
        assert!(faults.validate().is_ok());
        assert!(serde_json::from_value::<Faults>(json!({"latency": 5})).is_err());
        assert!(Faults { error_rate: 2.0, ..Faults::default() }.validate().is_err());
        assert!(!Faults::default().any());
        assert_eq!(serde_json::to_value(Faults::default()).unwrap()["errorRate"], 0.0);
    }
}
