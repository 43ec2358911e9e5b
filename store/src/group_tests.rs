//! Group commit: commits staged together are committed by one
//! `commit_group`, none of them before it, and a crash before it loses
//! the whole group and leaves a store that opens as it was.

use kubefold_engine::event::Change;
use kubefold_engine::index::{plan_change, Index};
use kubefold_engine::object::ingest;
use kubefold_engine::resources;

use super::*;

fn pod_change(cluster: &str, name: &str, member_rv: u64) -> Change {
    let pods = resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone();
    let raw = format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{member_rv}"}}}}"#);
    Change::Upsert(ingest(&pods, cluster, raw.as_bytes()).unwrap())
}

/// One member's batch as the aggregator makes it: events numbered after
/// `index`'s head (applied to it) and the member's checkpoint.
fn member_commit(index: &mut Index, cluster: &str, names: &[&str], checkpoint: &str) -> Commit {
    let mut events = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let rv = index.head_rv() + 1;
        let event = plan_change(index, "v1/pods", cluster, pod_change(cluster, name, i as u64 + 1), rv).unwrap();
        index.apply(&event);
        events.push(event);
    }
    Commit { events, checkpoints: vec![(cluster.to_string(), "v1/pods".to_string(), checkpoint.to_string())] }
}

fn checkpoints(store: &Store) -> Vec<(String, String)> {
    store.recover().unwrap().checkpoints.into_iter().map(|((cluster, _), rv)| (cluster, rv)).collect()
}

#[test]
fn staged_commits_are_committed_together_and_a_crash_before_loses_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let mut index = Index::at(0);
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        let mut group = Group::default();
        store.stage(&mut group, &member_commit(&mut index, "m1", &["a", "b"], "10")).unwrap();
        store.stage(&mut group, &member_commit(&mut index, "m2", &["c"], "20")).unwrap();
        assert_eq!((group.commits(), group.events()), (2, 3));
        // Staged bodies read back (later commits of the group may need
        // them), but none of the group is in the log's tree yet.
        assert_eq!(store.event(3).unwrap().map(|e| e.key.name), Some("c".to_string()));
        assert_eq!(store.head_rv().unwrap(), 0);
        assert_eq!(store.events_after(0).count(), 0);
        // A crash here: the group is never committed.
    }
    {
        let store = Store::open(dir.path(), &opts).unwrap();
        let recovered = store.recover().expect("a store whose last group was cut off opens");
        assert_eq!(recovered.index.head_rv(), 0);
        assert_eq!(recovered.index.total(), 0);
        assert!(recovered.checkpoints.is_empty(), "no checkpoint of the lost group");

        // The same batches again, committed this time.
        let mut index = Index::at(0);
        let mut group = Group::default();
        store.stage(&mut group, &member_commit(&mut index, "m1", &["a", "b"], "10")).unwrap();
        store.stage(&mut group, &member_commit(&mut index, "m2", &["c"], "20")).unwrap();
        store.commit_group(group).unwrap();
        assert_eq!(store.head_rv().unwrap(), 3);
        // A second group after it.
        let mut group = Group::default();
        store.stage(&mut group, &member_commit(&mut index, "m3", &["d"], "30")).unwrap();
        store.commit_group(group).unwrap();
    }
    let store = Store::open(dir.path(), &opts).unwrap();
    let recovered = store.recover().unwrap();
    assert_eq!(recovered.index.head_rv(), 4);
    let names: Vec<String> = recovered.index.range("v1/pods", None, None).map(|(k, _)| format!("{}/{}", k.cluster, k.name)).collect();
    assert_eq!(names, ["m1/a", "m1/b", "m2/c", "m3/d"]);
    assert_eq!(checkpoints(&store), [("m1".to_string(), "10".to_string()), ("m2".to_string(), "20".to_string()), ("m3".to_string(), "30".to_string())]);
    let rvs: Vec<u64> = store.events_after(0).map(|e| e.unwrap().rv).collect();
    assert_eq!(rvs, [1, 2, 3, 4]);
}

/// A batch staged while the disk is full fails at once; nothing of its
/// group is committed before the group's end; once the fault is over the
/// same resourceVersions are committed again and the fault is forgotten.
#[test]
fn a_batch_staged_in_a_storage_fault_fails_and_the_group_commits_nothing_before_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let store = Store::open(dir.path(), &opts).unwrap();
    let mut index = Index::at(0);
    let mut group = Group::default();
    store.stage(&mut group, &member_commit(&mut index, "m1", &["a"], "10")).unwrap();
    store.commit_group(group).unwrap();
    let before = index.clone();
    let mut group = Group::default();
    store.stage(&mut group, &member_commit(&mut index, "m1", &["b"], "11")).unwrap();
    store.inject_fault(Some(Fault::Fail(28)));
    // A commit staged while the disk is full fails at once.
    assert!(store.stage(&mut group, &member_commit(&mut index.clone(), "m2", &["c"], "20")).is_err());
    store.inject_fault(None);
    assert_eq!(store.head_rv().unwrap(), 1, "nothing of the group before its commit");
    assert!(store.fault().is_some());
    drop(group);
    // The group is dropped (the aggregator fails its batches); the same
    // resourceVersions are committed again.
    let mut index = before;
    let mut group = Group::default();
    store.stage(&mut group, &member_commit(&mut index, "m2", &["c"], "20")).unwrap();
    store.commit_group(group).unwrap();
    assert!(store.fault().is_none(), "the fault is over once a group is committed");
    assert_eq!(store.head_rv().unwrap(), 2);
    assert_eq!(store.event(2).unwrap().map(|e| e.key.name), Some("c".to_string()));
}
