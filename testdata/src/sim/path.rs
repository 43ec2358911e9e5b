//! Parsing request paths into what the simulator serves, with the rules of
//! kube-apiserver's `RequestInfoFactory` (`k8s.io/apiserver/pkg/endpoints/request`).
//!
//! Resource paths look like `/api/v1/namespaces/{ns}/pods/{name}/{subresource}`
//! or `/apis/{group}/{version}/...`; the deprecated `/watch/` prefix after the
//! group version is accepted. `/api/v1/namespaces/{name}/status` and
//! `/finalize` are subresources of the namespace, not resources inside it.

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/`: the list of served paths.
    Root,
    /// `/version`.
    Version,
    /// `/api`: `APIVersions`.
    CoreVersions,
    /// `/apis`: `APIGroupList`.
    GroupList,
    /// `/apis/{group}`: `APIGroup`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`: `APIResourceList`.
    ResourceList {
        /// The group, empty for core.
        group: String,
        /// The version.
        version: String,
    },
    /// A collection, an object or an object's subresource.
    Resource(ResourcePath),
    /// `/healthz`, `/livez`, `/readyz` and their sub-checks.
    Health,
    /// `/sim/requests`: the request log.
    RequestLog,
    /// `/sim/faults`: the faults in force.
    Faults,
    /// `/sim/churn`: the churn rate.
    Churn,
    /// `/sim/restore`: a restore of etcd from a backup.
    Restore,
    /// `/sim/burst`: many pods at once.
    Burst,
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`: the index of group-version documents.
    OpenApiV3Index,
    /// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
    OpenApiV3 {
        /// The group, empty for core.
        group: String,
        /// The version.
        version: String,
    },
    /// Anything else.
    NotFound,
}

/// The parts of a resource path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourcePath {
    /// The group, empty for core.
    pub group: String,
    /// The version.
    pub version: String,
    /// The namespace, if the path has one (never set for `namespaces` itself).
    pub namespace: Option<String>,
    /// The plural resource name.
    pub plural: String,
    /// The object name, if any.
    pub name: Option<String>,
    /// The subresource (`status`, `scale`, `log`), if any.
    pub subresource: Option<String>,
    /// Whether the deprecated `/watch/` path prefix was used.
    pub watch_prefix: bool,
}

/// Namespace subresources (`namespaceSubresources` in requestinfo.go).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses a request path (already without its query).
pub fn parse(path: &str) -> Route {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => Route::Root,
        ["version"] => Route::Version,
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::GroupList,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::ResourceList { group: String::new(), version: version.to_string() },
        ["apis", group, version] => Route::ResourceList { group: group.to_string(), version: version.to_string() },
        ["api", version, rest @ ..] => resource("", version, rest),
        ["apis", group, version, rest @ ..] => resource(group, version, rest),
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["sim", "requests"] => Route::RequestLog,
        ["sim", "faults"] => Route::Faults,
        ["sim", "churn"] => Route::Churn,
        ["sim", "restore"] => Route::Restore,
        ["sim", "burst"] => Route::Burst,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Index,
        ["openapi", "v3", "api", version] => Route::OpenApiV3 { group: String::new(), version: version.to_string() },
        ["openapi", "v3", "apis", group, version] => Route::OpenApiV3 { group: group.to_string(), version: version.to_string() },
        _ => Route::NotFound,
    }
}

fn resource(group: &str, version: &str, mut parts: &[&str]) -> Route {
    let mut path = ResourcePath { group: group.into(), version: version.into(), ..ResourcePath::default() };
    if parts.first() == Some(&"watch") {
        path.watch_prefix = true;
        parts = &parts[1..];
    }
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        path.namespace = Some(parts[1].to_string());
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts = &parts[2..];
        }
    }
    match parts {
        [plural] => path.plural = plural.to_string(),
        [plural, name] => {
            path.plural = plural.to_string();
            path.name = Some(name.to_string());
        }
        [plural, name, subresource] => {
            path.plural = plural.to_string();
            path.name = Some(name.to_string());
            path.subresource = Some(subresource.to_string());
        }
        _ => return Route::NotFound,
    }
    if path.plural == "namespaces" {
        path.namespace = None;
    }
    Route::Resource(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match parse(path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("/version"), Route::Version);
        assert_eq!(parse("/api"), Route::CoreVersions);
        assert_eq!(parse("/api/v1"), Route::ResourceList { group: "".into(), version: "v1".into() });
        assert_eq!(parse("/apis/"), Route::GroupList);
        assert_eq!(parse("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(parse("/apis/apps/v1"), Route::ResourceList { group: "apps".into(), version: "v1".into() });
        assert_eq!(parse("/openapi/v2"), Route::OpenApiV2);
        assert_eq!(parse("/openapi/v3"), Route::OpenApiV3Index);
        assert_eq!(parse("/openapi/v3/api/v1"), Route::OpenApiV3 { group: String::new(), version: "v1".into() });
        assert_eq!(parse("/openapi/v3/apis/apps/v1"), Route::OpenApiV3 { group: "apps".into(), version: "v1".into() });
        assert_eq!(parse("/openapi/v4"), Route::NotFound);
        assert_eq!(parse("/sim/requests"), Route::RequestLog);
        assert_eq!(parse("/sim/faults"), Route::Faults);
    }

    #[test]
    fn collections_objects_and_subresources() {
        let all = res("/api/v1/pods");
        assert_eq!((all.plural.as_str(), all.namespace, all.name), ("pods", None, None));
        let ns = res("/api/v1/namespaces/shop/pods");
        assert_eq!(ns.namespace.as_deref(), Some("shop"));
        let log = res("/api/v1/namespaces/shop/pods/web-0/log");
        assert_eq!(log.name.as_deref(), Some("web-0"));
        assert_eq!(log.subresource.as_deref(), Some("log"));
        let scale = res("/apis/apps/v1/namespaces/shop/deployments/frontend/scale");
        assert_eq!(scale.group, "apps");
        assert_eq!(scale.subresource.as_deref(), Some("scale"));
        let watch = res("/api/v1/watch/namespaces/shop/pods");
        assert!(watch.watch_prefix);
        assert_eq!(watch.plural, "pods");
        assert_eq!(parse("/api/v1/namespaces/a/pods/b/log/extra"), Route::NotFound);
    }

    #[test]
    fn namespace_objects_and_their_subresources() {
        let list = res("/api/v1/namespaces");
        assert_eq!((list.plural.as_str(), list.name), ("namespaces", None));
        let one = res("/api/v1/namespaces/shop");
        assert_eq!((one.plural.as_str(), one.name.as_deref(), one.namespace), ("namespaces", Some("shop"), None));
        let status = res("/api/v1/namespaces/shop/status");
        assert_eq!(status.plural, "namespaces");
        assert_eq!(status.name.as_deref(), Some("shop"));
        assert_eq!(status.subresource.as_deref(), Some("status"));
    }
}
