//! Watch streams, as the Kubernetes docs "API Concepts" describe them
//! (sections "Efficient detection of changes", "Watch bookmarks", "Streaming
//! lists") and kube-apiserver's watch cache serves them (`cacher.go`,
//! `cache_watcher.go`).
//!
//! A stream is a chunked HTTP 200 response with one JSON event per line.
//! `resourceVersion` unset or `0` starts with synthetic ADDED events for the
//! current state; `N` replays every retained change after `N`; an `N` older
//! than the history gets one ERROR event (410 Expired) and ends. Selectors
//! filter events the way the watch cache does: an object that stops matching
//! is sent as DELETED, one that starts matching as ADDED. A watcher that
//! falls behind the fan-out buffer is closed, as kube-apiserver closes
//! unresponsive watchers; writers never wait for watchers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kubefold_engine::resources::ResourceType;
use rand::Rng;
use serde_json::json;
use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::list::{parse_rv, ListOptions, CHUNK};
use super::status::{ApiError, Result};
use super::store::{self, Change, ChangeType, Object, Store};
use super::table::TableFormat;
use super::Shared;

/// kube-apiserver's `--min-request-timeout` default; a watch without
/// `timeoutSeconds` lasts a random time in `[1800, 3600)` seconds.
const MIN_REQUEST_TIMEOUT: u64 = 1800;

/// Which events a watcher receives.
#[derive(Debug, Clone)]
pub struct WatchFilter {
    /// Index of the watched type.
    pub resource: usize,
    /// Key prefix of the watched namespace (`""` for all).
    pub prefix: String,
    /// The selectors of the request.
    pub options: ListOptions,
}

impl WatchFilter {
    /// The event line a change becomes for this watcher, if any.
    pub fn frame(&self, change: &Change) -> Option<Bytes> {
        if change.resource != self.resource || !change.key.starts_with(&self.prefix) {
            return None;
        }
        if !self.options.has_selectors() {
            return Some(change.frame.clone());
        }
        let current = change.change_type != ChangeType::Deleted && self.options.matches(&change.object);
        let previous = change.previous.as_ref().is_some_and(|p| self.options.matches(p));
        match (current, previous) {
            (true, true) => Some(change.frame.clone()),
            (true, false) => Some(store::frame("ADDED", &change.object.bytes())),
            (false, true) => match change.change_type {
                ChangeType::Deleted => Some(change.frame.clone()),
                // The previous state with the change's version, as the watch cache sends it.
                _ => {
                    let mut previous = change.previous.as_ref()?.value();
                    previous["metadata"]["resourceVersion"] = json!(change.rv.to_string());
                    Some(store::frame("DELETED", &serde_json::to_vec(&previous).unwrap_or_default()))
                }
            },
            (false, false) => None,
        }
    }
}

/// How a watch begins, decided under the store lock.
pub enum Start {
    /// Synthetic ADDED events for these objects, then live changes (and,
    /// for `sendInitialEvents=true`, the `k8s.io/initial-events-end` bookmark at `rv`).
    Initial {
        /// The current objects that match.
        objects: Vec<Arc<Object>>,
        /// The version they were read at.
        rv: u64,
        /// Whether to end the initial events with a bookmark.
        end_bookmark: bool,
    },
    /// Replay of retained changes after the requested version, then live changes.
    Resume {
        /// The matching event lines.
        frames: Vec<Bytes>,
        /// The requested version.
        rv: u64,
    },
    /// The requested version is older than the history: one ERROR event.
    Expired(ApiError),
}

/// Decides how a watch begins and subscribes to live changes, atomically
/// with respect to writers (the caller holds the store lock).
pub fn begin(store: &Store, filter: &WatchFilter) -> Result<(Start, broadcast::Receiver<Arc<Change>>)> {
    let receiver = store.subscribe();
    let options = &filter.options;
    let rv = options.resource_version.as_deref();
    let initial = match options.send_initial_events {
        Some(send) => send,
        None => matches!(rv, None | Some("0")),
    };
    let start = if initial {
        let objects = store
            .range(filter.resource, &filter.prefix)
            .filter(|(_, o)| options.matches(o))
            .map(|(_, o)| o.clone())
            .collect();
        Start::Initial { objects, rv: store.rv(), end_bookmark: options.send_initial_events == Some(true) }
    } else {
        let from = match rv {
            None | Some("0") => store.rv(),
            Some(n) => parse_rv(n)?,
        };
        match store.changes_after(from) {
            Ok(changes) => Start::Resume { frames: changes.filter_map(|c| filter.frame(c)).collect(), rv: from },
            Err(compacted) => Start::Expired(ApiError::Expired {
                message: format!("too old resource version: {from} ({})", compacted.compacted),
                continue_token: None,
            }),
        }
    };
    Ok((start, receiver))
}

/// The state of one watch stream.
struct Watcher {
    shared: Arc<Shared>,
    filter: WatchFilter,
    kind: String,
    api_version: String,
    /// Objects still to send as synthetic ADDED events.
    initial: VecDeque<Arc<Object>>,
    /// Event lines ready to send.
    pending: VecDeque<Bytes>,
    /// The bookmark ending the initial events, sent after them.
    end_bookmark: Option<u64>,
    receiver: broadcast::Receiver<Arc<Change>>,
    /// Every change up to this version has been sent or filtered out.
    rv: u64,
    bookmarks: Option<Interval>,
    deadline: Instant,
    shutdown: CancellationToken,
    finished: bool,
    /// Print events as Tables (kubectl get -w), column definitions in the first only.
    table: Option<TableFormat>,
    table_headers_sent: bool,
}

/// The body of a watch response.
pub fn stream(
    shared: Arc<Shared>,
    resource: &ResourceType,
    filter: WatchFilter,
    start: Start,
    receiver: broadcast::Receiver<Arc<Change>>,
    bookmark_interval: Duration,
    table: Option<TableFormat>,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let timeout = filter.options.timeout_seconds.unwrap_or_else(|| {
        rand::rng().random_range(MIN_REQUEST_TIMEOUT..2 * MIN_REQUEST_TIMEOUT)
    });
    let bookmarks = filter.options.allow_watch_bookmarks.then(|| {
        let mut interval = tokio::time::interval_at(Instant::now() + bookmark_interval, bookmark_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let mut watcher = Watcher {
        shutdown: shared.shutdown.clone(),
        shared,
        filter,
        kind: resource.kind.clone(),
        api_version: resource.api_version(),
        initial: VecDeque::new(),
        pending: VecDeque::new(),
        end_bookmark: None,
        receiver,
        rv: 0,
        bookmarks,
        deadline: Instant::now() + Duration::from_secs(timeout),
        finished: false,
        table,
        table_headers_sent: false,
    };
    match start {
        Start::Initial { objects, rv, end_bookmark } => {
            watcher.initial = objects.into();
            watcher.rv = rv;
            watcher.end_bookmark = end_bookmark.then_some(rv);
        }
        Start::Resume { frames, rv } => {
            watcher.pending = frames.into();
            watcher.rv = rv;
        }
        Start::Expired(error) => {
            let status = serde_json::to_vec(&error.to_status()).unwrap_or_default();
            watcher.pending.push_back(store::frame("ERROR", &status));
            watcher.finished = true;
        }
    }
    futures::stream::unfold(watcher, |mut w| async move { w.next_chunk().await.map(|chunk| (Ok(chunk), w)) })
}

impl Watcher {
    /// The next chunk of event lines, `None` when the stream ends.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(chunk) = self.ready_chunk() {
                return Some(chunk);
            }
            if self.finished {
                return None;
            }
            let bookmark_tick = async {
                match &mut self.bookmarks {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return None,
                _ = tokio::time::sleep_until(self.deadline) => return None,
                received = self.receiver.recv() => match received {
                    Ok(change) => {
                        self.accept(&change);
                        self.drain();
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, rv = self.rv, "Slow watcher closed.");
                        self.finished = true;
                    }
                    Err(broadcast::error::RecvError::Closed) => self.finished = true,
                },
                _ = bookmark_tick => {
                    // Every change up to `head` is already in the channel (sent under the lock).
                    let head = self.shared.store.read().map(|s| s.rv()).unwrap_or(self.rv);
                    self.drain();
                    if !self.finished {
                        self.rv = self.rv.max(head);
                        let bookmark = self.bookmark(self.rv, false);
                        self.pending.push_back(bookmark);
                    }
                }
            }
        }
    }

    /// Sends or filters out one change.
    fn accept(&mut self, change: &Change) {
        if change.rv <= self.rv {
            return;
        }
        self.rv = change.rv;
        if let Some(frame) = self.filter.frame(change) {
            self.pending.push_back(frame);
        }
    }

    /// Takes every change already in the channel.
    fn drain(&mut self) {
        loop {
            match self.receiver.try_recv() {
                Ok(change) => self.accept(&change),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Lagged(missed)) => {
                    tracing::warn!(missed, rv = self.rv, "Slow watcher closed.");
                    self.finished = true;
                    return;
                }
                Err(TryRecvError::Closed) => {
                    self.finished = true;
                    return;
                }
            }
        }
    }

    /// Up to [`CHUNK`] bytes of ready event lines.
    fn ready_chunk(&mut self) -> Option<Bytes> {
        if self.initial.is_empty() && self.pending.is_empty() {
            if let Some(rv) = self.end_bookmark.take() {
                let bookmark = self.bookmark(rv, true);
                return Some(self.render(bookmark));
            }
            return None;
        }
        let mut out = BytesMut::new();
        while out.len() < CHUNK {
            let frame = if let Some(object) = self.initial.pop_front() {
                store::frame("ADDED", &object.bytes())
            } else if let Some(rv) = self.end_bookmark.take() {
                self.bookmark(rv, true)
            } else if let Some(frame) = self.pending.pop_front() {
                frame
            } else {
                break;
            };
            let frame = self.render(frame);
            out.put_slice(&frame);
        }
        Some(out.freeze())
    }

    /// The event line as sent: as is, or with its object printed as a Table.
    fn render(&mut self, frame: Bytes) -> Bytes {
        let Some(format) = &self.table else { return frame };
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(&frame) else { return frame };
        let event_type = event["type"].as_str().unwrap_or_default();
        let object = &event["object"];
        let metadata = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
        let headers = !self.table_headers_sent;
        let table = match event_type {
            "ADDED" | "MODIFIED" | "DELETED" => {
                format.table(std::slice::from_ref(object), metadata, headers, chrono::Utc::now())
            }
            "BOOKMARK" => {
                let mut table = format.table(&[], metadata, false, chrono::Utc::now());
                if let Some(annotations) = object["metadata"].get("annotations") {
                    table["metadata"]["annotations"] = annotations.clone();
                }
                table
            }
            _ => return frame,
        };
        if event_type != "BOOKMARK" {
            self.table_headers_sent = true;
        }
        store::frame(event_type, table.to_string().as_bytes())
    }

    /// A BOOKMARK event line: only kind, apiVersion and the resourceVersion
    /// (plus the `k8s.io/initial-events-end` annotation ending initial events).
    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata});
        store::frame("BOOKMARK", object.to_string().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::selector::LabelSelector;
    use serde_json::{json, Value};

    fn setup() -> (Store, usize) {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 5, 100, 1);
        store.load(0, json!({"metadata": {"name": "a", "namespace": "x", "uid": "a", "labels": {"app": "web"}}}));
        store.finish_load();
        (store, 0)
    }

    fn event(frame: &Bytes) -> (String, Value) {
        let v: Value = serde_json::from_slice(frame).unwrap();
        (v["type"].as_str().unwrap().to_string(), v["object"].clone())
    }

    fn pod(name: &str, app: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "x", "uid": name, "labels": {"app": app}}})
    }

    #[test]
    fn objects_leaving_and_entering_a_selector_become_deleted_and_added() {
        let (mut store, pods) = setup();
        let options = ListOptions { label_selector: LabelSelector::parse("app=web").unwrap(), ..Default::default() };
        let filter = WatchFilter { resource: pods, prefix: String::new(), options };
        let leave = store.put(pods, "x/a", pod("a", "db"));
        let (kind, object) = event(&filter.frame(&leave).unwrap());
        assert_eq!(kind, "DELETED");
        assert_eq!(object["metadata"]["labels"]["app"], "web", "the previous state");
        assert_eq!(object["metadata"]["resourceVersion"], leave.rv.to_string());
        let other = store.put(pods, "x/a", pod("a", "cache"));
        assert!(filter.frame(&other).is_none());
        let enter = store.put(pods, "x/a", pod("a", "web"));
        assert_eq!(event(&filter.frame(&enter).unwrap()).0, "ADDED");
        let stay = store.put(pods, "x/a", json!({"metadata": {"name": "a", "namespace": "x", "uid": "a", "labels": {"app": "web", "v": "2"}}}));
        assert_eq!(event(&filter.frame(&stay).unwrap()).0, "MODIFIED");
        let gone = store.remove(pods, "x/a", stay.object.value()).unwrap();
        assert_eq!(event(&filter.frame(&gone).unwrap()).0, "DELETED");
    }

    #[test]
    fn begin_replays_history_or_expires() {
        let (mut store, pods) = setup();
        for i in 0..3 {
            store.put(pods, &format!("x/p{i}"), pod(&format!("p{i}"), "web"));
        }
        let filter = |rv: &str| WatchFilter {
            resource: pods,
            prefix: "x/".into(),
            options: ListOptions { resource_version: Some(rv.into()), watch: true, ..Default::default() },
        };
        let (start, _) = begin(&store, &filter("101")).unwrap();
        match start {
            Start::Resume { frames, rv } => {
                assert_eq!(rv, 101);
                let names: Vec<String> = frames.iter().map(|f| event(f).1["metadata"]["name"].as_str().unwrap().into()).collect();
                assert_eq!(names, ["p1", "p2"]);
            }
            _ => panic!("expected a resume"),
        }
        for i in 3..10 {
            store.put(pods, &format!("x/p{i}"), pod(&format!("p{i}"), "web"));
        }
        match begin(&store, &filter("101")).unwrap().0 {
            Start::Expired(error) => assert_eq!(error.to_string(), "too old resource version: 101 (105)"),
            _ => panic!("expected expiry"),
        }
        match begin(&store, &filter("0")).unwrap().0 {
            Start::Initial { objects, rv, end_bookmark } => {
                assert_eq!(objects.len(), 11);
                assert_eq!(rv, store.rv());
                assert!(!end_bookmark);
            }
            _ => panic!("expected initial events"),
        }
    }
}
