//! What the watches of one client may hold unread, together
//! (`auth.watchBufferBytesPerClient`): every watch counts the bytes of the
//! lines it queued and its client has not taken yet, into its own count
//! and, for lines that are its own, its client's. A JSON line is encoded
//! once per worker thread and shared by every watch that sends it while it
//! is cached (`query::watch::encoded_line`): it is the own line of the watch that
//! encoded it, and costs the others nothing, so a thousand watches behind
//! on the same live events count one copy. Table rows, bookmarks and
//! errors are always the watch's own. A watch that would take its client past the budget
//! has the client's slowest watch (the one with the most unread) closed,
//! as kube-apiserver closes a watcher that does not keep up; so one user's
//! watches that never read hold no more than the budget however many they
//! are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The watches of each client, by client (`user:NAME`, `ip:ADDR`).
static CLIENTS: Mutex<Option<HashMap<String, Arc<ClientWatches>>>> = Mutex::new(None);

/// The open watches of one client and what they hold unread together.
#[derive(Debug, Default)]
struct ClientWatches {
    /// Bytes queued by the client's watches and not yet taken by their
    /// response bodies.
    unread: AtomicUsize,
    watches: Mutex<Vec<Weak<Queued>>>,
}

/// The unread bytes of one watch (shared by the watch and its response
/// body), counted into its client's as well.
#[derive(Debug)]
pub struct Queued {
    bytes: AtomicUsize,
    /// Of them, those counted into the client's.
    own: AtomicUsize,
    /// Set when the watch is closed for its client's budget: its body
    /// drops what it holds, sends the 410 ERROR event and ends.
    evicted: AtomicBool,
    client: Option<(String, Arc<ClientWatches>)>,
    /// The client's budget in bytes (0: none).
    budget: usize,
}

impl Queued {
    /// The count of a watch of `client` (none: counted alone), whose
    /// watches may hold `budget` bytes unread together (0: no bound).
    pub fn new(client: Option<&str>, budget: usize) -> Arc<Queued> {
        let client = client.filter(|_| budget > 0).map(|name| {
            let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
            let watches = clients.get_or_insert_with(HashMap::new).entry(name.to_string()).or_default().clone();
            (name.to_string(), watches)
        });
        let queued = Arc::new(Queued { bytes: AtomicUsize::new(0), own: AtomicUsize::new(0), evicted: AtomicBool::new(false), client, budget });
        if let Some((_, watches)) = &queued.client {
            let mut list = watches.watches.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(&queued));
        }
        queued
    }

    /// Bytes this watch holds unread.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes queued, `own` of them the watch's own (into the
    /// client's too).
    pub fn add(&self, n: usize, own: usize) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        if own > 0 {
            self.own.fetch_add(own, Ordering::Relaxed);
            if let Some((_, c)) = &self.client {
                c.unread.fetch_add(own, Ordering::Relaxed);
            }
        }
    }

    /// Counts `n` bytes taken (or dropped), `own` of them the watch's own.
    pub fn sub(&self, n: usize, own: usize) {
        self.bytes.fetch_sub(n, Ordering::Relaxed);
        if own > 0 {
            self.own.fetch_sub(own, Ordering::Relaxed);
            if let Some((_, c)) = &self.client {
                c.unread.fetch_sub(own, Ordering::Relaxed);
            }
        }
    }

    /// Whether the watch was closed for its client's budget.
    pub fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Whether `len` more bytes of the watch's own fit the client's budget.
    /// When they do not, the client's watch with the most of its own unread
    /// (this one, maybe) is closed, unless one is being closed already: the
    /// caller waits for the room that frees.
    pub fn client_room(&self, len: usize) -> bool {
        let Some((name, client)) = &self.client else { return true };
        if client.unread.load(Ordering::Relaxed) + len <= self.budget {
            return true;
        }
        // Taken out of the lock: dropping the last reference to a watch's
        // count takes the lock again.
        let open: Vec<Arc<Queued>> = {
            let list = client.watches.lock().unwrap_or_else(|e| e.into_inner());
            list.iter().filter_map(Weak::upgrade).collect()
        };
        if open.iter().any(|w| w.evicted()) {
            return false;
        }
        // A watch that holds nothing could not free anything.
        let own = |w: &Arc<Queued>| w.own.load(Ordering::Relaxed);
        if let Some(slowest) = open.iter().filter(|w| own(w) > 0).max_by_key(|w| own(w)) {
            slowest.evicted.store(true, Ordering::Relaxed);
            metrics::counter!("kubefold_watch_slow_closed_total", "reason" => "client_budget").increment(1);
            tracing::info!(client = %name, unread_bytes = own(slowest), client_unread_bytes = client.unread.load(Ordering::Relaxed), budget = self.budget, "Slowest watch of a client over its watch buffer budget closed.");
            return false;
        }
        // Nothing of this client's is queued: a single message larger than
        // the budget goes alone.
        true
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let Some((name, client)) = &self.client else { return };
        // Lines still queued are dropped with the watch.
        client.unread.fetch_sub(self.own.load(Ordering::Relaxed), Ordering::Relaxed);
        let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
        let mut list = client.watches.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        if list.is_empty() {
            if let Some(map) = clients.as_mut() {
                if map.get(name).is_some_and(|c| Arc::ptr_eq(c, client)) {
                    map.remove(name);
                }
            }
        }
    }
}

/// Bytes the watches of `client` hold unread together.
pub fn client_unread(client: &str) -> usize {
    let clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    clients.as_ref().and_then(|m| m.get(client)).map_or(0, |c| c.unread.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over its budget a client's slowest watch is marked closed, once,
    /// until it is gone; what its watches hold is counted together, and
    /// released when a watch goes; another client is not touched.
    #[test]
    fn the_slowest_watch_of_a_client_over_budget_is_closed() {
        let a1 = Queued::new(Some("user:budget-a"), 1000);
        let a2 = Queued::new(Some("user:budget-a"), 1000);
        let b = Queued::new(Some("user:budget-b"), 1000);
        a1.add(300, 300);
        a2.add(600, 600);
        b.add(900, 900);
        // Shared lines count for the watch alone.
        a1.add(5000, 0);
        assert_eq!(a1.bytes(), 5300);
        assert_eq!(client_unread("user:budget-a"), 900);
        assert!(a1.client_room(100), "exactly the budget fits");
        assert!(!a1.client_room(101), "over the budget");
        assert!(a2.evicted() && !a1.evicted() && !b.evicted(), "the watch with the most unread is closed");
        assert!(!a1.client_room(101), "one being closed is enough: the others wait");
        assert!(!a1.evicted());
        drop(a2);
        assert_eq!(client_unread("user:budget-a"), 300, "what a closed watch held is released");
        assert!(a1.client_room(101));
        a1.sub(300, 300);
        a1.sub(5000, 0);
        assert_eq!((client_unread("user:budget-a"), a1.bytes()), (0, 0));
        assert!(a1.client_room(5000), "a message larger than the budget goes alone");
        drop(a1);
        assert_eq!(client_unread("user:budget-a"), 0);
        assert!(CLIENTS.lock().unwrap().as_ref().unwrap().get("user:budget-a").is_none(), "a client without watches is forgotten");
        assert_eq!(client_unread("user:budget-b"), 900);
        // Without a budget nothing is shared.
        let free = Queued::new(Some("user:budget-c"), 0);
        free.add(1 << 30, 1 << 30);
        assert!(free.client_room(1 << 30));
        assert_eq!(client_unread("user:budget-c"), 0);
    }
}
