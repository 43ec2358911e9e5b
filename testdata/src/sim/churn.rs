//! Churn: a steady stream of realistic changes at a configured rate —
//! pods modified (restarts, annotations, labels), created and deleted
//! (only load pods and churn-created pods, alternating so the pod count
//! stays stable), and repeated events bumped now and then; the rate can be
//! changed at runtime (`PUT /sim/churn`). Also [`burst`]: many pods at once.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::store::{self, Store};
use super::Shared;
use crate::workload::{self, Cluster};

/// The churn driver's state.
pub struct Churn {
    cluster: Cluster,
    rng: StdRng,
    pods: usize,
    events: Option<usize>,
    /// Keys of pods churn may modify (stale keys are dropped when met).
    modifiable: Vec<String>,
    /// Keys of pods churn may delete (load pods and its own).
    deletable: Vec<String>,
    /// Events it may bump.
    bumpable: Vec<String>,
    /// Creates minus deletes: create when <= 0, delete when > 0.
    balance: i64,
    /// The next churn pod's number.
    serial: usize,
    /// Whether the cluster has load pods (churn pods are then load pods).
    load: bool,
    /// Changes made.
    pub changes: u64,
    /// The member's clock for the next step (set by the driver; the clock skew fault moves it).
    pub now: chrono::DateTime<Utc>,
}

/// One churn operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A pod was modified.
    Modify,
    /// A pod was created.
    Create,
    /// A pod was deleted.
    Delete,
    /// An event was bumped.
    BumpEvent,
    /// Nothing could be done.
    Skip,
}

impl Churn {
    /// Churn over `store`'s current pods; `load_pods` is the `--pods` count.
    pub fn new(store: &Store, cluster: Cluster, seed: u64, load_pods: usize) -> Churn {
        let pods = store.resource_index("", "v1", "pods").unwrap_or(0);
        let events = store.resource_index("", "v1", "events");
        let modifiable: Vec<String> = store.range(pods, "").map(|(k, _)| k.clone()).collect();
        let deletable = (0..load_pods)
            .map(|i| store::key(Some(&workload::load_namespace(i)), &workload::load_pod_name(i)))
            .collect();
        let bumpable = events.map(|e| store.range(e, "").map(|(k, _)| k.clone()).collect()).unwrap_or_default();
        Churn {
            cluster,
            rng: StdRng::seed_from_u64(seed ^ 0x0c4u64.rotate_left(40)),
            pods,
            events,
            modifiable,
            deletable,
            bumpable,
            balance: 0,
            serial: load_pods,
            load: load_pods > 0,
            changes: 0,
            now: Utc::now(),
        }
    }

    /// Performs one random operation on the store.
    pub fn step(&mut self, store: &mut Store) -> Operation {
        let roll = self.rng.random_range(0..100);
        let operation = match roll {
            0..=59 => self.modify(store),
            60..=89 if self.balance <= 0 => self.create(store),
            60..=89 => self.delete(store),
            _ => self.bump_event(store),
        };
        if operation != Operation::Skip {
            self.changes += 1;
        }
        operation
    }

    fn modify(&mut self, store: &mut Store) -> Operation {
        while !self.modifiable.is_empty() {
            let i = self.rng.random_range(0..self.modifiable.len());
            let key = self.modifiable[i].clone();
            match store.get(self.pods, &key) {
                Some(pod) => {
                    let mut value = pod.value();
                    if value["metadata"]["deletionTimestamp"].is_string() {
                        self.modifiable.swap_remove(i);
                        continue;
                    }
                    workload::touch_pod(&mut value, &mut self.rng, self.now);
                    store.put(self.pods, &key, value);
                    return Operation::Modify;
                }
                None => {
                    self.modifiable.swap_remove(i);
                }
            }
        }
        Operation::Skip
    }

    fn create(&mut self, store: &mut Store) -> Operation {
        let cluster = Cluster { now: self.now, ..self.cluster.clone() };
        let serial = self.serial;
        self.serial += 1;
        let pod = workload::churn_pod(&cluster, serial, self.load);
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let key = store::key(Some(&namespace), &name);
        if store.get(self.pods, &key).is_some() {
            return Operation::Skip;
        }
        store.put(self.pods, &key, pod);
        self.modifiable.push(key.clone());
        self.deletable.push(key);
        self.balance += 1;
        Operation::Create
    }

    fn delete(&mut self, store: &mut Store) -> Operation {
        while !self.deletable.is_empty() {
            let i = self.rng.random_range(0..self.deletable.len());
            let key = self.deletable.swap_remove(i);
            if let Some(pod) = store.get(self.pods, &key).cloned() {
                store.remove(self.pods, &key, pod.value());
                self.balance -= 1;
                return Operation::Delete;
            }
        }
        // Nothing deletable left: create instead, the count grows by one.
        self.create(store)
    }

    fn bump_event(&mut self, store: &mut Store) -> Operation {
        let Some(events) = self.events else { return self.modify(store) };
        while !self.bumpable.is_empty() {
            let i = self.rng.random_range(0..self.bumpable.len());
            let key = self.bumpable[i].clone();
            match store.get(events, &key) {
                Some(event) => {
                    let mut value = event.value();
                    workload::bump_event(&mut value, self.now);
                    store.put(events, &key, value);
                    return Operation::BumpEvent;
                }
                None => {
                    self.bumpable.swap_remove(i);
                }
            }
        }
        self.modify(store)
    }
}

/// Runs churn at the rate of `shared.churn_rate` until shutdown; idle (no
/// timer) while the rate is 0. The driver is built when churn first starts.
pub async fn run(shared: Arc<Shared>) {
    let mut rates = shared.churn_rate.subscribe();
    let mut churn: Option<Churn> = None;
    loop {
        let rate = *rates.borrow_and_update();
        if rate <= 0.0 || !rate.is_finite() {
            tokio::select! {
                _ = shared.shutdown.cancelled() => return,
                changed = rates.changed() => if changed.is_err() { return },
            }
            continue;
        }
        let churn = match &mut churn {
            Some(churn) => churn,
            None => {
                let Ok(store) = shared.store.read() else { return };
                let cluster = Cluster::new(&shared.config.name, shared.config.seed, shared.now());
                churn.insert(Churn::new(&store, cluster, shared.config.seed, shared.config.pods))
            }
        };
        tracing::debug!(cluster = %shared.config.name, rate, "Churn rate set.");
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            changed = rates.changed() => if changed.is_err() { return },
            _ = churn_at(&shared, churn, rate) => return,
        }
    }
}

/// Makes `rate` changes per second until cancelled by the caller.
async fn churn_at(shared: &Shared, churn: &mut Churn, rate: f64) {
    let mut tick = Duration::from_millis(20);
    let mut start = tokio::time::Instant::now();
    if shared.config.fleet_member && rate > 0.0 {
        // A fleet's members churn slowly each: a timer per member at the
        // pace of its own changes, not 50 wakeups a second a thousand times.
        tick = Duration::from_secs_f64((1.0 / rate).clamp(0.02, 1.0));
        // Each at a phase of its own within its tick: the members of a
        // fleet are separate clusters whose changes fall at independent
        // moments, not in step with when their rate was set (a driver
        // setting a thousand rates within a few hundred milliseconds made
        // every change of the fleet fall in that slice of each second).
        start += tick.mul_f64(phase(&shared.config.name, shared.config.seed));
    }
    let mut interval = tokio::time::interval_at(start, tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut budget = Budget::new(rate, tick);
    let mut last = tokio::time::Instant::now();
    let mut reported = last;
    loop {
        interval.tick().await;
        let now = tokio::time::Instant::now();
        let mut due = budget.add(now.duration_since(last));
        last = now;
        if due == 0 {
            continue;
        }
        let clock = shared.now();
        if let Ok(mut store) = shared.store.write() {
            while due > 0 {
                churn.now = clock;
                churn.step(&mut store);
                due -= 1;
            }
        }
        if now.duration_since(reported) >= Duration::from_secs(30) {
            tracing::debug!(cluster = %shared.config.name, changes = churn.changes, "Churn is running.");
            reported = now;
        }
    }
}

/// A member's phase within its churn tick, as a fraction of the tick:
/// the same for a name and seed in every run, spread evenly over a fleet's
/// names (FNV-1a of both).
fn phase(name: &str, seed: u64) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes().chain(seed.to_le_bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    // The high bits mix best; 53 of them fill an f64's mantissa.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// The changes owed at a rate: time passing adds to it, changes made take
/// from it.
struct Budget {
    rate: f64,
    owed: f64,
    /// At most this much is owed: after a stall the churn catches up about
    /// a second's changes, not all it missed. It holds a tick's changes
    /// beyond that second, so a tick that fires a little late (its time
    /// then a little over the tick) never leaves the next one short of a
    /// change it owes.
    cap: f64,
}

impl Budget {
    fn new(rate: f64, tick: Duration) -> Budget {
        Budget { rate, owed: 0.0, cap: rate.max(1.0) + rate * tick.as_secs_f64() }
    }

    /// Adds `elapsed` at the rate; returns the whole changes now due, and
    /// keeps the fraction owed.
    fn add(&mut self, elapsed: Duration) -> u64 {
        self.owed = (self.owed + self.rate * elapsed.as_secs_f64()).min(self.cap);
        // A tick's share computed as 0.9999... of a change is that change.
        let due = (self.owed + 1e-9).floor().max(0.0);
        self.owed -= due;
        due as u64
    }
}

/// Pods per store write of a burst.
const BURST_BATCH: usize = 1000;

/// Creates `count` new pods at once (load pods `load-{n}` from number
/// 1,000,000 on, in namespaces load-0..load-9, created if missing), in
/// batches of [`BURST_BATCH`] per store write. Returns the head version.
pub fn burst(shared: &Shared, count: usize) -> u64 {
    static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1_000_000);
    if count == 0 {
        return shared.read().map(|s| s.rv()).unwrap_or_default();
    }
    let cluster = Cluster::new(&shared.config.name, shared.config.seed, shared.now());
    if let Ok(mut store) = shared.store.write() {
        if let Some(namespaces) = store.resource_index("", "v1", "namespaces") {
            for namespace in workload::load_namespaces(&cluster) {
                let Some(name) = namespace["metadata"]["name"].as_str().map(str::to_string) else { continue };
                if namespace["kind"] == "Namespace" && store.get(namespaces, &name).is_none() {
                    store.put(namespaces, &name, namespace);
                }
            }
        }
    }
    let mut done = 0;
    while done < count {
        let n = (count - done).min(BURST_BATCH);
        let first = SERIAL.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let pods: Vec<(String, serde_json::Value)> = (first..first + n)
            .filter_map(|i| {
                let pod = serde_json::from_str(&workload::load_pod_json(&cluster, i, None)).ok()?;
                Some((store::key(Some(&workload::load_namespace(i)), &workload::load_pod_name(i)), pod))
            })
            .collect();
        let Ok(mut store) = shared.store.write() else { break };
        let Some(index) = store.resource_index("", "v1", "pods") else { break };
        for (key, pod) in pods {
            store.put(index, &key, pod);
        }
        done += n;
    }
    tracing::info!(cluster = %shared.config.name, pods = count, "Burst of pods created.");
    shared.read().map(|s| s.rv()).unwrap_or_default()
}

/// Creates `count` small ConfigMaps at once (`burst-{n}` in `default`,
/// about 300 bytes each), in batches of [`BURST_BATCH`] per store write:
/// many events that cost little to encode and decode. Returns the head version.
pub fn burst_config_maps(shared: &Shared, count: usize) -> u64 {
    static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let created = shared.now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut done = 0;
    while done < count {
        let n = (count - done).min(BURST_BATCH);
        let first = SERIAL.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let Ok(mut store) = shared.store.write() else { break };
        let Some(index) = store.resource_index("", "v1", "configmaps") else { break };
        for i in first..first + n {
            let name = format!("burst-{i}");
            let uid = format!("00000000-0000-4000-8000-{:012x}", i);
            let config_map = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "uid": uid, "creationTimestamp": created, "labels": {"app": "burst"}},
                "data": {"index": i.to_string()}
            });
            store.put(index, &store::key(Some("default"), &name), config_map);
        }
        done += n;
    }
    tracing::info!(cluster = %shared.config.name, config_maps = count, "Burst of ConfigMaps created.");
    shared.read().map(|s| s.rv()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::resources::ResourceType;

    /// A member churning once a second makes one change a tick even when
    /// its ticks come a little late or early: before, the budget was capped
    /// at one change, a late tick's excess was lost and the next tick came
    /// short, and a fleet asked for 1,000 changes a second made about 620.
    #[test]
    fn a_tick_that_fires_late_or_early_still_makes_its_change() {
        let ms = Duration::from_millis;
        let mut budget = Budget::new(1.0, Duration::from_secs(1));
        let ticks = [ms(1000), ms(1003), ms(997), ms(1000), ms(1010), ms(990), ms(1001), ms(999)];
        let made: Vec<u64> = ticks.iter().map(|&t| budget.add(t)).collect();
        assert_eq!(made, vec![1; ticks.len()], "one change a tick");
        // Fast churn on 20 ms ticks: two changes a tick at 100 a second.
        let mut budget = Budget::new(100.0, ms(20));
        assert_eq!((0..50).map(|_| budget.add(ms(20))).sum::<u64>(), 100);
        // After a stall only about a second's changes are owed, not all missed.
        let mut budget = Budget::new(100.0, ms(20));
        assert_eq!(budget.add(Duration::from_secs(30)), 102);
    }

    /// The members of a fleet churn at phases spread over their tick (a
    /// thousand names, ten slices of the tick: none holds fewer than half or
    /// more than twice its share), the same for a name in every run.
    #[test]
    fn fleet_members_churn_at_phases_spread_over_their_tick() {
        let mut slices = [0usize; 10];
        for i in 1..=1000 {
            let p = phase(&format!("member{i}"), 42);
            assert!((0.0..1.0).contains(&p));
            slices[(p * 10.0) as usize] += 1;
        }
        assert!(slices.iter().all(|&n| (50..=200).contains(&n)), "{slices:?}");
        assert_eq!(phase("member7", 42), phase("member7", 42));
        assert_ne!(phase("member7", 42), phase("member8", 42));
    }

    #[test]
    fn churn_keeps_the_pod_count_stable_and_only_deletes_its_own_or_load_pods() {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 100_000, 300, 1);
        let cluster = Cluster::new("member1", 1, Utc::now());
        for object in workload::demo(&cluster).into_iter().chain(workload::load_namespaces(&cluster)).chain(workload::load_pods(&cluster, 0..50)) {
            let index = store
                .resource_index_of_kind(object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap())
                .unwrap();
            store.load(index, object);
        }
        store.finish_load();
        let pods = store.resource_index("", "v1", "pods").unwrap();
        let before = store.count(pods);
        let demo_pods: Vec<String> = store.range(pods, "").filter(|(k, _)| !k.starts_with("load-")).map(|(k, _)| k.clone()).collect();
        let mut churn = Churn::new(&store, cluster, 1, 50);
        let start = store.rv();
        let mut seen = std::collections::HashMap::new();
        for _ in 0..2000 {
            *seen.entry(churn.step(&mut store)).or_insert(0) += 1;
        }
        assert_eq!(store.rv() - start, churn.changes);
        assert!((store.count(pods) as i64 - before as i64).abs() <= 1);
        for key in demo_pods {
            assert!(store.get(pods, &key).is_some(), "{key} was deleted");
        }
        for op in [Operation::Modify, Operation::Create, Operation::Delete, Operation::BumpEvent] {
            assert!(seen.get(&op).copied().unwrap_or(0) > 50, "{op:?}: {seen:?}");
        }
    }
}
