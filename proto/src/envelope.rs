//! The envelope of a Kubernetes protobuf body: the magic `k8s\0`, then a
//! `runtime.Unknown` whose `typeMeta` names the object's apiVersion and kind
//! and whose `raw` holds the object's message; watch frames.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};
use serde_json::{Map, Value};

use crate::json::{from_json, plan, to_json};
use crate::wire::{put_len, Reader, WireType};
use crate::{Error, Result};

/// The 4 bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

const META_PACKAGE: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// The message descriptors of the Kubernetes API, decoded once.
pub(crate) fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.bin"))[..])
            .expect("the Kubernetes descriptors compiled by build.rs decode")
    })
}

fn runtime_message(name: &str) -> MessageDescriptor {
    pool()
        .get_message_by_name(&format!("k8s.io.apimachinery.pkg.runtime.{name}"))
        .or_else(|| pool().get_message_by_name(&format!("{META_PACKAGE}.{name}")))
        .unwrap_or_else(|| panic!("the Kubernetes descriptors hold {name}"))
}

/// The field number of `name` in a message of the descriptors.
fn number(message: &MessageDescriptor, name: &str) -> u32 {
    message
        .get_field_by_name(name)
        .unwrap_or_else(|| panic!("{} has a field {name}", message.full_name()))
        .number()
}

/// The `.proto` package of an API group and version: `k8s.io.api.<dir>.<v>`,
/// where `<dir>` is the directory of the group in kubernetes/api. Only the
/// groups of Kubernetes itself: a custom resource's group never maps here,
/// even when its first label matches one (`policy.networking.k8s.io`).
fn package(group: &str, version: &str) -> Option<String> {
    let dir = match group {
        "" => "core",
        "apps" | "batch" | "autoscaling" | "policy" | "extensions" => group,
        "rbac.authorization.k8s.io" => "rbac",
        "flowcontrol.apiserver.k8s.io" => "flowcontrol",
        "internal.apiserver.k8s.io" => "apiserverinternal",
        "meta.k8s.io" => return Some(format!("k8s.io.apimachinery.pkg.apis.meta.{version}")),
        _ => {
            let label = group.strip_suffix(".k8s.io")?;
            if label.contains('.') {
                return None;
            }
            label
        }
    };
    Some(format!("k8s.io.api.{dir}.{version}"))
}

/// The message of an apiVersion and kind, if Kubernetes defines one.
fn message(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if kind.is_empty() || version.is_empty() {
        return None;
    }
    let package = package(group, version)?;
    // `Status`, `DeleteOptions`, `WatchEvent` and the other meta types are
    // registered in every group version of Kubernetes (`AddToGroupVersion`).
    pool()
        .get_message_by_name(&format!("{package}.{kind}"))
        .or_else(|| pool().get_message_by_name(&format!("{META_PACKAGE}.{kind}")))
}

/// Whether Kubernetes has a protobuf message for this apiVersion and kind
/// (built-in types yes, custom resources no).
pub fn has_message(api_version: &str, kind: &str) -> bool {
    message(api_version, kind).is_some()
}

/// Decodes a protobuf body (`k8s\0` + `runtime.Unknown`) to the object's
/// Kubernetes JSON, `apiVersion` and `kind` first.
pub fn decode(body: &[u8]) -> Result<Value> {
    let envelope = body.strip_prefix(&MAGIC[..]).ok_or(Error::NoMagic)?;
    let unknown = runtime_message("Unknown");
    let type_meta = runtime_message("TypeMeta");
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut raw: &[u8] = &[];
    let mut reader = Reader::new(envelope);
    while !reader.done() {
        let (field, wire) = reader.key()?;
        let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|e| Error::Malformed(e.to_string()));
        match (field, wire) {
            (f, WireType::Len) if f == number(&unknown, "typeMeta") => {
                let mut inner = Reader::new(reader.bytes()?);
                while !inner.done() {
                    match inner.key()? {
                        (f, WireType::Len) if f == number(&type_meta, "apiVersion") => api_version = text(inner.bytes()?)?,
                        (f, WireType::Len) if f == number(&type_meta, "kind") => kind = text(inner.bytes()?)?,
                        (_, wire) => inner.skip(wire)?,
                    }
                }
            }
            (f, WireType::Len) if f == number(&unknown, "raw") => raw = reader.bytes()?,
            (f, WireType::Len) if f == number(&unknown, "contentEncoding") || f == number(&unknown, "contentType") => {
                let value = text(reader.bytes()?)?;
                if !value.is_empty() && value != crate::MEDIA_TYPE {
                    return Err(Error::Unsupported(format!("content encoding or type {value:?}")));
                }
            }
            (_, wire) => reader.skip(wire)?,
        }
    }
    let descriptor = message(&api_version, &kind).ok_or_else(|| Error::UnknownKind { api_version: api_version.clone(), kind: kind.clone() })?;
    let body = to_json(plan(&descriptor), raw)?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = body {
        object.extend(fields);
    }
    Ok(Value::Object(object))
}

/// Encodes an object's Kubernetes JSON (with `apiVersion` and `kind`) as a
/// protobuf body: `k8s\0`, then `runtime.Unknown` with the message in `raw`.
pub fn encode(object: &Value) -> Result<Vec<u8>> {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    let descriptor =
        message(api_version, kind).ok_or_else(|| Error::UnknownKind { api_version: api_version.into(), kind: kind.into() })?;
    let mut raw = Vec::with_capacity(1024);
    from_json(plan(&descriptor), object, &mut raw)?;
    Ok(envelope(api_version, kind, &raw))
}

/// The message of an apiVersion and kind, or UnknownKind.
pub(crate) fn message_of(api_version: &str, kind: &str) -> Result<MessageDescriptor> {
    message(api_version, kind).ok_or_else(|| Error::UnknownKind { api_version: api_version.into(), kind: kind.into() })
}

/// `k8s\0` and the `runtime.Unknown` holding `raw`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let (head, tail) = envelope_parts(api_version, kind, raw.len());
    let mut out = Vec::with_capacity(head.len() + raw.len() + tail.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(raw);
    out.extend_from_slice(&tail);
    out
}

/// What [`envelope`] writes before and after `raw_len` bytes of `raw`: the
/// magic, the type, the key and length of `raw`; the trailing fields.
pub(crate) fn envelope_parts(api_version: &str, kind: &str, raw_len: usize) -> (Vec<u8>, Vec<u8>) {
    let unknown = runtime_message("Unknown");
    let type_meta = runtime_message("TypeMeta");
    let mut meta = Vec::new();
    put_len(&mut meta, number(&type_meta, "apiVersion"), api_version.as_bytes());
    put_len(&mut meta, number(&type_meta, "kind"), kind.as_bytes());
    let mut head = Vec::with_capacity(meta.len() + 24);
    head.extend_from_slice(&MAGIC);
    put_len(&mut head, number(&unknown, "typeMeta"), &meta);
    crate::wire::put_key(&mut head, number(&unknown, "raw"), crate::wire::WireType::Len);
    crate::wire::put_varint(&mut head, raw_len as u64);
    // Go writes both strings, empty.
    let mut tail = Vec::new();
    put_len(&mut tail, number(&unknown, "contentEncoding"), b"");
    put_len(&mut tail, number(&unknown, "contentType"), b"");
    (head, tail)
}

/// One line of a JSON watch stream (`{"type": ..., "object": ...}`) as
/// a protobuf watch frame ([`watch_frame`]); the error says why it has none.
pub fn watch_line_frame(line: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let event: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let event_type = event.get("type").and_then(Value::as_str).unwrap_or_default();
    watch_frame(event_type, &event["object"]).map_err(|e| e.to_string())
}

/// One frame of a protobuf watch as kube-apiserver writes it: a 4-byte
/// big-endian length, then a `metav1.WatchEvent` message (no envelope) whose
/// `object.raw` holds the object as a whole protobuf body (`k8s\0` +
/// `runtime.Unknown`).
pub fn watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>> {
    let event = runtime_message("WatchEvent");
    let raw_extension = runtime_message("RawExtension");
    let mut extension = Vec::new();
    put_len(&mut extension, number(&raw_extension, "raw"), &encode(object)?);
    let mut message = Vec::with_capacity(extension.len() + 32);
    put_len(&mut message, number(&event, "type"), event_type.as_bytes());
    put_len(&mut message, number(&event, "object"), &extension);
    let mut frame = Vec::with_capacity(message.len() + 4);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    Ok(frame)
}

/// Splits the first length-prefixed frame off a watch stream: the
/// `WatchEvent` message and the rest, or `None` while the frame is incomplete.
pub fn split_frame(stream: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(stream.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    (stream.len() >= end).then(|| (&stream[4..end], &stream[end..]))
}

/// Decodes one `WatchEvent` message (a frame without its length): the event
/// type and the object's JSON.
pub fn decode_watch_event(message: &[u8]) -> Result<(String, Value)> {
    let event = runtime_message("WatchEvent");
    let raw_extension = runtime_message("RawExtension");
    let mut event_type = String::new();
    let mut object = Value::Null;
    let mut reader = Reader::new(message);
    while !reader.done() {
        match reader.key()? {
            (f, WireType::Len) if f == number(&event, "type") => {
                event_type = String::from_utf8(reader.bytes()?.to_vec()).map_err(|e| Error::Malformed(e.to_string()))?;
            }
            (f, WireType::Len) if f == number(&event, "object") => {
                let mut inner = Reader::new(reader.bytes()?);
                while !inner.done() {
                    match inner.key()? {
                        (f, WireType::Len) if f == number(&raw_extension, "raw") => object = decode(inner.bytes()?)?,
                        (_, wire) => inner.skip(wire)?,
                    }
                }
            }
            (_, wire) => reader.skip(wire)?,
        }
    }
    Ok((event_type, object))
}
