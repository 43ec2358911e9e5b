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

/// Who forwarded requests act as on a member that impersonates
/// ([`kubefold_actors::cluster::ClusterSpec::impersonates`]): the
/// request's user (the impersonated one under `kubectl --as`) and extra
/// attributes. In the request extensions of every admitted request when
/// authentication is on; without it (authentication off) members see
/// kubefold's own identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user, with its UID and groups.
    pub user: User,
    /// Extra attributes, key and values.
    pub extra: Vec<(String, Vec<String>)>,
}

impl Caller {
    /// The `Impersonate-*` headers naming this caller, as Karmada's cluster
    /// proxy sends them: the user, the UID when there is one, each group but
    /// `system:authenticated` and `system:unauthenticated` (which the member
    /// adds itself), each extra value under its percent-encoded key.
    pub fn headers(&self) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, Status> {
        let value = |text: &str| {
            http::HeaderValue::from_str(text).map_err(|_| Status::bad_request(format!("{text:?} cannot be sent to a member in an impersonation header")))
        };
        let mut headers = vec![(http::HeaderName::from_static(USER_HEADER), value(&self.user.name)?)];
        if !self.user.uid.is_empty() {
            headers.push((http::HeaderName::from_static(UID_HEADER), value(&self.user.uid)?));
        }
        for group in self.user.groups.iter().filter(|g| *g != AUTHENTICATED_GROUP && *g != UNAUTHENTICATED_GROUP) {
            headers.push((http::HeaderName::from_static(GROUP_HEADER), value(group)?));
        }
        for (key, values) in &self.extra {
            let name = http::HeaderName::from_bytes(format!("{EXTRA_HEADER_PREFIX}{}", percent_encode(key)).as_bytes())
                .map_err(|_| Status::bad_request(format!("the extra attribute {key:?} cannot be sent to a member")))?;
            for v in values {
                headers.push((name.clone(), value(v)?));
            }
        }
        Ok(headers)
    }
}

/// Percent-encodes what a header name cannot hold (everything but
/// letters, digits and `-_.~`), as kube-apiserver's clients escape
/// `Impersonate-Extra-` keys.
fn percent_encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02x}"));
        }
    }
    out
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
    fn a_caller_is_named_to_members_in_impersonation_headers() {
        let caller = Caller {
            user: User { name: "alice".into(), uid: "1001".into(), groups: vec!["team-a".into(), AUTHENTICATED_GROUP.into()] },
            extra: vec![("example.com/team".into(), vec!["a".into(), "b".into()])],
        };
        let sent: Vec<(String, String)> = caller.headers().unwrap().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string())).collect();
        let expected = [
            ("impersonate-user", "alice"),
            ("impersonate-uid", "1001"),
            ("impersonate-group", "team-a"),
            ("impersonate-extra-example.com%2fteam", "a"),
            ("impersonate-extra-example.com%2fteam", "b"),
        ];
        assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())));
        // What a member reads back is the caller.
        let mut map = HeaderMap::new();
        for (k, v) in caller.headers().unwrap() {
            map.append(HeaderName::from_bytes(k.as_str().as_bytes()).unwrap(), HeaderValue::from_bytes(v.as_bytes()).unwrap());
        }
        let read = Impersonation::from_headers(&map).unwrap().unwrap();
        assert_eq!(read.user(), caller.user);
        assert_eq!(read.extra, caller.extra);
        let bad = Caller { user: User { name: "line\nbreak".into(), uid: String::new(), groups: Vec::new() }, extra: Vec::new() };
        assert_eq!(bad.headers().unwrap_err().code, 400);
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
