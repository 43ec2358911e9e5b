//! The fleet as the console shows it: every member with its phase, object
//! counts per type, sync lag, last error, relists and reconnects; the
//! index's head and compacted resourceVersion; the estimator endpoints.
//! Rendered on the server (`/ui/fleet`, readable without JavaScript, paged
//! for large fleets) and streamed (`/ui/fleet?watch=true`): one JSON line with
//! the whole fleet, then once a second a line with the stats and only the
//! members that changed. The stream reads kubefold's own shared view of the
//! fleet (what the watchers report), never the members.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use kubefold_actors::fleet::SyncState;
use kubefold_actors::resolver::EstimatorStatus;
use kubefold_engine::status::Status;
use serde::Serialize;

use super::escape;
use crate::ApiState;

/// Members per page of the server-rendered table.
pub const PAGE_SIZE: usize = 100;

/// How often the stream sends the fleet's changes.
pub const STREAM_INTERVAL: Duration = Duration::from_secs(1);

/// One member as the console shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    /// The member cluster.
    pub name: String,
    /// `Synced`, `Stale` or `Connecting` (as the admin API's status).
    pub phase: &'static str,
    /// Objects held for it, every type.
    pub objects: usize,
    /// Objects held per type (`plural` or `plural.group`), types with none left out.
    pub types: BTreeMap<String, usize>,
    /// How far kubefold may be behind it, in whole seconds (zero while synced).
    pub lag_seconds: u64,
    /// The last error one of its watchers saw.
    pub last_error: Option<String>,
    /// Full lists made.
    pub relists: u64,
    /// Watch reconnects.
    pub reconnects: u64,
    /// Events received from it.
    pub events: u64,
}

/// The index and the event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// The resourceVersion of the last committed event.
    pub head_resource_version: u64,
    /// Events at or below this were compacted away.
    pub compacted_resource_version: u64,
    /// Objects in the index.
    pub objects: usize,
    /// Events in the log.
    pub events: usize,
    /// Open watches.
    pub watches: usize,
    /// Members.
    pub clusters: usize,
}

/// One replica over etcd as the console shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRow {
    /// The replica's id.
    pub id: String,
    /// The address it serves on.
    pub address: String,
    /// Seconds left before its lease expires unless renewed.
    pub lease_remaining_seconds: u64,
    /// The log revision it applied.
    pub applied_revision: u64,
    /// How far the log's head is ahead of it.
    pub lag_revisions: u64,
    /// The members it owns.
    pub owned: Vec<String>,
}

/// The replicas sharing the etcd log, or why they could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replicas {
    /// Every registered replica, by id.
    pub items: Vec<ReplicaRow>,
    /// Why the shared log could not be read (the rows are then empty).
    pub error: Option<String>,
}

/// The whole fleet at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    /// The index and the event log.
    pub stats: Stats,
    /// Every member, by name.
    pub members: Vec<MemberRow>,
    /// The estimator endpoint of every member.
    pub estimators: Vec<EstimatorStatus>,
    /// The replicas, when this kubefold is one of several over etcd.
    pub replicas: Option<Replicas>,
}

/// How long the console waits for the shared log's replicas.
const REPLICAS_TIMEOUT: Duration = Duration::from_secs(2);

/// The replicas over the shared log, `None` without one.
async fn replicas(state: &ApiState) -> Option<Replicas> {
    let shared = state.fleet.shared()?.clone();
    let read = tokio::time::timeout(REPLICAS_TIMEOUT, shared.replicas()).await;
    Some(match read {
        Ok(Ok(replicas)) => Replicas {
            items: replicas
                .into_iter()
                .map(|r| ReplicaRow {
                    id: r.id,
                    address: r.address,
                    lease_remaining_seconds: r.lease_remaining_seconds,
                    applied_revision: r.applied_revision,
                    lag_revisions: r.lag_revisions,
                    owned: r.owned,
                })
                .collect(),
            error: None,
        },
        Ok(Err(e)) => Replicas { items: Vec::new(), error: Some(e.to_string()) },
        Err(_) => Replicas { items: Vec::new(), error: Some(format!("the shared log did not answer within {} s", REPLICAS_TIMEOUT.as_secs())) },
    })
}

/// The fleet with its replicas (read from the shared log, if any).
pub async fn view_with_replicas(state: &ApiState) -> FleetView {
    let mut view = view(state);
    view.replicas = replicas(state).await;
    view
}

/// A type key (`v1/pods`, `apps/v1/deployments`) as people say it.
fn type_name(key: &str) -> String {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        [group, _, plural] => format!("{plural}.{group}"),
        [.., plural] => plural.to_string(),
        [] => key.to_string(),
    }
}

/// The fleet as the shared view holds it now.
pub fn view(state: &ApiState) -> FleetView {
    let snapshot = state.fleet.snapshot();
    let status = state.fleet.status();
    let names = state.fleet.member_names();
    let members = names
        .iter()
        .map(|name| {
            let watchers = status.get(name).cloned().unwrap_or_default();
            let mut row = MemberRow {
                name: name.clone(),
                phase: "Connecting",
                objects: 0,
                types: BTreeMap::new(),
                lag_seconds: 0,
                last_error: None,
                relists: 0,
                reconnects: 0,
                events: 0,
            };
            let (mut synced, mut stale) = (!watchers.is_empty(), false);
            for (resource, w) in &watchers {
                synced &= w.state == SyncState::Synced;
                stale |= w.state == SyncState::Stale;
                if w.last_error.is_some() {
                    row.last_error = w.last_error.clone();
                }
                row.lag_seconds = row.lag_seconds.max(w.lag().as_secs());
                row.relists += w.relists;
                row.reconnects += w.reconnects;
                row.events += w.events;
                let count = snapshot.count_cluster(resource, name);
                row.objects += count;
                if count > 0 {
                    row.types.insert(type_name(resource), count);
                }
            }
            row.phase = if synced { "Synced" } else if stale { "Stale" } else { "Connecting" };
            row
        })
        .collect();
    let stats = Stats {
        head_resource_version: snapshot.head_rv(),
        compacted_resource_version: state.fleet.compacted_rv(),
        objects: snapshot.total(),
        events: state.fleet.store().event_count(),
        watches: crate::watch::open_watches(),
        clusters: names.len(),
    };
    FleetView { stats, members, estimators: state.estimators.table(), replicas: None }
}

fn member_row(m: &MemberRow) -> String {
    let types: Vec<String> = m.types.iter().map(|(t, n)| format!("{} {n}", escape(t))).collect();
    format!(
        "<tr data-member=\"{name}\" class=\"phase-{class}\"><td>{name}</td><td><span class=\"phase\">{phase}</span></td><td class=\"num\">{objects}</td><td class=\"types\">{types}</td><td class=\"num\">{lag} s</td><td class=\"num\">{relists}</td><td class=\"num\">{reconnects}</td><td class=\"num\">{events}</td><td class=\"error\">{error}</td></tr>",
        name = escape(&m.name),
        class = m.phase.to_ascii_lowercase(),
        phase = m.phase,
        objects = m.objects,
        types = types.join(" · "),
        lag = m.lag_seconds,
        relists = m.relists,
        reconnects = m.reconnects,
        events = m.events,
        error = escape(m.last_error.as_deref().unwrap_or("")),
    )
}

fn estimator_row(e: &EstimatorStatus) -> String {
    let rule = serde_json::to_value(&e.endpoint.rule).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    let probe = match &e.probe {
        None => "not probed yet".to_string(),
        Some(p) if p.reachable => format!("reachable{}", p.latency_ms.map(|ms| format!(" ({ms:.1} ms)")).unwrap_or_default()),
        Some(p) => format!("unreachable: {}", p.error.as_deref().unwrap_or("")),
    };
    let class = match &e.probe {
        Some(p) if p.reachable => "ok",
        Some(_) => "bad",
        None => "",
    };
    format!(
        "<tr data-cluster=\"{c}\"><td>{c}</td><td>{rule}</td><td>{addresses}</td><td class=\"probe {class}\">{probe}</td><td class=\"error\">{error}</td></tr>",
        c = escape(&e.endpoint.cluster),
        rule = escape(&rule),
        addresses = escape(&e.endpoint.addresses.join(", ")),
        probe = escape(&probe),
        error = escape(e.endpoint.error.as_deref().unwrap_or("")),
    )
}

fn replica_row(r: &ReplicaRow) -> String {
    format!(
        "<tr data-replica=\"{id}\"><td>{id}</td><td>{address}</td><td class=\"num\">{lease} s</td><td class=\"num\">{applied}</td><td class=\"num\">{lag}</td><td class=\"owned\">{owned}</td></tr>",
        id = escape(&r.id),
        address = escape(&r.address),
        lease = r.lease_remaining_seconds,
        applied = r.applied_revision,
        lag = r.lag_revisions,
        owned = escape(&r.owned.join(", ")),
    )
}

/// The replicas section (empty without etcd).
fn replicas_section(replicas: Option<&Replicas>) -> String {
    let Some(replicas) = replicas else { return String::new() };
    let rows: String = replicas.items.iter().map(replica_row).collect();
    // Always there, so that the live view can fill it in.
    let error = format!("<p class=\"error\" id=\"replicas-error\">{}</p>", escape(replicas.error.as_deref().unwrap_or("")));
    format!(
        "<h2>Replicas over etcd</h2>{error}<table id=\"replicas\"><thead><tr><th>Replica</th><th>Address</th><th>Lease left</th><th>Applied revision</th><th>Lag (revisions)</th><th>Members owned</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

/// The members table's header, shared with the script's rendering.
const MEMBER_COLUMNS: &str = "<tr><th>Cluster</th><th>Phase</th><th>Objects</th><th>Objects per type</th><th>Lag</th><th>Relists</th><th>Reconnects</th><th>Events</th><th>Last error</th></tr>";

/// The fleet page's `#fleet` section (page `page` of the members, from 0).
pub fn render(view: &FleetView, page: usize) -> String {
    let s = &view.stats;
    let pages = view.members.len().div_ceil(PAGE_SIZE).max(1);
    let page = page.min(pages - 1);
    let rows: String = view.members.iter().skip(page * PAGE_SIZE).take(PAGE_SIZE).map(member_row).collect();
    let count = |phase: &str| view.members.iter().filter(|m| m.phase == phase).count();
    let mut pager = format!("<nav class=\"pager\" id=\"member-pager\">Page {} of {pages}", page + 1);
    if page > 0 {
        pager.push_str(&format!(" <a href=\"/ui/fleet?page={}\">previous</a>", page));
    }
    if page + 1 < pages {
        pager.push_str(&format!(" <a href=\"/ui/fleet?page={}\">next</a>", page + 2));
    }
    pager.push_str("</nav>");
    let estimators: String = view.estimators.iter().map(estimator_row).collect();
    format!(
        "<section id=\"fleet\">\
<dl id=\"stats\">\
<div><dt>Members</dt><dd data-stat=\"clusters\">{clusters}</dd></div>\
<div><dt>Synced</dt><dd data-stat=\"synced\">{synced}</dd></div>\
<div><dt>Stale</dt><dd data-stat=\"stale\">{stale}</dd></div>\
<div><dt>Connecting</dt><dd data-stat=\"connecting\">{connecting}</dd></div>\
<div><dt>Head resourceVersion</dt><dd data-stat=\"headResourceVersion\">{head}</dd></div>\
<div><dt>Compacted resourceVersion</dt><dd data-stat=\"compactedResourceVersion\">{compacted}</dd></div>\
<div><dt>Objects</dt><dd data-stat=\"objects\">{objects}</dd></div>\
<div><dt>Events in the log</dt><dd data-stat=\"events\">{events}</dd></div>\
<div><dt>Open watches</dt><dd data-stat=\"watches\">{watches}</dd></div>\
<div><dt>Store</dt><dd>{store}</dd></div>\
</dl>\
<figure id=\"rate\"><figcaption>Events per second: <span id=\"eps\">measured live</span></figcaption><div id=\"eps-chart\"></div></figure>\
<h2>Members</h2>\
<p class=\"controls\"><input id=\"member-filter\" type=\"search\" placeholder=\"Filter by name or phase\" hidden></p>\
<table id=\"members\"><thead>{columns}</thead><tbody>{rows}</tbody></table>{pager}\
{replicas}\
<h2>Estimator endpoints</h2>\
<table id=\"estimators\"><thead><tr><th>Cluster</th><th>Rule</th><th>Addresses</th><th>Probe</th><th>Error</th></tr></thead><tbody>{estimators}</tbody></table>\
</section>",
        clusters = s.clusters,
        synced = count("Synced"),
        stale = count("Stale"),
        connecting = count("Connecting"),
        head = s.head_resource_version,
        compacted = s.compacted_resource_version,
        objects = s.objects,
        events = s.events,
        watches = s.watches,
        columns = MEMBER_COLUMNS,
        store = match &view.replicas {
            Some(r) => format!("etcd, shared by {} replicas", r.items.len()),
            None => "one process over sled".to_string(),
        },
        replicas = replicas_section(view.replicas.as_ref()),
    )
}

/// `GET /ui/fleet[?page=N]`: the whole page, rendered here;
/// `GET /ui/fleet?watch=true`: the stream ([`stream`]).
pub async fn page(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    let query = match web::Query::<BTreeMap<String, String>>::from_query(req.query_string()) {
        Ok(q) => q.into_inner(),
        Err(e) => return crate::respond::status(&Status::bad_request(format!("invalid query: {e}"))),
    };
    match crate::query::flag(&query.get("watch").cloned()) {
        Ok(true) => return stream(state.into_inner()),
        Ok(false) => {}
        Err(status) => return crate::respond::status(&status),
    }
    let page = match query.get("page").map(|p| p.parse::<usize>()) {
        None => 1,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => return crate::respond::status(&Status::bad_request("page must be a whole number from 1")),
    };
    let view = view_with_replicas(&state).await;
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>kubefold fleet</title><link rel=\"stylesheet\" href=\"/ui/assets/console.css\"></head><body>\
<header><h1>kubefold</h1><nav><a href=\"/ui\">Fleet (live)</a> <a href=\"/ui/search\">Search</a></nav></header><main>{}</main></body></html>",
        render(&view, page - 1)
    );
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("Content-Security-Policy", super::CONTENT_SECURITY_POLICY))
        .body(body)
}

/// One line of the stream: the stats, the members new or changed since the
/// previous line (all of them in the first), the names of those gone.
#[derive(Serialize)]
struct Update<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    stats: &'a Stats,
    members: Vec<&'a MemberRow>,
    removed: Vec<&'a str>,
    /// The replicas over etcd, in every line (a few rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<&'a Replicas>,
}

fn line(update: &Update<'_>) -> Bytes {
    let mut bytes = serde_json::to_vec(update).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// The changes from `before` to `now` as a stream line.
fn changes(before: Option<&FleetView>, now: &FleetView) -> Bytes {
    let Some(before) = before else {
        return line(&Update {
            kind: "SNAPSHOT",
            stats: &now.stats,
            members: now.members.iter().collect(),
            removed: Vec::new(),
            replicas: now.replicas.as_ref(),
        });
    };
    let old: BTreeMap<&str, &MemberRow> = before.members.iter().map(|m| (m.name.as_str(), m)).collect();
    let current: std::collections::BTreeSet<&str> = now.members.iter().map(|m| m.name.as_str()).collect();
    line(&Update {
        kind: "UPDATE",
        stats: &now.stats,
        members: now.members.iter().filter(|m| old.get(m.name.as_str()) != Some(m)).collect(),
        removed: old.keys().filter(|n| !current.contains(*n)).copied().collect(),
        replicas: now.replicas.as_ref(),
    })
}

/// The fleet as JSON lines, until the client leaves.
pub fn stream(state: Arc<ApiState>) -> HttpResponse {
    let lines = futures::stream::unfold((state, None::<FleetView>), |(state, before)| async move {
        if before.is_some() {
            tokio::time::sleep(STREAM_INTERVAL).await;
        }
        let now = view_with_replicas(&state).await;
        let bytes = changes(before.as_ref(), &now);
        Some((Ok::<_, actix_web::Error>(bytes), (state, Some(now))))
    });
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, phase: &'static str, pods: usize) -> MemberRow {
        MemberRow {
            name: name.to_string(),
            phase,
            objects: pods,
            types: BTreeMap::from([("pods".to_string(), pods)]),
            lag_seconds: 0,
            last_error: (phase == "Stale").then(|| "connection refused <127.0.0.1>".to_string()),
            relists: 1,
            reconnects: 0,
            events: 3,
        }
    }

    fn fleet(members: Vec<MemberRow>) -> FleetView {
        let stats = Stats { head_resource_version: 42, compacted_resource_version: 7, objects: 10, events: 40, watches: 1, clusters: members.len() };
        FleetView { stats, members, estimators: Vec::new(), replicas: None }
    }

    #[test]
    fn type_keys_read_as_kubectl_names() {
        assert_eq!(type_name("v1/pods"), "pods");
        assert_eq!(type_name("apps/v1/deployments"), "deployments.apps");
    }

    #[test]
    fn the_page_shows_every_member_phase_and_error_escaped() {
        let html = render(&fleet(vec![member("member1", "Synced", 5), member("member2", "Stale", 2)]), 0);
        assert!(html.contains("<tr data-member=\"member1\" class=\"phase-synced\"><td>member1</td><td><span class=\"phase\">Synced</span>"), "{html}");
        assert!(html.contains("data-member=\"member2\" class=\"phase-stale\""));
        assert!(html.contains("connection refused &lt;127.0.0.1&gt;"));
        assert!(html.contains("<dd data-stat=\"headResourceVersion\">42</dd>"));
        assert!(html.contains("<dd data-stat=\"compactedResourceVersion\">7</dd>"));
        assert!(html.contains("<dd data-stat=\"stale\">1</dd>"));
        assert!(html.contains("pods 5"));
    }

    #[test]
    fn a_thousand_members_are_paged() {
        let members: Vec<MemberRow> = (0..1000).map(|i| member(&format!("m{i:04}"), "Synced", i)).collect();
        let view = fleet(members);
        let first = render(&view, 0);
        assert_eq!(first.matches("<tr data-member=").count(), PAGE_SIZE);
        assert!(first.contains("Page 1 of 10") && first.contains("/ui/fleet?page=2"));
        let last = render(&view, 99);
        assert!(last.contains("Page 10 of 10") && last.contains("data-member=\"m0999\"") && !last.contains("data-member=\"m0899\""));
    }

    #[test]
    fn the_stream_sends_everything_first_then_only_changes() {
        let before = fleet(vec![member("member1", "Synced", 5), member("member2", "Synced", 2), member("member3", "Synced", 1)]);
        let first: serde_json::Value = serde_json::from_slice(&changes(None, &before)).unwrap();
        assert_eq!(first["type"], "SNAPSHOT");
        assert_eq!(first["members"].as_array().unwrap().len(), 3);
        let now = fleet(vec![member("member1", "Synced", 5), member("member2", "Stale", 2)]);
        let next: serde_json::Value = serde_json::from_slice(&changes(Some(&before), &now)).unwrap();
        assert_eq!(next["type"], "UPDATE");
        assert_eq!(next["members"].as_array().unwrap().len(), 1);
        assert_eq!(next["members"][0]["name"], "member2");
        assert_eq!(next["members"][0]["phase"], "Stale");
        assert_eq!(next["removed"], serde_json::json!(["member3"]));
        assert_eq!(next["stats"]["headResourceVersion"], 42);
        assert!(next.get("replicas").is_none(), "no replicas without etcd: {next}");
    }

    #[test]
    fn replicas_over_etcd_are_shown_with_the_members_each_owns() {
        let mut view = fleet(vec![member("member1", "Synced", 5), member("member2", "Synced", 2)]);
        assert!(!render(&view, 0).contains("id=\"replicas\""), "no replicas section without etcd");
        let row = |id: &str, owned: &[&str]| ReplicaRow {
            id: id.to_string(),
            address: "127.0.0.1:8080".to_string(),
            lease_remaining_seconds: 12,
            applied_revision: 99,
            lag_revisions: 1,
            owned: owned.iter().map(|m| m.to_string()).collect(),
        };
        view.replicas = Some(Replicas { items: vec![row("a", &["member1", "member2"]), row("b<x>", &[])], error: None });
        let html = render(&view, 0);
        assert!(html.contains("<dd>etcd, shared by 2 replicas</dd>"), "{html}");
        assert!(html.contains("<tr data-replica=\"a\"><td>a</td><td>127.0.0.1:8080</td><td class=\"num\">12 s</td><td class=\"num\">99</td><td class=\"num\">1</td><td class=\"owned\">member1, member2</td></tr>"), "{html}");
        assert!(html.contains("data-replica=\"b&lt;x&gt;\""), "ids are escaped: {html}");
        let line: serde_json::Value = serde_json::from_slice(&changes(None, &view)).unwrap();
        assert_eq!(line["replicas"]["items"][0]["owned"], serde_json::json!(["member1", "member2"]));
        view.replicas = Some(Replicas { items: Vec::new(), error: Some("etcd is down".to_string()) });
        assert!(render(&view, 0).contains("<p class=\"error\" id=\"replicas-error\">etcd is down</p>"));
    }
}
