//! Members and the resource selection from a Karmada control plane
//! (`karmada` in the config, `--karmada-kubeconfig`): every `Cluster`
//! (`cluster.karmada.io/v1alpha1`) with the Secret its `spec.secretRef`
//! names becomes a member, every `ResourceRegistry`
//! (`search.karmada.io/v1alpha1`) a rule of the resource selection; the
//! `token` of the Secret its `spec.impersonatorSecretRef` names is the
//! member's impersonator token (edits act there as their caller). The
//! Clusters, the ResourceRegistries and the Secrets of the namespaces the
//! Clusters name are watched (list, then watch from its resourceVersion;
//! relist after 410 Gone; reconnect with backoff), and each change is
//! applied as it arrives, only the differences: a new Cluster is added, one
//! whose endpoint or credentials changed reconnects, a removed one is
//! dropped (its objects become DELETED events; open watches stay open),
//! through the same supervisor messages as the admin API.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use actix::Addr;
use anyhow::Context;
use base64::Engine;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use kube::discovery::ApiResource;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::fleet::karmada::KarmadaCluster;
use kubefold_actors::resolver::{Resolver, SetMembers};
use kubefold_actors::supervisor::{AddCluster, DropCluster, SetSelection, Supervisor};
use kubefold_engine::selection::{ResourceSelection, SelectionRule};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::{debug, error, info, warn};

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

/// What the watches of the control plane report to [`run`].
enum Update {
    /// An event of the `Cluster` watch.
    Clusters(watcher::Event<DynamicObject>),
    /// An event of the `ResourceRegistry` watch.
    Registries(watcher::Event<DynamicObject>),
    /// An event of the watch of Secrets in one namespace.
    Secrets(String, watcher::Event<DynamicObject>),
}

/// The objects of one watch as it last showed them (`namespace/name` →
/// object); a relist is buffered and swapped in once complete.
#[derive(Debug, Default)]
pub struct Reflected {
    objects: BTreeMap<String, Value>,
    relisting: Option<BTreeMap<String, Value>>,
    /// Whether a list has completed.
    listed: bool,
}

impl Reflected {
    /// Applies one event of the watch; whether the objects changed.
    pub fn apply(&mut self, event: watcher::Event<DynamicObject>) -> bool {
        let key_of = |o: &DynamicObject| format!("{}/{}", o.metadata.namespace.as_deref().unwrap_or_default(), o.metadata.name.as_deref().unwrap_or_default());
        let value = |o: DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let key = key_of(&o);
                self.relisting.get_or_insert_with(BTreeMap::new).insert(key, value(o));
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                // The first list is a change even when it holds nothing.
                let changed = listed != self.objects || !self.listed;
                self.objects = listed;
                self.listed = true;
                changed
            }
            watcher::Event::Apply(o) => {
                let key = key_of(&o);
                let o = value(o);
                self.objects.insert(key, o.clone()) != Some(o)
            }
            watcher::Event::Delete(o) => self.objects.remove(&key_of(&o)).is_some(),
        }
    }

    /// The objects.
    pub fn values(&self) -> Vec<Value> {
        self.objects.values().cloned().collect()
    }
}

/// Watches one resource of the control plane (list, then watch from its
/// resourceVersion; a relist after 410 Gone; reconnects with backoff, all
/// kube's watcher) and sends its events, until the receiver is gone.
fn spawn_watch(api: Api<DynamicObject>, what: &'static str, updates: tokio::sync::mpsc::Sender<Update>, wrap: impl Fn(watcher::Event<DynamicObject>) -> Update + 'static) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_local(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if updates.send(wrap(event)).await.is_err() {
                        return;
                    }
                }
                Err(e) => warn!(resource = what, error = %e, "Watch of the Karmada control plane failed; retrying."),
            }
        }
    })
}

/// Keeps the members and the selection equal to the control plane's, until
/// dropped: `Cluster` and `ResourceRegistry` objects are watched, and the
/// Secrets of the namespaces the Clusters' `secretRef` and
/// `impersonatorSecretRef` name; each change is applied as it arrives.
/// `configured`: the names of the members of the config file (a Cluster
/// of the same name is refused with an error).
pub async fn run(config: KarmadaConfig, configured: BTreeSet<String>, supervisor: Addr<Supervisor>, resolver: Addr<Resolver>, fleet: std::sync::Arc<kubefold_actors::fleet::Fleet>) {
    let client = match client(&config).await {
        Ok(c) => c,
        Err(e) => {
            error!(kubeconfig = %config.kubeconfig.display(), error = format!("{e:#}"), "Cannot reach the Karmada control plane.");
            return;
        }
    };
    let resource = |group: &str, kind: &str, plural: &str| ApiResource { group: group.into(), version: "v1alpha1".into(), api_version: format!("{group}/v1alpha1"), kind: kind.into(), plural: plural.into() };
    let (updates, mut received) = tokio::sync::mpsc::channel::<Update>(256);
    let _clusters_watch = Aborted(spawn_watch(Api::all_with(client.clone(), &resource("cluster.karmada.io", "Cluster", "clusters")), "clusters", updates.clone(), Update::Clusters));
    let _registries_watch = Aborted(spawn_watch(
        Api::all_with(client.clone(), &resource("search.karmada.io", "ResourceRegistry", "resourceregistries")),
        "resourceregistries",
        updates.clone(),
        Update::Registries,
    ));
    let mut secret_watches: BTreeMap<String, Aborted> = BTreeMap::new();
    let (mut clusters, mut registries) = (Reflected::default(), Reflected::default());
    let mut secrets: BTreeMap<String, Reflected> = BTreeMap::new();
    let mut members: BTreeMap<String, ClusterSpec> = BTreeMap::new();
    let mut selection: Option<ResourceSelection> = None;
    while let Some(update) = received.recv().await {
        let mut changed = apply(update, &mut clusters, &mut registries, &mut secrets);
        // What else has arrived is applied with it.
        while let Ok(update) = received.try_recv() {
            changed |= apply(update, &mut clusters, &mut registries, &mut secrets);
        }
        if !changed {
            continue;
        }
        let clusters = clusters.values();
        // The Secrets of the namespaces the Clusters name are watched.
        let namespaces: BTreeSet<String> = clusters
            .iter()
            .flat_map(|c| [&c["spec"]["secretRef"]["namespace"], &c["spec"]["impersonatorSecretRef"]["namespace"]])
            .filter_map(|ns| ns.as_str().map(str::to_string))
            .collect();
        secret_watches.retain(|ns, _| namespaces.contains(ns));
        secrets.retain(|ns, _| namespaces.contains(ns));
        for namespace in &namespaces {
            if !secret_watches.contains_key(namespace) {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()));
                let ns = namespace.clone();
                secret_watches.insert(namespace.clone(), Aborted(spawn_watch(api, "secrets", updates.clone(), move |e| Update::Secrets(ns.clone(), e))));
            }
        }
        let secret_data: BTreeMap<String, BTreeMap<String, String>> = secrets
            .values()
            .flat_map(|r| r.objects.iter())
            .map(|(key, secret)| {
                let data = secret["data"].as_object().map(|d| d.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()).unwrap_or_default();
                (key.clone(), data)
            })
            .collect();
        let mut wanted = BTreeMap::new();
        for cluster in &clusters {
            match member_of(cluster, &secret_data) {
                Ok(m) if configured.contains(&m.name) => {
                    error!(cluster = %m.name, "A Karmada Cluster has the name of a configured cluster; it is not added.")
                }
                Ok(m) => {
                    wanted.insert(m.name.clone(), m);
                }
                // A Secret not seen yet (its namespace's watch is starting)
                // is not an error.
                Err(e) if namespaces.iter().any(|ns| !secrets.get(ns).is_some_and(|r| r.listed)) => debug!(error = %e, "Karmada Cluster waits for its Secret."),
                Err(e) => warn!(error = %e, "Karmada Cluster skipped."),
            }
        }
        let mut members_changed = false;
        for (name, _) in members.iter().filter(|(n, _)| !wanted.contains_key(*n)) {
            info!(cluster = %name, "Karmada Cluster removed; dropping the member.");
            let _ = supervisor.send(DropCluster(name.clone())).await;
            members_changed = true;
        }
        for (name, member) in &wanted {
            if members.get(name) != Some(member) {
                info!(cluster = %name, "Karmada Cluster added or changed; connecting.");
                let _ = supervisor.send(AddCluster(member.clone())).await;
                members_changed = true;
            }
        }
        members = wanted;
        // Each member's sync mode and Ready condition, shown in its status.
        let views = clusters
            .iter()
            .filter_map(|c| Some((c["metadata"]["name"].as_str().filter(|n| members.contains_key(*n))?.to_string(), KarmadaCluster::of(c))))
            .collect();
        fleet.karmada().replace(views);
        if members_changed {
            resolver.do_send(SetMembers(fleet.member_names()));
        }
        match selection_of(&registries.values(), &clusters) {
            Ok(Some(s)) if selection.as_ref() != Some(&s) => {
                info!(rules = s.rules.len(), "Resource selection from Karmada's ResourceRegistries.");
                let _ = supervisor.send(SetSelection(s.clone())).await;
                selection = Some(s);
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "ResourceRegistries not applied."),
        }
    }
}

/// Applies one watch event to the objects seen; whether they changed.
fn apply(update: Update, clusters: &mut Reflected, registries: &mut Reflected, secrets: &mut BTreeMap<String, Reflected>) -> bool {
    match update {
        Update::Clusters(event) => clusters.apply(event),
        Update::Registries(event) => registries.apply(event),
        Update::Secrets(namespace, event) => secrets.entry(namespace).or_default().apply(event),
    }
}

/// A spawned watch, stopped when dropped.
struct Aborted(tokio::task::JoinHandle<()>);

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn client(config: &KarmadaConfig) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&config.kubeconfig).context("cannot read the kubeconfig")?;
    let options = kube::config::KubeConfigOptions { context: config.context.clone(), ..Default::default() };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.context("invalid kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
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
    fn a_relist_is_swapped_in_whole_and_only_changes_count() {
        let object = |name: &str, rv: &str| {
            serde_json::from_value::<DynamicObject>(json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name, "resourceVersion": rv}})).unwrap()
        };
        let mut reflected = Reflected::default();
        assert!(!reflected.apply(watcher::Event::Init));
        assert!(!reflected.apply(watcher::Event::InitApply(object("m1", "1"))));
        assert!(reflected.values().is_empty(), "nothing shown before the list completes");
        assert!(reflected.apply(watcher::Event::InitDone));
        assert_eq!(reflected.values().len(), 1);
        assert!(reflected.apply(watcher::Event::Apply(object("m2", "2"))));
        assert!(!reflected.apply(watcher::Event::Apply(object("m2", "2"))), "the same object again is no change");
        assert!(reflected.apply(watcher::Event::Delete(object("m1", "1"))));
        // A relist after 410 Gone: m2 gone, m3 new, shown at once at its end.
        reflected.apply(watcher::Event::Init);
        reflected.apply(watcher::Event::InitApply(object("m3", "5")));
        assert_eq!(reflected.values()[0]["metadata"]["name"], "m2");
        assert!(reflected.apply(watcher::Event::InitDone));
        let names: Vec<Value> = reflected.values().iter().map(|o| o["metadata"]["name"].clone()).collect();
        assert_eq!(names, [json!("m3")]);
        // An empty first list is a change (the Secrets of a namespace are known).
        let mut empty = Reflected::default();
        empty.apply(watcher::Event::Init);
        assert!(empty.apply(watcher::Event::InitDone));
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
