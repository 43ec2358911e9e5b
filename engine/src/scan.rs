//! Walking JSON text that has been validated already.
//!
//! When an object is ingested, serde_json reads all of its text once
//! ([`crate::object::ingest`]). What is read of it afterwards (the parts its
//! Table row and field selectors need) is found by following the text's
//! structure only: strings are skipped eight bytes at a time up to their
//! closing quote, nesting is counted, and only the values kept are decoded.
//!
//! Given text that is not valid JSON these functions do not panic: they
//! return an error where the structure breaks, or values read from the
//! parts that parse.

use std::borrow::Cow;

use crate::json::Node;
use crate::skip::{skip_ws, string_end_escaped, value_end, DOUBTFUL_DEPTH};
use crate::keep::Keep;

/// Text whose structure breaks (valid JSON never gets here).
fn broken() -> serde_json::Error {
    serde::de::Error::custom("JSON text breaks off or is malformed")
}

/// A key as written between its quotes, decoded only when it has escapes.
enum Key<'a> {
    Plain(&'a [u8]),
    Decoded(Option<String>),
}

impl<'a> Key<'a> {
    /// The key written as `raw`, which has an escape if `escaped`.
    fn new(raw: &'a [u8], escaped: bool) -> Key<'a> {
        if !escaped {
            return Key::Plain(raw);
        }
        let mut quoted = Vec::with_capacity(raw.len() + 2);
        quoted.push(b'"');
        quoted.extend_from_slice(raw);
        quoted.push(b'"');
        Key::Decoded(serde_json::from_slice::<String>(&quoted).ok())
    }

    fn is(&self, name: &str) -> bool {
        match self {
            Key::Plain(raw) => *raw == name.as_bytes(),
            Key::Decoded(key) => key.as_deref() == Some(name),
        }
    }

    fn into_cow(self) -> serde_json::Result<Cow<'a, str>> {
        match self {
            Key::Plain(raw) => Ok(Cow::Borrowed(std::str::from_utf8(raw).map_err(|_| broken())?)),
            Key::Decoded(key) => key.map(Cow::Owned).ok_or_else(broken),
        }
    }
}

/// An object's members in order, a repeated key keeping its first place
/// and its last value (as serde_json reads an object).
pub(crate) struct MemberList<'a, V> {
    /// The members.
    pub(crate) members: Vec<(Cow<'a, str>, V)>,
    /// Where each key is, once there are too many to search.
    places: Option<std::collections::HashMap<String, usize>>,
}

impl<'a, V> MemberList<'a, V> {
    pub(crate) fn new() -> MemberList<'a, V> {
        MemberList { members: Vec::new(), places: None }
    }

    /// Adds a member, or sets the value of the one with its key.
    pub(crate) fn push(&mut self, key: Cow<'a, str>, value: V) {
        let found = match &self.places {
            Some(places) => places.get(key.as_ref()).copied(),
            None => self.members.iter().position(|(k, _)| *k == key),
        };
        match found {
            Some(i) => self.members[i].1 = value,
            None => {
                if let Some(places) = &mut self.places {
                    places.insert(key.to_string(), self.members.len());
                }
                self.members.push((key, value));
                if self.places.is_none() && self.members.len() > 32 {
                    self.places = Some(self.members.iter().enumerate().map(|(i, (k, _))| (k.to_string(), i)).collect());
                }
            }
        }
    }
}

/// The members of the valid JSON object `text` (keys decoded, values as
/// written, as [`MemberList`] keeps them) and what `keep` names of it (as
/// [`prune`]), in one walk; `None` when `text` is not an object or `keep`
/// does not name members. The flag: whether the walk passed over a number
/// or nesting that decoding could refuse (a number with an exponent or more
/// than 18 digits, nesting near serde_json's limit): reading raw values
/// checks neither. What it kept was decoded, so is not in doubt.
///
/// `strict`: the text is checked as the walk goes, as [`crate::check`]
/// checks it (except its UTF-8), instead of being taken to be valid JSON:
/// what is skipped is checked, what is kept is decoded.
#[allow(clippy::type_complexity)]
pub fn split_pruned<'a>(text: &'a [u8], keep: &Keep, strict: bool) -> serde_json::Result<Option<(Vec<(Cow<'a, str>, &'a [u8])>, Node<'a>, bool)>> {
    let start = skip_ws(text, 0);
    let (Keep::Fields(fields), Some(b'{')) = (keep, text.get(start)) else { return Ok(None) };
    let mut members = MemberList::new();
    let mut pass = Pass { doubt: false, strict };
    let (kept, end) = walk_object(text, start, fields, 0, &mut pass, |key, value| {
        members.push(key.into_cow()?, value);
        Ok(())
    })?;
    if skip_ws(text, end) != text.len() {
        return Err(broken());
    }
    Ok(Some((members.members, kept, pass.doubt)))
}

/// What a walk has found, and how it reads.
struct Pass {
    /// Whether it passed over a number or nesting decoding could refuse
    /// (see [`split_pruned`]).
    doubt: bool,
    /// Whether the text is checked as JSON as it is walked (see
    /// [`split_pruned`]); else it is taken to be valid.
    strict: bool,
}

/// Nesting deeper than serde_json reads (128) is refused.
const MAX_DEPTH: usize = 128;

/// The value of the valid JSON `text` with only what `keep` names: of an
/// object the members named (a repeated key keeps its first place and its
/// last value, as serde_json reads it), of an array each element so; what
/// is kept whole is decoded as serde_json decodes it. What is not kept is
/// skipped in the same pass, without being checked.
pub fn prune<'a>(text: &'a [u8], keep: &Keep) -> serde_json::Result<Node<'a>> {
    let (value, end) = walk(text, skip_ws(text, 0), keep, 0, &mut Pass { doubt: false, strict: false })?;
    if skip_ws(text, end) != text.len() {
        return Err(broken());
    }
    Ok(value)
}

/// Reads the value at `i` keeping what `keep` names: the value and the
/// index after it (`doubt`: see [`split_pruned`]).
fn walk<'a>(text: &'a [u8], i: usize, keep: &Keep, depth: usize, pass: &mut Pass) -> serde_json::Result<(Node<'a>, usize)> {
    if depth > MAX_DEPTH {
        return Err(broken());
    }
    pass.doubt |= depth >= DOUBTFUL_DEPTH;
    match (keep, text.get(i)) {
        (Keep::Fields(fields), Some(b'{')) => walk_object(text, i, fields, depth, pass, |_, _| Ok(())),
        (Keep::All, Some(b'{')) => {
            let mut members = MemberList::new();
            let mut j = skip_ws(text, i + 1);
            if text.get(j) == Some(&b'}') {
                return Ok((Node::Object(members.members), j + 1));
            }
            loop {
                let (key, value_at) = member_key(text, j, pass.strict)?;
                let (value, end) = walk(text, value_at, &Keep::All, depth + 1, pass)?;
                members.push(key.into_cow()?, value);
                j = skip_ws(text, end);
                match text.get(j) {
                    Some(b',') => j = skip_ws(text, j + 1),
                    Some(b'}') => return Ok((Node::Object(members.members), j + 1)),
                    _ => return Err(broken()),
                }
            }
        }
        (_, Some(b'[')) => {
            let mut out = Vec::new();
            let mut j = skip_ws(text, i + 1);
            if text.get(j) == Some(&b']') {
                return Ok((Node::Array(out), j + 1));
            }
            loop {
                let (value, end) = walk(text, j, keep, depth + 1, pass)?;
                out.push(value);
                j = skip_ws(text, end);
                match text.get(j) {
                    Some(b',') => j = skip_ws(text, j + 1),
                    Some(b']') => return Ok((Node::Array(out), j + 1)),
                    _ => return Err(broken()),
                }
            }
        }
        _ => {
            // The leaf is decoded, which checks it.
            let end = value_end(text, i, depth, &mut pass.doubt).ok_or_else(broken)?;
            Ok((leaf(&text[i..end])?, end))
        }
    }
}

/// The key of the member at `j` (at its opening quote) and the index of
/// its value.
fn member_key(text: &[u8], j: usize, strict: bool) -> serde_json::Result<(Key<'_>, usize)> {
    if text.get(j) != Some(&b'"') {
        return Err(broken());
    }
    let found = if strict { crate::check::check_string_escaped(text, j) } else { string_end_escaped(text, j) };
    let (key_end, escaped) = found.ok_or_else(broken)?;
    let key = Key::new(&text[j + 1..key_end - 1], escaped);
    let j = skip_ws(text, key_end);
    if text.get(j) != Some(&b':') {
        return Err(broken());
    }
    Ok((key, skip_ws(text, j + 1)))
}

/// Reads the object at `i` keeping the members `fields` name (see
/// [`walk`]); `member` is called with every member's key and text. The
/// kept members and the index after the object.
fn walk_object<'a>(
    text: &'a [u8],
    i: usize,
    fields: &'static [(&'static str, Keep)],
    depth: usize,
    pass: &mut Pass,
    mut member: impl FnMut(Key<'a>, &'a [u8]) -> serde_json::Result<()>,
) -> serde_json::Result<(Node<'a>, usize)> {
    let mut out: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
    let mut j = skip_ws(text, i + 1);
    if text.get(j) == Some(&b'}') {
        return Ok((Node::Object(out), j + 1));
    }
    loop {
        let (key, value_at) = member_key(text, j, pass.strict)?;
        j = value_at;
        let end = match fields.iter().find(|(name, _)| key.is(name)) {
            Some((name, keep)) => {
                let (value, end) = walk(text, j, keep, depth + 1, pass)?;
                // A repeated key: its first place, its last value.
                match out.iter_mut().find(|(k, _)| k == name) {
                    Some((_, kept)) => *kept = value,
                    None => out.push((Cow::Borrowed(*name), value)),
                }
                end
            }
            None if pass.strict => crate::check::check_value_doubting(text, j, depth + 1, &mut pass.doubt).ok_or_else(broken)?,
            None => value_end(text, j, depth + 1, &mut pass.doubt).ok_or_else(broken)?,
        };
        member(key, &text[j..end])?;
        j = skip_ws(text, end);
        match text.get(j) {
            Some(b',') => j = skip_ws(text, j + 1),
            Some(b'}') => return Ok((Node::Object(out), j + 1)),
            _ => return Err(broken()),
        }
    }
}

/// A value that is not an object or array. Strings without escapes,
/// `true`, `false` and `null` are taken as they are; the rest is decoded
/// by serde_json.
fn leaf(text: &[u8]) -> serde_json::Result<Node<'_>> {
    match text {
        [b'"', inner @ .., b'"'] => {
            if !inner.iter().any(|&b| b == b'\\' || b < 0x20) {
                if let Ok(s) = std::str::from_utf8(inner) {
                    return Ok(Node::String(Cow::Borrowed(s)));
                }
            }
            serde_json::from_slice::<String>(text).map(|s| Node::String(Cow::Owned(s)))
        }
        b"true" => Ok(Node::Bool(true)),
        b"false" => Ok(Node::Bool(false)),
        b"null" => Ok(Node::Null),
        _ => serde_json::from_slice::<serde_json::Number>(text).map(Node::Number),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What serde_json's full parse keeps of `value` under `keep`.
    fn reference(value: &Value, keep: &Keep) -> Value {
        match (keep, value) {
            (Keep::Fields(fields), Value::Object(map)) => Value::Object(
                map.iter()
                    .filter_map(|(k, v)| fields.iter().find(|(name, _)| name == k).map(|(_, keep)| (k.clone(), reference(v, keep))))
                    .collect(),
            ),
            (Keep::Fields(_), Value::Array(items)) => Value::Array(items.iter().map(|v| reference(v, keep)).collect()),
            _ => value.clone(),
        }
    }

    static KEEP: Keep = Keep::Fields(&[
        ("a", Keep::All),
        ("b", Keep::Fields(&[("c", Keep::All), ("d\"e", Keep::All)])),
        ("list", Keep::Fields(&[("name", Keep::All)])),
    ]);

    #[test]
    fn prune_keeps_what_a_full_parse_keeps() {
        let long = "x".repeat(100);
        let texts: Vec<String> = vec![
            r#"{"a":1,"b":{"c":"x","z":[1,2,{"c":3}]},"z":"}]\"{["}"#.to_string(),
            " {\n \"z\" : [ ] , \"a\" : { \"q\" : [ \"\\\\\" , -1.5e3 ] } , \"b\" : { } } \t".to_string(),
            r#"{"b":{"d\"e":true,"c":null,"c":"last"},"a":"first","a":"second"}"#.to_string(),
            r#"{"\u0061":"escaped key","list":[{"name":"one","x":1},{"y":2},"text",[{"name":"deep"}],7]}"#.to_string(),
            r#"{"list":{"name":"an object where a list was expected","other":0}}"#.to_string(),
            r#"{"a":"ü \ud83d\ude00 \n","b":[{"c":1},{"c":2}]}"#.to_string(),
            // Quotes and backslashes at every place of an eight-byte word.
            format!(r#"{{"z":"{long}\"{long}\\","a":"{long}","b":{{"c":"1234567\\\"8","zz":"12345678\"\\\\"}}}}"#),
            format!(r#"{{"{long}":1,"a":"é{long}\u00e9","b":{{"c":"\"\"\"\"\"\"\"\"\"\\\\"}}}}"#),
            r#"[{"a":1},{"b":{"c":2}}]"#.to_string(),
            r#""just a string""#.to_string(),
            "12345".to_string(),
            "{}".to_string(),
            r#"{"a":[true,false,null,0.1,-0,1e400]}"#.to_string(),
        ];
        for text in &texts {
            let full: Value = match serde_json::from_str(text) {
                Ok(full) => full,
                // 1e400 is out of range for serde_json too.
                Err(_) => {
                    assert!(prune(text.as_bytes(), &KEEP).is_err(), "{text}");
                    continue;
                }
            };
            let got = prune(text.as_bytes(), &KEEP).unwrap_or_else(|e| panic!("{text}: {e}")).to_value();
            assert_eq!(got, reference(&full, &KEEP), "{text}");
            // Order as serde_json keeps it.
            assert_eq!(serde_json::to_string(&got).unwrap(), serde_json::to_string(&reference(&full, &KEEP)).unwrap(), "{text}");
        }
    }

    #[test]
    fn prune_of_each_fixture_is_what_a_full_parse_keeps() {
        let catalog = crate::resources::builtin();
        for (file, group, plural) in crate::fixtures::API_TYPES {
            let text = crate::fixtures::read(file);
            let full: Value = serde_json::from_slice(&text).unwrap();
            let resource = catalog.iter().find(|r| r.group == *group && r.plural == *plural).unwrap();
            let keep = crate::table::ingest_keep(resource);
            assert_eq!(prune(&text, keep).unwrap().to_value(), reference(&full, keep), "{file}");
        }
    }

    #[test]
    fn broken_text_is_an_error_not_a_panic() {
        for text in [
            "", " ", "{", "[", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":1,", "{\"a\" 1}", "{a:1}", "[1,", "[1 2]", "\"open", "\"esc\\", "{} x",
            "{\"b\":{\"c\":[}", "}", "]", "{\"a\":\"12345678901234567890", "{\"a\":[[[[[[[[",
        ] {
            assert!(prune(text.as_bytes(), &KEEP).is_err(), "{text:?}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(prune(deep.as_bytes(), &KEEP).is_err(), "nesting past serde_json's limit");
    }
}
