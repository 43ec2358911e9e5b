//! The `estimator` section of the configuration and its checks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kubefold_engine::estimator::{self, Lookup};
use serde::{Deserialize, Serialize};

use super::{Error, Result};
use crate::cluster::ClusterSpec;
use crate::probe::Prober;

/// TLS of the estimator connections, mirroring karmada-scheduler's
/// `--scheduler-estimator-ca-file`, `--scheduler-estimator-cert-file`,
/// `--scheduler-estimator-key-file` and `--insecure-skip-estimator-verify`.
/// When this section is present, probes make a TLS handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EstimatorTls {
    /// PEM file of the CA(s) that sign the estimators' serving certificates.
    /// Required unless `insecureSkipVerify` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate presented to the estimators (with `keyFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `certFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Skip verifying the estimators' certificates (handshake still required).
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Name to verify the estimators' certificates against, instead of the
    /// host of each address (useful when ExternalName points at an IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// The `estimator` section of the configuration, mirroring karmada-scheduler's
/// `--scheduler-estimator-*` flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EstimatorConfig {
    /// The control-plane cluster holding the estimator Services (a cluster
    /// entry like the members': `name` and `url` or `kubeconfig`). Without
    /// it, members resolve to static entries or to the cluster DNS names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ClusterSpec>,
    /// Namespace of the estimator Services in the control plane.
    #[serde(default = "default_service_namespace")]
    pub service_namespace: String,
    /// Prefix of the estimator Service names: cluster C's is `{prefix}-{C}`.
    #[serde(default = "default_service_prefix")]
    pub service_prefix: String,
    /// The estimators' port (the ServicePort `port` matched in each Service).
    #[serde(default = "default_port")]
    pub port: u16,
    /// Timeout of each probe of one address: seconds (`3`) or a duration (`"3s"`, `"500ms"`).
    #[serde(default = "default_timeout", with = "duration_text")]
    pub timeout: Duration,
    /// Seconds between probes of every endpoint; 0 disables probing.
    #[serde(default = "default_probe_interval_seconds")]
    pub probe_interval_seconds: u64,
    /// Whether endpoints given as DNS names (the DNS fallback, DNS
    /// externalNames) are resolved and probed. Set false where kubefold's host
    /// must not or cannot query DNS for cluster-internal names; such
    /// endpoints are then reported as not probed.
    #[serde(default = "default_probe_dns_names")]
    pub probe_dns_names: bool,
    /// TLS of the estimator connections; probes make a TLS handshake when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EstimatorTls>,
    /// Static endpoints by cluster (`member1: "10.0.1.2:12345"`, or a bare
    /// host that gets `port`); they override every Service.
    #[serde(default, rename = "static")]
    pub static_endpoints: BTreeMap<String, String>,
}

/// `karmada-system`, Karmada's default.
pub fn default_service_namespace() -> String {
    "karmada-system".into()
}

/// `karmada-scheduler-estimator`, Karmada's default.
pub fn default_service_prefix() -> String {
    "karmada-scheduler-estimator".into()
}

/// 10352, Karmada's default estimator port.
pub fn default_port() -> u16 {
    10352
}

/// 3 s, Karmada's default `--scheduler-estimator-timeout`.
pub fn default_timeout() -> Duration {
    Duration::from_secs(3)
}

/// 10 s.
pub fn default_probe_interval_seconds() -> u64 {
    10
}

/// true.
pub fn default_probe_dns_names() -> bool {
    true
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            control_plane: None,
            service_namespace: default_service_namespace(),
            service_prefix: default_service_prefix(),
            port: default_port(),
            timeout: default_timeout(),
            probe_interval_seconds: default_probe_interval_seconds(),
            probe_dns_names: default_probe_dns_names(),
            tls: None,
            static_endpoints: BTreeMap::new(),
        }
    }
}

/// `timeout` as seconds or a duration string; written back as a string.
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Seconds(f64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", value.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        match Text::deserialize(deserializer)? {
            Text::Seconds(s) => Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom),
            Text::Text(t) => kubefold_engine::estimator::parse_duration(&t).map_err(serde::de::Error::custom),
        }
    }
}

impl EstimatorConfig {
    /// Checks what serde cannot (files are read later, by [`EstimatorConfig::prober`]).
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::InvalidConfig(m));
        if self.port == 0 {
            return invalid("port must be between 1 and 65535".into());
        }
        if self.timeout.is_zero() {
            return invalid("timeout must be positive".into());
        }
        if self.service_namespace.is_empty() || self.service_prefix.is_empty() {
            return invalid("serviceNamespace and servicePrefix must not be empty".into());
        }
        if let Some(cp) = &self.control_plane {
            if let Err(e) = cp.check_target() {
                return invalid(format!("controlPlane: {e}"));
            }
        }
        for (cluster, value) in &self.static_endpoints {
            if let Err(e) = estimator::normalize_static(value, self.port) {
                return invalid(format!("static.{cluster}: {e}"));
            }
        }
        if let Some(tls) = &self.tls {
            if tls.ca_file.is_none() && !tls.insecure_skip_verify {
                return invalid("tls: set caFile, or insecureSkipVerify: true".into());
            }
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return invalid("tls: certFile and keyFile go together".into());
            }
        }
        Ok(())
    }

    /// The engine's view of the Service lookup settings.
    pub fn lookup(&self) -> Lookup {
        Lookup {
            namespace: self.service_namespace.clone(),
            prefix: self.service_prefix.clone(),
            port: self.port,
            static_endpoints: self.static_endpoints.clone(),
        }
    }

    /// The prober of these settings (reads the TLS files).
    pub fn prober(&self) -> Result<Prober> {
        Ok(Prober::new(self.timeout, self.probe_dns_names, self.tls.as_ref())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_forms_parse() {
        let c: EstimatorConfig = serde_saphyr::from_str("{}").unwrap();
        assert_eq!(c, EstimatorConfig::default());
        assert_eq!((c.service_namespace.as_str(), c.service_prefix.as_str(), c.port), ("karmada-system", "karmada-scheduler-estimator", 10352));
        assert_eq!((c.timeout, c.probe_interval_seconds, c.probe_dns_names), (Duration::from_secs(3), 10, true));
        let full = r#"
controlPlane: {name: karmada, url: "http://127.0.0.1:6443"}
serviceNamespace: estimators
servicePrefix: est
port: 7000
timeout: 500ms
probeIntervalSeconds: 5
probeDnsNames: false
tls: {caFile: /etc/ca.pem, certFile: /etc/c.pem, keyFile: /etc/k.pem, serverName: estimator}
static: {member1: "10.0.1.2:12345"}
"#;
        let c: EstimatorConfig = serde_saphyr::from_str(full).unwrap();
        c.validate().unwrap();
        assert_eq!(c.timeout, Duration::from_millis(500));
        assert_eq!(c.lookup().service_name("m"), "est-m");
        assert_eq!(c.static_endpoints["member1"], "10.0.1.2:12345");
        assert_eq!(serde_saphyr::from_str::<EstimatorConfig>("timeout: 2").unwrap().timeout, Duration::from_secs(2));
        assert_eq!(serde_saphyr::from_str::<EstimatorConfig>("timeout: 1.5").unwrap().timeout, Duration::from_millis(1500));
        assert!(serde_saphyr::from_str::<EstimatorConfig>("timeout: soon").is_err());
        assert!(serde_saphyr::from_str::<EstimatorConfig>("prot: 1").is_err());
        assert!(serde_saphyr::from_str::<EstimatorConfig>("tls: {caFiles: x}").is_err());
        let round: EstimatorConfig = serde_saphyr::from_str(&serde_saphyr::to_string(&c).unwrap()).unwrap();
        assert_eq!(round, c);
    }

    #[test]
    fn invalid_configs_are_refused() {
        let bad = [
            "port: 0",
            "timeout: 0",
            "serviceNamespace: ''",
            "controlPlane: {name: karmada}",
            "static: {member1: 'host:http'}",
            "tls: {}",
            "tls: {insecureSkipVerify: true, certFile: /c.pem}",
        ];
        for text in bad {
            let c: EstimatorConfig = serde_saphyr::from_str(text).unwrap();
            assert!(matches!(c.validate(), Err(Error::InvalidConfig(_))), "{text} should be refused");
        }
    }

}
