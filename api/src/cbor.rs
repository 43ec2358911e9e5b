//! CBOR (KEP-4222) is not served: a CBOR request body is refused with 415
//! Unsupported Media Type, which makes client-go (1.32+ with CBOR enabled)
//! fall back to JSON, and a client that accepts nothing but CBOR gets 406
//! Not Acceptable; kubefold never sends CBOR. Both answers are the `Status`
//! objects kube-apiserver gives with its CBOR feature off.

use actix_web::http::header::{ACCEPT, CONTENT_TYPE};
use actix_web::HttpRequest;
use kubefold_engine::status::Status;

/// The media types kubefold reads and writes.
const SERVED: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// Whether a media type is CBOR (`application/cbor`, `application/apply-patch+cbor`,
/// `application/cbor-seq`).
fn is_cbor(media: &str) -> bool {
    let media = media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/cbor" || media == "application/cbor-seq" || media.ends_with("+cbor")
}

/// 415 for a CBOR body, 406 for an Accept header that names only CBOR.
pub fn refuse(req: &HttpRequest) -> Result<(), Status> {
    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if is_cbor(header(CONTENT_TYPE)) {
        return Err(Status::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: {SERVED}")));
    }
    let accept = header(ACCEPT);
    let mut ranges = accept.split(',').map(str::trim).filter(|r| !r.is_empty()).peekable();
    if ranges.peek().is_some() && ranges.all(is_cbor) {
        return Err(Status::new(406, "NotAcceptable", format!("only the following media types are accepted: {SERVED}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> HttpRequest {
        let mut req = actix_web::test::TestRequest::default();
        for (name, value) in headers {
            req = req.insert_header((*name, *value));
        }
        req.to_http_request()
    }

    #[test]
    fn cbor_bodies_are_415_and_cbor_only_accept_is_406() {
        let body = refuse(&request(&[("content-type", "application/cbor")])).unwrap_err();
        assert_eq!((body.code, body.reason.as_str()), (415, "UnsupportedMediaType"));
        let patch = refuse(&request(&[("content-type", "application/apply-patch+cbor")])).unwrap_err();
        assert_eq!(patch.code, 415);
        let accept = refuse(&request(&[("accept", "application/cbor")])).unwrap_err();
        assert_eq!((accept.code, accept.reason.as_str()), (406, "NotAcceptable"));
        assert_eq!(refuse(&request(&[("accept", "application/cbor;stream=watch, application/cbor-seq")])).unwrap_err().code, 406);
        // client-go with CBOR enabled accepts JSON too: served as JSON.
        assert!(refuse(&request(&[("accept", "application/cbor, application/json")])).is_ok());
        assert!(refuse(&request(&[("accept", "*/*")])).is_ok());
        assert!(refuse(&request(&[])).is_ok());
        assert!(refuse(&request(&[("content-type", "application/json"), ("accept", "application/vnd.kubernetes.protobuf")])).is_ok());
    }
}
