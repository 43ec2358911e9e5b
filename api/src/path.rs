//! Parsing of Kubernetes API request paths, with no I/O.
//!
//! ```text
//! [/clusters/{cluster}]/api/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//! [/clusters/{cluster}]/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
//! ```

/// A parsed resource request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// `/clusters/{cluster}` scope: one member, original names.
    pub cluster: Option<String>,
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace scope, if any.
    pub namespace: Option<String>,
    /// Plural resource name.
    pub resource: String,
    /// Object name, if the path names one.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `log`), if any.
    pub subresource: Option<String>,
}

/// What a path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/api`.
    CoreVersions {
        /// The cluster scope.
        cluster: Option<String>,
    },
    /// `/apis`.
    Groups {
        /// The cluster scope.
        cluster: Option<String>,
    },
    /// `/api/{v}` or `/apis/{g}/{v}`.
    GroupVersion {
        /// The cluster scope.
        cluster: Option<String>,
        /// API group (empty for core).
        group: String,
        /// Version.
        version: String,
    },
    /// `/apis/{g}`.
    Group {
        /// The cluster scope.
        cluster: Option<String>,
        /// API group.
        group: String,
    },
    /// `/version`.
    Version,
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`.
    OpenApiV3Index,
    /// `/openapi/v3/api/{v}` or `/openapi/v3/apis/{g}/{v}`.
    OpenApiV3 {
        /// API group (empty for core).
        group: String,
        /// Version.
        version: String,
    },
    /// A resource path.
    Resource(ResourcePath),
}

impl ApiPath {
    /// The member named by a `/clusters/{cluster}` prefix, if any.
    pub fn cluster(&self) -> Option<&str> {
        match self {
            ApiPath::CoreVersions { cluster } | ApiPath::Groups { cluster } => cluster.as_deref(),
            ApiPath::GroupVersion { cluster, .. } | ApiPath::Group { cluster, .. } => cluster.as_deref(),
            ApiPath::Resource(p) => p.cluster.as_deref(),
            ApiPath::Version | ApiPath::OpenApiV2 | ApiPath::OpenApiV3Index | ApiPath::OpenApiV3 { .. } => None,
        }
    }
}

/// Parses `path` (already percent-decoded by the router; encoded slashes are
/// refused by the caller). `is_namespaced(group, version, resource)` tells
/// whether a type is namespaced, to tell `/api/v1/namespaces/{ns}/pods` from
/// `/api/v1/namespaces/{name}/status`.
pub fn parse(path: &str, is_namespaced: impl Fn(&str, &str, &str) -> bool) -> Option<ApiPath> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    if segments.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return None;
    }
    let (cluster, rest) = match segments.as_slice() {
        ["clusters", c, rest @ ..] => (Some(c.to_string()), rest),
        rest => (None, rest),
    };
    match rest {
        ["version"] => Some(ApiPath::Version),
        ["openapi", "v2"] => Some(ApiPath::OpenApiV2),
        ["openapi", "v3"] => Some(ApiPath::OpenApiV3Index),
        ["openapi", "v3", "api", v] => Some(ApiPath::OpenApiV3 { group: String::new(), version: v.to_string() }),
        ["openapi", "v3", "apis", g, v] => Some(ApiPath::OpenApiV3 { group: g.to_string(), version: v.to_string() }),
        ["api"] => Some(ApiPath::CoreVersions { cluster }),
        ["apis"] => Some(ApiPath::Groups { cluster }),
        ["api", v] => Some(ApiPath::GroupVersion { cluster, group: String::new(), version: v.to_string() }),
        ["apis", g] => Some(ApiPath::Group { cluster, group: g.to_string() }),
        ["apis", g, v] => Some(ApiPath::GroupVersion { cluster, group: g.to_string(), version: v.to_string() }),
        ["api", v, tail @ ..] => resource(cluster, "", v, tail, &is_namespaced),
        ["apis", g, v, tail @ ..] => resource(cluster, g, v, tail, &is_namespaced),
        _ => None,
    }
}

fn resource(
    cluster: Option<String>,
    group: &str,
    version: &str,
    tail: &[&str],
    is_namespaced: &impl Fn(&str, &str, &str) -> bool,
) -> Option<ApiPath> {
    let make = |namespace: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>| {
        Some(ApiPath::Resource(ResourcePath {
            cluster: cluster.clone(),
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(str::to_string),
            resource: resource.to_string(),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        }))
    };
    match tail {
        ["namespaces", ns, r, rest @ ..] if is_namespaced(group, version, r) => match rest {
            [] => make(Some(ns), r, None, None),
            [name] => make(Some(ns), r, Some(name), None),
            [name, sub] => make(Some(ns), r, Some(name), Some(sub)),
            _ => None,
        },
        [r] => make(None, r, None, None),
        [r, name] => make(None, r, Some(name), None),
        [r, name, sub] => make(None, r, Some(name), Some(sub)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(_: &str, _: &str, r: &str) -> bool {
        matches!(r, "pods" | "deployments" | "services")
    }

    fn res(p: &str) -> ResourcePath {
        match parse(p, ns) {
            Some(ApiPath::Resource(r)) => r,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = res("/api/v1/pods");
        assert_eq!((r.namespace, r.resource.as_str(), r.name), (None, "pods", None));
        let r = res("/api/v1/namespaces/default/pods/web-0_member1");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("web-0_member1"));
        let r = res("/apis/apps/v1/namespaces/shop/deployments/web/scale");
        assert_eq!((r.group.as_str(), r.subresource.as_deref()), ("apps", Some("scale")));
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!((r.resource.as_str(), r.name.as_deref(), r.namespace), ("namespaces", Some("kube-system"), None));
        let r = res("/api/v1/namespaces/kube-system/status");
        assert_eq!((r.resource.as_str(), r.subresource.as_deref()), ("namespaces", Some("status")));
        let r = res("/clusters/member1/api/v1/nodes/n1");
        assert_eq!((r.cluster.as_deref(), r.resource.as_str()), (Some("member1"), "nodes"));
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("/api", ns), Some(ApiPath::CoreVersions { cluster: None }));
        assert_eq!(parse("/clusters/m/apis", ns), Some(ApiPath::Groups { cluster: Some("m".into()) }));
        assert_eq!(
            parse("/apis/apps/v1", ns),
            Some(ApiPath::GroupVersion { cluster: None, group: "apps".into(), version: "v1".into() })
        );
        assert_eq!(parse("/version", ns), Some(ApiPath::Version));
    }

    #[test]
    fn malformed_paths_are_refused() {
        assert_eq!(parse("/api/v1/namespaces/../pods", ns), None);
        assert_eq!(parse("/api/v1//pods", ns), None);
        assert_eq!(parse("/foo", ns), None);
        assert_eq!(parse("/api/v1/namespaces/a/pods/b/c/d", ns), None);
    }
}
