//! kubefold's shared log on etcd: the [`SharedLog`] several kubefold
//! replicas commit to and apply from, so that they serve one sequence of
//! resourceVersions.
//!
//! Key layout under the prefix (`/kubefold` by default):
//! - `{prefix}/head`: written by every transaction; its mod revision is
//!   what the next commit is fenced on (a transaction succeeds only when
//!   the head is still at the revision its writer applied, so two writers
//!   never interleave). Its value, `N RV`: the transaction's number of
//!   events, and the head resourceVersion before it (the head after a
//!   transaction without events).
//! - `{prefix}/e/{fence:016x}{i:04x}`: event `i` of the transaction fenced
//!   on `fence` (the head's revision before it: keys sort as transactions
//!   were committed), in the local store's record format (head, Table row,
//!   LZ4-compressed JSON body; [`kubefold_store::encode_event`]). Its
//!   resourceVersion is not in the record but derived from the key's
//!   revision: [`rv_of`]`(mod revision, i)`.
//! - `{prefix}/c/{cluster}\0{resource}`: a member checkpoint (the member's
//!   resourceVersion reached), written in the last transaction of a batch.
//! - `{prefix}/dicts/{resource}`: the LZ4 dictionary of a resource type's
//!   bodies, made by the first replica that commits enough of them (of
//!   that batch's first bodies, as the local store makes its own), created
//!   only when absent and never changed: a body compressed with it is about
//!   a third of one compressed alone (a pod's 3.5 KB of JSON: about 700
//!   bytes against 2.5 KB). Every replica reads them when it connects and
//!   learns new ones from its watch and catch-ups.
//! - `{prefix}/compacted`: the compaction floor, a resourceVersion
//!   (zero-padded to 20 digits: it only rises, by a comparison in etcd).
//! - `{prefix}/replicas/{id}` and `{prefix}/owners/{member}`: the replicas,
//!   each under its lease, and which one owns each member (see [`lease`]):
//!   a transaction carrying a member's changes is also fenced on its owner
//!   key being held under the writer's lease.
//!
//! Modules: [`lease`] (replicas, leases and member ownership), `records`
//! (members added through the admin API, kept in etcd), `watch` (the
//! watch of the log that feeds a replica's index: [`LogWatch`]).
//!
//! etcd's own request limits (128 operations and 1.5 MiB a transaction by
//! default) bound each transaction: a larger batch is committed as several,
//! fenced one on the other, its checkpoints in the last.

mod lease;
mod records;
mod watch;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp};
use kubefold_engine::event::StoredEvent;
use kubefold_store::{Dicts, RecordEncoder};
use kubefold_store::shared::{rv_of, revision_of, CaughtUp, Replicated, SharedError, SharedFuture, SharedLog, MAX_EVENTS_PER_REVISION};
use tracing::{info, warn};

/// The etcd client crate kubefold's log is written with (the benchmarks'
/// raw etcd reference writes with the same).
pub use etcd_client;
pub use lease::{MemberControl, Membership, MembershipOptions, ReplicaRecord, DEFAULT_LEASE_TTL};
pub use watch::{Change, LogWatch};

/// etcd's default limit of operations in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// etcd's default limit of a request's size (`--max-request-bytes`), 1.5 MiB.
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Room left in a transaction for its keys, the head and the checkpoints.
const REQUEST_MARGIN: usize = 64 * 1024;

/// Events read per page by a catch-up.
const PAGE: i64 = 1000;

/// How long one request to etcd may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The shortest time between two defragmentations (each blocks the etcd
/// member it runs on for a moment).
const DEFRAGMENT_EVERY: Duration = Duration::from_secs(3600);

/// Where etcd is and how to reach it (kube-apiserver's `--etcd-*` flags).
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Client URLs of the etcd members.
    pub servers: Vec<String>,
    /// The prefix of every key kubefold writes.
    pub prefix: String,
    /// CA certificate (PEM) that signed the etcd servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// Client key (PEM).
    pub key_file: Option<PathBuf>,
}

/// The shared log on etcd. Its blocking methods run their requests on its
/// own runtime and wait for them, so they may be called from any thread.
pub struct EtcdLog {
    client: Client,
    prefix: String,
    /// The etcd cluster's id.
    cluster_id: u64,
    runtime: Option<tokio::runtime::Runtime>,
    /// When etcd was last defragmented.
    defragmented: Mutex<Option<Instant>>,
    /// The owner keys this replica holds (the fence of its members' writes).
    fences: Mutex<lease::Fences>,
    /// The bodies' compression dictionaries recorded in etcd, by type.
    dicts: std::sync::RwLock<Dicts>,
    /// The compression state of commits.
    encoder: Mutex<RecordEncoder>,
}

fn unavailable(e: impl std::fmt::Display) -> SharedError {
    SharedError::Unavailable(e.to_string())
}

/// The key just after every key starting with `prefix` (etcd's range end
/// of a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// `N RV` of the head key.
fn head_value(events: usize, head_rv: u64) -> String {
    format!("{events} {head_rv}")
}

/// The head resourceVersion the head key at `revision` with `value` stands for.
fn head_rv(revision: u64, value: &[u8]) -> Result<u64, SharedError> {
    let text = std::str::from_utf8(value).map_err(|_| SharedError::Corrupt("head key".into()))?;
    let (n, rv) = text.split_once(' ').ok_or_else(|| SharedError::Corrupt(format!("head key {text:?}")))?;
    let n: usize = n.parse().map_err(|_| SharedError::Corrupt(format!("head key {text:?}")))?;
    let rv: u64 = rv.parse().map_err(|_| SharedError::Corrupt(format!("head key {text:?}")))?;
    Ok(if n > 0 { rv_of(revision, n - 1) } else { rv })
}

impl EtcdLog {
    /// Connects to etcd (TLS when a CA or client certificate is given) and
    /// checks that it answers.
    pub fn connect(options: &EtcdOptions) -> Result<Arc<EtcdLog>, SharedError> {
        if options.servers.is_empty() {
            return Err(unavailable("no etcd server given (--etcd-servers)"));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(|e| unavailable(format!("cannot start the etcd client's threads: {e}")))?;
        let mut connect = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(REQUEST_TIMEOUT).with_keep_alive(Duration::from_secs(10), Duration::from_secs(5)).with_keep_alive_while_idle(true);
        if options.ca_file.is_some() || options.cert_file.is_some() {
            let read = |p: &PathBuf| std::fs::read(p).map_err(|e| unavailable(format!("cannot read {}: {e}", p.display())));
            let mut tls = etcd_client::TlsOptions::new();
            if let Some(ca) = &options.ca_file {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
            }
            match (&options.cert_file, &options.key_file) {
                (Some(cert), Some(key)) => tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?)),
                (None, None) => {}
                _ => return Err(unavailable("--etcd-certfile and --etcd-keyfile go together")),
            }
            connect = connect.with_tls(tls);
        }
        let servers = options.servers.clone();
        // Waited for from this thread, which may be driving another runtime.
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let connected = async {
                let mut client = Client::connect(servers, Some(connect)).await?;
                let status = client.status().await?;
                let cluster_id = status.header().map_or(0, |h| h.cluster_id());
                Ok::<_, etcd_client::Error>((client, cluster_id))
            };
            let _ = tx.send(connected.await);
        });
        let reached = rx.recv_timeout(REQUEST_TIMEOUT).map_err(|_| unavailable(format!("etcd at {} did not answer in time", options.servers.join(","))));
        let (client, cluster_id) = match reached.and_then(|r| r.map_err(|e| unavailable(format!("cannot reach etcd at {}: {e}", options.servers.join(","))))) {
            Ok(connected) => connected,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let prefix = options.prefix.trim_end_matches('/').to_string();
        // The first defragmentation is an interval after the start, not at
        // the first compaction of every start.
        let log = EtcdLog {
            client,
            prefix,
            cluster_id,
            runtime: Some(runtime),
            defragmented: Mutex::new(Some(Instant::now())),
            fences: Mutex::new(lease::Fences::default()),
            dicts: Default::default(),
            encoder: Default::default(),
        };
        log.load_dicts()?;
        Ok(Arc::new(log))
    }

    fn dicts_prefix(&self) -> Vec<u8> {
        self.key("dicts/")
    }

    /// Learns every compression dictionary recorded in etcd.
    fn load_dicts(&self) -> Result<(), SharedError> {
        let (client, prefix) = (self.client.clone(), self.dicts_prefix());
        let kvs = self.wait(async move {
            let response = client.kv_client().get(prefix.clone(), Some(GetOptions::new().with_range(prefix_end(&prefix)))).await.map_err(unavailable)?;
            Ok(response.kvs().to_vec())
        })?;
        for kv in &kvs {
            self.learn_dict(kv);
        }
        Ok(())
    }

    /// Learns the dictionary `kv` holds, when it is one: the first learned
    /// of a type stays (a recorded dictionary never changes).
    fn learn_dict(&self, kv: &KeyValue) -> bool {
        let prefix = self.dicts_prefix();
        let Some(resource) = kv.key().strip_prefix(prefix.as_slice()) else { return false };
        let resource = String::from_utf8_lossy(resource).into_owned();
        let mut dicts = self.dicts.write().unwrap_or_else(|e| e.into_inner());
        dicts.entry(resource).or_insert_with(|| kv.value().into());
        true
    }

    /// Records a dictionary for each type of `events` that has none and
    /// enough bodies in them to make one, unless another replica recorded
    /// one first: the recorded one is then learned and used.
    fn ensure_dicts(&self, events: &[StoredEvent]) -> Result<(), SharedError> {
        let proposed = kubefold_store::new_dictionaries(&self.dicts.read().unwrap_or_else(|e| e.into_inner()), events);
        for (resource, dict) in proposed {
            let key = self.key(&format!("dicts/{resource}"));
            let client = self.client.clone();
            let (key2, value) = (key.clone(), dict.to_vec());
            let recorded = self.wait(async move {
                let txn = Txn::new()
                    .when(vec![Compare::create_revision(key2.clone(), CompareOp::Equal, 0)])
                    .and_then(vec![TxnOp::put(key2.clone(), value, None)])
                    .or_else(vec![TxnOp::get(key2, None)]);
                let response = client.kv_client().txn(txn).await.map_err(unavailable)?;
                if response.succeeded() {
                    return Ok(None);
                }
                let recorded = response.op_responses().into_iter().find_map(|op| match op {
                    etcd_client::TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                    _ => None,
                });
                recorded.map(Some).ok_or_else(|| unavailable("etcd answered a dictionary's read without it"))
            })?;
            match recorded {
                Some(kv) => {
                    self.learn_dict(&kv);
                }
                None => {
                    info!(resource = %resource, bytes = dict.len(), "Compression dictionary recorded in etcd.");
                    self.dicts.write().unwrap_or_else(|e| e.into_inner()).entry(resource).or_insert(dict);
                }
            }
        }
        Ok(())
    }

    /// Which log this is: the etcd cluster's id and the prefix. A replica's
    /// data dir is a copy of one log only.
    pub fn identity(&self) -> String {
        format!("etcd cluster {:016x}, prefix {}", self.cluster_id, self.prefix)
    }

    /// The log's compaction floor (a resourceVersion; 0: never compacted).
    /// A copy whose head is below it has missed deletions and is rebuilt.
    pub fn compacted_rv(&self) -> Result<u64, SharedError> {
        let client = self.client.clone();
        let key = self.key("compacted");
        self.wait(async move {
            let response = client.kv_client().get(key, None).await.map_err(unavailable)?;
            Ok(response.kvs().first().and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok()).unwrap_or(0))
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives as long as the log")
    }

    /// Runs `future` on the log's runtime (tasks that follow the log, such
    /// as its watch).
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime().spawn(future)
    }

    /// Runs `future` on the log's runtime and waits for it from this thread.
    fn wait<T: Send + 'static>(&self, future: impl std::future::Future<Output = Result<T, SharedError>> + Send + 'static) -> Result<T, SharedError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.runtime().spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv_timeout(REQUEST_TIMEOUT * 4).map_err(|_| unavailable("etcd did not answer in time"))?
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}/{rest}", self.prefix).into_bytes()
    }

    fn head_key(&self) -> Vec<u8> {
        self.key("head")
    }

    fn events_prefix(&self) -> Vec<u8> {
        self.key("e/")
    }

    fn checkpoints_prefix(&self) -> Vec<u8> {
        self.key("c/")
    }

    fn checkpoint_key(&self, cluster: &str, resource: &str) -> Vec<u8> {
        let mut key = self.checkpoints_prefix();
        key.extend_from_slice(cluster.as_bytes());
        key.push(0);
        key.extend_from_slice(resource.as_bytes());
        key
    }

    /// The first key of the events of the transaction fenced on `fence`.
    fn event_key_prefix(&self, fence: u64) -> Vec<u8> {
        let mut key = self.events_prefix();
        key.extend_from_slice(format!("{fence:016x}").as_bytes());
        key
    }

    fn event_key(&self, fence: u64, i: usize) -> Vec<u8> {
        let mut key = self.events_prefix();
        key.extend_from_slice(format!("{fence:016x}{i:04x}").as_bytes());
        key
    }

    /// The position of an event in its transaction, from its key.
    fn event_index(&self, key: &[u8]) -> Result<usize, SharedError> {
        let rest = key.strip_prefix(self.events_prefix().as_slice()).filter(|r| r.len() == 20).ok_or_else(|| SharedError::Corrupt("event key".into()))?;
        let text = std::str::from_utf8(&rest[16..]).map_err(|_| SharedError::Corrupt("event key".into()))?;
        usize::from_str_radix(text, 16).map_err(|_| SharedError::Corrupt("event key".into()))
    }

    /// The (cluster, resource) of a checkpoint key.
    fn checkpoint_of(&self, key: &[u8]) -> Option<(String, String)> {
        let rest = key.strip_prefix(self.checkpoints_prefix().as_slice())?;
        let text = String::from_utf8_lossy(rest);
        let (cluster, resource) = text.split_once('\0')?;
        Some((cluster.to_string(), resource.to_string()))
    }

    /// The event an event key and value hold, with its resourceVersion.
    fn event(&self, kv: &KeyValue) -> Result<StoredEvent, SharedError> {
        let i = self.event_index(kv.key())?;
        let dicts = self.dicts.read().unwrap_or_else(|e| e.into_inner());
        let mut event = kubefold_store::decode_event_with(kv.value(), &dicts).map_err(|e| SharedError::Corrupt(e.to_string()))?;
        event.rv = rv_of(kv.mod_revision() as u64, i);
        Ok(event)
    }

    /// Every key of the range `start..end` changed after `after`, as of
    /// `revision` (0: now), a page at a time; returns them with the
    /// revision read at.
    async fn range_after(client: &Client, start: Vec<u8>, end: Vec<u8>, after: u64, mut revision: i64) -> Result<(Vec<KeyValue>, i64), SharedError> {
        let mut kv = client.kv_client();
        let mut out = Vec::new();
        let mut from = start;
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE).with_min_mod_revision(after as i64 + 1);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let response = kv.get(from.clone(), Some(options)).await.map_err(unavailable)?;
            if revision == 0 {
                revision = response.header().map_or(0, |h| h.revision());
            }
            let kvs = response.kvs();
            let more = response.more();
            if let Some(last) = kvs.last() {
                from = last.key().to_vec();
                from.push(0);
            }
            out.extend(kvs.iter().cloned());
            if !more || kvs.is_empty() {
                return Ok((out, revision));
            }
        }
    }

    /// Groups keys read or watched into transactions, in revision order:
    /// only revisions that wrote the head are transactions of kubefold.
    pub(crate) fn transactions(&self, changes: Vec<Change>, include_all: bool) -> Result<Vec<Replicated>, SharedError> {
        let head_key = self.head_key();
        // Dictionaries first: a record may use one recorded among these
        // changes (always at an earlier revision than the record).
        let changes: Vec<Change> = changes.into_iter().filter(|change| !matches!(change, Change::Put(kv) if self.learn_dict(kv))).collect();
        let mut by_revision: std::collections::BTreeMap<u64, (bool, Replicated)> = std::collections::BTreeMap::new();
        let events_prefix = self.events_prefix();
        for change in changes {
            let (kv, deleted) = match &change {
                Change::Put(kv) => (kv, false),
                Change::Delete(kv) => (kv, true),
            };
            let revision = kv.mod_revision() as u64;
            let entry = by_revision.entry(revision).or_insert_with(|| (include_all, Replicated { revision, ..Replicated::default() }));
            if kv.key() == head_key.as_slice() {
                entry.0 = !deleted;
            } else if kv.key().starts_with(&events_prefix) {
                if !deleted {
                    entry.1.events.push(self.event(kv)?);
                }
            } else if let Some((cluster, resource)) = self.checkpoint_of(kv.key()) {
                if deleted {
                    entry.1.removed_checkpoints.push((cluster, resource));
                } else {
                    entry.1.checkpoints.push((cluster, resource, String::from_utf8_lossy(kv.value()).into_owned()));
                }
            }
        }
        Ok(by_revision
            .into_values()
            .filter(|(transaction, _)| *transaction)
            .map(|(_, mut batch)| {
                batch.events.sort_by_key(|e| e.rv);
                batch
            })
            .collect())
    }

    /// A watch of every key of the log from `after + 1` on.
    pub fn watch(self: &Arc<Self>, after: u64) -> LogWatch {
        LogWatch::new(self.clone(), after)
    }

    /// The etcd client.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The prefix of every key of the log, with its trailing `/`.
    pub(crate) fn log_prefix(&self) -> Vec<u8> {
        self.key("")
    }

    /// Defragments every etcd member, at most once per [`DEFRAGMENT_EVERY`].
    fn defragment_when_due(&self) {
        let mut last = self.defragmented.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < DEFRAGMENT_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let client = self.client.clone();
        let result = self.wait(async move {
            let mut maintenance = client.maintenance_client();
            maintenance.defragment().await.map_err(unavailable)?;
            Ok(())
        });
        match result {
            Ok(()) => info!("etcd defragmented."),
            Err(e) => warn!(error = %e, "etcd defragmentation failed."),
        }
    }
}

impl Drop for EtcdLog {
    fn drop(&mut self) {
        // Dropped from async code too: let the runtime's threads go without waiting.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl SharedLog for EtcdLog {
    fn identity(&self) -> String {
        EtcdLog::identity(self)
    }

    fn commit_part(
        &self,
        events: &[StoredEvent],
        checkpoints: &[(String, String, String)],
        removed_checkpoints: &[(String, String)],
        fence: u64,
    ) -> Result<(usize, u64), SharedError> {
        // One op for the head, one for each checkpoint, and each removed.
        let reserved = 1 + checkpoints.len() + removed_checkpoints.len();
        let room = MAX_TXN_OPS.saturating_sub(reserved).clamp(1, MAX_EVENTS_PER_REVISION);
        let mut ops = Vec::new();
        let mut bytes = 0usize;
        let mut taken = 0usize;
        self.ensure_dicts(events)?;
        let dicts = self.dicts.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut encoder = self.encoder.lock().unwrap_or_else(|e| e.into_inner());
        for (i, event) in events.iter().enumerate() {
            let record = encoder.encode(event, dicts.get(&event.resource)).map_err(|e| SharedError::Corrupt(e.to_string()))?;
            let key = self.event_key(fence, i);
            if taken > 0 && (taken >= room || bytes + record.len() + key.len() + REQUEST_MARGIN > MAX_REQUEST_BYTES) {
                break;
            }
            bytes += record.len() + key.len();
            ops.push(TxnOp::put(key, record, None));
            taken += 1;
        }
        let all = taken == events.len();
        // The head before: the resourceVersion of the previous
        // transaction's last event, derived as readers derive it.
        // (read only when it is what the head will say: no events).
        let prior_head = if taken == 0 { self.head_at(fence)? } else { 0 };
        ops.push(TxnOp::put(self.head_key(), head_value(taken, prior_head), None));
        if all {
            for (cluster, resource, member_rv) in checkpoints {
                ops.push(TxnOp::put(self.checkpoint_key(cluster, resource), member_rv.as_bytes().to_vec(), None));
            }
            for (cluster, resource) in removed_checkpoints {
                let key = self.checkpoint_key(cluster, resource);
                match resource.is_empty() {
                    // Every checkpoint of the cluster.
                    true => {
                        let end = prefix_end(&key);
                        ops.push(TxnOp::delete(key, Some(DeleteOptions::new().with_range(end))));
                    }
                    false => ops.push(TxnOp::delete(key, None)),
                }
            }
        }
        // The members whose changes these are: written only while this
        // replica holds their owner keys under its lease.
        let clusters = events[..taken].iter().map(|e| e.key.cluster.as_str());
        let clusters = clusters.chain(checkpoints.iter().map(|c| c.0.as_str())).chain(removed_checkpoints.iter().map(|c| c.0.as_str()));
        let owners = self.owner_fences(clusters)?;
        let mut compares = vec![Compare::mod_revision(self.head_key(), CompareOp::Equal, fence as i64)];
        compares.extend(owners.iter().map(|(_, key, lease)| Compare::lease(key.clone(), CompareOp::Equal, *lease)));
        let txn = Txn::new().when(compares).and_then(ops);
        let client = self.client.clone();
        let (succeeded, revision) = self.wait(async move {
            let response = client.kv_client().txn(txn).await.map_err(unavailable)?;
            Ok((response.succeeded(), response.header().map_or(0, |h| h.revision()) as u64))
        })?;
        if !succeeded {
            if !owners.is_empty() {
                if let Some(member) = self.lost_owner(&owners)? {
                    metrics::counter!("kubefold_etcd_fenced_writes_total").increment(1);
                    warn!(member = %member, "A commit of the member's changes was refused: another replica owns it now.");
                    return Err(SharedError::NotOwner(member));
                }
            }
            return Err(SharedError::Fenced(fence));
        }
        Ok((taken, revision))
    }

    fn catch_up(&self, revision: u64) -> Result<CaughtUp, SharedError> {
        let client = self.client.clone();
        let (head, compacted) = (self.head_key(), self.key("compacted"));
        // Event keys sort by the revision their transaction was fenced on:
        // the transactions after `revision` (a transaction's revision, or
        // 0) were fenced on it or later, so the range starts there.
        let (events_start, events_end, checkpoints_start) = (self.event_key_prefix(revision), prefix_end(&self.events_prefix()), self.checkpoints_prefix());
        let dicts_start = self.dicts_prefix();
        let (kvs, head_revision, head_rv, compacted_rv) = self.wait(async move {
            // The head, the floor and the first page of every key after
            // `revision` in one transaction: one consistent cut, read in one
            // round trip (a replica far from etcd catches up, after a commit
            // fenced out by another replica's, as fast as one nearby).
            let after = |start: &Vec<u8>, end: Vec<u8>| TxnOp::get(start.clone(), Some(GetOptions::new().with_range(end).with_limit(PAGE).with_min_mod_revision(revision as i64 + 1)));
            let read = Txn::new().and_then(vec![
                TxnOp::get(head.clone(), None),
                TxnOp::get(compacted, None),
                after(&events_start, events_end.clone()),
                after(&checkpoints_start, prefix_end(&checkpoints_start)),
                // Dictionaries recorded since (a handful, each at most 16 KiB).
                after(&dicts_start, prefix_end(&dicts_start)),
            ]);
            let response = client.kv_client().txn(read).await.map_err(unavailable)?;
            let at = response.header().map_or(0, |h| h.revision());
            let mut gets = response.op_responses().into_iter().map(|op| match op {
                etcd_client::TxnOpResponse::Get(get) => Ok(get),
                _ => Err(unavailable("etcd answered a read with another operation")),
            });
            let mut next = || gets.next().unwrap_or_else(|| Err(unavailable("etcd's answer lacks a read")));
            let (head_get, floor, events, checkpoints, dicts) = (next()?, next()?, next()?, next()?, next()?);
            let head_kv = head_get.kvs().first().cloned();
            let head_revision = head_kv.as_ref().map_or(0, |kv| kv.mod_revision() as u64);
            let head_rv = match &head_kv {
                Some(kv) => head_rv(kv.mod_revision() as u64, kv.value())?,
                None => 0,
            };
            let compacted_rv = floor.kvs().first().and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok()).unwrap_or(0u64);
            let mut kvs = dicts.kvs().to_vec();
            // A range longer than a page goes on at the same revision.
            for (get, end) in [(events, events_end), (checkpoints, prefix_end(&checkpoints_start))] {
                let more = get.more();
                kvs.extend(get.kvs().iter().cloned());
                if let (true, Some(last)) = (more, get.kvs().last()) {
                    let mut from = last.key().to_vec();
                    from.push(0);
                    let (rest, _) = EtcdLog::range_after(&client, from, end, revision, at).await?;
                    kvs.extend(rest);
                }
            }
            kvs.extend(head_kv.filter(|kv| kv.mod_revision() as u64 > revision));
            Ok((kvs, head_revision, head_rv, compacted_rv))
        })?;
        // Transactions are known by their head write, which only the last
        // is read with here: the others are every revision with events or
        // checkpoints.
        let batches = self.transactions(kvs.into_iter().map(Change::Put).collect(), true)?;
        Ok(CaughtUp { batches, head_revision, head_rv, compacted_rv })
    }

    fn current_rv(&self) -> SharedFuture<u64> {
        let client = self.client.clone();
        let head = self.head_key();
        let task = self.runtime().spawn(async move {
            // A linearizable read (etcd's default): at least every commit
            // acknowledged before it.
            let response = client.kv_client().get(head, None).await.map_err(unavailable)?;
            match response.kvs().first() {
                Some(kv) => head_rv(kv.mod_revision() as u64, kv.value()),
                None => Ok(0),
            }
        });
        Box::pin(async move { task.await.map_err(|e| unavailable(format!("the etcd client's task failed: {e}")))? })
    }

    fn replicas(&self) -> SharedFuture<Vec<kubefold_store::shared::ReplicaStatus>> {
        let task = self.runtime().spawn(lease::read_replicas(self.client.clone(), self.ownership_keys()));
        Box::pin(async move { task.await.map_err(|e| unavailable(format!("the etcd client's task failed: {e}")))? })
    }

    fn add_member(&self, name: &str, spec: Vec<u8>) -> SharedFuture<bool> {
        self.record_member(name, spec)
    }

    fn remove_member(&self, name: &str) -> SharedFuture<bool> {
        self.mark_removal(name)
    }

    fn members(&self) -> SharedFuture<std::collections::BTreeMap<String, Vec<u8>>> {
        self.recorded_members()
    }

    fn compact(&self, floor: u64, keep: &(dyn Fn(u64) -> bool + Sync)) -> Result<u64, SharedError> {
        let client = self.client.clone();
        // Transactions up to the floor's revision were fenced before it.
        let start = self.events_prefix();
        let end = self.event_key_prefix(revision_of(floor) + 1);
        let keys = self.wait(async move {
            let mut kv = client.kv_client();
            let mut out = Vec::new();
            let mut from = start;
            loop {
                let options = GetOptions::new().with_range(end.clone()).with_limit(PAGE).with_keys_only().with_max_mod_revision(revision_of(floor) as i64);
                let response = kv.get(from.clone(), Some(options)).await.map_err(unavailable)?;
                let kvs = response.kvs();
                if let Some(last) = kvs.last() {
                    from = last.key().to_vec();
                    from.push(0);
                }
                out.extend(kvs.iter().map(|kv| (kv.key().to_vec(), kv.mod_revision() as u64)));
                if !response.more() || kvs.is_empty() {
                    return Ok(out);
                }
            }
        })?;
        let mut doomed = Vec::new();
        for (key, revision) in keys {
            let rv = rv_of(revision, self.event_index(&key)?);
            if rv <= floor && !keep(rv) {
                doomed.push(key);
            }
        }
        let removed = doomed.len() as u64;
        let client = self.client.clone();
        let floor_key = self.key("compacted");
        self.wait(async move {
            let mut kv = client.kv_client();
            for chunk in doomed.chunks(MAX_TXN_OPS - 1) {
                let ops = chunk.iter().map(|key| TxnOp::delete(key.clone(), None)).collect::<Vec<_>>();
                kv.txn(Txn::new().and_then(ops)).await.map_err(unavailable)?;
            }
            // The floor only rises (replicas compact on their own clocks):
            // written zero-padded, so that etcd's byte order is numeric order.
            let padded = format!("{floor:020}");
            let raise = Txn::new()
                .when(vec![Compare::value(floor_key.clone(), CompareOp::Less, padded.clone())])
                .and_then(vec![TxnOp::put(floor_key.clone(), padded.clone(), None)]);
            if !kv.txn(raise).await.map_err(unavailable)?.succeeded() {
                let first = Txn::new()
                    .when(vec![Compare::create_revision(floor_key.clone(), CompareOp::Equal, 0)])
                    .and_then(vec![TxnOp::put(floor_key, padded, None)]);
                kv.txn(first).await.map_err(unavailable)?;
            }
            // etcd's own history up to the floor's revision goes too: a
            // replica that far behind reads the log with a range, not a watch.
            let mut client = client;
            match client.compact(revision_of(floor) as i64, None).await {
                Ok(_) => Ok(()),
                // Compacted there already (by another replica).
                Err(e) if e.to_string().contains("compacted") => Ok(()),
                Err(e) => Err(unavailable(e)),
            }
        })?;
        self.defragment_when_due();
        Ok(removed)
    }
}

impl EtcdLog {
    /// The head resourceVersion as of the head at `fence` (0: none yet).
    fn head_at(&self, fence: u64) -> Result<u64, SharedError> {
        if fence == 0 {
            return Ok(0);
        }
        let client = self.client.clone();
        let head = self.head_key();
        self.wait(async move {
            let response = client.kv_client().get(head, Some(GetOptions::new().with_revision(fence as i64))).await.map_err(unavailable)?;
            match response.kvs().first() {
                Some(kv) if kv.mod_revision() as u64 == fence => head_rv(fence, kv.value()),
                // The head moved on (the commit will be fenced out) or that
                // revision is compacted: what the value says matters no more.
                _ => Ok(0),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_every_key_it_starts() {
        assert_eq!(prefix_end(b"/kubefold/e/"), b"/kubefold/e0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
    }

    #[test]
    fn the_head_key_names_the_last_events_resource_version() {
        assert_eq!(head_rv(9, b"3 100").unwrap(), rv_of(9, 2));
        assert_eq!(head_rv(9, b"0 100").unwrap(), 100, "a transaction without events leaves the head where it was");
        assert!(head_rv(9, b"x").is_err());
    }
}
