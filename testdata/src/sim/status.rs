//! Kubernetes `Status` errors of the simulator, with kube-apiserver's codes,
//! reasons and messages (`k8s.io/apimachinery/pkg/api/errors`).
//!
//! Every error a client of the simulator sees is one of these, rendered as a
//! `{"kind":"Status","apiVersion":"v1","status":"Failure",...}` object with the
//! matching HTTP code, as described in the Kubernetes "API Concepts" page
//! (section "Responses" / "Status").

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use kubefold_engine::resources::ResourceType;
use serde_json::{json, Map, Value};

/// The group and plural that kube-apiserver prints in messages
/// (`pods`, `deployments.apps`) and puts into `details`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resource {
    /// API group, empty for the core group.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

impl Resource {
    /// The resource of a catalog type.
    pub fn of(resource_type: &ResourceType) -> Resource {
        Resource { group: resource_type.group.clone(), plural: resource_type.plural.clone() }
    }

    /// `pods` or `deployments.apps`, as `schema.GroupResource.String()` prints it.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One field error of a 422 Invalid response (`metav1.StatusCause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, ...
    pub reason: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The message of the field error without the field, e.g.
    /// `Invalid value: "x": must be ...`.
    pub message: String,
}

impl Cause {
    /// `field: Invalid value: "value": detail` (`field.Invalid`).
    pub fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid".into(),
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", json!(value)),
        }
    }

    /// `field: Required value: detail` (`field.Required`).
    pub fn required(field: &str, detail: &str) -> Cause {
        let message = if detail.is_empty() { "Required value".to_string() } else { format!("Required value: {detail}") };
        Cause { reason: "FieldValueRequired".into(), field: field.into(), message }
    }

    /// `field: Forbidden: detail` (`field.Forbidden`).
    pub fn forbidden(field: &str, detail: &str) -> Cause {
        Cause { reason: "FieldValueForbidden".into(), field: field.into(), message: format!("Forbidden: {detail}") }
    }

    /// `field: Unsupported value: "v": supported values: ...` (`field.NotSupported`).
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let list: Vec<String> = supported.iter().map(|s| json!(s).to_string()).collect();
        Cause {
            reason: "FieldValueNotSupported".into(),
            field: field.into(),
            message: format!("Unsupported value: {}: supported values: {}", json!(value), list.join(", ")),
        }
    }

    /// The text `field: message` used in the Status message.
    fn text(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// An error answered as a Kubernetes `Status`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist (`errors.NewNotFound`).
    #[error("{} \"{name}\" not found", resource.qualified())]
    NotFound {
        /// The resource looked up.
        resource: Resource,
        /// The name looked up.
        name: String,
    },
    /// 404 for a path the server does not serve.
    #[error("the server could not find the requested resource")]
    PathNotFound,
    /// 409: create of an existing name (`errors.NewAlreadyExists`).
    #[error("{} \"{name}\" already exists", resource.qualified())]
    AlreadyExists {
        /// The resource created.
        resource: Resource,
        /// The name that exists.
        name: String,
    },
    /// 409: a resourceVersion or UID precondition failed (`errors.NewConflict`).
    #[error("Operation cannot be fulfilled on {} \"{name}\": {detail}", resource.qualified())]
    Conflict {
        /// The resource written.
        resource: Resource,
        /// The object's name.
        name: String,
        /// Why, e.g. `the object has been modified; please apply your changes to the latest version and try again`.
        detail: String,
    },
    /// 409: a server-side apply sets fields another manager owns (`errors.NewApplyConflict`).
    #[error("{message}")]
    ApplyConflict {
        /// `Apply failed with 1 conflict: conflict with "m": .spec.replicas`.
        message: String,
        /// One `FieldManagerConflict` cause per conflicting field.
        causes: Vec<Cause>,
    },
    /// 400: malformed request (`errors.NewBadRequest`).
    #[error("{0}")]
    BadRequest(String),
    /// 422: the object fails validation (`errors.NewInvalid`).
    #[error("{} \"{name}\" is invalid: {}", qualified_kind(group, kind), causes_text(.causes))]
    Invalid {
        /// API group of the kind, empty for core.
        group: String,
        /// The kind, e.g. `Pod` (Invalid names the kind, not the resource).
        kind: String,
        /// The object's name.
        name: String,
        /// The field errors.
        causes: Vec<Cause>,
    },
    /// 422 of a patch that does not apply, as kube-apiserver answers it
    /// (`errors.NewGenericServerResponse(422, ...)`): a generic message, the
    /// patch error in `details.causes`.
    #[error("the server rejected our request due to an error in our request")]
    PatchFailed(String),
    /// 405: the verb is not served on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 415: unknown patch or body content type.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    /// 406: the Accept header names no media type the server writes (CBOR only).
    #[error("only the following media types are accepted: {0}")]
    NotAcceptable(String),
    /// 410: a resourceVersion or continue token older than the retained history.
    #[error("{message}")]
    Expired {
        /// The message, e.g. `too old resource version: 5 (100)`.
        message: String,
        /// A continue token to carry on with an inconsistent list, when paging.
        continue_token: Option<String>,
    },
    /// 504: a resourceVersion the simulator has not reached within 3 seconds.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The version asked for.
        requested: u64,
        /// The simulator's head version.
        current: u64,
    },
    /// 403: the request is refused, e.g. create in a terminating namespace.
    #[error("{message}")]
    Forbidden {
        /// The resource written.
        resource: Resource,
        /// The object's name.
        name: String,
        /// The full message.
        message: String,
    },
    /// 413: the request body exceeds kube-apiserver's 3 MiB limit.
    #[error("limit is {0}")]
    RequestEntityTooLarge(usize),
    /// 500: a bug in the simulator.
    #[error("Internal error occurred: {0}")]
    Internal(String),
}

/// `Pod` or `Deployment.apps`, as `schema.GroupKind.String()` prints it.
fn qualified_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

fn causes_text(causes: &[Cause]) -> String {
    match causes {
        [one] => one.text(),
        many => format!("[{}]", many.iter().map(Cause::text).collect::<Vec<_>>().join(", ")),
    }
}

/// Result of simulator operations answered as `Status`.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    /// `the object has been modified` conflict of an update with a stale resourceVersion.
    pub fn stale(resource: Resource, name: &str) -> ApiError {
        ApiError::Conflict {
            resource,
            name: name.into(),
            detail: "the object has been modified; please apply your changes to the latest version and try again"
                .into(),
        }
    }

    /// 422 Invalid of one object with field errors.
    pub fn invalid(resource_type: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::Invalid {
            group: resource_type.group.clone(),
            kind: resource_type.kind.clone(),
            name: name.into(),
            causes,
        }
    }

    /// 422 Invalid of the request's `ListOptions` (group `meta.k8s.io`, empty name).
    pub fn invalid_list_options(causes: Vec<Cause>) -> ApiError {
        ApiError::Invalid { group: "meta.k8s.io".into(), kind: "ListOptions".into(), name: String::new(), causes }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => 409,
            ApiError::BadRequest(_) => 400,
            ApiError::Invalid { .. } | ApiError::PatchFailed(_) => 422,
            ApiError::MethodNotAllowed => 405,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable(_) => 406,
            ApiError::Expired { .. } => 410,
            ApiError::TooLargeResourceVersion { .. } => 504,
            ApiError::Forbidden { .. } => 403,
            ApiError::RequestEntityTooLarge(_) => 413,
            ApiError::Internal(_) => 500,
        }
    }

    /// The `reason` field.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Invalid { .. } | ApiError::PatchFailed(_) => "Invalid",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::Expired { .. } => "Expired",
            ApiError::TooLargeResourceVersion { .. } => "Timeout",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::Internal(_) => "InternalError",
        }
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut details = Map::new();
        let named = |details: &mut Map<String, Value>, resource: &Resource, name: &str| {
            details.insert("name".into(), json!(name));
            if !resource.group.is_empty() {
                details.insert("group".into(), json!(resource.group));
            }
            details.insert("kind".into(), json!(resource.plural));
        };
        match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. }
            | ApiError::Forbidden { resource, name, .. } => named(&mut details, resource, name),
            ApiError::Invalid { group, kind, name, causes } => {
                if !name.is_empty() {
                    details.insert("name".into(), json!(name));
                }
                if !group.is_empty() {
                    details.insert("group".into(), json!(group));
                }
                details.insert("kind".into(), json!(kind));
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            ApiError::ApplyConflict { causes, .. } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            ApiError::PatchFailed(detail) => {
                details.insert("causes".into(), json!([{"reason": "UnexpectedServerResponse", "message": detail}]));
            }
            ApiError::TooLargeResourceVersion { .. } => {
                details.insert(
                    "causes".into(),
                    json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
                );
                details.insert("retryAfterSeconds".into(), json!(1));
            }
            _ => {}
        }
        let mut metadata = Map::new();
        if let ApiError::Expired { continue_token: Some(token), .. } = self {
            metadata.insert("continue".into(), json!(token));
        }
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), Value::Object(metadata));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.to_string()));
        status.insert("reason".into(), json!(self.reason()));
        if !details.is_empty() || matches!(self, ApiError::PathNotFound) {
            status.insert("details".into(), Value::Object(details));
        }
        status.insert("code".into(), json!(self.code()));
        Value::Object(status)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.content_type("application/json");
        if let ApiError::TooLargeResourceVersion { .. } = self {
            response.insert_header(("Retry-After", "1"));
        }
        response.body(self.to_status().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Resource {
        Resource { group: String::new(), plural: "pods".into() }
    }

    #[test]
    fn conflict_has_kube_apiserver_message_and_details() {
        let status = ApiError::stale(pods(), "web-0").to_status();
        assert_eq!(
            status["message"],
            "Operation cannot be fulfilled on pods \"web-0\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(status["reason"], "Conflict");
        assert_eq!(status["code"], 409);
        assert_eq!(status["details"], json!({"name": "web-0", "kind": "pods"}));
    }

    #[test]
    fn group_resources_are_qualified() {
        let deployments = Resource { group: "apps".into(), plural: "deployments".into() };
        let status = ApiError::NotFound { resource: deployments, name: "x".into() }.to_status();
        assert_eq!(status["message"], "deployments.apps \"x\" not found");
        assert_eq!(status["details"], json!({"name": "x", "group": "apps", "kind": "deployments"}));
    }

    #[test]
    fn invalid_lists_causes() {
        let error = ApiError::Invalid {
            group: String::new(),
            kind: "Pod".into(),
            name: "A".into(),
            causes: vec![Cause::invalid("metadata.name", "A", "bad")],
        };
        let status = error.to_status();
        assert_eq!(status["message"], "Pod \"A\" is invalid: metadata.name: Invalid value: \"A\": bad");
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
    }

    #[test]
    fn expired_carries_continue_token() {
        let error = ApiError::Expired { message: "too old resource version: 1 (9)".into(), continue_token: Some("abc".into()) };
        let status = error.to_status();
        assert_eq!(status["metadata"]["continue"], "abc");
        assert_eq!(status["code"], 410);
        assert!(status.get("details").is_none());
    }
}
