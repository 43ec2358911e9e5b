//! Ingest: reading a member's object once, checking what decoding would
//! refuse, and writing the served body with its holes.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::write::{push_compact, string_of, write_metadata, write_str, Members};
use super::{Error, Ingested, Result, ServedBody, TableRow, MAX_OBJECT_BYTES};
use crate::json::Node;
use crate::resources::ResourceType;

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
        keep @ crate::keep::Keep::All => crate::scan::prune(raw, keep).map_err(Error::InvalidJson)?,
        crate::keep::Keep::Fields(kept) => {
            let mut members = Vec::new();
            for (member, keep) in kept.iter() {
                if let Some(raw) = top.get(member) {
                    members.push((Cow::Borrowed(*member), crate::scan::prune(raw, keep).map_err(Error::InvalidJson)?));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{CLUSTER_ANNOTATION, MEMBER_RV_ANNOTATION};
    use serde_json::Value;
    use crate::resources;
    use serde_json::json;

    fn pods() -> ResourceType {
        resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone()
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
}
