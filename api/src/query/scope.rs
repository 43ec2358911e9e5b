//! Which objects a request sees: its [`Scope`] (type, member, namespace,
//! how names are served), its label and field selectors ([`Filter`]), and
//! the object a name designates ([`resolve_name`]).

use std::sync::Arc;

use kubefold_engine::event::{IndexEntry, ObjectKey};
use kubefold_engine::index::Index;
use kubefold_engine::names::{self, NameStyle, RequestedName};
use kubefold_engine::resources::ResourceType;
use kubefold_engine::selector::{FieldSelector, LabelSelector, Operator, Requirement};
use kubefold_engine::status::Status;

use super::params::Query;
use crate::path::ResourcePath;

/// The label-selector key that selects clusters.
pub const CLUSTER_SEARCH_KEY: &str = "kubefold.io/cluster";

/// Which objects a request sees, and how their names are served.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The type.
    pub resource: ResourceType,
    /// `/clusters/{c}` scope.
    pub cluster: Option<String>,
    /// Namespace, for namespaced paths.
    pub namespace: Option<String>,
    /// Names as served: qualified unless the cluster scope or the server says otherwise.
    pub qualified: bool,
}

impl Scope {
    /// The scope of a parsed path, names served as `name_style` says
    /// outside a `/clusters/{c}` scope.
    pub fn new(resource: ResourceType, path: &ResourcePath, name_style: NameStyle) -> Scope {
        let qualified = path.cluster.is_none() && name_style == NameStyle::Qualified;
        let namespace = if resource.namespaced { path.namespace.clone() } else { None };
        Scope { resource, cluster: path.cluster.clone(), namespace, qualified }
    }

    /// The `_cluster` suffix of served names.
    pub fn name_suffix(&self, cluster: &str) -> Option<String> {
        self.qualified.then(|| format!("{}{}", names::SEPARATOR, cluster))
    }

    /// The name of an object as served.
    pub fn served_name(&self, key: &ObjectKey) -> String {
        if self.qualified {
            names::qualify(&key.name, &key.cluster)
        } else {
            key.name.clone()
        }
    }
}

/// Selectable fields that hold the name of another object of the same
/// cluster, which clients write qualified at the fleet level.
const REFERENCE_FIELDS: [&str; 4] = ["spec.nodeName", "involvedObject.name", "regarding.name", "spec.serviceAccountName"];

/// A parsed label and field selector, with the cluster search condition
/// taken out of the label selector.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    clusters: Vec<Requirement>,
    labels: LabelSelector,
    /// Bits of the labels every match has (checked before `labels`).
    label_bits: u64,
    fields: FieldSelector,
}

impl Filter {
    /// Parses the selectors of a request, rejecting invalid ones with 400.
    pub fn parse(resource: &ResourceType, query: &Query) -> Result<Filter, Status> {
        let mut labels = LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))
            .map_err(|e| Status::bad_request(format!("unable to parse requirement: {e}")))?;
        let mut clusters = labels.take_key(CLUSTER_SEARCH_KEY);
        let mut fields = FieldSelector::parse(query.field_selector.as_deref().unwrap_or(""))
            .map_err(|e| Status::bad_request(e.to_string()))?;
        // A field naming another object by its qualified name (`kubectl
        // drain NODE_cluster` lists the node's pods by `spec.nodeName`): the
        // member's own name, in that cluster.
        for term in fields.requirements.iter_mut().filter(|t| !t.negated && REFERENCE_FIELDS.contains(&t.field.as_str())) {
            if let RequestedName::Qualified { name, cluster } = names::parse(&term.value) {
                let (name, cluster) = (name.to_string(), cluster.to_string());
                clusters.push(Requirement { key: CLUSTER_SEARCH_KEY.into(), operator: kubefold_engine::selector::Operator::Equals, values: vec![cluster] });
                term.value = name;
            }
        }
        kubefold_engine::fields::validate(&resource.group, &resource.plural, &fields)
            .map_err(|e| Status::bad_request(e.to_string()))?;
        let label_bits = labels.required_label_bits();
        Ok(Filter { clusters, labels, label_bits, fields })
    }

    /// Whether the outcome can differ between two versions of one object
    /// (label or field selectors); scope and cluster conditions cannot.
    pub fn depends_on_content(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether the request has a label or field selector (the cluster
    /// search key counts: it was written in the label selector).
    /// kube-apiserver leaves `remainingItemCount` out of such a list page,
    /// as its count of the rest would be a guess ("Retrieving large results
    /// sets in chunks", API Concepts).
    /// <https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>
    pub fn has_selector(&self) -> bool {
        self.depends_on_content() || !self.clusters.is_empty()
    }

    /// The objects a list or watch of `scope` looks at, in list order,
    /// optionally after `start_after`: a superset of those that pass
    /// ([`Filter::matches`] still decides), read from the smallest set the
    /// index keeps that holds them all: the objects carrying one label the
    /// selector requires (`k=v`, `k==v`, `k in (v)`), those of the scope's
    /// cluster (or the one cluster the selector names), or the whole type.
    /// A list of one cluster of a thousand, or a 1% selector, then reads
    /// about what it returns rather than every object of the type.
    pub fn candidates<'a>(&self, index: &'a Index, resource_key: &str, scope: &'a Scope, start_after: Option<&ObjectKey>) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<IndexEntry>)> + 'a> {
        let namespace = scope.namespace.as_deref();
        let single = |r: &'_ Requirement| match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [value]) => Some(value.clone()),
            _ => None,
        };
        let cluster = scope.cluster.clone().or_else(|| self.clusters.iter().find_map(single));
        let label = self
            .labels
            .requirements
            .iter()
            .filter_map(|r| single(r).map(|value| (index.count_label(resource_key, &r.key, &value), r.key.as_str(), value)))
            .min_by_key(|(count, ..)| *count);
        let of_cluster = cluster.as_deref().map(|c| index.count_scope(resource_key, None, Some(c)));
        match (label, cluster) {
            (Some((count, key, value)), _) if of_cluster.is_none_or(|n| count < n) => {
                index.range_with_label(resource_key, (key, &value), namespace, start_after)
            }
            (_, Some(cluster)) => index.range_of_cluster(resource_key, &cluster, namespace, start_after),
            (_, None) => index.range(resource_key, namespace, start_after),
        }
    }

    /// Whether an object passes the filter and the scope.
    pub fn matches(&self, scope: &Scope, key: &ObjectKey, entry: &IndexEntry) -> bool {
        if let Some(c) = &scope.cluster {
            if &key.cluster != c {
                return false;
            }
        }
        if !self.clusters.iter().all(|r| r.matches_value(Some(&key.cluster))) {
            return false;
        }
        if !self.labels.is_empty() && !(entry.may_have_labels(self.label_bits) && self.labels.matches(|key| entry.label(key))) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let served = scope.served_name(key);
        self.fields.matches(|field| match field {
            "metadata.name" => Some(served.as_str()),
            "metadata.namespace" => Some(key.namespace.as_str()),
            other => entry.field(other),
        })
    }
}

/// Finds the object a request names: qualified names always, bare names when
/// exactly one cluster has them (409 Conflict naming the candidates otherwise).
pub fn resolve_name(
    index: &Index,
    scope: &Scope,
    name: &str,
) -> Result<(ObjectKey, Arc<IndexEntry>), Status> {
    let resource = &scope.resource;
    let namespace = scope.namespace.clone().unwrap_or_default();
    let not_found = || Status::not_found(&resource.group, &resource.plural, name);
    if let Some(cluster) = &scope.cluster {
        let key = ObjectKey { namespace, name: name.to_string(), cluster: cluster.clone() };
        let entry = index.get(&resource.key(), &key).ok_or_else(not_found)?.clone();
        return Ok((key, entry));
    }
    match names::parse(name) {
        RequestedName::Qualified { name: member_name, cluster } => {
            let key = ObjectKey { namespace, name: member_name.to_string(), cluster: cluster.to_string() };
            let entry = index.get(&resource.key(), &key).ok_or_else(not_found)?.clone();
            Ok((key, entry))
        }
        RequestedName::Bare(bare) => {
            let found = index.by_name(&resource.key(), &namespace, bare);
            match found.as_slice() {
                [] => Err(not_found()),
                [(key, entry)] => Ok(((*key).clone(), (*entry).clone())),
                many => {
                    let candidates: Vec<String> = many.iter().map(|(k, _)| names::qualify(&k.name, &k.cluster)).collect();
                    Err(Status::conflict(format!(
                        "{} \"{}\" is ambiguous: it exists in {} clusters; use one of the qualified names: {}",
                        resource.plural,
                        bare,
                        many.len(),
                        candidates.join(", ")
                    ))
                    .with_details(&resource.group, &resource.plural, bare))
                }
            }
        }
    }
}
