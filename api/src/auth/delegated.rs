//! Delegated authentication (`--authentication-kubeconfig`), as an
//! aggregated API server authenticates: a bearer token that no local
//! authenticator (client certificate, token file) knows is sent in a
//! `TokenReview` (`authentication.k8s.io/v1`) to the API server of that
//! kubeconfig (kube-apiserver, karmada-apiserver), which says who it is.
//! Answers are cached as kube-apiserver's webhook token authenticator
//! caches them: an authenticated token for the success TTL, a refused one
//! for the failure TTL (both `--authentication-token-webhook-cache-ttl`,
//! 10 s by default as for aggregated servers); a review that fails (the API
//! server unreachable, an error) is not cached and the request is 401.
//! Tokens stay in memory only, never logged.
//!
//! Delegated authorization (`--authorization-kubeconfig`): a request
//! kubefold's own rules do not allow is asked of that API server in a
//! `SubjectAccessReview` (user, UID, groups, extra, and the member cluster as
//! the extra attribute [`CLUSTER_EXTRA`]), cached as kube-apiserver's
//! webhook authorizer caches: an allowed answer for the authorized TTL, a
//! refused one for the unauthorized TTL (10 s each by default, as for
//! aggregated servers). A review that fails refuses the request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::authn::User;
use super::authz::{RequestAttributes, Target};
use super::requestheader::Extra;
use super::{Error, Result};

/// The extra attribute of a SubjectAccessReview naming the member cluster
/// a request is about.
pub const CLUSTER_EXTRA: &str = "kubefold.io/cluster";

/// Most tokens the cache holds; beyond it, expired answers are dropped,
/// then everything (the next requests are reviewed again).
const CACHE_LIMIT: usize = 10_000;

thread_local! {
    /// The control plane's client of this thread (a client belongs to the
    /// runtime that built it, and each HTTP worker has its own).
    static CLIENTS: std::cell::RefCell<HashMap<PathBuf, kube::Client>> = Default::default();
}

/// Reviews bearer tokens with the control plane, with a cache.
#[derive(Debug)]
pub struct TokenReviewer {
    kubeconfig: PathBuf,
    success_ttl: Duration,
    failure_ttl: Duration,
    cache: Mutex<HashMap<String, (Option<(User, Extra)>, Instant)>>,
}

/// 10 seconds, as aggregated API servers cache delegated answers.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(10);

impl TokenReviewer {
    /// A reviewer with the API server of `kubeconfig` (its current
    /// context); the file is read now to check it.
    pub fn new(kubeconfig: &Path, success_ttl: Duration, failure_ttl: Duration) -> Result<TokenReviewer> {
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| Error::DelegationKubeconfig { path: kubeconfig.to_path_buf(), reason: e.to_string() })?;
        Ok(TokenReviewer { kubeconfig: kubeconfig.to_path_buf(), success_ttl, failure_ttl, cache: Mutex::new(HashMap::new()) })
    }

    /// Who `token` is, with the user's extra attributes: `Ok(None)` when
    /// the API server says it authenticates nobody, an error when it could
    /// not be asked.
    pub async fn review(&self, token: &str) -> Result<Option<(User, Extra)>, String> {
        let now = Instant::now();
        if let Some((user, expires)) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(token) {
            if *expires > now {
                metrics::counter!("kubefold_token_reviews_total", "result" => "cached").increment(1);
                return Ok(user.clone());
            }
        }
        let client = client(&self.kubeconfig).await?;
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
        let request = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&review).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let answer: Value = client.request(request).await.map_err(|e| {
            metrics::counter!("kubefold_token_reviews_total", "result" => "error").increment(1);
            e.to_string()
        })?;
        let user = user_of(&answer["status"]);
        metrics::counter!("kubefold_token_reviews_total", "result" => if user.is_some() { "authenticated" } else { "refused" }).increment(1);
        let ttl = if user.is_some() { self.success_ttl } else { self.failure_ttl };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_LIMIT {
            cache.retain(|_, (_, expires)| *expires > now);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(token.to_string(), (user.clone(), Instant::now() + ttl));
        Ok(user)
    }
}

/// Asks the control plane whether a user may do something, with a cache.
#[derive(Debug)]
pub struct AccessReviewer {
    kubeconfig: PathBuf,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: Mutex<HashMap<String, (bool, Instant)>>,
}

impl AccessReviewer {
    /// A reviewer with the API server of `kubeconfig` (its current
    /// context); the file is read now to check it.
    pub fn new(kubeconfig: &Path, authorized_ttl: Duration, unauthorized_ttl: Duration) -> Result<AccessReviewer> {
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| Error::DelegationKubeconfig { path: kubeconfig.to_path_buf(), reason: e.to_string() })?;
        Ok(AccessReviewer { kubeconfig: kubeconfig.to_path_buf(), authorized_ttl, unauthorized_ttl, cache: Mutex::new(HashMap::new()) })
    }

    /// Whether the control plane allows `user` to do `attributes`; an
    /// error when it could not be asked.
    pub async fn allows(&self, user: &User, attributes: &RequestAttributes) -> Result<bool, String> {
        let spec = review_spec(user, attributes);
        let key = spec.to_string();
        let now = Instant::now();
        if let Some((allowed, expires)) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            if *expires > now {
                metrics::counter!("kubefold_access_reviews_total", "result" => "cached").increment(1);
                return Ok(*allowed);
            }
        }
        let client = client(&self.kubeconfig).await?;
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
        let request = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&review).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let answer: Value = client.request(request).await.map_err(|e| {
            metrics::counter!("kubefold_access_reviews_total", "result" => "error").increment(1);
            e.to_string()
        })?;
        let allowed = answer["status"]["allowed"] == true && answer["status"]["denied"] != true;
        metrics::counter!("kubefold_access_reviews_total", "result" => if allowed { "allowed" } else { "denied" }).increment(1);
        let ttl = if allowed { self.authorized_ttl } else { self.unauthorized_ttl };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_LIMIT {
            cache.retain(|_, (_, expires)| *expires > now);
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
        }
        cache.insert(key, (allowed, Instant::now() + ttl));
        Ok(allowed)
    }
}

/// The `spec` of the SubjectAccessReview of `user` doing `attributes`.
pub fn review_spec(user: &User, attributes: &RequestAttributes) -> Value {
    let mut spec = json!({"user": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        spec["uid"] = json!(user.uid);
    }
    match &attributes.target {
        Target::Resource(r) => {
            let mut resource = json!({"verb": attributes.verb, "group": r.group, "version": r.version, "resource": r.resource});
            for (key, value) in [("subresource", &r.subresource), ("namespace", &r.namespace), ("name", &r.name)] {
                if let Some(value) = value {
                    resource[key] = json!(value);
                }
            }
            spec["resourceAttributes"] = resource;
            if let Some(cluster) = &r.cluster {
                spec["extra"] = json!({CLUSTER_EXTRA: [cluster]});
            }
        }
        Target::Discovery { path } | Target::NonResource { path } => spec["nonResourceAttributes"] = json!({"path": path, "verb": attributes.verb}),
        Target::Version => spec["nonResourceAttributes"] = json!({"path": "/version", "verb": attributes.verb}),
    }
    spec
}

/// The user of a TokenReview's `status` and the user's extra attributes
/// (`user.extra`, which edits carry to members as `Impersonate-Extra-*`),
/// `None` unless authenticated.
pub fn user_of(status: &Value) -> Option<(User, Extra)> {
    if status["authenticated"] != true {
        return None;
    }
    let user = &status["user"];
    let name = user["username"].as_str().filter(|n| !n.is_empty())?;
    let strings = |v: &Value| -> Vec<String> { v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default() };
    let groups = strings(&user["groups"]);
    let mut extra: Extra = user["extra"].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect()).unwrap_or_default();
    extra.sort();
    Some((User::authenticated(name.to_string(), user["uid"].as_str().unwrap_or_default().to_string(), groups), extra))
}

/// The client of `kubeconfig` for this thread.
async fn client(kubeconfig: &Path) -> Result<kube::Client, String> {
    if let Some(client) = CLIENTS.with(|c| c.borrow().get(kubeconfig).cloned()) {
        return Ok(client);
    }
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await.map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    CLIENTS.with(|c| c.borrow_mut().insert(kubeconfig.to_path_buf(), client.clone()));
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_review_names_the_user_the_request_and_the_cluster() {
        let user = User { name: "carol".into(), uid: "7".into(), groups: vec!["team-a".into(), "system:authenticated".into()] };
        let attributes = RequestAttributes {
            verb: "list".into(),
            target: Target::Resource(super::super::authz::ResourceAttributes {
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
                subresource: None,
                namespace: Some("default".into()),
                name: None,
                cluster: Some("member1".into()),
            }),
        };
        assert_eq!(
            review_spec(&user, &attributes),
            json!({"user": "carol", "uid": "7", "groups": ["team-a", "system:authenticated"],
                   "resourceAttributes": {"verb": "list", "group": "", "version": "v1", "resource": "pods", "namespace": "default"},
                   "extra": {"kubefold.io/cluster": ["member1"]}})
        );
        let metrics = RequestAttributes { verb: "get".into(), target: Target::NonResource { path: "/metrics".into() } };
        assert_eq!(review_spec(&user, &metrics)["nonResourceAttributes"], json!({"path": "/metrics", "verb": "get"}));
    }

    #[test]
    fn only_an_authenticated_review_names_a_user() {
        let (user, extra) = user_of(&json!({"authenticated": true, "user": {"username": "carol", "uid": "7", "groups": ["team-a"]}})).unwrap();
        assert!(extra.is_empty());
        let (_, extra) = user_of(&json!({"authenticated": true, "user": {"username": "dave", "extra": {"scopes": ["a", "b"], "dept": ["x"]}}})).unwrap();
        assert_eq!(extra, vec![("dept".to_string(), vec!["x".to_string()]), ("scopes".to_string(), vec!["a".to_string(), "b".to_string()])]);
        assert_eq!((user.name.as_str(), user.uid.as_str()), ("carol", "7"));
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
        assert_eq!(user_of(&json!({"authenticated": false, "error": "invalid bearer token"})), None);
        assert_eq!(user_of(&json!({"authenticated": true, "user": {}})), None, "no user name: nobody");
        assert_eq!(user_of(&Value::Null), None);
    }
}
