//! A data dir written by the format-5 build (`tests/data/`, see its
//! README) opened by this one: it is upgraded in place, and serves the same
//! objects, events and resourceVersions; new events are written beside the
//! old records, and compaction handles both.

use std::io::Read;
use std::path::Path;

use kubefold_engine::event::{EventType, ObjectKey, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::object::ingest;
use kubefold_engine::resources;
use kubefold_store::{ChunkBuf, Commit, Options, RecoveryPath, Store, FORMAT};
use serde_json::Value;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Unpacks a packed data dir (see `tests/data/README.md`) into `dir`.
fn unpack(packed: &Path, dir: &Path) {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(packed).unwrap()).read_to_end(&mut bytes).unwrap();
    let mut rest = &bytes[..];
    let mut take = |n: usize| {
        let (taken, after) = rest.split_at(n);
        rest = after;
        (taken.to_vec(), rest.is_empty())
    };
    let mut files = 0;
    let mut done = bytes.is_empty();
    while !done {
        let name_len = u32::from_be_bytes(take(4).0.try_into().unwrap()) as usize;
        let name = String::from_utf8(take(name_len).0).unwrap();
        let len = u64::from_be_bytes(take(8).0.try_into().unwrap()) as usize;
        let path = dir.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let (file, end) = take(len);
        std::fs::write(path, file).unwrap();
        done = end;
        files += 1;
    }
    assert!(files >= 3, "{files} files unpacked");
}

/// An event as the fixture's JSON has it (its body's bytes as a string).
fn event_json(event: &StoredEvent) -> Value {
    let mut value = serde_json::to_value(event).unwrap();
    value["body"]["json"] = String::from_utf8(event.body.json.clone()).unwrap().into();
    value
}

/// The live objects of `index`: resource, cluster, namespace, name, RV,
/// member RV; sorted.
fn live(index: &Index) -> Value {
    let mut rows: Vec<Value> = index
        .resource_keys()
        .into_iter()
        .flat_map(|r| {
            index
                .range(&r, None, None)
                .map(|(k, e)| serde_json::json!([r, k.cluster, k.namespace, k.name, e.rv, e.member_rv()]))
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort_by_key(|row| row.to_string());
    Value::Array(rows)
}

/// The fixture's live objects, sorted as [`live`] sorts them.
fn expected_live(expected: &Value) -> Value {
    let mut rows = expected["live"].as_array().unwrap().clone();
    rows.sort_by_key(|row| row.to_string());
    Value::Array(rows)
}

/// Checks what `store` serves against the fixture's `expected`.
fn check_served(store: &Store, index: &Index, expected: &Value) {
    assert_eq!(live(index), expected_live(expected));
    let events: Vec<Value> = store.events_after(0).map(|e| event_json(&e.unwrap())).collect();
    assert_eq!(Value::Array(events), expected["events"]);
    for (key, entry) in index.range("v1/pods", None, None).chain(index.range("v1/configmaps", None, None)) {
        let suffix = format!("_{}", key.cluster);
        let body = store.body(entry.rv).unwrap().unwrap();
        let served: Value = serde_json::from_slice(&body.to_bytes(Some(&suffix), entry.rv)).unwrap();
        assert_eq!(served["metadata"]["name"], format!("{}{suffix}", key.name));
        assert_eq!(served["metadata"]["resourceVersion"], entry.rv.to_string());
        let mut chunk = ChunkBuf::default();
        assert!(store.write_served(entry.rv, Some(&suffix), &mut chunk).unwrap());
        assert_eq!(chunk.written(), &body.to_bytes(Some(&suffix), entry.rv)[..]);
    }
}

fn pod(name: &str, member_rv: u64) -> kubefold_engine::object::Ingested {
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let raw = format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{member_rv}"}}}}"#);
    ingest(&pods, "m1", raw.as_bytes()).unwrap()
}

#[test]
fn a_format5_data_dir_opens_with_the_same_objects_and_resource_versions() {
    let expected: Value = serde_json::from_slice(&std::fs::read(fixture("format5-expected.json")).unwrap()).unwrap();
    assert_eq!(expected["format"], "kubefold-store/5");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    unpack(&fixture("format5-data-dir.gz"), &dir);
    let head = expected["head_rv"].as_u64().unwrap();

    let store = Store::open(&dir, &Options::default()).unwrap();
    assert_eq!(store.meta("format").unwrap().as_deref(), Some(FORMAT.as_bytes()));
    assert_eq!(FORMAT, "kubefold-store/6");
    assert_eq!(store.head_rv().unwrap(), head);
    assert_eq!(store.meta("credentials/m2").unwrap().as_deref(), Some(&b"a stored value"[..]));
    let recovered = store.recover().unwrap();
    // The format-5 snapshot is not read: the log is replayed.
    assert_eq!(recovered.path, RecoveryPath::Replay { reason: "snapshot of an older store format".into() });
    assert_eq!(recovered.index.head_rv(), head);
    let checkpoints: Vec<Value> = recovered.checkpoints.iter().map(|((c, r), v)| serde_json::json!([c, r, v])).collect();
    assert_eq!(Value::Array(checkpoints), expected["checkpoints"]);
    check_served(&store, &recovered.index, &expected);

    // New events beside the old records; a snapshot of this format.
    let mut index = recovered.index;
    let key = ObjectKey { namespace: "default".into(), name: "web-01".into(), cluster: "m1".into() };
    let prev = index.get("v1/pods", &key).unwrap().rv;
    let changed = StoredEvent::new(head + 1, EventType::Modified, "v1/pods", "m1", prev, pod("web-01", 500));
    let added = StoredEvent::new(head + 2, EventType::Added, "v1/pods", "m1", 0, pod("web-99", 501));
    index.apply(&changed);
    index.apply(&added);
    index.set_head_rv(head + 2);
    store.commit(&Commit { events: vec![changed.clone(), added.clone()], checkpoints: vec![] }).unwrap();
    store.write_snapshot(&index).unwrap().unwrap();
    drop(store);

    let store = Store::open(&dir, &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.path, RecoveryPath::Snapshot { snapshot_rv: head + 2, replayed: 0 });
    let contents = |index: &Index| live(index);
    assert_eq!(contents(&recovered.index), contents(&index));
    assert_eq!(store.event(head + 1).unwrap().as_ref(), Some(&changed));
    assert_eq!(store.event(head + 2).unwrap().as_ref(), Some(&added));
    // Compaction to the head removes web-01's format-5 version only; the
    // rest of the old records stay readable.
    let stats = store.compact(head + 2, &index).unwrap();
    assert!(store.event(prev).unwrap().is_none());
    assert!(stats.removed >= 1, "{stats:?}");
    for (_, entry) in index.range("v1/pods", None, None) {
        assert!(store.body(entry.rv).unwrap().is_some(), "RV {}", entry.rv);
    }
    let mut replayed = Index::at(head + 2);
    for event in store.events_after(0) {
        replayed.apply(&event.unwrap());
    }
    assert_eq!(contents(&replayed), contents(&index));
}

/// A backup written by the format-5 build (`kubefold-backup/2`, its
/// checksum std's `DefaultHasher` of then) restores to the same store; a
/// damaged one is refused.
#[test]
fn a_format5_backup_restores_to_the_same_store() {
    let expected: Value = serde_json::from_slice(&std::fs::read(fixture("format5-expected.json")).unwrap()).unwrap();
    let backup = std::fs::read(fixture("format5-backup.kfb")).unwrap();
    assert!(backup.starts_with(b"kubefold-backup/2\n"));
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::restore(&tmp.path().join("a"), &mut &backup[..], &Options::default()).unwrap();
    assert_eq!(store.meta("format").unwrap().as_deref(), Some(FORMAT.as_bytes()));
    assert_eq!(store.head_rv().unwrap(), expected["head_rv"].as_u64().unwrap());
    assert_eq!(store.meta("credentials/m2").unwrap().as_deref(), Some(&b"a stored value"[..]));
    let recovered = store.recover().unwrap();
    let checkpoints: Vec<Value> = recovered.checkpoints.iter().map(|((c, r), v)| serde_json::json!([c, r, v])).collect();
    assert_eq!(Value::Array(checkpoints), expected["checkpoints"]);
    check_served(&store, &recovered.index, &expected);

    // A backup of it now: SHA-256, and it restores to the same again.
    let mut again = Vec::new();
    store.backup(&mut again).unwrap();
    let header = format!("kubefold-backup/4\nchecksum sha256\nmin-resource-version {}\n", store.backup_min_rv_now().unwrap());
    assert!(again.starts_with(header.as_bytes()));
    let estimate = store.backup_bytes().unwrap();
    assert!(estimate.abs_diff(again.len() as u64) <= 64, "estimated {estimate}, written {}", again.len());
    let restored = Store::restore(&tmp.path().join("b"), &mut &again[..], &Options::default()).unwrap();
    check_served(&restored, &restored.recover().unwrap().index, &expected);

    // One byte changed in either: a checksum mismatch.
    for (i, file) in [backup, again].into_iter().enumerate() {
        let mut damaged = file.clone();
        let at = damaged.len() / 2;
        damaged[at] ^= 0x01;
        let err = Store::restore(&tmp.path().join(format!("damaged-{i}")), &mut &damaged[..], &Options::default()).err().unwrap();
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
    }
}

/// A backup naming a checksum this build does not know is refused, naming it.
#[test]
fn a_backup_with_an_unknown_checksum_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("a"), &Options::default()).unwrap();
    let mut backup = Vec::new();
    store.backup(&mut backup).unwrap();
    let header = b"kubefold-backup/3\nchecksum sha256\n".len();
    let mut other = b"kubefold-backup/3\nchecksum blake9\n".to_vec();
    other.extend_from_slice(&backup[header..]);
    let err = Store::restore(&tmp.path().join("b"), &mut &other[..], &Options::default()).err().unwrap();
    assert!(err.to_string().contains("unknown checksum \"checksum blake9\""), "{err}");
    let err = Store::restore(&tmp.path().join("c"), &mut &b"kubefold-backup/9\n"[..], &Options::default()).err().unwrap();
    assert!(err.to_string().contains("not a kubefold backup of a format this build reads"), "{err}");
}
