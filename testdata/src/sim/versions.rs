//! Types served in two versions over one storage, as kube-apiserver serves
//! `autoscaling/v2` and `autoscaling/v1` HorizontalPodAutoscalers
//! (<https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/horizontal-pod-autoscaler-v1/>):
//! kubectl up to 1.32 creates them as `autoscaling/v1` (`kubectl
//! autoscale`), 1.33 as `autoscaling/v2`, and both read either.
//!
//! The store keeps each version's table and writes the other version's
//! form of an object with every write of one ([`Store::put`] and
//! [`Store::remove`] call [`convert`]), at the same resource version. The
//! conversion carries what both versions express: the scale target, the
//! replica bounds and the CPU utilization target and reading. Unlike
//! kube-apiserver, which keeps v2's other metrics and `behavior` in
//! annotations of the v1 form, an update through v1 drops them.
//!
//! [`Store::put`]: super::store::Store::put
//! [`Store::remove`]: super::store::Store::remove

use kubefold_engine::resources::ResourceType;
use serde_json::{json, Map, Value};

/// The index of the other version of the type at `index`, if it has one.
pub fn twin(catalog: &[ResourceType], index: usize) -> Option<usize> {
    let r = &catalog[index];
    if r.group != "autoscaling" || r.plural != "horizontalpodautoscalers" {
        return None;
    }
    let other = if r.version == "v1" { "v2" } else if r.version == "v2" { "v1" } else { return None };
    catalog.iter().position(|t| t.group == r.group && t.plural == r.plural && t.version == other)
}

/// `object` in the form of `to`'s version.
pub fn convert(object: &Value, to: &ResourceType) -> Value {
    let mut out = object.clone();
    out["apiVersion"] = json!(to.api_version());
    if to.version == "v1" {
        v2_to_v1(object, &mut out);
    } else {
        v1_to_v2(object, &mut out);
    }
    out
}

/// Copies the fields both versions share from `from` into `spec` or `status`.
fn common(from: &Value, fields: &[&str]) -> Map<String, Value> {
    fields.iter().filter_map(|f| from.get(*f).filter(|v| !v.is_null()).map(|v| (f.to_string(), v.clone()))).collect()
}

fn v2_to_v1(object: &Value, out: &mut Value) {
    let cpu = |metrics: &Value, side: &str| {
        metrics.as_array().and_then(|m| {
            m.iter()
                .find(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu")
                .and_then(|m| m["resource"][side]["averageUtilization"].as_i64())
        })
    };
    let mut spec = common(&object["spec"], &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    if let Some(target) = cpu(&object["spec"]["metrics"], "target") {
        spec.insert("targetCPUUtilizationPercentage".into(), json!(target));
    }
    out["spec"] = Value::Object(spec);
    if object["status"].is_object() {
        let mut status = common(&object["status"], &["observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"]);
        if let Some(current) = cpu(&object["status"]["currentMetrics"], "current") {
            status.insert("currentCPUUtilizationPercentage".into(), json!(current));
        }
        out["status"] = Value::Object(status);
    }
}

fn v1_to_v2(object: &Value, out: &mut Value) {
    let mut spec = common(&object["spec"], &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    if let Some(target) = object["spec"]["targetCPUUtilizationPercentage"].as_i64() {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}]),
        );
    }
    out["spec"] = Value::Object(spec);
    if object["status"].is_object() {
        let mut status = common(&object["status"], &["observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"]);
        if let Some(current) = object["status"]["currentCPUUtilizationPercentage"].as_i64() {
            status.insert(
                "currentMetrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": current}}}]),
            );
        }
        out["status"] = Value::Object(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autoscaling_v1_and_v2_carry_the_cpu_target_both_ways() {
        let mut catalog = crate::workload::member_only_types();
        catalog.retain(|r| r.group == "autoscaling");
        let (v2, v1) = (twin(&catalog, 1).unwrap(), twin(&catalog, 0).unwrap());
        assert_eq!((catalog[v2].version.as_str(), catalog[v1].version.as_str()), ("v2", "v1"));
        let hpa_v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 4,
                     "targetCPUUtilizationPercentage": 80},
            "status": {"currentReplicas": 2, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 50}});
        let hpa_v2 = convert(&hpa_v1, &catalog[v2]);
        assert_eq!(hpa_v2["apiVersion"], "autoscaling/v2");
        assert_eq!(hpa_v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
        assert_eq!(hpa_v2["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"], 50);
        assert_eq!(convert(&hpa_v2, &catalog[v1]), hpa_v1);
    }
}
