//! Members and the resource selection from a Karmada control plane
//! (`karmada` in the config, `--karmada-kubeconfig`): every `Cluster`
//! (`cluster.karmada.io/v1alpha1`) with the Secret its `spec.secretRef`
//! names becomes a member, every `ResourceRegistry`
//! (`search.karmada.io/v1alpha1`) a rule of the resource selection; the
//! `token` of the Secret its `spec.impersonatorSecretRef` names is the
//! member's impersonator token (edits act there as their caller). The
//! control plane is read again every second and only the differences are
//! applied: a new Cluster is added, one whose endpoint or credentials
//! changed reconnects, a removed one is dropped (its objects become DELETED
//! events; open watches stay open), through the same supervisor messages as
//! the admin API.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use actix::Addr;
use anyhow::Context;
use base64::Engine;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::resolver::{Resolver, SetMembers};
use kubefold_actors::supervisor::{AddCluster, DropCluster, SetSelection, Supervisor};
use kubefold_engine::selection::{ResourceSelection, SelectionRule};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::{error, info, warn};

/// How often the control plane is read.
const RESYNC: Duration = Duration::from_secs(1);

/// Where the Karmada control plane is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KarmadaConfig {
    /// Kubeconfig file of the Karmada control plane (karmada-apiserver).
    pub kubeconfig: PathBuf,
    /// Context of that kubeconfig; its current context when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// The member a `Cluster` object describes, with the `data` of the Secrets
/// of the control plane (`namespace/name` → data); an error names what is
/// missing.
pub fn member_of(cluster: &Value, secrets: &BTreeMap<String, BTreeMap<String, String>>) -> Result<ClusterSpec, String> {
    let name = cluster["metadata"]["name"].as_str().ok_or("the Cluster has no name")?.to_string();
    let spec = &cluster["spec"];
    let endpoint = spec["apiEndpoint"].as_str().filter(|e| !e.is_empty()).ok_or_else(|| format!("Cluster {name} has no spec.apiEndpoint"))?;
    let endpoint = if endpoint.contains("://") { endpoint.to_string() } else { format!("https://{endpoint}") };
    let decode = |value: &str| base64::engine::general_purpose::STANDARD.decode(value).ok().and_then(|b| String::from_utf8(b).ok());
    let (mut token, mut ca_bundle) = (None, None);
    if let Some(secret_ref) = spec["secretRef"].as_object() {
        let key = format!("{}/{}", secret_ref.get("namespace").and_then(Value::as_str).unwrap_or_default(), secret_ref.get("name").and_then(Value::as_str).unwrap_or_default());
        let data = secrets.get(&key).ok_or_else(|| format!("Cluster {name}: its Secret {key} does not exist"))?;
        token = data.get("token").and_then(|t| decode(t)).map(|t| t.trim().to_string());
        ca_bundle = data.get("caBundle").cloned().filter(|c| !c.is_empty());
    }
    let insecure = spec["insecureSkipTLSVerification"].as_bool().unwrap_or(false);
    let proxy = spec["proxyURL"].as_str().filter(|p| !p.is_empty());
    let labels: BTreeMap<String, String> = cluster["metadata"]["labels"]
        .as_object()
        .map(|l| l.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    let mut member = ClusterSpec::from_url(&name, &endpoint);
    member.labels = labels;
    // The identity that impersonates callers on the member (Karmada's
    // cluster proxy uses the same Secret).
    if let Some(secret_ref) = spec["impersonatorSecretRef"].as_object() {
        let key = format!("{}/{}", secret_ref.get("namespace").and_then(Value::as_str).unwrap_or_default(), secret_ref.get("name").and_then(Value::as_str).unwrap_or_default());
        let data = secrets.get(&key).ok_or_else(|| format!("Cluster {name}: its impersonator Secret {key} does not exist"))?;
        let token = data.get("token").and_then(|t| decode(t)).map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
        member.impersonator_token = Some(token.ok_or_else(|| format!("Cluster {name}: its impersonator Secret {key} has no token"))?);
    }
    if ca_bundle.is_none() && proxy.is_none() {
        member.token = token;
        member.insecure_skip_tls_verify = insecure;
        return Ok(member);
    }
    // A CA bundle or a proxy: the member is reached through a kubeconfig
    // made of the Cluster's fields.
    let mut server = json!({"server": endpoint, "insecure-skip-tls-verify": insecure});
    if let Some(ca) = ca_bundle {
        server["certificate-authority-data"] = json!(ca);
    }
    if let Some(proxy) = proxy {
        server["proxy-url"] = json!(proxy);
    }
    let mut user = json!({});
    if let Some(token) = token {
        user["token"] = json!(token);
    }
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": server}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    });
    member.url = None;
    member.kubeconfig_data = Some(serde_json::to_string(&kubeconfig).map_err(|e| e.to_string())?);
    Ok(member)
}

/// The resource selection of the `ResourceRegistry` objects (their
/// `targetCluster`: `clusterNames`, `labelSelector`, and `exclude` and
/// `fieldSelector` (provider, region, zone; `In`, `NotIn`) resolved against
/// the `clusters`; their `resourceSelectors`); `None` when there is none.
pub fn selection_of(registries: &[Value], clusters: &[Value]) -> Result<Option<ResourceSelection>, String> {
    if registries.is_empty() {
        return Ok(None);
    }
    let mut rules = Vec::new();
    for registry in registries {
        let name = registry["metadata"]["name"].as_str().unwrap_or_default();
        let spec = &registry["spec"];
        let mut target = serde_json::Map::new();
        if !spec["targetCluster"]["labelSelector"].is_null() {
            target.insert("labelSelector".into(), spec["targetCluster"]["labelSelector"].clone());
        }
        match cluster_names(name, &spec["targetCluster"], clusters)? {
            Some(names) if names.is_empty() => continue,
            Some(names) => {
                target.insert("clusterNames".into(), json!(names));
            }
            None => {}
        }
        let rule = json!({"targetCluster": target, "resourceSelectors": spec["resourceSelectors"]});
        let rule: SelectionRule = serde_json::from_value(rule).map_err(|e| format!("ResourceRegistry {name}: {e}"))?;
        rules.push(rule);
    }
    if rules.is_empty() {
        // Registries that select no cluster: nothing is aggregated, as
        // karmada-search caches nothing for them.
        return Ok(Some(ResourceSelection { rules: Vec::new() }));
    }
    let selection = ResourceSelection { rules };
    selection.validate().map_err(|e| format!("ResourceRegistries: {e}"))?;
    Ok(Some(selection))
}

/// The cluster names a `targetCluster` allows, when it restricts them by
/// name, `exclude` or `fieldSelector`; `None` when every cluster is allowed.
fn cluster_names(registry: &str, target: &Value, clusters: &[Value]) -> Result<Option<Vec<String>>, String> {
    let strings = |v: &Value| v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect::<Vec<_>>()).unwrap_or_default();
    let named = strings(&target["clusterNames"]);
    let excluded = strings(&target["exclude"]);
    let expressions = target["fieldSelector"]["matchExpressions"].as_array().cloned().unwrap_or_default();
    if excluded.is_empty() && expressions.is_empty() {
        return Ok((!named.is_empty()).then_some(named));
    }
    let mut names = Vec::new();
    for cluster in clusters {
        let Some(name) = cluster["metadata"]["name"].as_str() else { continue };
        if (!named.is_empty() && !named.iter().any(|n| n == name)) || excluded.iter().any(|n| n == name) {
            continue;
        }
        let mut matches = true;
        for expression in &expressions {
            let key = expression["key"].as_str().unwrap_or_default();
            if !["provider", "region", "zone"].contains(&key) {
                return Err(format!("ResourceRegistry {registry}: fieldSelector key {key:?} is not one of provider, region, zone"));
            }
            let value = cluster["spec"][key].as_str().unwrap_or_default();
            let values = strings(&expression["values"]);
            matches &= match expression["operator"].as_str().unwrap_or_default() {
                "In" => values.iter().any(|v| v == value),
                "NotIn" => !values.iter().any(|v| v == value),
                other => return Err(format!("ResourceRegistry {registry}: fieldSelector operator {other:?} is not In or NotIn")),
            };
        }
        if matches {
            names.push(name.to_string());
        }
    }
    Ok(Some(names))
}

/// Keeps the members and the selection equal to the control plane's, until
/// dropped. `configured`: the names of the members of the config file (a
/// Cluster of the same name is refused with an error).
pub async fn run(config: KarmadaConfig, configured: BTreeSet<String>, supervisor: Addr<Supervisor>, resolver: Addr<Resolver>, fleet: std::sync::Arc<kubefold_actors::fleet::Fleet>) {
    let client = match client(&config).await {
        Ok(c) => c,
        Err(e) => {
            error!(kubeconfig = %config.kubeconfig.display(), error = format!("{e:#}"), "Cannot reach the Karmada control plane.");
            return;
        }
    };
    let mut members: BTreeMap<String, ClusterSpec> = BTreeMap::new();
    let mut selection: Option<ResourceSelection> = None;
    loop {
        match read(&client).await {
            Ok((clusters, secrets, registries)) => {
                let mut wanted = BTreeMap::new();
                for cluster in &clusters {
                    match member_of(cluster, &secrets) {
                        Ok(m) if configured.contains(&m.name) => {
                            error!(cluster = %m.name, "A Karmada Cluster has the name of a configured cluster; it is not added.")
                        }
                        Ok(m) => {
                            wanted.insert(m.name.clone(), m);
                        }
                        Err(e) => warn!(error = %e, "Karmada Cluster skipped."),
                    }
                }
                let mut changed = false;
                for (name, _) in members.iter().filter(|(n, _)| !wanted.contains_key(*n)) {
                    info!(cluster = %name, "Karmada Cluster removed; dropping the member.");
                    let _ = supervisor.send(DropCluster(name.clone())).await;
                    changed = true;
                }
                for (name, member) in &wanted {
                    if members.get(name) != Some(member) {
                        info!(cluster = %name, "Karmada Cluster added or changed; connecting.");
                        let _ = supervisor.send(AddCluster(member.clone())).await;
                        changed = true;
                    }
                }
                members = wanted;
                if changed {
                    resolver.do_send(SetMembers(fleet.member_names()));
                }
                match selection_of(&registries, &clusters) {
                    Ok(Some(s)) if selection.as_ref() != Some(&s) => {
                        info!(rules = s.rules.len(), "Resource selection from Karmada's ResourceRegistries.");
                        let _ = supervisor.send(SetSelection(s.clone())).await;
                        selection = Some(s);
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "ResourceRegistries not applied."),
                }
            }
            Err(e) => warn!(error = format!("{e:#}"), "Cannot read the Karmada control plane."),
        }
        tokio::time::sleep(RESYNC).await;
    }
}

async fn client(config: &KarmadaConfig) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&config.kubeconfig).context("cannot read the kubeconfig")?;
    let options = kube::config::KubeConfigOptions { context: config.context.clone(), ..Default::default() };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.context("invalid kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
}

type ControlPlane = (Vec<Value>, BTreeMap<String, BTreeMap<String, String>>, Vec<Value>);

async fn read(client: &kube::Client) -> anyhow::Result<ControlPlane> {
    let list = |group: &str, kind: &str, plural: &str| {
        let resource = ApiResource { group: group.into(), version: "v1alpha1".into(), api_version: format!("{group}/v1alpha1"), kind: kind.into(), plural: plural.into() };
        Api::<DynamicObject>::all_with(client.clone(), &resource)
    };
    let as_values = |items: Vec<DynamicObject>| items.into_iter().filter_map(|o| serde_json::to_value(o).ok()).collect::<Vec<_>>();
    let clusters = as_values(list("cluster.karmada.io", "Cluster", "clusters").list(&ListParams::default()).await.context("list clusters")?.items);
    let mut secrets = BTreeMap::new();
    let references = clusters.iter().flat_map(|c| [c["spec"]["secretRef"].as_object(), c["spec"]["impersonatorSecretRef"].as_object()]);
    for r in references.flatten() {
        let (Some(ns), Some(name)) = (r.get("namespace").and_then(Value::as_str), r.get("name").and_then(Value::as_str)) else { continue };
        if secrets.contains_key(&format!("{ns}/{name}")) {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()));
        if let Some(secret) = api.get_opt(name).await.context("get secret")? {
            let data = secret.data["data"].as_object().map(|d| d.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()).unwrap_or_default();
            secrets.insert(format!("{ns}/{name}"), data);
        }
    }
    let registries = as_values(list("search.karmada.io", "ResourceRegistry", "resourceregistries").list(&ListParams::default()).await.context("list resourceregistries")?.items);
    Ok((clusters, secrets, registries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> BTreeMap<String, BTreeMap<String, String>> {
        let data = BTreeMap::from([("token".to_string(), "dG9rZW4K".to_string()), ("caBundle".to_string(), "UEVN".to_string())]);
        BTreeMap::from([("karmada-cluster/m1".to_string(), data)])
    }

    #[test]
    fn a_cluster_with_a_token_is_a_member_at_its_endpoint() {
        let mut secrets = secrets();
        secrets.get_mut("karmada-cluster/m1").unwrap().remove("caBundle");
        let cluster = json!({"metadata": {"name": "m1", "labels": {"env": "prod"}}, "spec": {"syncMode": "Push", "apiEndpoint": "10.0.0.1:6443", "secretRef": {"namespace": "karmada-cluster", "name": "m1"}, "insecureSkipTLSVerification": true}});
        let member = member_of(&cluster, &secrets).unwrap();
        assert_eq!(member.url.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(member.token.as_deref(), Some("token"));
        assert!(member.insecure_skip_tls_verify);
        assert_eq!(member.labels["env"], "prod");
    }

    #[test]
    fn a_ca_bundle_or_a_proxy_makes_a_kubeconfig() {
        let cluster = json!({"metadata": {"name": "m1"}, "spec": {"syncMode": "Pull", "apiEndpoint": "https://m1:6443", "secretRef": {"namespace": "karmada-cluster", "name": "m1"}, "proxyURL": "http://proxy:3128"}});
        let member = member_of(&cluster, &secrets()).unwrap();
        assert_eq!(member.url, None);
        let kubeconfig = kube::config::Kubeconfig::from_yaml(member.kubeconfig_data.as_deref().unwrap()).unwrap();
        let server = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(server.server.as_deref(), Some("https://m1:6443"));
        assert_eq!(server.certificate_authority_data.as_deref(), Some("UEVN"));
        assert_eq!(server.proxy_url.as_deref(), Some("http://proxy:3128"));
    }

    #[test]
    fn the_impersonator_secret_makes_the_member_impersonate() {
        let mut secrets = secrets();
        let impersonator = BTreeMap::from([("token".to_string(), "aW1wZXJzb25hdG9yCg==".to_string())]);
        secrets.insert("karmada-cluster/m1-impersonator".to_string(), impersonator);
        let mut cluster = json!({"metadata": {"name": "m1"}, "spec": {"syncMode": "Push", "apiEndpoint": "https://m1", "secretRef": {"namespace": "karmada-cluster", "name": "m1"}}});
        let member = member_of(&cluster, &secrets).unwrap();
        assert!(!member.impersonates(), "no impersonator Secret: kubefold's own identity");
        cluster["spec"]["impersonatorSecretRef"] = json!({"namespace": "karmada-cluster", "name": "m1-impersonator"});
        let member = member_of(&cluster, &secrets).unwrap();
        assert_eq!(member.impersonator_token.as_deref(), Some("impersonator"));
        assert!(member.impersonates());
        assert!(!format!("{member:?}").contains("impersonator\""), "the token never shows");
        cluster["spec"]["impersonatorSecretRef"]["name"] = json!("gone");
        assert!(member_of(&cluster, &secrets).unwrap_err().contains("impersonator Secret karmada-cluster/gone"));
    }

    #[test]
    fn a_missing_secret_or_endpoint_is_an_error_naming_it() {
        let cluster = json!({"metadata": {"name": "m2"}, "spec": {"syncMode": "Push", "apiEndpoint": "https://m2", "secretRef": {"namespace": "karmada-cluster", "name": "m2"}}});
        assert!(member_of(&cluster, &secrets()).unwrap_err().contains("karmada-cluster/m2"));
        let cluster = json!({"metadata": {"name": "m3"}, "spec": {"syncMode": "Push"}});
        assert!(member_of(&cluster, &secrets()).unwrap_err().contains("apiEndpoint"));
    }

    #[test]
    fn resource_registries_are_the_selection() {
        assert_eq!(selection_of(&[], &[]).unwrap(), None);
        let registry = json!({"metadata": {"name": "r"}, "spec": {"targetCluster": {"clusterNames": ["m1"]}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "default"}], "backendStore": {}}});
        let selection = selection_of(&[registry], &[]).unwrap().unwrap();
        assert_eq!(selection.rules.len(), 1);
        assert_eq!(selection.rules[0].target_cluster.cluster_names, vec!["m1".to_string()]);
        assert_eq!(selection.rules[0].resource_selectors[0].namespace.as_deref(), Some("default"));
        let bad = json!({"metadata": {"name": "bad"}, "spec": {"resourceSelectors": [{"kind": "Pod"}]}});
        assert!(selection_of(&[bad], &[]).unwrap_err().contains("ResourceRegistry bad"));
    }

    #[test]
    fn field_selectors_and_exclusions_resolve_to_cluster_names() {
        let cluster = |name: &str, region: &str| json!({"metadata": {"name": name}, "spec": {"syncMode": "Push", "region": region}});
        let clusters = [cluster("a", "eu"), cluster("b", "us"), cluster("c", "eu")];
        let registry = |target: Value| json!({"metadata": {"name": "r"}, "spec": {"targetCluster": target, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}]}});
        let names = |target: Value| selection_of(&[registry(target)], &clusters).unwrap().unwrap().rules.first().map(|r| r.target_cluster.cluster_names.clone());
        let field = json!({"matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}]});
        assert_eq!(names(json!({"fieldSelector": field})), Some(vec!["a".to_string(), "c".to_string()]));
        assert_eq!(names(json!({"fieldSelector": field, "exclude": ["a"]})), Some(vec!["c".to_string()]));
        let not_in = json!({"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu"]}]});
        assert_eq!(names(json!({"fieldSelector": not_in})), Some(vec!["b".to_string()]));
        // Nothing selected: no rule at all, never every cluster.
        assert_eq!(names(json!({"clusterNames": ["b"], "exclude": ["b"]})), None);
        let bad = json!({"matchExpressions": [{"key": "color", "operator": "In", "values": ["x"]}]});
        assert!(selection_of(&[registry(json!({"fieldSelector": bad}))], &clusters).unwrap_err().contains("color"));
    }
}
