//! Karmada's proxy paths: the whole API is also served under
//! `/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy/`, where
//! karmada-search serves its global proxy, so a kubeconfig made for Karmada
//! works with only its server changed.
//!
//! The [`strip`] middleware runs before every other layer and rewrites such
//! a request's path to the plain one (`.../proxy/api/v1/pods` becomes
//! `/api/v1/pods`), so request parsing ([`crate::request`]),
//! authentication, authorization, routing and metrics all see the path
//! kube-apiserver would. The group's own discovery documents ([`group`],
//! [`resource_list`]) let kube-apiserver's aggregator serve kubefold as the
//! APIService `v1alpha1.search.karmada.io`.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Uri;
use actix_web::middleware::Next;

/// The prefix of Karmada's global proxy (karmada-search's `proxying`
/// subresource of the `karmada` proxy).
pub const KARMADA_PROXY_PREFIX: &str = "/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy";

/// The API group of Karmada's proxy.
pub const GROUP: &str = "search.karmada.io";
/// Its version.
pub const VERSION: &str = "v1alpha1";

/// `/apis/search.karmada.io`, when no member's type has that group: the
/// group of the proxy, so that kube-apiserver's aggregator can serve
/// kubefold as the APIService `v1alpha1.search.karmada.io`.
pub fn group(group: &str) -> Option<serde_json::Value> {
    let version = serde_json::json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    (group == GROUP).then(|| serde_json::json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [version], "preferredVersion": version}))
}

/// `/apis/search.karmada.io/v1alpha1`, when no member's type has that
/// group: the `proxying` resource and its `proxy` subresource, as
/// karmada-search lists them.
pub fn resource_list(group: &str, version: &str) -> Option<serde_json::Value> {
    (group == GROUP && version == VERSION).then(|| {
        serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
            "resources": [
                {"name": "proxying", "singularName": "proxying", "namespaced": false, "kind": "Proxying", "verbs": []},
                {"name": "proxying/proxy", "singularName": "", "namespaced": false, "kind": "Proxying", "verbs": ["create", "delete", "get", "patch", "update"]},
            ],
        })
    })
}

/// The plain path of a path under [`KARMADA_PROXY_PREFIX`]: the rest after
/// it (`/` for the prefix itself); `None` for any other path.
pub fn plain_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(KARMADA_PROXY_PREFIX)?;
    match rest {
        "" => Some("/"),
        r if r.starts_with('/') => Some(r),
        // `.../proxyother`: another path.
        _ => None,
    }
}

/// Rewrites a request under [`KARMADA_PROXY_PREFIX`] to its plain path
/// (query kept) before the layers after it read the path.
pub async fn strip(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Some(uri) = plain_uri(req.uri()) {
        req.match_info_mut().get_mut().update(&uri);
        req.head_mut().uri = uri;
    }
    next.call(req).await
}

/// The request URI with its path made plain, if it is under the prefix.
fn plain_uri(uri: &Uri) -> Option<Uri> {
    let plain = plain_path(uri.path())?;
    let path_and_query = match uri.query() {
        Some(q) => format!("{plain}?{q}"),
        None => plain.to_string(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test as http;
    use actix_web::{web, App, HttpRequest, HttpResponse};

    #[test]
    fn plain_paths() {
        assert_eq!(plain_path("/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy/api/v1/pods"), Some("/api/v1/pods"));
        assert_eq!(plain_path("/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy"), Some("/"));
        assert_eq!(plain_path("/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy/"), Some("/"));
        assert_eq!(plain_path("/apis/search.karmada.io/v1alpha1/proxying/karmada/proxyx/api"), None);
        assert_eq!(plain_path("/api/v1/pods"), None);
        assert_eq!(plain_path("/apis/search.karmada.io/v1alpha1"), None);
        assert_eq!(group(GROUP).unwrap()["preferredVersion"]["groupVersion"], "search.karmada.io/v1alpha1");
        assert_eq!(resource_list(GROUP, VERSION).unwrap()["resources"][1]["name"], "proxying/proxy");
        assert!(group("apps").is_none() && resource_list(GROUP, "v1").is_none());
    }

    #[actix_web::test]
    async fn later_layers_and_routes_see_the_plain_path_and_query() {
        let app = http::init_service(
            App::new()
                .wrap(actix_web::middleware::from_fn(crate::request::describe))
                .wrap(actix_web::middleware::from_fn(strip))
                .route("/version", web::get().to(|| async { HttpResponse::Ok().body("version") }))
                .default_service(web::to(|req: HttpRequest| async move {
                    use actix_web::HttpMessage;
                    let info = crate::RequestInfo::of(&req.extensions(), req.method(), req.path(), req.query_string());
                    HttpResponse::Ok().body(format!("{} {} {} {}", req.path(), req.query_string(), info.verb, info.resource))
                })),
        )
        .await;
        let get = |p: &str| http::TestRequest::get().uri(p).to_request();
        let body = http::call_and_read_body(&app, get(&format!("{KARMADA_PROXY_PREFIX}/version"))).await;
        assert_eq!(body, "version");
        let body = http::call_and_read_body(&app, get(&format!("{KARMADA_PROXY_PREFIX}/api/v1/namespaces/a/pods?watch=true"))).await;
        assert_eq!(body, "/api/v1/namespaces/a/pods watch=true watch pods");
        let body = http::call_and_read_body(&app, get("/api/v1/pods?limit=1")).await;
        assert_eq!(body, "/api/v1/pods limit=1 list pods");
    }
}
