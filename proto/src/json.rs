//! One message between the protobuf wire format and Kubernetes JSON, walking
//! its descriptor. Field names are the `.proto` field names, which
//! go-to-protobuf takes from the Go json tags. A few types have JSON that is
//! not their message; each is named by its full name below.
//!
//! What the wire format cannot say: protobuf from Go writes every non-pointer
//! field, so `""`, `0` and `false` arrive for fields that Go's JSON would omit
//! (omitempty). They are kept (for a pointer such as `replicas: 0` the value
//! matters), except in `ObjectMeta` and `ListMeta`, where every field is
//! omitempty and an empty string or a zero generation means unset.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Number, Value};

use crate::wire::{put_key, put_len, put_varint, Reader, WireType};
use crate::{duration, envelope, Error, Result};

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.";

/// The types whose JSON is not their message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    /// `metav1.Time`: `{seconds, nanos}`, RFC 3339 to the second; zero is null.
    Time,
    /// `metav1.MicroTime`: `{seconds, nanos}`, RFC 3339 to the microsecond.
    MicroTime,
    /// `metav1.Duration`: nanoseconds, Go's duration text.
    Duration,
    /// `resource.Quantity`: `{string}`, the string.
    Quantity,
    /// `intstr.IntOrString`: `{type, intVal, strVal}`, a number or a string.
    IntOrString,
    /// `runtime.RawExtension` and `metav1.FieldsV1`: bytes holding JSON (or,
    /// for a RawExtension, a protobuf envelope), written inline.
    RawJson,
    /// A Go named slice (`ExtraValue`, `Verbs`): `{repeated items}`, the array.
    Items,
    /// `ObjectMeta`, `ListMeta`: all fields omitempty.
    Meta,
    /// Every other message.
    Plain,
}

/// Named slices, found by build.rs from go-to-protobuf's marker.
const WRAPPERS: &[&str] = include!(concat!(env!("OUT_DIR"), "/wrappers.rs"));

/// Embedded Go structs (`json:",inline"`): a field of their own in protobuf,
/// their fields merged into the parent in JSON. (message, field number).
const INLINE: &[(&str, u32)] = include!(concat!(env!("OUT_DIR"), "/inline.rs"));

fn special(name: &str) -> Special {
    if let Some(meta) = name.strip_prefix(META) {
        return match meta {
            "Time" => Special::Time,
            "MicroTime" => Special::MicroTime,
            "Duration" => Special::Duration,
            "FieldsV1" => Special::RawJson,
            "ObjectMeta" | "ListMeta" => Special::Meta,
            _ if WRAPPERS.contains(&name) => Special::Items,
            _ => Special::Plain,
        };
    }
    match name {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => Special::RawJson,
        _ if WRAPPERS.contains(&name) => Special::Items,
        _ => Special::Plain,
    }
}

// ---------------------------------------------------------------- plans

/// The scalar kinds of protobuf (messages are planned separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    Double,
    Float,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Bool,
    String,
    Bytes,
    Enum,
}

/// What a field (or a map entry's key or value) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Scalar(Scalar),
    /// A message: its plan's index.
    Message(usize),
}

/// One field of a message, as the codec walks it.
#[derive(Debug)]
pub(crate) struct Field {
    name: String,
    number: u32,
    ty: Type,
    repeated: bool,
    /// A map field: key and value types.
    map: Option<(Type, Type)>,
    /// An embedded Go struct that JSON inlines.
    inline: bool,
}

/// One message, as the codec walks it: its fields in number order.
pub(crate) struct Plan {
    special: Special,
    fields: Vec<Field>,
    /// Field index by field number (numbers of Kubernetes messages are small).
    by_number: Vec<Option<u16>>,
}

impl Plan {
    fn field(&self, number: u32) -> Option<&Field> {
        self.by_number.get(number as usize).copied().flatten().map(|i| &self.fields[i as usize])
    }

    fn named(&self, name: &str) -> Result<&Field> {
        self.fields.iter().find(|f| f.name == name).ok_or_else(|| Error::Malformed(format!("no field {name}")))
    }

    fn only(&self) -> Result<&Field> {
        self.fields.first().ok_or_else(|| Error::Malformed("a message without fields".into()))
    }

    /// The field named `name`, for callers outside this module.
    pub(crate) fn field_named(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Every message of the descriptors, planned once: conversions look nothing
/// up by name.
struct Codec {
    plans: Vec<Plan>,
    by_name: HashMap<String, usize>,
}

fn codec() -> &'static Codec {
    static CODEC: OnceLock<Codec> = OnceLock::new();
    CODEC.get_or_init(|| {
        let messages: Vec<MessageDescriptor> = envelope::pool().all_messages().collect();
        let by_name: HashMap<String, usize> = messages.iter().enumerate().map(|(i, m)| (m.full_name().to_string(), i)).collect();
        let ty = |kind: Kind| match kind {
            Kind::Message(m) => Type::Message(by_name[m.full_name()]),
            Kind::Double => Type::Scalar(Scalar::Double),
            Kind::Float => Type::Scalar(Scalar::Float),
            Kind::Int32 => Type::Scalar(Scalar::Int32),
            Kind::Int64 => Type::Scalar(Scalar::Int64),
            Kind::Uint32 => Type::Scalar(Scalar::Uint32),
            Kind::Uint64 => Type::Scalar(Scalar::Uint64),
            Kind::Sint32 => Type::Scalar(Scalar::Sint32),
            Kind::Sint64 => Type::Scalar(Scalar::Sint64),
            Kind::Fixed32 => Type::Scalar(Scalar::Fixed32),
            Kind::Fixed64 => Type::Scalar(Scalar::Fixed64),
            Kind::Sfixed32 => Type::Scalar(Scalar::Sfixed32),
            Kind::Sfixed64 => Type::Scalar(Scalar::Sfixed64),
            Kind::Bool => Type::Scalar(Scalar::Bool),
            Kind::String => Type::Scalar(Scalar::String),
            Kind::Bytes => Type::Scalar(Scalar::Bytes),
            Kind::Enum(_) => Type::Scalar(Scalar::Enum),
        };
        let plans = messages
            .iter()
            .map(|message| {
                let name = message.full_name();
                let mut fields: Vec<Field> = message
                    .fields()
                    .map(|f| {
                        let map = f.kind().as_message().filter(|_| f.is_map()).map(|entry| {
                            (ty(entry.map_entry_key_field().kind()), ty(entry.map_entry_value_field().kind()))
                        });
                        Field {
                            name: f.name().to_string(),
                            number: f.number(),
                            ty: ty(f.kind()),
                            repeated: f.is_list(),
                            map,
                            inline: INLINE.iter().any(|(m, n)| *n == f.number() && *m == name),
                        }
                    })
                    .collect();
                fields.sort_by_key(|f| f.number);
                let max = fields.iter().map(|f| f.number as usize).max().unwrap_or(0);
                let mut by_number = vec![None; max + 1];
                for (i, f) in fields.iter().enumerate() {
                    by_number[f.number as usize] = Some(i as u16);
                }
                Plan { special: special(name), fields, by_number }
            })
            .collect();
        Codec { plans, by_name }
    })
}

/// The plan of a message of the descriptors.
pub(crate) fn plan(message: &MessageDescriptor) -> &'static Plan {
    let codec = codec();
    &codec.plans[codec.by_name[message.full_name()]]
}

fn plan_at(index: usize) -> &'static Plan {
    &codec().plans[index]
}

// ---------------------------------------------------------------- decoding

/// Decodes the bytes of one message to its Kubernetes JSON.
pub(crate) fn to_json(plan: &Plan, bytes: &[u8]) -> Result<Value> {
    match plan.special {
        special @ (Special::Time | Special::MicroTime) => {
            if bytes.is_empty() {
                // Go writes the zero time as an empty message; its JSON is null.
                return Ok(Value::Null);
            }
            let fields = plain_to_json(plan, bytes)?;
            let seconds = fields.get("seconds").and_then(Value::as_i64).unwrap_or(0);
            let nanos = fields.get("nanos").and_then(Value::as_i64).unwrap_or(0);
            let time = DateTime::<Utc>::from_timestamp(seconds, nanos.clamp(0, 999_999_999) as u32)
                .ok_or_else(|| Error::Malformed(format!("time out of range: {seconds}s")))?;
            let text = if special == Special::Time {
                time.to_rfc3339_opts(SecondsFormat::Secs, true)
            } else {
                time.to_rfc3339_opts(SecondsFormat::Micros, true)
            };
            Ok(Value::String(text))
        }
        Special::Duration => {
            let fields = plain_to_json(plan, bytes)?;
            let nanos = fields.get(&plan.only()?.name).and_then(Value::as_i64).unwrap_or(0);
            Ok(Value::String(duration::format(nanos)))
        }
        Special::Quantity => {
            let fields = plain_to_json(plan, bytes)?;
            Ok(fields.get(&plan.only()?.name).cloned().unwrap_or(Value::String(String::new())))
        }
        Special::IntOrString => {
            let fields = plain_to_json(plan, bytes)?;
            if fields.get("type").and_then(Value::as_i64) == Some(1) {
                Ok(fields.get("strVal").cloned().unwrap_or(Value::String(String::new())))
            } else {
                Ok(fields.get("intVal").cloned().unwrap_or(Value::from(0)))
            }
        }
        Special::RawJson => {
            let mut reader = Reader::new(bytes);
            let number = plan.only()?.number;
            let mut raw: &[u8] = &[];
            while !reader.done() {
                let (n, wire) = reader.key()?;
                if n == number && wire == WireType::Len {
                    raw = reader.bytes()?;
                } else {
                    reader.skip(wire)?;
                }
            }
            raw_to_json(raw)
        }
        Special::Items => {
            let fields = plain_to_json(plan, bytes)?;
            Ok(fields.get(&plan.only()?.name).cloned().unwrap_or(Value::Array(Vec::new())))
        }
        Special::Meta => {
            let mut fields = plain_to_json(plan, bytes)?;
            fields.retain(|name, value| match value {
                Value::String(s) => !s.is_empty(),
                Value::Number(n) if name == "generation" => n.as_i64() != Some(0),
                _ => true,
            });
            Ok(Value::Object(fields))
        }
        Special::Plain => plain_to_json(plan, bytes).map(Value::Object),
    }
}

/// The JSON of raw bytes: an embedded protobuf object, JSON, or null.
fn raw_to_json(raw: &[u8]) -> Result<Value> {
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    if raw.starts_with(&envelope::MAGIC) {
        return envelope::decode(raw);
    }
    serde_json::from_slice(raw).map_err(|e| Error::Malformed(format!("embedded JSON: {e}")))
}

fn plain_to_json(plan: &Plan, bytes: &[u8]) -> Result<Map<String, Value>> {
    let mut object = Map::new();
    let mut reader = Reader::new(bytes);
    while !reader.done() {
        let (number, wire) = reader.key()?;
        let Some(field) = plan.field(number) else {
            // A field of a newer Kubernetes: Go's decoder skips it too.
            reader.skip(wire)?;
            continue;
        };
        if let Some((key_type, value_type)) = field.map {
            let entry = expect_len(&mut reader, wire)?;
            let (key, value) = map_entry(key_type, value_type, entry)?;
            let map = object.entry(field.name.as_str()).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
        } else if field.repeated {
            let list = object.entry(field.name.as_str()).or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(list) = list else { continue };
            match field.ty {
                Type::Scalar(scalar) if wire == WireType::Len && packable(scalar) => {
                    let mut inner = Reader::new(reader.bytes()?);
                    while !inner.done() {
                        list.push(scalar_value(scalar, scalar_wire(scalar), &mut inner)?);
                    }
                }
                ty => list.push(value(ty, wire, &mut reader)?),
            }
        } else if field.inline {
            if let Value::Object(fields) = value(field.ty, wire, &mut reader)? {
                object.extend(fields);
            }
        } else {
            let value = value(field.ty, wire, &mut reader)?;
            object.insert(field.name.clone(), value);
        }
    }
    Ok(object)
}

fn map_entry(key_type: Type, value_type: Type, bytes: &[u8]) -> Result<(String, Value)> {
    let mut key = None;
    let mut value = None;
    let mut reader = Reader::new(bytes);
    while !reader.done() {
        match reader.key()? {
            (1, wire) => key = Some(self::value(key_type, wire, &mut reader)?),
            (2, wire) => value = Some(self::value(value_type, wire, &mut reader)?),
            (_, wire) => reader.skip(wire)?,
        }
    }
    let key = match key {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let value = match value {
        Some(value) => value,
        None => match value_type {
            Type::Message(m) => to_json(plan_at(m), &[])?,
            Type::Scalar(Scalar::String | Scalar::Bytes) => Value::String(String::new()),
            Type::Scalar(Scalar::Bool) => Value::Bool(false),
            Type::Scalar(_) => Value::from(0),
        },
    };
    Ok((key, value))
}

fn expect_len<'a>(reader: &mut Reader<'a>, wire: WireType) -> Result<&'a [u8]> {
    if wire != WireType::Len {
        return Err(Error::Malformed(format!("expected a length-delimited field, found {wire:?}")));
    }
    reader.bytes()
}

fn packable(scalar: Scalar) -> bool {
    !matches!(scalar, Scalar::String | Scalar::Bytes)
}

fn scalar_wire(scalar: Scalar) -> WireType {
    match scalar {
        Scalar::Fixed64 | Scalar::Sfixed64 | Scalar::Double => WireType::Fixed64,
        Scalar::Fixed32 | Scalar::Sfixed32 | Scalar::Float => WireType::Fixed32,
        Scalar::String | Scalar::Bytes => WireType::Len,
        _ => WireType::Varint,
    }
}

fn value(ty: Type, wire: WireType, reader: &mut Reader<'_>) -> Result<Value> {
    match ty {
        Type::Message(m) => to_json(plan_at(m), expect_len(reader, wire)?),
        Type::Scalar(scalar) => scalar_value(scalar, wire, reader),
    }
}

fn scalar_value(scalar: Scalar, wire: WireType, reader: &mut Reader<'_>) -> Result<Value> {
    let expected = scalar_wire(scalar);
    if wire != expected {
        return Err(Error::Malformed(format!("expected wire type {expected:?} for {scalar:?}, found {wire:?}")));
    }
    Ok(match scalar {
        Scalar::String => {
            let text = std::str::from_utf8(reader.bytes()?).map_err(|e| Error::Malformed(format!("string is not UTF-8: {e}")))?;
            Value::String(text.to_string())
        }
        Scalar::Bytes => Value::String(base64::engine::general_purpose::STANDARD.encode(reader.bytes()?)),
        Scalar::Bool => Value::Bool(reader.varint()? != 0),
        Scalar::Int32 | Scalar::Enum => Value::from(reader.varint()? as i32),
        Scalar::Int64 => Value::from(reader.varint()? as i64),
        Scalar::Uint32 => Value::from(reader.varint()? as u32),
        Scalar::Uint64 => Value::from(reader.varint()?),
        Scalar::Sint32 => Value::from(unzigzag(reader.varint()?) as i32),
        Scalar::Sint64 => Value::from(unzigzag(reader.varint()?)),
        Scalar::Fixed32 => Value::from(reader.fixed32()?),
        Scalar::Sfixed32 => Value::from(reader.fixed32()? as i32),
        Scalar::Fixed64 => Value::from(reader.fixed64()?),
        Scalar::Sfixed64 => Value::from(reader.fixed64()? as i64),
        Scalar::Float => float(f64::from(f32::from_bits(reader.fixed32()?)))?,
        Scalar::Double => float(f64::from_bits(reader.fixed64()?))?,
    })
}

/// A float as Go's encoding/json writes it: integral values without a fraction.
fn float(f: f64) -> Result<Value> {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        return Ok(Value::from(f as i64));
    }
    Number::from_f64(f).map(Value::Number).ok_or_else(|| Error::Malformed(format!("unsupported float value {f}")))
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

// ---------------------------------------------------------------- encoding

/// Encodes the Kubernetes JSON of one message to its bytes, fields in
/// field-number order and map entries by key, as Go's generated code writes
/// them.
pub(crate) fn from_json(plan: &Plan, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    match plan.special {
        special @ (Special::Time | Special::MicroTime) => {
            let Value::String(text) = value else {
                return Err(Error::json(format!("expected an RFC 3339 time string, found {value}")));
            };
            let time = DateTime::parse_from_rfc3339(text).map_err(|e| Error::json(format!("invalid time {text:?}: {e}")))?;
            let nanos = if special == Special::Time { 0 } else { time.timestamp_subsec_nanos() };
            put_key(out, plan.named("seconds")?.number, WireType::Varint);
            put_varint(out, time.timestamp() as u64);
            put_key(out, plan.named("nanos")?.number, WireType::Varint);
            put_varint(out, i64::from(nanos) as u64);
            Ok(())
        }
        Special::Duration => {
            let nanos = match value {
                Value::String(text) => duration::parse(text).ok_or_else(|| Error::json(format!("invalid duration {text:?}")))?,
                other => return Err(Error::json(format!("expected a duration string, found {other}"))),
            };
            put_key(out, plan.only()?.number, WireType::Varint);
            put_varint(out, nanos as u64);
            Ok(())
        }
        Special::Quantity => {
            let number = plan.only()?.number;
            match value {
                Value::String(text) => put_len(out, number, text.as_bytes()),
                Value::Number(n) => put_len(out, number, n.to_string().as_bytes()),
                other => return Err(Error::json(format!("expected a quantity, found {other}"))),
            }
            Ok(())
        }
        Special::IntOrString => {
            let (kind, int, text) = match value {
                Value::String(text) => (1, 0, text.as_str()),
                Value::Number(_) => (0, integer(value, i64::from(i32::MIN), i64::from(i32::MAX))?, ""),
                other => return Err(Error::json(format!("expected an integer or a string, found {other}"))),
            };
            put_key(out, plan.named("type")?.number, WireType::Varint);
            put_varint(out, kind);
            put_key(out, plan.named("intVal")?.number, WireType::Varint);
            put_varint(out, int as u64);
            put_len(out, plan.named("strVal")?.number, text.as_bytes());
            Ok(())
        }
        Special::RawJson => {
            let raw = serde_json::to_vec(value).map_err(|e| Error::json(e.to_string()))?;
            put_len(out, plan.only()?.number, &raw);
            Ok(())
        }
        Special::Items => {
            let items = plan.only()?;
            encode_field(items, value, out).map_err(|e| e.at(&items.name))
        }
        Special::Meta | Special::Plain => {
            let Value::Object(object) = value else {
                return Err(Error::json(format!("expected an object, found {}", kind_of(value))));
            };
            for field in &plan.fields {
                if field.inline {
                    // The embedded struct reads its fields from the same object.
                    single(field.ty, field.number, value, out).map_err(|e| e.at(&field.name))?;
                    continue;
                }
                match object.get(&field.name) {
                    None | Some(Value::Null) => {}
                    Some(v) => encode_field(field, v, out).map_err(|e| e.at(&field.name))?,
                }
            }
            Ok(())
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Encodes one field (every entry of a list or map) from its JSON value.
pub(crate) fn encode_field(field: &Field, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    if let Some((key_type, value_type)) = field.map {
        let Value::Object(map) = value else {
            return Err(Error::json(format!("expected an object, found {}", kind_of(value))));
        };
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        let mut entry = Vec::new();
        for key in keys {
            entry.clear();
            let key_value = match key_type {
                Type::Scalar(Scalar::String) => Value::String(key.clone()),
                _ => key.parse::<i64>().map(Value::from).map_err(|_| Error::json(format!("map key {key:?} is not an integer")))?,
            };
            single(key_type, 1, &key_value, &mut entry)?;
            let item = &map[key.as_str()];
            if !item.is_null() || matches!(value_type, Type::Message(_)) {
                single(value_type, 2, item, &mut entry).map_err(|e| e.at(key))?;
            }
            put_len(out, field.number, &entry);
        }
        Ok(())
    } else if field.repeated {
        let Value::Array(items) = value else {
            return Err(Error::json(format!("expected an array, found {}", kind_of(value))));
        };
        for (i, item) in items.iter().enumerate() {
            // Repeated scalars unpacked, as proto2 writes them.
            single(field.ty, field.number, item, out).map_err(|e| e.at(&i.to_string()))?;
        }
        Ok(())
    } else {
        single(field.ty, field.number, value, out)
    }
}

/// Encodes one entry of a repeated field (a list's item).
pub(crate) fn encode_entry(field: &Field, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    single(field.ty, field.number, value, out)
}

fn single(ty: Type, number: u32, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    let scalar = match ty {
        Type::Message(m) => {
            let mut bytes = Vec::new();
            // null inside a list or map is the zero value in Go.
            if !value.is_null() {
                from_json(plan_at(m), value, &mut bytes)?;
            }
            put_len(out, number, &bytes);
            return Ok(());
        }
        Type::Scalar(scalar) => scalar,
    };
    match scalar {
        Scalar::String => {
            let Value::String(text) = value else {
                return Err(Error::json(format!("expected a string, found {}", kind_of(value))));
            };
            put_len(out, number, text.as_bytes());
        }
        Scalar::Bytes => {
            let Value::String(text) = value else {
                return Err(Error::json(format!("expected base64 bytes, found {}", kind_of(value))));
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| Error::json(format!("invalid base64: {e}")))?;
            put_len(out, number, &bytes);
        }
        Scalar::Bool => {
            let Value::Bool(b) = value else {
                return Err(Error::json(format!("expected a boolean, found {}", kind_of(value))));
            };
            put_key(out, number, WireType::Varint);
            put_varint(out, u64::from(*b));
        }
        Scalar::Int32 | Scalar::Enum => {
            put_key(out, number, WireType::Varint);
            put_varint(out, integer(value, i64::from(i32::MIN), i64::from(i32::MAX))? as u64);
        }
        Scalar::Int64 => {
            put_key(out, number, WireType::Varint);
            put_varint(out, integer(value, i64::MIN, i64::MAX)? as u64);
        }
        Scalar::Uint32 => {
            put_key(out, number, WireType::Varint);
            put_varint(out, integer(value, 0, i64::from(u32::MAX))? as u64);
        }
        Scalar::Uint64 => {
            put_key(out, number, WireType::Varint);
            put_varint(out, unsigned(value)?);
        }
        Scalar::Sint32 | Scalar::Sint64 => {
            let (min, max) = if scalar == Scalar::Sint32 { (i64::from(i32::MIN), i64::from(i32::MAX)) } else { (i64::MIN, i64::MAX) };
            let v = integer(value, min, max)?;
            put_key(out, number, WireType::Varint);
            put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
        }
        Scalar::Fixed32 | Scalar::Sfixed32 => {
            let (min, max) = if scalar == Scalar::Fixed32 { (0, i64::from(u32::MAX)) } else { (i64::from(i32::MIN), i64::from(i32::MAX)) };
            put_key(out, number, WireType::Fixed32);
            out.extend_from_slice(&(integer(value, min, max)? as u32).to_le_bytes());
        }
        Scalar::Fixed64 | Scalar::Sfixed64 => {
            let v = if scalar == Scalar::Fixed64 { unsigned(value)? } else { integer(value, i64::MIN, i64::MAX)? as u64 };
            put_key(out, number, WireType::Fixed64);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Scalar::Float => {
            put_key(out, number, WireType::Fixed32);
            out.extend_from_slice(&(number_f64(value)? as f32).to_bits().to_le_bytes());
        }
        Scalar::Double => {
            put_key(out, number, WireType::Fixed64);
            out.extend_from_slice(&number_f64(value)?.to_bits().to_le_bytes());
        }
    }
    Ok(())
}

fn integer(value: &Value, min: i64, max: i64) -> Result<i64> {
    let Value::Number(n) = value else {
        return Err(Error::json(format!("expected an integer, found {}", kind_of(value))));
    };
    let v = n
        .as_i64()
        .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.3e18).map(|f| f as i64))
        .ok_or_else(|| Error::json(format!("expected an integer, found {n}")))?;
    if v < min || v > max {
        return Err(Error::json(format!("{v} is out of range")));
    }
    Ok(v)
}

fn unsigned(value: &Value) -> Result<u64> {
    match value {
        Value::Number(n) => n.as_u64().ok_or_else(|| Error::json(format!("expected an unsigned integer, found {n}"))),
        other => Err(Error::json(format!("expected an unsigned integer, found {}", kind_of(other)))),
    }
}

fn number_f64(value: &Value) -> Result<f64> {
    value.as_f64().ok_or_else(|| Error::json(format!("expected a number, found {}", kind_of(value))))
}
