//! What a request asks for, parsed once: [`RequestInfo`], modelled on
//! kube-apiserver's RequestInfo (k8s.io/apiserver/pkg/endpoints/request),
//! plus kubefold's member scope (`/clusters/{c}`).
//!
//! The [`describe`] middleware parses every request's path, method and
//! query into a [`RequestInfo`] before anything else reads them and stores
//! it in the request extensions; authentication and authorization
//! ([`crate::auth`]), routing and the request metrics read it there
//! ([`RequestInfo::of`]). The parse itself ([`RequestInfo::new`]) is a pure
//! function of the method, the raw path and the query string, with no
//! catalog: like kube-apiserver, `/namespaces/{ns}/{r}` is a namespaced
//! resource `r` unless `r` is a subresource of the namespace (`status`,
//! `finalize`). Routing resolves that one ambiguity against the served
//! types ([`RequestInfo::resource_path`]) without parsing again.
//!
//! Where kubefold has always answered differently from kube-apiserver, the
//! parse keeps kubefold's answer:
//! - a path with segments past the subresource
//!   (`/api/v1/nodes/{n}/proxy/{rest}`) is not a resource request;
//! - the deprecated verb prefixes (`/api/v1/watch/...`, `/api/v1/proxy/...`)
//!   are not recognised: `watch` there is a resource name like any other;
//! - a `metadata.name` field selector does not name the object of a list;
//! - a path with an empty, `.` or `..` segment, or whose percent-decoding
//!   fails or yields a `/`, is not a resource request (routing answers it
//!   400 or 404).
//!
//! ```text
//! [/clusters/{cluster}]/api/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//! [/clusters/{cluster}]/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//! ```

use actix_web::body::MessageBody;
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::HttpMessage;
use kubefold_engine::names::{self, RequestedName};

use crate::path::{self, ApiPath, ResourcePath};

/// Path segments after `/namespaces/{name}/` that are subresources of the
/// namespace rather than a namespaced resource (kube-apiserver's
/// `namespaceSubresources`).
pub const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The Kubernetes verbs of resource requests.
pub const RESOURCE_VERBS: [&str; 8] = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

/// What a request asks for, in Kubernetes terms (kube-apiserver's
/// RequestInfo, plus the member scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path names a resource of the Kubernetes API (as opposed
    /// to discovery, `/version`, `/admin/...`, `/metrics` or an unknown path).
    pub is_resource_request: bool,
    /// The path as requested (not decoded).
    pub path: String,
    /// For resource requests: get, list, watch, create, update, patch,
    /// delete or deletecollection, from the method, whether the path names
    /// an object and the `watch` parameter (another method: its lowercase
    /// name). For other requests: the lowercase HTTP method, as RBAC's
    /// nonResourceURLs.
    pub verb: String,
    /// `api` or `apis` for resource requests; empty otherwise.
    pub api_prefix: String,
    /// API group; empty for the core group and for other requests.
    pub api_group: String,
    /// API version; empty for other requests.
    pub api_version: String,
    /// The namespace: the one the path is under, or a namespace's own name
    /// for a `namespaces` object (`/api/v1/namespaces/{ns}[/status]`).
    pub namespace: Option<String>,
    /// Plural resource name; empty for other requests.
    pub resource: String,
    /// Subresource (`status`, `scale`, `log`), if any.
    pub subresource: Option<String>,
    /// Object name as requested, if the path names one.
    pub name: Option<String>,
    /// The path segments from the resource on: `[resource, name, subresource]`
    /// as far as the path goes (`["namespaces", ns, "status"]` for a
    /// namespace's subresource); empty for other requests.
    pub parts: Vec<String>,
    /// The member of a `/clusters/{cluster}/...` path: one member, original names.
    pub cluster: Option<String>,
    /// Whether the query asks for a watch, whatever the path (`watch=true`,
    /// or another value Go's strconv.ParseBool reads as true): kubefold's
    /// admin streams are watches too.
    pub watch: bool,
    /// The percent-decoded path; `None` when it cannot be decoded or
    /// encodes a `/` (as kube-apiserver's router does not take `%2F` for a
    /// separator).
    pub decoded_path: Option<String>,
    /// What the decoded path asks for, in kubefold's terms; `None` for a
    /// path kubefold does not know.
    pub api_path: Option<ApiPath>,
}

impl RequestInfo {
    /// Parses a request from its method, raw path and raw query string.
    pub fn new(method: &Method, raw_path: &str, query: &str) -> RequestInfo {
        let http_verb = method.as_str().to_ascii_lowercase();
        let decoded_path = decode_path(raw_path);
        let cluster = decoded_path.as_deref().and_then(cluster_scope).map(str::to_string);
        let api_path = decoded_path.as_deref().and_then(|p| path::parse(p, |_, _, r| !NAMESPACE_SUBRESOURCES.contains(&r)));
        let mut info = RequestInfo {
            is_resource_request: false,
            path: raw_path.to_string(),
            verb: http_verb,
            api_prefix: String::new(),
            api_group: String::new(),
            api_version: String::new(),
            namespace: None,
            resource: String::new(),
            subresource: None,
            name: None,
            parts: Vec::new(),
            cluster,
            watch: is_watch(query),
            decoded_path,
            api_path,
        };
        let Some(ApiPath::Resource(r)) = &info.api_path else {
            return info;
        };
        let r = r.clone();
        info.is_resource_request = true;
        info.api_prefix = if r.group.is_empty() { "api" } else { "apis" }.to_string();
        info.verb = resource_verb(method, r.name.is_some(), info.watch).unwrap_or(info.verb);
        info.parts = [Some(&r.resource), r.name.as_ref(), r.subresource.as_ref()].into_iter().flatten().cloned().collect();
        info.namespace = match (&r.namespace, r.resource.as_str()) {
            (None, "namespaces") => r.name.clone(),
            (namespace, _) => namespace.clone(),
        };
        info.api_group = r.group;
        info.api_version = r.version;
        info.resource = r.resource;
        info.subresource = r.subresource;
        info.name = r.name;
        info
    }

    /// The request's description from `extensions` (put there by
    /// [`describe`]), else parsed from `method`, `raw_path` and `query`
    /// (a server built without [`describe`]).
    pub fn of(extensions: &Extensions, method: &Method, raw_path: &str, query: &str) -> RequestInfo {
        extensions.get::<RequestInfo>().cloned().unwrap_or_else(|| RequestInfo::new(method, raw_path, query))
    }

    /// The member a resource request is about: the `/clusters/{c}` scope,
    /// else the suffix of a qualified object name; `None` when the request
    /// spans the fleet or names an object by its bare name.
    pub fn member(&self) -> Option<&str> {
        if !self.is_resource_request {
            return None;
        }
        self.cluster.as_deref().or_else(|| match self.name.as_deref().map(names::parse) {
            Some(RequestedName::Qualified { cluster, .. }) => Some(cluster),
            _ => None,
        })
    }

    /// `pods` or `pods/log`, as RBAC names a resource.
    pub fn resource_and_subresource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The key of the requested type, `v1/pods` or `apps/v1/deployments`
    /// (`ResourceType::key`); empty for other requests.
    pub fn type_key(&self) -> String {
        match (self.is_resource_request, self.api_group.is_empty()) {
            (false, _) => String::new(),
            (true, true) => format!("{}/{}", self.api_version, self.resource),
            (true, false) => format!("{}/{}/{}", self.api_group, self.api_version, self.resource),
        }
    }

    /// The verb of the request metrics: a resource verb for the methods
    /// kubefold serves on resources, else `other`.
    pub fn metrics_verb(&self, method: &Method) -> &'static str {
        let served_method = matches!(*method, Method::GET | Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
        match RESOURCE_VERBS.iter().find(|v| **v == self.verb) {
            Some(verb) if served_method && self.is_resource_request => verb,
            _ => "other",
        }
    }

    /// The resource path as routing reads it, given which types are
    /// namespaced (`is_namespaced(group, version, resource)`):
    /// `/namespaces/{ns}/{r}` of a type that is not namespaced is the
    /// namespace `ns` with the subresource `r`, and a path that is neither
    /// is `None`. `None` also for a request that is not a resource request.
    pub fn resource_path(&self, is_namespaced: impl Fn(&str, &str, &str) -> bool) -> Option<ResourcePath> {
        let Some(ApiPath::Resource(r)) = &self.api_path else {
            return None;
        };
        let namespaced = |resource: &str| is_namespaced(&r.group, &r.version, resource);
        match (&r.namespace, r.resource.as_str(), &r.name, &r.subresource) {
            // `/namespaces/{ns}/{r}` of a type that is not namespaced.
            (Some(ns), resource, name, sub) if !namespaced(resource) => match (name, sub) {
                (None, None) => Some(ResourcePath {
                    namespace: None,
                    resource: "namespaces".to_string(),
                    name: Some(ns.clone()),
                    subresource: Some(resource.to_string()),
                    ..r.clone()
                }),
                _ => None,
            },
            // `/namespaces/{ns}/status` where a namespaced type is named `status`.
            (None, "namespaces", Some(ns), Some(sub)) if namespaced(sub) => Some(ResourcePath {
                namespace: Some(ns.clone()),
                resource: sub.clone(),
                name: None,
                subresource: None,
                ..r.clone()
            }),
            _ => Some(r.clone()),
        }
    }
}

/// The Kubernetes verb of a resource request, `None` for a method that
/// has none.
fn resource_verb(method: &Method, names_object: bool, watch: bool) -> Option<String> {
    let verb = match *method {
        Method::GET | Method::HEAD if !names_object && watch => "watch",
        Method::GET | Method::HEAD if !names_object => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if !names_object => "deletecollection",
        Method::DELETE => "delete",
        _ => return None,
    };
    Some(verb.to_string())
}

/// Whether a raw query string asks for a watch (`watch=true`, `watch=1`,
/// or another value Go's strconv.ParseBool reads as true).
pub fn is_watch(query: &str) -> bool {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        .map(|pairs| {
            pairs.iter().any(|(k, v)| k == "watch" && matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"))
        })
        .unwrap_or(false)
}

/// Percent-decodes a path, refusing encoded slashes (as kube-apiserver's
/// router does not treat them as separators) and bad escapes.
pub fn decode_path(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            let b = u8::from_str_radix(hex, 16).ok()?;
            if b == b'/' {
                return None;
            }
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The member `c` of a path `/clusters/{c}/...` (with something after it).
fn cluster_scope(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/clusters/")?;
    let (cluster, tail) = rest.split_once('/')?;
    (!cluster.is_empty() && !tail.is_empty()).then_some(cluster)
}

/// Middleware that parses each request into a [`RequestInfo`] and stores
/// it in the request extensions, before authentication reads it.
pub async fn describe(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let info = RequestInfo::new(req.method(), req.path(), req.query_string());
    req.extensions_mut().insert(info);
    next.call(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path: &str) -> RequestInfo {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        RequestInfo::new(&method, path, query)
    }

    /// (verb, namespace, resource, name, subresource) of a resource request.
    fn resource(i: &RequestInfo) -> (&str, Option<&str>, &str, Option<&str>, Option<&str>) {
        assert!(i.is_resource_request, "not a resource request: {i:?}");
        (i.verb.as_str(), i.namespace.as_deref(), i.resource.as_str(), i.name.as_deref(), i.subresource.as_deref())
    }

    /// The resource paths listed in kube-apiserver's RequestInfoFactory
    /// documentation ("Valid Inputs"), with the verbs its methods map to.
    #[test]
    fn kube_apiserver_resource_paths() {
        let cases = [
            (Method::GET, "/apis/apps/v1/namespaces", ("list", None, "namespaces", None, None)),
            (Method::GET, "/api/v1/namespaces", ("list", None, "namespaces", None, None)),
            (Method::GET, "/api/v1/namespaces/other", ("get", Some("other"), "namespaces", Some("other"), None)),
            (Method::GET, "/api/v1/namespaces/other/pods", ("list", Some("other"), "pods", None, None)),
            (Method::GET, "/api/v1/namespaces/other/pods/foo", ("get", Some("other"), "pods", Some("foo"), None)),
            (Method::HEAD, "/api/v1/namespaces/other/pods/foo", ("get", Some("other"), "pods", Some("foo"), None)),
            (Method::GET, "/api/v1/pods", ("list", None, "pods", None, None)),
            (Method::GET, "/api/v1/nodes/n1", ("get", None, "nodes", Some("n1"), None)),
            (Method::GET, "/api/v1/namespaces/other/pods?watch=true", ("watch", Some("other"), "pods", None, None)),
            (Method::GET, "/api/v1/pods?watch=1", ("watch", None, "pods", None, None)),
            (Method::GET, "/api/v1/pods?watch=false", ("list", None, "pods", None, None)),
            (Method::POST, "/api/v1/namespaces/other/pods", ("create", Some("other"), "pods", None, None)),
            (Method::PUT, "/api/v1/namespaces/other/pods/foo", ("update", Some("other"), "pods", Some("foo"), None)),
            (Method::PATCH, "/api/v1/namespaces/other/pods/foo", ("patch", Some("other"), "pods", Some("foo"), None)),
            (Method::DELETE, "/api/v1/namespaces/other/pods/foo", ("delete", Some("other"), "pods", Some("foo"), None)),
            (Method::DELETE, "/api/v1/namespaces/other/pods", ("deletecollection", Some("other"), "pods", None, None)),
            (Method::GET, "/api/v1/namespaces/other/pods/foo/status", ("get", Some("other"), "pods", Some("foo"), Some("status"))),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/other/deployments/foo/scale",
                ("get", Some("other"), "deployments", Some("foo"), Some("scale")),
            ),
            // A namespace's own subresources.
            (Method::PUT, "/api/v1/namespaces/other/finalize", ("update", Some("other"), "namespaces", Some("other"), Some("finalize"))),
            (Method::GET, "/api/v1/namespaces/other/status", ("get", Some("other"), "namespaces", Some("other"), Some("status"))),
        ];
        for (method, path, expected) in cases {
            let i = info(method, path);
            assert_eq!(resource(&i), expected, "{path}");
            assert_eq!(i.cluster, None, "{path}");
        }
        let i = info(Method::GET, "/apis/apps/v1/namespaces/other/deployments/foo/scale");
        assert_eq!((i.api_prefix.as_str(), i.api_group.as_str(), i.api_version.as_str()), ("apis", "apps", "v1"));
        assert_eq!(i.parts, ["deployments", "foo", "scale"]);
        assert_eq!(i.resource_and_subresource(), "deployments/scale");
        assert_eq!(i.type_key(), "apps/v1/deployments");
        let i = info(Method::GET, "/api/v1/namespaces/other/status");
        assert_eq!((i.api_prefix.as_str(), i.api_group.as_str(), i.api_version.as_str()), ("api", "", "v1"));
        assert_eq!(i.parts, ["namespaces", "other", "status"]);
        assert_eq!(i.type_key(), "v1/namespaces");
    }

    /// The non-resource paths listed in kube-apiserver's RequestInfoFactory
    /// documentation, and kubefold's own: their verb is the lowercase method.
    #[test]
    fn kube_apiserver_non_resource_paths() {
        for path in ["/apis/apps/v1", "/apis/apps", "/apis", "/api/v1", "/api", "/healthz", "/", "/version", "/openapi/v2", "/metrics", "/admin/v1/clusters"] {
            let i = info(Method::GET, path);
            assert!(!i.is_resource_request, "{path}");
            assert_eq!(i.verb, "get", "{path}");
            assert_eq!((i.resource.as_str(), i.api_prefix.as_str(), i.parts.len()), ("", "", 0), "{path}");
            assert_eq!(i.type_key(), "", "{path}");
        }
        assert_eq!(info(Method::POST, "/admin/v1/clusters").verb, "post");
        assert_eq!(info(Method::GET, "/version").api_path, Some(ApiPath::Version));
        assert_eq!(info(Method::GET, "/admin/v1/clusters").api_path, None);
    }

    #[test]
    fn clusters_prefix_scopes_a_request_to_one_member() {
        let i = info(Method::POST, "/clusters/member1/api/v1/namespaces/default/pods");
        assert_eq!(resource(&i), ("create", Some("default"), "pods", None, None));
        assert_eq!((i.cluster.as_deref(), i.member()), (Some("member1"), Some("member1")));
        let i = info(Method::GET, "/clusters/member2/apis/apps/v1/namespaces/shop/deployments/web/scale");
        assert_eq!(resource(&i), ("get", Some("shop"), "deployments", Some("web"), Some("scale")));
        assert_eq!(i.member(), Some("member2"));
        // Discovery under a member is not a resource request but keeps its scope.
        let i = info(Method::GET, "/clusters/m1/apis");
        assert!(!i.is_resource_request);
        assert_eq!(i.cluster.as_deref(), Some("m1"));
        assert_eq!(i.api_path, Some(ApiPath::Groups { cluster: Some("m1".into()) }));
        // A path under a member that kubefold does not parse keeps its scope too.
        let i = info(Method::GET, "/clusters/m1/api/v1/nodes/n1/proxy/metrics");
        assert!(!i.is_resource_request);
        assert_eq!(i.cluster.as_deref(), Some("m1"));
        assert_eq!(info(Method::GET, "/clusters/m1").cluster, None);
        // The member of a qualified name, without the prefix.
        let i = info(Method::GET, "/api/v1/namespaces/default/pods/web-0_member3");
        assert_eq!((i.cluster.as_deref(), i.member()), (None, Some("member3")));
        assert_eq!(info(Method::GET, "/api/v1/namespaces/default/pods/web-0").member(), None);
        assert_eq!(info(Method::GET, "/api/v1/pods").member(), None);
    }

    #[test]
    fn what_kubefold_does_not_take_for_a_resource_request() {
        for path in [
            "/api/v1/namespaces/a%2Fb/pods",
            "/api/%zz",
            "/api/v1/namespaces/../pods",
            "/api/v1//pods",
            "/api/v1/nodes/n1/proxy/metrics",
            "/api/v1/namespaces/a/pods/b/c/d",
        ] {
            assert!(!info(Method::GET, path).is_resource_request, "{path}");
        }
        // Percent-encoding is decoded as the router decodes it.
        let i = info(Method::GET, "/api/v1/namespaces/default/pods/web-0%5Fmember3");
        assert_eq!(i.name.as_deref(), Some("web-0_member3"));
        assert_eq!(i.path, "/api/v1/namespaces/default/pods/web-0%5Fmember3");
        // The old verb prefix is a resource name.
        assert_eq!(resource(&info(Method::GET, "/api/v1/watch/pods")), ("get", None, "watch", Some("pods"), None));
        // A method without a Kubernetes verb keeps its own.
        assert_eq!(info(Method::OPTIONS, "/api/v1/pods").verb, "options");
    }

    #[test]
    fn metrics_verbs() {
        assert_eq!(info(Method::GET, "/api/v1/pods?watch=true").metrics_verb(&Method::GET), "watch");
        assert_eq!(info(Method::DELETE, "/api/v1/pods").metrics_verb(&Method::DELETE), "deletecollection");
        assert_eq!(info(Method::HEAD, "/api/v1/pods").metrics_verb(&Method::HEAD), "other");
        assert_eq!(info(Method::GET, "/api").metrics_verb(&Method::GET), "other");
    }

    #[test]
    fn routing_resolves_namespaces_against_the_served_types() {
        let served = |_: &str, _: &str, r: &str| matches!(r, "pods" | "deployments");
        let path = |p: &str| info(Method::GET, p).resource_path(served);
        let r = path("/api/v1/namespaces/default/pods/web").unwrap();
        assert_eq!((r.namespace.as_deref(), r.resource.as_str(), r.name.as_deref()), (Some("default"), "pods", Some("web")));
        // A namespace's subresource: the namespace object, as routing serves it.
        let r = path("/api/v1/namespaces/kube-system/status").unwrap();
        assert_eq!((r.namespace, r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()), (None, "namespaces", Some("kube-system"), Some("status")));
        let r = path("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!((r.namespace, r.name.as_deref()), (None, Some("kube-system")));
        // `/namespaces/{ns}/{r}` of a type that is not namespaced.
        let r = path("/api/v1/namespaces/kube-system/nodes").unwrap();
        assert_eq!((r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()), ("namespaces", Some("kube-system"), Some("nodes")));
        assert_eq!(path("/api/v1/namespaces/kube-system/nodes/n1"), None);
        let r = path("/clusters/member1/api/v1/nodes/n1").unwrap();
        assert_eq!((r.cluster.as_deref(), r.resource.as_str()), (Some("member1"), "nodes"));
        assert_eq!(path("/api/v1"), None);
        // A namespaced type named like a namespace subresource.
        let status_type = |_: &str, _: &str, r: &str| r == "status";
        let r = info(Method::GET, "/api/v1/namespaces/a/status").resource_path(status_type).unwrap();
        assert_eq!((r.namespace.as_deref(), r.resource.as_str(), r.name), (Some("a"), "status", None));
    }

    /// The middleware leaves the description in the request extensions,
    /// where the layers after it read it.
    #[actix_web::test]
    async fn describe_stores_the_description_for_the_layers_after_it() {
        use actix_web::{test, web, App, HttpRequest, HttpResponse};
        let handler = |req: HttpRequest| async move {
            let described = req.extensions().get::<RequestInfo>().cloned();
            HttpResponse::Ok().body(described.map(|i| format!("{} {} {:?} {:?}", i.verb, i.resource, i.namespace, i.cluster)).unwrap_or_default())
        };
        let app = test::init_service(App::new().wrap(actix_web::middleware::from_fn(describe)).default_service(web::to(handler))).await;
        let read = |uri: &str, method: Method| test::TestRequest::default().method(method).uri(uri).to_request();
        let body = test::call_and_read_body(&app, read("/clusters/m1/api/v1/namespaces/a/pods?watch=true", Method::GET)).await;
        assert_eq!(body, "watch pods Some(\"a\") Some(\"m1\")");
        let body = test::call_and_read_body(&app, read("/apis/apps/v1/namespaces/a/deployments", Method::DELETE)).await;
        assert_eq!(body, "deletecollection deployments Some(\"a\") None");
        let body = test::call_and_read_body(&app, read("/metrics", Method::GET)).await;
        assert_eq!(body, "get  None None");
    }

    #[test]
    fn paths_are_decoded_and_encoded_slashes_refused() {
        assert_eq!(decode_path("/api/v1/namespaces/a%2Db/pods").as_deref(), Some("/api/v1/namespaces/a-b/pods"));
        assert_eq!(decode_path("/api/v1/namespaces/a%2Fb/pods"), None);
        assert_eq!(decode_path("/api/v1/namespaces/a%2fb/pods"), None);
        assert_eq!(decode_path("/api/%zz"), None);
    }
}
