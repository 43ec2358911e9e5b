//! Turning results into HTTP responses: Kubernetes `Status` errors and JSON.

use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use kubefold_engine::status::Status;

/// The content type of JSON responses.
pub const JSON: &str = "application/json";

/// A Kubernetes Status error as an HTTP response.
pub fn status(status: &Status) -> HttpResponse {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(code);
    response.content_type(JSON);
    if let Some(retry) = status.details.as_ref().and_then(|d| d.retry_after_seconds) {
        response.insert_header(("Retry-After", retry.to_string()));
    }
    response.body(status.to_json().to_string())
}

/// A JSON body with 200 OK.
pub fn json_bytes(body: impl Into<actix_web::web::Bytes>) -> HttpResponse {
    HttpResponse::Ok().content_type(JSON).body(body.into())
}

/// A JSON value with 200 OK.
pub fn json(value: &serde_json::Value) -> HttpResponse {
    json_bytes(value.to_string().into_bytes())
}

/// An aggregated discovery document with its Content-Type.
pub fn aggregated(value: &serde_json::Value) -> HttpResponse {
    HttpResponse::Ok().content_type(crate::discovery::AGGREGATED_CONTENT_TYPE).body(value.to_string())
}
