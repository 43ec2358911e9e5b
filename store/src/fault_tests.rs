//! Storage faults while running: injected write failures, and a real
//! filesystem that fills up and is then grown.

use kubefold_engine::event::Change;
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources;

use super::*;

/// A pod of about `pad` bytes of incompressible labels.
fn pod(name: &str, member_rv: u64, pad: usize) -> Change {
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let noise: String = (0..pad).map(|i| char::from(b'a' + ((random_u64(i as u64 ^ member_rv) % 26) as u8))).collect();
    let raw = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{member_rv}","annotations":{{"x":"{noise}"}}}}}}"#
    );
    Change::Upsert(ingest(&pods, "m1", raw.as_bytes()).unwrap())
}

/// Plans and commits a batch like the aggregator: the index moves only
/// when the commit succeeds.
fn try_commit(store: &Store, index: &mut Index, changes: Vec<Change>) -> Result<usize> {
    let mut working = index.clone();
    let mut events = Vec::new();
    for change in changes {
        let rv = working.head_rv() + 1;
        if let Some(e) = plan_change(&working, "v1/pods", "m1", change, rv) {
            working.apply(&e);
            events.push(e);
        }
    }
    let count = events.len();
    store.commit(&Commit { events, checkpoints: vec![("m1".into(), "v1/pods".into(), working.head_rv().to_string())] })?;
    *index = working;
    Ok(count)
}

fn batch(from: usize, n: usize, pad: usize) -> Vec<Change> {
    (from..from + n).map(|i| pod(&format!("p{i}"), i as u64 + 1, pad)).collect()
}

/// An injected failure puts the store in a fault named by its cause; the
/// failed commit leaves nothing behind; the next commit reopens sled and
/// succeeds, and the data dir holds exactly the committed events.
#[test]
fn injected_write_failures_are_named_and_heal() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let mut index = Index::at(0);
    try_commit(&store, &mut index, batch(0, 10, 100)).unwrap();
    for (k, (code, cause)) in [(28, Cause::NoSpace), (30, Cause::ReadOnly), (5, Cause::Io)].into_iter().enumerate() {
        let from = 10 + 5 * k;
        store.inject_fault(Some(Fault::Fail(code)));
        let e = try_commit(&store, &mut index, batch(from, 5, 100)).unwrap_err();
        assert_eq!(e.cause(), cause, "{e}");
        let (found, message) = store.fault().expect("the store names its fault");
        assert_eq!(found, cause);
        assert!(message.contains(&std::io::Error::from_raw_os_error(code).to_string()), "{message}");
        // Reads go on.
        assert_eq!(store.event(10).unwrap().unwrap().key.name, "p9");
        assert_eq!(store.head_rv().unwrap(), index.head_rv());
        store.inject_fault(None);
        // The next commit reopens sled first.
        try_commit(&store, &mut index, batch(from, 5, 100)).unwrap();
        assert!(store.fault().is_none(), "a successful commit ends the fault");
    }
    assert_eq!(index.head_rv(), 25);
    drop(store);
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), 25);
    assert_eq!(recovered.index.len("v1/pods"), 25);
}

/// Mounts a tmpfs of `size` on `dir`; `false` (with a message) when this
/// process may not.
pub(crate) fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status();
    let mounted = status.is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs on {} (needs root)", dir.display());
    }
    mounted
}

/// Unmounts `dir` when dropped.
pub(crate) struct Unmount(pub(crate) PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A real full disk: sled fails its write ("hit error while writing
/// iobuf") and would fail every later one; once the filesystem is grown
/// the store reopens sled and commits again, with no restart, and the
/// resourceVersion goes on from where the committed events ended.
#[test]
fn a_full_filesystem_heals_once_grown() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    if !mount_tmpfs(&dir, "12m") {
        return;
    }
    let _unmount = Unmount(dir.clone());
    let store = Store::open(&dir, &Options::default()).unwrap();
    let mut index = Index::at(0);
    let mut next = 0;
    let failed = loop {
        match try_commit(&store, &mut index, batch(next, 500, 300)) {
            Ok(_) => next += 500,
            Err(e) => break e,
        }
        assert!(next < 100_000, "12 MB never filled");
    };
    assert_eq!(failed.cause(), Cause::NoSpace, "{failed}");
    assert_eq!(store.fault().map(|(cause, _)| cause), Some(Cause::NoSpace));
    let committed = index.head_rv();
    assert!(committed > 0);
    // Reads of what was committed go on.
    assert_eq!(store.event(committed).unwrap().unwrap().rv, committed);
    // Still full: commits keep failing, and say why.
    let again = try_commit(&store, &mut index, batch(next, 500, 300)).unwrap_err();
    assert_eq!(again.cause(), Cause::NoSpace, "{again}");
    // A little room, filled by small commits: the record log's appends
    // fit, sled's flushes (whole pages) are the ones that fail.
    let remount = |size: &str| {
        let status = std::process::Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&dir).status().unwrap();
        assert!(status.success());
    };
    remount("12400k");
    let mut small = 0;
    let sled_failed = loop {
        match try_commit(&store, &mut index, batch(next, 1, 10)) {
            Ok(_) => next += 1,
            Err(e) => break e,
        }
        small += 1;
        assert!(small < 100_000, "400 KB never filled");
    };
    eprintln!("small commits: {small}; failed with: {sled_failed}");
    assert_eq!(sled_failed.cause(), Cause::NoSpace, "{sled_failed}");
    let committed = index.head_rv();
    assert_eq!(store.event(committed).unwrap().unwrap().rv, committed);
    remount("300m");
    try_commit(&store, &mut index, batch(next, 500, 300)).expect("commits succeed once there is space");
    assert!(store.fault().is_none());
    assert_eq!(index.head_rv(), committed + 500, "the RVs go on after the last committed one");
    drop(store);
    let store = Store::open(&dir, &Options::default()).unwrap();
    assert_eq!(store.recover().unwrap().index.head_rv(), committed + 500);
}

/// A data dir started empty on purpose with a minimum resourceVersion: the
/// next events come after it, and it survives a restart.
#[test]
fn a_minimum_resource_version_raises_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    assert!(store.raise_head(5_000).unwrap());
    assert!(!store.raise_head(10).unwrap(), "never lowered");
    let recovered = store.recover().unwrap();
    assert_eq!((recovered.index.head_rv(), recovered.compacted_rv), (5_000, 5_000));
    let mut index = recovered.index;
    try_commit(&store, &mut index, batch(0, 3, 10)).unwrap();
    assert_eq!(index.head_rv(), 5_003);
    drop(store);
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), 5_003);
    assert_eq!(recovered.compacted_rv, 5_000, "RVs from before answer 410");
    assert!(!store.raise_head(5_003).unwrap());
}
