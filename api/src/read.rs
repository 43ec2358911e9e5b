//! Reads over HTTP: list and get, JSON or Table. A handler translates only:
//! the request's scope and query in, [`crate::query`] reads the snapshot
//! and the store, the answer out as a response (gzip-encoded where the
//! client takes it).

use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;
use kubefold_engine::status::Status;

use crate::query::list::Body;
use crate::query::{Query, ReadAt};
use crate::respond;
use crate::ApiState;

pub use crate::query::{resolve_name, Filter, IncludeObject, Scope, TablePrinter, CLUSTER_SEARCH_KEY};

/// Whether the client asked for a Table (server-side printing).
pub fn wants_table(req: &HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept.split(',').next().is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
        })
}

/// Serves a get.
pub fn get(state: &ApiState, req: &HttpRequest, scope: &Scope, name: &str, query: &Query) -> Result<HttpResponse, Status> {
    let body = crate::query::get::get(&state.reader(), scope, name, query, wants_table(req))?;
    Ok(respond::json_bytes(body))
}

/// Serves a list (all pages read at the first page's snapshot).
pub fn list(state: &ApiState, req: &HttpRequest, scope: &Scope, query: &Query, read_at: ReadAt) -> Result<HttpResponse, Status> {
    let list = crate::query::list::list(&state.reader(), scope, query, read_at, wants_table(req))?;
    // A protobuf list is encoded (and compressed) whole by `protobuf::response`.
    let gzip = state.config.compress_lists && crate::gzip::accepted(req.headers()) && !crate::protobuf::wanted(req, &scope.resource);
    Ok(match list.into_body(gzip)? {
        Body::Whole { bytes, gzip: true } => gzipped(&mut HttpResponse::Ok()).content_type("application/json").body(bytes),
        Body::Whole { bytes, gzip: false } => respond::json_bytes(bytes),
        Body::Streamed { chunks, gzip } => {
            let mut response = HttpResponse::Ok();
            if gzip {
                gzipped(&mut response);
            }
            response.content_type("application/json").streaming(chunks.map(|chunk| chunk.map_err(actix_web::error::ErrorInternalServerError)))
        }
    })
}

/// Marks a response as gzip-encoded, as kube-apiserver does
/// (`Content-Encoding: gzip`, `Vary: Accept-Encoding`).
fn gzipped(response: &mut actix_web::HttpResponseBuilder) -> &mut actix_web::HttpResponseBuilder {
    response.insert_header((actix_web::http::header::CONTENT_ENCODING, "gzip")).insert_header((actix_web::http::header::VARY, "Accept-Encoding"))
}
