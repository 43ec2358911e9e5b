//! The key layout of sled's tree (`e` events, `c` checkpoints, `m`
//! metadata) and what an event key's value holds ([`Located`]).

use super::*;

pub(crate) const EVENT: u8 = b'e';
/// Index entries of [`FORMAT_2`] (removed on open).
pub(crate) const FORMAT_2_INDEX: u8 = b'i';
pub(crate) const CHECKPOINT: u8 = b'c';
pub(crate) const META: u8 = b'm';

/// Meta key prefix of the compression dictionaries.
pub(crate) const DICT_PREFIX: &str = "dict/";

pub(crate) fn event_key(rv: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = EVENT;
    k[1..].copy_from_slice(&rv.to_be_bytes());
    k
}

/// One event as sled holds it: where its record is in the record log, or
/// (format 3) the record itself.
#[derive(Debug, Clone)]
pub(crate) enum Located {
    Logged(log::Pointer),
    Inline(sled::IVec),
}

/// The events of an `e` key and its value, in RV order.
pub(crate) fn located(key: &[u8], value: sled::IVec) -> Result<Vec<(u64, Located)>> {
    let rv = read_u64(key.get(1..).unwrap_or_default(), "event key")?;
    match log::decode_entries(rv, &value).map_err(|what| Error::Corrupt { what: format!("event {rv}: {what}") })? {
        None => Ok(vec![(rv, Located::Inline(value))]),
        Some(events) => Ok(events.into_iter().map(|(rv, pointer)| (rv, Located::Logged(pointer))).collect()),
    }
}

/// The value to keep under `key` for `events` (what is left of its
/// events, in RV order): `None` when none is left, the record itself for
/// a format 3 record, else the group of their pointers.
pub(crate) fn left_value(key: &[u8], events: Vec<(u64, Located)>) -> Result<Option<sled::IVec>> {
    let key_rv = read_u64(key.get(1..).unwrap_or_default(), "event key")?;
    let mut logged = Vec::with_capacity(events.len());
    for (rv, located) in events {
        match located {
            Located::Logged(pointer) => logged.push((rv, pointer)),
            // Only ever alone under its own key.
            Located::Inline(value) => return Ok(Some(value)),
        }
    }
    Ok((!logged.is_empty()).then(|| log::encode_group(key_rv, &logged).into()))
}

pub(crate) fn checkpoint_key(cluster: &str, resource: &str) -> Vec<u8> {
    let mut k = vec![CHECKPOINT];
    k.extend_from_slice(cluster.as_bytes());
    k.push(0);
    k.extend_from_slice(resource.as_bytes());
    k
}

pub(crate) fn meta_key(name: &str) -> Vec<u8> {
    let mut k = vec![META];
    k.extend_from_slice(name.as_bytes());
    k
}

pub(crate) fn read_u64(bytes: &[u8], what: &str) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Corrupt { what: what.to_string() })?;
    Ok(u64::from_be_bytes(arr))
}
