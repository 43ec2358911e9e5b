//! Query parameters of list, get and watch requests, as the Kubernetes API
//! names them (`ListOptions`, `GetOptions`).

use kubefold_engine::status::Status;
use serde::Deserialize;

/// The raw query parameters kubefold reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Query {
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `limit`.
    pub limit: Option<String>,
    /// `continue`.
    #[serde(rename = "continue")]
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `watch`.
    pub watch: Option<String>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<String>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: Option<String>,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<String>,
    /// `includeObject` (Table output): None, Metadata, Object.
    pub include_object: Option<String>,
}

/// Kubernetes query booleans: `true`/`1` are true (as the apiserver's
/// conversion accepts), `false`/`0`/empty are false.
pub fn flag(value: &Option<String>) -> Result<bool, Status> {
    match value.as_deref() {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(Status::bad_request(format!("invalid boolean value {other:?}"))),
    }
}

impl Query {
    /// Parses a query string; unknown parameters are ignored as kube-apiserver does.
    pub fn parse(query: &str) -> Result<Query, Status> {
        serde_urlencoded::from_str(query).map_err(|e| Status::bad_request(format!("invalid query: {e}")))
    }

    /// Whether this is a watch request.
    pub fn is_watch(&self) -> Result<bool, Status> {
        flag(&self.watch)
    }

    /// `limit`, where 0 or absent means no limit.
    pub fn limit(&self) -> Result<Option<usize>, Status> {
        match self.limit.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => match s.parse::<i64>() {
                Ok(n) if n <= 0 => Ok(None),
                Ok(n) => Ok(Some(n as usize)),
                Err(_) => Err(Status::bad_request(format!("invalid limit {s:?}: must be an integer"))),
            },
        }
    }

    /// `timeoutSeconds`.
    pub fn timeout_seconds(&self) -> Result<Option<u64>, Status> {
        match self.timeout_seconds.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => s
                .parse::<u64>()
                .map(Some)
                .map_err(|_| Status::bad_request(format!("invalid timeoutSeconds {s:?}: must be a non-negative integer"))),
        }
    }

    /// `resourceVersion` as a number; `None` when unset or empty.
    pub fn resource_version(&self) -> Result<Option<u64>, Status> {
        match self.resource_version.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => s.parse::<u64>().map(Some).map_err(|_| {
                Status::bad_request(format!("invalid resource version {s:?}: resourceVersion must be a decimal integer"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_parse_like_kube_apiserver() {
        let q = Query::parse("labelSelector=app%3Dweb&limit=500&watch=1&resourceVersion=12&unknown=x").unwrap();
        assert_eq!(q.label_selector.as_deref(), Some("app=web"));
        assert_eq!(q.limit().unwrap(), Some(500));
        assert!(q.is_watch().unwrap());
        assert_eq!(q.resource_version().unwrap(), Some(12));
        let q = Query::parse("resourceVersion=abc&limit=x&timeoutSeconds=-1&watch=maybe").unwrap();
        assert_eq!(q.resource_version().unwrap_err().code, 400);
        assert_eq!(q.limit().unwrap_err().code, 400);
        assert_eq!(q.timeout_seconds().unwrap_err().code, 400);
        assert_eq!(q.is_watch().unwrap_err().code, 400);
        assert_eq!(Query::parse("limit=0").unwrap().limit().unwrap(), None);
    }
}
