//! Which replica watches which member: ownership by etcd leases.
//!
//! Every replica registers under `{prefix}/replicas/{id}` with a lease of
//! its own (TTL 15 s by default), kept alive while it runs; the record
//! names its address, the members of its configuration and the log
//! revision it applied. Each member is owned by one live replica, chosen
//! by rendezvous hashing over the live replicas that have the member in
//! their configuration (so members spread evenly, and only the members of
//! a replica that joins or leaves move). The owner holds
//! `{prefix}/owners/{member}`, created under its lease by a transaction that
//! succeeds only when the key is absent: two replicas never both own a
//! member.
//!
//! A replica starts a member's watchers only once it holds the owner key,
//! and stops them (before anything else) when it loses the key or its
//! lease. Every transaction that carries a member's events or checkpoints
//! compares the owner key's lease with the writer's ([`Fences`]): when a
//! lease expires etcd deletes the keys under it, so a replica that lost its
//! lease cannot write a member's changes once another took it over, even
//! if it has not noticed yet. A replica that dies stops renewing its
//! lease; when it expires the others take its members over, each resuming
//! the member's watchers from the checkpoints committed with its events.
//! When a replica joins, the owners of the members it should have release
//! them (watchers stopped, then the key deleted) and it takes them.
//!
//! Members registered through the admin API are recorded in etcd
//! ([`crate::records`]): every replica reads them each round, learns them
//! ([`MemberControl::learn`]), and any live replica may own them (rendezvous
//! hashing over all of them); one marked for removal is removed by its
//! owner ([`MemberControl::remove`]) before its record goes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use futures::future::BoxFuture;
use kubefold_store::shared::{ReplicaStatus, SharedError};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::{prefix_end, unavailable, EtcdLog};

/// The default time to live of a replica's lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// What a replica's registration key holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRecord {
    /// The replica's id.
    pub id: String,
    /// The address it serves on.
    pub address: String,
    /// The members of its configuration (those it may own).
    pub members: Vec<String>,
    /// The log revision it had applied when it last wrote the record.
    pub applied_revision: u64,
}

/// The owner keys this replica holds, and which members need one: the
/// fence of every commit.
#[derive(Debug, Default)]
pub struct Fences {
    /// Members whose changes only their owner may write (this replica's
    /// configured members; others are not fenced).
    managed: HashSet<String>,
    /// Member -> the lease its owner key is held under.
    held: HashMap<String, i64>,
}

impl EtcdLog {
    /// The key of `member`'s owner.
    pub(crate) fn owner_key(&self, member: &str) -> Vec<u8> {
        self.key(&format!("owners/{member}"))
    }

    fn owners_prefix(&self) -> Vec<u8> {
        self.key("owners/")
    }

    fn replicas_prefix(&self) -> Vec<u8> {
        self.key("replicas/")
    }

    fn fences(&self) -> std::sync::MutexGuard<'_, Fences> {
        self.fences.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner keys and leases a commit touching `clusters` is fenced on;
    /// `NotOwner` when one of them is a managed member this replica does
    /// not hold.
    pub(crate) fn owner_fences<'a>(&self, clusters: impl IntoIterator<Item = &'a str>) -> Result<Vec<(String, Vec<u8>, i64)>, SharedError> {
        let fences = self.fences();
        let mut out = Vec::new();
        let clusters: BTreeSet<&str> = clusters.into_iter().collect();
        for cluster in clusters {
            if !fences.managed.contains(cluster) {
                continue;
            }
            match fences.held.get(cluster) {
                Some(lease) => out.push((cluster.to_string(), self.owner_key(cluster), *lease)),
                None => return Err(SharedError::NotOwner(cluster.to_string())),
            }
        }
        Ok(out)
    }

    /// After a refused commit fenced on owner keys: the first member whose
    /// key is no longer held under the lease (forgotten here: its watchers
    /// are stopped by the ownership loop), if any.
    pub(crate) fn lost_owner(&self, owners: &[(String, Vec<u8>, i64)]) -> Result<Option<String>, SharedError> {
        let client = self.client.clone();
        let keys: Vec<(String, Vec<u8>, i64)> = owners.to_vec();
        let lost = self.wait(async move {
            let mut kv = client.kv_client();
            for (member, key, lease) in keys {
                let response = kv.get(key, None).await.map_err(unavailable)?;
                if response.kvs().first().map(|kv| kv.lease()) != Some(lease) {
                    return Ok(Some(member));
                }
            }
            Ok(None)
        })?;
        if let Some(member) = &lost {
            self.fences().held.remove(member);
        }
        Ok(lost)
    }

    /// The members this replica holds the owner key of.
    pub fn owned_members(&self) -> Vec<String> {
        let mut owned: Vec<String> = self.fences().held.keys().cloned().collect();
        owned.sort();
        owned
    }

    /// The keys the ownership state is read from.
    pub(crate) fn ownership_keys(&self) -> Keys {
        Keys { replicas: self.replicas_prefix(), owners: self.owners_prefix(), head: self.head_key(), members: self.members_prefix(), removals: self.removals_prefix() }
    }
}

/// Every registered replica with the members it owns, the remaining time
/// of its lease and its lag behind the log's head (the operations view).
pub(crate) async fn read_replicas(client: etcd_client::Client, keys: Keys) -> Result<Vec<ReplicaStatus>, SharedError> {
    let state = read_state(&keys, &client).await?;
    let mut leases = client.lease_client();
    let mut out = Vec::new();
    for (id, (record, lease)) in &state.replicas {
        let remaining = match leases.time_to_live(*lease, None).await {
            Ok(answer) => answer.ttl().max(0) as u64,
            Err(_) => 0,
        };
        let owned = state.owners.iter().filter(|(_, (owner, _))| owner == id).map(|(m, _)| m.clone()).collect();
        out.push(ReplicaStatus {
            id: id.clone(),
            address: record.address.clone(),
            lease: format!("{lease:016x}"),
            lease_remaining_seconds: remaining,
            applied_revision: record.applied_revision,
            lag_revisions: state.head_revision.saturating_sub(record.applied_revision),
            members: record.members.clone(),
            owned,
        });
    }
    Ok(out)
}

/// The prefixes of the replicas and the owners, and the log's head key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    replicas: Vec<u8>,
    owners: Vec<u8>,
    head: Vec<u8>,
    members: Vec<u8>,
    removals: Vec<u8>,
}

/// What the ownership loop drives: the watchers of one member.
pub trait MemberControl: Send + Sync + 'static {
    /// Starts the member's watchers (this replica holds its owner key):
    /// after the replica applied everything the log holds, from the
    /// member's checkpoints in it.
    fn take(&self, member: String) -> BoxFuture<'static, ()>;
    /// Stops the member's watchers, keeping its objects (another replica
    /// takes it over).
    fn release(&self, member: String) -> BoxFuture<'static, ()>;
    /// The log revision this replica applied.
    fn applied_revision(&self) -> u64;
    /// A member recorded in the log (added through the admin API of any
    /// replica) is new here, or its recorded spec changed: this replica
    /// serves it and may own it.
    fn learn(&self, member: String, spec: Vec<u8>) -> BoxFuture<'static, ()>;
    /// A recorded member's record is gone (its owner removed it): it is
    /// forgotten here, its objects' deletions come through the log.
    fn forget(&self, member: String) -> BoxFuture<'static, ()>;
    /// Removes a recorded member whose owner key this replica holds: its
    /// watchers stop and its objects' deletions are committed (fenced on
    /// the owner key); an error when they could not be.
    fn remove(&self, member: String) -> BoxFuture<'static, Result<(), String>>;
}

/// How a replica takes part in the ownership of members.
#[derive(Debug, Clone)]
pub struct MembershipOptions {
    /// The replica's id (unique among the replicas of one prefix).
    pub id: String,
    /// The address it serves on, for operators.
    pub address: String,
    /// Its lease's time to live.
    pub ttl: Duration,
    /// The members of its configuration.
    pub members: Vec<String>,
}

/// The ownership loop of one replica; [`Membership::resign`] ends it.
pub struct Membership {
    log: Arc<EtcdLog>,
    task: tokio::task::JoinHandle<()>,
    lease: Arc<Mutex<Option<i64>>>,
    control: Arc<dyn MemberControl>,
}

impl Membership {
    /// Registers the replica and runs its ownership loop on the log's runtime.
    pub fn start(log: &Arc<EtcdLog>, options: MembershipOptions, control: Arc<dyn MemberControl>) -> Membership {
        {
            let mut fences = log.fences();
            fences.managed = options.members.iter().cloned().collect();
            fences.held.clear();
        }
        let lease = Arc::new(Mutex::new(None));
        let task = log.spawn(run(log.clone(), options, control.clone(), lease.clone()));
        Membership { log: log.clone(), task, lease, control }
    }

    /// Stops taking members, stops the watchers of those held, and revokes
    /// the lease (its keys go: the other replicas take the members over at
    /// once instead of after the TTL). Runs on the log's runtime; the
    /// future it returns may be awaited from any other.
    pub fn resign(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.task.abort();
        let members = {
            let mut fences = self.log.fences();
            let held: Vec<String> = fences.held.keys().cloned().collect();
            fences.held.clear();
            held
        };
        let lease = self.lease.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (control, client) = (self.control.clone(), self.log.client.clone());
        let task = self.log.spawn(async move {
            for member in members {
                control.release(member).await;
            }
            if let Some(lease) = lease {
                let mut leases = client.lease_client();
                match tokio::time::timeout(Duration::from_secs(5), leases.revoke(lease)).await {
                    Ok(Ok(_)) => info!(lease = format!("{lease:016x}"), "Lease revoked: the other replicas take this one's members."),
                    _ => warn!("Revoking this replica's lease failed; it expires on its own."),
                }
            }
        });
        async move {
            let _ = task.await;
        }
    }
}

/// The replicas (record and lease by id), the owners (replica id and lease
/// by member), the log head's revision, the members recorded through the
/// admin API (spec by name) and those marked for removal, read at one
/// revision.
#[derive(Debug, Default)]
struct State {
    replicas: BTreeMap<String, (ReplicaRecord, i64)>,
    owners: BTreeMap<String, (String, i64)>,
    head_revision: u64,
    records: BTreeMap<String, Vec<u8>>,
    removing: BTreeSet<String>,
}

async fn read_state(keys: &Keys, client: &etcd_client::Client) -> Result<State, SharedError> {
    let (replicas, owners) = (&keys.replicas, &keys.owners);
    let range = |p: &Vec<u8>| TxnOp::get(p.clone(), Some(GetOptions::new().with_range(prefix_end(p))));
    let txn = Txn::new().and_then(vec![range(replicas), range(owners), TxnOp::get(keys.head.clone(), None), range(&keys.members), range(&keys.removals)]);
    let response = client.kv_client().txn(txn).await.map_err(unavailable)?;
    let mut state = State::default();
    let mut answers = response.op_responses();
    let records = answers.split_off(3.min(answers.len()));
    let mut records = records.into_iter();
    (state.records, state.removing) = crate::records::read_records(&keys.members, &keys.removals, [records.next(), records.next()]);
    for (n, op) in answers.into_iter().enumerate() {
        let TxnOpResponse::Get(get) = op else { continue };
        for kv in get.kvs() {
            match n {
                0 => {
                    let id = String::from_utf8_lossy(&kv.key()[replicas.len()..]).into_owned();
                    match serde_json::from_slice::<ReplicaRecord>(kv.value()) {
                        Ok(record) => {
                            state.replicas.insert(id, (record, kv.lease()));
                        }
                        Err(e) => warn!(replica = %id, error = %e, "A replica's registration cannot be read; it owns nothing."),
                    }
                }
                1 => {
                    let member = String::from_utf8_lossy(&kv.key()[owners.len()..]).into_owned();
                    state.owners.insert(member, (String::from_utf8_lossy(kv.value()).into_owned(), kv.lease()));
                }
                _ => state.head_revision = kv.mod_revision() as u64,
            }
        }
    }
    Ok(state)
}

/// What one replica's ownership loop keeps between rounds.
struct Local<'a> {
    /// The registration last written.
    written: &'a mut Option<ReplicaRecord>,
    /// The members whose watchers run here.
    running: &'a mut BTreeSet<String>,
    /// The recorded members learned here, with their specs.
    known: &'a mut BTreeMap<String, Vec<u8>>,
}

/// 64-bit FNV-1a, then a finalizer that spreads its bits.
fn score(member: &str, replica: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in member.bytes().chain([0]).chain(replica.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// The replica that should own `member`: the highest score among the live
/// replicas that have it in their configuration.
fn choose<'a>(member: &str, replicas: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Option<&'a str> {
    replicas.into_iter().filter(|(_, members)| members.iter().any(|m| m == member)).map(|(id, _)| (score(member, id), id)).max().map(|(_, id)| id)
}

/// The replica that should own a member recorded through the admin API:
/// the highest score among all live replicas.
fn choose_any<'a>(member: &str, replicas: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    replicas.into_iter().map(|id| (score(member, id), id)).max().map(|(_, id)| id)
}

/// The ownership loop: keeps the lease, registers, takes and releases members.
async fn run(log: Arc<EtcdLog>, options: MembershipOptions, control: Arc<dyn MemberControl>, lease_slot: Arc<Mutex<Option<i64>>>) {
    let tick = (options.ttl / 3).clamp(Duration::from_millis(300), Duration::from_secs(5));
    let ttl_seconds = options.ttl.as_secs().max(1) as i64;
    let client = log.client.clone();
    let replica_key = log.key(&format!("replicas/{}", options.id));
    // The lease held and when the request that last renewed it was sent
    // (etcd's expiry is at least a TTL after that).
    let mut lease: Option<(i64, Arc<Renewal>)> = None;
    let mut keepers: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut written: Option<ReplicaRecord> = None;
    // The members whose watchers run here (a commit refused by the fence
    // forgets the member's key at once; its watchers stop here).
    let mut running: BTreeSet<String> = BTreeSet::new();
    // The recorded members learned here, with their specs.
    let mut known: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut settled = false;
    loop {
        let started = Instant::now();
        let Some((id, renewal)) = lease.as_ref().map(|(id, r)| (*id, r.clone())) else {
            // A lease granted later than a TTL less a tick after its request
            // was sent counts as lost at once: the registration waits no longer.
            let current = record(&options, control.applied_revision());
            let registering = register(&client, ttl_seconds, &replica_key, &current);
            let registered = match tokio::time::timeout(options.ttl.saturating_sub(tick), registering).await {
                Ok(registered) => registered,
                Err(_) => Err(unavailable("etcd did not answer in time (its lease, if granted, expires unused)")),
            };
            match registered {
                Ok(id) => {
                    info!(replica = %options.id, lease = format!("{id:016x}"), ttl_seconds, "Registered as a replica in etcd.");
                    // Renewed by a task of its own: slow takes or releases
                    // here never delay a renewal. Its expiry is at least a
                    // TTL after the grant was sent (`started`); the keeper
                    // renews it at once.
                    let renewal = Arc::new(Renewal { renewed: Mutex::new(started), gone: AtomicBool::new(false) });
                    let keeper = tokio::spawn(keep_alive(client.clone(), id, tick, renewal.clone()));
                    lease = Some((id, renewal));
                    keepers.push(keeper);
                    *lease_slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
                    written = Some(record(&options, control.applied_revision()));
                }
                Err(e) => {
                    warn!(error = %e, "Registering this replica in etcd failed; trying again.");
                    tokio::time::sleep(tick).await;
                }
            }
            continue;
        };
        // A lease etcd no longer knows, or one not renewed in time, is lost:
        // every member's watchers stop before another replica can take them.
        let lost = if renewal.gone.load(Ordering::SeqCst) {
            warn!(lease = format!("{id:016x}"), "This replica's lease expired in etcd: its members' watchers stop.");
            true
        } else if renewal.safe_until(options.ttl, tick) <= Instant::now() {
            warn!(lease = format!("{id:016x}"), "This replica's lease was not renewed in time: its members' watchers stop.");
            true
        } else {
            false
        };
        if lost {
            for keeper in keepers.drain(..) {
                keeper.abort();
            }
            log.fences().held.clear();
            for member in std::mem::take(&mut running) {
                control.release(member).await;
            }
            metrics_owned(0);
            lease = None;
            *lease_slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
            continue;
        }
        let clock = LeaseClock { renewal: renewal.clone(), ttl: options.ttl, tick };
        let mut local = Local { written: &mut written, running: &mut running, known: &mut known };
        match rebalance(&log, &client, &options, id, &clock, &replica_key, &mut local, control.as_ref()).await {
            Ok(()) if !settled => {
                // The first round is done: the members left to others are
                // released here too (they were awaited, as Connecting, by
                // readiness until now).
                settled = true;
                for member in options.members.iter().filter(|m| !running.contains(*m)) {
                    control.release(member.clone()).await;
                }
            }
            Ok(()) => {}
            Err(e) => warn!(error = %e, "Reading the members' owners from etcd failed; trying again."),
        }
        // The next round, or the lease's check when it comes first.
        let next = (started + tick).min(renewal.safe_until(options.ttl, tick));
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
}

/// When the lease was last renewed (when the renewal that succeeded was
/// sent: etcd's expiry is at least a TTL after that), and whether etcd said
/// it no longer knows it.
struct Renewal {
    renewed: Mutex<Instant>,
    gone: AtomicBool,
}

impl Renewal {
    /// Until when the lease surely lives (a tick before the earliest time
    /// etcd may expire it): past it, it counts as lost.
    fn safe_until(&self, ttl: Duration, tick: Duration) -> Instant {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) + ttl.saturating_sub(tick)
    }
}

/// What bounds the requests of an ownership round: the lease's renewals.
struct LeaseClock {
    renewal: Arc<Renewal>,
    ttl: Duration,
    tick: Duration,
}

impl LeaseClock {
    /// Runs a request of the ownership loop, failing instead of waiting
    /// once the lease may expire unrenewed: a replica cut off from etcd
    /// is back at the top of its loop, and stops its members' watchers,
    /// before etcd can give them to another replica.
    async fn bounded<T>(&self, request: impl std::future::Future<Output = Result<T, SharedError>>) -> Result<T, SharedError> {
        tokio::pin!(request);
        loop {
            let until = self.renewal.safe_until(self.ttl, self.tick);
            if until <= Instant::now() {
                return Err(unavailable("etcd did not answer before this replica's lease could expire"));
            }
            tokio::select! {
                answer = &mut request => return answer,
                // Renewed meanwhile: the request may go on.
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {}
            }
        }
    }
}

/// Renews lease `id` every `tick` until etcd no longer knows it.
async fn keep_alive(client: etcd_client::Client, id: i64, tick: Duration, renewal: Arc<Renewal>) {
    loop {
        let sent = Instant::now();
        // The client reads the first answer itself: an error when etcd no
        // longer knows the lease (TTL 0).
        match tokio::time::timeout(tick, client.lease_client().keep_alive(id)).await {
            Ok(Ok(_)) => *renewal.renewed.lock().unwrap_or_else(|e| e.into_inner()) = sent,
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                renewal.gone.store(true, Ordering::SeqCst);
                return;
            }
            Ok(Err(e)) => warn!(lease = format!("{id:016x}"), error = %e, "Renewing this replica's lease failed; trying again."),
            Err(_) => warn!(lease = format!("{id:016x}"), "Renewing this replica's lease got no answer in time; trying again."),
        }
        tokio::time::sleep(tick.saturating_sub(sent.elapsed())).await;
    }
}

fn record(options: &MembershipOptions, applied_revision: u64) -> ReplicaRecord {
    ReplicaRecord { id: options.id.clone(), address: options.address.clone(), members: options.members.clone(), applied_revision }
}

fn metrics_owned(owned: usize) {
    metrics::gauge!("kubefold_etcd_owned_members").set(owned as f64);
}

/// Starts the watchers of `member`, whose owner key this replica holds
/// under `lease`. A start that does not finish while the lease surely
/// lives is undone (the key stays: the next round starts it again).
async fn start(log: &Arc<EtcdLog>, clock: &LeaseClock, member: &str, lease: i64, running: &mut BTreeSet<String>, control: &dyn MemberControl) -> Result<(), SharedError> {
    log.fences().held.insert(member.to_string(), lease);
    running.insert(member.to_string());
    let taking = control.take(member.to_string());
    if let Err(e) = clock.bounded(async {
        taking.await;
        Ok(())
    })
    .await
    {
        log.fences().held.remove(member);
        running.remove(member);
        control.release(member.to_string()).await;
        return Err(e);
    }
    Ok(())
}

/// Deletes `member`'s owner key if it is held under `lease` (its watchers
/// here are stopped): the replica that should own it takes it.
async fn give_up_key(log: &Arc<EtcdLog>, client: &etcd_client::Client, clock: &LeaseClock, member: &str, lease: i64) -> Result<(), SharedError> {
    let key = log.owner_key(member);
    let release = Txn::new().when(vec![Compare::lease(key.clone(), CompareOp::Equal, lease)]).and_then(vec![TxnOp::delete(key, None)]);
    clock.bounded(async { client.kv_client().txn(release).await.map_err(unavailable) }).await?;
    Ok(())
}

/// A recorded member marked for removal: when this replica holds its owner
/// key, or should own it and nobody does (its owner died half-way), its
/// watchers stop, its objects' deletions are committed under the owner
/// key's fence, and then its record, mark and owner key go together.
#[allow(clippy::too_many_arguments)]
async fn remove(
    log: &Arc<EtcdLog>,
    client: &etcd_client::Client,
    clock: &LeaseClock,
    state: &State,
    member: &String,
    me: &str,
    wanted: bool,
    lease: i64,
    running: &mut BTreeSet<String>,
    known: &mut BTreeMap<String, Vec<u8>>,
    control: &dyn MemberControl,
) -> Result<(), SharedError> {
    match state.owners.get(member) {
        Some((_, held)) if *held == lease => {}
        Some(_) => return Ok(()),
        None if !wanted => return Ok(()),
        None => {
            let key = log.owner_key(member);
            let take = Txn::new()
                .when(vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then(vec![TxnOp::put(key, me.to_string(), Some(PutOptions::new().with_lease(lease)))]);
            if !clock.bounded(async { client.kv_client().txn(take).await.map_err(unavailable) }).await?.succeeded() {
                return Ok(());
            }
        }
    }
    info!(member = %member, "Removing a member recorded in etcd: its watchers stop and its objects are deleted.");
    log.fences().held.insert(member.clone(), lease);
    running.remove(member);
    let removed = clock.bounded(async { control.remove(member.clone()).await.map_err(unavailable) }).await;
    if let Err(e) = removed {
        log.fences().held.remove(member);
        warn!(member = %member, error = %e, "Removing the member's objects failed; the next round tries again.");
        return Ok(());
    }
    let finished = clock.bounded(log.finish_removal(client, member, lease)).await;
    log.fences().held.remove(member);
    if finished? {
        known.remove(member);
        info!(member = %member, "The member is removed: its objects were deleted, its record is gone.");
    }
    Ok(())
}

/// Grants a lease and writes the registration under it.
async fn register(client: &etcd_client::Client, ttl: i64, key: &[u8], record: &ReplicaRecord) -> Result<i64, SharedError> {
    let granted = client.lease_client().grant(ttl, None).await.map_err(unavailable)?;
    let value = serde_json::to_vec(record).map_err(unavailable)?;
    client.kv_client().put(key.to_vec(), value, Some(PutOptions::new().with_lease(granted.id()))).await.map_err(unavailable)?;
    Ok(granted.id())
}

/// One round: the registration kept current, members this replica should
/// no longer own released, those it should own and nobody holds taken.
async fn rebalance(
    log: &Arc<EtcdLog>,
    client: &etcd_client::Client,
    options: &MembershipOptions,
    lease: i64,
    clock: &LeaseClock,
    replica_key: &[u8],
    local: &mut Local<'_>,
    control: &dyn MemberControl,
) -> Result<(), SharedError> {
    let Local { written, running, known } = local;
    let applied = control.applied_revision();
    metrics::gauge!("kubefold_etcd_applied_revision").set(applied as f64);
    let state = clock.bounded(read_state(&log.ownership_keys(), client)).await?;
    metrics::gauge!("kubefold_etcd_lag_revisions").set(state.head_revision.saturating_sub(applied) as f64);
    let current = record(options, applied);
    if written.as_ref() != Some(&current) || !state.replicas.contains_key(&options.id) {
        let value = serde_json::to_vec(&current).map_err(unavailable)?;
        let put = async { client.kv_client().put(replica_key.to_vec(), value, Some(PutOptions::new().with_lease(lease))).await.map_err(unavailable) };
        clock.bounded(put).await?;
        **written = Some(current);
    }
    let mut live: Vec<(&str, &[String])> = state.replicas.iter().map(|(id, (r, _))| (id.as_str(), r.members.as_slice())).collect();
    if !state.replicas.contains_key(&options.id) {
        live.push((options.id.as_str(), options.members.as_slice()));
    }
    // The members recorded through the admin API (a configured member of
    // the same name is the configuration's): learned, and forgotten once
    // their record is gone; their commits are fenced as the configured ones.
    let recorded: BTreeMap<&String, &Vec<u8>> = state.records.iter().filter(|(m, _)| !options.members.contains(m)).collect();
    for (member, spec) in &recorded {
        if known.get(*member) != Some(*spec) {
            info!(member = %member, "A member recorded in etcd: served here, owned by one replica.");
            control.learn((*member).clone(), (*spec).clone()).await;
            known.insert((*member).clone(), (*spec).clone());
        }
    }
    for member in known.keys().filter(|m| !recorded.contains_key(m)).cloned().collect::<Vec<_>>() {
        if running.remove(&member) {
            log.fences().held.remove(&member);
            control.release(member.clone()).await;
        }
        info!(member = %member, "A member recorded in etcd was removed.");
        control.forget(member.clone()).await;
        known.remove(&member);
    }
    log.fences().managed = options.members.iter().chain(recorded.keys().copied()).cloned().collect();
    // Owner keys lost (deleted, or held under another lease) first.
    for member in running.clone() {
        let still = state.owners.get(&member).is_some_and(|(_, l)| *l == lease) && log.fences().held.contains_key(&member);
        if !still {
            warn!(member = %member, "This replica no longer holds the member's owner key: its watchers stop.");
            log.fences().held.remove(&member);
            running.remove(&member);
            control.release(member).await;
        }
    }
    let ids: Vec<&str> = live.iter().map(|(id, _)| *id).collect();
    let members: Vec<&String> = options.members.iter().chain(recorded.keys().copied()).collect();
    for member in members {
        let wanted = if options.members.contains(member) { choose(member, live.iter().copied()) } else { choose_any(member, ids.iter().copied()) };
        if state.removing.contains(member) && !options.members.contains(member) {
            remove(log, client, clock, &state, member, &options.id, wanted == Some(options.id.as_str()), lease, running, known, control).await?;
            continue;
        }
        let holder = state.owners.get(member);
        let mine = running.contains(member);
        match (wanted == Some(options.id.as_str()), mine, holder) {
            // Another live replica should own it: release, then let it take.
            (false, true, _) => {
                info!(member = %member, to = wanted.unwrap_or(""), "Handing the member over to the replica that should own it.");
                log.fences().held.remove(member);
                running.remove(member);
                control.release(member.clone()).await;
                give_up_key(log, client, clock, member, lease).await?;
            }
            // A key still held here for a member another replica should
            // own, its watchers stopped (a hand-over whose delete failed).
            (false, false, Some((_, held))) if *held == lease => give_up_key(log, client, clock, member, lease).await?,
            // Nobody holds it and it should be here: take it.
            (true, false, None) => {
                let key = log.owner_key(member);
                let take = Txn::new()
                    .when(vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then(vec![TxnOp::put(key, options.id.clone(), Some(PutOptions::new().with_lease(lease)))]);
                let response = clock.bounded(async { client.kv_client().txn(take).await.map_err(unavailable) }).await?;
                if response.succeeded() {
                    info!(member = %member, "This replica owns the member now.");
                    start(log, clock, member, lease, running, control).await?;
                }
            }
            // Held under this lease with its watchers not running (their
            // start did not finish in time): started again.
            (true, false, Some((_, held))) if *held == lease => start(log, clock, member, lease, running, control).await?,
            _ => {}
        }
    }
    metrics_owned(log.fences().held.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_spreads_members_evenly_and_moves_few_when_a_replica_joins() {
        let members: Vec<String> = (0..300).map(|i| format!("member{i}")).collect();
        let ids = ["a", "b", "c"].map(String::from);
        let of = |ids: &[String]| -> BTreeMap<String, String> {
            let live: Vec<(&str, &[String])> = ids.iter().map(|id| (id.as_str(), members.as_slice())).collect();
            members.iter().map(|m| (m.clone(), choose(m, live.iter().copied()).unwrap().to_string())).collect()
        };
        let three = of(&ids);
        for id in &ids {
            let n = three.values().filter(|o| *o == id).count();
            assert!((70..=130).contains(&n), "{id} owns {n} of 300");
        }
        let two = of(&ids[..2]);
        let moved = two.iter().filter(|(m, o)| three[*m] != **o).count();
        assert_eq!(moved, three.values().filter(|o| *o == "c").count(), "only c's members move when c joins");
    }

    #[test]
    fn a_recorded_member_goes_to_the_same_replica_on_every_replica_and_spreads() {
        let ids = ["a", "b", "c"];
        let mut per_replica = BTreeMap::new();
        for i in 0..300 {
            let member = format!("added{i}");
            let owner = choose_any(&member, ids).unwrap();
            let mut reversed = ids;
            reversed.reverse();
            assert_eq!(choose_any(&member, reversed), Some(owner), "whatever order a replica reads them in");
            *per_replica.entry(owner).or_insert(0) += 1;
        }
        assert!(per_replica.values().all(|n| (70..=130).contains(n)), "{per_replica:?}");
        assert_eq!(choose_any("m", []), None);
    }

    #[test]
    fn only_replicas_configured_with_a_member_may_own_it() {
        let (only_a, both) = (vec!["m1".to_string()], vec!["m1".to_string(), "m2".to_string()]);
        let live = [("a", only_a.as_slice()), ("b", both.as_slice())];
        assert_eq!(choose("m2", live), Some("b"));
        assert_eq!(choose("m3", live), None);
    }
}
