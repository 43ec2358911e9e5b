//! `kubefold_store::decode_event` on arbitrary bytes (a damaged `e` record
//! of the event log): it never panics nor allocates more than the record
//! could hold (libFuzzer's `-malloc_limit_mb` catches that), an event it
//! accepts can be served (`ServedBody::to_bytes`, its metadata and its
//! Table row template do not panic), and it
//! re-encodes to bytes that decode to the same event. Written as a list
//! writes it (`write_served_event`: the record's head read by hand, the
//! body decompressed into a chunk's space) it never panics, leaves the
//! chunk as it was when refused, and gives the served bytes of the event.
#![no_main]

use kubefold_store::{decode_event, write_served_event, ChunkBuf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut chunk = ChunkBuf::default();
    chunk.extend_from_slice(&[b'x'; 300]);
    chunk.clear();
    chunk.push(b'[');
    let rv = data.first().map_or(0, |b| u64::from(*b) << 20);
    let written = write_served_event(data, rv, Some("_member1"), &mut chunk);
    if written.is_err() {
        assert_eq!(chunk.written(), b"[");
    }
    let Ok(event) = decode_event(data) else {
        return;
    };
    let served = event.body.to_bytes(Some("_member1"), rv);
    assert!(written.is_ok(), "a record that decodes is served");
    assert_eq!(&chunk.written()[1..], &served[..]);
    let mut out = Vec::new();
    event.body.write_metadata(&mut out, Some("_member1"), event.rv);
    if let Some(row) = &event.body.row {
        kubefold_engine::table::write_row_template(&row.template, "_member1", chrono::DateTime::UNIX_EPOCH, &mut out);
    }
    let bytes = kubefold_store::encode_event(&event).expect("a decoded event encodes");
    let again = decode_event(&bytes).expect("a re-encoded event decodes");
    assert_eq!(again, event);
});
