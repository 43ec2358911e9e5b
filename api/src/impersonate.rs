//! User impersonation (`kubectl --as`, `--as-group`, `--as-uid`): the
//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-*` headers, honoured as kube-apiserver's
//! impersonation filter honours them.
//!
//! Each thing impersonated is checked as a request of its own with the verb
//! `impersonate`: `users` (or `serviceaccounts` for
//! `system:serviceaccount:NS:NAME`) and `groups` in the core API group,
//! `uids` and `userextras/KEY` in `authentication.k8s.io`, the name being
//! the value. Members of `kubefold:admins` may impersonate anyone; others
//! need a rule granting `impersonate`. The request then goes on as the
//! impersonated user: authorization, and everything after it, sees that
//! user, who is in `system:authenticated` (or, as `system:anonymous`, in
//! `system:unauthenticated`) besides the groups asked for.

use actix_web::http::header::HeaderMap;
use kubefold_engine::status::Status;

use crate::auth::{RequestAttributes, ResourceAttributes, Target, User, AUTHENTICATED_GROUP, ANONYMOUS_USER, UNAUTHENTICATED_GROUP};

/// The header naming the user to act as.
pub const USER_HEADER: &str = "impersonate-user";
/// The header naming a group to act in (repeatable).
pub const GROUP_HEADER: &str = "impersonate-group";
/// The header naming the UID to act with.
pub const UID_HEADER: &str = "impersonate-uid";
/// The prefix of the headers naming extra attributes (`Impersonate-Extra-KEY: VALUE`).
pub const EXTRA_HEADER_PREFIX: &str = "impersonate-extra-";

/// What a request asks to be served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impersonation {
    /// The user name.
    pub user: String,
    /// The groups asked for.
    pub groups: Vec<String>,
    /// The UID, if asked for.
    pub uid: Option<String>,
    /// Extra attributes, key (lowercase, percent-decoded) and values.
    pub extra: Vec<(String, Vec<String>)>,
}

impl Impersonation {
    /// Reads the impersonation headers: `Ok(None)` without any, 400
    /// BadRequest for groups, a UID or extras without a user, or a header
    /// that is not text.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Impersonation>, Status> {
        let text = |name: &str, value: &actix_web::http::header::HeaderValue| {
            value.to_str().map(str::to_string).map_err(|_| Status::bad_request(format!("the {name} header is not text")))
        };
        let mut user = None;
        let mut groups = Vec::new();
        let mut uid = None;
        let mut extra: Vec<(String, Vec<String>)> = Vec::new();
        for (name, value) in headers {
            let name = name.as_str();
            if name == USER_HEADER {
                user = Some(text(name, value)?);
            } else if name == GROUP_HEADER {
                groups.push(text(name, value)?);
            } else if name == UID_HEADER {
                uid = Some(text(name, value)?);
            } else if let Some(key) = name.strip_prefix(EXTRA_HEADER_PREFIX) {
                let key = percent_decode(key).ok_or_else(|| Status::bad_request(format!("the {name} header has a bad escape")))?.to_lowercase();
                let value = text(name, value)?;
                match extra.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, values)) => values.push(value),
                    None => extra.push((key, vec![value])),
                }
            }
        }
        extra.sort();
        match user {
            Some(user) if !user.is_empty() => Ok(Some(Impersonation { user, groups, uid, extra })),
            _ if groups.is_empty() && uid.is_none() && extra.is_empty() && user.is_none() => Ok(None),
            _ => Err(Status::bad_request(
                "requested impersonation of groups, a UID or extra attributes without impersonating a user (Impersonate-User)",
            )),
        }
    }

    /// The authorization checks it needs, one per thing impersonated.
    pub fn checks(&self) -> Vec<RequestAttributes> {
        let check = |group: &str, resource: &str, subresource: Option<&str>, namespace: Option<&str>, name: &str| RequestAttributes {
            verb: "impersonate".to_string(),
            target: Target::Resource(ResourceAttributes {
                group: group.to_string(),
                version: String::new(),
                resource: resource.to_string(),
                subresource: subresource.map(str::to_string),
                namespace: namespace.map(str::to_string),
                name: Some(name.to_string()),
                cluster: None,
            }),
        };
        let mut checks = Vec::new();
        match self.user.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
            Some((namespace, name)) => checks.push(check("", "serviceaccounts", None, Some(namespace), name)),
            None => checks.push(check("", "users", None, None, &self.user)),
        }
        for group in &self.groups {
            checks.push(check("", "groups", None, None, group));
        }
        if let Some(uid) = &self.uid {
            checks.push(check("authentication.k8s.io", "uids", None, None, uid));
        }
        for (key, values) in &self.extra {
            for value in values {
                checks.push(check("authentication.k8s.io", "userextras", Some(key), None, value));
            }
        }
        checks
    }

    /// The user the request is then served as.
    pub fn user(&self) -> User {
        let mut groups = self.groups.clone();
        let implied = if self.user == ANONYMOUS_USER { UNAUTHENTICATED_GROUP } else { AUTHENTICATED_GROUP };
        if !groups.iter().any(|g| g == implied) {
            groups.push(implied.to_string());
        }
        User { name: self.user.clone(), uid: self.uid.clone().unwrap_or_default(), groups }
    }
}

/// Percent-decodes a header name's key (`Impersonate-Extra-` keys may
/// escape characters that header names cannot hold).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{authorize, forbidden, Rule, ADMINS, EDITORS, VIEWERS};
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn user(name: &str, groups: &[&str]) -> User {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        groups.push(AUTHENTICATED_GROUP.to_string());
        User { name: name.to_string(), uid: String::new(), groups }
    }

    #[test]
    fn headers_are_read_as_kube_apiserver_reads_them() {
        assert_eq!(Impersonation::from_headers(&headers(&[("Accept", "x")])).unwrap(), None);
        let asked = Impersonation::from_headers(&headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "kubefold:viewers"),
            ("Impersonate-Group", "team-a"),
            ("Impersonate-Uid", "1001"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-Scopes", "edit"),
            ("Impersonate-Extra-Example.com%2fteam", "a"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(asked.user, "alice");
        assert_eq!(asked.groups, ["kubefold:viewers", "team-a"]);
        assert_eq!(asked.extra, [("example.com/team".to_string(), vec!["a".to_string()]), ("scopes".to_string(), vec!["view".to_string(), "edit".to_string()])]);
        let served = asked.user();
        assert_eq!((served.name.as_str(), served.uid.as_str()), ("alice", "1001"));
        assert_eq!(served.groups, ["kubefold:viewers", "team-a", AUTHENTICATED_GROUP]);
        assert_eq!(asked.checks().len(), 1 + 2 + 1 + 3);
        for bad in [vec![("Impersonate-Group", "g")], vec![("Impersonate-Uid", "1")], vec![("Impersonate-Extra-A", "b")], vec![("Impersonate-User", "")]] {
            let status = Impersonation::from_headers(&headers(&bad)).unwrap_err();
            assert_eq!(status.code, 400, "{bad:?}");
        }
        let anonymous = Impersonation::from_headers(&headers(&[("Impersonate-User", ANONYMOUS_USER)])).unwrap().unwrap();
        assert_eq!(anonymous.user().groups, [UNAUTHENTICATED_GROUP]);
    }

    #[test]
    fn only_admins_or_a_rule_may_impersonate() {
        let asked = Impersonation::from_headers(&headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "kubefold:admins")])).unwrap().unwrap();
        let allowed = |u: &User, rules: &[Rule]| asked.checks().iter().all(|c| authorize(u, c, rules));
        assert!(allowed(&user("root", &[ADMINS]), &[]));
        for group in [VIEWERS, EDITORS] {
            assert!(!allowed(&user("eve", &[group]), &[]), "{group}");
        }
        let check = &asked.checks()[0];
        let status = forbidden(&user("eve", &[VIEWERS]), check).to_json();
        assert_eq!(status["code"], 403);
        assert_eq!(status["message"], "users \"bob\" is forbidden: User \"eve\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
        // A rule may grant it, for some users and groups only.
        let rules: Vec<Rule> = serde_saphyr::from_str("[{users: [ci], verbs: [impersonate], resources: [users, groups]}]").unwrap();
        assert!(allowed(&user("ci", &[]), &rules));
        assert!(!allowed(&user("other", &[]), &rules));
        let service_account = Impersonation::from_headers(&headers(&[("Impersonate-User", "system:serviceaccount:kube-system:builder")])).unwrap().unwrap();
        let checks = service_account.checks();
        let Target::Resource(r) = &checks[0].target else { panic!("not a resource") };
        assert_eq!((r.resource.as_str(), r.namespace.as_deref(), r.name.as_deref()), ("serviceaccounts", Some("kube-system"), Some("builder")));
    }
}
