//! Compaction tests: what a compaction keeps (live versions, what pinned
//! reads and replays will read) and what it does when nothing can go.

use kubefold_engine::index::Index;

use super::tests::{commit_changes, pod_change};
use super::*;

/// A read in progress (a list streaming from its snapshot) keeps the
/// records it will read through compactions that pass its version: first
/// every object of its index, then the events it narrowed to; once dropped,
/// the next compaction removes them.
#[test]
fn compaction_keeps_what_pinned_reads_will_read() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { log_segment_bytes: 4096, ..Options::default() };
    let store = Store::open(dir.path(), &opts).unwrap();
    let mut index = Index::at(0);
    commit_changes(&store, &mut index, (0..8).map(|i| pod_change(&format!("p{i}"), i + 1, false)).collect());
    let listed: Vec<u64> = index.live_rvs().collect();
    let bodies: Vec<ServedBody> = listed.iter().map(|rv| store.body(*rv).unwrap().unwrap()).collect();
    let (snapshot, pin) = store.pin(|| Ok::<_, Error>(std::sync::Arc::new(index.clone()))).unwrap();
    assert_eq!(snapshot.head_rv(), index.head_rv());
    assert_eq!(store.pinned_reads(), 1);
    // Every object changes twice after the list's snapshot.
    for round in 0..2u64 {
        commit_changes(&store, &mut index, (0..8).map(|i| pod_change(&format!("p{i}"), 100 + round * 10 + i, false)).collect());
    }
    let read_all = |rvs: &[u64]| rvs.iter().map(|rv| store.body(*rv).unwrap()).collect::<Vec<_>>();
    store.compact(store.head_rv().unwrap() - 2, &index).unwrap();
    assert_eq!(read_all(&listed), bodies.iter().cloned().map(Some).collect::<Vec<_>>(), "the pinned index's objects are kept");
    // Narrowed to half the objects: the next compaction removes the others.
    pin.narrow(listed[..4].into());
    commit_changes(&store, &mut index, (0..8).map(|i| pod_change(&format!("p{i}"), 200 + i, false)).collect());
    store.compact(store.head_rv().unwrap() - 2, &index).unwrap();
    let after = read_all(&listed);
    assert_eq!(&after[..4], &bodies[..4].iter().cloned().map(Some).collect::<Vec<_>>()[..]);
    assert_eq!(after[4..], [None, None, None, None]);
    drop(pin);
    assert_eq!(store.pinned_reads(), 0);
    commit_changes(&store, &mut index, vec![pod_change("p0", 300, false)]);
    store.compact(store.head_rv().unwrap(), &index).unwrap();
    assert_eq!(read_all(&listed[..4]), [None, None, None, None], "released with the pin");
}

/// A watch replaying the log from an RV keeps every event after it through
/// a compaction that passes it; once the pin is dropped they may go.
#[test]
fn compaction_keeps_the_events_after_a_pinned_replay() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    commit_changes(&store, &mut index, (0..4).map(|i| pod_change(&format!("p{i}"), i + 1, false)).collect());
    let from = store.head_rv().unwrap();
    let pin = store.pin_after(from);
    for round in 0..3u64 {
        commit_changes(&store, &mut index, (0..4).map(|i| pod_change(&format!("p{i}"), 10 + round * 10 + i, false)).collect());
    }
    let after: Vec<u64> = (from + 1..=store.head_rv().unwrap()).collect();
    store.compact(store.head_rv().unwrap() - 1, &index).unwrap();
    let replayed: Vec<u64> = store.events_after(from).map(|e| e.unwrap().rv).collect();
    assert_eq!(replayed, after, "every event after the replay's start is kept");
    drop(pin);
    commit_changes(&store, &mut index, vec![pod_change("p0", 100, false)]);
    store.compact(store.head_rv().unwrap() - 1, &index).unwrap();
    let left = store.events_after(from).count();
    assert!(left < after.len(), "released with the pin: {left} events after {from} left");
}

/// A compaction that can remove nothing (every event at or below its floor
/// is its object's live version) moves the floor and keeps every event,
/// without the scan of the records after the floor; once an object has
/// changed, the next compaction removes its superseded version.
#[test]
fn a_compaction_with_nothing_to_remove_moves_the_floor_and_keeps_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    let first = commit_changes(&store, &mut index, (0..8).map(|i| pod_change(&format!("p{i}"), i + 1, false)).collect());
    let head = store.head_rv().unwrap();
    let stats = store.compact(head - 2, &index).unwrap();
    assert_eq!((stats.floor, stats.removed, stats.kept), (head - 2, 0, head - 2));
    assert_eq!(store.compacted_rv().unwrap(), head - 2);
    assert!(index.live_rvs().all(|rv| store.body(rv).unwrap().is_some()), "every object readable");
    // p0 changes twice: its first version is superseded, then compacted.
    commit_changes(&store, &mut index, vec![pod_change("p0", 100, false)]);
    commit_changes(&store, &mut index, vec![pod_change("p0", 101, false)]);
    let stats = store.compact(store.head_rv().unwrap(), &index).unwrap();
    assert!(stats.removed >= 1, "{stats:?}");
    assert_eq!(store.body(first[0].rv).unwrap(), None, "p0's first version is gone");
    assert!(index.live_rvs().all(|rv| store.body(rv).unwrap().is_some()), "every object readable");
}
