//! Kubernetes `Status` errors, as kube-apiserver returns them
//! (k8s.io/apimachinery/pkg/api/errors).

use serde::{Deserialize, Serialize};

/// A `meta.k8s.io/v1` Status of failure, ready to serialise as a response
/// body or inside a watch `ERROR` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, `Expired` ...).
    pub reason: String,
    /// A message a person can act on.
    pub message: String,
    /// Optional details: name, group, kind, retry-after.
    pub details: Option<StatusDetails>,
}

/// `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    /// Name of the object concerned.
    pub name: String,
    /// API group of the object concerned.
    pub group: String,
    /// Resource (plural) of the object concerned; served as `kind` like kube-apiserver does.
    pub kind: String,
    /// Seconds after which the client may retry.
    pub retry_after_seconds: Option<u32>,
}

impl Status {
    /// A status with the given code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Status {
        Status { code, reason: reason.to_string(), message: message.into(), details: None }
    }

    /// Adds details naming the object.
    pub fn with_details(mut self, group: &str, resource: &str, name: &str) -> Status {
        self.details = Some(StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: resource.to_string(),
            retry_after_seconds: self.details.and_then(|d| d.retry_after_seconds),
        });
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object: `pods "web-0" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Status {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        Status::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .with_details(group, resource, name)
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn path_not_found() -> Status {
        Status::new(404, "NotFound", "the server could not find the requested resource")
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Status {
        Status::new(405, "MethodNotAllowed", message)
    }

    /// 409 Conflict.
    pub fn conflict(message: impl Into<String>) -> Status {
        Status::new(409, "Conflict", message)
    }

    /// 410 Expired (`too old resource version`).
    pub fn expired(message: impl Into<String>) -> Status {
        Status::new(410, "Expired", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Status {
        Status::new(503, "ServiceUnavailable", message)
    }

    /// 504 Timeout for a resourceVersion the index has not reached yet
    /// (kube-apiserver's storage.NewTooLargeResourceVersionError).
    pub fn too_large_resource_version(requested: u64, current: u64, retry_after_seconds: u32) -> Status {
        let mut status = Status::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        );
        status.details = Some(StatusDetails {
            retry_after_seconds: Some(retry_after_seconds),
            ..StatusDetails::default()
        });
        status
    }

    /// The Status object as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if let Some(s) = d.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), s.into());
            }
            out["details"] = serde_json::Value::Object(details);
        }
        out
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_kube_apiserver() {
        let s = Status::not_found("apps", "deployments", "web").to_json();
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "deployments");
        let s = Status::not_found("", "pods", "web-0").to_json();
        assert_eq!(s["message"], "pods \"web-0\" not found");
    }

    #[test]
    fn too_large_rv_carries_retry_after() {
        let s = Status::too_large_resource_version(90, 10, 1).to_json();
        assert_eq!(s["code"], 504);
        assert_eq!(s["reason"], "Timeout");
        assert_eq!(s["details"]["retryAfterSeconds"], 1);
        assert!(s["message"].as_str().unwrap().contains("Too large resource version"));
    }
}
