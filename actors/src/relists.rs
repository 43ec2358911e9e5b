//! Lists limited in concurrency. When many members come back at once (a
//! network partition healed, a hundred members restored), every watcher of
//! every one of them must list its type again; unbounded, a thousand
//! members times their types would list at the same moment, each holding a
//! connection, a list body and its part of the aggregator's queue. A list
//! (a paged list, or a streaming list until its initial events end) first
//! takes a permit of a process-wide semaphore; the others wait their turn
//! (`kubefold_member_relists_waiting` counts them) while reads go on.
//!
//! A watcher's first list of a member type the store holds nothing of (an
//! initial sync: kubefold's first start, a member added) takes its turn
//! among more ([`DEFAULT_CONCURRENT_INITIAL_LISTS`]): nothing of that
//! member is served yet, and with more lists running at once the
//! aggregator commits larger groups (a thousand members sync faster).
//! Relists, which happen while reads are served, take theirs among fewer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Relists that run at once unless configured otherwise (`relistConcurrency`).
pub const DEFAULT_CONCURRENT_RELISTS: usize = 32;

/// Initial lists that run at once unless configured otherwise
/// (`initialListConcurrency`).
pub const DEFAULT_CONCURRENT_INITIAL_LISTS: usize = 128;

/// A bound on concurrent lists, and how many wait for it.
#[derive(Debug)]
pub struct RelistLimit {
    semaphore: Arc<Semaphore>,
    limit: usize,
    waiting: AtomicUsize,
}

/// Takes one off the waiting count when a wait ends, however it ends.
struct Waiting<'a>(&'a RelistLimit);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("kubefold_member_relists_waiting").decrement(1.0);
    }
}

impl RelistLimit {
    /// At most `limit` lists at once (at least one).
    pub fn new(limit: usize) -> RelistLimit {
        let limit = limit.max(1);
        RelistLimit { semaphore: Arc::new(Semaphore::new(limit)), limit, waiting: AtomicUsize::new(0) }
    }

    /// Waits for a turn to list; the list may run while the permit is held.
    pub async fn permit(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return Some(permit);
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("kubefold_member_relists_waiting").increment(1.0);
        let _waiting = Waiting(self);
        // The semaphore is never closed: this only ends with a permit.
        self.semaphore.clone().acquire_owned().await.ok()
    }

    /// Lists waiting for a turn now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Lists running now.
    pub fn running(&self) -> usize {
        self.limit - self.semaphore.available_permits()
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

static GLOBAL: OnceLock<RelistLimit> = OnceLock::new();
static INITIAL: OnceLock<RelistLimit> = OnceLock::new();

/// Sets the process-wide bounds of relists and of initial lists; only the
/// first call (before any list) counts. Returns whether they were set.
pub fn configure(relists: usize, initial: usize) -> bool {
    GLOBAL.set(RelistLimit::new(relists)).is_ok() & INITIAL.set(RelistLimit::new(initial)).is_ok()
}

/// The process-wide bound every watcher's relists take their turn from.
pub fn global() -> &'static RelistLimit {
    GLOBAL.get_or_init(|| RelistLimit::new(DEFAULT_CONCURRENT_RELISTS))
}

/// The process-wide bound of initial lists (see the module's comment).
pub fn initial() -> &'static RelistLimit {
    INITIAL.get_or_init(|| RelistLimit::new(DEFAULT_CONCURRENT_INITIAL_LISTS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_past_the_bound_wait_until_one_ends() {
        let limit = Arc::new(RelistLimit::new(2));
        let first = limit.permit().await.expect("a permit");
        let _second = limit.permit().await.expect("a permit");
        assert_eq!((limit.running(), limit.waiting()), (2, 0));
        let waiter = {
            let limit = limit.clone();
            tokio::spawn(async move { limit.permit().await.is_some() })
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while limit.waiting() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the third list waits");
        assert!(!waiter.is_finished(), "no third list runs while two do");
        drop(first);
        assert!(tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("it runs").expect("joined"));
        assert_eq!(limit.waiting(), 0);
    }
}
