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

/// Which state a read is served at ("Semantics for get and list",
/// Kubernetes API Concepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// resourceVersion unset: the most recent state.
    Latest,
    /// resourceVersion="0": any state (kubefold serves its latest snapshot).
    Any,
    /// Not older than N: wait briefly for the index to reach N.
    NotOlderThan(u64),
    /// Exactly at N (resourceVersionMatch=Exact): a snapshot of the past.
    Exact(u64),
}

/// A 422 Invalid on `ListOptions`, as kube-apiserver answers failed
/// `ValidateListOptions` (apimachinery meta/internalversion/validation).
fn invalid_list_options(errors: Vec<String>) -> Status {
    let detail = if errors.len() == 1 { errors[0].clone() } else { format!("[{}]", errors.join(", ")) };
    Status::new(422, "Invalid", format!("ListOptions.meta.k8s.io \"\" is invalid: {detail}"))
        .with_details("meta.k8s.io", "ListOptions", "")
}

impl Query {
    /// The read point of a get: unset = latest, "0" = any, N = not older than N.
    pub fn get_read_at(&self) -> Result<ReadAt, Status> {
        Ok(match self.resource_version()? {
            None => ReadAt::Latest,
            Some(0) => ReadAt::Any,
            Some(n) => ReadAt::NotOlderThan(n),
        })
    }

    /// The read point of a list, validating resourceVersion ×
    /// resourceVersionMatch × continue like kube-apiserver's
    /// `ValidateListOptions`.
    pub fn list_read_at(&self) -> Result<ReadAt, Status> {
        let rv = self.resource_version.as_deref().unwrap_or("");
        let matching = self.resource_version_match.as_deref().unwrap_or("");
        let has_continue = self.continue_token.as_deref().is_some_and(|c| !c.is_empty());
        let mut errors = Vec::new();
        if !matching.is_empty() {
            if rv.is_empty() {
                errors.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".to_string());
            }
            if has_continue {
                errors.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided".to_string());
            }
            if matching != "Exact" && matching != "NotOlderThan" {
                errors.push(format!(
                    "resourceVersionMatch: Unsupported value: \"{matching}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                ));
            }
            if matching == "Exact" && rv == "0" {
                errors.push("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".to_string());
            }
        }
        if self.send_initial_events.is_some() {
            errors.push("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".to_string());
        }
        if !errors.is_empty() {
            return Err(invalid_list_options(errors));
        }
        let n = self.resource_version()?;
        // "Semantics for get and list": with `limit` set and no
        // resourceVersionMatch, a resourceVersion other than "0" is Exact
        // (the first page of a chunked list read at that version).
        // <https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>
        let paged = self.limit()?.is_some();
        Ok(match (n, matching) {
            (None, _) => ReadAt::Latest,
            (Some(0), _) => ReadAt::Any,
            (Some(n), "Exact") => ReadAt::Exact(n),
            (Some(n), "") if paged => ReadAt::Exact(n),
            (Some(n), _) => ReadAt::NotOlderThan(n),
        })
    }

    /// Validates a watch's options like kube-apiserver's
    /// `validateWatchOptions`; returns `sendInitialEvents`.
    pub fn watch_send_initial_events(&self) -> Result<Option<bool>, Status> {
        let send = match self.send_initial_events.as_deref() {
            None => None,
            Some(_) => Some(flag(&self.send_initial_events)?),
        };
        let matching = self.resource_version_match.as_deref().unwrap_or("");
        let mut errors = Vec::new();
        if send.is_some() {
            if matching != "NotOlderThan" {
                errors.push("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".to_string());
            }
            if !flag(&self.allow_watch_bookmarks)? {
                errors.push("allowWatchBookmarks: Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is provided".to_string());
            }
        } else if !matching.is_empty() {
            errors.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".to_string());
        }
        if !errors.is_empty() {
            return Err(invalid_list_options(errors));
        }
        Ok(send)
    }
}

#[cfg(test)]
mod read_at_tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(s).unwrap()
    }

    #[test]
    fn list_resource_version_rules() {
        assert_eq!(q("").list_read_at().unwrap(), ReadAt::Latest);
        assert_eq!(q("resourceVersion=0").list_read_at().unwrap(), ReadAt::Any);
        assert_eq!(q("resourceVersion=7").list_read_at().unwrap(), ReadAt::NotOlderThan(7));
        assert_eq!(q("resourceVersion=7&resourceVersionMatch=NotOlderThan").list_read_at().unwrap(), ReadAt::NotOlderThan(7));
        assert_eq!(q("resourceVersion=0&resourceVersionMatch=NotOlderThan").list_read_at().unwrap(), ReadAt::Any);
        assert_eq!(q("resourceVersion=7&resourceVersionMatch=Exact").list_read_at().unwrap(), ReadAt::Exact(7));
        assert_eq!(q("resourceVersion=7&limit=2").list_read_at().unwrap(), ReadAt::Exact(7));
        assert_eq!(q("resourceVersion=7&limit=2&resourceVersionMatch=NotOlderThan").list_read_at().unwrap(), ReadAt::NotOlderThan(7));
        assert_eq!(q("resourceVersion=0&limit=2").list_read_at().unwrap(), ReadAt::Any);
        assert_eq!(q("limit=2").list_read_at().unwrap(), ReadAt::Latest);
        for bad in [
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=NotOlderThan",
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersion=5&resourceVersionMatch=Newest",
            "resourceVersion=5&resourceVersionMatch=Exact&continue=abc",
            "sendInitialEvents=true",
        ] {
            let err = q(bad).list_read_at().unwrap_err();
            assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{bad}: {err}");
            assert!(err.message.starts_with("ListOptions.meta.k8s.io \"\" is invalid: "), "{bad}: {err}");
        }
        assert_eq!(q("resourceVersion=x").list_read_at().unwrap_err().code, 400);
    }

    #[test]
    fn get_resource_version_rules() {
        assert_eq!(q("").get_read_at().unwrap(), ReadAt::Latest);
        assert_eq!(q("resourceVersion=0").get_read_at().unwrap(), ReadAt::Any);
        assert_eq!(q("resourceVersion=9").get_read_at().unwrap(), ReadAt::NotOlderThan(9));
    }

    #[test]
    fn watch_list_rules() {
        assert_eq!(q("").watch_send_initial_events().unwrap(), None);
        assert_eq!(
            q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").watch_send_initial_events().unwrap(),
            Some(true)
        );
        assert_eq!(q("sendInitialEvents=true&allowWatchBookmarks=true").watch_send_initial_events().unwrap_err().code, 422);
        assert_eq!(q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan").watch_send_initial_events().unwrap_err().code, 422);
        assert_eq!(q("resourceVersionMatch=NotOlderThan").watch_send_initial_events().unwrap_err().code, 422);
    }
}
