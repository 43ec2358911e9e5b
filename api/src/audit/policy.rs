//! kube-apiserver's audit policy (`audit.k8s.io/v1` `Policy`): which level
//! each request is recorded at, decided by the first rule that matches its
//! user, groups, verb, resource, namespace or non-resource URL.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::auth::User;
use crate::request::RequestInfo;

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Level {
    /// Not recorded.
    None,
    /// Who, what, when and the answer's code; no bodies.
    Metadata,
    /// Metadata and the request's object.
    Request,
    /// Metadata, the request's object and the response's.
    RequestResponse,
}

/// A point of a request's life at which an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Stage {
    /// As soon as the request is received.
    RequestReceived,
    /// A long-running request's response headers were sent.
    ResponseStarted,
    /// The response was sent in full.
    ResponseComplete,
    /// The handler failed (kubefold answers every failure with a Status,
    /// so it writes no event at this stage; accepted in `omitStages`).
    Panic,
}

/// The policy file, as kube-apiserver reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// `audit.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Policy`.
    #[serde(default)]
    pub kind: String,
    /// Rules; the first that matches decides. A request no rule matches is
    /// not recorded.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stages recorded for no request.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
}

/// One rule of a [`Policy`]: every list that is set must match.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// The level of the requests it matches.
    pub level: Level,
    /// User names; empty: any.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups, any of which the user is in; empty: any.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, ...); empty: any.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources by group; with it or `namespaces`, only resource requests match.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""` for cluster-scoped objects).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource paths, exact or ending in `*`; with it, only
    /// non-resource requests match.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages not recorded for the requests it matches, beside the policy's.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
}

/// Resources of one API group in a [`PolicyRule`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// The group (`""`: the core group).
    #[serde(default)]
    pub group: String,
    /// `pods`, `pods/log`, `*`, `*/status` or `pods/*`; empty: every resource of the group.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty: any.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// It cannot be read.
    #[error("cannot read audit policy {path}: {source}")]
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not a policy.
    #[error("audit policy {path}: {reason}")]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Policy {
    /// Every request at `Metadata`: the policy without a policy file.
    pub fn metadata_for_all() -> Policy {
        Policy {
            api_version: "audit.k8s.io/v1".into(),
            kind: "Policy".into(),
            rules: vec![PolicyRule {
                level: Level::Metadata,
                users: Vec::new(),
                user_groups: Vec::new(),
                verbs: Vec::new(),
                resources: Vec::new(),
                namespaces: Vec::new(),
                non_resource_urls: Vec::new(),
                omit_stages: Vec::new(),
            }],
            omit_stages: Vec::new(),
        }
    }

    /// Reads and checks a policy file (YAML or JSON).
    pub fn read(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Unreadable { path: path.into(), source })?;
        Policy::parse(&text).map_err(|reason| PolicyError::Invalid { path: path.into(), reason })
    }

    /// Parses and checks a policy document.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if policy.kind != "Policy" || !matches!(policy.api_version.as_str(), "audit.k8s.io/v1" | "audit.k8s.io/v1beta1") {
            return Err(format!("expected kind Policy of audit.k8s.io/v1, found kind {:?} of {:?}", policy.kind, policy.api_version));
        }
        Ok(policy)
    }

    /// The level of `info` done by `user`, and the stages not to record.
    pub fn level(&self, user: &User, info: &RequestInfo) -> (Level, Vec<Stage>) {
        match self.rules.iter().find(|r| r.matches(user, info)) {
            Some(rule) => (rule.level, self.omit_stages.iter().chain(&rule.omit_stages).copied().collect()),
            None => (Level::None, Vec::new()),
        }
    }

    /// The highest level any rule gives.
    pub fn highest_level(&self) -> Level {
        self.rules.iter().map(|r| r.level).max().unwrap_or(Level::None)
    }
}

impl PolicyRule {
    /// Whether the rule applies to `info` done by `user` (as kube-apiserver's
    /// policy checker decides).
    pub fn matches(&self, user: &User, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !self.users.contains(&user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.is_resource_request && self.non_resource_urls.iter().any(|u| url_matches(u, &info.path));
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.is_resource_request {
            return false;
        }
        let namespace = info.namespace.as_deref().unwrap_or("");
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        self.resources.iter().any(|g| g.matches(info))
    }
}

impl GroupResources {
    fn matches(&self, info: &RequestInfo) -> bool {
        if self.group != info.api_group {
            return false;
        }
        let names_match = self.resource_names.is_empty() || info.name.as_deref().is_some_and(|n| self.resource_names.iter().any(|r| r == n));
        if self.resources.is_empty() {
            return names_match;
        }
        let combined = info.resource_and_subresource();
        let sub = info.subresource.as_deref();
        let resource_matches = self.resources.iter().any(|r| {
            r == &combined
                || r == "*"
                || r.strip_prefix("*/").is_some_and(|s| sub == Some(s))
                || r.strip_suffix("/*").is_some_and(|res| res == info.resource && sub.is_some())
        });
        resource_matches && names_match
    }
}

fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::Method;

    fn user(name: &str, groups: &[&str]) -> User {
        User { name: name.into(), uid: String::new(), groups: groups.iter().map(|g| g.to_string()).collect() }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: Metadata
  resources: [{group: "", resources: ["secrets", "configmaps"]}]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  userGroups: ["admins"]
  verbs: ["create", "update", "patch", "delete"]
  namespaces: ["prod"]
- level: Request
  resources: [{group: "apps", resources: ["deployments/*"]}, {group: "", resources: ["pods"], resourceNames: ["web"]}]
- level: Metadata
  omitStages: [ResponseStarted]
"#;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let level = |u: &User, method: Method, path: &str| policy.level(u, &RequestInfo::new(&method, path, "")).0;
        let alice = user("alice", &["admins"]);
        let bob = user("bob", &[]);
        assert_eq!(level(&user("system:kube-proxy", &[]), Method::GET, "/api/v1/pods"), Level::None);
        assert_eq!(level(&alice, Method::POST, "/api/v1/namespaces/prod/secrets"), Level::Metadata, "secrets never above Metadata here");
        assert_eq!(level(&alice, Method::GET, "/healthz/ping"), Level::None);
        assert_eq!(level(&alice, Method::GET, "/version"), Level::None);
        assert_eq!(level(&alice, Method::GET, "/versions"), Level::Metadata);
        assert_eq!(level(&alice, Method::POST, "/api/v1/namespaces/prod/configmaps"), Level::Metadata);
        assert_eq!(level(&alice, Method::POST, "/api/v1/namespaces/prod/services"), Level::RequestResponse);
        assert_eq!(level(&alice, Method::POST, "/api/v1/namespaces/dev/services"), Level::Metadata);
        assert_eq!(level(&bob, Method::POST, "/api/v1/namespaces/prod/services"), Level::Metadata);
        assert_eq!(level(&bob, Method::PUT, "/apis/apps/v1/namespaces/dev/deployments/d/scale"), Level::Request);
        assert_eq!(level(&bob, Method::PUT, "/apis/apps/v1/namespaces/dev/deployments/d"), Level::Metadata);
        assert_eq!(level(&bob, Method::GET, "/api/v1/namespaces/dev/pods/web"), Level::Request);
        assert_eq!(level(&bob, Method::GET, "/api/v1/namespaces/dev/pods/db"), Level::Metadata);
        let (_, omitted) = policy.level(&bob, &RequestInfo::new(&Method::GET, "/api/v1/pods", ""));
        assert_eq!(omitted, vec![Stage::RequestReceived, Stage::ResponseStarted]);
        assert_eq!(policy.highest_level(), Level::RequestResponse);
    }

    #[test]
    fn a_document_that_is_not_a_policy_is_refused() {
        assert!(Policy::parse("apiVersion: v1\nkind: ConfigMap\n").is_err());
        assert!(Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n").is_err());
        assert_eq!(Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\n").unwrap().highest_level(), Level::None);
    }
}
