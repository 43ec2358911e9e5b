//! The published side of the fleet: the latest committed index snapshot,
//! the live fan-out of committed events, the recent events kept in memory
//! and the compaction floor. Its one writer is the aggregator, through the
//! [`Publisher`] it takes from the fleet; HTTP workers read it at once
//! without waiting in the aggregator's mailbox.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use kubefold_engine::event::StoredEvent;
use kubefold_engine::index::Index;
use tokio::sync::watch;

use super::fanout::{Fanout, Subscription};
use super::Fleet;

/// The latest committed events kept in memory for watches that resume from
/// a recent resourceVersion, as kube-apiserver's watch cache keeps a window
/// of recent events: a thousand informers reconnecting at once (after a
/// restart of kubefold or of their own) each replay the same few events,
/// which would otherwise be read and decoded from the store once per
/// client. At most this many events ...
pub const RECENT_EVENTS: usize = 4096;
/// ... and about this many bytes of their bodies.
pub const RECENT_BYTES: usize = 16 << 20;

/// Committed events after `floor`, every one of them, oldest first.
struct Recent {
    events: VecDeque<Arc<StoredEvent>>,
    bytes: usize,
    /// Every event with a higher RV is in `events` (the RV of the last
    /// event let go, or the head the fleet started at).
    floor: u64,
}

impl Recent {
    fn push(&mut self, event: Arc<StoredEvent>) {
        self.bytes += event.body.json.len();
        self.events.push_back(event);
        while self.events.len() > RECENT_EVENTS || (self.bytes > RECENT_BYTES && self.events.len() > 1) {
            let Some(old) = self.events.pop_front() else { break };
            self.bytes -= old.body.json.len();
            self.floor = old.rv;
        }
    }
}

/// What the aggregator published last.
pub struct Published {
    snapshot: ArcSwap<Index>,
    /// The live events, by the type and namespace they concern.
    fanout: Arc<Fanout>,
    recent: Mutex<Recent>,
    compacted_rv: AtomicU64,
    /// The head RV of every snapshot published, for waiters.
    head: watch::Sender<u64>,
}

impl Published {
    /// Starts from the recovered `index`, compacted up to `compacted_rv`.
    pub(super) fn new(index: Index, compacted_rv: u64) -> Published {
        let recent = Mutex::new(Recent { events: VecDeque::new(), bytes: 0, floor: index.head_rv() });
        let head = watch::Sender::new(index.head_rv());
        Published { snapshot: ArcSwap::from_pointee(index), fanout: Fanout::new(), recent, compacted_rv: AtomicU64::new(compacted_rv), head }
    }

    /// The latest consistent snapshot of the index.
    pub fn snapshot(&self) -> Arc<Index> {
        self.snapshot.load_full()
    }

    /// Subscribes to the committed events of type `resource` (its key,
    /// `v1/pods`) in `namespace`, or in every namespace. Subscribe before
    /// taking the snapshot to see every event after it.
    pub fn subscribe(&self, resource: &str, namespace: Option<&str>) -> Subscription {
        self.fanout.subscribe(resource, namespace)
    }

    /// Number of live watch subscriptions.
    pub fn watchers(&self) -> usize {
        self.fanout.subscriptions()
    }

    /// Number of fan-out channels open (a type's, or a type's in one
    /// namespace): one per key someone watches.
    pub fn fanout_channels(&self) -> usize {
        self.fanout.channel_count()
    }

    /// The head RV of the last publication whose events have all been
    /// handed to the fan-out: a watch that takes every event ready in its
    /// channel after reading it has taken every event of its key up to it.
    pub fn sent_head(&self) -> u64 {
        *self.head.borrow()
    }

    /// Events up to this RV were compacted away.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv.load(Ordering::Acquire)
    }

    /// Every committed event with `from < rv <= upto`, oldest first, when
    /// all of them are still among the recent ones in memory; `None` when
    /// some must be read from the store.
    pub fn recent_events(&self, from: u64, upto: u64) -> Option<Vec<Arc<StoredEvent>>> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if from < recent.floor {
            return None;
        }
        let start = recent.events.partition_point(|e| e.rv <= from);
        Some(recent.events.iter().skip(start).take_while(|e| e.rv <= upto).cloned().collect())
    }

    /// Waits until `check` finds what it looks for in a published snapshot
    /// (the current one or one published later), up to `deadline`; `None`
    /// when it did not by then. Woken by each publication, not by polling.
    pub async fn wait_for<T>(&self, deadline: tokio::time::Instant, mut check: impl FnMut(&Index) -> Option<T>) -> Option<T> {
        // Subscribed before the first look: a snapshot published after it wakes the wait.
        let mut published = self.head.subscribe();
        loop {
            if let Some(found) = check(&self.snapshot()) {
                return Some(found);
            }
            match tokio::time::timeout_at(deadline, published.changed()).await {
                Ok(Ok(())) => {}
                // The deadline passed, or the fleet is going away: one last look.
                _ => return check(&self.snapshot()),
            }
        }
    }
}

/// The aggregator's handle on [`Published`]: the only way to publish.
/// Taken once from the fleet ([`Fleet::take_publisher`]).
pub struct Publisher {
    fleet: Arc<Fleet>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("head_rv", &self.fleet.snapshot().head_rv()).finish()
    }
}

impl Publisher {
    pub(super) fn new(fleet: Arc<Fleet>) -> Publisher {
        Publisher { fleet }
    }

    /// The fleet published to.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// Publishes a committed batch: its events to the recent ones, then the
    /// new snapshot, then its events to the live fan-out, then the new head
    /// to waiters. (A watch that sees the snapshot finds every event up to
    /// its head among the recent ones or in the store.)
    pub fn publish(&self, index: Index, events: Vec<StoredEvent>) {
        let published = &self.fleet.published;
        let events: Vec<Arc<StoredEvent>> = events.into_iter().map(Arc::new).collect();
        {
            let mut recent = published.recent.lock().unwrap_or_else(|e| e.into_inner());
            for event in &events {
                recent.push(event.clone());
            }
        }
        let head = index.head_rv();
        published.snapshot.store(Arc::new(index));
        published.fanout.send(&events);
        published.head.send_replace(head);
    }

    /// Raises the compaction floor (reads and watches older than it get 410).
    pub fn set_compacted_rv(&self, rv: u64) {
        self.fleet.published.compacted_rv.fetch_max(rv, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kubefold_engine::names::NameStyle;
    use kubefold_engine::resources;
    use kubefold_store::{Options, Store};

    use super::*;

    /// A wait ends with the publication that satisfies it, or at its
    /// deadline after one last look; the fleet has one publisher.
    #[tokio::test]
    async fn waits_end_with_the_publication_they_wait_for_or_at_their_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &Options::default()).unwrap();
        let fleet = Fleet::new(resources::builtin(), NameStyle::Qualified, store, Index::at(7), 0);
        let publisher = fleet.take_publisher().unwrap();
        assert!(fleet.take_publisher().is_none(), "one publisher per fleet");
        let later = || tokio::time::Instant::now() + Duration::from_secs(30);
        let head_at_least = |rv: u64| move |index: &Index| (index.head_rv() >= rv).then_some(index.head_rv());
        assert_eq!(fleet.wait_for(later(), head_at_least(7)).await, Some(7), "already published");

        let waiter = {
            let fleet = fleet.clone();
            tokio::spawn(async move { fleet.wait_for(later(), head_at_least(9)).await })
        };
        tokio::task::yield_now().await;
        publisher.publish(Index::at(8), Vec::new());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "8 is not 9");
        publisher.publish(Index::at(9), Vec::new());
        assert_eq!(waiter.await.unwrap(), Some(9));

        // Nothing publishes 10: the wait ends at its deadline.
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_millis(50);
        assert_eq!(fleet.wait_for(deadline, head_at_least(10)).await, None);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }
}
