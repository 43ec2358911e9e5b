//! List and watch options, continue tokens and list pages, with the
//! semantics of the Kubernetes docs "API Concepts" (sections "Efficient
//! detection of changes", "Retrieving large results sets in chunks",
//! "Resource versions") and kube-apiserver's etcd3 store (`GetList`).

use std::sync::Arc;

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use kubefold_engine::resources::ResourceType;
use serde_json::json;

use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Cause, Result};
use super::store::{self, Object, Store};

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvMatch {
    /// `Exact`: the list must be served at exactly that version.
    Exact,
    /// `NotOlderThan`: any version at least as new.
    NotOlderThan,
}

/// The query parameters of list and watch (`metav1.ListOptions`).
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: LabelSelector,
    /// `fieldSelector`.
    pub field_selector: FieldSelector,
    /// `limit` (0 or absent: no paging).
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion` as given (`None` when absent or empty).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<RvMatch>,
    /// `watch=true|1` or the `/watch/` path prefix.
    pub watch: bool,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
}

/// Parses a boolean query value as Go's `strconv.ParseBool` does.
pub fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
        other => Err(ApiError::BadRequest(format!("{name}: strconv.ParseBool: parsing \"{other}\": invalid syntax"))),
    }
}

/// The first value of a query parameter (`url.Values.Get`).
pub fn query_value<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Parses a resource version (400 when it is not a decimal integer).
pub fn parse_rv(value: &str) -> Result<u64> {
    value.parse().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {value}")))
}

impl ListOptions {
    /// Parses and validates the options of a list or watch of `resource`
    /// (`ValidateListOptions`; selector errors are 400, option conflicts 422).
    pub fn parse(query: &[(String, String)], watch_prefix: bool, resource: &ResourceType) -> Result<ListOptions> {
        let get = |name: &str| query_value(query, name);
        let mut options = ListOptions {
            watch: watch_prefix || parse_bool("watch", get("watch").unwrap_or_default())?,
            allow_watch_bookmarks: parse_bool("allowWatchBookmarks", get("allowWatchBookmarks").unwrap_or_default())?,
            ..ListOptions::default()
        };
        if let Some(selector) = get("labelSelector") {
            options.label_selector =
                LabelSelector::parse(selector).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        }
        if let Some(selector) = get("fieldSelector") {
            let parsed = FieldSelector::parse(selector).map_err(|e| ApiError::BadRequest(e.to_string()))?;
            super::fields::validate(&resource.group, &resource.plural, &parsed)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            options.field_selector = parsed;
        }
        if let Some(limit) = get("limit").filter(|l| !l.is_empty()) {
            let limit: i64 = limit
                .parse()
                .map_err(|_| ApiError::BadRequest(format!("limit: strconv.ParseInt: parsing \"{limit}\": invalid syntax")))?;
            options.limit = (limit > 0).then_some(limit as usize);
        }
        options.continue_token = get("continue").filter(|c| !c.is_empty()).map(str::to_string);
        options.resource_version = get("resourceVersion").filter(|v| !v.is_empty()).map(str::to_string);
        if let Some(timeout) = get("timeoutSeconds").filter(|t| !t.is_empty()) {
            let seconds: i64 = timeout.parse().map_err(|_| {
                ApiError::BadRequest(format!("timeoutSeconds: strconv.ParseInt: parsing \"{timeout}\": invalid syntax"))
            })?;
            options.timeout_seconds = Some(seconds.max(0) as u64);
        }
        if let Some(send) = get("sendInitialEvents").filter(|s| !s.is_empty()) {
            options.send_initial_events = Some(parse_bool("sendInitialEvents", send)?);
        }
        let raw_match = get("resourceVersionMatch").filter(|m| !m.is_empty());
        options.resource_version_match = match raw_match {
            Some("Exact") => Some(RvMatch::Exact),
            Some("NotOlderThan") => Some(RvMatch::NotOlderThan),
            _ => None,
        };
        let causes = options.validate(raw_match);
        if !causes.is_empty() {
            return Err(ApiError::invalid_list_options(causes));
        }
        Ok(options)
    }

    /// `ValidateListOptions` / `validateWatchOptions` of apimachinery.
    fn validate(&self, raw_match: Option<&str>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let field = "resourceVersionMatch";
        if self.watch {
            if self.send_initial_events.is_some() {
                if self.resource_version_match != Some(RvMatch::NotOlderThan) {
                    causes.push(Cause::forbidden(field, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
                }
                if !self.allow_watch_bookmarks {
                    causes.push(Cause::forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    ));
                }
            }
            if let Some(raw) = raw_match {
                if self.send_initial_events.is_none() {
                    causes.push(Cause::forbidden(field, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                }
                if raw != "NotOlderThan" {
                    causes.push(Cause::not_supported(field, raw, &["NotOlderThan"]));
                }
                if self.continue_token.is_some() {
                    causes.push(Cause::forbidden(field, "resourceVersionMatch is forbidden when continue is provided"));
                }
            }
            return causes;
        }
        if let Some(raw) = raw_match {
            if self.resource_version.is_none() {
                causes.push(Cause::forbidden(field, "resourceVersionMatch is forbidden unless resourceVersion is provided"));
            }
            if self.continue_token.is_some() {
                causes.push(Cause::forbidden(field, "resourceVersionMatch is forbidden when continue is provided"));
            }
            if self.resource_version_match.is_none() {
                causes.push(Cause::not_supported(field, raw, &["Exact", "NotOlderThan", ""]));
            }
            if self.resource_version_match == Some(RvMatch::Exact) && self.resource_version.as_deref() == Some("0") {
                causes.push(Cause::forbidden(field, "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
            }
        }
        if self.send_initial_events.is_some() {
            causes.push(Cause::forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
        }
        causes
    }

    /// Whether a label or field selector is set.
    pub fn has_selectors(&self) -> bool {
        !self.label_selector.is_empty() || !self.field_selector.is_empty()
    }

    /// Whether an object passes both selectors. An empty selector reads
    /// nothing of the object (a generated pod's fields are made from its
    /// whole body).
    pub fn matches(&self, object: &Object) -> bool {
        (self.label_selector.is_empty() || self.label_selector.matches_pairs(&object.labels()))
            && (self.field_selector.is_empty() || self.field_selector.matches_pairs(&object.fields()))
    }

    /// The version a list must wait for before it can be served: the `N`
    /// of `resourceVersion=N` unless it is `0` or a continue token is given.
    pub fn minimum_rv(&self) -> Result<Option<u64>> {
        match (&self.resource_version, &self.continue_token) {
            (Some(rv), None) if rv != "0" => parse_rv(rv).map(Some),
            _ => Ok(None),
        }
    }
}

/// A decoded continue token (`storage.DecodeContinue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The version the first page was read at; -1: the latest.
    pub rv: i64,
    /// The first key of the next page, relative to the list's key prefix.
    pub start: String,
}

/// Encodes a continue token as kube-apiserver does: URL-safe base64
/// (no padding) of `{"v":"meta.k8s.io/v1","rv":RV,"start":KEY}`.
pub fn encode_continue(start: &str, rv: i64) -> String {
    let json = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
}

/// Decodes a continue token; errors are 400 `invalid continue token: ...`.
pub fn decode_continue(token: &str) -> Result<ContinueToken> {
    let invalid = |detail: String| ApiError::BadRequest(format!("invalid continue token: {detail}"));
    let data = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| invalid(format!("continue key is not valid: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&data).map_err(|e| invalid(format!("continue key is not valid: {e}")))?;
    match value["v"].as_str() {
        Some("meta.k8s.io/v1") => {}
        other => {
            return Err(invalid(format!("server does not recognize this encoded version {}", other.unwrap_or_default())))
        }
    }
    let rv = value["rv"].as_i64().unwrap_or(0);
    if rv == 0 {
        return Err(invalid(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    let start = value["start"].as_str().unwrap_or_default().to_string();
    if start.is_empty() {
        return Err(invalid("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into()));
    }
    // Path traversal out of the key prefix is refused, as path.Clean does in kube-apiserver.
    if start.split('/').any(|segment| segment == ".." || segment == ".") || start.starts_with('/') || start.contains("//") {
        return Err(invalid(format!("continue key is not valid: {start}")));
    }
    Ok(ContinueToken { rv, start })
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    /// The version the list was read at (`metadata.resourceVersion`).
    pub rv: u64,
    /// The items.
    pub items: Vec<Arc<Object>>,
    /// `metadata.continue`.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount` (only without selectors, as in kube-apiserver).
    pub remaining_item_count: Option<u64>,
}

const EXPIRED: &str = "The resourceVersion for the provided list is too old.";
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Reads one page of a list. The caller has waited for `minimum_rv`.
///
/// Items are in key order (namespace, then name, as etcd orders them). With
/// `limit`, the page holds at most `limit` matching items; when a further
/// key exists the page carries a continue token that reads the next page
/// at the same version, and without selectors `remainingItemCount`.
pub fn list(store: &Store, resource: usize, namespace: Option<&str>, options: &ListOptions) -> Result<Page> {
    let prefix = store::prefix(namespace);
    let (at, start, continuing) = match &options.continue_token {
        Some(token) => {
            if options.resource_version.as_deref().is_some_and(|rv| rv != "0") {
                return Err(ApiError::BadRequest("specifying resource version is not allowed when using continue".into()));
            }
            let token = decode_continue(token)?;
            let at = if token.rv < 0 { store.rv() } else { (token.rv as u64).min(store.rv()) };
            (at, format!("{prefix}{}", token.start), true)
        }
        None => {
            // "Semantics for get and list" (API Concepts): with a limit, a
            // non-zero resourceVersion and no resourceVersionMatch is Exact.
            // <https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>
            let at = match (options.resource_version.as_deref(), options.resource_version_match) {
                (Some(rv), Some(RvMatch::Exact)) => parse_rv(rv)?,
                (Some(rv), None) if rv != "0" && options.limit.is_some() => parse_rv(rv)?,
                _ => store.rv(),
            };
            (at, prefix.clone(), false)
        }
    };
    let snapshot = store.snapshot(resource, &prefix, &start, at).map_err(|_| {
        if continuing {
            let relative = start.strip_prefix(&prefix).unwrap_or(&start);
            ApiError::Expired { message: INCONSISTENT_CONTINUE.into(), continue_token: Some(encode_continue(relative, -1)) }
        } else {
            ApiError::Expired { message: EXPIRED.into(), continue_token: None }
        }
    })?;
    let limit = options.limit.unwrap_or(usize::MAX);
    let mut items = Vec::new();
    let mut last_index = None;
    for (i, (_, object)) in snapshot.iter().enumerate() {
        if items.len() >= limit {
            break;
        }
        if options.matches(object) {
            items.push(object.clone());
        }
        last_index = Some(i);
    }
    let mut page = Page { rv: at, items, continue_token: None, remaining_item_count: None };
    if let Some(last) = last_index {
        let more = snapshot.len() - last - 1;
        if page.items.len() >= limit && more > 0 {
            let key = &snapshot[last].0;
            let relative = key.strip_prefix(&prefix).unwrap_or(key);
            page.continue_token = Some(encode_continue(&format!("{relative}\u{0}"), at as i64));
            if !options.has_selectors() {
                page.remaining_item_count = Some(more as u64);
            }
        }
    }
    Ok(page)
}

/// The size of the chunks a list or watch body is written in.
pub const CHUNK: usize = 256 * 1024;

/// The JSON list body of a page, written lazily in chunks of about 256 KiB:
/// `{"kind":"PodList","apiVersion":"v1","metadata":{...},"items":[...]}`.
pub fn list_body(resource: &ResourceType, page: Page) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let mut metadata = serde_json::Map::new();
    metadata.insert("resourceVersion".into(), json!(page.rv.to_string()));
    if let Some(token) = &page.continue_token {
        metadata.insert("continue".into(), json!(token));
    }
    if let Some(count) = page.remaining_item_count {
        metadata.insert("remainingItemCount".into(), json!(count));
    }
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        json!(resource.list_kind()),
        json!(resource.api_version()),
        serde_json::Value::Object(metadata)
    );
    struct Writer {
        head: Option<String>,
        items: std::vec::IntoIter<Arc<Object>>,
        first: bool,
        done: bool,
    }
    let writer = Writer { head: Some(head), items: page.items.into_iter(), first: true, done: false };
    futures::stream::unfold(writer, |mut w| async move {
        if w.done {
            return None;
        }
        let mut out = BytesMut::with_capacity(CHUNK + 8 * 1024);
        if let Some(head) = w.head.take() {
            out.put_slice(head.as_bytes());
        }
        while out.len() < CHUNK {
            match w.items.next() {
                Some(item) => {
                    if !w.first {
                        out.put_u8(b',');
                    }
                    w.first = false;
                    item.write_list_item(&mut out);
                }
                None => {
                    out.put_slice(b"]}");
                    w.done = true;
                    break;
                }
            }
        }
        Some((Ok(out.freeze()), w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::{json, Value};

    fn pods() -> ResourceType {
        kubefold_engine::resources::builtin().remove(0)
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn store_with(names: &[(&str, &str, &str)]) -> (Store, usize) {
        let catalog: Arc<[ResourceType]> = kubefold_engine::resources::builtin().into();
        let mut store = Store::new(catalog, 100, 100, 1);
        for (ns, name, app) in names {
            store.load(0, json!({"metadata": {"name": name, "namespace": ns, "uid": name, "labels": {"app": app}},
                                  "spec": {"nodeName": "n1"}}));
        }
        store.finish_load();
        (store, 0)
    }

    fn names(page: &Page) -> Vec<String> {
        page.items.iter().map(|o| o.value()["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn continue_tokens_match_kube_apiserver_encoding() {
        // {"v":"meta.k8s.io/v1","rv":123,"start":"default/web-1\u0000"}
        let token = encode_continue("default/web-1\u{0}", 123);
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&token).unwrap();
        let value: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(value, json!({"v": "meta.k8s.io/v1", "rv": 123, "start": "default/web-1\u{0}"}));
        assert_eq!(decode_continue(&token).unwrap(), ContinueToken { rv: 123, start: "default/web-1\u{0}".into() });
        assert_eq!(decode_continue("!!").unwrap_err().code(), 400);
        let traversal = encode_continue("../secrets/x", 5);
        assert_eq!(decode_continue(&traversal).unwrap_err().code(), 400);
    }

    #[test]
    fn options_are_validated_like_validate_list_options() {
        let err = ListOptions::parse(&query(&[("resourceVersionMatch", "Exact")]), false, &pods()).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.to_string(),
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        let err = ListOptions::parse(&query(&[("sendInitialEvents", "true")]), false, &pods()).unwrap_err();
        assert!(err.to_string().contains("sendInitialEvents is forbidden for list"));
        let err = ListOptions::parse(&query(&[("watch", "1"), ("sendInitialEvents", "true")]), false, &pods()).unwrap_err();
        assert!(err.to_string().contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
        let ok = ListOptions::parse(
            &query(&[("watch", "1"), ("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan"), ("allowWatchBookmarks", "true")]),
            false,
            &pods(),
        )
        .unwrap();
        assert_eq!(ok.send_initial_events, Some(true));
        let err = ListOptions::parse(&query(&[("labelSelector", "a in (")]), false, &pods()).unwrap_err();
        assert_eq!(err.code(), 400);
        let err = ListOptions::parse(&query(&[("fieldSelector", "spec.bogus=x")]), false, &pods()).unwrap_err();
        assert_eq!(err.to_string(), "field label not supported: spec.bogus");
        assert_eq!(ListOptions::parse(&query(&[("watch", "yes")]), false, &pods()).unwrap_err().code(), 400);
    }

    #[test]
    fn pages_follow_key_order_and_carry_continue_and_remaining_count() {
        let (store, pods) = store_with(&[("a", "p1", "x"), ("a", "p2", "y"), ("b", "p3", "x"), ("b", "p4", "x"), ("c", "p5", "y")]);
        let first = list(&store, pods, None, &ListOptions { limit: Some(2), ..Default::default() }).unwrap();
        assert_eq!(names(&first), ["p1", "p2"]);
        assert_eq!(first.remaining_item_count, Some(3));
        let token = decode_continue(first.continue_token.as_deref().unwrap()).unwrap();
        assert_eq!(token, ContinueToken { rv: store.rv() as i64, start: "a/p2\u{0}".into() });
        let second = list(
            &store,
            pods,
            None,
            &ListOptions { limit: Some(2), continue_token: first.continue_token.clone(), ..Default::default() },
        )
        .unwrap();
        assert_eq!(names(&second), ["p3", "p4"]);
        assert_eq!(second.remaining_item_count, Some(1));
        let third = list(
            &store,
            pods,
            None,
            &ListOptions { limit: Some(2), continue_token: second.continue_token.clone(), ..Default::default() },
        )
        .unwrap();
        assert_eq!(names(&third), ["p5"]);
        assert_eq!((third.continue_token, third.remaining_item_count), (None, None));
    }

    #[test]
    fn selector_pages_fill_up_to_limit_and_omit_remaining_count() {
        let (store, pods) = store_with(&[("a", "p1", "x"), ("a", "p2", "y"), ("b", "p3", "x"), ("b", "p4", "x"), ("c", "p5", "y")]);
        let options = ListOptions { limit: Some(2), label_selector: LabelSelector::parse("app=x").unwrap(), ..Default::default() };
        let first = list(&store, pods, None, &options).unwrap();
        assert_eq!(names(&first), ["p1", "p3"]);
        assert_eq!(first.remaining_item_count, None);
        let next = ListOptions { continue_token: first.continue_token.clone(), ..options.clone() };
        let second = list(&store, pods, None, &next).unwrap();
        assert_eq!(names(&second), ["p4"]);
        assert!(second.continue_token.is_none());
        let in_b = list(&store, pods, Some("b"), &ListOptions::default()).unwrap();
        assert_eq!(names(&in_b), ["p3", "p4"]);
    }

    #[test]
    fn later_pages_are_read_at_the_first_pages_version() {
        let (mut store, pods) = store_with(&[("a", "p1", "x"), ("a", "p2", "x"), ("a", "p3", "x")]);
        let first = list(&store, pods, None, &ListOptions { limit: Some(1), ..Default::default() }).unwrap();
        store.remove(pods, "a/p2", json!({"metadata": {"name": "p2", "namespace": "a"}}));
        store.put(pods, "a/p25", json!({"metadata": {"name": "p25", "namespace": "a", "uid": "u"}}));
        let rest = list(&store, pods, None, &ListOptions { continue_token: first.continue_token, ..Default::default() }).unwrap();
        assert_eq!(names(&rest), ["p2", "p3"]);
        assert_eq!(rest.rv, first.rv);
    }

    #[test]
    fn a_limit_with_a_resource_version_and_no_match_reads_exactly_there() {
        let (mut store, pods) = store_with(&[("a", "p1", "x"), ("a", "p2", "x")]);
        let at = store.rv().to_string();
        store.put(pods, "a/p3", json!({"metadata": {"name": "p3", "namespace": "a", "uid": "u3"}}));
        let paged = ListOptions { limit: Some(10), resource_version: Some(at.clone()), ..Default::default() };
        let page = list(&store, pods, None, &paged).unwrap();
        assert_eq!((names(&page), page.rv.to_string()), (vec!["p1".to_string(), "p2".to_string()], at.clone()));
        // Without a limit, or with NotOlderThan: the latest state.
        let unpaged = ListOptions { resource_version: Some(at.clone()), ..Default::default() };
        assert_eq!(names(&list(&store, pods, None, &unpaged).unwrap()), ["p1", "p2", "p3"]);
        let newer = ListOptions { resource_version_match: Some(RvMatch::NotOlderThan), ..paged };
        assert_eq!(names(&list(&store, pods, None, &newer).unwrap()), ["p1", "p2", "p3"]);
    }

    #[test]
    fn exact_reads_past_the_history_are_expired() {
        let (mut store, pods) = store_with(&[("a", "p1", "x")]);
        for i in 0..150 {
            store.put(pods, "a/p1", json!({"metadata": {"name": "p1", "namespace": "a", "uid": "p1", "labels": {"i": i.to_string()}}}));
        }
        let options = ListOptions {
            resource_version: Some("100".into()),
            resource_version_match: Some(RvMatch::Exact),
            ..Default::default()
        };
        let error = list(&store, pods, None, &options).unwrap_err();
        assert_eq!(error.code(), 410);
        assert_eq!(error.to_string(), "The resourceVersion for the provided list is too old.");
    }

    #[test]
    fn list_body_is_a_kubernetes_list_without_item_type_meta() {
        let (store, pods) = store_with(&[("a", "p1", "x"), ("a", "p2", "y")]);
        let page = list(&store, pods, None, &ListOptions::default()).unwrap();
        let chunks: Vec<Bytes> =
            futures::executor::block_on(list_body(store.resource(pods), page).map(|c| c.unwrap()).collect());
        let body: Vec<u8> = chunks.concat();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["kind"], "PodList");
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["metadata"], json!({"resourceVersion": store.rv().to_string()}));
        assert_eq!(value["items"].as_array().unwrap().len(), 2);
        assert!(value["items"][0].get("kind").is_none());
        assert_eq!(value["items"][0]["metadata"]["name"], "p1");
    }
}
