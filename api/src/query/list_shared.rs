//! The rest of a long JSON list written by the HTTP worker and one helper
//! thread together: both take the list's batches in turn as they come
//! from its feed, each makes the chunks of the batches it took, and the
//! worker sends them in order. The worker never waits for the helper while
//! a batch is left to make: it makes the next one itself, as it does
//! alone (see [`List::rest_on_worker`]), so the helper only adds the other
//! core's idle time to the list and cannot slow it below the worker's own
//! pace. The two share one [`ReadCache`], so that a span of the log read
//! for one batch serves the next batches whoever makes them.
//!
//! Why not the producers of a Table or gzip list: a plain list costs the
//! worker little beyond its sends, and producers that made every chunk
//! left the client's core the busier one (2M pods over 1,000 members: the
//! producers' core held the client, the feed and the decoding).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use bytes::Bytes;
use kubefold_store::{ChunkBuf, ReadCache, Store};

use super::list::{feed, Feed, ItemWriter, List, ListCluster, ListFailed, ListItem};
use super::list_stream::{give_back, taking_turns, write_batch, PooledChunk, StreamingList};

/// Batches made ahead of the one being sent, at most: the chunks waiting
/// to be sent are at most this many batches' (about 8 MB at 4 KB an object).
const MADE_AHEAD: u64 = 16;

/// A batch of the list as fed: its place among the list's batches, the
/// place of its first item in the list, its items and the clusters they
/// name.
struct Batch {
    place: u64,
    first: usize,
    items: Vec<ListItem>,
    clusters: Arc<Vec<ListCluster>>,
}

/// What the worker, the helper and the feed share.
struct Shared {
    state: Mutex<State>,
    /// The helper waits here for a batch to take, or for room to make it.
    helper: Condvar,
    cache: Mutex<ReadCache>,
    store: Store,
    writer: Arc<ItemWriter>,
}

#[derive(Default)]
struct State {
    /// Batches fed and not taken yet, in order.
    queue: VecDeque<Batch>,
    /// Batches fed so far.
    fed: u64,
    /// The number of the list's batches, once its end is fed.
    end: Option<u64>,
    /// The feed stopped before the end (it failed).
    feed_stopped: bool,
    /// Batches made and not sent yet, by place: their chunks, or why the
    /// list cannot go on.
    made: BTreeMap<u64, Result<VecDeque<ChunkBuf>, String>>,
    /// The place of the batch sent next.
    sending: u64,
    /// The worker's task, waiting for the helper or the feed.
    waker: Option<Waker>,
    /// The client went away: the helper and the feed stop.
    closed: bool,
}

impl State {
    /// The next batch to make, taken from the queue, unless it is more
    /// than [`MADE_AHEAD`] batches ahead of the one being sent.
    fn take(&mut self) -> Option<Batch> {
        self.queue.front().filter(|batch| batch.place < self.sending + MADE_AHEAD)?;
        self.queue.pop_front()
    }

    /// Whether the helper, if it waits for room to make the next batch,
    /// has room for half of [`MADE_AHEAD`] batches: the worker wakes it
    /// then, not after every batch sent. Woken for every batch, the helper
    /// slept and woke about once a batch (12,900 times in a list of 2M
    /// pods), each wake-up waiting for a core (1.05 s in all, of a 4.7 s
    /// list): those waits left a core idle while the worker sent.
    fn room_for_helper(&self) -> bool {
        self.queue.front().is_some_and(|batch| batch.place + MADE_AHEAD / 2 <= self.sending + MADE_AHEAD)
    }

    fn wake_worker(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The chunks of `batch` (several for a batch over [`super::list::LIST_CHUNK_BYTES`]).
    fn make(&self, batch: &Batch) -> Result<VecDeque<ChunkBuf>, String> {
        let ahead = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            self.store.read_ahead_cached(batch.items.iter().map(|item| item.rv), &mut cache).map_err(|e| e.to_string())?
        };
        let mut chunks = VecDeque::new();
        let written = write_batch(&self.store, &self.writer, &ahead, batch.first, &batch.items, &batch.clusters, |chunk| {
            chunks.push_back(chunk);
            true
        });
        match written {
            Ok(last) => {
                chunks.extend(last);
                Ok(chunks)
            }
            Err(message) => {
                chunks.into_iter().for_each(give_back);
                Err(message)
            }
        }
    }

    /// The helper: makes the batches it takes until the list is made, the
    /// client went away or a batch failed.
    fn help(&self) {
        let mut state = self.state();
        loop {
            if state.closed {
                return;
            }
            let Some(batch) = state.take() else {
                if state.queue.is_empty() && (state.end.is_some() || state.feed_stopped) {
                    return;
                }
                state = self.helper.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            drop(state);
            // A batch the helper took and dropped would leave the worker
            // waiting for it: a panic while making it ends the list.
            let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.make(&batch)))
                .unwrap_or_else(|_| Err("the list's helper thread failed".to_string()));
            let failed = made.is_err();
            state = self.state();
            state.made.insert(batch.place, made);
            state.wake_worker();
            if failed {
                return;
            }
        }
    }

    /// Hands a batch (or the end) from the feed on; false once the client went away.
    fn fed(&self, feed: Feed) -> bool {
        let mut state = self.state();
        if state.closed {
            return false;
        }
        match feed {
            Feed::Batch { first, items, clusters } => {
                let place = state.fed;
                state.queue.push_back(Batch { place, first, items, clusters });
                state.fed += 1;
            }
            Feed::End => state.end = Some(state.fed),
        }
        state.wake_worker();
        drop(state);
        self.helper.notify_one();
        true
    }
}

/// Marks the feed stopped when it returns or unwinds without its end.
struct FeedStopped(Arc<Shared>);

impl Drop for FeedStopped {
    fn drop(&mut self) {
        let mut state = self.0.state();
        if state.end.is_none() {
            state.feed_stopped = true;
        }
        state.wake_worker();
        drop(state);
        self.0.helper.notify_all();
    }
}

/// The worker's end of a shared list: the client went away when it is dropped.
struct Sending(Arc<Shared>);

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.state().closed = true;
        self.0.helper.notify_all();
    }
}

impl List {
    /// The rest of a JSON list after its first chunk, made by the HTTP
    /// worker and a helper thread together (see the module's
    /// documentation), sent as the response asks for it, the worker's
    /// other connections served between chunks as in
    /// [`List::rest_on_worker`].
    pub(super) fn rest_shared(self, streaming: StreamingList) -> impl futures::Stream<Item = Result<Bytes, ListFailed>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            helper: Condvar::new(),
            cache: Mutex::new(ReadCache::default()),
            store: self.store,
            writer: self.writer,
        });
        let (items, clusters, scan, pin, start) = (self.items, self.clusters, self.scan, self.pin.clone(), self.pos);
        let feeding = FeedStopped(shared.clone());
        tokio::task::spawn_blocking(move || {
            let feeding = feeding;
            feed(&items, start, clusters, scan, &pin, |batch| feeding.0.fed(batch));
        });
        let helper = shared.clone();
        tokio::task::spawn_blocking(move || helper.help());
        let sending = Sending(shared);
        let pin = self.pin;
        let mut ended = false;
        taking_turns(futures::stream::poll_fn(move |cx| {
            let (_pin, _streaming, shared) = (&pin, &streaming, &sending.0);
            if ended {
                return Poll::Ready(None);
            }
            let mut failed = |message: String| {
                ended = true;
                tracing::warn!(%message, "List ended early.");
                Poll::Ready(Some(Err(ListFailed(message))))
            };
            let mut state = shared.state();
            loop {
                let sending = state.sending;
                match state.made.get_mut(&sending) {
                    Some(Ok(chunks)) => {
                        let chunk = chunks.pop_front().expect("a made batch holds a chunk until it is sent");
                        if chunks.is_empty() {
                            state.made.remove(&sending);
                            state.sending += 1;
                            let wake = state.room_for_helper();
                            drop(state);
                            if wake {
                                shared.helper.notify_one();
                            }
                        }
                        return Poll::Ready(Some(Ok(Bytes::from_owner(PooledChunk(chunk)))));
                    }
                    Some(Err(message)) => {
                        let message = message.clone();
                        return failed(message);
                    }
                    None => {}
                }
                if state.end == Some(sending) {
                    ended = true;
                    return Poll::Ready(Some(Ok(Bytes::from_static(b"]}"))));
                }
                // The batch to send is the helper's, or not fed yet: make
                // the next one meanwhile, or wait.
                match state.take() {
                    Some(batch) => {
                        drop(state);
                        let made = shared.make(&batch);
                        state = shared.state();
                        state.made.insert(batch.place, made);
                    }
                    None if state.feed_stopped && state.fed <= sending => return failed("the list's scan stopped".to_string()),
                    None => {
                        state.waker = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use kubefold_engine::event::{EventType, StoredEvent};
    use kubefold_engine::index::Index;
    use kubefold_engine::object::ingest;
    use kubefold_engine::resources;
    use kubefold_store::{Commit, Options, Store};

    use super::super::list::{ListCluster, ListItem, LIST_BATCH_ITEMS};
    use super::*;

    /// A store holding `pods` pods of member `m1` (RVs 1 to `pods`), each
    /// body about 2 KB, so that a batch makes a chunk of about 250 KB.
    fn store_of(dir: &std::path::Path, pods: u64) -> Store {
        let store = Store::open(dir, &Options::default()).unwrap();
        let resource = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let filler = "x".repeat(2000);
        let events = (1..=pods)
            .map(|rv| {
                let raw = format!(r#"{{"metadata":{{"name":"pod-{rv:05}","namespace":"default","resourceVersion":"{rv}"}},"spec":{{"filler":"{filler}"}}}}"#);
                StoredEvent::new(rv, EventType::Added, &resource.key(), "m1", 0, ingest(&resource, "m1", raw.as_bytes()).unwrap())
            })
            .collect();
        store.commit(&Commit { events, checkpoints: Vec::new() }).unwrap();
        store
    }

    /// A JSON list of the events `rvs` of `store`, from its first item on.
    fn list_of(store: &Store, rvs: impl IntoIterator<Item = u64>, writer: Arc<ItemWriter>) -> List {
        let (_, pin) = store.pin(|| Ok::<_, ()>(Arc::new(Index::at(0)))).unwrap();
        List {
            pin: Arc::new(pin),
            store: store.clone(),
            items: Arc::new(rvs.into_iter().map(|rv| ListItem { cluster: 0, rv }).collect()),
            clusters: Arc::new(vec![ListCluster { name: "m1".to_string(), suffix: None }]),
            writer,
            head: None,
            pos: 0,
            done: false,
            scan: None,
            scattered: false,
        }
    }

    /// Everything a list's stream gives: its bytes, and the error it ended with.
    async fn drain(stream: impl futures::Stream<Item = Result<Bytes, ListFailed>>) -> (Vec<u8>, Option<String>) {
        let mut stream = std::pin::pin!(stream);
        let (mut bytes, mut failed) = (Vec::new(), None);
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(60), stream.next()).await.expect("the list's stream stalled") {
            match chunk {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(ListFailed(message)) => failed = Some(message),
            }
        }
        (bytes, failed)
    }

    /// Runs `test` on a runtime of two workers; a helper thread left
    /// waiting (the failure some of these tests look for) does not hold
    /// the test up when the runtime is shut down.
    fn run(test: impl std::future::Future<Output = ()>) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test)));
        runtime.shutdown_background();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    /// Waits until the lists of `store` written with `writer` are gone:
    /// their helper and feed ended (they held the writer) and their pins
    /// let go.
    async fn released(store: &Store, writer: &Arc<ItemWriter>, what: &str) {
        let gone = async {
            while Arc::strong_count(writer) > 1 || store.pinned_reads() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), gone).await.unwrap_or_else(|_| panic!("{what}"));
    }

    /// Made by the worker and the helper together, a list of many batches
    /// is every object once, in the list's order, the same bytes as the
    /// worker writes alone; and once it is sent, the helper and the feed
    /// are gone (they held the writer) and the list's pin is let go.
    #[test]
    fn a_list_made_by_the_worker_and_its_helper_is_the_list_written_alone() {
        run(async {
            let dir = tempfile::tempdir().unwrap();
            // More batches than the helper makes ahead, twice over: it waits for room and is woken again.
            let pods = 2 * (MADE_AHEAD + 4) * LIST_BATCH_ITEMS as u64 + 5;
            let store = store_of(dir.path(), pods);
            let writer = Arc::new(ItemWriter::Json);
            // Listed in an order of their own (not the log's), as a list of many members is.
            let order: Vec<u64> = (1..=pods).rev().collect();
            let (shared, failed) = drain(list_of(&store, order.clone(), writer.clone()).rest_shared(StreamingList::start())).await;
            assert_eq!(failed, None);
            let (alone, _) = drain(list_of(&store, order.clone(), writer.clone()).rest_on_worker(StreamingList::start())).await;
            assert!(shared == alone, "the shared list differs from the worker's ({} against {} bytes)", shared.len(), alone.len());
            let items: Vec<serde_json::Value> = serde_json::from_slice(&[b"[", &shared[..shared.len() - 1]].concat()).unwrap();
            let names: Vec<String> = items.iter().map(|item| item["metadata"]["name"].as_str().unwrap().to_string()).collect();
            assert_eq!(names, order.iter().map(|rv| format!("pod-{rv:05}")).collect::<Vec<_>>());
            released(&store, &writer, "the helper and the feed end with the list, and its pin is let go").await;
        });
    }

    /// The helper, waiting for room to make the next batch, is woken when
    /// half of the batches it may make ahead can be made, not for every
    /// batch sent; nor while the queue is empty (the feed wakes it then).
    #[test]
    fn the_helper_is_woken_with_room_for_half_the_batches_made_ahead() {
        let batch = |place| Batch { place, first: 0, items: Vec::new(), clusters: Arc::new(Vec::new()) };
        let mut state = State { sending: 10, ..State::default() };
        assert!(!state.room_for_helper(), "nothing to make");
        state.queue.push_back(batch(10 + MADE_AHEAD));
        assert!(!state.room_for_helper(), "the window is full");
        state.sending += MADE_AHEAD / 2 - 1;
        assert!(!state.room_for_helper(), "room for less than half the window");
        state.sending += 1;
        assert!(state.room_for_helper(), "room for half the window");
        assert!(state.take().is_some(), "the batch it is woken for can be taken");
    }

    /// An object the store no longer holds, in the middle of the list: the
    /// list ends there with an error, after every object before it and
    /// none after it; a client that goes away after the first chunk ends
    /// the helper and the feed, and the list's pin is let go.
    #[test]
    fn a_shared_list_ends_at_a_missing_object_and_when_its_client_goes_away() {
        run(async {
            let dir = tempfile::tempdir().unwrap();
            let pods = 12 * LIST_BATCH_ITEMS as u64;
            let store = store_of(dir.path(), pods);
            let writer = Arc::new(ItemWriter::Json);
            let missing = pods + 1000;
            let at = 7 * LIST_BATCH_ITEMS + 3;
            let mut order: Vec<u64> = (1..=pods).collect();
            order.insert(at, missing);
            let (bytes, failed) = drain(list_of(&store, order, writer.clone()).rest_shared(StreamingList::start())).await;
            let failed = failed.expect("the list ends with an error");
            assert!(failed.contains(&format!("object version {missing} is no longer retained")), "{failed}");
            // The batch holding it is not sent: it stops after the batch before.
            let text = String::from_utf8(bytes).unwrap();
            let sent = 7 * LIST_BATCH_ITEMS;
            assert!(text.contains(&format!("\"pod-{sent:05}\"")), "every batch before the missing object's was sent");
            assert!(!text.contains(&format!("\"pod-{:05}\"", sent + 1)), "nothing from the missing object's batch on was sent");
            assert!(!text.ends_with("]}"));

            let mut stream = Box::pin(list_of(&store, 1..=pods, writer.clone()).rest_shared(StreamingList::start()));
            assert!(matches!(stream.next().await, Some(Ok(_))));
            drop(stream);
            released(&store, &writer, "the helper and the feed stop when the client goes away, and the pin is let go").await;
        });
    }
}
