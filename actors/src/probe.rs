//! Probes of scheduler-estimator endpoints: a TCP connect, or a TLS handshake
//! when estimator TLS is configured, each bounded by the configured timeout.
//!
//! The karmada-scheduler-estimator serves gRPC; a TLS probe offers ALPN `h2`
//! as gRPC clients do (grpc-go servers refuse TLS handshakes without it), and
//! verifies the estimator's certificate against the configured CA, so a wrong
//! CA is reported as a TLS failure rather than as reachable.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

use crate::resolver::EstimatorTls;

/// Errors of setting up TLS for the probes.
#[derive(Debug, Error)]
pub enum Error {
    /// The CA file could not be read or holds no certificate.
    #[error("estimator tls: cannot read caFile {path}: {reason}")]
    ReadCaFailed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The client certificate could not be read.
    #[error("estimator tls: cannot read certFile {path}: {reason}")]
    ReadCertFailed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The client key could not be read.
    #[error("estimator tls: cannot read keyFile {path}: {reason}")]
    ReadKeyFailed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The settings do not make a TLS client.
    #[error("estimator tls: {0}")]
    InvalidSettings(String),
    /// rustls refused the settings.
    #[error("estimator tls: {0}")]
    ClientConfigFailed(#[source] rustls::Error),
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a probe failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProbeFailure {
    /// The host name did not resolve.
    Resolve,
    /// The TCP connection failed (refused, unreachable).
    Connect,
    /// No answer within the timeout.
    Timeout,
    /// TCP connected, the TLS handshake failed (unknown CA, wrong name ...).
    Tls,
    /// Not probed: DNS names are not probed (`probeDnsNames: false`).
    Skipped,
}

/// The outcome of the last probe of an estimator endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// Whether an address accepted a connection (and completed the TLS
    /// handshake when TLS is configured).
    pub reachable: bool,
    /// The address that answered, or the first one tried when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Connect (and handshake) time of the address that answered, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// Why no address answered (each address tried, with its error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kind of failure of the first address tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ProbeFailure>,
    /// When the probe finished (RFC 3339).
    pub time: String,
}

impl Probe {
    /// Whether two probes say the same thing (reachability, address, error),
    /// ignoring when they ran and how long they took.
    pub fn same_outcome(&self, other: &Probe) -> bool {
        self.reachable == other.reachable
            && self.address == other.address
            && self.error == other.error
            && self.failure == other.failure
    }

    /// Whether the probe counts as a failure (skipped probes do not).
    pub fn failed(&self) -> bool {
        !self.reachable && self.failure != Some(ProbeFailure::Skipped)
    }
}

/// How endpoints are probed.
#[derive(Clone)]
pub struct Prober {
    timeout: Duration,
    probe_dns_names: bool,
    tls: Option<TlsProbe>,
    /// Probes that run at once: each DNS name is resolved on a blocking
    /// thread (getaddrinfo), so a thousand members probed together would
    /// take the runtime's 512 blocking threads.
    running: Arc<tokio::sync::Semaphore>,
}

/// Probes that run at once (all clones of one [`Prober`] together).
pub const CONCURRENT_PROBES: usize = 16;

#[derive(Clone)]
struct TlsProbe {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober")
            .field("timeout", &self.timeout)
            .field("probe_dns_names", &self.probe_dns_names)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Accepts any server certificate (`insecureSkipVerify`), still checking
/// that the handshake signatures are valid.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn read_certs(path: &Path) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".into());
    }
    Ok(certs)
}

/// Builds the rustls client configuration of the estimator TLS settings.
pub fn client_config(tls: &EstimatorTls) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::ClientConfigFailed)?;
    let builder = if tls.insecure_skip_verify {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    } else {
        let Some(ca_file) = &tls.ca_file else {
            return Err(Error::InvalidSettings("set caFile, or insecureSkipVerify: true".into()));
        };
        let mut roots = RootCertStore::empty();
        let certs = read_certs(ca_file).map_err(|reason| Error::ReadCaFailed { path: ca_file.clone(), reason })?;
        for cert in certs {
            roots.add(cert).map_err(|e| Error::ReadCaFailed { path: ca_file.clone(), reason: e.to_string() })?;
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let certs =
                read_certs(cert_file).map_err(|reason| Error::ReadCertFailed { path: cert_file.clone(), reason })?;
            let key = PrivateKeyDer::from_pem_file(key_file)
                .map_err(|e| Error::ReadKeyFailed { path: key_file.clone(), reason: e.to_string() })?;
            builder.with_client_auth_cert(certs, key).map_err(Error::ClientConfigFailed)?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(Error::InvalidSettings("certFile and keyFile go together".into())),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Splits `host:port` (`[v6]:port` for IPv6).
pub fn split_host_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then_some((host, port))
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl Prober {
    /// A prober with `timeout` per address; DNS names are resolved and probed
    /// only when `probe_dns_names`; a TLS handshake when `tls` is set.
    pub fn new(timeout: Duration, probe_dns_names: bool, tls: Option<&EstimatorTls>) -> Result<Prober> {
        let tls = match tls {
            None => None,
            Some(settings) => {
                let config = client_config(settings)?;
                let server_name = match &settings.server_name {
                    None => None,
                    Some(name) => Some(
                        ServerName::try_from(name.clone())
                            .map_err(|e| Error::InvalidSettings(format!("serverName {name:?}: {e}")))?,
                    ),
                };
                Some(TlsProbe { connector: TlsConnector::from(Arc::new(config)), server_name })
            }
        };
        Ok(Prober { timeout, probe_dns_names, tls, running: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_PROBES)) })
    }

    /// The timeout of one address.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Probes `addresses` in order until one answers. `None` when there is
    /// no address to probe.
    pub async fn probe(&self, addresses: &[String]) -> Option<Probe> {
        let first = addresses.first()?.clone();
        // Never closed: this only ends with a permit.
        let _turn = self.running.acquire().await.ok();
        let mut errors = Vec::new();
        let mut first_failure = None;
        let mut all_skipped = true;
        for address in addresses {
            match self.probe_address(address).await {
                Ok(latency) => {
                    return Some(Probe {
                        reachable: true,
                        address: Some(address.clone()),
                        latency_ms: Some(latency.as_secs_f64() * 1000.0),
                        error: None,
                        failure: None,
                        time: now_rfc3339(),
                    })
                }
                Err((failure, error)) => {
                    first_failure.get_or_insert(failure);
                    all_skipped &= failure == ProbeFailure::Skipped;
                    errors.push(if failure == ProbeFailure::Skipped { error } else { format!("{address}: {error}") });
                }
            }
        }
        if all_skipped {
            errors.dedup();
        }
        Some(Probe {
            reachable: false,
            address: Some(first),
            latency_ms: None,
            error: Some(errors.join("; ")),
            failure: first_failure,
            time: now_rfc3339(),
        })
    }

    /// Probes one `host:port`: the connect (and handshake) time, or why it failed.
    pub async fn probe_address(&self, address: &str) -> std::result::Result<Duration, (ProbeFailure, String)> {
        let Some((host, port)) = split_host_port(address) else {
            return Err((ProbeFailure::Resolve, format!("{address:?} is not host:port")));
        };
        let ip = host.parse::<IpAddr>().ok();
        if ip.is_none() && !self.probe_dns_names {
            return Err((ProbeFailure::Skipped, "not probed: DNS names are not probed (probeDnsNames: false)".into()));
        }
        let started = Instant::now();
        let attempt = async {
            let stream = match ip {
                Some(ip) => TcpStream::connect(SocketAddr::new(ip, port)).await.map_err(|e| (ProbeFailure::Connect, e.to_string()))?,
                None => {
                    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
                        .await
                        .map_err(|e| (ProbeFailure::Resolve, format!("cannot resolve {host}: {e}")))?
                        .collect();
                    if resolved.is_empty() {
                        return Err((ProbeFailure::Resolve, format!("{host} has no address")));
                    }
                    TcpStream::connect(&resolved[..]).await.map_err(|e| (ProbeFailure::Connect, e.to_string()))?
                }
            };
            if let Some(tls) = &self.tls {
                let name = match &tls.server_name {
                    Some(name) => name.clone(),
                    None => ServerName::try_from(host.to_string())
                        .map_err(|e| (ProbeFailure::Tls, format!("TLS server name {host:?}: {e}")))?,
                };
                tls.connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| (ProbeFailure::Tls, format!("TLS handshake failed: {e}")))?;
            }
            Ok(())
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(())) => Ok(started.elapsed()),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                let stage = if self.tls.is_some() { "connect and TLS handshake" } else { "connect" };
                Err((ProbeFailure::Timeout, format!("{stage} timed out after {}", format_duration(self.timeout))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn plain(timeout_ms: u64) -> Prober {
        Prober::new(Duration::from_millis(timeout_ms), false, None).unwrap()
    }

    /// A loopback port with nothing listening.
    async fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        port
    }

    #[test]
    fn host_ports_split() {
        assert_eq!(split_host_port("127.0.0.1:80"), Some(("127.0.0.1", 80)));
        assert_eq!(split_host_port("[::1]:10352"), Some(("::1", 10352)));
        assert_eq!(split_host_port("a.b.svc:10352"), Some(("a.b.svc", 10352)));
        assert_eq!(split_host_port("::1:80"), None);
        assert_eq!(split_host_port("host"), None);
        assert_eq!(split_host_port("host:0"), None);
        assert_eq!(split_host_port(":80"), None);
    }

    #[tokio::test]
    async fn a_listening_stand_in_is_reachable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let probe = plain(3000).probe(std::slice::from_ref(&address)).await.unwrap();
        assert!(probe.reachable, "{probe:?}");
        assert_eq!(probe.address.as_deref(), Some(address.as_str()));
        assert!(probe.latency_ms.unwrap() < 3000.0);
        assert_eq!((probe.error, probe.failure), (None, None));
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_within_the_timeout() {
        let address = format!("127.0.0.1:{}", closed_port().await);
        let started = Instant::now();
        let probe = plain(2000).probe(std::slice::from_ref(&address)).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(!probe.reachable);
        assert_eq!(probe.failure, Some(ProbeFailure::Connect));
        assert!(probe.error.as_deref().unwrap().starts_with(&format!("{address}: ")), "{probe:?}");
        assert!(probe.failed());
    }

    #[tokio::test]
    async fn later_addresses_are_tried_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let good = listener.local_addr().unwrap().to_string();
        let bad = format!("127.0.0.1:{}", closed_port().await);
        let probe = plain(2000).probe(&[bad, good.clone()]).await.unwrap();
        assert!(probe.reachable);
        assert_eq!(probe.address, Some(good));
        assert_eq!(plain(2000).probe(&[]).await, None);
    }

    #[tokio::test]
    async fn dns_names_are_skipped_when_not_allowed() {
        let names = ["a.karmada-system.svc.cluster.local:10352".to_string(), "a.karmada-system.svc:10352".to_string()];
        let probe = plain(1000).probe(&names).await.unwrap();
        assert!(!probe.reachable);
        assert_eq!(probe.failure, Some(ProbeFailure::Skipped));
        assert_eq!(probe.error.as_deref(), Some("not probed: DNS names are not probed (probeDnsNames: false)"));
        assert!(!probe.failed());
    }

    #[tokio::test]
    async fn localhost_resolves_when_dns_names_are_probed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // /etc/hosts answers for localhost; no DNS server is asked.
        let prober = Prober::new(Duration::from_secs(2), true, None).unwrap();
        let probe = prober.probe(&[format!("localhost:{port}")]).await.unwrap();
        assert!(probe.reachable, "{probe:?}");
    }

    struct Pki {
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
    }

    fn pki(ca_name: &str) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, ca_name);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        Pki { ca_pem: ca.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// A TLS estimator stand-in on loopback serving `pki`'s certificate.
    async fn tls_server(pki: &Pki) -> String {
        let certs = CertificateDer::pem_slice_iter(pki.cert_pem.as_bytes()).collect::<std::result::Result<Vec<_>, _>>().unwrap();
        let key = PrivateKeyDer::from_pem_slice(pki.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(socket).await;
                });
            }
        });
        address
    }

    fn tls_settings(dir: &Path, ca_pem: &str) -> EstimatorTls {
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap();
        EstimatorTls { ca_file: Some(ca_file), ..EstimatorTls::default() }
    }

    #[tokio::test]
    async fn tls_with_the_right_ca_is_reachable() {
        let server = pki("estimator CA");
        let address = tls_server(&server).await;
        let dir = tempfile::tempdir().unwrap();
        let prober = Prober::new(Duration::from_secs(3), false, Some(&tls_settings(dir.path(), &server.ca_pem))).unwrap();
        let probe = prober.probe(&[address]).await.unwrap();
        assert!(probe.reachable, "{probe:?}");
    }

    #[tokio::test]
    async fn tls_with_a_wrong_ca_is_a_tls_failure_not_reachable() {
        let server = pki("estimator CA");
        let address = tls_server(&server).await;
        let dir = tempfile::tempdir().unwrap();
        // Another CA (UnknownIssuer), and another CA of the same name (BadSignature).
        for (other, why) in [(pki("another CA"), "UnknownIssuer"), (pki("estimator CA"), "BadSignature")] {
            let prober = Prober::new(Duration::from_secs(3), false, Some(&tls_settings(dir.path(), &other.ca_pem))).unwrap();
            let probe = prober.probe(std::slice::from_ref(&address)).await.unwrap();
            assert!(!probe.reachable, "{probe:?}");
            assert_eq!(probe.failure, Some(ProbeFailure::Tls));
            assert_eq!(probe.error.unwrap(), format!("{address}: TLS handshake failed: invalid peer certificate: {why}"));
        }
        // The same server passes with insecureSkipVerify.
        let insecure = EstimatorTls { insecure_skip_verify: true, ..EstimatorTls::default() };
        let prober = Prober::new(Duration::from_secs(3), false, Some(&insecure)).unwrap();
        assert!(prober.probe(&[address]).await.unwrap().reachable);
    }

    #[tokio::test]
    async fn a_listener_that_never_handshakes_times_out() {
        // Accepts TCP and then says nothing: the TLS handshake never completes.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let held = Arc::new(tokio::sync::Mutex::new(Vec::new()));
        let keep = held.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                keep.lock().await.push(socket);
            }
        });
        let server = pki("estimator CA");
        let dir = tempfile::tempdir().unwrap();
        let prober = Prober::new(Duration::from_millis(300), false, Some(&tls_settings(dir.path(), &server.ca_pem))).unwrap();
        let started = Instant::now();
        let probe = prober.probe(std::slice::from_ref(&address)).await.unwrap();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
        assert!(!probe.reachable);
        assert_eq!(probe.failure, Some(ProbeFailure::Timeout));
        assert_eq!(probe.error.as_deref(), Some(format!("{address}: connect and TLS handshake timed out after 300ms").as_str()));
    }

    #[tokio::test]
    async fn a_listener_with_a_full_queue_times_out_on_connect() {
        // Backlog 0: one connection waits in the accept queue, nothing is
        // accepted, and the kernel drops further SYNs, as a blackholed
        // address does. Nothing leaves loopback.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        while let Ok(stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            queued.push(stream);
            assert!(queued.len() < 16, "the accept queue never filled");
        }
        let address = addr.to_string();
        let started = Instant::now();
        let probe = plain(300).probe(std::slice::from_ref(&address)).await.unwrap();
        let took = started.elapsed();
        println!("connect probe of a full queue gave up after {took:?} ({} connections queued)", queued.len());
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
        assert!(!probe.reachable);
        assert_eq!(probe.failure, Some(ProbeFailure::Timeout));
        assert_eq!(probe.error.as_deref(), Some(format!("{address}: connect timed out after 300ms").as_str()));
        assert!(probe.failed());
    }

    /// A TLS estimator stand-in that requires a client certificate signed
    /// by `client_ca_pem`; reports, per connection, whether the handshake
    /// succeeded with a verified client certificate.
    async fn mutual_tls_server(server: &Pki, client_ca_pem: &str, tls12_only: bool) -> (String, tokio::sync::mpsc::UnboundedReceiver<bool>) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
        let certs = CertificateDer::pem_slice_iter(server.cert_pem.as_bytes()).collect::<std::result::Result<Vec<_>, _>>().unwrap();
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider);
        let builder = if tls12_only { builder.with_protocol_versions(&[&rustls::version::TLS12]) } else { builder.with_safe_default_protocol_versions() };
        let config = builder.unwrap().with_client_cert_verifier(verifier).with_single_cert(certs, key).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let verified = match acceptor.accept(socket).await {
                        Ok(stream) => stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()),
                        Err(_) => false,
                    };
                    let _ = tx.send(verified);
                });
            }
        });
        (address, rx)
    }

    #[tokio::test]
    async fn a_client_certificate_is_presented_to_an_estimator_that_requires_one() {
        let server = pki("estimator CA");
        let client = pki("client CA");
        let dir = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = (dir.path().join("client.pem"), dir.path().join("client-key.pem"));
        std::fs::write(&cert_file, &client.cert_pem).unwrap();
        std::fs::write(&key_file, &client.key_pem).unwrap();
        let with_cert = EstimatorTls { cert_file: Some(cert_file), key_file: Some(key_file), ..tls_settings(dir.path(), &server.ca_pem) };
        let without_cert = tls_settings(dir.path(), &server.ca_pem);

        // TLS 1.3 (the default): the estimator verifies the certificate.
        let (address, mut verified) = mutual_tls_server(&server, &client.ca_pem, false).await;
        let probe = Prober::new(Duration::from_secs(3), false, Some(&with_cert)).unwrap().probe(std::slice::from_ref(&address)).await.unwrap();
        assert!(probe.reachable, "{probe:?}");
        let seen = tokio::time::timeout(Duration::from_secs(3), verified.recv()).await.unwrap();
        assert_eq!(seen, Some(true), "the estimator saw a verified client certificate");

        // TLS 1.2: the estimator refuses the handshake without a client
        // certificate before it finishes, so the probe says TLS failure.
        // (Under TLS 1.3 the client's handshake ends before the server
        // checks the certificate; a connect-and-handshake probe cannot see
        // that refusal.)
        let (address, mut verified) = mutual_tls_server(&server, &client.ca_pem, true).await;
        let probe = Prober::new(Duration::from_secs(3), false, Some(&without_cert)).unwrap().probe(std::slice::from_ref(&address)).await.unwrap();
        assert!(!probe.reachable, "{probe:?}");
        assert_eq!(probe.failure, Some(ProbeFailure::Tls), "{probe:?}");
        assert_eq!(tokio::time::timeout(Duration::from_secs(3), verified.recv()).await.unwrap(), Some(false));
        let probe = Prober::new(Duration::from_secs(3), false, Some(&with_cert)).unwrap().probe(std::slice::from_ref(&address)).await.unwrap();
        assert!(probe.reachable, "{probe:?}");
        assert_eq!(tokio::time::timeout(Duration::from_secs(3), verified.recv()).await.unwrap(), Some(true));
    }

    #[test]
    fn bad_tls_settings_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = EstimatorTls { ca_file: Some(dir.path().join("nope.pem")), ..EstimatorTls::default() };
        assert!(matches!(Prober::new(Duration::from_secs(1), false, Some(&missing)), Err(Error::ReadCaFailed { .. })));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate").unwrap();
        let none = EstimatorTls { ca_file: Some(empty), ..EstimatorTls::default() };
        assert!(matches!(Prober::new(Duration::from_secs(1), false, Some(&none)), Err(Error::ReadCaFailed { .. })));
        assert!(matches!(
            Prober::new(Duration::from_secs(1), false, Some(&EstimatorTls::default())),
            Err(Error::InvalidSettings(_))
        ));
        let server = pki("estimator CA");
        let mut half = tls_settings(dir.path(), &server.ca_pem);
        half.cert_file = Some(dir.path().join("cert.pem"));
        assert!(matches!(Prober::new(Duration::from_secs(1), false, Some(&half)), Err(Error::InvalidSettings(_))));
        let cert_file = dir.path().join("client.pem");
        let key_file = dir.path().join("client-key.pem");
        std::fs::write(&cert_file, &server.cert_pem).unwrap();
        std::fs::write(&key_file, &server.key_pem).unwrap();
        let mut mutual = tls_settings(dir.path(), &server.ca_pem);
        mutual.cert_file = Some(cert_file);
        mutual.key_file = Some(key_file);
        assert!(Prober::new(Duration::from_secs(1), false, Some(&mutual)).is_ok());
    }
}
