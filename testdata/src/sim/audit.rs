//! The simulator's audit log (`kubefold sim --audit-log-path FILE`): one
//! `audit.k8s.io/v1` `Event` per request at level `Metadata`, as a JSON
//! line, as kube-apiserver's log backend writes it: the authenticated
//! `user`, the `impersonatedUser`, the verb, the `objectRef` and the
//! response code, at stage `ResponseComplete` (`ResponseStarted` for
//! watches and streams, whose responses last). Requests refused by
//! authentication or authorization are recorded too. The simulator's own
//! `/sim/*` endpoints are not.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use actix_web::http::Method;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use super::access::{Attributes, Identity, UserInfo};

/// The open audit log file.
#[derive(Debug)]
pub struct AuditLog {
    file: Mutex<std::fs::File>,
}

/// One request, as recorded.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Who made it; `None` when it was not authenticated.
    pub identity: Option<&'a Identity>,
    /// Its method.
    pub method: &'a Method,
    /// Its path.
    pub path: &'a str,
    /// Its query string.
    pub query: &'a str,
    /// The client's address.
    pub source_ip: Option<String>,
    /// Its User-Agent.
    pub user_agent: &'a str,
    /// The response code.
    pub code: u16,
    /// Whether the response lasts (a watch, a stream).
    pub long_running: bool,
    /// When it arrived.
    pub received: DateTime<Utc>,
}

impl AuditLog {
    /// Opens (creates, appends to) the file, creating its directory.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditLog { file: Mutex::new(file) })
    }

    /// Writes the event of `entry`.
    pub fn record(&self, entry: &Entry<'_>) {
        let mut line = event(entry).to_string();
        line.push('\n');
        if let Ok(mut file) = self.file.lock() {
            if let Err(e) = file.write_all(line.as_bytes()) {
                tracing::warn!(error = %e, "Cannot write the audit log.");
            }
        }
    }
}

/// The `Event` of a request.
pub fn event(entry: &Entry<'_>) -> Value {
    let uri = if entry.query.is_empty() { entry.path.to_string() } else { format!("{}?{}", entry.path, entry.query) };
    let attributes = Attributes::of(entry.method, entry.path, entry.query);
    let verb = match &attributes {
        Some(a) => a.verb.clone(),
        None => match *entry.method {
            Method::GET | Method::HEAD => "get",
            Method::POST => "post",
            Method::PUT => "put",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        }
        .to_string(),
    };
    let id: u128 = rand::random();
    let hex = format!("{id:032x}");
    let audit_id = format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]);
    let timestamp = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    let user = entry.identity.map_or_else(|| json!({}), |i| i.user.to_json());
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id,
        "stage": if entry.long_running && matches!(entry.code, 101 | 200) { "ResponseStarted" } else { "ResponseComplete" },
        "requestURI": uri,
        "verb": verb,
        "user": user,
        "sourceIPs": entry.source_ip.iter().collect::<Vec<_>>(),
        "userAgent": entry.user_agent,
        "responseStatus": {"metadata": {}, "code": entry.code},
        "requestReceivedTimestamp": timestamp(entry.received),
        "stageTimestamp": timestamp(Utc::now()),
    });
    if let Some(impersonated) = entry.identity.and_then(|i| i.impersonated.as_ref()) {
        event["impersonatedUser"] = UserInfo::to_json(impersonated);
    }
    if let Some(a) = attributes {
        let mut object = json!({"resource": a.resource, "apiVersion": a.version});
        for (key, value) in [("apiGroup", Some(&a.group).filter(|g| !g.is_empty())), ("namespace", a.namespace.as_ref()), ("name", a.name.as_ref()), ("subresource", a.subresource.as_ref())] {
            if let Some(value) = value {
                object[key] = json!(value);
            }
        }
        event["objectRef"] = object;
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_both_users_the_object_and_the_code() {
        let alice = UserInfo { username: "alice".into(), uid: "1001".into(), groups: vec!["team-a".into(), "system:authenticated".into()], extra: Vec::new() };
        let impersonator = UserInfo { username: "impersonator".into(), uid: String::new(), groups: vec!["system:authenticated".into()], extra: Vec::new() };
        let identity = Identity { user: impersonator, impersonated: Some(alice) };
        let entry = Entry {
            identity: Some(&identity),
            method: &Method::POST,
            path: "/api/v1/namespaces/default/configmaps",
            query: "fieldManager=kubectl",
            source_ip: Some("127.0.0.1".into()),
            user_agent: "kubectl/v1.33",
            code: 403,
            long_running: false,
            received: Utc::now(),
        };
        let event = event(&entry);
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["kind"], "Event");
        assert_eq!(event["stage"], "ResponseComplete");
        assert_eq!(event["verb"], "create");
        assert_eq!(event["user"]["username"], "impersonator");
        assert_eq!(event["impersonatedUser"]["username"], "alice");
        assert_eq!(event["impersonatedUser"]["uid"], "1001");
        assert_eq!(event["objectRef"], json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"}));
        assert_eq!(event["responseStatus"]["code"], 403);
        assert_eq!(event["requestURI"], "/api/v1/namespaces/default/configmaps?fieldManager=kubectl");
        assert_eq!(event["auditID"].as_str().unwrap().len(), 36);
    }
}
