//! Store tests: round trips, refusal of foreign data dirs, and a model-based
//! property test against a `BTreeMap`, including reopen after a simulated crash.

use std::collections::BTreeMap;

use kubefold_engine::event::{Change, EventType, ObjectKey};
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources;
use proptest::prelude::*;

use super::*;

mod read_cache;

pub(crate) fn pod_change(name: &str, member_rv: u64, delete: bool) -> Change {
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
pub(crate) fn commit_changes(store: &Store, index: &mut Index, changes: Vec<Change>) -> Vec<StoredEvent> {
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
    let store = Store::open(dir.path(), &opts).unwrap();
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
    // It continues above every resourceVersion the store may have served;
    // the members are listed again.
    assert_eq!(restored.head_rv().unwrap(), store.backup_min_rv_now().unwrap());
    let got = restored.recover().unwrap();
    assert_eq!(index_contents(&got.index), index_contents(&index));
    assert!(got.checkpoints.is_empty());
    assert_eq!(restored.events_after(0).count(), store.events_after(0).count());

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
    let record = store.record(1).unwrap().unwrap();
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
    store.tree().unwrap().insert(event_key(raw.rv), in_old_layout(&encode_event(&raw).unwrap())).unwrap();
    events.push(raw);
    // One buffer for all, its space holding what was written before (and
    // garbage at first): what is written never depends on it.
    let mut out = ChunkBuf::default();
    out.extend_from_slice(&[0xAA; 70_000]);
    for event in events.iter().chain(events.iter().rev()) {
        for suffix in [None, Some("_m1")] {
            let mut expected = b"[".to_vec();
            store.body(event.rv).unwrap().unwrap().write(&mut expected, suffix, event.rv);
            out.clear();
            out.push(b'[');
            assert!(store.write_served(event.rv, suffix, &mut out).unwrap());
            assert_eq!(String::from_utf8(out.written().to_vec()).unwrap(), String::from_utf8(expected).unwrap());
        }
    }
    out.clear();
    out.push(b'[');
    assert!(!store.write_served(99_999, None, &mut out).unwrap());
    // A damaged record is an error and leaves what was written before.
    let mut damaged = in_old_layout(&store.record(events[5].rv).unwrap().unwrap());
    let last = damaged.len() - 1;
    damaged.truncate(last);
    store.tree().unwrap().insert(event_key(2000), damaged).unwrap();
    assert!(matches!(store.write_served(2000, Some("_m1"), &mut out), Err(Error::Corrupt { .. })));
    assert_eq!(out.written(), b"[");
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
        let record = store.record(first[5].rv).unwrap().unwrap();
        assert_eq!(decode_head(&record).unwrap().0.body_codec, BODY_LZ4_DICT | BODY_WITH_ROW);
        // Without the dictionary the record cannot be read: it is not guessed.
        assert!(matches!(decode_event(&record), Err(Error::Corrupt { .. })));
        assert!(matches!(decode_body_with(&record, &Dicts::new()), Err(Error::Corrupt { .. })));
        assert_eq!(store.body(first[5].rv).unwrap().unwrap(), first[5].body);
    }
    let store = Store::open(dir.path(), &opts).unwrap();
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
    let store = Store::open(dir.path(), &opts).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.path, RecoveryPath::Snapshot { snapshot_rv: 20, replayed: 3 });
    assert_eq!(recovered.index.head_rv(), 23);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(23).unwrap()), index_contents(&index));
}

#[test]
fn snapshots_that_cannot_be_trusted_are_ignored_and_damaged_ones_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    let store = Store::open(dir.path(), &opts).unwrap();
    commit_changes(&store, &mut index, (0..10).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
    store.write_snapshot(&index).unwrap().unwrap();
    let file = dir.path().join(SNAPSHOT_FILE);
    let good = std::fs::read(&file).unwrap();

    // Damaged (a bit flipped in the middle, in the magic, truncated): moved
    // into a new quarantine directory with a note, the index rebuilt from
    // the log all the same.
    let quarantines = |dir: &Path| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("quarantine-"))
            .collect();
        found.sort();
        found
    };
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 1;
    let mut magic = good.clone();
    magic[3] ^= 0x20;
    let damages = [("checksum", flipped), ("first bytes", magic), ("truncated", good[..good.len() - 9].to_vec())];
    for (n, (what, damaged)) in damages.into_iter().enumerate() {
        std::fs::write(&file, &damaged).unwrap();
        let recovered = store.recover().unwrap();
        assert!(matches!(&recovered.path, RecoveryPath::Replay { reason } if reason.contains(what) && reason.contains("quarantine-")), "{}", recovered.path);
        assert_eq!(index_contents(&recovered.index), index_contents(&index), "{what}");
        assert!(!file.exists(), "{what}: the damaged snapshot is moved aside");
        let quarantine = quarantines(dir.path());
        assert_eq!(quarantine.len(), n + 1, "{what}");
        let moved = quarantine.iter().find(|q| std::fs::read(q.join(SNAPSHOT_FILE)).is_ok_and(|b| b == damaged));
        let moved = moved.unwrap_or_else(|| panic!("{what}: the damaged bytes are in a quarantine directory"));
        assert!(std::fs::read_to_string(moved.join(DAMAGE_NOTE)).unwrap().contains("index snapshot is damaged"), "{what}");
    }

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
    assert!(file.exists(), "not damage: left where it is");
    assert_eq!(quarantines(dir.path()).len(), 3);

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
        store.tree().unwrap().insert(event_key(1), &b"\xff\xff"[..]).unwrap();
        store.tree().unwrap().insert(meta_key("head"), &1u64.to_be_bytes()[..]).unwrap();
        store.flush().unwrap();
    }
    let store = Store::open(dir.path(), &Options::default()).unwrap();
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
        remove_event(&store, rv);
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
            store.tree().unwrap().insert(k, serde_json::to_vec(&**entry).unwrap()).unwrap();
        }
        store.tree().unwrap().insert(meta_key("format"), FORMAT_2.as_bytes()).unwrap();
        store.flush().unwrap();
    }
    let store = Store::open(dir.path(), &opts).unwrap();
    assert_eq!(store.tree().unwrap().get(meta_key("format")).unwrap().as_deref(), Some(FORMAT.as_bytes()));
    assert_eq!(store.tree().unwrap().scan_prefix([b'i']).count(), 0, "index entries removed");
    let recovered = store.recover().unwrap();
    assert!(matches!(recovered.path, RecoveryPath::Snapshot { .. }), "{}", recovered.path);
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(store.head_rv().unwrap()).unwrap()), index_contents(&index));
    assert_eq!(index.len("v1/pods"), 29);
}

/// Every event's pointer in the `e` values of the store, as (RV, pointer).
fn pointers(store: &Store) -> Vec<(u64, log::Pointer)> {
    store
        .tree().unwrap()
        .scan_prefix([EVENT])
        .flat_map(|item| {
            let (k, v) = item.unwrap();
            log::decode_entries(read_u64(&k[1..], "key").unwrap(), &v).unwrap().expect("pointers, not a record")
        })
        .collect()
}

/// The number of events the `e` values of the store hold.
fn stored_events(store: &Store) -> usize {
    store.tree().unwrap().scan_prefix([EVENT]).map(|item| log::entry_count(&item.unwrap().1)).sum()
}

/// Removes the event at `rv` from the value that holds it, as compaction does.
fn remove_event(store: &Store, rv: u64) {
    let (k, v) = store.tree().unwrap().range(event_key(0)..=event_key(rv)).next_back().unwrap().unwrap();
    let left: Vec<(u64, Located)> = located(&k, v).unwrap().into_iter().filter(|(at, _)| *at != rv).collect();
    match left_value(&k, left).unwrap() {
        Some(value) => store.tree().unwrap().insert(k, value).unwrap(),
        None => store.tree().unwrap().remove(k).unwrap(),
    };
}

/// The record log's segment files and their sizes.
fn segment_files(dir: &std::path::Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir.join(log::LOG_DIR))
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect()
}

#[test]
fn event_records_go_to_the_record_log_and_damage_there_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    let events = commit_changes(&store, &mut index, (0..50).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
    // sled holds a pointer per event; the records are in the segment, in order.
    let pointers = pointers(&store);
    assert_eq!(pointers.len(), 50);
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let logged: u64 = pointers.iter().map(|(_, p)| u64::from(p.len)).sum();
    // The records, then the commit's mark.
    assert_eq!(*files.values().next().unwrap(), logged + log::MARK_LEN as u64);
    assert!(store.size_on_disk().unwrap() >= logged);
    assert_eq!(store.usage().unwrap().events.value_bytes, logged);
    for (event, (rv, pointer)) in events.iter().zip(&pointers) {
        assert_eq!(event.rv, *rv);
        assert_eq!(store.event(*rv).unwrap().as_ref(), Some(event));
        assert_eq!(pointer.crc, crc32fast::hash(&encode_event_with(event, store.dicts.read().unwrap().get("v1/pods"), &mut Compressors::default()).unwrap()));
    }
    // A byte changed in the segment: that event's reads fail as corrupt,
    // the others still read.
    let (rv, pointer) = pointers[7];
    let path = dir.path().join(log::LOG_DIR).join(files.keys().next().unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(pointer.offset + pointer.len / 2) as usize] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(store.body(rv), Err(Error::Corrupt { .. })));
    assert!(matches!(store.write_served(rv, None, &mut ChunkBuf::default()), Err(Error::Corrupt { .. })));
    assert_eq!(store.event(pointers[8].0).unwrap().as_ref(), Some(&events[8]));
    // A truncated segment: the records past its end are corrupt too.
    let last = pointers[49];
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(u64::from(last.1.offset) + 3).unwrap();
    assert!(matches!(store.event(last.0), Err(Error::Corrupt { .. })));
    // A pointer of the wrong length is damage, not a record.
    store.tree().unwrap().insert(event_key(1000), &last.1.encode()[..log::POINTER_LEN - 1]).unwrap();
    assert!(matches!(store.event(1000), Err(Error::Corrupt { .. })));
}

/// Compaction deletes the segments whose records are mostly dead, after
/// moving their live records to the end of the log; readers that read a
/// pointer before the move find the record again.
#[test]
fn compaction_reclaims_mostly_dead_segments_and_moves_their_live_records() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { log_segment_bytes: 4096, ..Options::default() };
    let store = Store::open(dir.path(), &opts).unwrap();
    let mut index = Index::at(0);
    let member_rv = std::cell::Cell::new(0);
    let next = || {
        member_rv.set(member_rv.get() + 1);
        member_rv.get()
    };
    // One object that stays for every three that change, in one batch,
    // then rounds of changes: the first batch's segments end up a quarter live.
    let mut first = Vec::new();
    for i in 0..12 {
        first.push(pod_change(&format!("keep{i}"), next(), false));
        for j in 0..3 {
            first.push(pod_change(&format!("churn{i}-{j}"), next(), false));
        }
    }
    commit_changes(&store, &mut index, first);
    for _ in 0..4 {
        commit_changes(&store, &mut index, (0..12).flat_map(|i| (0..3).map(move |j| (i, j))).map(|(i, j)| pod_change(&format!("churn{i}-{j}"), next(), false)).collect());
    }
    let bodies: BTreeMap<u64, ServedBody> = index.live_rvs().map(|rv| (rv, store.body(rv).unwrap().unwrap())).collect();
    let before = segment_files(dir.path());
    assert!(before.len() > 10, "{before:?}");
    let keep0 = index.range("v1/pods", None, None).find(|(k, _)| k.name == "keep0").unwrap().1.rv;
    let old_pointer = store.lookup(keep0).unwrap().unwrap();

    let head = store.head_rv().unwrap();
    let stats = store.compact(head, &index).unwrap();
    assert_eq!(stats.kept as usize, bodies.len());
    // The events counted without a scan are those retained.
    assert_eq!(loaded_event_count(&store), stored_events(&store));
    assert_eq!(store.event_count(), bodies.len());
    let after = segment_files(dir.path());
    let bytes = |files: &BTreeMap<String, u64>| files.values().sum::<u64>();
    assert!(bytes(&after) * 2 < bytes(&before), "{} bytes before, {} after", bytes(&before), bytes(&after));
    // The first batch's segments are gone; what is left is at least half live
    // (the segments written since, the active one aside).
    let first_segment = before.keys().next().unwrap();
    assert!(!after.contains_key(first_segment), "{after:?}");
    let live = pointers(&store);
    assert_eq!(live.len(), bodies.len());
    for (rv, body) in &bodies {
        assert_eq!(&store.body(*rv).unwrap().unwrap(), body, "object version {rv}");
    }
    // The events removed read as gone, one by one and read ahead together.
    let ahead = store.read_ahead(1..=head).unwrap();
    for rv in 1..=head {
        let (mut one, mut together) = (ChunkBuf::default(), ChunkBuf::default());
        let found = store.write_served(rv, Some("_m1"), &mut one).unwrap();
        assert_eq!(found, bodies.contains_key(&rv), "event {rv}");
        assert_eq!(store.event(rv).unwrap().is_some(), found);
        assert_eq!(store.write_served_from(&ahead, rv, Some("_m1"), &mut together).unwrap(), found);
        assert_eq!(one.written(), together.written());
        assert_eq!(store.body_from(&ahead, rv).unwrap().as_ref(), bodies.get(&rv));
    }
    // A pointer read before the move names a deleted segment: resolving it
    // says so, and reading the event by its key finds the copy.
    assert!(store.resolve(old_pointer.clone()).unwrap().is_none());
    let record = store.scanned(keep0, old_pointer).unwrap().unwrap();
    assert_eq!(decode_body_with(&record, &store.dicts.read().unwrap()).unwrap(), bodies[&keep0]);

    // A version removed from the segment still appended to (never
    // reclaimed) reads as gone all the same.
    let superseded = commit_changes(&store, &mut index, vec![pod_change("keep1", next(), false)])[0].rv;
    commit_changes(&store, &mut index, vec![pod_change("keep1", next(), false)]);
    let head = store.head_rv().unwrap();
    store.compact(head, &index).unwrap();
    assert!(store.event(superseded).unwrap().is_none());
    assert!(!store.write_served_from(&store.read_ahead([superseded]).unwrap(), superseded, None, &mut ChunkBuf::default()).unwrap());
    let bodies: BTreeMap<u64, ServedBody> = index.live_rvs().map(|rv| (rv, store.body(rv).unwrap().unwrap())).collect();

    // Recovery after a reopen, with and without a snapshot, gives the index.
    store.write_snapshot(&index).unwrap().unwrap();
    drop(store);
    let store = Store::open(dir.path(), &opts).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(head).unwrap()), index_contents(&index));
    for (rv, body) in &bodies {
        assert_eq!(&store.body(*rv).unwrap().unwrap(), body, "object version {rv} after reopen");
    }
    assert_eq!(loaded_event_count(&store), stored_events(&store));
    // A second compaction has nothing more to move: no segment changes
    // but the one appended to.
    let files = segment_files(dir.path());
    store.compact(head, &index).unwrap();
    assert_eq!(segment_files(dir.path()), files);
}

/// A data dir of format 3 (event records inside sled) is renamed to this
/// format when opened; its records and snapshot read as they are, new
/// records go to the record log, and compaction removes the old ones.
#[test]
fn data_dirs_of_format_3_are_read_in_place_and_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    let events = {
        let store = Store::open(dir.path(), &opts).unwrap();
        let mut events = commit_changes(&store, &mut index, (0..30).map(|i| pod_change(&format!("p{i}"), i, false)).collect());
        events.extend(commit_changes(&store, &mut index, vec![pod_change("p3", 40, true)]));
        // As format 3 kept them: each record in sled at its event's key.
        for event in &events {
            let record = in_old_layout(&store.record(event.rv).unwrap().unwrap());
            store.tree().unwrap().insert(event_key(event.rv), record).unwrap();
        }
        store.tree().unwrap().insert(meta_key("format"), FORMAT_3.as_bytes()).unwrap();
        store.write_snapshot(&index).unwrap().unwrap();
        store.flush().unwrap();
        events
    };
    std::fs::remove_dir_all(dir.path().join(log::LOG_DIR)).unwrap();
    // A snapshot of an older format (its first bytes as format 3 wrote
    // them) is not read: the log is replayed.
    let path = dir.path().join(SNAPSHOT_FILE);
    let snapshot = std::fs::read(&path).unwrap();
    std::fs::write(&path, [&b"kubefold-index-snapshot\n"[..], &snapshot[snapshot::SNAPSHOT_MAGIC.len()..]].concat()).unwrap();

    let store = Store::open(dir.path(), &opts).unwrap();
    assert_eq!(store.tree().unwrap().get(meta_key("format")).unwrap().as_deref(), Some(FORMAT.as_bytes()));
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.path, RecoveryPath::Replay { reason: "snapshot of an older store format".into() });
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(index_contents(&store.replay(store.head_rv().unwrap()).unwrap()), index_contents(&index));
    for event in &events {
        assert_eq!(store.event(event.rv).unwrap().as_ref(), Some(event));
    }
    let newer = commit_changes(&store, &mut index, vec![pod_change("p5", 50, false)]);
    let inline = store
        .tree().unwrap()
        .scan_prefix([EVENT])
        .filter(|item| {
            let (k, v) = item.as_ref().unwrap();
            log::decode_entries(read_u64(&k[1..], "key").unwrap(), v).unwrap().is_none()
        })
        .count();
    assert_eq!(inline, events.len(), "the old records stay in sled until compacted");
    // With records in sled itself the record locations do not count the
    // events: they are scanned.
    assert_eq!(store.locations.count(), None);
    assert_eq!(store.event_count(), events.len() + 1);
    assert!(matches!(store.lookup(newer[0].rv).unwrap(), Some(Located::Logged(_))));
    // Compaction to the head: the superseded old record goes, the others stay readable.
    let head = store.head_rv().unwrap();
    store.compact(head, &index).unwrap();
    assert!(store.event(events[5].rv).unwrap().is_none(), "p5's first version removed");
    assert_eq!(store.event(events[6].rv).unwrap().as_ref(), Some(&events[6]));
    assert_eq!(index_contents(&store.replay(head).unwrap()), index_contents(&index));
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
        // Segments of a few records, so that compactions reclaim some.
        let opts = Options { log_segment_bytes: 2048, ..Options::default() };
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
                    store = Store::open(dir.path(), &opts).unwrap();
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
            // The count of events served by the stats is the log's.
            prop_assert_eq!(store.event_count(), stored_events(&store));
        }
    }
}

/// The number of events counted from the record locations once they are
/// loaded (a bounded wait for the thread that loads them).
fn loaded_event_count(store: &Store) -> usize {
    for _ in 0..3000 {
        if let Some(count) = store.locations.count() {
            return count;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("record locations not loaded");
}

/// Index entries are snapshotted with every string, in order, and read
/// back the same, whatever their text.
#[test]
fn snapshot_entries_round_trip() {
    let long = "v".repeat(70_000);
    let entries = [
        IndexEntry::new(42, "9001", "0f1e2d3c", [("app", "web"), ("pod-template-hash", "5d7f")], [("spec.nodeName", "node-2"), ("status.phase", "Pending")]),
        IndexEntry::new(u64::MAX, "", "", [], []),
        IndexEntry::new(300, "1", "ü", [("", ""), ("x\u{0}y", "ünïcode")], [("f", long.as_str())]),
    ];
    let key = ObjectKey { namespace: "ns".into(), name: "n".repeat(300), cluster: "m1".into() };
    let mut bytes = Vec::new();
    for entry in &entries {
        snapshot::write_entry(&mut bytes, &key, entry);
    }
    let mut r = Reader::new(&bytes);
    for entry in &entries {
        let (read_key, read) = snapshot::read_entry(&mut r).unwrap();
        assert_eq!((&read_key, &read), (&key, entry));
    }
    assert!(r.is_done());
    // Cut anywhere, the last entry is refused.
    let mut one = Vec::new();
    snapshot::write_entry(&mut one, &key, &entries[2]);
    let last = bytes.len() - one.len();
    for cut in last..bytes.len() {
        let mut r = Reader::new(&bytes[last..cut]);
        assert!(snapshot::read_entry(&mut r).is_none(), "cut at {cut}");
    }
}

/// sled's I/O threads may keep the data dir's lock for a moment after the
/// last handle of a store is dropped; an open in the same process waits for
/// it instead of failing (as `kubefold restore` did when it reopened the
/// store it had just written).
#[test]
fn a_store_reopens_at_once_after_its_last_handle_goes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    for round in 0..40u64 {
        let store = Store::open(dir.path(), &opts).unwrap();
        assert_eq!(store.head_rv().unwrap(), round, "round {round} sees every earlier commit");
        commit_changes(&store, &mut index, vec![pod_change(&format!("p{round}"), round + 1, false)]);
        store.flush().unwrap();
    }
}

/// A data dir locked by another process is refused at once, naming that
/// process (two kubefolds on one data dir would corrupt it).
#[test]
fn a_lock_held_by_another_process_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), &Options::default()).unwrap());
    let db = dir.path().join("db");
    // util-linux `flock` takes the same kind of lock (flock(2)) as sled.
    // It holds the lock until `cat` reads the end of its input.
    let mut holder =
        std::process::Command::new("flock").arg("-x").arg(&db).arg("cat").stdin(std::process::Stdio::piped()).spawn().unwrap();
    let mut tries = 0;
    while lock_holder(&db) != Some(holder.id()) {
        tries += 1;
        assert!(tries < 1000, "flock never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let result = Store::open(dir.path(), &Options::default());
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let err = result.err().expect("a locked data dir is refused");
    let text = err.to_string();
    assert!(matches!(err, Error::OpenFailed { .. }), "{text}");
    assert!(text.contains(&format!("held by process {}", holder.id())), "{text}");
    // Once the other process is gone, the data dir opens.
    Store::open(dir.path(), &Options::default()).unwrap();
}

/// A commit's pointers are kept in groups of up to `GROUP_EVENTS` events,
/// one sled value each: every event reads back (by RV, in scans from any
/// RV, after a reopen), compaction removing part of a group keeps the
/// rest, and the counts agree.
#[test]
fn a_commits_pointers_are_kept_in_groups() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    let n = 2 * log::GROUP_EVENTS + 88;
    let (events, superseded) = {
        let store = Store::open(dir.path(), &opts).unwrap();
        let events = commit_changes(&store, &mut index, (0..n).map(|i| pod_change(&format!("p{i}"), i as u64 + 1, false)).collect());
        assert_eq!(events.len(), n);
        let keys: Vec<u64> = store.tree().unwrap().scan_prefix([EVENT]).keys().map(|k| read_u64(&k.unwrap()[1..], "key").unwrap()).collect();
        let firsts = [events[0].rv, events[log::GROUP_EVENTS].rv, events[2 * log::GROUP_EVENTS].rv];
        assert_eq!(keys, firsts, "one value per {} events, keyed by its first", log::GROUP_EVENTS);
        assert_eq!(stored_events(&store), n);
        // Scans starting inside a group, at its key and past the end.
        for from in [0, 1, 5, firsts[1] - 1, firsts[1], firsts[2] + 3, events[n - 1].rv] {
            let got: Vec<u64> = store.events_after(from).map(|e| e.unwrap().rv).collect();
            let want: Vec<u64> = events.iter().map(|e| e.rv).filter(|rv| *rv > from).collect();
            assert_eq!(got, want, "events after {from}");
        }
        // Every second pod of the middle group changes: compaction removes
        // their first versions from it, the others stay in it.
        let changed: Vec<Change> = (log::GROUP_EVENTS..2 * log::GROUP_EVENTS).step_by(2).map(|i| pod_change(&format!("p{i}"), 10_000 + i as u64, false)).collect();
        let superseded: Vec<u64> = (log::GROUP_EVENTS..2 * log::GROUP_EVENTS).step_by(2).map(|i| events[i].rv).collect();
        commit_changes(&store, &mut index, changed);
        let stats = store.compact(store.head_rv().unwrap(), &index).unwrap();
        assert_eq!(stats.removed as usize, superseded.len());
        assert_eq!(stored_events(&store), n + superseded.len() - superseded.len());
        assert_eq!(loaded_event_count(&store), stored_events(&store));
        for event in &events {
            let want = if superseded.contains(&event.rv) { None } else { Some(event) };
            assert_eq!(store.event(event.rv).unwrap().as_ref(), want, "event {}", event.rv);
        }
        (events, superseded)
    };
    // Reopened: the groups are read from sled (locations loaded by scanning them).
    let store = Store::open(dir.path(), &opts).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(index_contents(&recovered.index), index_contents(&index));
    assert_eq!(loaded_event_count(&store), n);
    for event in &events {
        assert_eq!(store.event(event.rv).unwrap().is_some(), !superseded.contains(&event.rv), "event {}", event.rv);
        assert_eq!(store.lookup(event.rv).unwrap().is_some(), !superseded.contains(&event.rv), "event {} in sled", event.rv);
    }
    let replayed: Vec<u64> = store.events_after(0).map(|e| e.unwrap().rv).collect();
    assert_eq!(replayed.len(), n);
    assert!(replayed.windows(2).all(|w| w[0] < w[1]), "in RV order");
}

/// A data dir of format 4 (a sled key per event holding its pointer) is
/// read in place and renamed; new commits beside its pointers are grouped,
/// and compaction and backup handle both kinds of value.
#[test]
fn data_dirs_of_format_4_are_read_in_place_and_renamed() {
    let (dir, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let opts = Options::default();
    let mut index = Index::at(0);
    let events = {
        let store = Store::open(dir.path(), &opts).unwrap();
        let events = commit_changes(&store, &mut index, (0..40).map(|i| pod_change(&format!("p{i}"), i + 1, false)).collect());
        // As format 4 kept them: one key per event, its pointer the value.
        for (rv, pointer) in pointers(&store) {
            store.tree().unwrap().insert(event_key(rv), &pointer.encode()[..]).unwrap();
        }
        store.tree().unwrap().insert(meta_key("format"), FORMAT_4.as_bytes()).unwrap();
        store.flush().unwrap();
        events
    };
    let store = Store::open(dir.path(), &opts).unwrap();
    assert_eq!(store.tree().unwrap().get(meta_key("format")).unwrap().as_deref(), Some(FORMAT.as_bytes()));
    assert_eq!(store.tree().unwrap().scan_prefix([EVENT]).count(), 40, "a key per event");
    assert_eq!(index_contents(&store.recover().unwrap().index), index_contents(&index));
    assert_eq!(loaded_event_count(&store), 40);
    for event in &events {
        assert_eq!(store.event(event.rv).unwrap().as_ref(), Some(event));
    }
    let newer = commit_changes(&store, &mut index, (0..20).map(|i| pod_change(&format!("p{i}"), 100 + i, false)).collect());
    assert_eq!(store.tree().unwrap().scan_prefix([EVENT]).count(), 41, "the new events in one group");
    let mut backup = Vec::new();
    let others = store.tree().unwrap().iter().keys().filter(|k| k.as_ref().unwrap()[0] != EVENT).count() as u64;
    assert_eq!(store.backup(&mut backup).unwrap(), others + 60, "one record per event");
    let restored = Store::restore(&copy.path().join("d"), &mut &backup[..], &opts).unwrap();
    for event in events.iter().chain(&newer) {
        assert_eq!(restored.event(event.rv).unwrap().as_ref(), Some(event));
    }
    // Compaction removes the superseded per-event keys and keeps the rest.
    let stats = store.compact(store.head_rv().unwrap(), &index).unwrap();
    assert_eq!(stats.removed, 20);
    assert_eq!(stored_events(&store), 40);
    for event in events.iter().chain(&newer) {
        assert_eq!(store.event(event.rv).unwrap().is_some(), !events[..20].contains(event), "event {}", event.rv);
    }
    assert_eq!(index_contents(&store.replay(store.head_rv().unwrap()).unwrap()), index_contents(&index));
}

/// A record of format 3 (kept as a sled value) starts with its RV in the
/// old layout, never with the tag of a pointer (0xFF) or of a group of
/// pointers (0xFE), whatever the RV; a record of the current layout starts
/// with its own tag and lives only in the record log.
#[test]
fn records_never_start_like_pointers() {
    for record in format5_records() {
        assert!(record[0] < 0xFE, "first byte {:#x}", record[0]);
        let rv = decode_event(&record).unwrap().rv;
        assert_eq!(log::decode_entries(rv, &record).unwrap(), None);
    }
    let mut index = Index::at(0);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut event = commit_changes(&store, &mut index, vec![pod_change("p", 1, false)]).remove(0);
    for rv in [0, 1, 127, 128, 250, 251, 0xFFFF, u64::from(u32::MAX) + 1, u64::MAX] {
        event.rv = rv;
        assert_eq!(encode_event(&event).unwrap()[0], RECORD_TAG, "RV {rv}");
    }
}

/// The records of `tests/data/format5-records.bin`, written by the format-5
/// build (bincode's layout).
fn format5_records() -> Vec<Vec<u8>> {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/format5-records.bin")).unwrap();
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        records.push(bytes[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    records
}

/// `record` (of the current layout) in the layout of format 5 and older
/// (bincode's varints, no tag), as data dirs of those formats hold it.
fn in_old_layout(record: &[u8]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, n: u64) {
        match n {
            0..=250 => out.push(n as u8),
            251..=0xffff => out.extend([&[251][..], &(n as u16).to_le_bytes()].concat()),
            0x1_0000..=0xffff_ffff => out.extend([&[252][..], &(n as u32).to_le_bytes()].concat()),
            _ => out.extend([&[253][..], &n.to_le_bytes()].concat()),
        }
    }
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    assert_eq!(record[0], RECORD_TAG);
    let mut r = Reader::new(&record[1..]);
    let mut out = Vec::new();
    varint(&mut out, r.u64().unwrap()); // rv
    varint(&mut out, r.u64().unwrap()); // event type
    for _ in 0..4 {
        bytes(&mut out, r.bytes().unwrap()); // resource, namespace, name, cluster
    }
    varint(&mut out, r.u64().unwrap()); // prev_rv
    for _ in 0..2 {
        bytes(&mut out, r.bytes().unwrap()); // member_rv, uid
    }
    for _ in 0..2 {
        let pairs = r.u64().unwrap();
        varint(&mut out, pairs);
        for _ in 0..2 * pairs {
            bytes(&mut out, r.bytes().unwrap());
        }
    }
    for _ in 0..4 {
        varint(&mut out, r.u64().unwrap()); // time_ms, name_end, rv_at, body_len
    }
    out.push(r.byte().unwrap());
    out.extend_from_slice(&record[1 + r.position()..]);
    out
}

/// What [`BodyHead::read`] gives, or `None` when it refuses the record.
fn body_head(record: &[u8]) -> Option<(u64, String, u32, u32, u32, u8, usize)> {
    BodyHead::read(record).ok().map(|(h, used)| (h.rv, h.resource.to_string(), h.name_end, h.rv_at, h.body_len, h.body_codec, used))
}

/// The same fields from [`decode_head`], or `None` when it refuses the record.
fn full_head(record: &[u8]) -> Option<(u64, String, u32, u32, u32, u8, usize)> {
    decode_head(record).ok().map(|(h, used)| (h.rv, h.resource, h.name_end, h.rv_at, h.body_len, h.body_codec, used))
}

fn head_event(rv: u64, prev_rv: u64, time_ms: u64, labels: Vec<(String, String)>, uid: String) -> StoredEvent {
    let Change::Upsert(body) = pod_change("p", 7, false) else { unreachable!() };
    let mut event = StoredEvent::new(rv, EventType::Modified, "v1/pods", "m1", prev_rv, body);
    event.time_ms = time_ms;
    event.fields = labels.iter().rev().cloned().collect();
    event.labels = labels;
    event.uid = uid;
    event
}

/// Checks both head readers on `record` (the head of `event`): they agree,
/// every cut of the head is refused by both, and damage to any byte of the
/// head is refused or read alike (the body's reader passes over text that
/// is not UTF-8, which the full reader refuses).
fn check_heads(record: &[u8], event: &StoredEvent) {
    let by_hand = body_head(record).unwrap();
    let (rv, resource, name_end, rv_at, body_len, _, used) = by_hand.clone();
    assert_eq!((rv, resource.as_str(), name_end, rv_at, body_len), (event.rv, event.resource.as_str(), event.body.name_end, event.body.rv_at, event.body.json.len() as u32));
    assert_eq!(full_head(record), Some(by_hand));
    assert_eq!(decode_event(record).unwrap(), *event);
    assert_eq!(decode_body_with(record, &Dicts::new()).unwrap(), event.body);
    for cut in 0..used {
        assert_eq!((body_head(&record[..cut]), full_head(&record[..cut])), (None, None), "head cut at {cut} of {used}");
    }
}

#[test]
fn record_heads_round_trip_at_every_varint_width() {
    // Every width of the varints (1 to 10 bytes), in the RVs, in string
    // lengths and in the number of label pairs.
    let numbers = [0, 1, 127, 128, 16_383, 16_384, 1 << 21, 1 << 28, u64::from(u32::MAX), 1 << 35, 1 << 42, 1 << 49, 1 << 56, 1 << 63, u64::MAX];
    for (i, &n) in numbers.iter().enumerate() {
        let other = numbers[(i + 3) % numbers.len()];
        let labels: Vec<(String, String)> = (0..[0, 1, 127, 128, 300][i % 5]).map(|k| (format!("k{k}"), "v".repeat(k % 7))).collect();
        let uid = "u".repeat([0, 127, 128, 16_384][i % 4]);
        let event = head_event(n, other, n ^ 1, labels, uid);
        check_heads(&encode_event(&event).unwrap(), &event);
    }
    // Damage anywhere in a head: both readers refuse it or read the same.
    let record = encode_event(&head_event(300, 70_000, 1 << 40, vec![("app".into(), "a".into()), ("tier".into(), "web".into())], "uid-1".into())).unwrap();
    let used = BodyHead::read(&record).unwrap().1;
    let (mut refused, mut read) = (0, 0);
    for at in 0..used {
        for value in [0u8, 1, 2, 3, 0x7f, 0x80, 0xc3, 0xfe, 0xff] {
            let mut damaged = record.clone();
            damaged[at] = value;
            let (by_hand, full) = (body_head(&damaged), full_head(&damaged));
            if full.is_some() {
                assert_eq!(by_hand, full, "byte {at} set to {value}");
            }
            if by_hand.is_some() { read += 1 } else { refused += 1 }
        }
    }
    assert!(refused > 0 && read > 0, "{refused} refused, {read} read");
}

/// The format-5 build's records (bincode's layout, every width of its
/// varints) read as it wrote them, by both head readers, and written again
/// in the current layout read back the same.
#[test]
fn format5_records_read_as_written() {
    let widths = [0, 1, 250, 251, 255, 65_535, 65_536, u64::from(u32::MAX), u64::from(u32::MAX) + 1, u64::MAX];
    let records = format5_records();
    assert_eq!(records.len(), widths.len());
    for (i, record) in records.iter().enumerate() {
        let event = decode_event(record).unwrap();
        // What `width_event` in `tests/make_fixtures.rs` of the commit that made them wrote.
        assert_eq!(event.rv, widths[i]);
        assert_eq!(event.prev_rv, widths[(i + 3) % widths.len()]);
        assert_eq!(event.time_ms, widths[i] ^ 1);
        assert_eq!(event.event_type, [EventType::Added, EventType::Modified, EventType::Deleted][i % 3]);
        assert_eq!(event.labels.len(), [0, 1, 250, 251, 300][i % 5]);
        assert_eq!(event.fields, event.labels.iter().rev().cloned().collect::<Vec<_>>());
        assert_eq!(event.uid.len(), [0, 250, 251, 65_536, 0, 250, 251, 0, 1, 0][i]);
        assert_eq!(event.key.name, format!("p{i}"));
        assert_eq!(event.body.to_bytes(Some("_m1"), 9), format!(r#"{{"metadata":{{"name":"p{i}_m1","resourceVersion":"9"}}}}"#).into_bytes());
        check_heads(record, &event);
        let again = encode_event(&event).unwrap();
        assert_eq!(again[0], RECORD_TAG);
        check_heads(&again, &event);
        // The old layout as understood here is the bytes that build wrote.
        assert_eq!(in_old_layout(&again), *record);
    }
    // A u32 written with the 8-byte marker is refused, whatever its value.
    let record = &records[1];
    let (head, used) = BodyHead::read(record).unwrap();
    let width = |n: u32| if n < 251 { 1 } else if n <= 0xffff { 3 } else { 5 };
    let tail = width(head.name_end) + width(head.rv_at) + width(head.body_len) + 1;
    let mut wide = record[..used - tail].to_vec();
    wide.push(253);
    wide.extend_from_slice(&u64::from(head.name_end).to_le_bytes());
    wide.extend_from_slice(&record[used - tail + width(head.name_end)..]);
    assert_eq!((body_head(&wide), full_head(&wide)), (None, None));
}

#[test]
fn replay_progress_is_a_share_of_the_rv_range_and_a_time_left() {
    use std::time::Duration;
    let p = crate::ReplayProgress { from_rv: 100, at_rv: 150, head_rv: 300, replayed: 40 };
    assert_eq!(p.fraction(), 0.25);
    assert_eq!(p.time_left(Duration::from_secs(2)), Some(Duration::from_secs(6)));
    let start = crate::ReplayProgress { from_rv: 100, at_rv: 100, head_rv: 300, replayed: 0 };
    assert_eq!(start.time_left(Duration::from_secs(1)), None);
    let empty = crate::ReplayProgress { from_rv: 301, at_rv: 300, head_rv: 300, replayed: 0 };
    assert_eq!(empty.fraction(), 1.0);
}
