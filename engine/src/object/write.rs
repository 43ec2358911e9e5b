//! Writing the served body: `metadata` with the name and resourceVersion
//! holes and kubefold's annotations, compacted member text, and the reading
//! of an object's members as written.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::{Error, Result, CLUSTER_ANNOTATION, MEMBER_RV_ANNOTATION};

/// Writes the served `metadata`: the name with its hole for the cluster
/// suffix, an empty resourceVersion with its hole for the global RV, and the
/// annotations with kubefold's two; returns where the holes are.
pub(super) fn write_metadata(json: &mut Vec<u8>, meta: &Members<'_>, name: &str, cluster: &str, member_rv: &str) -> Result<(usize, usize)> {
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
pub(super) fn write_annotations(json: &mut Vec<u8>, annotations: Option<&Members<'_>>, cluster: &str, member_rv: &str) {
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
pub(super) fn write_str(json: &mut Vec<u8>, s: &str) {
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
pub(super) fn push_compact(json: &mut Vec<u8>, text: &[u8]) {
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
pub(super) fn string_of(raw: &[u8]) -> Option<String> {
    match raw {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner).ok().map(str::to_string),
        [b'"', ..] => serde_json::from_slice(raw).ok(),
        _ => None,
    }
}

/// The members of a JSON object as written: keys decoded, values as raw
/// text borrowed from the input, in order; a repeated key keeps its first
/// place and takes its last value.
pub(super) struct Members<'a>(pub(super) Vec<(Cow<'a, str>, &'a [u8])>);

impl<'a> Members<'a> {
    /// Parses `json`: `None` when it is valid JSON but not an object.
    pub(super) fn parse(json: &'a [u8]) -> Result<Option<Members<'a>>> {
        use serde::Deserializer as _;
        let mut de = serde_json::Deserializer::from_slice(json);
        let members = (&mut de).deserialize_any(MembersVisitor).map_err(Error::InvalidJson)?;
        de.end().map_err(Error::InvalidJson)?;
        Ok(members)
    }

    /// [`Members::parse`] of text known to be valid JSON (a part of text
    /// read already), by walking it (see [`crate::scan`]) instead of
    /// parsing it again.
    pub(super) fn of_valid(json: &'a [u8]) -> Result<Option<Members<'a>>> {
        static NONE: crate::keep::Keep = crate::keep::Keep::Fields(&[]);
        Ok(crate::scan::split_pruned(json, &NONE, false).map_err(Error::InvalidJson)?.map(|(members, ..)| Members(members)))
    }

    /// The value of a member.
    pub(super) fn get(&self, key: &str) -> Option<&'a [u8]> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{ingest, ingest_read};
    use crate::resources::{self, ResourceType};
    use serde_json::Value;

    fn pods() -> ResourceType {
        resources::find(&resources::builtin(), "", "v1", "pods").unwrap().clone()
    }

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
}
