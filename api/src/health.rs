//! `/healthz`, `/livez`, `/readyz` and `/metrics`.

use actix_web::{web, HttpRequest, HttpResponse};

use crate::ApiState;
use kubefold_actors::fleet::SyncState;

/// `/healthz` and `/livez`: the process serves requests.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok")
}

/// `/readyz`: the store is open (it is, or we would not serve) and every
/// watcher has finished its initial sync or resumed its watch. `?verbose`
/// lists each check, as kube-apiserver does.
pub async fn readyz(req: HttpRequest, state: web::Data<ApiState>) -> HttpResponse {
    let members = state.fleet.member_names();
    let mut status = state.fleet.status();
    // Readiness is about the aggregated members (the estimator control plane is not one).
    status.retain(|cluster, _| members.contains(cluster));
    let mut lines = vec!["[+]store ok".to_string()];
    let mut ready = true;
    for (cluster, resources) in &status {
        let pending: Vec<&String> = resources.iter().filter(|(_, s)| s.state != SyncState::Synced).map(|(r, _)| r).collect();
        if pending.is_empty() {
            lines.push(format!("[+]cluster-{cluster} synced"));
        } else {
            ready = false;
            lines.push(format!("[-]cluster-{cluster} not synced: {}", pending.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    let verbose = req.query_string().split('&').any(|p| p == "verbose" || p.starts_with("verbose="));
    let body = if verbose {
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
