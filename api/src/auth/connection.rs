//! The connection hook of the HTTPS listener: the client certificate the
//! TLS handshake verified (against `--client-ca-file`), kept with the
//! connection for authentication ([`super::authn`]) to read on each request.

use std::any::Any;

use actix_web::dev::Extensions;
use rustls::pki_types::CertificateDer;
use tracing::warn;

/// The client certificate of a TLS connection, verified by the listener
/// (rustls, against `--client-ca-file`) during the handshake. Stored in the
/// connection data by [`on_connect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The leaf certificate, DER.
    pub der: CertificateDer<'static>,
    /// The intermediates the client sent after it.
    pub intermediates: Vec<CertificateDer<'static>>,
    /// The subject's first CommonName, if any and if valid text.
    pub common_name: Option<String>,
    /// The subject's Organization values.
    pub organizations: Vec<String>,
}

impl PeerCertificate {
    /// Reads the subject of `der`; `None` when it is not an X.509 certificate.
    pub fn from_der(der: CertificateDer<'static>) -> Option<PeerCertificate> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        let subject = cert.subject();
        let common_name = subject.iter_common_name().find_map(|a| a.as_str().ok()).map(str::to_string);
        let organizations = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(str::to_string).collect();
        Some(PeerCertificate { der: der.clone(), intermediates: Vec::new(), common_name, organizations })
    }
}

/// The connection hook of the HTTPS listener: stores the verified client
/// certificate, if any, as a [`PeerCertificate`] in the connection data,
/// where [`super::Auth`] finds it. Pass it to `HttpServer::on_connect` before binding.
pub fn on_connect(connection: &dyn Any, data: &mut Extensions) {
    type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
    let Some(tls) = connection.downcast_ref::<Tls>() else {
        return;
    };
    let (_, session) = tls.get_ref();
    let Some(chain) = session.peer_certificates() else {
        return;
    };
    let Some(leaf) = chain.first() else {
        return;
    };
    match PeerCertificate::from_der(leaf.clone().into_owned()) {
        Some(mut cert) => {
            cert.intermediates = chain[1..].iter().map(|c| c.clone().into_owned()).collect();
            data.insert(cert);
        }
        None => warn!("Client certificate passed verification but its subject cannot be read; ignoring it."),
    }
}
