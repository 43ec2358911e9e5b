//! A list: the objects of a scope that pass its selectors, a page at a
//! time (`limit`, `continue`) with the count of what is left, read at one
//! snapshot of the index, and written as JSON or Table rows from the store.
//!
//! resourceVersion semantics follow the Kubernetes API Concepts page
//! ("Resource versions", "Semantics for get and list").
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#the-resourceversion-parameter>

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use kubefold_engine::event::ObjectKey;
use kubefold_engine::index::Index;
use kubefold_engine::paging;
use kubefold_engine::status::Status;
use kubefold_store::ChunkBuf;

use super::list_stream::{chunk_buffer, give_back, PooledChunk};
use super::params::{Query, ReadAt};
use super::scope::{Filter, Scope};
use super::table::{IncludeObject, TablePrinter};
use super::Reader;

/// Bytes of a list response produced per chunk.
pub(super) const LIST_CHUNK_BYTES: usize = 1 << 20;

/// Objects per batch of a long list's rest (a batch larger than
/// [`LIST_CHUNK_BYTES`] is sent in chunks of about that size).
pub(super) const LIST_BATCH_ITEMS: usize = 128;

/// Lists of more objects than this are written batch by batch from their
/// first object on, see [`List::into_body`].
const STREAMED_FROM_THE_HEAD: usize = 4 * LIST_BATCH_ITEMS;

/// Reads a list (all pages read at the first page's snapshot): its
/// objects' versions and clusters, the page's continue token and count of
/// what is left, its head; the objects themselves are read from the store
/// as the body is written ([`List::into_body`]). `table`: the client asked
/// for a Table.
pub fn list(reader: &Reader, scope: &Scope, query: &Query, read_at: ReadAt, table: bool) -> Result<List, Status> {
    let filter = Filter::parse(&scope.resource, query)?;
    let limit = query.limit()?;
    // The snapshot's records are kept from compaction while the list is
    // written (a long list streams for seconds).
    let store = reader.fleet.store();
    // `listed_before`: the objects of the pages before this one, when known.
    let ((snapshot, pin), start_after, listed_before) = match query.continue_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => {
            if !matches!(read_at, ReadAt::Latest | ReadAt::Any) {
                return Err(Status::bad_request("specifying resource version is not allowed when using continue"));
            }
            let (rv, key, listed) = paging::decode_listed(reader.token_secret, token).map_err(|e| match e {
                // 410, as for a token older than the compaction: client-go's pager lists again.
                paging::TokenError::Outdated => Status::expired(e.to_string()),
                _ => Status::bad_request(e.to_string()),
            })?;
            (store.pin(|| reader.snapshot_at(rv))?, Some(key), listed)
        }
        None => match read_at {
            ReadAt::Exact(rv) => (store.pin(|| reader.snapshot_at(rv))?, None, Some(0)),
            _ => (store.pin(|| Ok::<_, Status>(reader.fleet.snapshot()))?, None, Some(0)),
        },
    };
    // A page without a selector knows how many objects follow it from the
    // objects of its scope and those before it, without walking the rest:
    // kubectl pages a large list 500 objects at a time, and counting the
    // rest made each page cost a walk over the whole type (7 ms per page at
    // 100k pods). The index keeps the count of every type, namespace,
    // cluster and namespace of a cluster.
    let count_remaining = !filter.has_selector();
    let resource_key = scope.resource.key();
    let scope_objects = count_remaining.then(|| snapshot.count_scope(&resource_key, scope.namespace.as_deref(), scope.cluster.as_deref()));
    // The items as they will be written: their version and their cluster,
    // by its place in `clusters` (no key is copied: a list of a million
    // objects holds 16 bytes per object here).
    let mut clusters: Vec<ListCluster> = Vec::new();
    let mut cluster_at = ClusterPlaces::default();
    let mut items: Vec<ListItem> = Vec::new();
    let mut last: Option<&ObjectKey> = None;
    let mut more = false;
    let mut remaining = 0usize;
    // A whole list (no limit) longer than a few batches is scanned here only
    // up to its first batches: the rest is scanned on another thread while
    // the list streams (see `ListScan`). Scanning 100k pods took 8 to 10 ms,
    // which every such list spent before its first object was written.
    let mut scan_after: Option<ObjectKey> = None;
    for (key, entry) in filter.candidates(&snapshot, &resource_key, scope, start_after.as_ref()) {
        if !filter.matches(scope, key, entry) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            if let (Some(objects), Some(before)) = (scope_objects, listed_before) {
                remaining = objects.saturating_sub(before as usize + items.len());
                break;
            }
            if !count_remaining {
                // Not reported with a selector: one more object is enough.
                break;
            }
            remaining += 1;
            continue;
        }
        items.push(ListItem { cluster: cluster_of(key, scope, &mut clusters, &mut cluster_at), rv: entry.rv });
        last = Some(key);
        if limit.is_none() && items.len() > STREAMED_FROM_THE_HEAD {
            scan_after = Some(key.clone());
            break;
        }
    }
    // From here on only the listed objects' records are kept (once the
    // scan of a whole list is done, see `ListScan`).
    if scan_after.is_none() {
        pin.narrow(items.iter().map(|item| item.rv).collect());
    }
    let rv = snapshot.head_rv();
    let listed = listed_before.filter(|_| count_remaining).map(|before| before + items.len() as u64);
    let token = if more { last.map(|k| paging::encode_listed(reader.token_secret, rv, k, listed)) } else { None };
    let (head, writer) = if table {
        let printer = TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?);
        let head = printer.head(rv, token.as_deref(), (more && count_remaining).then_some(remaining), false);
        (head, ItemWriter::Table(printer))
    } else {
        let mut head = format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"",
            scope.resource.list_kind(),
            scope.resource.api_version(),
            rv
        )
        .into_bytes();
        if let Some(t) = &token {
            head.extend_from_slice(format!(",\"continue\":\"{t}\"").as_bytes());
            if count_remaining {
                head.extend_from_slice(format!(",\"remainingItemCount\":{remaining}").as_bytes());
            }
        }
        head.extend_from_slice(b"},\"items\":[");
        (head, ItemWriter::Json)
    };
    let scattered = filter.depends_on_content();
    let scan = scan_after.map(|after| ListScan { snapshot: snapshot.clone(), resource_key, scope: scope.clone(), filter, after, cluster_at });
    Ok(List {
        pin: Arc::new(pin),
        store: store.clone(),
        items: Arc::new(items),
        clusters: Arc::new(clusters),
        writer: Arc::new(writer),
        head: Some(head),
        pos: 0,
        done: false,
        scan,
        scattered,
    })
}

/// Why a list ended early, after its response started (its client then
/// finds it cut short).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ListFailed(pub String);

/// A list's body as it is sent.
pub enum Body<S> {
    /// A list that fits one chunk, whole (its length known).
    Whole {
        /// The bytes.
        bytes: Bytes,
        /// Whether they are a gzip member (the list was over
        /// [`crate::gzip::THRESHOLD_BYTES`] and its client takes gzip).
        gzip: bool,
    },
    /// A longer list, chunk by chunk.
    Streamed {
        /// The chunks.
        chunks: S,
        /// Whether they make one gzip member.
        gzip: bool,
    },
}

impl List {
    /// The list's body, gzip-compressed when `gzip` (the client takes it)
    /// and the list is over [`crate::gzip::THRESHOLD_BYTES`]: known at
    /// once for a list of one chunk; a streamed list is over it (more than
    /// one chunk, or more objects than a few batches).
    ///
    /// A list that fits one chunk is answered at once (with its length), a
    /// longer one is streamed chunk by chunk: a worker thread never builds a
    /// whole large list (it serves other requests between chunks) and a list
    /// costs a few chunks of memory beyond its keys, however many run at once.
    /// A list of more than a few batches is sent from its head on, all its
    /// objects written batch by batch (see `List::rest`): a first chunk
    /// written here held the client up before the rest's scan started (and
    /// read its records one by one).
    pub fn into_body(mut self, gzip: bool) -> Result<Body<impl futures::Stream<Item = Result<Bytes, ListFailed>>>, Status> {
        let first = if self.items.len() > STREAMED_FROM_THE_HEAD { self.head_only() } else { self.chunk()? };
        if self.done {
            if gzip && first.len() > crate::gzip::THRESHOLD_BYTES {
                let bytes = crate::gzip::Member::whole(first.written());
                give_back(first);
                return Ok(Body::Whole { bytes: Bytes::from(bytes), gzip: true });
            }
            return Ok(Body::Whole { bytes: Bytes::from_owner(PooledChunk(first)), gzip: false });
        }
        let mut member = gzip.then(crate::gzip::Member::default);
        let first = match member.as_mut() {
            Some(member) => {
                let mut bytes = crate::gzip::Member::HEADER.to_vec();
                bytes.extend_from_slice(&member.add(crate::gzip::Piece::deflate(first.written())));
                give_back(first);
                Bytes::from(bytes)
            }
            None => Bytes::from_owner(PooledChunk(first)),
        };
        let chunks = futures::stream::once(async move { Ok::<_, ListFailed>(first) }).chain(self.rest(member));
        Ok(Body::Streamed { chunks, gzip })
    }
}

/// One object of a list: its cluster (its place in the list's
/// [`ListCluster`]s) and version.
pub(super) struct ListItem {
    pub(super) cluster: u32,
    pub(super) rv: u64,
}

/// A cluster of a list's objects: its name and the suffix of its objects' names.
#[derive(Clone)]
pub(super) struct ListCluster {
    pub(super) name: String,
    pub(super) suffix: Option<String>,
}

/// The places of a list's clusters in its [`ListCluster`]s, by name: looked
/// up once an item. A map by hash: a list of every pod of 1,000 members
/// changes cluster at every item, and the ordered map's comparisons were
/// most of its feed's CPU (perf, 2M pods: the feed thread took 17 % of
/// kubefold's samples while it was written, 3.4 % with this map).
pub(super) type ClusterPlaces = std::collections::HashMap<String, u32, std::hash::BuildHasherDefault<NameHasher>>;

/// The hash of [`ClusterPlaces`]: eight bytes of a name a step (the mixing
/// of rustc's FxHash), where the standard map's SipHash took half of the
/// feed thread's CPU in the list of every pod of 1,000 members. The names
/// are the members' (kubefold's configuration, not its clients), so a hash
/// without a secret key is enough.
#[derive(Default)]
pub(super) struct NameHasher(u64);

impl NameHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The place of `key`'s cluster in `clusters`, added when new.
pub(super) fn cluster_of(key: &ObjectKey, scope: &Scope, clusters: &mut Vec<ListCluster>, cluster_at: &mut ClusterPlaces) -> u32 {
    if let Some(at) = cluster_at.get(key.cluster.as_str()) {
        return *at;
    }
    clusters.push(ListCluster { name: key.cluster.clone(), suffix: scope.name_suffix(&key.cluster) });
    let at = (clusters.len() - 1) as u32;
    cluster_at.insert(key.cluster.clone(), at);
    at
}

/// The rest of a whole list's scan, after the objects [`list()`] scanned
/// itself: done on the thread that hands out the list's batches, so that
/// the first batches are written at once.
pub(super) struct ListScan {
    pub(super) snapshot: Arc<Index>,
    pub(super) resource_key: String,
    pub(super) scope: Scope,
    pub(super) filter: Filter,
    /// The last object scanned by [`list()`].
    pub(super) after: ObjectKey,
    /// The places of the clusters in the list's [`ListCluster`]s so far.
    pub(super) cluster_at: ClusterPlaces,
}

/// Work for a list's writer: a batch of items, or the end of the list.
pub(super) enum Feed {
    Batch {
        /// The place of the batch's first item in the list.
        first: usize,
        items: Vec<ListItem>,
        /// The list's clusters as far as these items go.
        clusters: Arc<Vec<ListCluster>>,
    },
    End,
}

/// Hands the items of a list from `from` on with `send`, a batch at a time
/// (to the HTTP worker, or to producers in turn): those already known,
/// then (with `scan`) those scanned after them. Then sends the end and
/// narrows `pin` to the listed objects. Stops when `send` fails (the
/// list's writer went away, so did the client).
pub(super) fn feed(known: &[ListItem], from: usize, clusters: Arc<Vec<ListCluster>>, scan: Option<ListScan>, pin: &kubefold_store::ReadPin, mut send: impl FnMut(Feed) -> bool) {
    let mut first = from;
    for batch in known[from.min(known.len())..].chunks(LIST_BATCH_ITEMS) {
        if !send(Feed::Batch { first, items: batch.iter().map(|item| ListItem { cluster: item.cluster, rv: item.rv }).collect(), clusters: clusters.clone() }) {
            return;
        }
        first += batch.len();
    }
    if let Some(mut scan) = scan {
        let mut clusters = clusters;
        let mut rvs: Vec<u64> = known.iter().map(|item| item.rv).collect();
        let mut batch: Vec<ListItem> = Vec::with_capacity(LIST_BATCH_ITEMS);
        for (key, entry) in scan.filter.candidates(&scan.snapshot, &scan.resource_key, &scan.scope, Some(&scan.after)) {
            if !scan.filter.matches(&scan.scope, key, entry) {
                continue;
            }
            let cluster = match scan.cluster_at.get(key.cluster.as_str()) {
                Some(at) => *at,
                None => cluster_of(key, &scan.scope, Arc::make_mut(&mut clusters), &mut scan.cluster_at),
            };
            batch.push(ListItem { cluster, rv: entry.rv });
            rvs.push(entry.rv);
            if batch.len() == LIST_BATCH_ITEMS {
                let items = std::mem::replace(&mut batch, Vec::with_capacity(LIST_BATCH_ITEMS));
                if !send(Feed::Batch { first, items, clusters: clusters.clone() }) {
                    return;
                }
                first += LIST_BATCH_ITEMS;
            }
        }
        if !batch.is_empty() && !send(Feed::Batch { first, items: batch, clusters: clusters.clone() }) {
            return;
        }
        pin.narrow(rvs.into());
    }
    send(Feed::End);
}

/// How the items of a list are written.
pub(super) enum ItemWriter {
    /// As the objects (a `*List`).
    Json,
    /// As Table rows.
    Table(TablePrinter),
}

impl ItemWriter {
    /// Writes one item, read from the store (from `ahead` when it holds
    /// its record), to `out`.
    pub(super) fn write(&self, store: &kubefold_store::Store, ahead: &kubefold_store::ReadAhead, item: &ListItem, clusters: &[ListCluster], out: &mut ChunkBuf) -> Result<(), Status> {
        let cluster = &clusters[item.cluster as usize];
        let gone = || Status::expired(format!("object version {} is no longer retained; list again", item.rv));
        match self {
            // Decompressed straight into the chunk.
            ItemWriter::Json => {
                if !store.write_served_from(ahead, item.rv, cluster.suffix.as_deref(), out).map_err(|e| Status::internal(e.to_string()))? {
                    return Err(gone());
                }
            }
            ItemWriter::Table(printer) => {
                let body = store.body_from(ahead, item.rv).map_err(|e| Status::internal(e.to_string()))?.ok_or_else(gone)?;
                out.with_vec(|out| printer.write_body_row(&body, cluster.suffix.as_deref(), item.rv, &cluster.name, out))
            }
        }
        Ok(())
    }
}

/// A list being written: its head, then items read from the store a
/// chunk at a time, then the closing brackets.
pub struct List {
    /// Keeps the items' records from compaction until the list is written
    /// (or its client went away).
    pub(super) pin: Arc<kubefold_store::ReadPin>,
    pub(super) store: kubefold_store::Store,
    pub(super) items: Arc<Vec<ListItem>>,
    pub(super) clusters: Arc<Vec<ListCluster>>,
    pub(super) writer: Arc<ItemWriter>,
    pub(super) head: Option<Vec<u8>>,
    /// The next item to write.
    pub(super) pos: usize,
    pub(super) done: bool,
    /// The rest of the scan, when `items` are only the first of the list's.
    pub(super) scan: Option<ListScan>,
    /// Objects chosen by label or field selectors: their records lie apart
    /// in the log, each read on its own (see [`List::rest`]).
    pub(super) scattered: bool,
}

impl List {
    /// The list's head alone, as its first chunk.
    pub(super) fn head_only(&mut self) -> ChunkBuf {
        let head = self.head.take().unwrap_or_default();
        let mut out = chunk_buffer(head.len());
        out.extend_from_slice(&head);
        out
    }

    /// The next chunk (about [`LIST_CHUNK_BYTES`]); sets `done` after the last.
    pub(super) fn chunk(&mut self) -> Result<ChunkBuf, Status> {
        let head = self.head.take().unwrap_or_default();
        let mut out = chunk_buffer(head.len() + LIST_CHUNK_BYTES.min((self.items.len() - self.pos) * 4096) + 64);
        out.extend_from_slice(&head);
        while out.len() < LIST_CHUNK_BYTES {
            let Some(item) = self.items.get(self.pos) else {
                out.extend_from_slice(b"]}");
                self.done = true;
                break;
            };
            if self.pos > 0 {
                out.push(b',');
            }
            self.pos += 1;
            self.writer.write(&self.store, &kubefold_store::ReadAhead::default(), item, &self.clusters, &mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::*;

    /// Names that differ in any one byte, whether in a whole eight-byte
    /// word or in the bytes after the last, hash apart: the names of a
    /// thousand members, and names of every length up to 24 that differ
    /// only in their last byte.
    #[test]
    fn cluster_names_that_differ_anywhere_hash_apart() {
        let hasher = BuildHasherDefault::<NameHasher>::default();
        let mut names: Vec<String> = (0..1000).map(|i| format!("member-{i:04}")).collect();
        for len in 1..=24 {
            names.push("a".repeat(len));
            names.push(format!("{}b", "a".repeat(len - 1)));
        }
        let hashes: std::collections::HashSet<u64> = names.iter().map(|name| hasher.hash_one(name.as_str())).collect();
        assert_eq!(hashes.len(), names.len());
        let places: ClusterPlaces = names.iter().enumerate().map(|(i, name)| (name.clone(), i as u32)).collect();
        assert!(names.iter().enumerate().all(|(i, name)| places.get(name.as_str()) == Some(&(i as u32))));
    }
}
