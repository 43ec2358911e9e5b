//! The index as of a resourceVersion: the live snapshot, one rewound
//! through the event log (kept in a small cache, as paged lists read one
//! version page after page), or a wait for a version not reached yet.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubefold_actors::fleet::Fleet;
use kubefold_engine::index::Index;
use kubefold_engine::status::Status;

/// Snapshots of the past rewound lately, by resourceVersion.
pub struct Snapshots {
    cache: Mutex<lru::LruCache<u64, Arc<Index>>>,
}

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots::new()
    }
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.cache.lock().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("Snapshots").field("cached", &cached).finish()
    }
}

impl Snapshots {
    /// Snapshots rewound at this many versions are kept.
    const CACHED: usize = 8;

    /// An empty cache.
    pub fn new() -> Snapshots {
        let cache = lru::LruCache::new(NonZeroUsize::new(Self::CACHED).unwrap_or(NonZeroUsize::MIN));
        Snapshots { cache: Mutex::new(cache) }
    }

    /// The index of `fleet` as of `rv`: the live snapshot, a cached one, or
    /// the live one rewound through the event log. 410 when `rv` left the
    /// retained history; 504 when the index has not reached it.
    pub fn at(&self, fleet: &Fleet, rv: u64) -> Result<Arc<Index>, Status> {
        let current = fleet.snapshot();
        if current.head_rv() == rv {
            return Ok(current);
        }
        if rv > current.head_rv() {
            return Err(Status::too_large_resource_version(rv, current.head_rv(), 1));
        }
        let expired = || Status::expired(format!("too old resource version: {rv} ({})", fleet.compacted_rv() + 1));
        if rv < fleet.compacted_rv() {
            return Err(expired());
        }
        let store = fleet.store();
        if store.in_lost_history(rv) {
            return Err(Status::expired(format!("too old resource version: {rv} (the event log's history there was lost to storage damage)")));
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = cache.get(&rv) {
            return Ok(s.clone());
        }
        let mut newer: Vec<_> = store
            .events_after(rv)
            .take_while(|e| e.as_ref().map_or(true, |e| e.rv <= current.head_rv()))
            .collect::<Result<_, _>>()
            // A damaged record (the store logged and counted it): 410, the
            // client lists the current state again.
            .map_err(|e| match e.cause() {
                kubefold_store::Cause::Corrupt => Status::expired(format!("too old resource version: {rv} (the event log cannot be read after it: {e})")),
                _ => Status::internal(e.to_string()),
            })?;
        newer.reverse();
        let rewound = current.rewind(rv, newer, |r| store.event(r).ok().flatten()).ok_or_else(expired)?;
        let rewound = Arc::new(rewound);
        cache.put(rv, rewound.clone());
        Ok(rewound)
    }
}

/// Waits until the index of `fleet` reaches `rv`, up to `wait`; 504 Timeout
/// "Too large resource version" with Retry-After after that.
pub async fn wait_for_rv(fleet: &Fleet, rv: u64, wait: Duration) -> Result<(), Status> {
    let deadline = tokio::time::Instant::now() + wait;
    match fleet.wait_for(deadline, |index| (index.head_rv() >= rv).then_some(())).await {
        Some(()) => Ok(()),
        None => Err(Status::too_large_resource_version(rv, fleet.snapshot().head_rv(), 1)),
    }
}
