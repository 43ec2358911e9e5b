//! Turning a member's object into the form kubefold serves, and back.
//!
//! An object is transformed once, when it is ingested: the `kubefold.io/`
//! annotations are added and the result is serialised to bytes with two holes
//! left open, one after `metadata.name` (where `_<cluster>` goes for qualified
//! names) and one inside `metadata.resourceVersion` (where the global RV goes,
//! known only when the aggregator numbers the event). Serving an object is then
//! a splice of byte slices, with no JSON parsing on the read path.

use std::borrow::Cow;

use serde_json::value::RawValue;
use serde_json::Value;
use thiserror::Error;

use crate::json::Node;
use crate::resources::ResourceType;

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

/// Transforms a member's object (raw JSON) of type `resource` from `cluster`
/// into its served form.
///
/// `kind` and `apiVersion` are set when missing (list items of some servers
/// omit them), the `kubefold.io/` annotations are added, and every other field
/// is kept in its order.
///
/// The object is not built as a `serde_json::Value`: its members are read
/// as raw JSON text (which validates all of it) and written back compacted,
/// with only `metadata` taken apart; what the type's field selectors read is
/// parsed on its own, skipping the rest. A repeated key keeps its first place
/// and its last value, as a `Value` reads it.
pub fn ingest(resource: &ResourceType, cluster: &str, raw: &[u8]) -> Result<Ingested> {
    let may_hold_nul = check_size_and_decoding(raw)?;
    let top = Members::parse(raw)?.ok_or(Error::MissingName)?;
    // What the type's field selectors and (when its rows have templates)
    // its Table row read, in one pruned parse.
    let parsed = match crate::table::ingest_keep(resource) {
        keep @ crate::table::Keep::All => crate::scan::prune(raw, keep).map_err(Error::InvalidJson)?,
        crate::table::Keep::Fields(kept) => {
            let mut members = Vec::new();
            for (member, keep) in kept.iter() {
                if let Some(raw) = top.get(member) {
                    members.push((Cow::Borrowed(*member), crate::table::parse_for_row(raw, keep).map_err(Error::InvalidJson)?));
                }
            }
            Node::Object(members)
        }
    };
    transform(resource, cluster, raw, &top, parsed, may_hold_nul)
}

/// [`ingest`] of text serde_json has read as a [`RawValue`] (what a member
/// sends is read so): its structure and encoding were checked then, so
/// its members are found in the same walk that reads what its Table row
/// and field selectors need (see [`crate::scan`]) instead of a second
/// parse. The result is [`ingest`]'s.
pub fn ingest_read(resource: &ResourceType, cluster: &str, raw: &RawValue) -> Result<Ingested> {
    ingest_checked(resource, cluster, raw.get().as_bytes())
}

/// [`ingest_read`] of `text` known to be JSON as serde_json reads a raw
/// value: read so, or checked by [`crate::check`] (a watch event's object,
/// [`crate::check::split_watch_line`]).
pub fn ingest_checked(resource: &ResourceType, cluster: &str, text: &[u8]) -> Result<Ingested> {
    ingest_walked(resource, cluster, text, false)
}

/// [`ingest_checked`] of text not checked yet: the walk that reads it
/// checks it as serde_json reads a raw value ([`crate::check`]), in the same
/// pass. A watch event's object ([`crate::check::split_watch_line`]).
pub fn ingest_unchecked(resource: &ResourceType, cluster: &str, text: &[u8]) -> Result<Ingested> {
    if let Err(utf8) = std::str::from_utf8(text) {
        // Reading it as a raw value names where (skipping a value does not
        // check its strings' UTF-8).
        let read = serde_json::from_slice::<&RawValue>(text).err();
        return Err(Error::InvalidJson(read.unwrap_or_else(|| serde::de::Error::custom(utf8))));
    }
    ingest_walked(resource, cluster, text, true)
}

/// [`ingest_checked`] (`strict`: [`ingest_unchecked`]).
fn ingest_walked(resource: &ResourceType, cluster: &str, text: &[u8], strict: bool) -> Result<Ingested> {
    if text.len() > MAX_OBJECT_BYTES {
        return Err(Error::TooLarge { size: text.len(), limit: MAX_OBJECT_BYTES });
    }
    // What decoding would refuse beyond what reading raw values checks (see
    // `check_size_and_decoding`) is looked for in two parts: the escapes by
    // a search for backslashes, numbers and nesting by the walk.
    let escapes = scan_escapes(text);
    let decodes = || serde_json::from_slice::<Decoded>(text).map(|_| ()).map_err(Error::InvalidJson);
    match crate::scan::split_pruned(text, crate::table::ingest_keep(resource), strict) {
        Ok(Some((members, parsed, doubt))) => {
            if doubt || escapes.may_fail_to_decode {
                decodes()?;
            }
            transform(resource, cluster, text, &Members(members), parsed, escapes.may_hold_nul)
        }
        Ok(None) => ingest(resource, cluster, text),
        // Decoding names what is wrong when it can.
        Err(e) => {
            decodes()?;
            Err(Error::InvalidJson(e))
        }
    }
}

/// The escapes of text that reads as a JSON value: what [`Scan`] tells of
/// them (a `\u` escape of a surrogate, `\u0000`), found by a search for
/// backslashes. In such text a backslash is in a string, opening an escape
/// or escaped by the one before it, so they are read in order.
fn scan_escapes(raw: &[u8]) -> Scan {
    let mut scan = Scan { may_fail_to_decode: false, may_hold_nul: false };
    let mut escaped_up_to = 0;
    for at in memchr::memchr_iter(b'\\', raw) {
        if at < escaped_up_to {
            continue;
        }
        escaped_up_to = at + 2;
        if raw.get(at + 1) == Some(&b'u') {
            match raw.get(at + 2..at + 6) {
                Some([d, x, ..]) if d.eq_ignore_ascii_case(&b'd') && matches!(x, b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => {
                    scan.may_fail_to_decode = true;
                }
                Some(hex) => scan.may_hold_nul |= hex == b"0000",
                None => scan.may_fail_to_decode = true,
            }
        }
    }
    scan
}

/// Refuses an object over [`MAX_OBJECT_BYTES`], or one that decoding would
/// refuse beyond what reading raw values checks. Returns whether its text
/// may hold a NUL character (see [`Scan`]).
fn check_size_and_decoding(raw: &[u8]) -> Result<bool> {
    if raw.len() > MAX_OBJECT_BYTES {
        return Err(Error::TooLarge { size: raw.len(), limit: MAX_OBJECT_BYTES });
    }
    // Reading raw values checks the text's structure and encoding but not
    // what only decoding finds (a `\u` escape of a lone UTF-16 surrogate, a
    // number out of range, nesting past serde_json's limit): an object that
    // holds any of their ingredients is decoded once, keeping nothing.
    let scan = scan_for_decoding(raw);
    if scan.may_fail_to_decode {
        serde_json::from_slice::<Decoded>(raw).map_err(Error::InvalidJson)?;
    }
    Ok(scan.may_hold_nul)
}

/// The rest of [`ingest`]: the object (`raw`), its `top` members and what
/// its row and fields read (`parsed`) to the served form.
fn transform(
    resource: &ResourceType,
    cluster: &str,
    raw: &[u8],
    top: &Members<'_>,
    mut parsed: Node<'_>,
    may_hold_nul: bool,
) -> Result<Ingested> {
    let meta_raw = top.get("metadata").ok_or(Error::MissingName)?;
    // Parts of text read already (by serde_json, or by `Members::parse` in `ingest`).
    let meta = Members::of_valid(meta_raw)?.ok_or(Error::MissingName)?;
    let text = |member: &str| meta.get(member).and_then(string_of);
    let name = text("name").filter(|n| !n.is_empty()).ok_or(Error::MissingName)?;
    let namespace = text("namespace").unwrap_or_default();
    let member_rv = text("resourceVersion").unwrap_or_default();
    let uid = text("uid").unwrap_or_default();
    // A label whose value is not a string reads as empty.
    let mut labels: Vec<(String, String)> = match meta.get("labels").map(Members::of_valid).transpose()?.flatten() {
        Some(members) => members.0.into_iter().map(|(k, v)| (k.into_owned(), string_of(v).unwrap_or_default())).collect(),
        None => Vec::new(),
    };
    labels.sort();

    // The metadata the fields name.
    if !matches!(parsed, Node::Object(_)) {
        parsed = Node::Object(Vec::new());
    }
    if let Some(metadata_member) = parsed.entry("metadata") {
        metadata_member.set("name", Node::String(Cow::Owned(name.clone())));
        metadata_member.set("namespace", Node::String(Cow::Owned(namespace.clone())));
    }
    let fields = crate::fields::extract(&resource.group, &resource.plural, &parsed);

    let mut json = Vec::with_capacity(raw.len() + 128);
    let mut holes = (0, 0);
    let mut metadata = (0, 0);
    json.push(b'{');
    let fix_kind = top.get("kind").is_none() || top.get("apiVersion").is_none();
    if fix_kind {
        // Kind and apiVersion first, as Kubernetes serialises them.
        json.extend_from_slice(b"\"kind\":");
        write_str(&mut json, &resource.kind);
        json.extend_from_slice(b",\"apiVersion\":");
        write_str(&mut json, &resource.api_version());
    }
    let mut first = !fix_kind;
    for (key, value) in &top.0 {
        if fix_kind && (key == "kind" || key == "apiVersion") {
            continue;
        }
        if !std::mem::take(&mut first) {
            json.push(b',');
        }
        write_str(&mut json, key);
        json.push(b':');
        if key == "metadata" {
            metadata.0 = json.len();
            holes = write_metadata(&mut json, &meta, &name, cluster, &member_rv)?;
            metadata.1 = json.len();
        } else {
            push_compact(&mut json, value);
        }
    }
    json.push(b'}');
    let (name_end, rv_at) = holes;
    let row = crate::table::has_row_template(resource)
        .then(|| crate::table::row_template(resource, &parsed, &name, cluster, may_hold_nul))
        .flatten()
        .map(|template| TableRow { template, metadata_start: metadata.0 as u32, metadata_end: metadata.1 as u32 });
    Ok(Ingested {
        namespace,
        name,
        member_rv,
        uid,
        labels,
        fields,
        body: ServedBody { json, name_end: name_end as u32, rv_at: rv_at as u32, row },
    })
}


/// What [`scan_for_decoding`] finds in an object's text.
struct Scan {
    /// Whether `raw` (JSON as far as its structure goes) holds what decoding
    /// refuses beyond that: a `\u` escape in the surrogate range (`D800` to
    /// `DFFF`: lone or badly paired surrogates), a number with an exponent or
    /// more than 18 digits (out of range), nesting 100 deep (serde_json's limit
    /// is 128). A scan without decoding: a pod's JSON holds none of these, and
    /// decoding each object just to find out cost 6.6 % of a sync's CPU. Errs
    /// on the side of decoding: malformed text also answers true.
    may_fail_to_decode: bool,
    /// Whether the text holds the escape `\u0000`. JSON text has a NUL
    /// character in a string only so (control characters are escaped, RFC
    /// 8259 section 7), so text without it has none: the Table row's check
    /// for NUL characters can be skipped. True too when the scan stopped
    /// early.
    may_hold_nul: bool,
}

/// Scans `raw` for what [`Scan`] tells, in one pass.
fn scan_for_decoding(raw: &[u8]) -> Scan {
    let stop = Scan { may_fail_to_decode: true, may_hold_nul: true };
    let mut may_hold_nul = false;
    let mut depth = 0u32;
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'"' => {
                i += 1;
                loop {
                    let Some(at) = crate::skip::quote_or_backslash(raw, i) else {
                        return stop;
                    };
                    i = at;
                    if raw[i] == b'"' {
                        i += 1;
                        break;
                    }
                    // `\uD800` to `\uDFFF`, in either case.
                    if raw.get(i + 1) == Some(&b'u') {
                        match raw.get(i + 2..i + 4) {
                            Some([d, x]) if d.eq_ignore_ascii_case(&b'd') && matches!(x, b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => return stop,
                            Some(_) => may_hold_nul |= raw.get(i + 2..i + 6) == Some(b"0000"),
                            None => return stop,
                        }
                    }
                    i += 2;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth >= 100 {
                    return stop;
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let len = raw[i..].iter().position(|b| !matches!(b, b'-' | b'+' | b'.' | b'0'..=b'9' | b'e' | b'E')).unwrap_or(raw.len() - i);
                let number = &raw[i..i + len];
                if number.len() > 18 || number.iter().any(|b| matches!(b, b'e' | b'E')) {
                    return stop;
                }
                i += len;
            }
            _ => i += 1,
        }
    }
    Scan { may_fail_to_decode: false, may_hold_nul }
}

/// Any JSON value, decoded as serde_json decodes it (strings unescaped,
/// numbers converted) and dropped: a check of validity without building a
/// `Value`.
struct Decoded;

impl<'de> serde::Deserialize<'de> for Decoded {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Decoded, D::Error> {
        deserializer.deserialize_any(DecodedVisitor)
    }
}

struct DecodedVisitor;

impl<'de> serde::de::Visitor<'de> for DecodedVisitor {
    type Value = Decoded;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_i64<E>(self, _: i64) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_u64<E>(self, _: u64) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_f64<E>(self, _: f64) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_str<E>(self, _: &str) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_unit<E>(self) -> std::result::Result<Decoded, E> {
        Ok(Decoded)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Decoded, A::Error> {
        while seq.next_element::<Decoded>()?.is_some() {}
        Ok(Decoded)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Decoded, A::Error> {
        while map.next_entry::<Decoded, Decoded>()?.is_some() {}
        Ok(Decoded)
    }
}

/// Writes the served `metadata`: the name with its hole for the cluster
/// suffix, an empty resourceVersion with its hole for the global RV, and the
/// annotations with kubefold's two; returns where the holes are.
fn write_metadata(json: &mut Vec<u8>, meta: &Members<'_>, name: &str, cluster: &str, member_rv: &str) -> Result<(usize, usize)> {
    let mut name_end = 0;
    let mut rv_at = 0;
    let mut write_rv = |json: &mut Vec<u8>| {
        json.extend_from_slice(b"\"resourceVersion\":\"");
        rv_at = json.len();
        json.push(b'"');
    };
    json.push(b'{');
    for (i, (key, value)) in meta.0.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        match key.as_ref() {
            "name" => {
                json.extend_from_slice(b"\"name\":");
                write_str(json, name);
                json.pop();
                name_end = json.len();
                json.push(b'"');
            }
            "resourceVersion" => write_rv(json),
            "annotations" => {
                json.extend_from_slice(b"\"annotations\":");
                write_annotations(json, Members::of_valid(value)?.as_ref(), cluster, member_rv);
            }
            _ => {
                write_str(json, key);
                json.push(b':');
                push_compact(json, value);
            }
        }
    }
    // Members kubefold adds go last, in the order a `Value` would append them.
    if meta.get("resourceVersion").is_none() {
        json.push(b',');
        write_rv(json);
    }
    if meta.get("annotations").is_none() {
        json.extend_from_slice(b",\"annotations\":");
        write_annotations(json, None, cluster, member_rv);
    }
    json.push(b'}');
    Ok((name_end, rv_at))
}

/// Writes the annotations (`None` or not an object: none) with kubefold's
/// two set: in place when the member's object has them, else last.
fn write_annotations(json: &mut Vec<u8>, annotations: Option<&Members<'_>>, cluster: &str, member_rv: &str) {
    let ours = [(CLUSTER_ANNOTATION, cluster), (MEMBER_RV_ANNOTATION, member_rv)];
    let mut written = [false; 2];
    json.push(b'{');
    let mut first = true;
    let mut member = |json: &mut Vec<u8>, key: &str| {
        if !std::mem::take(&mut first) {
            json.push(b',');
        }
        write_str(json, key);
        json.push(b':');
    };
    for (key, value) in annotations.map_or(&[][..], |a| &a.0[..]) {
        member(json, key);
        match ours.iter().position(|(k, _)| k == key) {
            Some(i) => {
                write_str(json, ours[i].1);
                written[i] = true;
            }
            None => push_compact(json, value),
        }
    }
    for (i, (key, value)) in ours.iter().enumerate() {
        if !written[i] {
            member(json, key);
            write_str(json, value);
        }
    }
    json.push(b'}');
}

/// Writes `s` as a JSON string.
fn write_str(json: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        json.push(b'"');
        json.extend_from_slice(s.as_bytes());
        json.push(b'"');
    } else {
        serde_json::to_writer(&mut *json, s).expect("a string serializes");
    }
}

/// Appends valid JSON text without the whitespace between its tokens (a
/// served body is one line: watch events are newline-delimited).
fn push_compact(json: &mut Vec<u8>, text: &[u8]) {
    // Most text has no whitespace at all (Kubernetes writes JSON compact),
    // which SIMD searches tell quickly.
    if memchr::memchr3(b' ', b'\n', b'\t', text).is_none() && memchr::memchr(b'\r', text).is_none() {
        json.extend_from_slice(text);
        return;
    }
    json.reserve(text.len());
    // Runs between whitespace are copied whole; strings are skipped eight
    // bytes at a time (see `scan`).
    let (mut run, mut i) = (0, 0);
    while let Some(&b) = text.get(i) {
        match b {
            b'"' => i = crate::skip::string_end(text, i).unwrap_or(text.len()),
            b' ' | b'\n' | b'\r' | b'\t' => {
                json.extend_from_slice(&text[run..i]);
                i += 1;
                run = i;
            }
            _ => i += 1,
        }
    }
    json.extend_from_slice(&text[run..]);
}

/// The string that valid JSON text `raw` is (`None` for other values):
/// taken as it is when it has no escapes, else decoded by serde_json.
fn string_of(raw: &[u8]) -> Option<String> {
    match raw {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner).ok().map(str::to_string),
        [b'"', ..] => serde_json::from_slice(raw).ok(),
        _ => None,
    }
}

/// The members of a JSON object as written: keys decoded, values as raw
/// text borrowed from the input, in order; a repeated key keeps its first
/// place and takes its last value.
struct Members<'a>(Vec<(Cow<'a, str>, &'a [u8])>);

impl<'a> Members<'a> {
    /// Parses `json`: `None` when it is valid JSON but not an object.
    fn parse(json: &'a [u8]) -> Result<Option<Members<'a>>> {
        use serde::Deserializer as _;
        let mut de = serde_json::Deserializer::from_slice(json);
        let members = (&mut de).deserialize_any(MembersVisitor).map_err(Error::InvalidJson)?;
        de.end().map_err(Error::InvalidJson)?;
        Ok(members)
    }

    /// [`Members::parse`] of text known to be valid JSON (a part of text
    /// read already), by walking it (see [`crate::scan`]) instead of
    /// parsing it again.
    fn of_valid(json: &'a [u8]) -> Result<Option<Members<'a>>> {
        static NONE: crate::table::Keep = crate::table::Keep::Fields(&[]);
        Ok(crate::scan::split_pruned(json, &NONE, false).map_err(Error::InvalidJson)?.map(|(members, ..)| Members(members)))
    }

    /// The value of a member.
    fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

struct MembersVisitor;

impl<'de> serde::de::Visitor<'de> for MembersVisitor {
    type Value = Option<Members<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = crate::scan::MemberList::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            members.push(key, value.get().as_bytes());
        }
        Ok(Some(Members(members.members)))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A member name, borrowed from the input when it has no escapes.
struct KeySeed;

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
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
    /// The compact form of pretty-printed JSON is serde_json's compact
    /// serialisation of the same value: whitespace between tokens goes,
    /// whitespace, quotes and backslashes inside strings stay.
    #[test]
    fn push_compact_drops_only_whitespace_between_tokens() {
        let long = "y".repeat(37);
        let mut values: Vec<serde_json::Value> =
            crate::fixtures::API_TYPES.iter().map(|(file, _, _)| serde_json::from_slice(&crate::fixtures::read(file)).unwrap()).collect();
        for text in [
            r#"{"a":"x y","b":[1, 2,{"c":" \" "}],"d":"\\\\","e":"\t\n","f":"ü é \u2028","g":[],"h":{}}"#.to_string(),
            format!(r#"{{"{long}":"1234567\"","k":"12345678\\\\","m":["  ","\"\"\"\"\"\"\"\"\"", null, true, -1.5e3]}}"#),
            r#""just a string with spaces""#.to_string(),
            "[ ]".to_string(),
        ] {
            values.push(serde_json::from_str(&text).unwrap());
        }
        for value in &values {
            let compact = serde_json::to_vec(value).unwrap();
            for text in [serde_json::to_vec_pretty(value).unwrap(), compact.clone()] {
                let mut got = b"prefix".to_vec();
                super::push_compact(&mut got, &text);
                assert_eq!(String::from_utf8_lossy(&got[6..]), String::from_utf8_lossy(&compact));
            }
        }
        // Whitespace of every kind, at every place of an eight-byte word.
        for pad in 0..9 {
            let text = format!("{{{}\"a\"\t:\r\n[ 1 ,\"{}\" ] }}", " ".repeat(pad), " ".repeat(pad));
            let mut got = Vec::new();
            super::push_compact(&mut got, text.as_bytes());
            assert_eq!(String::from_utf8(got).unwrap(), format!("{{\"a\":[1,\"{}\"]}}", " ".repeat(pad)));
        }
    }

    /// The name, namespace, version, UID and labels ingested are what
    /// serde_json reads of the metadata: escapes decoded, a repeated key's
    /// last value, a label that is not a string empty, either way in.
    #[test]
    fn metadata_is_read_as_serde_json_reads_it() {
        let texts = [
            r#"{"metadata":{"name":"a\u002fb","namespace":"n\"s","resourceVersion":"7","uid":"u-1","labels":{"k\u0031":"v\n1","k2":"x","k2":"y","num":3,"e":"","\u00e9":"\u00e9t\u00e9"}}}"#,
            r#"{"metadata":{"labels":{"z":"1","a":"2"},"name":"plain","name":"last"}}"#,
            r#"{"metadata":{"name":"c","labels":["not","an","object"]}}"#,
            r#"{ "metadata" : { "name" : "spaced" , "labels" : { "a b" : "c d" } } }"#,
        ];
        for text in texts {
            let full: Value = serde_json::from_str(text).unwrap();
            let meta = &full["metadata"];
            let mut labels: Vec<(String, String)> = meta["labels"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
                .unwrap_or_default();
            labels.sort();
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            for got in [ingest(&pods(), "m1", text.as_bytes()).unwrap(), ingest_read(&pods(), "m1", raw).unwrap()] {
                assert_eq!(got.name, meta["name"].as_str().unwrap(), "{text}");
                assert_eq!(got.namespace, meta["namespace"].as_str().unwrap_or(""), "{text}");
                assert_eq!(got.member_rv, meta["resourceVersion"].as_str().unwrap_or(""), "{text}");
                assert_eq!(got.uid, meta["uid"].as_str().unwrap_or(""), "{text}");
                assert_eq!(got.labels, labels, "{text}");
            }
        }
    }

    /// Ingesting text read as a raw value (one walk) gives what ingesting
    /// its bytes gives, for every built-in type: the fixtures, and objects
    /// with escaped, repeated and reordered members, whitespace, no kind.
    #[test]
    fn ingest_read_is_ingest() {
        let mut texts: Vec<Vec<u8>> = crate::fixtures::API_TYPES.iter().map(|(file, _, _)| crate::fixtures::read(file)).collect();
        for text in [
            r#"{"metadata":{"name":"a","namespace":"n","labels":{"x":"1","x":"2"}},"spec":{"nodeName":"n1","nodeName":"n2"},"status":{"phase":"Running"}}"#,
            "{ \"kind\" : \"Pod\" ,\n \"apiVersion\":\"v1\", \"metadata\" : { \"name\" : \"b\" } , \"spec\" : { \"containers\" : [ { \"name\" : \"c\" } ] } }",
            r#"{"metadata":{"name":"c"},"\u0073pec":{"hostNetwork":true},"metadata":{"name":"d","resourceVersion":"7"}}"#,
            r#"{"status":{"containerStatuses":[{"name":"a","ready":true,"restartCount":3,"state":{"running":{}}}]},"metadata":{"name":"e","annotations":{"kubefold.io/cluster":"x"}}}"#,
            r#"{"metadata":{"name":""}}"#,
            r#"{"metadata":"name"}"#,
            r#"[{"metadata":{"name":"f"}}]"#,
            r#"{"metadata":{"name":"g"},"spec":{"x":"\ud800"}}"#,
        ] {
            texts.push(text.as_bytes().to_vec());
        }
        for resource in crate::resources::builtin() {
            for text in &texts {
                let raw: &serde_json::value::RawValue = serde_json::from_slice(text).unwrap();
                let (read, bytes) = (super::ingest_read(&resource, "m1", raw), super::ingest(&resource, "m1", text));
                let unchecked = super::ingest_unchecked(&resource, "m1", text);
                match (&unchecked, &read) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{} {} (unchecked)", resource.plural, String::from_utf8_lossy(text)),
                    _ => assert_eq!(unchecked.is_err(), read.is_err(), "{} {} (unchecked)", resource.plural, String::from_utf8_lossy(text)),
                }
                match (read, bytes) {
                    (Ok(read), Ok(bytes)) => assert_eq!(read, bytes, "{} {}", resource.plural, String::from_utf8_lossy(text)),
                    (read, bytes) => assert_eq!(read.is_err(), bytes.is_err(), "{} {}", resource.plural, String::from_utf8_lossy(text)),
                }
            }
        }
    }

    /// Whatever serde_json refuses to decode in text whose structure it
    /// reads (as raw values) is caught by the scan; and a plain object
    /// is not decoded twice.
    #[test]
    fn the_scan_finds_every_object_decoding_refuses() {
        let refused = [
            r#"{"a":"\ud813d"}"#,
            r#"{"a":"\uDC00"}"#,
            r#"{"a":"x\uD800\u0041"}"#,
            r#"{"\udfff":1}"#,
            r#"{"a":1e999}"#,
            r#"{"a":-1E+400}"#,
            r#"{"a":1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000}"#,
        ];
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        for raw in refused.iter().map(|s| s.to_string()).chain([deep]) {
            assert!(serde_json::from_str::<&serde_json::value::RawValue>(&raw).is_ok(), "{raw}: structure reads");
            assert!(serde_json::from_str::<super::Decoded>(&raw).is_err(), "{raw}: decoding refuses");
            assert!(super::scan_for_decoding(raw.as_bytes()).may_fail_to_decode, "{raw}: the scan misses it");
        }
        let plain = [
            r#"{"a":"\u00e9 \"\\ \u0041","b":[1,-2,3.5,true,false,null],"c":{"d":"e1e999"}}"#.to_string(),
            format!("{{\"a\":{}{}}}", "[".repeat(90), "]".repeat(90)),
            r#"{"n":123456789012345678}"#.to_string(),
        ];
        for raw in plain {
            assert!(serde_json::from_str::<super::Decoded>(&raw).is_ok(), "{raw}");
            assert!(!super::scan_for_decoding(raw.as_bytes()).may_fail_to_decode, "{raw}: decoded for nothing");
        }
        // A pair of surrogates makes the scan decode (it does not pair them), which accepts it.
        assert!(super::scan_for_decoding(br#"{"a":"\ud83d\ude00"}"#).may_fail_to_decode);
    }

    /// `ingest_read` refuses what decoding refuses and accepts the rest,
    /// wherever the ingredient is: in a part the row keeps (decoded there),
    /// in a part it skips (the walk's doubt or the escape search), in a
    /// key, deep in nesting; and without decoding for nothing.
    #[test]
    fn ingest_read_refuses_what_decoding_refuses_wherever_it_is() {
        let ingredients = [
            (r#""\ud813d""#, false),
            (r#""\uDC00""#, false),
            (r#""x\uD800\u0041""#, false),
            (r#""\ud83d\ude00""#, true),
            (r#""\\ud800""#, true),
            (r#""\u0000""#, true),
            ("1e999", false),
            ("-1E+400", false),
            ("1.5e3", true),
            ("123456789012345678901234567890", true),
            (&format!("1{}", "0".repeat(400)), false),
            ("-0.25", true),
            (r#"{"\udfff":1}"#, false),
            (r#"{"k\u00e9":[1,2,{"x":null}]}"#, true),
        ];
        let places: [fn(&str) -> String; 6] = [
            |v| format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"nodeName":"n","x":{v}}}}}"#),
            |v| format!(r#"{{"metadata":{{"name":"p"}},"status":{{"phase":{v}}}}}"#),
            |v| format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"readinessGates":[{{"conditionType":{v}}}]}}}}"#),
            |v| format!(r#"{{"metadata":{{"name":"p","annotations":{{"a":{v}}}}}}}"#),
            |v| format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"volumes":{}{v}{}}}}}"#, "[".repeat(95), "]".repeat(95)),
            |v| format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"readinessGates":{}{v}{}}}}}"#, "[".repeat(95), "]".repeat(95)),
        ];
        for (ingredient, accepted) in ingredients {
            for place in places {
                let text = place(ingredient);
                let raw: &RawValue = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                let decodes = serde_json::from_str::<Value>(&text).is_ok();
                let got = ingest_read(&pods(), "m1", raw);
                assert_eq!(got.is_ok(), decodes, "{text}: {:?}", got.err());
                if !text.contains(&"[".repeat(95)) {
                    assert_eq!(decodes, accepted, "{text}");
                }
                assert_eq!(got.is_ok(), ingest(&pods(), "m1", text.as_bytes()).is_ok(), "{text}");
            }
        }
        // Nesting past serde_json's limit in a part the row skips, and in one it keeps whole.
        for text in [
            format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"volumes":{}{}}}}}"#, "[".repeat(140), "]".repeat(140)),
            format!(r#"{{"metadata":{{"name":"p"}},"spec":{{"readinessGates":{}{}}}}}"#, "[".repeat(140), "]".repeat(140)),
        ] {
            assert!(serde_json::from_str::<Value>(&text).is_err());
            if let Ok(raw) = serde_json::from_str::<&RawValue>(&text) {
                assert!(ingest_read(&pods(), "m1", raw).is_err(), "{text}");
            }
        }
        // A pod's own text is not in doubt, so it is not decoded again.
        let text = crate::fixtures::read("core.v1.Pod.json");
        let (_, _, doubt) = crate::scan::split_pruned(&text, crate::table::ingest_keep(&pods()), false).unwrap().unwrap();
        assert!(!doubt && !scan_escapes(&text).may_fail_to_decode);
    }

    /// The scan tells text that may hold a NUL character (the escape
    /// `\u0000`) from text that holds none, escaped backslashes included.
    #[test]
    fn the_decoding_scan_finds_nul_escapes() {
        for (raw, nul) in [
            (r#"{"a":"\u0000"}"#, true),
            (r#"{"\u0000":1}"#, true),
            (r#"{"a":"x\\\u0000"}"#, true),
            (r#"{"a":"\\u0000"}"#, false),
            (r#"{"a":"\u00001"}"#, true),
            (r#"{"a":"\u0001\u0100 u0000 \\"}"#, false),
            (r#"{"a":"\u000"}"#, false),
            (r#"{"a":[1,2,{"b":null}]}"#, false),
        ] {
            let decoded = serde_json::from_str::<serde_json::Value>(raw);
            if let Ok(value) = &decoded {
                // What serde_json reads agrees where the text is valid.
                fn has(v: &serde_json::Value) -> bool {
                    match v {
                        serde_json::Value::String(s) => s.contains('\0'),
                        serde_json::Value::Array(items) => items.iter().any(has),
                        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has(v)),
                        _ => false,
                    }
                }
                assert_eq!(has(value), nul, "{raw}");
            }
            let scan = super::scan_for_decoding(raw.as_bytes());
            assert!(!scan.may_fail_to_decode || decoded.is_err(), "{raw}");
            assert_eq!(scan.may_hold_nul, nul || scan.may_fail_to_decode, "{raw}");
        }
    }

    use super::*;
    use crate::resources;
    use serde_json::json;

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
    fn objects_without_names_or_json_are_rejected() {
        assert!(matches!(ingest(&pods(), "c", b"{\"metadata\":{}}"), Err(Error::MissingName)));
        assert!(matches!(ingest(&pods(), "c", b"{\"metadata\":"), Err(Error::InvalidJson(_))));
        assert!(matches!(ingest(&pods(), "c", b"[]"), Err(Error::MissingName)));
        let huge = vec![b' '; MAX_OBJECT_BYTES + 1];
        assert!(matches!(ingest(&pods(), "c", &huge), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn objects_carrying_any_text_are_served_as_written() {
        // Text that an earlier ingest used as its hole markers is plain text.
        let raw = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Cfgfu0000\u0001kubefold-rv\u0001"}}"#;
        let ing = ingest(&pods(), "c", raw).unwrap();
        let served: Value = serde_json::from_slice(&ing.body.to_bytes(Some("_c"), 9)).unwrap();
        assert_eq!(served["metadata"]["name"], "Cfgfu0000\u{1}kubefold-rv\u{1}_c");
        assert_eq!(served["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn served_bodies_are_compact_and_keep_the_first_place_of_a_repeated_key() {
        let raw = b"{ \"metadata\" : {\n \"name\": \"a b\",\t\"labels\": {\"x\": \"1\", \"x\": \"2\"}, \"annotations\": {\"kubefold.io/cluster\": \"old\", \"k\": \" v \"}},\r\n \"spec\": [1, 2.50, {\"s\": \"a\\\" b\"}], \"kind\": \"X\", \"apiVersion\": \"v9\", \"spec\": [3] }";
        let ing = ingest(&pods(), "c", raw).unwrap();
        let served = ing.body.to_bytes(None, 5);
        let text = String::from_utf8(served.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"metadata":{"name":"a b","labels":{"x":"1","x":"2"},"annotations":{"kubefold.io/cluster":"c","k":" v ","kubefold.io/member-resource-version":""},"resourceVersion":"5"},"spec":[3],"kind":"X","apiVersion":"v9"}"#
        );
        assert_eq!(ing.labels, vec![("x".to_string(), "2".to_string())]);
    }
    /// The fields a type's selectors read, from the pruned parse, equal
    /// those of the whole object, and the served body is the object with
    /// only kubefold's changes: every fixture (kubernetes/api testdata) and
    /// objects of each type with field selectors, with and without the
    /// fields set.
    #[test]
    fn ingest_reads_fields_and_serves_bodies_as_the_whole_object_says() {
        let catalog = resources::builtin();
        // Types outside the built-in catalog (it serves what kubectl shows
        // most) are described here; only group and plural matter to fields.
        let find = |group: &str, plural: &str| {
            catalog.iter().find(|r| r.group == group && r.plural == plural).cloned().unwrap_or_else(|| ResourceType {
                group: group.into(),
                plural: plural.into(),
                ..catalog[0].clone()
            })
        };
        let mut objects: Vec<(ResourceType, Value)> = crate::fixtures::API_TYPES
            .iter()
            .map(|(file, group, plural)| (find(group, plural), serde_json::from_slice(&crate::fixtures::read(file)).unwrap()))
            .collect();
        let with_fields = [
            ("", "pods", json!({"spec": {"nodeName": "n", "hostNetwork": true, "restartPolicy": "Never"}, "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.2"}], "podIP": "10.0.0.1"}})),
            ("", "pods", json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIP": "10.0.0.1"}})),
            ("", "pods", json!({"spec": null, "status": "odd"})),
            ("", "nodes", json!({"spec": {"unschedulable": true}})),
            ("", "events", json!({"involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}, "reason": "Started", "source": {"component": "kubelet"}, "type": "Normal"})),
            ("", "events", json!({"reportingComponent": "ctrl", "source": {}})),
            ("", "secrets", json!({"type": "Opaque", "data": {"k": "dg=="}})),
            ("", "namespaces", json!({"status": {"phase": "Terminating"}})),
            ("", "services", json!({"spec": {"clusterIP": "10.96.0.1", "type": "ClusterIP", "ports": [{"port": 443}]}})),
            ("apps", "replicasets", json!({"status": {"replicas": 3}})),
            ("", "replicationcontrollers", json!({"status": {"replicas": 2}})),
            ("batch", "jobs", json!({"status": {"succeeded": 4}})),
            ("certificates.k8s.io", "certificatesigningrequests", json!({"spec": {"signerName": "example.com/s"}})),
        ];
        for (group, plural, mut object) in with_fields {
            let resource = find(group, plural);
            object["kind"] = resource.kind.clone().into();
            object["apiVersion"] = resource.api_version().into();
            object["metadata"] = json!({"name": "x", "namespace": "ns", "resourceVersion": "3"});
            objects.push((resource, object));
        }
        for (resource, object) in objects {
            let bytes = serde_json::to_vec_pretty(&object).unwrap();
            let ing = ingest(&resource, "m", &bytes).unwrap();
            assert_eq!(ing.fields, crate::fields::extract(&resource.group, &resource.plural, &object), "{} fields", resource.plural);
            let served = ing.body.to_bytes(Some("_m"), 77);
            assert!(!served.contains(&b'\n'), "{}: a served body is one line", resource.plural);
            let mut want = object.clone();
            let meta = want["metadata"].as_object_mut().unwrap();
            let member_rv = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
            meta.insert("name".into(), Value::String(format!("{}_m", ing.name)));
            meta.insert("resourceVersion".into(), "77".into());
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            annotations[CLUSTER_ANNOTATION] = "m".into();
            annotations[MEMBER_RV_ANNOTATION] = member_rv.into();
            assert_eq!(serde_json::from_slice::<Value>(&served).unwrap(), want, "{} served", resource.plural);
        }
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
