//! `kubefold_store::decode_event` on arbitrary bytes (a damaged `e` record
//! of the event log): it never panics nor allocates more than the record
//! could hold (libFuzzer's `-malloc_limit_mb` catches that), an event it
//! accepts can be served (`ServedBody::to_bytes`, its metadata and its
//! Table row template do not panic), and it
//! re-encodes to bytes that decode to the same event.
#![no_main]

use kubefold_store::decode_event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(event) = decode_event(data) else {
        return;
    };
    let _served = event.body.to_bytes(Some("_member1"), event.rv);
    let mut out = Vec::new();
    event.body.write_metadata(&mut out, Some("_member1"), event.rv);
    if let Some(row) = &event.body.row {
        kubefold_engine::table::write_row_template(&row.template, "_member1", chrono::DateTime::UNIX_EPOCH, &mut out);
    }
    let bytes = kubefold_store::encode_event(&event).expect("a decoded event encodes");
    let again = decode_event(&bytes).expect("a re-encoded event decodes");
    assert_eq!(again, event);
});
