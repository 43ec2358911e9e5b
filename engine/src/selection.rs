//! Resource selection: which resource types kubefold aggregates, from which
//! member clusters and namespaces.
//!
//! Modelled on Karmada's `ResourceRegistry` (`search.karmada.io/v1alpha1`):
//! each rule has a `targetCluster` (cluster names and/or a label selector on
//! the clusters' labels; both must hold when both are given, as in Karmada's
//! `ClusterAffinity`; an empty one selects every cluster) and
//! `resourceSelectors` (`apiVersion`, `kind`, optional `namespace`). The
//! rules add up: a type is watched in a cluster when any rule selects both,
//! in the union of the namespaces those rules name (all namespaces as soon
//! as one of them names none).
//!
//! Pure functions: validation, the per-cluster plan, and the served catalog.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::resources::{builtin, ResourceType, TypeRef};
use crate::selector::LabelSelector;

/// A selection that breaks the rules; the message lists every field at fault.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    /// One or more fields are invalid.
    #[error("resource selection is invalid: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The whole selection: the rules, applied together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceSelection {
    /// The rules; a type is aggregated from a cluster when any rule selects both.
    pub rules: Vec<SelectionRule>,
}

/// One rule: these types, from these clusters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SelectionRule {
    /// The clusters the rule applies to; every cluster when empty.
    #[serde(default)]
    pub target_cluster: TargetCluster,
    /// The types (and optionally one namespace each) the rule selects.
    pub resource_selectors: Vec<ResourceSelector>,
}

/// Which member clusters a rule applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetCluster {
    /// Cluster names; when set, only these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// A selector on the clusters' `labels`; when set, only clusters it selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<ClusterLabelSelector>,
}

/// A `metav1.LabelSelector` over cluster labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterLabelSelector {
    /// `key: value` pairs that must all be present.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelExpression>,
}

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelExpression {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// One selected type, optionally restricted to one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceSelector {
    /// `v1`, `apps/v1`, `example.com/v1`.
    pub api_version: String,
    /// `Pod`, `Deployment`, `Widget`.
    pub kind: String,
    /// Only objects of this namespace; all namespaces when unset. Ignored
    /// for cluster-scoped types other than the built-in ones (refused there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl ResourceSelector {
    /// The type it names.
    pub fn type_ref(&self) -> TypeRef {
        TypeRef::new(&self.api_version, &self.kind)
    }
}

/// The namespaces a watcher keeps objects of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceFilter {
    /// Every namespace.
    All,
    /// Only these namespaces (never empty).
    Only(BTreeSet<String>),
}

impl NamespaceFilter {
    /// Whether an object in `namespace` is kept. Cluster-scoped objects
    /// (namespace `""`) always are.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            NamespaceFilter::All => true,
            NamespaceFilter::Only(set) => namespace.is_empty() || set.contains(namespace),
        }
    }

    /// The one namespace, when the filter names exactly one (the watcher
    /// then lists and watches that namespace only).
    pub fn single(&self) -> Option<&str> {
        match self {
            NamespaceFilter::Only(set) if set.len() == 1 => set.iter().next().map(String::as_str),
            _ => None,
        }
    }

    /// Whether every object this filter keeps, `wider` keeps too.
    pub fn is_within(&self, wider: &NamespaceFilter) -> bool {
        match (self, wider) {
            (_, NamespaceFilter::All) => true,
            (NamespaceFilter::All, NamespaceFilter::Only(_)) => false,
            (NamespaceFilter::Only(a), NamespaceFilter::Only(b)) => a.is_subset(b),
        }
    }

    fn add(&mut self, namespace: Option<&str>) {
        match (namespace, &mut *self) {
            (None, _) => *self = NamespaceFilter::All,
            (Some(_), NamespaceFilter::All) => {}
            (Some(ns), NamespaceFilter::Only(set)) => {
                set.insert(ns.to_string());
            }
        }
    }
}

impl std::fmt::Display for NamespaceFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamespaceFilter::All => f.write_str("*"),
            NamespaceFilter::Only(set) => f.write_str(&set.iter().cloned().collect::<Vec<_>>().join(",")),
        }
    }
}

impl Default for ResourceSelection {
    /// The built-in types, from every cluster, in every namespace.
    fn default() -> Self {
        ResourceSelection {
            rules: vec![SelectionRule {
                target_cluster: TargetCluster::default(),
                resource_selectors: builtin()
                    .iter()
                    .map(|r| ResourceSelector { api_version: r.api_version(), kind: r.kind.clone(), namespace: None })
                    .collect(),
            }],
        }
    }
}

impl ClusterLabelSelector {
    /// The selector as the engine matches it.
    pub fn to_selector(&self) -> std::result::Result<LabelSelector, String> {
        let value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        LabelSelector::from_label_selector(&value).map_err(|e| e.to_string())
    }
}

impl TargetCluster {
    /// Whether the cluster `name` with `labels` is targeted. An invalid
    /// label selector (refused by [`ResourceSelection::validate`]) selects nothing.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if !self.cluster_names.is_empty() && !self.cluster_names.iter().any(|c| c == name) {
            return false;
        }
        match &self.label_selector {
            None => true,
            Some(selector) => selector.to_selector().is_ok_and(|s| s.matches_map(labels)),
        }
    }
}

/// Whether `s` is a DNS-1123 label (namespaces, cluster names).
fn is_dns1123_label(s: &str) -> bool {
    crate::names::is_valid_cluster_name(s)
}

/// Whether `s` is a DNS-1123 subdomain (API groups).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Whether `s` can be a version (`v1`, `v1beta2`): a DNS-1123 label.
fn is_version(s: &str) -> bool {
    is_dns1123_label(s)
}

/// Whether `s` can be a kind: a letter, then letters and digits.
fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

impl ResourceSelection {
    /// Checks every field; the error lists each one at fault, with its path.
    pub fn validate(&self) -> Result<()> {
        let mut errors = Vec::new();
        let builtin = builtin();
        for (i, rule) in self.rules.iter().enumerate() {
            let at = format!("rules[{i}]");
            for (j, name) in rule.target_cluster.cluster_names.iter().enumerate() {
                if !is_dns1123_label(name) {
                    errors.push(format!("{at}.targetCluster.clusterNames[{j}]: Invalid value: {name:?}: must be a DNS-1123 label"));
                }
            }
            if let Some(selector) = &rule.target_cluster.label_selector {
                if let Err(e) = selector.to_selector() {
                    errors.push(format!("{at}.targetCluster.labelSelector: Invalid value: {e}"));
                }
            }
            if rule.resource_selectors.is_empty() {
                errors.push(format!("{at}.resourceSelectors: Required value: at least one resource selector"));
            }
            for (j, selector) in rule.resource_selectors.iter().enumerate() {
                let at = format!("{at}.resourceSelectors[{j}]");
                let type_ref = selector.type_ref();
                let (group, version) = type_ref.group_version();
                if selector.api_version.is_empty() {
                    errors.push(format!("{at}.apiVersion: Required value"));
                } else if selector.api_version.matches('/').count() > 1
                    || !is_version(version)
                    || (!group.is_empty() && !is_dns1123_subdomain(group))
                    || (group.is_empty() && selector.api_version.contains('/'))
                {
                    errors.push(format!(
                        "{at}.apiVersion: Invalid value: {:?}: must be VERSION or GROUP/VERSION",
                        selector.api_version
                    ));
                }
                if selector.kind.is_empty() {
                    errors.push(format!("{at}.kind: Required value"));
                } else if !is_kind(&selector.kind) {
                    errors.push(format!("{at}.kind: Invalid value: {:?}: must be a kind such as Pod", selector.kind));
                }
                if let Some(ns) = &selector.namespace {
                    if !is_dns1123_label(ns) {
                        errors.push(format!("{at}.namespace: Invalid value: {ns:?}: must be a DNS-1123 label"));
                    } else if builtin.iter().any(|r| !r.namespaced && type_ref.names(r)) {
                        errors.push(format!("{at}.namespace: Invalid value: {ns:?}: {} is not namespaced", selector.kind));
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(errors))
        }
    }

    /// The types the selection names, each once, in order of first mention.
    pub fn types(&self) -> Vec<TypeRef> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for selector in self.rules.iter().flat_map(|r| &r.resource_selectors) {
            let t = selector.type_ref();
            if seen.insert(t.clone()) {
                out.push(t);
            }
        }
        out
    }

    /// What to watch in the cluster `name` with `labels`: each selected
    /// type with the namespaces to keep.
    pub fn plan(&self, name: &str, labels: &BTreeMap<String, String>) -> BTreeMap<TypeRef, NamespaceFilter> {
        let mut plan: BTreeMap<TypeRef, NamespaceFilter> = BTreeMap::new();
        for rule in self.rules.iter().filter(|r| r.target_cluster.selects(name, labels)) {
            for selector in &rule.resource_selectors {
                let namespace = selector.namespace.as_deref();
                plan.entry(selector.type_ref())
                    .and_modify(|f| f.add(namespace))
                    .or_insert_with(|| match namespace {
                        None => NamespaceFilter::All,
                        Some(ns) => NamespaceFilter::Only([ns.to_string()].into()),
                    });
            }
        }
        plan
    }

    /// The catalog served for this selection: the selected types that are
    /// `known` (built in, or discovered from a member), built-in types first
    /// in their discovery order, then the others in order of mention.
    pub fn catalog(&self, known: &[ResourceType]) -> Vec<ResourceType> {
        let selected = self.types();
        let is_selected = |r: &ResourceType| selected.iter().any(|t| t.names(r));
        let mut out: Vec<ResourceType> = Vec::new();
        for r in builtin().into_iter().filter(|r| is_selected(r)) {
            // A discovered copy of a built-in type (same key) is not used:
            // the built-in entry carries kubefold's printer and subresources.
            out.push(r);
        }
        for t in &selected {
            if let Some(r) = known.iter().find(|r| t.names(r)) {
                if !out.iter().any(|o| o.key() == r.key()) {
                    out.push(r.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn parse(json: &str) -> ResourceSelection {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_default_is_every_builtin_type_everywhere() {
        let selection = ResourceSelection::default();
        selection.validate().unwrap();
        let plan = selection.plan("anything", &BTreeMap::new());
        assert_eq!(plan.len(), builtin().len());
        assert!(plan.values().all(|f| *f == NamespaceFilter::All));
        let catalog = selection.catalog(&[]);
        assert_eq!(catalog, builtin(), "same types, same order");
    }

    #[test]
    fn rules_select_clusters_by_name_and_label_and_add_up_namespaces() {
        let selection = parse(
            r#"{"rules": [
                {"targetCluster": {"clusterNames": ["member1"]},
                 "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "default"}]},
                {"targetCluster": {"labelSelector": {"matchLabels": {"env": "prod"}}},
                 "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": "kube-system"},
                                       {"apiVersion": "example.com/v1", "kind": "Widget"}]},
                {"targetCluster": {"clusterNames": ["member2"], "labelSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}},
                 "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}
            ]}"#,
        );
        selection.validate().unwrap();
        let pods = TypeRef::new("v1", "Pod");
        let widgets = TypeRef::new("example.com/v1", "Widget");
        let deployments = TypeRef::new("apps/v1", "Deployment");

        let m1 = selection.plan("member1", &labels(&[("env", "prod")]));
        assert_eq!(m1[&pods], NamespaceFilter::Only(["default".to_string(), "kube-system".to_string()].into()));
        assert_eq!(m1[&widgets], NamespaceFilter::All);
        assert!(!m1.contains_key(&deployments), "member1 is not named by the third rule");

        let m2 = selection.plan("member2", &labels(&[("env", "dev")]));
        assert_eq!(m2.keys().collect::<Vec<_>>(), [&deployments], "names and labels must both hold");
        assert!(selection.plan("member2", &labels(&[("env", "prod")])).contains_key(&widgets));
        assert!(!selection.plan("member2", &labels(&[("env", "prod")])).contains_key(&deployments));
        assert!(selection.plan("member3", &BTreeMap::new()).is_empty());
        assert_eq!(selection.types(), [pods, widgets, deployments]);
    }

    #[test]
    fn namespace_filters_keep_cluster_scoped_objects_and_compare() {
        let one = NamespaceFilter::Only(["a".to_string()].into());
        let two = NamespaceFilter::Only(["a".to_string(), "b".to_string()].into());
        assert!(one.allows("a") && !one.allows("b") && one.allows(""));
        assert_eq!(one.single(), Some("a"));
        assert_eq!(two.single(), None);
        assert!(one.is_within(&two) && !two.is_within(&one));
        assert!(two.is_within(&NamespaceFilter::All) && !NamespaceFilter::All.is_within(&two));
    }

    #[test]
    fn the_catalog_holds_selected_known_types_builtins_first() {
        let selection = parse(
            r#"{"rules": [{"resourceSelectors": [
                {"apiVersion": "example.com/v1", "kind": "Widget"},
                {"apiVersion": "v1", "kind": "Node"},
                {"apiVersion": "v1", "kind": "Pod"},
                {"apiVersion": "example.com/v1", "kind": "Gadget"}
            ]}]}"#,
        );
        let mut widget = crate::resources::find(&builtin(), "", "v1", "configmaps").unwrap().clone();
        widget.group = "example.com".into();
        widget.plural = "widgets".into();
        widget.kind = "Widget".into();
        let catalog = selection.catalog(std::slice::from_ref(&widget));
        let keys: Vec<String> = catalog.iter().map(|r| r.key()).collect();
        assert_eq!(keys, ["v1/pods", "v1/nodes", "example.com/v1/widgets"], "Gadget is not known yet");
    }

    #[test]
    fn invalid_selections_name_every_field_at_fault() {
        let selection = parse(
            r#"{"rules": [
                {"targetCluster": {"clusterNames": ["Bad_Name"], "labelSelector": {"matchExpressions": [{"key": "env", "operator": "Near"}]}},
                 "resourceSelectors": [{"apiVersion": "", "kind": "pod!"}, {"apiVersion": "a/b/c", "kind": "Pod", "namespace": "No"},
                                       {"apiVersion": "v1", "kind": "Node", "namespace": "default"}]},
                {"resourceSelectors": []}
            ]}"#,
        );
        let Err(Error::Invalid(errors)) = selection.validate() else { panic!("accepted") };
        assert_eq!(
            errors,
            [
                "rules[0].targetCluster.clusterNames[0]: Invalid value: \"Bad_Name\": must be a DNS-1123 label",
                "rules[0].targetCluster.labelSelector: Invalid value: unable to parse requirement: found 'Near', expected: In, NotIn, Exists, DoesNotExist",
                "rules[0].resourceSelectors[0].apiVersion: Required value",
                "rules[0].resourceSelectors[0].kind: Invalid value: \"pod!\": must be a kind such as Pod",
                "rules[0].resourceSelectors[1].apiVersion: Invalid value: \"a/b/c\": must be VERSION or GROUP/VERSION",
                "rules[0].resourceSelectors[1].namespace: Invalid value: \"No\": must be a DNS-1123 label",
                "rules[0].resourceSelectors[2].namespace: Invalid value: \"default\": Node is not namespaced",
                "rules[1].resourceSelectors: Required value: at least one resource selector",
            ]
        );
        assert!(serde_json::from_str::<ResourceSelection>(r#"{"rules": [{"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "nmespace": "x"}]}]}"#).is_err());
    }
}
