//! Turning a member's object into the form kubefold serves, and back.
//!
//! An object is transformed once, when it is ingested: the `kubefold.io/`
//! annotations are added and the result is serialised to bytes with two holes
//! left open, one after `metadata.name` (where `_<cluster>` goes for qualified
//! names) and one inside `metadata.resourceVersion` (where the global RV goes,
//! known only when the aggregator numbers the event). Serving an object is then
//! a splice of byte slices, with no JSON parsing on the read path.
//!
//! - this module: the served form ([`Ingested`], [`ServedBody`]), its holes,
//!   and the way back to a member ([`to_member`]);
//! - `ingest`: reading a member's object once ([`ingest`] and its variants);
//! - `write`: writing the served body's `metadata` and compact text.

mod ingest;
mod write;

use serde_json::Value;
use thiserror::Error;


pub use ingest::{ingest, ingest_checked, ingest_read, ingest_unchecked};

/// Annotation naming the member cluster that owns an object.
pub const CLUSTER_ANNOTATION: &str = "kubefold.io/cluster";
/// Annotation holding the member's own resourceVersion of the object.
pub const MEMBER_RV_ANNOTATION: &str = "kubefold.io/member-resource-version";
/// Prefix of every annotation kubefold owns; stripped from bodies forwarded to members.
pub const KUBEFOLD_ANNOTATION_PREFIX: &str = "kubefold.io/";


/// Errors of ingesting a member's object.
#[derive(Debug, Error)]
pub enum Error {
    /// The bytes are not a JSON object.
    #[error("object is not valid JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),
    /// The object has no `metadata.name`.
    #[error("object has no metadata.name")]
    MissingName,
    /// The object is larger than kubefold accepts.
    #[error("object is {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size of the object.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Largest object accepted from a member: etcd's default request limit
/// (1.5 MiB) plus room for kubefold's annotations.
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2 + 4096;

/// An object of a member, transformed for serving, not yet numbered.
#[derive(Debug, Clone, PartialEq)]
pub struct Ingested {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// The member's name of the object.
    pub name: String,
    /// The member's resourceVersion of the object.
    pub member_rv: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// The type's selectable fields (see [`crate::fields`]).
    pub fields: Vec<(String, String)>,
    /// The served body with its holes; see [`ServedBody`].
    pub body: ServedBody,
}

/// Served JSON bytes with the two holes (name suffix, resourceVersion).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServedBody {
    /// The JSON, holes closed (nothing between the name and its quote, nothing
    /// between the resourceVersion's quotes).
    pub json: Vec<u8>,
    /// Byte offset right after the name's last character.
    pub name_end: u32,
    /// Byte offset between the resourceVersion's quotes.
    pub rv_at: u32,
    /// The object's Table row, computed when it was ingested (`None` for
    /// types whose rows are printed from the body each time).
    pub row: Option<TableRow>,
}

/// What a Table row of an object needs, kept with its body so that a Table
/// is printed without parsing objects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableRow {
    /// The row's cells and conditions ([`crate::table::row_template`]).
    pub template: Vec<u8>,
    /// Where the body's `metadata` starts.
    pub metadata_start: u32,
    /// Where the body's `metadata` ends (exclusive).
    pub metadata_end: u32,
}

impl ServedBody {
    /// Writes the object as served: `name_suffix` (e.g. `_member1`) after the
    /// name, `rv` as its resourceVersion.
    pub fn write(&self, out: &mut Vec<u8>, name_suffix: Option<&str>, rv: u64) {
        let json = &self.json[..];
        let (name_end, rv_at) = (self.name_end as usize, self.rv_at as usize);
        let mut rv_buf = itoa_u64(rv);
        let rv_bytes = rv_buf.as_bytes_mut();
        let suffix = name_suffix.unwrap_or("").as_bytes();
        out.reserve(json.len() + suffix.len() + rv_bytes.len());
        if name_end <= rv_at {
            out.extend_from_slice(&json[..name_end]);
            out.extend_from_slice(suffix);
            out.extend_from_slice(&json[name_end..rv_at]);
            out.extend_from_slice(rv_bytes);
            out.extend_from_slice(&json[rv_at..]);
        } else {
            out.extend_from_slice(&json[..rv_at]);
            out.extend_from_slice(rv_bytes);
            out.extend_from_slice(&json[rv_at..name_end]);
            out.extend_from_slice(suffix);
            out.extend_from_slice(&json[name_end..]);
        }
    }

    /// Writes the object's `metadata` as served (see [`ServedBody::write`]);
    /// false, having written nothing, when the body has no [`TableRow`] or
    /// its bounds are not within the body.
    pub fn write_metadata(&self, out: &mut Vec<u8>, name_suffix: Option<&str>, rv: u64) -> bool {
        let Some(row) = &self.row else { return false };
        let (start, end) = (row.metadata_start as usize, row.metadata_end as usize);
        if start > end || end > self.json.len() {
            return false;
        }
        let mut rv_buf = itoa_u64(rv);
        let mut holes = [(self.name_end as usize, name_suffix.unwrap_or("").as_bytes()), (self.rv_at as usize, rv_buf.as_bytes_mut())];
        holes.sort_by_key(|(at, _)| *at);
        let mut copied = start;
        for (at, text) in holes {
            if at < start || at > end {
                continue;
            }
            out.extend_from_slice(&self.json[copied..at]);
            out.extend_from_slice(text);
            copied = at;
        }
        out.extend_from_slice(&self.json[copied..end]);
        true
    }

    /// The object as served, as bytes.
    pub fn to_bytes(&self, name_suffix: Option<&str>, rv: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.json.len() + 32);
        self.write(&mut out, name_suffix, rv);
        out
    }
}

/// Bytes [`open_holes`] needs before a body: the suffix and the RV's digits.
pub fn hole_bytes(name_suffix: Option<&str>, rv: u64) -> usize {
    name_suffix.map_or(0, str::len) + itoa_u64(rv).as_bytes_mut().len()
}

/// Serves a body decompressed in place: `out[at..]` holds
/// [`hole_bytes`] bytes of room, then the body's JSON with its holes closed
/// (as [`ServedBody::json`]); afterwards `out[at..]` is the object as
/// [`ServedBody::write`] writes it. Only the JSON before the later hole
/// moves (the start of `metadata`), not the whole body. Holes beyond the
/// JSON are treated as at its end.
pub fn open_holes(out: &mut [u8], at: usize, name_end: u32, rv_at: u32, name_suffix: Option<&str>, rv: u64) {
    let mut rv_buf = itoa_u64(rv);
    let rv_bytes = rv_buf.as_bytes_mut();
    let suffix = name_suffix.unwrap_or("").as_bytes();
    let gap = suffix.len() + rv_bytes.len();
    if out.len() < at + gap {
        return;
    }
    let len = out.len() - (at + gap);
    let (name_end, rv_at) = ((name_end as usize).min(len), (rv_at as usize).min(len));
    let (first, first_text, second, second_text) =
        if name_end <= rv_at { (name_end, suffix, rv_at, rv_bytes) } else { (rv_at, rv_bytes, name_end, suffix) };
    let json = at + gap;
    // JSON before the first hole, the first hole's text, JSON up to the
    // second hole, its text; the rest is where it belongs already.
    out.copy_within(json..json + first, at);
    out[at + first..at + first + first_text.len()].copy_from_slice(first_text);
    let moved = at + first + first_text.len();
    out.copy_within(json + first..json + second, moved);
    let second_at = moved + (second - first);
    out[second_at..second_at + second_text.len()].copy_from_slice(second_text);
}

struct RvDigits {
    buf: [u8; 20],
    start: usize,
}

impl RvDigits {
    fn as_bytes_mut(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_u64(mut n: u64) -> RvDigits {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    RvDigits { buf, start: i }
}

/// Prepares a client's object for its member: the name unqualified, the
/// `kubefold.io/` annotations removed (and `annotations` dropped when that
/// empties it), `metadata.resourceVersion` set to `member_rv` (or removed when
/// `None`).
pub fn to_member(object: &mut Value, member_name: &str, member_rv: Option<&str>) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    meta.insert("name".into(), Value::String(member_name.to_string()));
    match member_rv {
        Some(rv) => {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        None => {
            meta.remove("resourceVersion");
        }
    }
    let empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
        Some(a) => {
            a.retain(|k, _| !k.starts_with(KUBEFOLD_ANNOTATION_PREFIX));
            a.is_empty()
        }
        None => false,
    };
    if empty {
        meta.remove("annotations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{self, ResourceType};

    fn pods() -> ResourceType {
        resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone()
    }

    #[test]
    fn holes_opened_in_place_give_what_write_gives() {
        let json: Vec<u8> = (0..200u8).map(|i| b'a' + i % 26).collect();
        for (name_end, rv_at) in [(0, 0), (10, 40), (40, 10), (7, 7), (0, 200), (200, 0), (199, 200), (150, 250)] {
            for suffix in [None, Some(""), Some("_member1")] {
                for rv in [0, 7, 1234567, u64::MAX] {
                    let body = ServedBody { json: json.clone(), name_end, rv_at, row: None };
                    let mut expected = b"prefix".to_vec();
                    if name_end as usize <= json.len() && rv_at as usize <= json.len() {
                        body.write(&mut expected, suffix, rv);
                    } else {
                        // Out of range holes are at the end.
                        let clamped = ServedBody { name_end: name_end.min(200), rv_at: rv_at.min(200), ..body.clone() };
                        clamped.write(&mut expected, suffix, rv);
                    }
                    let mut out = b"prefix".to_vec();
                    out.resize(6 + hole_bytes(suffix, rv), 0);
                    out.extend_from_slice(&json);
                    open_holes(&mut out, 6, name_end, rv_at, suffix, rv);
                    assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(expected).unwrap(), "{name_end} {rv_at} {suffix:?} {rv}");
                }
            }
        }
        // Too short to hold the room: left as it is.
        let mut short = b"ab".to_vec();
        open_holes(&mut short, 1, 0, 0, Some("_m"), 5);
        assert_eq!(short, b"ab");
    }

    #[test]
    fn served_form_has_qualified_name_global_rv_and_annotations() {
        let raw = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default","resourceVersion":"812","uid":"u1","labels":{"app":"web","tier":"a"}},"spec":{"nodeName":"n1","zzz":1,"aaa":2}}"#;
        let ing = ingest(&pods(), "member1", raw).unwrap();
        assert_eq!(ing.name, "web-0");
        assert_eq!(ing.namespace, "default");
        assert_eq!(ing.member_rv, "812");
        assert_eq!(ing.labels, vec![("app".into(), "web".into()), ("tier".into(), "a".into())]);
        let served: Value = serde_json::from_slice(&ing.body.to_bytes(Some("_member1"), 42)).unwrap();
        assert_eq!(served["metadata"]["name"], "web-0_member1");
        assert_eq!(served["metadata"]["resourceVersion"], "42");
        assert_eq!(served["metadata"]["annotations"][CLUSTER_ANNOTATION], "member1");
        assert_eq!(served["metadata"]["annotations"][MEMBER_RV_ANNOTATION], "812");
        // Field order of unknown fields is kept.
        let keys: Vec<_> = served["spec"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec!["nodeName", "zzz", "aaa"]);
        let plain: Value = serde_json::from_slice(&ing.body.to_bytes(None, 7)).unwrap();
        assert_eq!(plain["metadata"]["name"], "web-0");
        assert_eq!(plain["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn rv_hole_before_name_hole_is_handled() {
        let raw = br#"{"metadata":{"resourceVersion":"5","name":"a"}}"#;
        let ing = ingest(&pods(), "c", raw).unwrap();
        let served: Value = serde_json::from_slice(&ing.body.to_bytes(Some("_c"), 123456)).unwrap();
        assert_eq!(served["metadata"]["name"], "a_c");
        assert_eq!(served["metadata"]["resourceVersion"], "123456");
        assert_eq!(served["kind"], "Pod");
        assert_eq!(served["apiVersion"], "v1");
    }

    #[test]
    fn to_member_strips_what_kubefold_owns() {
        let raw = br#"{"metadata":{"name":"web-0","resourceVersion":"9","annotations":{"keep":"1"}}}"#;
        let ing = ingest(&pods(), "m1", raw).unwrap();
        let mut v: Value = serde_json::from_slice(&ing.body.to_bytes(Some("_m1"), 100)).unwrap();
        to_member(&mut v, "web-0", Some("9"));
        assert_eq!(v["metadata"]["name"], "web-0");
        assert_eq!(v["metadata"]["resourceVersion"], "9");
        assert_eq!(v["metadata"]["annotations"], serde_json::json!({"keep": "1"}));
        let raw = br#"{"metadata":{"name":"x","resourceVersion":"9"}}"#;
        let ing = ingest(&pods(), "m1", raw).unwrap();
        let mut v: Value = serde_json::from_slice(&ing.body.to_bytes(None, 1)).unwrap();
        to_member(&mut v, "x", None);
        assert!(v["metadata"].get("annotations").is_none());
        assert!(v["metadata"].get("resourceVersion").is_none());
    }
}
