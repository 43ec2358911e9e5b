//! Which member a new object goes to when the request does not say it in
//! its URL (`/clusters/{c}`) or in a qualified name (`name_cluster`):
//!
//! 1. the annotation `kubefold.io/cluster: NAME` on the object (kept on
//!    the object kubefold serves, as on every object; stripped from the body
//!    sent to the member, as every `kubefold.io/` annotation);
//! 2. the first `placement` rule of the configuration that matches the
//!    object's namespace and labels;
//! 3. otherwise none: the create is refused with 400, naming the ways.
//!
//! A create (`kubectl create -f`, client-side `kubectl apply -f`) and a
//! server-side apply of an object that does not exist yet choose alike.

use std::collections::BTreeMap;

use kubefold_engine::object::CLUSTER_ANNOTATION;
use kubefold_engine::selector::LabelSelector;
use kubefold_engine::status::Status;
use serde::Deserialize;
use serde_json::Value;

use crate::read::Scope;
use crate::ApiState;

/// A rule choosing the member for new objects that name none (config key
/// `placement`, a list; the first rule that matches wins). A rule with
/// neither `namespaces` nor `labelSelector` matches every object: put it
/// last, as the default member.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlacementRule {
    /// Namespaces whose new objects the rule places (a Namespace object by
    /// its own name). Empty (the default): any namespace, and cluster-scoped
    /// objects.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A label selector the new object's labels must match, as `kubectl -l`
    /// writes it (`tier=db,env in (prod,staging)`). Unset (the default): any labels.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// The member cluster the matching objects are created in.
    pub cluster: String,
}

impl PlacementRule {
    /// Checks what serde cannot: a valid cluster name and selector.
    pub fn validate(&self) -> Result<(), String> {
        if !kubefold_engine::names::is_valid_cluster_name(&self.cluster) {
            return Err(format!("cluster {:?} must be a DNS-1123 label", self.cluster));
        }
        if let Some(selector) = &self.label_selector {
            LabelSelector::parse(selector).map_err(|e| format!("labelSelector {selector:?}: {e}"))?;
        }
        if let Some(ns) = self.namespaces.iter().find(|n| n.is_empty()) {
            return Err(format!("namespaces entry {ns:?} is empty"));
        }
        Ok(())
    }

    /// Whether the rule places an object of `namespace` with `labels`.
    pub fn matches(&self, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> bool {
        let namespace_matches = self.namespaces.is_empty() || namespace.is_some_and(|ns| self.namespaces.iter().any(|n| n == ns));
        let labels_match = match &self.label_selector {
            None => true,
            Some(selector) => LabelSelector::parse(selector).is_ok_and(|s| s.matches_map(labels)),
        };
        namespace_matches && labels_match
    }
}

/// Checks every rule; the error names the rule.
pub fn validate(rules: &[PlacementRule]) -> Result<(), String> {
    for (index, rule) in rules.iter().enumerate() {
        rule.validate().map_err(|e| format!("placement[{index}]: {e}"))?;
    }
    Ok(())
}

/// The member a new `object` goes to, from its `kubefold.io/cluster`
/// annotation or the placement rules; `None` when neither says.
/// An annotation or a rule naming a cluster that is not a member is 400.
pub fn choose(state: &ApiState, scope: &Scope, object: &Value) -> Result<Option<String>, Status> {
    let metadata = &object["metadata"];
    if let Some(named) = metadata["annotations"][CLUSTER_ANNOTATION].as_str() {
        if state.fleet.member(named).is_none() {
            let members = state.fleet.member_names().join(", ");
            return Err(Status::bad_request(format!(
                "the annotation {CLUSTER_ANNOTATION} names cluster \"{named}\", which is not a member of this kubefold (members: {members})"
            )));
        }
        return Ok(Some(named.to_string()));
    }
    let namespace = if scope.resource.namespaced {
        scope.namespace.clone().or_else(|| metadata["namespace"].as_str().map(str::to_string))
    } else if scope.resource.group.is_empty() && scope.resource.plural == "namespaces" {
        metadata["name"].as_str().map(str::to_string)
    } else {
        None
    };
    let labels: BTreeMap<String, String> = metadata["labels"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
        .unwrap_or_default();
    let Some((index, rule)) = state.config.placement.iter().enumerate().find(|(_, r)| r.matches(namespace.as_deref(), &labels)) else {
        return Ok(None);
    };
    if state.fleet.member(&rule.cluster).is_none() {
        return Err(Status::bad_request(format!(
            "placement rule {index} of the configuration chooses cluster \"{}\", which is not a member of this kubefold (members: {})",
            rule.cluster,
            state.fleet.member_names().join(", ")
        )));
    }
    Ok(Some(rule.cluster.clone()))
}

/// 400 for a new object whose member nothing names.
pub fn unplaced(scope: &Scope, requested: &str) -> Status {
    Status::bad_request(format!(
        "kubefold cannot choose a cluster for a new {}: name it <name>_<cluster> (e.g. {}_member1), annotate it {CLUSTER_ANNOTATION}: <cluster>, add a placement rule to the configuration, or POST under /clusters/<cluster>{}",
        scope.resource.singular,
        if requested.is_empty() { "my-object" } else { requested },
        scope.resource.collection_path(scope.namespace.as_deref())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn rules_match_namespaces_and_labels() {
        let rules: Vec<PlacementRule> = serde_saphyr::from_str(
            "- {namespaces: [shop], cluster: member2}\n- {labelSelector: 'tier in (db)', cluster: member3}\n- {cluster: member1}\n",
        )
        .unwrap();
        validate(&rules).unwrap();
        let first = |ns: Option<&str>, l: &[(&str, &str)]| rules.iter().find(|r| r.matches(ns, &labels(l))).map(|r| r.cluster.as_str());
        assert_eq!(first(Some("shop"), &[("tier", "db")]), Some("member2"));
        assert_eq!(first(Some("default"), &[("tier", "db")]), Some("member3"));
        assert_eq!(first(Some("default"), &[("tier", "web")]), Some("member1"));
        assert_eq!(first(None, &[]), Some("member1"));
        assert!(!rules[0].matches(None, &labels(&[])), "a namespace rule does not place cluster-scoped objects");
    }

    #[test]
    fn bad_rules_are_refused() {
        let parse = |y: &str| serde_saphyr::from_str::<Vec<PlacementRule>>(y).map_err(|e| e.to_string()).and_then(|r| validate(&r));
        assert!(parse("[{cluster: Bad_Name}]").unwrap_err().contains("placement[0]"));
        assert!(parse("[{cluster: a, labelSelector: 'a in (('}]").unwrap_err().contains("labelSelector"));
        assert!(parse("[{namespace: x, cluster: a}]").is_err());
        assert!(parse("[{namespaces: [''], cluster: a}]").is_err());
        assert!(parse("[{cluster: a}]").is_ok());
    }
}
