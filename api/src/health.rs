//! `/healthz`, `/livez`, `/readyz` and `/metrics`.

use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};

use crate::auth::User;
use crate::ApiState;
use kubefold_actors::fleet::SyncState;

/// Whether the query asks for every check (`?verbose`, `?verbose=...`).
fn verbose(req: &HttpRequest) -> bool {
    req.query_string().split('&').any(|p| p == "verbose" || p.starts_with("verbose="))
}

/// Whether the caller may see which members the checks are about: it
/// authenticated, or authentication is off (the middleware then puts a
/// [`User`] in the request).
fn may_see_members(req: &HttpRequest) -> bool {
    req.extensions().get::<User>().is_some()
}

/// `/healthz` and `/livez`: the process serves requests. `?verbose` lists
/// the check, as kube-apiserver does.
pub async fn healthz(req: HttpRequest) -> HttpResponse {
    let check = if req.path().starts_with("/livez") { "livez" } else { "healthz" };
    let body = if verbose(&req) { format!("[+]ping ok\n{check} check passed\n") } else { "ok".to_string() };
    HttpResponse::Ok().content_type("text/plain").body(body)
}

/// `/readyz`: the store commits (no storage fault since the last commit
/// that succeeded, see `Store::fault`) and every
/// watcher has finished its initial sync or resumed its watch. `?verbose`
/// lists each check, as kube-apiserver does. Member names are shown only to
/// authenticated callers (anyone, when authentication is off); others see
/// one line for all members.
pub async fn readyz(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    let members = state.fleet.member_names();
    let mut status = state.fleet.status();
    // Readiness is about the aggregated members (the estimator control plane is not one).
    status.retain(|cluster, _| members.contains(cluster));
    // A storage fault: reads go on from memory, changes are not published.
    let (mut lines, mut ready) = match state.fleet.store().fault() {
        None => (vec!["[+]store ok".to_string()], true),
        Some((cause, _)) => (vec![format!("[-]store: {}", cause.describe())], false),
    };
    let mut not_synced = 0;
    let named = may_see_members(&req);
    for (cluster, resources) in &status {
        let pending: Vec<&String> = resources.iter().filter(|(_, s)| s.state != SyncState::Synced).map(|(r, _)| r).collect();
        if !pending.is_empty() {
            ready = false;
            not_synced += 1;
        }
        if !named {
            continue;
        }
        if pending.is_empty() {
            lines.push(format!("[+]cluster-{cluster} synced"));
        } else {
            lines.push(format!("[-]cluster-{cluster} not synced: {}", pending.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    if !named {
        lines.push(if not_synced == 0 { "[+]clusters synced".to_string() } else { "[-]clusters not synced".to_string() });
    }
    let body = if verbose(&req) {
        format!("{}\nreadyz check {}\n", lines.join("\n"), if ready { "passed" } else { "failed" })
    } else if ready {
        "ok".to_string()
    } else {
        lines.iter().filter(|l| l.starts_with("[-]")).cloned().collect::<Vec<_>>().join("\n")
    };
    let mut response = if ready { HttpResponse::Ok() } else { HttpResponse::ServiceUnavailable() };
    response.content_type("text/plain").body(body)
}

/// `/metrics` in the Prometheus text format.
pub async fn metrics(state: web::Data<ApiState>) -> HttpResponse {
    let fleet = &state.fleet;
    metrics::gauge!("kubefold_compacted_resource_version").set(fleet.compacted_rv() as f64);
    metrics::gauge!("kubefold_store_pinned_reads").set(fleet.store().pinned_reads() as f64);
    metrics::counter!("kubefold_store_damaged_records_total").absolute(fleet.store().damaged_records());
    if let Ok(size) = fleet.store().size_on_disk() {
        metrics::gauge!("kubefold_store_bytes").set(size as f64);
    }
    crate::series::zero_member_series(fleet);
    match &state.metrics {
        Some(handle) => {
            let mut body = handle.render();
            body.push_str(&crate::series::scrape_time(fleet));
            HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(body)
        }
        None => HttpResponse::NotFound().body("metrics exporter not installed"),
    }
}
