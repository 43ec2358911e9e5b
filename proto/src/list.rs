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

/// [`encode_json_list`] of JSON text that arrives in chunks ([`ListEncoder::push`]):
/// the body in pieces, in order (their concatenation is the body). What is
/// held at once is the protobuf form of the items, not the JSON text (each
/// item's text is parsed and dropped when its end arrives) nor a second copy
/// of the body (the envelope's head, which ends with the length of the list
/// message, is a piece of its own).
pub fn encode_json_list_from<R: std::io::Read>(mut reader: R) -> Result<Vec<Vec<u8>>> {
    let mut encoder = ListEncoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::json(format!("list: {e}")))?;
        if n == 0 {
            return encoder.finish();
        }
        encoder.push(&buf[..n])?;
    }
}

/// Where [`ListEncoder`] is in the list's text.
#[derive(Default, PartialEq, Eq)]
enum Part {
    /// Before the `items` array: kept whole (kind, apiVersion, metadata).
    #[default]
    Head,
    /// Inside the `items` array.
    Items,
    /// After it.
    Tail,
}

/// Encodes a list's JSON text chunk by chunk ([`encode_json_list_from`]):
/// the text before `"items":[` is kept, each item is cut out of the text by
/// a scan of brackets and strings, parsed and encoded as soon as it ends.
#[derive(Default)]
pub struct ListEncoder {
    part: Part,
    head: Vec<u8>,
    tail: Vec<u8>,
    /// The item being read (its text so far).
    item: Vec<u8>,
    /// Bracket depth in the whole text, outside strings.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The items' message field, once the head named the list's type.
    field: Option<&'static Field>,
    pieces: Pieces,
    /// Items read when the head did not name a known list type.
    pending: Vec<Value>,
    index: usize,
}

impl ListEncoder {
    /// Takes the next chunk of the text.
    pub fn push(&mut self, chunk: &[u8]) -> Result<()> {
        for &byte in chunk {
            let was_in_string = self.in_string;
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
            } else if byte == b'"' {
                self.in_string = true;
            }
            match self.part {
                Part::Head => {
                    if !was_in_string && byte == b'[' && self.depth == 1 && self.names_items() {
                        self.part = Part::Items;
                        self.field = self.items_field();
                        self.depth += 1;
                        continue;
                    }
                    self.head.push(byte);
                }
                Part::Items => {
                    if !was_in_string && self.depth == 2 && (byte == b',' || byte == b']') {
                        self.end_item()?;
                        if byte == b']' {
                            self.depth -= 1;
                            self.part = Part::Tail;
                        }
                        continue;
                    }
                    if self.depth == 2 && !was_in_string && byte.is_ascii_whitespace() && self.item.is_empty() {
                        continue;
                    }
                    self.item.push(byte);
                }
                Part::Tail => self.tail.push(byte),
            }
            if !was_in_string {
                match byte {
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Whether the head ends with the key `"items":` at the top level.
    fn names_items(&self) -> bool {
        let text = self.head.trim_ascii_end();
        text.strip_suffix(b":").map(<[u8]>::trim_ascii_end).is_some_and(|t| t.ends_with(b"\"items\""))
    }

    /// The items field of the list type the head names, if it names one.
    fn items_field(&self) -> Option<&'static Field> {
        let (api_version, kind) = self.head_type()?;
        let list = message_of(&api_version, &kind).ok()?;
        plan(&list).field_named("items")
    }

    /// apiVersion and kind from the head (what precedes `"items":`).
    fn head_type(&self) -> Option<(String, String)> {
        let text = self.head.trim_ascii_end().strip_suffix(b":")?.trim_ascii_end().strip_suffix(b"\"items\"")?.trim_ascii_end();
        let text = text.strip_suffix(b",").unwrap_or(text);
        let mut object = text.to_vec();
        object.push(b'}');
        let head: Value = serde_json::from_slice(&object).ok()?;
        Some((head["apiVersion"].as_str()?.to_string(), head["kind"].as_str()?.to_string()))
    }

    fn end_item(&mut self) -> Result<()> {
        if self.item.is_empty() {
            return Ok(());
        }
        let item: Value = serde_json::from_slice(&self.item).map_err(|e| Error::json(format!("list: items.{}: {e}", self.index)))?;
        self.item.clear();
        match self.field {
            Some(field) => {
                encode_entry(field, &item, &mut self.pieces.current).map_err(|e| e.at(&self.index.to_string()).at("items"))?;
                self.pieces.cut();
            }
            None => self.pending.push(item),
        }
        self.index += 1;
        Ok(())
    }

    /// The body, in pieces, once the whole text was pushed.
    pub fn finish(self) -> Result<Vec<Vec<u8>>> {
        if self.part == Part::Head {
            // No items array (`"items": null`, or none): a small list, whole.
            return encode_with(&mut serde_json::Deserializer::from_slice(&self.head));
        }
        if self.part == Part::Items || self.in_string || self.depth != 0 {
            return Err(Error::json("list: EOF while parsing the list"));
        }
        let mut rest = self.head;
        rest.extend_from_slice(b"[]");
        rest.extend_from_slice(&self.tail);
        let mut whole: Value = serde_json::from_slice(&rest).map_err(|e| Error::json(format!("list: {e}")))?;
        let api_version = whole["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = whole["kind"].as_str().unwrap_or_default().to_string();
        let list = plan(&message_of(&api_version, &kind)?);
        let items = list.field_named("items").ok_or_else(|| Error::json(format!("{kind} has no items")))?;
        let mut pieces = self.pieces.finish();
        if self.field.is_none() {
            let mut out = Vec::new();
            encode_field(items, &Value::Array(self.pending), &mut out).map_err(|e| e.at("items"))?;
            pieces = vec![out];
        }
        assemble(&api_version, &kind, whole["metadata"].take(), pieces)
    }
}

/// The envelope around the list message: its metadata, then the items' pieces.
fn assemble(api_version: &str, kind: &str, metadata: Value, pieces: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    let list = plan(&message_of(api_version, kind)?);
    let mut meta = Vec::new();
    let mut head = Map::new();
    head.insert("metadata".into(), metadata);
    from_json(list, &Value::Object(head), &mut meta)?;
    let raw_len = meta.len() + pieces.iter().map(Vec::len).sum::<usize>();
    let (mut first, tail) = envelope_parts(api_version, kind, raw_len);
    first.extend_from_slice(&meta);
    let mut body = Vec::with_capacity(pieces.len() + 2);
    body.push(first);
    body.extend(pieces.into_iter().filter(|p| !p.is_empty()));
    body.push(tail);
    Ok(body)
}

fn encode_with<'de, R: serde_json::de::Read<'de>>(deserializer: &mut serde_json::Deserializer<R>) -> Result<Vec<Vec<u8>>> {
    let encoded = de::Deserializer::deserialize_map(&mut *deserializer, ListVisitor)
        .map_err(|e| Error::json(format!("list: {e}")))?;
    deserializer.end().map_err(|e| Error::json(format!("list: {e}")))?;
    let list = plan(&message_of(&encoded.api_version, &encoded.kind)?);
    let items = list.field_named("items").ok_or_else(|| Error::json(format!("{} has no items", encoded.kind)))?;
    let mut pieces = encoded.items.finish();
    if let Some(values) = encoded.pending {
        let mut out = Vec::new();
        encode_field(items, &Value::Array(values), &mut out).map_err(|e| e.at("items"))?;
        pieces = vec![out];
    }
    assemble(&encoded.api_version, &encoded.kind, encoded.metadata, pieces)
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
