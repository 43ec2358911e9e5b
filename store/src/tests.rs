//! Store tests: round trips, refusal of foreign data dirs, and a model-based
//! property test against a `BTreeMap`, including reopen after a simulated crash.

use std::collections::BTreeMap;

use kubefold_engine::event::{Change, EventType, ObjectKey};
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources;
use proptest::prelude::*;

use super::*;

fn pod_change(name: &str, member_rv: u64, delete: bool) -> Change {
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let raw = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{member_rv}","labels":{{"app":"{name}"}}}},"spec":{{"nodeName":"n"}}}}"#
    );
    let ing = ingest(&pods, "m1", raw.as_bytes()).unwrap();
    if delete {
        Change::Delete(ing)
    } else {
        Change::Upsert(ing)
    }
}

/// Plans, commits and applies like the aggregator does; returns the events.
fn commit_changes(store: &Store, index: &mut Index, changes: Vec<Change>) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    let mut working = index.clone();
    for change in changes {
        let rv = working.head_rv() + 1;
        if let Some(e) = plan_change(&working, "v1/pods", "m1", change, rv) {
            working.apply(&e);
            events.push(e);
        }
    }
    let checkpoint = vec![("m1".to_string(), "v1/pods".to_string(), working.head_rv().to_string())];
    store.commit(&Commit { events: events.clone(), checkpoints: checkpoint }).unwrap();
    *index = working;
    events
}

/// Opens the store again in this process: sled's I/O threads may hold the
/// data dir's lock for a moment after the last handle was dropped.
fn reopen(path: &std::path::Path, opts: &Options) -> Store {
    for _ in 0..100 {
        match Store::open(path, opts) {
            Err(Error::OpenFailed { source, .. }) if source.to_string().contains("could not acquire lock") => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other.unwrap(),
        }
    }
    panic!("data dir still locked after 5 s");
}

fn index_contents(index: &Index) -> Vec<(ObjectKey, u64, String)> {
    index.range("v1/pods", None, None).map(|(k, e)| (k.clone(), e.rv, e.member_rv().to_string())).collect()
}

#[test]
fn events_and_index_round_trip_through_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        let events = commit_changes(
            &store,
            &mut index,
            vec![pod_change("a", 1, false), pod_change("b", 2, false), pod_change("a", 3, false), pod_change("b", 4, true)],
        );
        assert_eq!(events.len(), 4);
        assert_eq!(store.head_rv().unwrap(), 4);
        let e3 = store.event(3).unwrap().unwrap();
        assert_eq!(e3, events[2]);
        let after: Vec<u64> = store.events_after(1).map(|e| e.unwrap().rv).collect();
        assert_eq!(after, vec![2, 3, 4]);
        let served: serde_json::Value =
            serde_json::from_slice(&store.body(3).unwrap().unwrap().to_bytes(Some("_m1"), 3)).unwrap();
        assert_eq!(served["metadata"]["name"], "a_m1");
        assert_eq!(served["metadata"]["resourceVersion"], "3");
    }
    let store = reopen(dir.path(), &opts);
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), 4);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(
        recovered.checkpoints.get(&("m1".to_string(), "v1/pods".to_string())),
        Some(&"4".to_string())
    );
}

#[test]
fn backup_and_restore_give_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let store = Store::open(&dir.path().join("a"), &opts).unwrap();
    let mut index = Index::at(0);
    commit_changes(&store, &mut index, (0..50).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
    commit_changes(&store, &mut index, vec![pod_change("p3", 60, true)]);
    let mut file = Vec::new();
    let records = store.backup(&mut file).unwrap();
    assert!(records > 50, "{records} records");
    let restored = Store::restore(&dir.path().join("b"), &mut &file[..], &opts).unwrap();
    assert_eq!(restored.head_rv().unwrap(), store.head_rv().unwrap());
    let got = restored.recover().unwrap();
    assert_eq!(index_contents(&got.index), index_contents(&index));
    assert_eq!(got.checkpoints, store.recover().unwrap().checkpoints);

    // A damaged backup is refused, and so is a non-empty target.
    let mut damaged = file.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0xff;
    assert!(Store::restore(&dir.path().join("c"), &mut &damaged[..], &opts).is_err());
    assert!(Store::restore(&dir.path().join("a"), &mut &file[..], &opts).is_err());
    assert!(Store::restore(&dir.path().join("d"), &mut &file[..100], &opts).is_err());
}

#[test]
fn foreign_format_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let tree = db.open_tree("kubefold").unwrap();
        tree.insert(meta_key("format"), &b"kubefold-store/0"[..]).unwrap();
        db.flush().unwrap();
    }
    let err = Store::open(dir.path(), &Options::default()).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, Error::IncompatibleFormat { .. }), "{msg}");
    assert!(msg.contains("kubefold-store/0") && msg.contains("--data-dir"), "{msg}");
}

#[test]
fn a_data_dir_of_the_first_format_is_refused_with_a_clear_error() {
    // Format 1 data dirs were created with sled's default segment size.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let tree = db.open_tree("kubefold").unwrap();
        tree.insert(meta_key("format"), &b"kubefold-store/1"[..]).unwrap();
        tree.insert(event_key(1), &b"old envelope"[..]).unwrap();
        db.flush().unwrap();
    }
    let err = Store::open(dir.path(), &Options::default()).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, Error::IncompatibleFormat { .. }), "{msg}");
    assert!(msg.contains("kubefold-store/1") && msg.contains(FORMAT) && msg.contains("--data-dir"), "{msg}");
}

#[test]
fn bodies_are_stored_compressed_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    let events = commit_changes(&store, &mut index, vec![pod_change("a", 1, false)]);
    let record = store.tree.get(event_key(1)).unwrap().unwrap();
    assert_eq!(decode_event(&record).unwrap(), events[0]);
    // A body that does not shrink is stored as it is.
    let mut incompressible = events[0].clone();
    incompressible.body.json = (0..64u8).map(|i| i.wrapping_mul(97).wrapping_add(13)).collect();
    incompressible.body.name_end = 1;
    incompressible.body.rv_at = 2;
    incompressible.body.row = None;
    assert_eq!(decode_event(&encode_event(&incompressible).unwrap()).unwrap(), incompressible);
    let big = pod_change(&"x".repeat(200), 2, false);
    let Change::Upsert(big) = big else { unreachable!() };
    let event = StoredEvent::new(9, EventType::Added, "v1/pods", "m1", 0, big);
    let encoded = encode_event(&event).unwrap();
    let (head, used) = decode_head(&encoded).unwrap();
    assert_eq!(head.body_codec & !BODY_WITH_ROW, BODY_LZ4);
    let stored_body = encoded.len() - used - 12 - event.body.row.as_ref().unwrap().template.len();
    assert!(stored_body < event.body.json.len(), "{} >= {}", stored_body, event.body.json.len());
    assert_eq!(decode_event(&encoded).unwrap(), event);
    // Reading the body alone gives the event's body, and refuses what
    // reading the event refuses.
    for e in [&events[0], &incompressible, &event] {
        assert_eq!(decode_body_with(&encode_event(e).unwrap(), &Dicts::new()).unwrap(), e.body);
    }
    assert_eq!(store.body(1).unwrap().unwrap(), events[0].body);
    assert_eq!(store.body(2).unwrap(), None);
    let mut truncated = encoded.clone();
    truncated.truncate(encoded.len() - 3);
    assert!(matches!(decode_body_with(&truncated, &Dicts::new()), Err(Error::Corrupt { .. })));
    assert!(matches!(decode_body_with(&encoded[..used / 2], &Dicts::new()), Err(Error::Corrupt { .. })));
    // The Table row goes between head and body when there is one; a record
    // without one (as written before rows were kept) reads as before.
    assert!(event.body.row.is_some());
    assert_eq!(head.body_codec, BODY_LZ4 | BODY_WITH_ROW);
    let mut rowless = event.clone();
    rowless.body.row = None;
    let plain = encode_event(&rowless).unwrap();
    assert_eq!(decode_head(&plain).unwrap().0.body_codec, BODY_LZ4);
    assert_eq!(decode_event(&plain).unwrap(), rowless);
    assert_eq!(decode_body_with(&plain, &Dicts::new()).unwrap(), rowless.body);
    // A row whose metadata bounds lie outside the body, or whose template
    // runs past the record, is corruption, not a panic where it is served.
    let mut outside = event.clone();
    outside.body.row.as_mut().unwrap().metadata_end = outside.body.json.len() as u32 + 1;
    assert!(matches!(decode_body_with(&encode_event(&outside).unwrap(), &Dicts::new()), Err(Error::Corrupt { .. })));
    let mut long = encoded.clone();
    let template_len_at = used + 8;
    long[template_len_at..template_len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(decode_body_with(&long, &Dicts::new()), Err(Error::Corrupt { .. })));
    assert!(matches!(decode_event(&long), Err(Error::Corrupt { .. })));
}

#[test]
fn objects_written_in_place_are_what_their_bodies_serve() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    // One record without a dictionary, then a batch that makes one.
    let mut events = commit_changes(&store, &mut index, vec![pod_change("a", 1, false)]);
    events.extend(commit_changes(&store, &mut index, (0..40).map(|i| pod_change(&format!("p{i}"), 10 + i, false)).collect()));
    assert!(store.dicts.read().unwrap().contains_key("v1/pods"));
    // A body stored as it is.
    let mut raw = events[3].clone();
    raw.rv = 1000;
    raw.body.json = b"{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"\"}}".to_vec();
    raw.body.name_end = 22;
    raw.body.rv_at = 43;
    raw.body.row = None;
    store.tree.insert(event_key(raw.rv), encode_event(&raw).unwrap()).unwrap();
    events.push(raw);
    for event in &events {
        for suffix in [None, Some("_m1")] {
            let mut expected = b"[".to_vec();
            store.body(event.rv).unwrap().unwrap().write(&mut expected, suffix, event.rv);
            let mut out = b"[".to_vec();
            assert!(store.write_served(event.rv, suffix, &mut out).unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(expected).unwrap());
        }
    }
    let mut out = b"[".to_vec();
    assert!(!store.write_served(99_999, None, &mut out).unwrap());
    // A damaged record is an error and leaves what was written before.
    let mut damaged = store.tree.get(event_key(events[5].rv)).unwrap().unwrap().to_vec();
    let last = damaged.len() - 1;
    damaged.truncate(last);
    store.tree.insert(event_key(2000), damaged).unwrap();
    assert!(matches!(store.write_served(2000, Some("_m1"), &mut out), Err(Error::Corrupt { .. })));
    assert_eq!(out, b"[");
}

#[test]
fn a_type_gets_a_dictionary_from_its_first_large_batch() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    let first;
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        // Too little to make a dictionary of.
        commit_changes(&store, &mut index, vec![pod_change("a", 1, false)]);
        assert!(store.dicts.read().unwrap().is_empty());
        first = commit_changes(&store, &mut index, (0..40).map(|i| pod_change(&format!("p{i}"), 10 + i, false)).collect());
        let dict = store.dicts.read().unwrap().get("v1/pods").cloned().expect("a dictionary for pods");
        assert!(dict.len() >= DICT_MIN_BYTES && dict.len() <= DICT_MAX_BYTES, "{}", dict.len());
        commit_changes(&store, &mut index, vec![pod_change("p3", 99, false)]);
        let record = store.tree.get(event_key(first[5].rv)).unwrap().unwrap();
        assert_eq!(decode_head(&record).unwrap().0.body_codec, BODY_LZ4_DICT | BODY_WITH_ROW);
        // Without the dictionary the record cannot be read: it is not guessed.
        assert!(matches!(decode_event(&record), Err(Error::Corrupt { .. })));
        assert!(matches!(decode_body_with(&record, &Dicts::new()), Err(Error::Corrupt { .. })));
        assert_eq!(store.body(first[5].rv).unwrap().unwrap(), first[5].body);
    }
    let store = reopen(dir.path(), &opts);
    assert_eq!(store.event(first[5].rv).unwrap().unwrap(), first[5]);
    let all: Vec<StoredEvent> = store.events_after(0).map(|e| e.unwrap()).collect();
    assert_eq!(all.len(), 42);
    assert_eq!(&all[1..41], &first[..]);
    assert_eq!(all[41].key.name, "p3");
    // A backup carries the dictionary.
    let mut file = Vec::new();
    store.backup(&mut file).unwrap();
    let restored = Store::restore(&dir.path().join("restored"), &mut &file[..], &opts).unwrap();
    assert_eq!(restored.event(first[5].rv).unwrap().unwrap(), first[5]);
}

fn snapshot_path(store: &Store) -> RecoveryPath {
    store.recover().unwrap().path
}

#[test]
fn recovery_uses_a_valid_snapshot_and_replays_the_log_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        commit_changes(&store, &mut index, (0..20).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
        let stats = store.write_snapshot(&index).unwrap().unwrap();
        assert_eq!((stats.rv, stats.objects), (20, 20));
        assert_eq!(store.write_snapshot(&index).unwrap(), None, "not rewritten at the same RV");
        commit_changes(&store, &mut index, vec![pod_change("p3", 30, true), pod_change("p4", 31, false), pod_change("new", 32, false)]);
        // No clean shutdown: the snapshot is three events behind.
    }
    let store = reopen(dir.path(), &opts);
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.path, RecoveryPath::Snapshot { snapshot_rv: 20, replayed: 3 });
    assert_eq!(recovered.index.head_rv(), 23);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(23).unwrap()), index_contents(&index));
}

#[test]
fn snapshots_that_cannot_be_trusted_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    let store = Store::open(dir.path(), &opts).unwrap();
    commit_changes(&store, &mut index, (0..10).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
    store.write_snapshot(&index).unwrap().unwrap();
    let file = dir.path().join(SNAPSHOT_FILE);
    let good = std::fs::read(&file).unwrap();

    // Damaged: checksum mismatch.
    let mut damaged = good.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 1;
    std::fs::write(&file, &damaged).unwrap();
    assert!(matches!(snapshot_path(&store), RecoveryPath::Replay { reason } if reason.contains("checksum")));
    // Truncated.
    std::fs::write(&file, &good[..good.len() - 9]).unwrap();
    assert!(matches!(snapshot_path(&store), RecoveryPath::Replay { .. }));

    // Of another store (same format and RVs).
    let other_dir = tempfile::tempdir().unwrap();
    {
        let other = Store::open(other_dir.path(), &opts).unwrap();
        let mut other_index = Index::at(0);
        commit_changes(&other, &mut other_index, (0..10).map(|i| pod_change(&format!("q{i}"), i, false)).collect());
        other.write_snapshot(&other_index).unwrap().unwrap();
    }
    std::fs::copy(other_dir.path().join(SNAPSHOT_FILE), &file).unwrap();
    assert!(matches!(snapshot_path(&store), RecoveryPath::Replay { reason } if reason.contains("another store")));

    // Older than the compaction floor: the events after it may be gone.
    std::fs::write(&file, &good).unwrap();
    assert!(matches!(snapshot_path(&store), RecoveryPath::Snapshot { snapshot_rv: 10, replayed: 0 }));
    commit_changes(&store, &mut index, vec![pod_change("p1", 20, true), pod_change("p2", 21, false)]);
    store.compact(11, &index).unwrap();
    let recovered = store.recover().unwrap();
    assert!(matches!(&recovered.path, RecoveryPath::Replay { reason } if reason.contains("compaction floor")), "{}", recovered.path);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
}

#[test]
fn undecodable_records_are_reported_as_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), &Options::default()).unwrap();
        store.tree.insert(event_key(1), &b"\xff\xff"[..]).unwrap();
        store.tree.insert(meta_key("head"), &1u64.to_be_bytes()[..]).unwrap();
        store.flush().unwrap();
    }
    let store = reopen(dir.path(), &Options::default());
    let err = store.recover().err().unwrap();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

/// Recovery without a snapshot replays the log. Compaction removes
/// superseded events in RV order; whatever prefix of them is gone when a
/// crash interrupts it, the replay still gives the index.
#[test]
fn the_log_replays_to_the_index_whatever_prefix_compaction_removed() {
    let opts = Options::default();
    let (dir, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut index = Index::at(0);
    let store = Store::open(dir.path(), &opts).unwrap();
    // Objects added, modified, deleted, re-added; some deleted for good.
    let mut rv = 0;
    let mut next = || {
        rv += 1;
        rv
    };
    for round in 0..4 {
        let mut changes = Vec::new();
        for i in 0..6 {
            let name = format!("p{i}");
            match (round + i) % 4 {
                0 | 1 => changes.push(pod_change(&name, next(), false)),
                2 => changes.push(pod_change(&name, next(), true)),
                _ => {}
            }
        }
        commit_changes(&store, &mut index, changes);
    }
    commit_changes(&store, &mut index, vec![pod_change("p0", next(), true), pod_change("p5", next(), false)]);
    let head = store.head_rv().unwrap();
    assert!(head > 15, "{head} events");
    let all: Vec<u64> = store.events_after(0).map(|e| e.unwrap().rv).collect();

    // What a full compaction to head - 3 removes, learnt on a copy.
    let mut backup = Vec::new();
    store.backup(&mut backup).unwrap();
    let compacted = Store::restore(&copy.path().join("d"), &mut &backup[..], &opts).unwrap();
    let stats = compacted.compact(head - 3, &index).unwrap();
    let left: Vec<u64> = compacted.events_after(0).map(|e| e.unwrap().rv).collect();
    let removed: Vec<u64> = all.iter().copied().filter(|rv| !left.contains(rv)).collect();
    assert_eq!(stats.removed as usize, removed.len());
    assert!(removed.len() >= 5, "compaction removed {removed:?}");
    assert_eq!(index_contents(&compacted.replay(head).unwrap()), index_contents(&index));

    // The same events removed one by one in RV order, as a compaction
    // interrupted at any point would have left them.
    for rv in removed {
        store.tree.remove(event_key(rv)).unwrap();
        assert_eq!(index_contents(&store.replay(head).unwrap()), index_contents(&index), "after removing up to RV {rv}");
    }
}

/// A data dir of the format before (an index entry per live object beside
/// the log) is upgraded when opened: its entries go, its format is named
/// anew, and recovery gives the same index.
#[test]
fn data_dirs_of_the_format_before_are_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        commit_changes(&store, &mut index, (0..30).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
        commit_changes(&store, &mut index, vec![pod_change("p3", 40, true), pod_change("p4", 41, false)]);
        store.write_snapshot(&index).unwrap().unwrap();
        // What the format before kept beside the log: an entry per object
        // (`i`, resource, namespace, name and cluster joined by NULs).
        for (key, entry) in index.range("v1/pods", None, None) {
            let mut k = vec![b'i'];
            for part in ["v1/pods", &key.namespace, &key.name] {
                k.extend_from_slice(part.as_bytes());
                k.push(0);
            }
            k.extend_from_slice(key.cluster.as_bytes());
            store.tree.insert(k, encode(&**entry).unwrap()).unwrap();
        }
        store.tree.insert(meta_key("format"), FORMAT_2.as_bytes()).unwrap();
        store.flush().unwrap();
    }
    let store = reopen(dir.path(), &opts);
    assert_eq!(store.tree.get(meta_key("format")).unwrap().as_deref(), Some(FORMAT.as_bytes()));
    assert_eq!(store.tree.scan_prefix([b'i']).count(), 0, "index entries removed");
    let recovered = store.recover().unwrap();
    assert!(matches!(recovered.path, RecoveryPath::Snapshot { .. }), "{}", recovered.path);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(store.head_rv().unwrap()).unwrap()), index_contents(&index));
    assert_eq!(index.len("v1/pods"), 29);
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(u8),
    Delete(u8),
    Commit,
    Reopen,
    Compact(u8),
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8).prop_map(Op::Upsert),
        2 => (0u8..8).prop_map(Op::Delete),
        2 => Just(Op::Commit),
        1 => Just(Op::Reopen),
        1 => (0u8..6).prop_map(Op::Compact),
        1 => Just(Op::Snapshot),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Random upserts and deletes go to the store and to a BTreeMap model;
    /// after every commit and every reopen (a crash that loses nothing
    /// committed, since commits are synchronous; recovery then starts from
    /// the last index snapshot when there is a usable one) they agree, the
    /// index equals the replay of the log, and RVs only grow.
    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default();
        let mut store = Store::open(dir.path(), &opts).unwrap();
        let mut index = Index::at(0);
        let mut model: BTreeMap<String, u64> = BTreeMap::new(); // name -> member rv
        let mut pending = Vec::new();
        let mut member_rv = 0u64;
        let mut last_head = 0u64;
        // The model's state after each committed RV, to check rewinds.
        let mut history: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
        history.insert(0, BTreeMap::new());
        for op in ops {
            match op {
                Op::Upsert(n) => { member_rv += 1; pending.push(pod_change(&format!("p{n}"), member_rv, false)); }
                Op::Delete(n) => { member_rv += 1; pending.push(pod_change(&format!("p{n}"), member_rv, true)); }
                Op::Commit => {
                    for c in &pending {
                        match c {
                            Change::Upsert(i) => { model.insert(i.name.clone(), i.member_rv.parse().unwrap()); }
                            Change::Delete(i) => { model.remove(&i.name); }
                        }
                    }
                    let events = commit_changes(&store, &mut index, std::mem::take(&mut pending));
                    // Replay the model per event to know the state at every RV.
                    let mut state = history.values().next_back().cloned().unwrap_or_default();
                    for e in &events {
                        match e.event_type {
                            EventType::Deleted => { state.remove(&e.key.name); }
                            _ => { state.insert(e.key.name.clone(), e.member_rv.parse().unwrap()); }
                        }
                        history.insert(e.rv, state.clone());
                    }
                }
                Op::Compact(keep) => {
                    let head = store.head_rv().unwrap();
                    let floor = head.saturating_sub(keep as u64);
                    let stats = store.compact(floor, &index).unwrap();
                    prop_assert!(stats.floor >= store.compacted_rv().unwrap().min(floor));
                    // Every RV from the floor on can still be rebuilt exactly.
                    let compacted = store.compacted_rv().unwrap();
                    for (&rv, expected) in history.range(compacted..) {
                        let mut newer: Vec<_> = store.events_after(rv).map(|e| e.unwrap()).collect();
                        newer.reverse();
                        let rewound = index.rewind(rv, newer, |r| store.event(r).unwrap()).expect("versions retained");
                        let got: BTreeMap<String, u64> = rewound
                            .range("v1/pods", None, None)
                            .map(|(k, e)| (k.name.clone(), e.member_rv().parse().unwrap()))
                            .collect();
                        prop_assert_eq!(&got, expected, "state at rv {} after compaction to {}", rv, compacted);
                    }
                }
                Op::Snapshot => {
                    store.write_snapshot(&index).unwrap();
                }
                Op::Reopen => {
                    pending.clear(); // uncommitted changes are lost in a crash
                    drop(store);
                    store = reopen(dir.path(), &opts);
                    index = store.recover().unwrap().index;
                }
            }
            let got: BTreeMap<String, u64> = index
                .range("v1/pods", None, None)
                .map(|(k, e)| (k.name.clone(), e.member_rv().parse().unwrap()))
                .collect();
            prop_assert_eq!(&got, &model);
            let head = store.head_rv().unwrap();
            prop_assert!(head >= last_head);
            last_head = head;
            // The index equals the replay of the log.
            let mut replay = Index::at(0);
            for e in store.events_after(0) { replay.apply(&e.unwrap()); }
            prop_assert_eq!(index_contents(&replay), index_contents(&index));
        }
    }
}

/// Index entries are stored (and snapshotted) in the encoding of the plain
/// struct they were before they packed their strings: data dirs written
/// with that struct read back the same entries.
#[test]
fn index_entries_keep_the_encoding_of_the_plain_struct() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Plain {
        rv: u64,
        member_rv: String,
        uid: String,
        labels: Vec<(String, String)>,
        fields: Vec<(String, String)>,
    }
    let plain = Plain {
        rv: 42,
        member_rv: "9001".into(),
        uid: "0f1e2d3c".into(),
        labels: vec![("app".into(), "web".into()), ("pod-template-hash".into(), "5d7f".into())],
        fields: vec![("spec.nodeName".into(), "node-2".into()), ("status.phase".into(), "Pending".into())],
    };
    let entry = IndexEntry::new(
        42,
        "9001",
        "0f1e2d3c",
        [("app", "web"), ("pod-template-hash", "5d7f")],
        [("spec.nodeName", "node-2"), ("status.phase", "Pending")],
    );
    let written = super::encode(&entry).unwrap();
    assert_eq!(written, super::encode(&plain).unwrap());
    fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> T {
        bincode::serde::decode_from_slice(bytes, super::config()).unwrap().0
    }
    let read: IndexEntry = decode(&super::encode(&plain).unwrap());
    assert_eq!(read, entry);
    let back: Plain = decode(&written);
    assert_eq!(back, plain);
}
