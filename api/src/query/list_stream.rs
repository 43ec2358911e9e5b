//! The rest of a long list after its first chunk: written on the HTTP
//! worker a chunk at a time as its client takes them (JSON), or made by
//! producer threads beside it (Table, gzip); the chunk buffers come from
//! and go back to a small pool.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use kubefold_store::ChunkBuf;

use super::list::{feed, Feed, ItemWriter, List, ListCluster, ListFailed, ListItem, LIST_BATCH_ITEMS, LIST_CHUNK_BYTES};

/// Buffers of long lists' chunks, given back when the HTTP worker has
/// copied their bytes out, and taken again for the next chunks (at most
/// [`POOLED_CHUNKS`] kept): a new buffer per chunk was fresh memory for the
/// producers to write and the worker to read (100k pods, lists alternating
/// with a build making a buffer per chunk: CPU 250 vs 270 ms median,
/// 198 vs 203 ms).
static CHUNK_POOL: std::sync::Mutex<Vec<ChunkBuf>> = std::sync::Mutex::new(Vec::new());

/// Chunk buffers kept in [`CHUNK_POOL`]: those of two long lists in flight.
const POOLED_CHUNKS: usize = 8;

/// A buffer for a chunk of about `bytes`: one given back, else a new one.
pub(super) fn chunk_buffer(bytes: usize) -> ChunkBuf {
    let mut buf = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    buf.reserve(bytes);
    buf
}

/// A chunk sent to the client; its buffer goes back to [`CHUNK_POOL`]
/// once the response has copied it out.
pub(super) struct PooledChunk(pub(super) ChunkBuf);

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        self.0.written()
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self.0));
    }
}

/// Gives a chunk buffer back to [`CHUNK_POOL`] (unless the pool is full
/// or the buffer grew large).
pub(super) fn give_back(mut buf: ChunkBuf) {
    if buf.capacity() > 2 * LIST_CHUNK_BYTES {
        return;
    }
    buf.clear();
    let mut pool = CHUNK_POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < POOLED_CHUNKS {
        pool.push(buf);
    }
}

/// `inner`, turning to the worker's other work after each item: before
/// `inner` is polled again, the task yields with `tokio::task::yield_now`,
/// which has the runtime wake it only after it ran its other ready tasks
/// and polled its I/O driver. actix-http asks a response body for chunks
/// for as long as its socket takes bytes, which for a client reading as
/// fast as a list is written can be much of the list; an HTTP worker's
/// other connections (gets, watch events) so wait for one chunk, not for
/// the list. (A task that wakes itself at once is polled again before the
/// driver, which a current-thread runtime polls only every 61 tasks when
/// tasks are always ready: gets beside a list of 100k pods waited up to
/// 14 and 39 ms that way in two series, against 2.6 and 8.0 ms now.)
pub(super) fn taking_turns<S: futures::Stream + Unpin>(mut inner: S) -> impl futures::Stream<Item = S::Item> {
    let mut turn: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = None;
    futures::stream::poll_fn(move |cx| {
        if let Some(yielding) = turn.as_mut() {
            std::task::ready!(yielding.as_mut().poll(cx));
            turn = None;
        }
        let item = std::task::ready!(inner.poll_next_unpin(cx));
        if item.is_some() {
            turn = Some(Box::pin(tokio::task::yield_now()));
        }
        std::task::Poll::Ready(item)
    })
}

/// A chunk of a long list from its producer: its bytes, or (gzip) its
/// bytes deflated.
enum Produced {
    Plain(ChunkBuf),
    Deflated(crate::gzip::Piece),
}

impl Produced {
    /// `chunk`, deflated when the list is sent with gzip (the buffer then
    /// goes back to the pool).
    fn of(chunk: ChunkBuf, gzip: bool) -> Produced {
        if !gzip {
            return Produced::Plain(chunk);
        }
        let piece = crate::gzip::Piece::deflate(chunk.written());
        give_back(chunk);
        Produced::Deflated(piece)
    }
}

/// Threads that produce the rest of a long Table, gzip or selected list, batch by
/// batch in turn.
const LIST_PRODUCERS: usize = 2;

/// Lists whose rest is being streamed, counted while their stream lives.
static STREAMING_LISTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One list counted in [`STREAMING_LISTS`] until dropped.
pub(super) struct StreamingList {
    /// Lists that were streaming when this one started.
    others: usize,
}

impl StreamingList {
    pub(super) fn start() -> StreamingList {
        StreamingList { others: STREAMING_LISTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) }
    }
}

impl Drop for StreamingList {
    fn drop(&mut self) {
        STREAMING_LISTS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl List {
    /// The rest of the list after its first chunk. The batches' items come
    /// from [`feed`] on a blocking thread (which also scans the rest of a
    /// whole list). A JSON list sent as it is is written by the HTTP worker
    /// itself, a chunk each time the response asks for one: see
    /// [`List::rest_on_worker`]; while no other list streams, a helper
    /// thread makes some of its batches beside the worker (see
    /// [`super::list_shared`]): 2M pods over 1,000 members, `curl` as the
    /// client, warm restarts alternated, 3.94 to 4.43 s against 4.43 to
    /// 5.95 s alone (median 4.08 against 5.15 s), with 11 % more CPU. A
    /// Table, a gzip list, and a JSON list of objects chosen by label or
    /// field selectors are made by producers beside the worker: see
    /// [`List::rest_produced`].
    ///
    /// A selected list's records lie apart in the log (a 1% selector finds
    /// one record in a hundred), each read with a `pread` of its own, and
    /// two producers overlap those reads: the 1% selector over 1,000
    /// members x 2M pods (20,000 pods, 70 MiB), kubefold restarted warm on
    /// one data dir and alternated, median of 10 each: 66 to 82 ms on
    /// producers against 90 to 131 ms on the worker. A whole list reads its
    /// records in runs and gained nothing from producers that made every
    /// chunk (5.1 to 6.0 s against 5.2 to 7.0 s for 2M pods, with a third
    /// more CPU): they and the client shared the other core.
    pub(super) fn rest(self, member: Option<crate::gzip::Member>) -> impl futures::Stream<Item = Result<Bytes, ListFailed>> {
        let streaming = StreamingList::start();
        match (member, &*self.writer) {
            (None, ItemWriter::Json) if !self.scattered && streaming.others == 0 => self.rest_shared(streaming).left_stream().left_stream(),
            (None, ItemWriter::Json) if !self.scattered => self.rest_on_worker(streaming).right_stream().left_stream(),
            (member, _) => self.rest_produced(member, streaming).right_stream(),
        }
    }

    /// The rest of a JSON list, each chunk written on the HTTP worker when
    /// the response asks for it (when actix-http's write buffer has room:
    /// a chunk is made only as fast as the client reads, and a client that
    /// stops reading costs no CPU). After each chunk the stream yields to the
    /// worker's other connections (gets, watch events), which so wait one
    /// chunk at most.
    ///
    /// Kubernetes encodes a list on the goroutine serving its request;
    /// kubefold wrote plain lists on two threads beside the worker before.
    /// Handing every chunk from thread to thread cost more than it gained
    /// on 2 cores with the client on the same machine: 100k pods read with
    /// the suite's client, 128.1 against 144.8 ms median and 127 against
    /// 148 ms of CPU per list (BENCHMARKS.md, "A plain list is written on
    /// the HTTP worker"). A client on another machine leaves the cores to
    /// kubefold, where the threads would make one list faster and many
    /// lists slower.
    ///
    /// The records are read on the worker: from the page cache in the
    /// common case; from disk after a restart, a batch's reads at a time.
    pub(super) fn rest_on_worker(self, streaming: StreamingList) -> impl futures::Stream<Item = Result<Bytes, ListFailed>> {
        /// The batch being written.
        struct Current {
            first: usize,
            items: Vec<ListItem>,
            clusters: Arc<Vec<ListCluster>>,
            ahead: kubefold_store::ReadAhead,
            /// The next item to write.
            pos: usize,
        }
        let start = self.pos;
        let (input, mut batches) = tokio::sync::mpsc::unbounded_channel::<Feed>();
        let (items, clusters, scan, pin) = (self.items, self.clusters, self.scan, self.pin.clone());
        tokio::task::spawn_blocking(move || feed(&items, start, clusters, scan, &pin, |batch| input.send(batch).is_ok()));
        let (store, writer, pin) = (self.store, self.writer, self.pin);
        let mut current: Option<Current> = None;
        let mut ended = false;
        let mut cache = kubefold_store::ReadCache::default();
        taking_turns(futures::stream::poll_fn(move |cx| {
            let (_pin, _streaming) = (&pin, &streaming);
            if ended {
                return std::task::Poll::Ready(None);
            }
            let failed = |message: String| {
                tracing::warn!(%message, "List ended early.");
                Some(Err(ListFailed(message)))
            };
            let batch = match &mut current {
                Some(batch) => batch,
                None => match std::task::ready!(batches.poll_recv(cx)) {
                    Some(Feed::Batch { first, items, clusters }) => match store.read_ahead_cached(items.iter().map(|item| item.rv), &mut cache) {
                        Ok(ahead) => current.insert(Current { first, items, clusters, ahead, pos: 0 }),
                        Err(e) => {
                            ended = true;
                            return std::task::Poll::Ready(failed(e.to_string()));
                        }
                    },
                    Some(Feed::End) => {
                        ended = true;
                        return std::task::Poll::Ready(Some(Ok(Bytes::from_static(b"]}"))));
                    }
                    None => {
                        ended = true;
                        return std::task::Poll::Ready(failed("the list's scan stopped".to_string()));
                    }
                },
            };
            let mut out = chunk_buffer(LIST_CHUNK_BYTES.min((batch.items.len() - batch.pos) * 4096) + 64);
            while out.len() < LIST_CHUNK_BYTES && batch.pos < batch.items.len() {
                if batch.first + batch.pos > 0 {
                    out.push(b',');
                }
                if let Err(status) = writer.write(&store, &batch.ahead, &batch.items[batch.pos], &batch.clusters, &mut out) {
                    ended = true;
                    give_back(out);
                    return std::task::Poll::Ready(failed(status.message));
                }
                batch.pos += 1;
            }
            if batch.pos == batch.items.len() {
                current = None;
            }
            std::task::Poll::Ready(Some(Ok(Bytes::from_owner(PooledChunk(out)))))
        }))
    }

    /// The rest of a Table, gzip or selected list, made on blocking threads
    /// ([`LIST_PRODUCERS`] for a list streamed alone, else one), each a
    /// batch at a time, a chunk ahead of the client, and sent in order.
    /// The threads make a list faster where passing its chunks on costs
    /// little beside making them: a Table or gzip costs much more CPU per
    /// byte sent than a JSON list (a row is printed from each object;
    /// deflating a chunk takes several times as long as writing it; a
    /// Table of 100k pods, sent plain, 30 lists each alternating: 66.6 ms
    /// median on two threads, 91.5 ms on the worker), and a selected list
    /// waits on a read for each object (see [`List::rest`]). They also
    /// keep that work off the worker's other connections. Memory: about
    /// two chunks per producer, per list.
    fn rest_produced(self, mut member: Option<crate::gzip::Member>, streaming: StreamingList) -> impl futures::Stream<Item = Result<Bytes, ListFailed>> {
        let gzip = member.is_some();
        let start = self.pos;
        let batches = (self.items.len() - start).div_ceil(LIST_BATCH_ITEMS);
        // Two threads only for a list streamed alone: with others streaming,
        // the cores are busy already and more threads would only take turns.
        let mut producers = if streaming.others == 0 { LIST_PRODUCERS } else { 1 };
        if self.scan.is_none() {
            producers = producers.min(batches).max(1);
        }
        let (inputs, receivers): (Vec<_>, Vec<_>) = (0..producers)
            .map(|_| {
                let (input, batches) = std::sync::mpsc::channel::<Feed>();
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<Option<(Produced, bool)>, String>>(1);
                let (store, writer) = (self.store.clone(), self.writer.clone());
                tokio::task::spawn_blocking(move || produce(&store, &writer, &batches, gzip, &tx));
                (input, rx)
            })
            .unzip();
        let (items, clusters, scan, pin) = (self.items, self.clusters, self.scan, self.pin.clone());
        tokio::task::spawn_blocking(move || {
            let mut next = 0usize;
            feed(&items, start, clusters, scan, &pin, |batch| {
                let sent = inputs[next % inputs.len()].send(batch).is_ok();
                next += 1;
                sent
            })
        });
        let (mut receivers, mut current, mut ended) = (receivers, 0, false);
        let pin = self.pin;
        futures::stream::poll_fn(move |cx| {
            let (_streaming, _pin) = (&streaming, &pin);
            if ended {
                return std::task::Poll::Ready(None);
            }
            let failed = |message: String| {
                tracing::warn!(%message, "List ended early.");
                Some(Err(ListFailed(message)))
            };
            std::task::Poll::Ready(match std::task::ready!(receivers[current].poll_recv(cx)) {
                Some(Ok(Some((chunk, last_of_batch)))) => {
                    if last_of_batch {
                        current = (current + 1) % receivers.len();
                    }
                    Some(Ok(match (chunk, member.as_mut()) {
                        (Produced::Plain(chunk), _) => Bytes::from_owner(PooledChunk(chunk)),
                        (Produced::Deflated(piece), Some(member)) => Bytes::from(member.add(piece)),
                        (Produced::Deflated(_), None) => unreachable!("chunks are deflated only for a gzip member"),
                    }))
                }
                Some(Ok(None)) => {
                    ended = true;
                    Some(Ok(match member.take() {
                        Some(mut member) => {
                            let mut end = member.add(crate::gzip::Piece::deflate(b"]}"));
                            end.extend_from_slice(&member.end());
                            Bytes::from(end)
                        }
                        None => Bytes::from_static(b"]}"),
                    }))
                }
                Some(Err(message)) => {
                    ended = true;
                    failed(message)
                }
                None => {
                    ended = true;
                    failed("a list producer stopped".to_string())
                }
            })
        })
    }
}

/// Produces the batches [`feed`] hands this producer, in order (deflated
/// with `gzip`); each batch's last chunk is marked, and the end of the list
/// is passed on. Stops at the end, at an error (sent on) or when the
/// client went away.
fn produce(store: &kubefold_store::Store, writer: &ItemWriter, batches: &std::sync::mpsc::Receiver<Feed>, gzip: bool, tx: &tokio::sync::mpsc::Sender<Result<Option<(Produced, bool)>, String>>) {
    let mut cache = kubefold_store::ReadCache::default();
    while let Ok(feed) = batches.recv() {
        let Feed::Batch { first, items, clusters } = feed else {
            let _ = tx.blocking_send(Ok(None));
            return;
        };
        // The batch's records, neighbours read together.
        let ahead = match store.read_ahead_cached(items.iter().map(|item| item.rv), &mut cache) {
            Ok(ahead) => ahead,
            Err(e) => {
                let _ = tx.blocking_send(Err(e.to_string()));
                return;
            }
        };
        let full = |chunk| tx.blocking_send(Ok(Some((Produced::of(chunk, gzip), false)))).is_ok();
        match write_batch(store, writer, &ahead, first, &items, &clusters, full) {
            Ok(Some(last)) => {
                if tx.blocking_send(Ok(Some((Produced::of(last, gzip), true)))).is_err() {
                    return;
                }
            }
            // The client went away.
            Ok(None) => return,
            Err(message) => {
                let _ = tx.blocking_send(Err(message));
                return;
            }
        }
    }
}

/// Writes the items of a batch (`first`: the place of its first item in
/// the list) from the records of `ahead` into chunks of about
/// [`LIST_CHUNK_BYTES`], handing each full chunk to `full`, and returns
/// the last one; `None` once `full` refused a chunk (the client went
/// away); an item that cannot be written is the error.
pub(super) fn write_batch(
    store: &kubefold_store::Store,
    writer: &ItemWriter,
    ahead: &kubefold_store::ReadAhead,
    first: usize,
    items: &[ListItem],
    clusters: &[ListCluster],
    mut full: impl FnMut(ChunkBuf) -> bool,
) -> Result<Option<ChunkBuf>, String> {
    let mut out = chunk_buffer(LIST_CHUNK_BYTES.min(items.len() * 4096) + 64);
    for (i, item) in items.iter().enumerate() {
        if out.len() >= LIST_CHUNK_BYTES && !full(std::mem::replace(&mut out, chunk_buffer(LIST_CHUNK_BYTES))) {
            give_back(out);
            return Ok(None);
        }
        if first + i > 0 {
            out.push(b',');
        }
        if let Err(status) = writer.write(store, ahead, item, clusters, &mut out) {
            give_back(out);
            return Err(status.message);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// After each item the stream gives its task's other work a turn: one
    /// `Pending` with the task woken (outside a runtime at once, so it is
    /// polled again without any other event), then the next item; the end
    /// comes at once after the last item's turn, and an inner `Pending` is
    /// passed on as it is.
    #[test]
    fn a_list_stream_takes_turns_after_each_chunk() {
        let wakes = Arc::new(Wakes::default());
        let waker = futures::task::waker(wakes.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::Relaxed);
        let mut pending_once = true;
        let mut items = vec![1, 2].into_iter();
        let inner = futures::stream::poll_fn(move |_| {
            if pending_once {
                pending_once = false;
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(items.next())
        });
        let mut stream = std::pin::pin!(taking_turns(inner));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "the inner stream's Pending");
        assert_eq!(woken(), 0, "an inner Pending is left to the inner stream's waker");
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(Some(1)));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "a turn after the first item");
        assert_eq!(woken(), 1, "the turn wakes its task");
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(Some(2)));
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Pending, "a turn after the second item");
        assert_eq!(woken(), 2);
        assert_eq!(stream.as_mut().poll_next_unpin(&mut cx), std::task::Poll::Ready(None));
        assert_eq!(woken(), 2, "the end takes no turn");
    }

    /// On a current-thread runtime (as an actix worker runs), a connection
    /// whose bytes have arrived is served after one item of a stream that
    /// is always ready, not after the runtime's periodic I/O poll: a reader
    /// whose byte is already sent gets it while a consumer drains an endless
    /// stream through `taking_turns`, within a few items. (With the task
    /// woken at once instead of deferred, the reader waited for 61 items.)
    #[test]
    fn io_is_served_between_the_chunks_of_an_endless_list() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let consumed_when_read = runtime.block_on(async {
            let (mut reader, mut writer) = tokio::net::UnixStream::pair().unwrap();
            writer.write_all(b"x").await.unwrap();
            let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let read = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reading = {
                let (consumed, read) = (consumed.clone(), read.clone());
                tokio::spawn(async move {
                    let mut byte = [0u8; 1];
                    reader.read_exact(&mut byte).await.unwrap();
                    read.store(true, std::sync::atomic::Ordering::Relaxed);
                    consumed.load(std::sync::atomic::Ordering::Relaxed)
                })
            };
            let consuming = {
                let (consumed, read) = (consumed.clone(), read.clone());
                tokio::spawn(async move {
                    let mut chunks = taking_turns(futures::stream::repeat(()));
                    while !read.load(std::sync::atomic::Ordering::Relaxed) && consumed.load(std::sync::atomic::Ordering::Relaxed) < 100_000 {
                        chunks.next().await;
                        consumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            };
            consuming.await.unwrap();
            reading.await.unwrap()
        });
        assert!(consumed_when_read < 5, "the reader got its byte after {consumed_when_read} items of the endless stream");
    }
}
