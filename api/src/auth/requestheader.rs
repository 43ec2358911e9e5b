//! Front-proxy authentication (`--requestheader-*`), as kube-apiserver and
//! aggregated API servers authenticate requests relayed by a front proxy
//! (kube-apiserver's aggregator, karmada-apiserver): on a connection whose
//! client certificate chains to `--requestheader-client-ca-file` and whose
//! CN is one of `--requestheader-allowed-names` (any CN when the list is
//! empty), the user is the first non-empty `--requestheader-username-headers`
//! header (default `X-Remote-User`), its groups every
//! `--requestheader-group-headers` value (default `X-Remote-Group`), its
//! extra attributes the headers under `--requestheader-extra-headers-prefix`
//! (default `X-Remote-Extra-`; key lowercased and percent-decoded). The
//! headers are trusted on no other connection. A front proxy's certificate
//! with a CN not allowed is 401; one without a user header falls through to
//! the other authenticators.

use std::sync::Arc;

use actix_web::http::header::HeaderMap;
use rustls::pki_types::UnixTime;
use rustls::server::danger::ClientCertVerifier;

use super::authn::User;
use super::connection::PeerCertificate;
use super::{AuthConfig, Error, Result};

/// Extra attributes: key and values.
pub type Extra = Vec<(String, Vec<String>)>;

/// The front-proxy authenticator.
pub struct FrontProxy {
    verifier: Arc<dyn ClientCertVerifier>,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_prefixes: Vec<String>,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontProxy").field("allowed_names", &self.allowed_names).field("username_headers", &self.username_headers).finish_non_exhaustive()
    }
}

/// What the front-proxy authenticator makes of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum FrontProxied {
    /// Not from a front proxy, or no user header: other authenticators decide.
    No,
    /// The user the front proxy names.
    User(User, Extra),
    /// A front proxy's certificate whose CN is not allowed: 401.
    NameNotAllowed,
}

impl FrontProxy {
    /// The authenticator of `config`, `None` without a request-header CA.
    pub fn from_config(config: &AuthConfig) -> Result<Option<FrontProxy>> {
        let Some(path) = &config.requestheader_client_ca_file else { return Ok(None) };
        let verifier = crate::tls::client_verifier(path).map_err(|e| Error::RequestHeaderCa { path: path.clone(), reason: e.to_string() })?;
        let lower = |names: &[String]| names.iter().map(|n| n.to_ascii_lowercase()).collect();
        Ok(Some(FrontProxy {
            verifier,
            allowed_names: config.requestheader_allowed_names.clone(),
            username_headers: lower(&config.requestheader_username_headers),
            group_headers: lower(&config.requestheader_group_headers),
            extra_prefixes: lower(&config.requestheader_extra_headers_prefix),
        }))
    }

    /// Whether `certificate` chains to the request-header CA.
    pub fn signed(&self, certificate: &PeerCertificate) -> bool {
        self.verifier.verify_client_cert(&certificate.der, &certificate.intermediates, UnixTime::now()).is_ok()
    }

    /// The user a request names, if its connection is a front proxy's.
    pub fn authenticate(&self, certificate: Option<&PeerCertificate>, headers: &HeaderMap) -> FrontProxied {
        let Some(certificate) = certificate.filter(|c| self.signed(c)) else { return FrontProxied::No };
        let text = |name: &str| headers.get_all(name).filter_map(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect::<Vec<_>>();
        let Some(name) = self.username_headers.iter().find_map(|h| text(h).into_iter().next()) else { return FrontProxied::No };
        let cn = certificate.common_name.as_deref().unwrap_or_default();
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == cn) {
            return FrontProxied::NameNotAllowed;
        }
        let groups = self.group_headers.iter().flat_map(|h| text(h)).collect();
        let mut extra: Extra = Vec::new();
        for (header, value) in headers {
            let Some(key) = self.extra_prefixes.iter().find_map(|p| header.as_str().strip_prefix(p.as_str())) else { continue };
            let Some(key) = percent_decode(key).map(|k| k.to_lowercase()) else { continue };
            let Ok(value) = value.to_str() else { continue };
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(value.to_string()),
                None => extra.push((key, vec![value.to_string()])),
            }
        }
        extra.sort();
        FrontProxied::User(User::authenticated(name, String::new(), groups), extra)
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
