//! [`ControlPlane`]: the Services and EndpointSlices seen, changed one
//! object at a time.

use std::collections::BTreeMap;

use super::{resolve, EndpointEntry, EndpointSlice, Lookup, Service};

/// The control plane's Services and EndpointSlices as last seen, with one
/// method per kind of change; the resolver actor feeds it from its watchers.
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    services: BTreeMap<(String, String), Service>,
    slices: BTreeMap<(String, String), EndpointSlice>,
}

impl ControlPlane {
    /// An empty control plane.
    pub fn new() -> ControlPlane {
        ControlPlane::default()
    }

    /// Adds or replaces a Service.
    pub fn upsert_service(&mut self, service: Service) {
        self.services.insert((service.namespace.clone(), service.name.clone()), service);
    }

    /// Removes a Service.
    pub fn delete_service(&mut self, namespace: &str, name: &str) {
        self.services.remove(&(namespace.to_string(), name.to_string()));
    }

    /// Replaces every Service (after a list).
    pub fn replace_services(&mut self, services: impl IntoIterator<Item = Service>) {
        self.services = services.into_iter().map(|s| ((s.namespace.clone(), s.name.clone()), s)).collect();
    }

    /// Adds or replaces an EndpointSlice.
    pub fn upsert_slice(&mut self, slice: EndpointSlice) {
        self.slices.insert((slice.namespace.clone(), slice.name.clone()), slice);
    }

    /// Removes an EndpointSlice; returns it.
    pub fn delete_slice(&mut self, namespace: &str, name: &str) -> Option<EndpointSlice> {
        self.slices.remove(&(namespace.to_string(), name.to_string()))
    }

    /// Replaces every EndpointSlice (after a list).
    pub fn replace_slices(&mut self, slices: impl IntoIterator<Item = EndpointSlice>) {
        self.slices = slices.into_iter().map(|s| ((s.namespace.clone(), s.name.clone()), s)).collect();
    }

    /// The Service `namespace/name`.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services.get(&(namespace.to_string(), name.to_string()))
    }

    /// The EndpointSlice `namespace/name`.
    pub fn slice(&self, namespace: &str, name: &str) -> Option<&EndpointSlice> {
        self.slices.get(&(namespace.to_string(), name.to_string()))
    }

    /// The EndpointSlices of the Service `namespace/service`.
    pub fn slices_of(&self, namespace: &str, service: &str) -> Vec<&EndpointSlice> {
        self.slices
            .values()
            .filter(|s| s.namespace == namespace && s.service_name.as_deref() == Some(service))
            .collect()
    }

    /// Number of Services and EndpointSlices held.
    pub fn len(&self) -> (usize, usize) {
        (self.services.len(), self.slices.len())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.slices.is_empty()
    }

    /// Resolves the endpoint of `cluster`.
    pub fn resolve(&self, cluster: &str, lookup: &Lookup) -> EndpointEntry {
        let name = lookup.service_name(cluster);
        let service = self.service(&lookup.namespace, &name);
        let slices = self.slices_of(&lookup.namespace, &name);
        resolve(cluster, lookup, service, &slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::tests::{failed, lookup, ok, service, slice, SVC};
    use crate::estimator::Rule;
    use serde_json::json;

    #[test]
    fn control_plane_follows_changes_and_deletion() {
        let mut cp = ControlPlane::new();
        let l = lookup();
        cp.replace_services(vec![service(
            json!({"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": 4000}]}),
        )]);
        assert_eq!(cp.resolve("member1", &l), ok(Rule::ExternalName, &["127.0.0.1:4000"]));
        cp.upsert_service(service(json!({"clusterIP": "None", "ports": [{"name": "g", "port": 10352}]})));
        assert_eq!(
            cp.resolve("member1", &l),
            failed(Rule::Headless, "no ready endpoints for service karmada-system/karmada-scheduler-estimator-member1 on port 10352")
        );
        cp.upsert_slice(slice("s1", SVC, json!([{"name": "g", "port": 4001}]), json!([{"addresses": ["127.0.0.2"]}])));
        assert_eq!(cp.resolve("member1", &l), ok(Rule::Headless, &["127.0.0.2:4001"]));
        cp.upsert_slice(slice("s1", SVC, json!([{"name": "g", "port": 4001}]), json!([{"addresses": ["127.0.0.2"], "conditions": {"ready": false}}])));
        assert_eq!(cp.resolve("member1", &l).addresses, Vec::<String>::new());
        assert!(cp.delete_slice("karmada-system", "s1").is_some());
        // The Service deleted after being resolved: back to the DNS names.
        cp.delete_service("karmada-system", SVC);
        assert_eq!(
            cp.resolve("member1", &l),
            ok(
                Rule::DnsFallback,
                &[
                    "karmada-scheduler-estimator-member1.karmada-system.svc.cluster.local:10352",
                    "karmada-scheduler-estimator-member1.karmada-system.svc:10352",
                ]
            )
        );
        // A Service of the same name in another namespace does not count.
        let mut elsewhere = service(json!({"type": "ExternalName", "externalName": "x", "ports": [{"port": 10352}]}));
        elsewhere.namespace = "default".into();
        cp.upsert_service(elsewhere);
        assert_eq!(cp.resolve("member1", &l).rule, Rule::DnsFallback);
        assert_eq!(cp.len(), (1, 0));
    }

}
