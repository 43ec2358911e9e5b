//! Damage: a record log cut to its intact prefix, a record found damaged
//! while reading, sled's files lost, a backup's minimum resourceVersion,
//! and sled opened again after a write it keeps failing.

use kubefold_engine::event::Change;
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources;

use super::*;

fn pod(name: &str, member_rv: u64) -> Change {
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let raw = format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{member_rv}"}}}}"#);
    Change::Upsert(ingest(&pods, "m1", raw.as_bytes()).unwrap())
}

/// Commits one batch per call like the aggregator; the index follows.
fn commit(store: &Store, index: &mut Index, names: std::ops::Range<u64>) {
    let mut events = Vec::new();
    for i in names {
        let rv = index.head_rv() + 1;
        if let Some(e) = plan_change(index, "v1/pods", "m1", pod(&format!("p{}", i % 40), i + 1), rv) {
            index.apply(&e);
            events.push(e);
        }
    }
    store.commit(&Commit { events, checkpoints: vec![("m1".into(), "v1/pods".into(), index.head_rv().to_string())] }).unwrap();
}

/// A store of 200 events (40 pods, each changed 5 times) in 10 commits;
/// the index after each event.
fn filled(dir: &Path) -> (Store, Vec<Index>) {
    filled_with(dir, &Options::default())
}

fn filled_with(dir: &Path, options: &Options) -> (Store, Vec<Index>) {
    let store = Store::open(dir, options).unwrap();
    let mut index = Index::at(0);
    let mut states = vec![index.clone()];
    for batch in 0..10 {
        for i in batch * 20..batch * 20 + 20 {
            commit(&store, &mut index, i..i + 1);
            states.push(index.clone());
        }
    }
    (store, states)
}

/// Flips a byte in the middle of the record of the event at `rv`.
fn damage_record(store: &Store, rv: u64) {
    let pointer = store.locations.get(rv).or_else(|| match store.lookup(rv).unwrap() {
        Some(Located::Logged(p)) => Some(p),
        _ => None,
    });
    let pointer = pointer.expect("a logged record");
    let path = store.dir.join(log::LOG_DIR).join(log::segment_name(pointer.segment));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(pointer.offset + pointer.len / 2) as usize] ^= 0x5a;
    std::fs::write(&path, bytes).unwrap();
}

fn contents(index: &Index) -> Vec<(String, u64)> {
    index.range("v1/pods", None, None).map(|(k, e)| (k.name.clone(), e.rv)).collect()
}

/// A damaged record at start: the events before it are kept (the index
/// and the history up to it), the ones from it on dropped with the
/// checkpoints, and the store continues above its ceiling; the lost
/// resourceVersions answer as lost history.
#[test]
fn a_damaged_record_log_keeps_its_intact_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled(dir.path());
    damage_record(&store, 150);
    let ceiling = store.served_rv_bound().unwrap();
    assert!(ceiling > 200);
    drop(store);

    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let e = store.recover().unwrap_err();
    assert_eq!(e.cause(), Cause::Corrupt, "{e}");
    let found = store.find_damage().unwrap().expect("the damage is found");
    assert_eq!(found.rv, 150, "{found:?}");
    assert!(found.what.contains("checksum mismatch"), "{found:?}");
    assert!(found.segment.as_ref().is_some_and(|s| s.exists()), "{found:?}");
    let truncated = store.drop_history_from(found.rv, ceiling).unwrap();
    assert_eq!((truncated.kept, truncated.dropped, truncated.lost), (149, 51, (150, ceiling)));
    drop(store);

    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), ceiling);
    assert_eq!(contents(&recovered.index), contents(&states[149]), "the index is the prefix's");
    assert!(recovered.checkpoints.is_empty(), "the members are listed again");
    // The prefix's history reads; the lost one answers as lost.
    let after: Vec<u64> = store.events_after(100).map(|e| e.unwrap().rv).collect();
    assert_eq!(after, (101..150).collect::<Vec<_>>());
    assert_eq!(store.lost_history().unwrap(), Some((150, ceiling)));
    assert!(!store.in_lost_history(100) && !store.in_lost_history(149), "a watch from the prefix works");
    assert!(store.in_lost_history(150) && store.in_lost_history(200) && store.in_lost_history(ceiling - 1));
    assert!(!store.in_lost_history(ceiling));
    assert_eq!(store.find_damage().unwrap(), None);
}

/// A record found damaged while the store serves: the read fails as
/// damage (never skipped), it is counted, requests that need it answer as
/// lost history at once, and the data dir is marked so that the next
/// start reports the damage (and repairs it).
#[test]
fn a_record_found_damaged_while_reading_is_counted_marked_and_repaired_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = filled(dir.path());
    assert!(!store.in_lost_history(120));
    damage_record(&store, 180);
    let read: Vec<Result<StoredEvent>> = store.events_after(170).collect();
    assert_eq!(read.len(), 30);
    assert!(read[..9].iter().all(|e| e.is_ok()));
    assert_eq!(read[9].as_ref().unwrap_err().cause(), Cause::Corrupt);
    assert_eq!(store.event(180).unwrap_err().cause(), Cause::Corrupt);
    assert_eq!(store.damaged_records(), 1, "counted once");
    assert!(store.in_lost_history(120) && store.in_lost_history(179), "a watch from before it answers 410");
    assert!(!store.in_lost_history(180) && !store.in_lost_history(190));
    assert_eq!(store.damage_mark().unwrap(), Some(180));
    drop(store);

    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let e = store.recover().unwrap_err();
    assert!(e.to_string().contains("event 180 was found damaged"), "{e}");
    let found = store.find_damage().unwrap().unwrap();
    assert_eq!(found.rv, 180);
    store.drop_history_from(found.rv, store.served_rv_bound().unwrap()).unwrap();
    assert_eq!(store.damage_mark().unwrap(), None);
    assert_eq!(store.recover().unwrap().index.len("v1/pods"), 40);
}

/// sled's `db` file gone (sled would start an empty tree): the open is
/// damage, not a new store starting again at resourceVersion 1; with or
/// without an index snapshot.
#[test]
fn sled_files_lost_beside_a_record_log_are_damage() {
    for snapshot in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (store, states) = filled(dir.path());
        if snapshot {
            store.write_snapshot(states.last().unwrap()).unwrap();
        }
        drop(store);
        std::fs::remove_file(dir.path().join("db")).unwrap();
        let e = Store::open(dir.path(), &Options::default()).err().expect("refused");
        assert_eq!(e.cause(), Cause::Corrupt, "{e}");
        assert!(e.to_string().contains("sled's files are missing or damaged"), "{e}");
    }
}

/// sled's tree behind the index snapshot (it lost commits it had made
/// durable): damage, not a silent step back of the head.
#[test]
fn a_sled_tree_behind_the_snapshot_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled(dir.path());
    store.write_snapshot(states.last().unwrap()).unwrap();
    // sled as it would be had it lost its last commit, which the snapshot
    // holds: it was made durable.
    store.tree().unwrap().insert(meta_key("head"), &199u64.to_be_bytes()[..]).unwrap();
    store.flush().unwrap();
    drop(store);
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let e = store.recover().unwrap_err();
    assert_eq!(e.cause(), Cause::Corrupt, "{e}");
    // The record log's mark of the last commit, written once sled had
    // flushed it, tells it first.
    assert!(e.to_string().contains("behind the index snapshot") || e.to_string().contains("sled had flushed commits up to 200"), "{e}");
}

/// sled's tree behind the record log (sled read its damaged files up to
/// the damage, without an index snapshot to tell): damage. A commit is
/// marked in the log once sled flushed it, so sled behind even the last
/// mark lost a commit it had made durable. A commit marked before sled's
/// batch (`Periodic`, and data dirs written so before) may be lost alone:
/// a crash between its records and sled's flush, never served.
#[test]
fn a_sled_tree_behind_the_record_log_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = filled(dir.path());
    let set_head = |rv: u64| {
        store.tree().unwrap().insert(meta_key("head"), &rv.to_be_bytes()[..]).unwrap();
        store.flush().unwrap();
    };
    set_head(199);
    let e = store.recover().unwrap_err();
    assert_eq!(e.cause(), Cause::Corrupt, "{e}");
    assert!(e.to_string().contains("sled's tree is behind the record log: its head is resourceVersion 199, sled had flushed commits up to 200"), "{e}");
    // The same log with its last commit marked before sled's batch.
    store.log.append_marked(&[], true, Some(log::Mark { first_rv: 200, head_rv: 200, flushed: false })).unwrap();
    store.recover().expect("behind by a commit marked before sled's batch alone");
    set_head(150);
    let e = store.recover().unwrap_err();
    assert_eq!(e.cause(), Cause::Corrupt, "{e}");
    assert!(e.to_string().contains("sled's tree is behind the record log: its head is resourceVersion 150, the log holds commits up to 200"), "{e}");

    // A compaction's copies end the log with the newest commit's mark
    // again (a head read beside a commit not yet flushed could be ahead).
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled_with(dir.path(), &Options { log_segment_bytes: 4096, ..Options::default() });
    // Every pod but p0 changed again: p0's record is left alone in a
    // segment otherwise dead, which compaction moves to the end.
    let mut index = states.last().unwrap().clone();
    for i in 201..240 {
        commit(&store, &mut index, i..i + 1);
    }
    assert_eq!(store.log.last_mark(), Some(log::Mark { first_rv: 239, head_rv: 239, flushed: true }));
    let before = store.log.segment_sizes().unwrap();
    store.compact(235, &index).unwrap();
    let after = store.log.segment_sizes().unwrap();
    assert!(after.len() < before.len(), "segments reclaimed");
    assert_ne!(after.iter().next_back(), before.iter().next_back(), "p0's record was moved to the end of the log");
    assert_eq!(store.log.last_mark(), Some(log::Mark { first_rv: 239, head_rv: 239, flushed: true }));
    assert_eq!(store.recover().unwrap().index.head_rv(), 239);
}

/// A backup records a resourceVersion above every one the store served
/// (its ceiling) and a step above its head; a restore continues above it, or above a higher minimum
/// given (a newer backup's): the backup's history still reads, the
/// resourceVersions between its head and that minimum are lost history,
/// and the members are listed again.
#[test]
fn a_restore_continues_above_the_backups_minimum_resource_version() {
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled(&dir.path().join("a"));
    let bound = store.backup_min_rv_now().unwrap();
    assert_eq!(read_ceiling(&dir.path().join("a")), 100_001, "raised at the first commit");
    assert_eq!(bound, 200 + CEILING_STEP, "a step above the head, above the ceiling");
    let mut file = Vec::new();
    store.backup(&mut file).unwrap();
    let header = format!("kubefold-backup/4\nchecksum sha256\nmin-resource-version {bound}\n");
    assert!(file.starts_with(header.as_bytes()));
    assert_eq!(Store::backup_min_rv(&mut &file[..]).unwrap(), bound);

    for (target, min_rv, above) in [("b", 0, bound), ("c", bound + 5_000, bound + 5_000), ("d", 7, bound)] {
        let path = dir.path().join(target);
        let (restored, head, continued) = Store::restore_above(&path, &mut &file[..], &Options::default(), min_rv).unwrap();
        assert_eq!((head, continued), (200, above));
        assert_eq!(restored.head_rv().unwrap(), above);
        assert_eq!(read_ceiling(&path), above, "a later repair continues above it too");
        assert_eq!(restored.lost_history().unwrap(), Some((201, above)));
        let recovered = restored.recover().unwrap();
        assert_eq!(contents(&recovered.index), contents(states.last().unwrap()));
        assert!(recovered.checkpoints.is_empty());
        assert_eq!(restored.events_after(190).count(), 10, "the backup's history reads");
        assert!(!restored.in_lost_history(200) && restored.in_lost_history(201) && !restored.in_lost_history(above));
    }
    // A backup of the build before (`kubefold-backup/3`, no minimum): its
    // own head is all a restore knows.
    let body = &file[header.len()..file.len() - 32];
    let mut old = b"kubefold-backup/3\nchecksum sha256\n".to_vec();
    old.extend_from_slice(body);
    old.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, &body[..body.len() - 4]).as_ref());
    assert_eq!(Store::backup_min_rv(&mut &old[..]).unwrap(), 0);
    let (restored, head, continued) = Store::restore_above(&dir.path().join("old"), &mut &old[..], &Options::default(), 0).unwrap();
    assert_eq!((head, continued, restored.lost_history().unwrap()), (200, 200, None));
    let (_, _, continued) = Store::restore_above(&dir.path().join("old-min"), &mut &old[..], &Options::default(), bound).unwrap();
    assert_eq!(continued, bound);
    // The header is covered by the checksum.
    let mut changed = file.clone();
    let at = header.len() - 2;
    changed[at] = if changed[at] == b'1' { b'2' } else { b'1' };
    assert!(Store::restore(&dir.path().join("e"), &mut &changed[..], &Options::default()).is_err());
}

/// A failed write that sled keeps failing (as sled 0.34 does after a
/// failed write of its log buffers): reads go on, and once the fault is
/// lifted the next commit opens sled again and succeeds; a failure sled
/// recovers from by itself needs no reopen.
#[test]
fn sled_is_opened_again_after_a_write_it_keeps_failing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled(dir.path());
    let mut index = states.last().unwrap().clone();
    store.inject_fault(Some(Fault::Fail(5)));
    assert!(store.commit(&Commit::default()).is_err());
    store.inject_fault(None);
    commit(&store, &mut index, 300..301);
    assert_eq!(store.reopens(), 0, "sled took the write: not reopened");

    store.inject_fault(Some(Fault::Wedge(28)));
    let e = store.commit(&Commit::default()).unwrap_err();
    assert_eq!(e.cause(), Cause::NoSpace);
    assert_eq!(store.fault().map(|(cause, _)| cause), Some(Cause::NoSpace));
    // Reads go on through the failed sled.
    assert_eq!(store.event(201).unwrap().unwrap().rv, 201);
    assert_eq!(store.head_rv().unwrap(), 201);
    store.inject_fault(None);
    commit(&store, &mut index, 301..303);
    assert_eq!(store.reopens(), 1, "sled opened again");
    assert!(store.fault().is_none());
    assert_eq!(store.head_rv().unwrap(), 203);
    assert_eq!(store.events_after(199).map(|e| e.unwrap().rv).collect::<Vec<_>>(), vec![200, 201, 202, 203]);
    drop(store);
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), 203);
    assert_eq!(contents(&recovered.index), contents(&index));
}

/// A record found damaged while serving is handed out once for its repair
/// while serving; the event that superseded it is found, its segment copied
/// into a quarantine directory with a note; once a compaction past that
/// event removed it, the damage mark goes and a reopened store replays its
/// whole log without meeting it.
#[test]
fn a_record_found_damaged_while_serving_is_settled_by_a_compaction_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, states) = filled(dir.path());
    // Event N changes pod p{(N-1) % 40}: 100 is p19's, superseded by 140.
    damage_record(&store, 100);
    assert!(store.event(100).is_err());
    assert!(store.event(100).is_err());
    assert_eq!(store.damaged_records(), 1, "counted once");
    assert_eq!(store.damage_mark().unwrap(), Some(100));
    let damaged = store.take_damaged();
    assert_eq!(damaged.iter().map(|d| d.rv).collect::<Vec<_>>(), vec![100]);
    assert!(store.take_damaged().is_empty(), "handed out once");
    assert_eq!(store.superseded_by(100).unwrap(), Some(140));
    assert_eq!(store.superseded_by(190).unwrap(), None, "the object's last event");

    let quarantine = store.create_quarantine().unwrap();
    let copy = store.quarantine_damage(&damaged[0], 140, &quarantine).unwrap().expect("the segment copied");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(damaged[0].segment.as_ref().unwrap()).unwrap());
    let note = std::fs::read_to_string(quarantine.join(DAMAGE_NOTE)).unwrap();
    assert!(note.contains("event 100") && note.contains("resourceVersion 140"), "{note}");

    assert_eq!(store.settle_damage().unwrap(), vec![100], "still in the log");
    let live = states.last().unwrap();
    store.compact(140, live).unwrap();
    assert!(!store.holds(100).unwrap());
    assert!(store.settle_damage().unwrap().is_empty());
    assert_eq!(store.damage_mark().unwrap(), None);
    drop(store);

    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert!(matches!(recovered.path, RecoveryPath::Replay { .. }));
    assert_eq!(contents(&recovered.index), contents(live));
    assert_eq!(recovered.compacted_rv, 140);
}
