//! Writes the format-5 fixtures under `tests/data/` (run by hand, with the
//! build that writes format 5: `FIXTURE_OUT=store/tests/data cargo test -p
//! kubefold-store --test make_fixtures -- --ignored`).

use std::io::Write;
use std::path::Path;

use kubefold_engine::event::{EventType, StoredEvent};
use kubefold_engine::index::Index;
use kubefold_engine::object::ingest;
use kubefold_engine::resources;
use kubefold_store::{Commit, Store};

fn pod(name: &str, ns: &str, member_rv: u64, app: &str, pad: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","uid":"uid-{name}","resourceVersion":"{member_rv}","labels":{{"app":"{app}","tier":"ünïcode"}},"annotations":{{"note":"{}"}}}},"spec":{{"nodeName":"node-{member_rv}","containers":[{{"name":"c","image":"nginx:1.25"}}]}},"status":{{"phase":"Running","podIP":"10.0.0.{member_rv}"}}}}"#,
        "x".repeat(pad)
    )
}

fn config_map(name: &str, member_rv: u64) -> String {
    format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"kube-system","resourceVersion":"{member_rv}"}},"data":{{"k":"v"}}}}"#)
}

/// Commits `changes` (resource, cluster, raw object, deleted) with the RVs
/// after the index's head, applying them to `index`.
fn commit(store: &Store, index: &mut Index, changes: Vec<(&str, &str, String, bool)>, checkpoint: (&str, &str, &str)) {
    let all = resources::builtin();
    let mut events = Vec::new();
    for (resource, cluster, raw, deleted) in changes {
        let (group_version, plural) = resource.rsplit_once('/').unwrap();
        let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
        let rt = resources::find(&all, group, version, plural).unwrap().clone();
        let ingested = ingest(&rt, cluster, raw.as_bytes()).unwrap();
        let rv = index.head_rv() + 1;
        let key = kubefold_engine::event::ObjectKey { namespace: ingested.namespace.clone(), name: ingested.name.clone(), cluster: cluster.to_string() };
        let prev = index.get(resource, &key).map_or(0, |e| e.rv);
        let event_type = match (deleted, prev) {
            (true, _) => EventType::Deleted,
            (false, 0) => EventType::Added,
            (false, _) => EventType::Modified,
        };
        let mut event = StoredEvent::new(rv, event_type, resource, cluster, prev, ingested);
        event.time_ms = 1_700_000_000_000 + rv;
        index.apply(&event);
        events.push(event);
    }
    let checkpoints = vec![(checkpoint.0.to_string(), checkpoint.1.to_string(), checkpoint.2.to_string())];
    store.commit(&Commit { events, checkpoints }).unwrap();
}

/// An event as JSON, its body's bytes as a string.
fn event_json(event: &StoredEvent) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap();
    value["body"]["json"] = String::from_utf8(event.body.json.clone()).unwrap().into();
    value
}

/// Packs the files under `dir` into `out`: for each file, sorted by path,
/// its path's length (u32, big-endian), the path, its length (u64,
/// big-endian) and its bytes; the whole gzip-compressed.
fn pack(dir: &Path, out: &Path) {
    fn walk(root: &Path, dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, files);
            } else {
                files.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(out).unwrap(), flate2::Compression::best());
    for file in files {
        let name = file.to_str().unwrap().as_bytes();
        let bytes = std::fs::read(dir.join(&file)).unwrap();
        gz.write_all(&(name.len() as u32).to_be_bytes()).unwrap();
        gz.write_all(name).unwrap();
        gz.write_all(&(bytes.len() as u64).to_be_bytes()).unwrap();
        gz.write_all(&bytes).unwrap();
    }
    gz.finish().unwrap();
}

#[test]
#[ignore = "writes the fixtures; run by hand with the build whose format they hold"]
fn make_format5_fixtures() {
    let out = std::path::PathBuf::from(std::env::var("FIXTURE_OUT").expect("FIXTURE_OUT names the fixture directory"));
    std::fs::create_dir_all(&out).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = Store::open(&data, &kubefold_store::Options::default()).unwrap();
    assert_eq!(kubefold_store::FORMAT, "kubefold-store/5");
    let mut index = Index::at(0);
    // Enough pods in one batch for the type's compression dictionary.
    let pods: Vec<_> = (0..40).map(|i| ("v1/pods", "m1", pod(&format!("web-{i:02}"), "default", 100 + i, &format!("app-{}", i % 3), 64), false)).collect();
    commit(&store, &mut index, pods, ("m1", "v1/pods", "139"));
    // Small bodies, stored as they are or plain LZ4.
    let maps: Vec<_> = (0..3).map(|i| ("v1/configmaps", "m2", config_map(&format!("cm-{i}"), 10 + i), false)).collect();
    commit(&store, &mut index, maps, ("m2", "v1/configmaps", "12"));
    store.write_snapshot(&index).unwrap().unwrap();
    // After the snapshot: a change, a delete, a new object in another
    // cluster, a large body.
    commit(
        &store,
        &mut index,
        vec![
            ("v1/pods", "m1", pod("web-05", "default", 200, "app-changed", 64), false),
            ("v1/pods", "m1", pod("web-07", "default", 201, "app-1", 64), true),
            ("v1/pods", "m2", pod("api-0", "prod", 7, "api", 20_000), false),
        ],
        ("m1", "v1/pods", "201"),
    );
    store.put_meta("credentials/m2", b"a stored value").unwrap();
    let mut backup = Vec::new();
    store.backup(&mut backup).unwrap();
    std::fs::write(out.join("format5-backup.kfb"), &backup).unwrap();
    let events: Vec<StoredEvent> = store.events_after(0).map(|e| e.unwrap()).collect();
    let recovered = store.recover().unwrap();
    let live: Vec<(String, String, String, String, u64, String)> = recovered
        .index
        .resource_keys()
        .into_iter()
        .flat_map(|r| recovered.index.range(&r, None, None).map(move |(k, e)| (r.clone(), k.cluster.clone(), k.namespace.clone(), k.name.clone(), e.rv, e.member_rv().to_string())).collect::<Vec<_>>())
        .collect();
    let expected = serde_json::json!({
        "format": kubefold_store::FORMAT,
        "head_rv": store.head_rv().unwrap(),
        "checkpoints": recovered.checkpoints.iter().map(|((c, r), v)| (c, r, v)).collect::<Vec<_>>(),
        "live": live,
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("format5-expected.json"), serde_json::to_vec(&expected).unwrap()).unwrap();
    drop(recovered);
    drop(store);
    // Let sled release the data dir before it is read.
    std::thread::sleep(std::time::Duration::from_millis(500));
    pack(&data, &out.join("format5-data-dir.gz"));
    // Records whose heads take every width of the old layout's varints
    // (1, 3, 5 and 9 bytes) in RVs, string lengths and pair counts: each
    // record's length (u32, big-endian) and bytes.
    let mut records = Vec::new();
    for (i, &n) in OLD_WIDTHS.iter().enumerate() {
        let record = kubefold_store::encode_event(&width_event(i)).unwrap();
        records.extend_from_slice(&(record.len() as u32).to_be_bytes());
        records.extend_from_slice(&record);
        assert!(n == width_event(i).rv);
    }
    std::fs::write(out.join("format5-records.bin"), records).unwrap();
}

/// Numbers at every width of the old layout's varints.
const OLD_WIDTHS: [u64; 10] = [0, 1, 250, 251, 255, 65_535, 65_536, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX];

/// The `i`th event of `format5-records.bin`: RV `OLD_WIDTHS[i]`, previous
/// RV and time from the others, `[0, 1, 250, 251, 300][i % 5]` labels
/// `k{k}` = `"v"` repeated `k % 7` times, the fields the labels reversed,
/// a uid of `[0, 250, 251, 65_536, 0, 250, 251, 0, 1, 0][i]` `u`s, a
/// small body.
fn width_event(i: usize) -> StoredEvent {
    let n = OLD_WIDTHS[i];
    let labels: Vec<(String, String)> = (0..[0, 1, 250, 251, 300][i % 5]).map(|k| (format!("k{k}"), "v".repeat(k % 7))).collect();
    StoredEvent {
        rv: n,
        event_type: [EventType::Added, EventType::Modified, EventType::Deleted][i % 3],
        resource: "v1/pods".into(),
        key: kubefold_engine::event::ObjectKey { namespace: "ns".into(), name: format!("p{i}"), cluster: "m1".into() },
        prev_rv: OLD_WIDTHS[(i + 3) % OLD_WIDTHS.len()],
        member_rv: format!("{}", 1000 + i),
        uid: "u".repeat([0, 250, 251, 65_536, 0, 250, 251, 0, 1, 0][i]),
        fields: labels.iter().rev().cloned().collect(),
        labels,
        body: kubefold_engine::object::ServedBody {
            json: format!(r#"{{"metadata":{{"name":"p{i}","resourceVersion":""}}}}"#).into_bytes(),
            name_end: 21 + format!("p{i}").len() as u32,
            rv_at: 42 + format!("p{i}").len() as u32,
            row: None,
        },
        time_ms: n ^ 1,
    }
}
