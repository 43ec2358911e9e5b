//! Churn: a steady stream of realistic changes at a configured rate —
//! pods modified (restarts, annotations, labels), created and deleted
//! (only load pods and churn-created pods, alternating so the pod count
//! stays stable), and repeated events bumped now and then.

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
                    workload::touch_pod(&mut value, &mut self.rng, Utc::now());
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
        let cluster = Cluster { now: Utc::now(), ..self.cluster.clone() };
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
                    workload::bump_event(&mut value, Utc::now());
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

/// Runs churn at `rate` changes per second until shutdown.
pub async fn run(shared: Arc<Shared>, mut churn: Churn, rate: f64) {
    let tick = Duration::from_millis(20);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut budget = 0.0f64;
    let mut last = tokio::time::Instant::now();
    let mut reported = last;
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let now = tokio::time::Instant::now();
        budget = (budget + rate * now.duration_since(last).as_secs_f64()).min(rate.max(1.0));
        last = now;
        if budget < 1.0 {
            continue;
        }
        if let Ok(mut store) = shared.store.write() {
            while budget >= 1.0 {
                churn.step(&mut store);
                budget -= 1.0;
            }
        }
        if now.duration_since(reported) >= Duration::from_secs(30) {
            tracing::debug!(cluster = %shared.config.name, changes = churn.changes, "Churn is running.");
            reported = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubefold_engine::resources::ResourceType;

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
