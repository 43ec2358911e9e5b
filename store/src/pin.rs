//! Read pins: the event records that reads in progress will read, kept
//! by compaction until each read ends.

use super::*;

/// The event records that reads in progress will read, kept by compaction
/// until each read ends (a list is streamed from the records of its
/// snapshot; kube-apiserver never ends a list response early because etcd
/// compacted).
#[derive(Default)]
pub(crate) struct Pins {
    pub(crate) next: std::sync::atomic::AtomicU64,
    pub(crate) held: std::sync::Mutex<std::collections::HashMap<u64, Pinned>>,
}

/// What one read keeps.
#[derive(Clone)]
pub(crate) enum Pinned {
    /// Every object of an index (until the read knows which it needs).
    Index(std::sync::Arc<Index>),
    /// These events.
    Rvs(std::sync::Arc<[u64]>),
    /// Every event after this RV (a watch replaying them).
    After(u64),
}

/// A read's hold on event records: compaction keeps them until it is
/// dropped (see [`Store::pin`]).
pub struct ReadPin {
    pub(crate) pins: std::sync::Arc<Pins>,
    pub(crate) id: u64,
}

impl ReadPin {
    /// Keeps only the records of the events `rvs` from now on.
    pub fn narrow(&self, rvs: std::sync::Arc<[u64]>) {
        if let Some(pinned) = self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&self.id) {
            *pinned = Pinned::Rvs(rvs);
        }
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

impl Store {
    /// Takes an index with `take` and keeps the records of every object in
    /// it from compaction until the pin is dropped (or narrowed with
    /// [`ReadPin::narrow`]). Taking and pinning are one step for
    /// compaction: it either sees the pin or started before the index was
    /// taken, and then keeps every object live in it anyway (it keeps what
    /// is live in an index at least as new).
    pub fn pin<E>(&self, take: impl FnOnce() -> std::result::Result<std::sync::Arc<Index>, E>) -> std::result::Result<(std::sync::Arc<Index>, ReadPin), E> {
        let mut held = self.pins.held.lock().unwrap_or_else(|e| e.into_inner());
        let index = take()?;
        let id = self.pins.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        held.insert(id, Pinned::Index(index.clone()));
        Ok((index, ReadPin { pins: self.pins.clone(), id }))
    }

    /// Keeps every event after `rv` from compaction until the pin is
    /// dropped: a watch replaying the log from `rv`. Compaction reads its
    /// pins after the compaction floor is published, so a reader that
    /// takes this pin and then finds `rv` not below the published floor has
    /// every event after `rv` until it drops the pin.
    pub fn pin_after(&self, rv: u64) -> ReadPin {
        let mut held = self.pins.held.lock().unwrap_or_else(|e| e.into_inner());
        let id = self.pins.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        held.insert(id, Pinned::After(rv));
        ReadPin { pins: self.pins.clone(), id }
    }

    /// Reads in progress that hold records (see [`Store::pin`]).
    pub fn pinned_reads(&self) -> usize {
        self.pins.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
