//! The control plane's objects the rules read: Services and EndpointSlices,
//! parsed leniently from their JSON (only the fields the rules need).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Error, Result, SERVICE_NAME_LABEL};

/// A ServicePort's `targetPort` (an IntOrString).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetPort {
    /// A port number.
    Number(i64),
    /// A named port of the backing pods.
    Name(String),
}

/// One entry of `spec.ports` of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// `name`; empty when unset (allowed for a Service with one port).
    pub name: String,
    /// `port`.
    pub port: i64,
    /// `targetPort`; `None` when unset (the API server defaults it to `port`).
    pub target_port: Option<TargetPort>,
}

/// What the resolver needs of a `v1` Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.type`; empty when unset (the API defaults it to `ClusterIP`).
    pub service_type: String,
    /// `spec.clusterIP`; `None` (the string) for a headless Service.
    pub cluster_ip: String,
    /// `spec.clusterIPs`, primary first (dual-stack).
    pub cluster_ips: Vec<String>,
    /// `spec.externalName`.
    pub external_name: String,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
}

/// One entry of `ports` of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    /// `name`, the name of the ServicePort it serves; empty when unset.
    pub name: String,
    /// `port`; `None` means "all ports" (EndpointSlice API).
    pub port: Option<i64>,
}

/// One entry of `endpoints` of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `addresses`; fungible, clients may use only the first.
    pub addresses: Vec<String>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
}

impl Endpoint {
    /// Whether the endpoint takes new connections: `ready` is not false and
    /// `terminating` is not true.
    ///
    /// The EndpointSlice API (discovery.k8s.io/v1 `EndpointConditions`) says a
    /// nil `ready` is to be read as ready, a nil `terminating` as not
    /// terminating, and that `serving` differs from `ready` only for
    /// terminating endpoints
    /// (<https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/#conditions>).
    /// kube-proxy falls back to serving-and-terminating endpoints when a
    /// Service has no ready one; the estimator is not a data-plane path, so
    /// terminating endpoints are never handed out here.
    pub fn is_ready(&self) -> bool {
        self.ready != Some(false) && self.terminating != Some(true)
    }
}

/// What the resolver needs of a `discovery.k8s.io/v1` EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSlice {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The `kubernetes.io/service-name` label.
    pub service_name: Option<String>,
    /// `addressType`: `IPv4`, `IPv6` or `FQDN`.
    pub address_type: String,
    /// `ports`.
    pub ports: Vec<SlicePort>,
    /// `endpoints`.
    pub endpoints: Vec<Endpoint>,
}

#[derive(Deserialize, Default)]
struct MetaJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrString {
    Int(i64),
    Str(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServicePortJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    port: i64,
    #[serde(default)]
    target_port: Option<IntOrString>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ServiceSpecJson {
    #[serde(default, rename = "type")]
    service_type: Option<String>,
    #[serde(default, rename = "clusterIP")]
    cluster_ip: Option<String>,
    #[serde(default, rename = "clusterIPs")]
    cluster_ips: Option<Vec<String>>,
    #[serde(default)]
    external_name: Option<String>,
    #[serde(default)]
    ports: Option<Vec<ServicePortJson>>,
}

#[derive(Deserialize)]
struct ServiceJson {
    #[serde(default)]
    metadata: Option<MetaJson>,
    #[serde(default)]
    spec: Option<ServiceSpecJson>,
}

#[derive(Deserialize)]
struct SlicePortJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    port: Option<i64>,
}

#[derive(Deserialize, Default)]
struct ConditionsJson {
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    serving: Option<bool>,
    #[serde(default)]
    terminating: Option<bool>,
}

#[derive(Deserialize)]
struct EndpointJson {
    #[serde(default)]
    addresses: Option<Vec<String>>,
    #[serde(default)]
    conditions: Option<ConditionsJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndpointSliceJson {
    #[serde(default)]
    metadata: Option<MetaJson>,
    #[serde(default)]
    address_type: Option<String>,
    #[serde(default)]
    ports: Option<Vec<SlicePortJson>>,
    #[serde(default)]
    endpoints: Option<Vec<EndpointJson>>,
}

impl Service {
    /// Reads a Service from its JSON.
    pub fn from_json(bytes: &[u8]) -> Result<Service> {
        let raw: ServiceJson =
            serde_json::from_slice(bytes).map_err(|source| Error::InvalidObject { kind: "Service", source })?;
        let meta = raw.metadata.unwrap_or_default();
        let name = meta.name.filter(|n| !n.is_empty()).ok_or(Error::MissingName { kind: "Service" })?;
        let spec = raw.spec.unwrap_or_default();
        let ports = spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| ServicePort {
                name: p.name.unwrap_or_default(),
                port: p.port,
                target_port: p.target_port.map(|t| match t {
                    IntOrString::Int(n) => TargetPort::Number(n),
                    IntOrString::Str(s) => TargetPort::Name(s),
                }),
            })
            .collect();
        Ok(Service {
            namespace: meta.namespace.unwrap_or_default(),
            name,
            service_type: spec.service_type.unwrap_or_default(),
            cluster_ip: spec.cluster_ip.unwrap_or_default(),
            cluster_ips: spec.cluster_ips.unwrap_or_default(),
            external_name: spec.external_name.unwrap_or_default(),
            ports,
        })
    }

    /// The ServicePort whose `port` is `port` (found by number, as both
    /// kube-apiserver's and Karmada's `findServicePort` do).
    pub fn port(&self, port: u16) -> Option<&ServicePort> {
        self.ports.iter().find(|p| p.port == i64::from(port))
    }
}

impl EndpointSlice {
    /// Reads an EndpointSlice from its JSON.
    pub fn from_json(bytes: &[u8]) -> Result<EndpointSlice> {
        let raw: EndpointSliceJson =
            serde_json::from_slice(bytes).map_err(|source| Error::InvalidObject { kind: "EndpointSlice", source })?;
        let meta = raw.metadata.unwrap_or_default();
        let name = meta.name.filter(|n| !n.is_empty()).ok_or(Error::MissingName { kind: "EndpointSlice" })?;
        let service_name = meta.labels.and_then(|mut l| l.remove(SERVICE_NAME_LABEL));
        Ok(EndpointSlice {
            namespace: meta.namespace.unwrap_or_default(),
            name,
            service_name,
            address_type: raw.address_type.unwrap_or_default(),
            ports: raw
                .ports
                .unwrap_or_default()
                .into_iter()
                .map(|p| SlicePort { name: p.name.unwrap_or_default(), port: p.port })
                .collect(),
            endpoints: raw
                .endpoints
                .unwrap_or_default()
                .into_iter()
                .map(|e| {
                    let c = e.conditions.unwrap_or_default();
                    Endpoint {
                        addresses: e.addresses.unwrap_or_default(),
                        ready: c.ready,
                        serving: c.serving,
                        terminating: c.terminating,
                    }
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_parse_leniently_and_names_are_required() {
        assert!(matches!(Service::from_json(b"{\"metadata\":{}}"), Err(Error::MissingName { kind: "Service" })));
        assert!(matches!(Service::from_json(b"[1]"), Err(Error::InvalidObject { .. })));
        let s = Service::from_json(br#"{"metadata":{"name":"a","namespace":"n"},"spec":{"ports":null,"clusterIPs":null}}"#).unwrap();
        assert_eq!((s.service_type.as_str(), s.ports.len()), ("", 0));
        let e = EndpointSlice::from_json(br#"{"metadata":{"name":"s"},"endpoints":null,"ports":[{"port":null}]}"#).unwrap();
        assert_eq!(e.ports, vec![SlicePort { name: String::new(), port: None }]);
        assert_eq!(e.service_name, None);
    }
}
