//! [`crate::ReadCache`]: the batches of a list of many members, read
//! through it, are served exactly as record by record, with a read per
//! window rather than one per record, also when its spans are let go and
//! their buffers read into again.

use super::*;

/// A store of `count` pods committed in order (names `p00000` on), in log
/// segments of `segment_bytes`, and the RVs of their events.
fn pods_in_order(count: u64, segment_bytes: u64) -> (tempfile::TempDir, Store, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { log_segment_bytes: segment_bytes, ..Options::default() };
    let store = Store::open(dir.path(), &opts).unwrap();
    let mut index = Index::at(0);
    let events = commit_changes(&store, &mut index, (0..count).map(|i| pod_change(&format!("p{i:05}"), i + 1, false)).collect());
    let rvs = events.iter().map(|e| e.rv).collect();
    (dir, store, rvs)
}

/// 2,000 objects committed in order, ten places of 200 in the log (more
/// than the read-ahead gap apart); 20 batches that take one object from
/// each place, each batch the next object of every place (a list over ten
/// members reads its records so). Through a cache, every object is served
/// as it is read alone, and each place costs a read or two (its window),
/// not one per object: at most 20 reads where the batches read alone take
/// 200.
#[test]
fn batches_over_many_places_read_through_a_cache_serve_the_same_objects_with_few_reads() {
    let (_dir, store, rvs) = pods_in_order(2000, 8 << 20);
    let mut cache = ReadCache::default();
    let mut alone_reads = 0;
    for k in 0..20 {
        let batch: Vec<u64> = (0..10).map(|place| rvs[place * 200 + k]).collect();
        let cached = store.read_ahead_cached(batch.iter().copied(), &mut cache).unwrap();
        let alone = store.read_ahead(batch.iter().copied()).unwrap();
        alone_reads += alone.spans.len();
        for rv in &batch {
            let (mut one, mut through) = (ChunkBuf::default(), ChunkBuf::default());
            assert!(store.write_served(*rv, Some("_m1"), &mut one).unwrap());
            assert!(store.write_served_from(&cached, *rv, Some("_m1"), &mut through).unwrap());
            assert_eq!(one.written(), through.written(), "object version {rv}");
            assert_eq!(store.body_from(&cached, *rv).unwrap(), store.body(*rv).unwrap());
        }
    }
    assert_eq!(alone_reads, 200, "read alone, each batch reads its ten places apart");
    assert!(cache.reads <= 20, "{} reads through the cache", cache.reads);
}

/// A sparse list through a cache (a selector matching one object in a
/// hundred: each next object lies past the window): after its trial the
/// cache reads the records' own bytes, not a window each, and serves the
/// same objects. Windows for all 100 reads would be 1.6 MB.
#[test]
fn a_sparse_list_through_a_cache_stops_reading_windows_that_serve_nothing() {
    let (_dir, store, rvs) = pods_in_order(10_000, 64 << 20);
    let mut cache = ReadCache::default();
    let mut served = 0;
    for k in 0..10 {
        let batch: Vec<u64> = (0..10).map(|i| rvs[(k * 10 + i) * 100]).collect();
        let cached = store.read_ahead_cached(batch.iter().copied(), &mut cache).unwrap();
        for rv in &batch {
            served += usize::from(store.body_from(&cached, *rv).unwrap().is_some());
            let (mut one, mut through) = (ChunkBuf::default(), ChunkBuf::default());
            assert!(store.write_served(*rv, Some("_m1"), &mut one).unwrap());
            assert!(store.write_served_from(&cached, *rv, Some("_m1"), &mut through).unwrap());
            assert_eq!(one.written(), through.written(), "object version {rv}");
        }
    }
    assert_eq!(served, 100, "every object served");
    assert_eq!(cache.reads, 100, "one read per object: none lies in another's window");
    let windows = 100 * crate::serve::READ_CACHE_WINDOW as usize;
    assert!(cache.bytes_read < windows / 2, "{} bytes read through the cache (windows for each: {windows})", cache.bytes_read);
}

/// A cache that keeps about two windows over batches of ten places (the
/// batches of [`batches_over_many_places_read_through_a_cache_serve_the_same_objects_with_few_reads`]):
/// it lets spans go at every batch and reads the next spans into their
/// buffers, which hold the bytes of other records until read into; every
/// object is still served as it is read alone (a buffer read into short,
/// or with stale bytes, fails the record's checksum or differs).
#[test]
fn spans_read_into_the_buffers_of_spans_let_go_serve_the_same_objects() {
    let (_dir, store, rvs) = pods_in_order(2000, 8 << 20);
    let mut cache = ReadCache::with_limit(2 * crate::serve::READ_CACHE_WINDOW as usize);
    for k in 0..20 {
        let batch: Vec<u64> = (0..10).map(|place| rvs[place * 200 + k]).collect();
        let cached = store.read_ahead_cached(batch.iter().copied(), &mut cache).unwrap();
        for rv in &batch {
            let (mut one, mut through) = (ChunkBuf::default(), ChunkBuf::default());
            assert!(store.write_served(*rv, Some("_m1"), &mut one).unwrap());
            assert!(store.write_served_from(&cached, *rv, Some("_m1"), &mut through).unwrap());
            assert_eq!(one.written(), through.written(), "object version {rv}");
        }
    }
    // Spans let go while their own batch holds them are not read into again.
    assert!(cache.reused * 2 >= cache.reads, "{} of {} reads made into the buffers of spans let go", cache.reused, cache.reads);
}
