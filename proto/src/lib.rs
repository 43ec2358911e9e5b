//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) to and from
//! Kubernetes JSON, for every built-in type of the Kubernetes API, as
//! kube-apiserver reads and writes them
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>).
//!
//! Message layouts are never written by hand: `build.rs` compiles the Kubernetes
//! API's own `.proto` files (those of 1.35, as the `k8s-rs-pb` package ships
//! them) to a FileDescriptorSet and the
//! codec walks those descriptors (prost-reflect) directly between the wire
//! format and `serde_json::Value`. Why not the kube-rs project's `k8s-pb`
//! crate: it ships prost structs only, without descriptors, JSON names or
//! serde, so a generic conversion to Kubernetes JSON cannot be built on it;
//! prost-reflect is maintained beside prost and protox compiles `.proto` files
//! without `protoc`.
//!
//! - [`wire`]: varints, keys, length-delimited fields.
//! - `json`: one message between the wire format and Kubernetes JSON, with the
//!   few types whose JSON is not their message (`Time`, `MicroTime`,
//!   `Duration`, `Quantity`, `IntOrString`, `RawExtension`, `FieldsV1`,
//!   named slices).
//! - [`duration`]: Go's `time.Duration` text.
//! - `envelope`: the `k8s\0` magic, the `runtime.Unknown` envelope, type
//!   lookup by apiVersion and kind, watch frames.
//! - `list`: a `*List` encoded from its JSON text item by item.

pub mod duration;
mod envelope;
mod json;
mod list;
pub mod wire;

pub use envelope::{decode, decode_watch_event, encode, has_message, split_frame, watch_frame, watch_line_frame, MAGIC};
pub use list::{encode_json_list, encode_json_list_from, ListEncoder, PIECE_BYTES};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type kube-apiserver answers a protobuf watch with.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// What can go wrong between protobuf and JSON.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not start with the 4 bytes `k8s\0`.
    #[error("the body does not start with the Kubernetes protobuf magic number")]
    NoMagic,
    /// The bytes are not a valid message of the type.
    #[error("malformed protobuf: {0}")]
    Malformed(String),
    /// No protobuf message for this apiVersion and kind: a custom resource,
    /// or a type this build does not know.
    #[error("no protobuf serialization is available for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// A JSON value that does not fit its field.
    #[error("{path}: {message}")]
    Json {
        /// The field, `spec.template.spec.containers`.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// An envelope this codec does not read (a content encoding).
    #[error("unsupported protobuf envelope: {0}")]
    Unsupported(String),
}

impl Error {
    /// The same error one field further out (`containers` -> `spec.containers`).
    pub(crate) fn at(self, field: &str) -> Error {
        match self {
            Error::Json { path, message } if path.is_empty() => Error::Json { path: field.to_string(), message },
            Error::Json { path, message } => Error::Json { path: format!("{field}.{path}"), message },
            other => other,
        }
    }

    pub(crate) fn json(message: impl Into<String>) -> Error {
        Error::Json { path: String::new(), message: message.into() }
    }
}

/// The result of this crate's functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a `Content-Type` names Kubernetes protobuf (parameters aside).
pub fn is_protobuf(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Whether a client asks for protobuf before anything else: the first media
/// range of its `Accept` header is Kubernetes protobuf of the object itself
/// (no `as=` conversion such as Table or PartialObjectMetadata).
pub fn prefers_protobuf(accept: &str) -> bool {
    let Some(first) = accept.split(',').next() else {
        return false;
    };
    let mut parts = first.split(';');
    let media = parts.next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case(MEDIA_TYPE) && !parts.any(|p| p.trim().to_ascii_lowercase().starts_with("as="))
}

#[cfg(test)]
mod tests;
