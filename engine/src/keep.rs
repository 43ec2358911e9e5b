//! What a parse keeps of an object's JSON ([`Keep`]), and the parsers that
//! keep only that: the member names an ingest or a Table row reads, so that
//! the rest of the text is skipped rather than built. A leaf: what ingest
//! parses does not depend on the printers ([`crate::table`]) that decide
//! part of it.

use serde_json::Value;

/// The parts of an object a Table row of its type reads (cells, row
/// conditions and the row's PartialObjectMetadata, see
/// [`crate::table::row_keeps`]), what field selectors read
/// ([`crate::fields::keep`]), or both ([`crate::table::ingest_keep`]).
#[derive(Debug)]
pub enum Keep {
    /// The whole value.
    All,
    /// Only these members of an object (applied to every element of an array).
    Fields(&'static [(&'static str, Keep)]),
}

/// What either keeps (a keep of `All` on either side keeps all).
pub fn merge_keeps(a: &'static Keep, b: &'static Keep) -> Keep {
    match (a, b) {
        (Keep::Fields(a), Keep::Fields(b)) => {
            let mut members: Vec<(&'static str, Keep)> = Vec::new();
            for (name, keep) in a.iter().chain(b.iter()) {
                if members.iter().any(|(n, _)| n == name) {
                    continue;
                }
                let in_a = a.iter().find(|(n, _)| n == name).map(|(_, k)| k);
                let in_b = b.iter().find(|(n, _)| n == name).map(|(_, k)| k);
                let keep = match (in_a, in_b) {
                    (Some(x), Some(y)) => merge_keeps(x, y),
                    _ => copy_keep(keep),
                };
                members.push((name, keep));
            }
            Keep::Fields(Box::leak(members.into_boxed_slice()))
        }
        _ => Keep::All,
    }
}

/// A `Keep` of the same members (its parts are static).
fn copy_keep(keep: &'static Keep) -> Keep {
    match keep {
        Keep::All => Keep::All,
        Keep::Fields(members) => Keep::Fields(members),
    }
}

/// An object parsed for its Table row ([`parse_row_source`]).
pub struct RowSource<'a> {
    /// What the row's cells and conditions read (as [`crate::scan::prune`]).
    pub object: Value,
    /// The object's `metadata` as written, for the row's
    /// PartialObjectMetadata: spliced, never rebuilt.
    pub metadata: Option<&'a serde_json::value::RawValue>,
}

/// Parses an object's JSON for its Table row in one pass: what `keep` names
/// (as [`crate::scan::prune`]), and the text of its `metadata`.
pub fn parse_row_source<'a>(json: &'a [u8], keep: &'static Keep) -> serde_json::Result<RowSource<'a>> {
    use serde::de::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(json);
    let source = (&mut de).deserialize_map(RowTop(keep))?;
    de.end()?;
    Ok(source)
}

/// The top level of [`parse_row_source`].
struct RowTop(&'static Keep);

/// A member name at the top level of [`parse_row_source`].
enum TopKey {
    Metadata,
    Kept(usize),
    Named(String),
    Skipped,
}

impl<'de> serde::de::DeserializeSeed<'de> for &RowTop {
    type Value = TopKey;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<TopKey, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for &RowTop {
    type Value = TopKey;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, v: &str) -> Result<TopKey, E> {
        Ok(match self.0 {
            _ if v == "metadata" => TopKey::Metadata,
            Keep::All => TopKey::Named(v.to_string()),
            Keep::Fields(fields) => match fields.iter().position(|(name, _)| *name == v) {
                Some(i) => TopKey::Kept(i),
                None => TopKey::Skipped,
            },
        })
    }
}

impl<'de> serde::de::Visitor<'de> for RowTop {
    type Value = RowSource<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RowSource<'de>, A::Error> {
        use serde::de::{DeserializeSeed, Error};
        let mut out = serde_json::Map::new();
        let mut metadata = None;
        while let Some(key) = map.next_key_seed(&self)? {
            match key {
                TopKey::Metadata => {
                    let raw: &'de serde_json::value::RawValue = map.next_value()?;
                    let keep = match self.0 {
                        Keep::All => Some(&Keep::All),
                        Keep::Fields(fields) => fields.iter().find(|(name, _)| *name == "metadata").map(|(_, keep)| keep),
                    };
                    if let Some(keep) = keep {
                        let mut de = serde_json::Deserializer::from_str(raw.get());
                        let value = Pruned(keep).deserialize(&mut de).map_err(A::Error::custom)?;
                        out.insert("metadata".to_string(), value);
                    }
                    metadata = Some(raw);
                }
                TopKey::Kept(i) => {
                    let Keep::Fields(fields) = self.0 else { unreachable!("only Fields keeps by index") };
                    let (name, keep) = &fields[i];
                    out.insert((*name).to_string(), map.next_value_seed(Pruned(keep))?);
                }
                TopKey::Named(name) => {
                    out.insert(name, map.next_value()?);
                }
                TopKey::Skipped => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(RowSource { object: Value::Object(out), metadata })
    }
}

/// Which of `fields` a member's key names, without allocating the key.
struct FieldIndex(&'static [(&'static str, Keep)]);

impl<'de> serde::de::DeserializeSeed<'de> for FieldIndex {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for FieldIndex {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|(name, _)| *name == v))
    }
}

/// A [`Keep`] as a serde seed.
struct Pruned(&'static Keep);

impl<'de> serde::de::DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => serde::Deserialize::deserialize(deserializer),
            Keep::Fields(_) => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> serde::de::Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Keep::Fields(fields) = self.0 else { unreachable!("only Fields visits") };
        let mut out = serde_json::Map::new();
        while let Some(found) = map.next_key_seed(FieldIndex(fields))? {
            match found {
                Some(i) => {
                    let (name, keep) = &fields[i];
                    let value = map.next_value_seed(Pruned(keep))?;
                    out.insert((*name).to_string(), value);
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(value) = seq.next_element_seed(Pruned(self.0))? {
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}
