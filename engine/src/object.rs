//! Turning a member's object into the form kubefold serves, and back.
//!
//! An object is transformed once, when it is ingested: the `kubefold.io/`
//! annotations are added and the result is serialised to bytes with two holes
//! left open, one after `metadata.name` (where `_<cluster>` goes for qualified
//! names) and one inside `metadata.resourceVersion` (where the global RV goes,
//! known only when the aggregator numbers the event). Serving an object is then
//! a splice of byte slices, with no JSON parsing on the read path.

use serde_json::Value;
use thiserror::Error;

use crate::resources::ResourceType;

/// Annotation naming the member cluster that owns an object.
pub const CLUSTER_ANNOTATION: &str = "kubefold.io/cluster";
/// Annotation holding the member's own resourceVersion of the object.
pub const MEMBER_RV_ANNOTATION: &str = "kubefold.io/member-resource-version";
/// Prefix of every annotation kubefold owns; stripped from bodies forwarded to members.
pub const KUBEFOLD_ANNOTATION_PREFIX: &str = "kubefold.io/";

const NAME_SENTINEL: &str = "\u{1}kubefold-name\u{1}";
const RV_SENTINEL: &str = "\u{1}kubefold-rv\u{1}";

/// Errors of ingesting a member's object.
#[derive(Debug, Error)]
pub enum Error {
    /// The bytes are not a JSON object.
    #[error("object is not valid JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),
    /// The object has no `metadata.name`.
    #[error("object has no metadata.name")]
    MissingName,
    /// The object contains the marker kubefold uses internally to find its
    /// name and resourceVersion (never the case for a real object).
    #[error("object contains kubefold's reserved marker characters")]
    ReservedMarker,
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

    /// The object as served, as bytes.
    pub fn to_bytes(&self, name_suffix: Option<&str>, rv: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.json.len() + 32);
        self.write(&mut out, name_suffix, rv);
        out
    }
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

/// Transforms a member's object (raw JSON) of type `resource` from `cluster`
/// into its served form.
///
/// `kind` and `apiVersion` are set when missing (list items of some servers
/// omit them), the `kubefold.io/` annotations are added, and every other field
/// is kept in its order.
pub fn ingest(resource: &ResourceType, cluster: &str, raw: &[u8]) -> Result<Ingested> {
    if raw.len() > MAX_OBJECT_BYTES {
        return Err(Error::TooLarge { size: raw.len(), limit: MAX_OBJECT_BYTES });
    }
    let value: Value = serde_json::from_slice(raw).map_err(Error::InvalidJson)?;
    ingest_value(resource, cluster, value)
}

/// [`ingest`] for an already parsed object.
pub fn ingest_value(resource: &ResourceType, cluster: &str, mut value: Value) -> Result<Ingested> {
    let Some(obj) = value.as_object_mut() else {
        return Err(Error::MissingName);
    };
    if !obj.contains_key("kind") || !obj.contains_key("apiVersion") {
        // Keep kind and apiVersion first, as Kubernetes serialises them.
        let mut fixed = serde_json::Map::with_capacity(obj.len() + 2);
        fixed.insert("kind".into(), Value::String(resource.kind.clone()));
        fixed.insert("apiVersion".into(), Value::String(resource.api_version()));
        for (k, v) in std::mem::take(obj) {
            if k != "kind" && k != "apiVersion" {
                fixed.insert(k, v);
            }
        }
        *obj = fixed;
    }
    let fields = crate::fields::extract(&resource.group, &resource.plural, &value);
    let meta = value
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or(Error::MissingName)?;
    let name = match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => return Err(Error::MissingName),
    };
    let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
    let member_rv = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let uid = meta.get("uid").and_then(Value::as_str).unwrap_or("").to_string();
    let mut labels: Vec<(String, String)> = meta
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    labels.sort();

    meta.insert("name".into(), Value::String(format!("{name}{NAME_SENTINEL}")));
    meta.insert("resourceVersion".into(), Value::String(RV_SENTINEL.to_string()));
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if !annotations.is_object() {
        *annotations = Value::Object(Default::default());
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(CLUSTER_ANNOTATION.into(), Value::String(cluster.to_string()));
        a.insert(MEMBER_RV_ANNOTATION.into(), Value::String(member_rv.clone()));
    }
    let mut json = serde_json::to_vec(&value).map_err(Error::InvalidJson)?;
    // Each marker must occur exactly once: a member's object that carries the
    // marker text itself is refused rather than spliced at the wrong place.
    if occurrences(&json, NAME_SENTINEL) != 1 || occurrences(&json, RV_SENTINEL) != 1 {
        return Err(Error::ReservedMarker);
    }
    let name_end = cut(&mut json, NAME_SENTINEL);
    let rv_at = cut(&mut json, RV_SENTINEL);
    let (name_end, rv_at) = match (name_end, rv_at) {
        (Some(n), Some(r)) => {
            // The later cut shifted nothing before it; fix the earlier offset
            // if the RV hole came first.
            let n = if r < n { n - sentinel_len(RV_SENTINEL) } else { n };
            (n as u32, r as u32)
        }
        _ => return Err(Error::ReservedMarker),
    };
    Ok(Ingested {
        namespace,
        name,
        member_rv,
        uid,
        labels,
        fields,
        body: ServedBody { json, name_end, rv_at },
    })
}

fn sentinel_len(sentinel: &str) -> usize {
    serde_json::to_string(sentinel).map(|s| s.len() - 2).unwrap_or(0)
}

/// How often the JSON-escaped `sentinel` occurs in `json`.
fn occurrences(json: &[u8], sentinel: &str) -> usize {
    let Ok(escaped) = serde_json::to_string(sentinel) else { return 0 };
    let needle = &escaped.as_bytes()[1..escaped.len() - 1];
    json.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Removes the JSON-escaped `sentinel` from `json`; returns where it was.
fn cut(json: &mut Vec<u8>, sentinel: &str) -> Option<usize> {
    let escaped = serde_json::to_string(sentinel).ok()?;
    let needle = &escaped.as_bytes()[1..escaped.len() - 1];
    let at = json.windows(needle.len()).position(|w| w == needle)?;
    json.drain(at..at + needle.len());
    Some(at)
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
    use crate::resources;

    fn pods() -> ResourceType {
        resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone()
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
    fn objects_without_names_or_json_are_rejected() {
        assert!(matches!(ingest(&pods(), "c", b"{\"metadata\":{}}"), Err(Error::MissingName)));
        assert!(matches!(ingest(&pods(), "c", b"{\"metadata\":"), Err(Error::InvalidJson(_))));
        assert!(matches!(ingest(&pods(), "c", b"[]"), Err(Error::MissingName)));
        let huge = vec![b' '; MAX_OBJECT_BYTES + 1];
        assert!(matches!(ingest(&pods(), "c", &huge), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn objects_carrying_the_marker_are_refused() {
        // Found by fuzzing: a name holding the resourceVersion marker text.
        let raw = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Cfgfu0000\u0001kubefold-rv\u0001"}}"#;
        assert!(matches!(ingest(&pods(), "c", raw), Err(Error::ReservedMarker)));
        let raw = br#"{"metadata":{"name":"a","annotations":{"x":"\u0001kubefold-name\u0001"}}}"#;
        assert!(matches!(ingest(&pods(), "c", raw), Err(Error::ReservedMarker)));
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
