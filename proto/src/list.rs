//! A `*List` encoded from its JSON text one item at a time: a list of 100k
//! pods is never held as one `serde_json::Value`, and, read from a
//! [`std::io::Read`] ([`encode_json_list_from`]), never as one JSON text nor
//! one protobuf buffer either: the items' fields are collected in pieces of
//! about [`PIECE_BYTES`], which a server sends one after another.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::envelope::{envelope_parts, message_of};
use crate::json::{encode_entry, encode_field, from_json, plan, Field};
use crate::{Error, Result};

/// The size the items' pieces are cut at (each is a whole number of items).
pub const PIECE_BYTES: usize = 256 * 1024;

/// Encodes the JSON text of a list (`{"kind":"PodList","apiVersion":"v1",
/// "metadata":{..},"items":[..]}`) as a protobuf body. Items are encoded as
/// they are read when `kind` and `apiVersion` come before `items`, as
/// Kubernetes and kubefold write them.
pub fn encode_json_list(json: &[u8]) -> Result<Vec<u8>> {
    let pieces = encode_with(&mut serde_json::Deserializer::from_slice(json))?;
    Ok(pieces.concat())
}

/// [`encode_json_list`] of JSON text read from `reader` as it comes: the
/// body in pieces, in order (their concatenation is the body). What is held
/// at once is the protobuf form of the items, not the JSON text (read in the
/// reader's chunks) nor a second copy of the body (the envelope's head,
/// which ends with the length of the list message, is a piece of its own).
pub fn encode_json_list_from<R: std::io::Read>(reader: R) -> Result<Vec<Vec<u8>>> {
    encode_with(&mut serde_json::Deserializer::from_reader(reader))
}

fn encode_with<'de, R: serde_json::de::Read<'de>>(deserializer: &mut serde_json::Deserializer<R>) -> Result<Vec<Vec<u8>>> {
    let encoded = de::Deserializer::deserialize_map(&mut *deserializer, ListVisitor)
        .map_err(|e| Error::json(format!("list: {e}")))?;
    deserializer.end().map_err(|e| Error::json(format!("list: {e}")))?;
    let list = plan(&message_of(&encoded.api_version, &encoded.kind)?);
    let items = list.field_named("items").ok_or_else(|| Error::json(format!("{} has no items", encoded.kind)))?;
    let mut meta = Vec::new();
    let mut head = Map::new();
    head.insert("metadata".into(), encoded.metadata);
    from_json(list, &Value::Object(head), &mut meta)?;
    let mut pieces = encoded.items.finish();
    if let Some(values) = encoded.pending {
        let mut out = Vec::new();
        encode_field(items, &Value::Array(values), &mut out).map_err(|e| e.at("items"))?;
        pieces = vec![out];
    }
    let raw_len = meta.len() + pieces.iter().map(Vec::len).sum::<usize>();
    let (mut first, tail) = envelope_parts(&encoded.api_version, &encoded.kind, raw_len);
    first.extend_from_slice(&meta);
    let mut body = Vec::with_capacity(pieces.len() + 2);
    body.push(first);
    body.extend(pieces.into_iter().filter(|p| !p.is_empty()));
    body.push(tail);
    Ok(body)
}

/// The items' fields, cut into pieces of about [`PIECE_BYTES`].
#[derive(Default)]
struct Pieces {
    done: Vec<Vec<u8>>,
    current: Vec<u8>,
}

impl Pieces {
    fn finish(mut self) -> Vec<Vec<u8>> {
        if !self.current.is_empty() {
            self.done.push(self.current);
        }
        self.done
    }

    /// Starts a new piece when the current one is full.
    fn cut(&mut self) {
        if self.current.len() >= PIECE_BYTES {
            let full = std::mem::replace(&mut self.current, Vec::with_capacity(PIECE_BYTES + PIECE_BYTES / 4));
            self.done.push(full);
        }
    }
}

/// What the visitor read.
struct Encoded {
    api_version: String,
    kind: String,
    metadata: Value,
    /// The items field, encoded.
    items: Pieces,
    /// Items read before the list's kind was known.
    pending: Option<Vec<Value>>,
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = Encoded;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Encoded, A::Error> {
        let mut encoded = Encoded { api_version: String::new(), kind: String::new(), metadata: Value::Null, items: Pieces::default(), pending: None };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => encoded.api_version = map.next_value()?,
                "kind" => encoded.kind = map.next_value()?,
                "metadata" => encoded.metadata = map.next_value()?,
                "items" => {
                    let field = message_of(&encoded.api_version, &encoded.kind).ok().and_then(|list| plan(&list).field_named("items"));
                    match field {
                        Some(field) => map.next_value_seed(Items { field, out: &mut encoded.items })?,
                        None => encoded.pending = Some(map.next_value()?),
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(encoded)
    }
}

/// The items array, each item encoded into `out` as it is read.
struct Items<'a> {
    field: &'a Field,
    out: &'a mut Pieces,
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while let Some(item) = seq.next_element::<Value>()? {
            encode_entry(self.field, &item, &mut self.out.current)
                .map_err(|e| de::Error::custom(e.at(&index.to_string()).at("items")))?;
            self.out.cut();
            index += 1;
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}
