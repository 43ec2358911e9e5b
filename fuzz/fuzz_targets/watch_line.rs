//! Reading JSON without serde_json (`check`) on arbitrary bytes: it never
//! panics and decides as serde_json does. `check` accepts exactly what
//! serde_json reads as a raw value; a watch line split by
//! `split_watch_line` or `split_canonical_watch_line`, its object checked,
//! is one serde_json reads, with the same type and object; an object
//! ingested unchecked (the walk checks it) is JSON, and ingests as checked.
#![no_main]

use kubefold_engine::check::{check, split_canonical_watch_line, split_watch_line};
use kubefold_engine::object::{ingest, ingest_unchecked};
use kubefold_engine::resources::builtin;
use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;

#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

fuzz_target!(|data: &[u8]| {
    let json = serde_json::from_slice::<&RawValue>(data).is_ok();
    assert_eq!(check(data), json, "{:?}", String::from_utf8_lossy(data));

    let read = serde_json::from_slice::<Line>(data).ok().map(|l| (l.event_type, l.object.get().as_bytes()));
    if let Some((event_type, object)) = split_watch_line(data).filter(|(_, o)| check(o.as_bytes())) {
        assert_eq!(read, Some((event_type, object.as_bytes())), "{:?}", String::from_utf8_lossy(data));
    }
    if let Some(split) = split_canonical_watch_line(data).filter(|(_, o)| check(o)) {
        assert_eq!(read, Some(split), "{:?}", String::from_utf8_lossy(data));
    }

    // The type by the input's length, as in `object_ingest`.
    let catalog = builtin();
    let resource = &catalog[data.len() % catalog.len()];
    let unchecked = ingest_unchecked(resource, "member-1", data);
    if json {
        match (&unchecked, &ingest(resource, "member-1", data)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (a, b) => assert_eq!(a.is_ok(), b.is_ok(), "{:?}", String::from_utf8_lossy(data)),
        }
    } else {
        assert!(unchecked.is_err(), "ingested what is not JSON: {:?}", String::from_utf8_lossy(data));
    }
});
