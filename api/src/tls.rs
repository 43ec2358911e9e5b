//! The HTTPS listener's rustls configuration: the serving certificate from
//! PEM files (`--tls-cert-file`, `--tls-private-key-file`), reloaded when the
//! files change on disk, and optional client-certificate verification against
//! `--client-ca-file` (clients without a certificate may still use tokens).
//!
//! Only the ring crypto provider is used (as kube is built; aws-lc needs cmake).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use serde::Deserialize;
use tracing::{error, info};

/// TLS settings of the API listener (`tls:` in the config file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsConfig {
    /// PEM file of the serving certificate, leaf first, then intermediates
    /// (`--tls-cert-file`). Reloaded when it changes.
    pub cert_file: PathBuf,
    /// PEM file of its private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC)
    /// (`--tls-private-key-file`). Reloaded when it changes.
    pub key_file: PathBuf,
    /// PEM bundle of the CAs that sign client certificates
    /// (`--client-ca-file`). When set, clients may present a certificate,
    /// which must chain to one of these CAs or the handshake fails; clients
    /// without one are still served (and authenticate with a token).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// PEM bundle of the CAs that sign front proxies' client certificates
    /// (`--requestheader-client-ca-file`): also accepted in the handshake;
    /// authentication then decides what such a certificate may do
    /// ([`crate::auth::AuthConfig::requestheader_client_ca_file`]).
    #[serde(default)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Seconds between checks of the certificate and key files' modification
    /// times (checked on a handshake); 0 checks on every handshake.
    #[serde(default = "default_reload_check_seconds")]
    pub reload_check_seconds: u64,
    /// Seconds a new connection has to complete its TLS handshake; one that
    /// has not (a client that connects and sends nothing) is closed.
    #[serde(default = "default_handshake_timeout_seconds")]
    pub handshake_timeout_seconds: u64,
    /// TLS handshakes pending at once, at most (shared evenly by the HTTP
    /// workers). Past it, new connections wait in the listen queue until a
    /// pending handshake completes or times out; established connections
    /// are served meanwhile. Each pending handshake holds a descriptor and
    /// a few KiB.
    #[serde(default = "default_max_pending_handshakes")]
    pub max_pending_handshakes: usize,
}

/// 5 seconds.
pub fn default_reload_check_seconds() -> u64 {
    5
}

/// 10 seconds (Go's `http.Transport` gives a client's handshake as long).
pub fn default_handshake_timeout_seconds() -> u64 {
    10
}

/// 4,096 handshakes.
pub fn default_max_pending_handshakes() -> usize {
    4096
}

impl TlsConfig {
    /// Certificate and key files, default reload period, no client CA.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
            requestheader_client_ca_file: None,
            reload_check_seconds: default_reload_check_seconds(),
            handshake_timeout_seconds: default_handshake_timeout_seconds(),
            max_pending_handshakes: default_max_pending_handshakes(),
        }
    }
}

/// What can go wrong building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read {what} {path}")]
    FileUnreadable {
        /// Which file it is (`certificate file`, `private key file`, `client CA file`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM block of the expected type.
    #[error("{what} {path} holds no valid PEM {expected}")]
    PemInvalid {
        /// Which file it is.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM type wanted.
        expected: &'static str,
        /// The parse error, if any.
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// The key is unsupported or does not belong to the certificate.
    #[error("private key {key} does not fit certificate {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found.
        #[source]
        source: rustls::Error,
    },
    /// A CA certificate of the client CA file was refused.
    #[error("client CA file {path} holds an unusable certificate")]
    ClientCaInvalid {
        /// The file.
        path: PathBuf,
        /// What rustls found.
        #[source]
        source: rustls::Error,
    },
    /// The client certificate verifier could not be built.
    #[error("cannot build the client certificate verifier from {path}")]
    VerifierFailed {
        /// The client CA file.
        path: PathBuf,
        /// What rustls found.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// The provider supports none of the default protocol versions.
    #[error("cannot configure TLS protocol versions")]
    ProtocolVersionsFailed(#[source] rustls::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The crypto provider of the listener: ring.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration for the API listener: the certificate of
/// `cfg` (reloaded on change), client certificates verified against
/// `cfg.client_ca_file` when set (optional for clients). Bind it with
/// `HttpServer::bind_rustls_0_23(addr, config)`.
pub fn server_config(cfg: &TlsConfig) -> Result<ServerConfig> {
    let provider = provider();
    let resolver = ReloadingCertResolver::new(
        &cfg.cert_file,
        &cfg.key_file,
        provider.clone(),
        Duration::from_secs(cfg.reload_check_seconds),
    )?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::ProtocolVersionsFailed)?;
    let ca_files: Vec<&PathBuf> = cfg.client_ca_file.iter().chain(cfg.requestheader_client_ca_file.iter()).collect();
    let builder = match ca_files.first() {
        Some(first) => {
            let mut roots = RootCertStore::empty();
            for path in &ca_files {
                roots.roots.extend(read_client_cas(path)?.roots);
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|source| Error::VerifierFailed { path: (*first).clone(), source })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    info!(
        cert_file = %cfg.cert_file.display(),
        client_ca_file = cfg.client_ca_file.as_ref().map(|p| p.display().to_string()),
        "TLS configured."
    );
    Ok(builder.with_cert_resolver(Arc::new(resolver)))
}

/// A verifier of client certificates signed by the CAs of `path` alone:
/// which of several trusted CAs signed a connection's certificate.
pub fn client_verifier(path: &Path) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let roots = read_client_cas(path)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build().map_err(|source| Error::VerifierFailed { path: path.to_path_buf(), source })
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::FileUnreadable { what, path: path.to_path_buf(), source })
}

fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read(what, path)?;
    let invalid = |source| Error::PemInvalid { what, path: path.to_path_buf(), expected: "CERTIFICATE", source };
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| invalid(Some(e)))?;
    if certs.is_empty() {
        return Err(invalid(None));
    }
    Ok(certs)
}

fn read_client_cas(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates("client CA file", path)? {
        roots.add(cert).map_err(|source| Error::ClientCaInvalid { path: path.to_path_buf(), source })?;
    }
    Ok(roots)
}

/// Reads and checks a certificate chain and its key.
fn load_certified_key(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<CertifiedKey> {
    let chain = read_certificates("certificate file", cert_file)?;
    let pem = read("private key file", key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| Error::PemInvalid {
        what: "private key file",
        path: key_file.to_path_buf(),
        expected: "PRIVATE KEY",
        source: Some(e),
    })?;
    // `from_der` also checks that the key belongs to the leaf certificate.
    CertifiedKey::from_der(chain, key, provider).map_err(|source| Error::KeyMismatch {
        cert: cert_file.to_path_buf(),
        key: key_file.to_path_buf(),
        source,
    })
}

/// Modification time and length of the certificate and key files; a change
/// of either means a reload. Files that cannot be read stat as `None`.
type FileStamp = [Option<(SystemTime, u64)>; 2];

fn stamp(cert_file: &Path, key_file: &Path) -> FileStamp {
    let one = |p: &Path| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
    [one(cert_file), one(key_file)]
}

/// Serves the certificate of a cert and key file pair, reloading it when the
/// files change (checked at most every `check_interval`, during a handshake).
/// A new pair that does not load (a half-written file, a key of another
/// certificate) is logged and the previous certificate stays in use; it is
/// retried when the files change again.
#[derive(Debug)]
pub struct ReloadingCertResolver {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    check_interval: Duration,
    state: Mutex<ReloadState>,
}

#[derive(Debug)]
struct ReloadState {
    current: Arc<CertifiedKey>,
    stamp: FileStamp,
    checked: Instant,
}

impl ReloadingCertResolver {
    /// Loads the pair now; an error when it does not load.
    pub fn new(cert_file: &Path, key_file: &Path, provider: Arc<CryptoProvider>, check_interval: Duration) -> Result<Self> {
        let stamp = stamp(cert_file, key_file);
        let current = Arc::new(load_certified_key(cert_file, key_file, &provider)?);
        Ok(ReloadingCertResolver {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            check_interval,
            state: Mutex::new(ReloadState { current, stamp, checked: Instant::now() }),
        })
    }

    /// The certificate to serve, reloaded first if the files changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= self.check_interval {
            state.checked = Instant::now();
            let now = stamp(&self.cert_file, &self.key_file);
            if now != state.stamp {
                state.stamp = now;
                match load_certified_key(&self.cert_file, &self.key_file, &self.provider) {
                    Ok(key) => {
                        state.current = Arc::new(key);
                        info!(cert_file = %self.cert_file.display(), "Serving certificate reloaded.");
                    }
                    Err(e) => error!(
                        cert_file = %self.cert_file.display(),
                        key_file = %self.key_file.display(),
                        error = %DisplayChain(&e),
                        "Serving certificate changed on disk but does not load; still serving the previous one."
                    ),
                }
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// An error with its sources, `a: b: c`.
struct DisplayChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for DisplayChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pair {
        cert_pem: String,
        key_pem: String,
        der: Vec<u8>,
    }

    fn self_signed(name: &str) -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
        Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }

    fn write(dir: &Path, pair: &Pair) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, &pair.cert_pem).unwrap();
        std::fs::write(&k, &pair.key_pem).unwrap();
        (c, k)
    }

    fn served(r: &ReloadingCertResolver) -> Vec<u8> {
        r.current().cert[0].to_vec()
    }

    #[test]
    fn reloads_changed_files_and_keeps_the_old_cert_when_the_new_one_is_bad() {
        let dir = tempfile::tempdir().unwrap();
        let a = self_signed("a.example");
        let (cert, key) = write(dir.path(), &a);
        let r = ReloadingCertResolver::new(&cert, &key, provider(), Duration::ZERO).unwrap();
        assert_eq!(served(&r), a.der);

        let b = self_signed("b.example.with.a.longer.name");
        write(dir.path(), &b);
        assert_eq!(served(&r), b.der);

        // The certificate rewritten without its key: the pair does not match.
        let c = self_signed("c.example");
        std::fs::write(&cert, &c.cert_pem).unwrap();
        assert_eq!(served(&r), b.der);
        std::fs::write(&key, &c.key_pem).unwrap();
        assert_eq!(served(&r), c.der);

        std::fs::write(&cert, "garbage").unwrap();
        assert_eq!(served(&r), c.der);
        std::fs::remove_file(&key).unwrap();
        assert_eq!(served(&r), c.der);
    }

    #[test]
    fn checks_at_most_every_interval() {
        let dir = tempfile::tempdir().unwrap();
        let a = self_signed("a.example");
        let (cert, key) = write(dir.path(), &a);
        let r = ReloadingCertResolver::new(&cert, &key, provider(), Duration::from_secs(3600)).unwrap();
        write(dir.path(), &self_signed("b.example.with.a.longer.name"));
        assert_eq!(served(&r), a.der);
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = self_signed("a.example");
        let (cert, key) = write(dir.path(), &a);
        let missing = TlsConfig::new(dir.path().join("none.crt"), &key);
        let e = server_config(&missing).unwrap_err();
        assert!(e.to_string().contains("none.crt"), "{e}");
        std::fs::write(dir.path().join("empty.crt"), "").unwrap();
        let e = server_config(&TlsConfig::new(dir.path().join("empty.crt"), &key)).unwrap_err();
        assert!(e.to_string().contains("no valid PEM CERTIFICATE"), "{e}");
        let other = self_signed("b.example");
        std::fs::write(dir.path().join("other.key"), &other.key_pem).unwrap();
        let e = server_config(&TlsConfig::new(&cert, dir.path().join("other.key"))).unwrap_err();
        assert!(matches!(e, Error::KeyMismatch { .. }), "{e}");
        let mut with_ca = TlsConfig::new(&cert, &key);
        with_ca.client_ca_file = Some(key.clone());
        let e = server_config(&with_ca).unwrap_err();
        assert!(e.to_string().contains("client CA file"), "{e}");
        with_ca.client_ca_file = Some(cert.clone());
        server_config(&with_ca).unwrap();
    }

    #[test]
    fn config_parses_with_defaults() {
        let c: TlsConfig = serde_saphyr::from_str("{certFile: /a.crt, keyFile: /a.key}").unwrap();
        assert_eq!(c, TlsConfig::new("/a.crt", "/a.key"));
        assert_eq!((c.handshake_timeout_seconds, c.max_pending_handshakes), (10, 4096));
        let c: TlsConfig = serde_saphyr::from_str("{certFile: /a.crt, keyFile: /a.key, handshakeTimeoutSeconds: 3, maxPendingHandshakes: 64}").unwrap();
        assert_eq!((c.handshake_timeout_seconds, c.max_pending_handshakes), (3, 64));
        assert!(serde_saphyr::from_str::<TlsConfig>("{certFile: /a.crt}").is_err());
        assert!(serde_saphyr::from_str::<TlsConfig>("{certFile: /a, keyFile: /b, caFile: /c}").is_err());
    }
}
