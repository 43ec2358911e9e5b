//! A `*List` encoded from its JSON text one item at a time: a list of 100k
//! pods is never held as one `serde_json::Value`.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::envelope::{envelope, message_of};
use crate::json::{encode_entry, encode_field, from_json, plan, Field};
use crate::{Error, Result};

/// Encodes the JSON text of a list (`{"kind":"PodList","apiVersion":"v1",
/// "metadata":{..},"items":[..]}`) as a protobuf body. Items are encoded as
/// they are read when `kind` and `apiVersion` come before `items`, as
/// Kubernetes and kubefold write them.
pub fn encode_json_list(json: &[u8]) -> Result<Vec<u8>> {
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let encoded = de::Deserializer::deserialize_map(&mut deserializer, ListVisitor)
        .map_err(|e| Error::json(format!("list: {e}")))?;
    deserializer.end().map_err(|e| Error::json(format!("list: {e}")))?;
    let list = plan(&message_of(&encoded.api_version, &encoded.kind)?);
    let items = list.field_named("items").ok_or_else(|| Error::json(format!("{} has no items", encoded.kind)))?;
    let mut raw = Vec::with_capacity(encoded.items.len() + 256);
    let mut head = Map::new();
    head.insert("metadata".into(), encoded.metadata);
    from_json(list, &Value::Object(head), &mut raw)?;
    match encoded.pending {
        Some(values) => encode_field(items, &Value::Array(values), &mut raw).map_err(|e| e.at("items"))?,
        None => raw.extend_from_slice(&encoded.items),
    }
    Ok(envelope(&encoded.api_version, &encoded.kind, &raw))
}

/// What the visitor read.
struct Encoded {
    api_version: String,
    kind: String,
    metadata: Value,
    /// The items field, encoded.
    items: Vec<u8>,
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
        let mut encoded = Encoded { api_version: String::new(), kind: String::new(), metadata: Value::Null, items: Vec::new(), pending: None };
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
    out: &'a mut Vec<u8>,
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
            encode_entry(self.field, &item, self.out)
                .map_err(|e| de::Error::custom(e.at(&index.to_string()).at("items")))?;
            index += 1;
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}
