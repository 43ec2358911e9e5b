//! [`resolve_once`]: the resolver's work done once, without actors, for
//! `kubefold resolve`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::api::ListParams;
use kube::core::Request as KubeRequest;
use kubefold_engine::estimator::{ControlPlane, EndpointSlice, Service};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::warn;

use super::{Error, EstimatorConfig, EstimatorStatus, Result};

/// Bound of each list request of [`resolve_once`].
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct ListPage {
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
    #[serde(default)]
    metadata: Option<ListMeta>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// Lists a collection of the control plane, page by page; items as JSON bytes.
async fn list_all(client: &kube::Client, cluster: &str, path: &str) -> Result<Vec<Vec<u8>>> {
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(500);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let request = KubeRequest::new(path)
            .list(&params)
            .map_err(|e| Error::ListFailed { cluster: cluster.into(), path: path.into(), source: kube::Error::BuildRequest(e) })?;
        let text = tokio::time::timeout(LIST_TIMEOUT, client.request_text(request))
            .await
            .map_err(|_| Error::ListTimedOut { cluster: cluster.into(), path: path.into(), seconds: LIST_TIMEOUT.as_secs() })?
            .map_err(|source| Error::ListFailed { cluster: cluster.into(), path: path.into(), source })?;
        let page: ListPage =
            serde_json::from_str(&text).map_err(|source| Error::InvalidList { cluster: cluster.into(), path: path.into(), source })?;
        items.extend(page.items.unwrap_or_default().into_iter().map(|raw| raw.get().as_bytes().to_vec()));
        match page.metadata.and_then(|m| m.continue_token) {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(items),
        }
    }
}

/// Resolves and probes the endpoints of `members` once: lists the control
/// plane's Services and EndpointSlices in the estimator namespace (when a
/// control plane is configured), applies the rules, probes every endpoint
/// concurrently. For `kubefold resolve`; needs a tokio runtime.
pub async fn resolve_once(config: &EstimatorConfig, members: &[String]) -> Result<Vec<EstimatorStatus>> {
    config.validate()?;
    let prober = config.prober()?;
    let lookup = config.lookup();
    let mut control_plane = ControlPlane::new();
    if let Some(spec) = &config.control_plane {
        let client = spec.client().await.map_err(Error::ControlPlaneClientFailed)?;
        let ns = &lookup.namespace;
        let services_path = format!("/api/v1/namespaces/{ns}/services");
        let mut services = Vec::new();
        for bytes in list_all(&client, &spec.name, &services_path).await? {
            match Service::from_json(&bytes) {
                Ok(s) => services.push(s),
                Err(e) => warn!(cluster = %spec.name, error = %e, "Control-plane Service skipped."),
            }
        }
        control_plane.replace_services(services);
        let slices_path = format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices");
        let mut slices = Vec::new();
        match list_all(&client, &spec.name, &slices_path).await {
            Ok(items) => {
                for bytes in items {
                    match EndpointSlice::from_json(&bytes) {
                        Ok(s) => slices.push(s),
                        Err(e) => warn!(cluster = %spec.name, error = %e, "Control-plane EndpointSlice skipped."),
                    }
                }
            }
            // A control plane that does not serve EndpointSlices has no
            // headless endpoints to offer; every other rule still works.
            Err(Error::ListFailed { source: kube::Error::Api(status), .. }) if status.code == 404 => {
                warn!(cluster = %spec.name, "Control plane serves no EndpointSlices.");
            }
            Err(e) => return Err(e),
        }
        control_plane.replace_slices(slices);
    }
    let clusters: BTreeSet<&String> = members.iter().collect();
    let probes = clusters.into_iter().map(|cluster| {
        let endpoint = control_plane.resolve(cluster, &lookup);
        let prober = &prober;
        async move {
            let started = Instant::now();
            let probe = prober.probe(&endpoint.addresses).await;
            if let Some(p) = &probe {
                metrics::histogram!("kubefold_estimator_probe_duration_seconds").record(started.elapsed().as_secs_f64());
                if p.failed() {
                    metrics::counter!("kubefold_estimator_probe_failures_total", "cluster" => crate::cluster_series::label(&endpoint.cluster)).increment(1);
                }
            }
            EstimatorStatus { endpoint, probe }
        }
    });
    Ok(futures::future::join_all(probes).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterSpec;
    use crate::probe;
    use kubefold_engine::estimator::Rule;

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn resolve_once_without_a_control_plane_probes_static_and_dns_entries() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let config = EstimatorConfig {
            timeout: Duration::from_secs(2),
            probe_dns_names: false,
            static_endpoints: [("up".to_string(), open.clone()), ("down".to_string(), closed.clone())].into(),
            ..EstimatorConfig::default()
        };
        let rows = resolve_once(&config, &strings(&["up", "down", "dns"])).await.unwrap();
        let summary: Vec<(String, Rule, bool, Option<probe::ProbeFailure>)> = rows
            .iter()
            .map(|r| {
                let p = r.probe.as_ref().unwrap();
                (r.endpoint.cluster.clone(), r.endpoint.rule, p.reachable, p.failure)
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("dns".into(), Rule::DnsFallback, false, Some(probe::ProbeFailure::Skipped)),
                ("down".into(), Rule::Static, false, Some(probe::ProbeFailure::Connect)),
                ("up".into(), Rule::Static, true, None),
            ]
        );
    }

    #[tokio::test]
    async fn resolve_once_reports_an_unreachable_control_plane() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config = EstimatorConfig {
            control_plane: Some(ClusterSpec::from_url("karmada", &format!("http://127.0.0.1:{closed}"))),
            ..EstimatorConfig::default()
        };
        let err = resolve_once(&config, &strings(&["member1"])).await.unwrap_err();
        assert!(matches!(err, Error::ListFailed { .. }), "{err}");
        assert!(err.to_string().starts_with("estimator control plane karmada: cannot list /api/v1/namespaces/karmada-system/services: "), "{err}");
    }
}
