//! The live fan-out of committed events, by what a watch can watch: each
//! event goes to the channel of its type (the watches of that type in every
//! namespace) and to that of its type and namespace (the watches of one
//! namespace), so that a committed event wakes only the watches it
//! concerns; a thousand watches of one namespace each are not woken by
//! every event of the fleet to reject nine in ten of them.
//!
//! A channel exists while someone receives from it: it is made by the first
//! [`Fanout::subscribe`] of its key and let go with its last
//! [`Subscription`], so that the keys nobody watches cost a publication one
//! lookup per event in an empty map, or nothing when no watch is open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kubefold_engine::event::StoredEvent;
use tokio::sync::broadcast;

/// How many committed events of one type the fan-out buffers for a slow
/// watch of every namespace before it is closed with 410 Expired.
pub const FANOUT_CAPACITY: usize = 16 * 1024;

/// How many committed events of one type in one namespace the fan-out
/// buffers for a slow watch of that namespace before it is closed with 410
/// Expired. Smaller than a type's bound: a channel allocates its whole
/// buffer (about 40 bytes an event) when its first watch opens, and a fleet
/// may have a watched namespace per tenant; a namespace's share of its
/// type's events is its share of this bound's time.
pub const NAMESPACE_FANOUT_CAPACITY: usize = 4 * 1024;

/// What a watch receives: the events of a type, of a type in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    resource: String,
    namespace: Option<String>,
}

/// The channels of one type.
#[derive(Default)]
struct TypeChannels {
    /// Its events in every namespace.
    all: Option<broadcast::Sender<Arc<StoredEvent>>>,
    /// Its events by namespace.
    namespaces: HashMap<String, broadcast::Sender<Arc<StoredEvent>>>,
}

impl TypeChannels {
    fn is_empty(&self) -> bool {
        self.all.is_none() && self.namespaces.is_empty()
    }
}

/// The channels by type key (`v1/pods`), and how many subscriptions they
/// have in all.
#[derive(Default)]
pub struct Fanout {
    channels: Mutex<HashMap<String, TypeChannels>>,
    subscriptions: AtomicUsize,
}

impl Fanout {
    /// A fan-out with no channels.
    pub fn new() -> Arc<Fanout> {
        Arc::new(Fanout::default())
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, TypeChannels>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to the committed events of type `resource` (its key,
    /// `v1/pods`), in `namespace` only or in every namespace (and those of
    /// a cluster-scoped type). Every event sent after this returns reaches
    /// the subscription: a publication that did not find its channel had
    /// published its snapshot before (see [`Fanout::send`]).
    pub fn subscribe(self: &Arc<Self>, resource: &str, namespace: Option<&str>) -> Subscription {
        let mut channels = self.channels();
        let of_type = channels.entry(resource.to_string()).or_default();
        let sender = match namespace {
            None => of_type.all.get_or_insert_with(|| broadcast::channel(FANOUT_CAPACITY).0),
            Some(ns) => of_type.namespaces.entry(ns.to_string()).or_insert_with(|| broadcast::channel(NAMESPACE_FANOUT_CAPACITY).0),
        };
        let receiver = sender.subscribe();
        self.subscriptions.fetch_add(1, Ordering::AcqRel);
        let key = Key { resource: resource.to_string(), namespace: namespace.map(str::to_string) };
        Subscription { receiver: Some(receiver), key, fanout: self.clone() }
    }

    /// Number of open subscriptions.
    pub fn subscriptions(&self) -> usize {
        self.subscriptions.load(Ordering::Acquire)
    }

    /// Number of channels (a type's, or a type's in a namespace) open.
    pub fn channel_count(&self) -> usize {
        self.channels().values().map(|c| usize::from(c.all.is_some()) + c.namespaces.len()).sum()
    }

    /// Sends committed events, in order, to the channels they concern.
    /// Called after their snapshot is published: a subscription made after
    /// this looked for its channel finds them in that snapshot.
    pub fn send(&self, events: &[Arc<StoredEvent>]) {
        let channels = self.channels();
        if channels.is_empty() {
            return;
        }
        for event in events {
            let Some(of_type) = channels.get(event.resource.as_str()) else { continue };
            // A send without receivers is not an error: the last one is
            // being dropped (it removes the channel next).
            if let Some(all) = &of_type.all {
                let _ = all.send(event.clone());
            }
            if let Some(ns) = of_type.namespaces.get(event.key.namespace.as_str()) {
                let _ = ns.send(event.clone());
            }
        }
    }

    /// Lets `receiver` go, and its channel with it when it was the last.
    fn unsubscribe(&self, key: &Key, receiver: broadcast::Receiver<Arc<StoredEvent>>) {
        let mut channels = self.channels();
        // Dropped under the lock: a subscribe of the same key either came
        // before (and keeps the channel) or comes after the removal.
        drop(receiver);
        self.subscriptions.fetch_sub(1, Ordering::AcqRel);
        let Some(of_type) = channels.get_mut(&key.resource) else { return };
        match &key.namespace {
            None => {
                if of_type.all.as_ref().is_some_and(|s| s.receiver_count() == 0) {
                    of_type.all = None;
                }
            }
            Some(ns) => {
                if of_type.namespaces.get(ns).is_some_and(|s| s.receiver_count() == 0) {
                    of_type.namespaces.remove(ns);
                }
            }
        }
        if of_type.is_empty() {
            channels.remove(&key.resource);
        }
    }
}

/// A watch's receiver of the committed events of its key; lets its channel
/// go when dropped as the last.
pub struct Subscription {
    /// `None` only while being dropped.
    receiver: Option<broadcast::Receiver<Arc<StoredEvent>>>,
    key: Key,
    fanout: Arc<Fanout>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("resource", &self.key.resource).field("namespace", &self.key.namespace).finish()
    }
}

impl Subscription {
    fn receiver(&mut self) -> &mut broadcast::Receiver<Arc<StoredEvent>> {
        self.receiver.as_mut().expect("a subscription has its receiver until dropped")
    }

    /// The next event (see [`broadcast::Receiver::recv`]): `Lagged(n)` when
    /// `n` events of the channel were let go before this receiver took them.
    pub async fn recv(&mut self) -> Result<Arc<StoredEvent>, broadcast::error::RecvError> {
        self.receiver().recv().await
    }

    /// The next event if one is ready (see [`broadcast::Receiver::try_recv`]).
    pub fn try_recv(&mut self) -> Result<Arc<StoredEvent>, broadcast::error::TryRecvError> {
        self.receiver().try_recv()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(receiver) = self.receiver.take() {
            self.fanout.unsubscribe(&self.key, receiver);
        }
    }
}

#[cfg(test)]
mod tests {
    use kubefold_engine::event::EventType;
    use kubefold_engine::object::ingest;
    use kubefold_engine::resources;

    use super::*;

    /// An ADDED event of a `v1/pods` object in `namespace`, filed under
    /// the type `resource`.
    fn event(rv: u64, resource: &str, namespace: &str) -> Arc<StoredEvent> {
        let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
        let raw = format!(r#"{{"metadata":{{"name":"o{rv}","namespace":"{namespace}","resourceVersion":"{rv}"}}}}"#);
        Arc::new(StoredEvent::new(rv, EventType::Added, resource, "c1", 0, ingest(&pods, "c1", raw.as_bytes()).unwrap()))
    }

    fn ready(sub: &mut Subscription) -> Vec<u64> {
        std::iter::from_fn(|| sub.try_recv().ok()).map(|e| e.rv).collect()
    }

    /// Each event reaches its type's channel and its namespace's, in
    /// order, and no other.
    #[test]
    fn events_reach_the_channels_of_their_type_and_namespace_only() {
        let fanout = Fanout::new();
        let mut pods_a = fanout.subscribe("v1/pods", Some("a"));
        let mut pods_a2 = fanout.subscribe("v1/pods", Some("a"));
        let mut pods = fanout.subscribe("v1/pods", None);
        let mut nodes = fanout.subscribe("v1/nodes", None);
        let mut cms_a = fanout.subscribe("v1/configmaps", Some("a"));
        assert_eq!(fanout.subscriptions(), 5);
        assert_eq!(fanout.channel_count(), 4, "two watches of one key share its channel");
        fanout.send(&[
            event(1, "v1/pods", "a"),
            event(2, "v1/pods", "b"),
            event(3, "v1/configmaps", "a"),
            event(4, "v1/nodes", ""),
            event(5, "v1/pods", "a"),
            event(6, "v1/services", "a"),
        ]);
        assert_eq!(ready(&mut pods_a), [1, 5]);
        assert_eq!(ready(&mut pods_a2), [1, 5]);
        assert_eq!(ready(&mut pods), [1, 2, 5]);
        assert_eq!(ready(&mut nodes), [4]);
        assert_eq!(ready(&mut cms_a), [3]);
    }

    /// A channel goes with its last subscription; a publication with no
    /// subscription at all finds nothing to send to.
    #[test]
    fn channels_go_with_their_last_subscription() {
        let fanout = Fanout::new();
        let first = fanout.subscribe("v1/pods", Some("a"));
        let second = fanout.subscribe("v1/pods", Some("a"));
        let other = fanout.subscribe("v1/pods", None);
        drop(first);
        assert_eq!(fanout.channel_count(), 2);
        drop(second);
        assert_eq!(fanout.channel_count(), 1, "the namespace's channel went with its last watch");
        drop(other);
        assert_eq!(fanout.channel_count(), 0);
        assert_eq!(fanout.subscriptions(), 0);
        assert!(fanout.channels().is_empty(), "no type is left behind");
        let events: Vec<_> = (1..=20_000).map(|rv| event(rv, "v1/pods", "a")).collect();
        fanout.send(&events);
        // A later watch of the same key gets a new channel and only what
        // is sent after it.
        let mut again = fanout.subscribe("v1/pods", Some("a"));
        fanout.send(&[event(20_001, "v1/pods", "a")]);
        assert_eq!(ready(&mut again), [20_001]);
    }

    /// A subscription that falls more than its channel's bound behind
    /// learns how many events it lost.
    #[test]
    fn a_subscription_behind_its_bound_learns_how_far() {
        let fanout = Fanout::new();
        let mut behind = fanout.subscribe("v1/pods", Some("a"));
        let events: Vec<_> = (1..=(NAMESPACE_FANOUT_CAPACITY as u64 + 10)).map(|rv| event(rv, "v1/pods", "a")).collect();
        fanout.send(&events);
        assert!(matches!(behind.try_recv(), Err(broadcast::error::TryRecvError::Lagged(10))));
    }
}
