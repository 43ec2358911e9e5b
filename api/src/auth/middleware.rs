//! The middleware in front of every path except `/livez`, `/readyz` and
//! `/healthz`: authenticates ([`super::authn`]), counts
//! ([`super::limits`]), takes impersonation ([`crate::impersonate`]) and
//! authorizes ([`super::authz`]) each request from its [`RequestInfo`],
//! and answers a refusal with a Kubernetes `Status`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::HttpMessage;
use futures::future::{ready, LocalBoxFuture, Ready};
use kubefold_engine::status::Status;
use tracing::{debug, info, warn};

use super::authn::{read_token_file, unauthorized, Authenticator, User};
use super::authz::{authorize, forbidden, upgrade_create_check, RequestAttributes, Rule};
use super::connection::PeerCertificate;
use super::limits::{is_long_running, too_many_long_running, too_many_requests, Counted, InFlight, InFlightGuard};
use super::{AuthConfig, Error, Result};
use crate::request::RequestInfo;

/// Paths served to anyone, without authentication or limits.
const OPEN_PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];

#[derive(Debug)]
struct Inner {
    /// Who requests are.
    authenticator: Authenticator,
    /// Bearer tokens the authenticator does not know, reviewed by a
    /// control plane.
    token_reviewer: Option<super::delegated::TokenReviewer>,
    /// What the rules do not allow, asked of a control plane.
    access_reviewer: Option<super::delegated::AccessReviewer>,
    /// Users named by a front proxy.
    front_proxy: Option<super::requestheader::FrontProxy>,
    /// With a front proxy: the verifier of users' client certificates
    /// (the listener accepts both CAs').
    client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    /// No authenticator: everyone may do everything.
    open: bool,
    rules: Vec<Rule>,
    in_flight: Arc<InFlight>,
    /// Long-running requests open per client.
    long_running: Arc<InFlight>,
}

/// The authentication, authorization and request-limit middleware. Cheap to
/// clone (shared state): build it once with [`Auth::from_config`] and
/// `.wrap(auth.clone())` in every worker's `App`.
#[derive(Debug, Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

/// What [`Auth::admit`] found about an admitted request.
struct Admitted {
    user: User,
    attributes: RequestAttributes,
    /// Its slot of the client's requests in flight.
    slot: InFlightGuard,
    /// Its slot of the client's long-running requests, if it is one.
    long_running: Option<InFlightGuard>,
    client: Client,
    /// The authenticated caller, when it impersonates `user`.
    impersonator: Option<User>,
    /// The extra attributes of `user`.
    extra: Vec<(String, Vec<String>)>,
}

/// The client a request is counted against in the per-client limits: the
/// user (`user:NAME`), or the client IP for anonymous requests
/// (`ip:ADDR`). In the request extensions of every admitted request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client(pub String);

/// Why a request was turned away.
enum Rejection {
    Unauthorized,
    Invalid(Status),
    TooManyRequests,
    TooManyLongRunning,
    Forbidden(Box<(User, RequestAttributes)>),
}

impl Auth {
    /// Builds the middleware: reads the token file and checks the rules.
    pub fn from_config(config: &AuthConfig) -> Result<Auth> {
        let tokens = match &config.token_auth_file {
            Some(path) => Some(read_token_file(path)?),
            None => None,
        };
        let client_certificates = config.client_ca_file.is_some();
        let token_reviewer = match &config.authentication_kubeconfig {
            Some(path) => {
                let ttl = std::time::Duration::from_secs(config.authentication_cache_ttl_seconds);
                Some(super::delegated::TokenReviewer::new(path, ttl, ttl)?)
            }
            None => None,
        };
        let front_proxy = super::requestheader::FrontProxy::from_config(config)?;
        let client_verifier = match (&front_proxy, &config.client_ca_file) {
            (Some(_), Some(path)) => Some(crate::tls::client_verifier(path).map_err(|e| Error::RequestHeaderCa { path: path.clone(), reason: e.to_string() })?),
            _ => None,
        };
        let any_authenticator = tokens.is_some() || client_certificates || token_reviewer.is_some() || front_proxy.is_some();
        let access_reviewer = match &config.authorization_kubeconfig {
            Some(path) => Some(super::delegated::AccessReviewer::new(
                path,
                std::time::Duration::from_secs(config.authorization_authorized_ttl_seconds),
                std::time::Duration::from_secs(config.authorization_unauthorized_ttl_seconds),
            )?),
            None => None,
        };
        let anonymous = config.anonymous.unwrap_or(!any_authenticator);
        if !anonymous && !any_authenticator {
            return Err(Error::NoAuthenticator);
        }
        for (index, rule) in config.rules.iter().enumerate() {
            rule.validate().map_err(|reason| Error::InvalidRule { index, reason })?;
        }
        let open = !any_authenticator;
        if open {
            warn!("No authenticator is configured (tokenAuthFile, clientCaFile, authenticationKubeconfig, requestheaderClientCaFile): every request is served as system:anonymous with full access.");
        } else {
            info!(
                tokens = tokens.as_ref().map_or(0, HashMap::len),
                client_certificates,
                delegated_authentication = token_reviewer.is_some(),
                delegated_authorization = access_reviewer.is_some(),
                front_proxy = front_proxy.is_some(),
                anonymous,
                rules = config.rules.len(),
                "Authentication enabled."
            );
        }
        Ok(Auth {
            inner: Arc::new(Inner {
                authenticator: Authenticator { tokens, client_certificates, anonymous },
                token_reviewer,
                access_reviewer,
                front_proxy,
                client_verifier,
                open,
                rules: config.rules.clone(),
                in_flight: Arc::new(InFlight {
                    max: config.max_requests_in_flight_per_client,
                    counts: Mutex::new(HashMap::new()),
                }),
                long_running: Arc::new(InFlight {
                    max: config.max_long_running_per_client,
                    counts: Mutex::new(HashMap::new()),
                }),
            }),
        })
    }

    /// Whether authentication is off (no authenticator configured).
    pub fn is_open(&self) -> bool {
        self.inner.open
    }

    /// The decision this middleware takes for `user` doing `attributes`:
    /// everything when authentication is off, else [`authorize`] with the
    /// configured rules. Access reviews are answered by this same call.
    pub fn allows(&self, user: &User, attributes: &RequestAttributes) -> bool {
        self.inner.open || authorize(user, attributes, &self.inner.rules)
    }

    /// The control plane's answer for what kubefold's own rules refuse
    /// (`--authorization-kubeconfig`, [`super::delegated`]): `None` without
    /// one, `Err` when the review failed.
    pub async fn delegated_allows(&self, user: &User, attributes: &RequestAttributes) -> Option<Result<bool, String>> {
        let reviewer = self.inner.access_reviewer.as_ref()?;
        Some(reviewer.allows(user, attributes).await)
    }

    /// Whether authorization is also delegated to a control plane.
    pub fn delegates_authorization(&self) -> bool {
        self.inner.access_reviewer.is_some()
    }

    /// Whether an extra rule that applies to `user` is limited to some
    /// clusters: what it allows then depends on the cluster a request
    /// names, which a list of rules without a cluster cannot say.
    pub fn has_cluster_limited_rules(&self, user: &User) -> bool {
        self.inner.rules.iter().any(|r| r.matches_user(user) && !r.clusters.iter().any(|c| c == "*"))
    }

    /// Authenticates from the connection's client certificate or the bearer token.
    fn authenticate(&self, req: &ServiceRequest) -> Result<User, Rejection> {
        // With a front proxy's CA trusted too, a user's certificate must
        // chain to the client CA.
        let certificate = req.conn_data::<PeerCertificate>().filter(|c| match &self.inner.client_verifier {
            Some(verifier) => verifier.verify_client_cert(&c.der, &c.intermediates, rustls::pki_types::UnixTime::now()).is_ok(),
            None => self.inner.front_proxy.as_ref().is_none_or(|proxy| !proxy.signed(c)),
        });
        self.inner.authenticator.authenticate(certificate, req.headers()).ok_or(Rejection::Unauthorized)
    }

    /// The user a front proxy names ([`super::requestheader`]), if any.
    fn front_proxied(&self, req: &ServiceRequest) -> Option<Result<(User, super::requestheader::Extra), Rejection>> {
        let proxy = self.inner.front_proxy.as_ref()?;
        match proxy.authenticate(req.conn_data::<PeerCertificate>(), req.headers()) {
            super::requestheader::FrontProxied::No => None,
            super::requestheader::FrontProxied::User(user, extra) => Some(Ok((user, extra))),
            super::requestheader::FrontProxied::NameNotAllowed => {
                warn!(peer = ?req.peer_addr(), "A front proxy's certificate has a CN not in requestheaderAllowedNames; the request is unauthenticated.");
                Some(Err(Rejection::Unauthorized))
            }
        }
    }

    /// [`Auth::authenticate`], then, for a bearer token it does not know,
    /// the control plane's review ([`super::delegated`]).
    async fn authenticate_delegated(&self, req: &ServiceRequest) -> Result<(User, super::requestheader::Extra), Rejection> {
        let local = self.authenticate(req).map(|user| (user, Vec::new()));
        let Some(reviewer) = &self.inner.token_reviewer else { return local };
        if local.as_ref().is_ok_and(|(u, _)| !u.is_anonymous()) {
            return local;
        }
        let Some(token) = super::authn::bearer_token(req.headers()) else { return local };
        match reviewer.review(token).await {
            Ok(Some(user)) => Ok(user),
            Ok(None) => Err(Rejection::Unauthorized),
            Err(error) => {
                warn!(error = %error, "Token review failed; the request is unauthenticated.");
                Err(Rejection::Unauthorized)
            }
        }
    }

    /// [`Auth::allows`], then, for what it refuses, the control plane's
    /// access review ([`super::delegated`]); a review that fails refuses.
    async fn allowed(&self, user: &User, attributes: &RequestAttributes) -> bool {
        if self.allows(user, attributes) {
            return true;
        }
        let Some(reviewer) = &self.inner.access_reviewer else { return false };
        reviewer.allows(user, attributes).await.unwrap_or_else(|error| {
            warn!(error = %error, "Access review failed; the request is refused.");
            false
        })
    }

    /// Counts and authorizes `req` of `user` (as the user it
    /// impersonates, if it may: [`crate::impersonate`]).
    async fn admit(&self, req: &ServiceRequest, user: Result<(User, super::requestheader::Extra), Rejection>) -> Result<Admitted, Rejection> {
        let (user, authenticated_extra) = user?;
        let client = if user.is_anonymous() {
            format!("ip:{}", req.peer_addr().map_or_else(|| "unknown".to_string(), |a| IpAddr::to_string(&a.ip())))
        } else {
            format!("user:{}", user.name)
        };
        let slot = self.inner.in_flight.acquire(client.clone()).ok_or(Rejection::TooManyRequests)?;
        // The per-client limits count the real caller; authorization sees
        // the user it impersonates.
        let (user, impersonator, extra) = match crate::impersonate::Impersonation::from_headers(req.headers()).map_err(Rejection::Invalid)? {
            None => (user, None, authenticated_extra),
            Some(asked) => {
                for check in asked.checks() {
                    if !self.allowed(&user, &check).await {
                        return Err(Rejection::Forbidden(Box::new((user, check))));
                    }
                }
                debug!(user = %user.name, as_user = %asked.user, as_groups = ?asked.groups, "Request impersonates a user.");
                (asked.user(), Some(user), asked.extra)
            }
        };
        let info = RequestInfo::of(&req.extensions(), req.method(), req.path(), req.query_string());
        let attributes = RequestAttributes::of(&info);
        if !self.allowed(&user, &attributes).await {
            return Err(Rejection::Forbidden(Box::new((user, attributes))));
        }
        // A WebSocket exec, attach or port-forward needs `create` too.
        if let Some(create) = upgrade_create_check(&attributes).filter(|create| !self.allows(&user, create)) {
            return Err(Rejection::Forbidden(Box::new((user, create))));
        }
        let long_running = match is_long_running(&info) {
            true => Some(self.inner.long_running.acquire(client.clone()).ok_or(Rejection::TooManyLongRunning)?),
            false => None,
        };
        Ok(Admitted { user, attributes, slot, long_running, client: Client(client), impersonator, extra })
    }
}

fn is_open_path(path: &str) -> bool {
    OPEN_PATHS.iter().any(|open| {
        path.strip_prefix(open).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}


impl<S, B> Transform<S, ServiceRequest> for Auth
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Counted<B>>>;
    type Error = actix_web::Error;
    type Transform = AuthMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(AuthMiddleware { service: std::rc::Rc::new(service), auth: self.clone() }))
    }
}

/// The per-worker service of [`Auth`].
#[derive(Debug)]
pub struct AuthMiddleware<S> {
    service: std::rc::Rc<S>,
    auth: Auth,
}

impl<S, B> Service<ServiceRequest> for AuthMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Counted<B>>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        if is_open_path(req.path()) {
            // Open to anyone; their details (which members are synced) only
            // to an authenticated caller, or to everyone when authentication is off.
            if self.auth.inner.open {
                req.extensions_mut().insert(User::anonymous());
            } else if let Some(user) = self.auth.authenticate(&req).ok().filter(|u| !u.is_anonymous()) {
                req.extensions_mut().insert(user);
            }
            let response = self.service.call(req);
            return Box::pin(async move { Ok(response.await?.map_body(|_, body| Counted { body, _slot: None, _long_running: None }).map_into_left_body()) });
        }
        let auth = self.auth.clone();
        let service = self.service.clone();
        Box::pin(async move {
            let user = match auth.front_proxied(&req) {
                Some(proxied) => proxied,
                None => auth.authenticate_delegated(&req).await,
            };
            match auth.admit(&req, user).await {
                Ok(Admitted { user, attributes, slot, long_running, client, impersonator, extra }) => {
                    if !auth.inner.open {
                        // Who forwarded edits act as on members that impersonate.
                        req.extensions_mut().insert(crate::impersonate::Caller { user: user.clone(), extra });
                    }
                    req.extensions_mut().insert(user);
                    if let Some(impersonator) = impersonator {
                        req.extensions_mut().insert(crate::audit::Impersonator(impersonator));
                    }
                    req.extensions_mut().insert(attributes);
                    req.extensions_mut().insert(client);
                    let response = service.call(req).await;
                    // A long-running request's in-flight slot is released
                    // when its response starts, any other's with its body;
                    // its long-running slot with its body.
                    let slot = long_running.is_none().then_some(slot);
                    Ok(response?.map_body(|_, body| Counted { body, _slot: slot, _long_running: long_running }).map_into_left_body())
                }
                Err(rejection) => {
                    let status = match rejection {
                        Rejection::Invalid(status) => status,
                        Rejection::Unauthorized => {
                            debug!(path = req.path(), peer = ?req.peer_addr(), "Request unauthenticated.");
                            unauthorized()
                        }
                        Rejection::TooManyRequests => {
                            debug!(path = req.path(), peer = ?req.peer_addr(), "Too many requests in flight from one client.");
                            too_many_requests()
                        }
                        Rejection::TooManyLongRunning => {
                            debug!(path = req.path(), peer = ?req.peer_addr(), "Too many long-running requests open from one client.");
                            too_many_long_running()
                        }
                        Rejection::Forbidden(denied) => {
                            let (user, attributes) = *denied;
                            info!(user = %user.name, groups = ?user.groups, verb = %attributes.verb, path = req.path(), "Request forbidden.");
                            let status = forbidden(&user, &attributes);
                            // Who was refused, for the audit log.
                            req.extensions_mut().insert(user);
                            status
                        }
                    };
                    metrics::counter!("kubefold_auth_rejected_total", "reason" => status.reason.clone()).increment(1);
                    let response = crate::respond::status(&status);
                    Ok(req.into_response(response).map_into_right_body())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_anonymous() {
        let c: AuthConfig = serde_saphyr::from_str("{}").unwrap();
        assert_eq!(c, AuthConfig::default());
        assert_eq!(c.max_requests_in_flight_per_client, 100);
        assert_eq!(c.max_long_running_per_client, 2000);
        assert_eq!(c.watch_buffer_bytes_per_client, 256 << 20);
        let c2: AuthConfig = serde_saphyr::from_str("{maxLongRunningPerClient: 3, watchBufferBytesPerClient: 1048576}").unwrap();
        assert_eq!((c2.max_long_running_per_client, c2.watch_buffer_bytes_per_client), (3, 1 << 20));
        assert!(Auth::from_config(&c).unwrap().is_open());
        assert!(serde_saphyr::from_str::<AuthConfig>("tokenFile: x").is_err());
        let c = AuthConfig { anonymous: Some(false), ..c };
        assert!(matches!(Auth::from_config(&c), Err(Error::NoAuthenticator)));
        let c = AuthConfig { client_ca_file: Some("ca.pem".into()), anonymous: None, ..c };
        let auth = Auth::from_config(&c).unwrap();
        assert!(!auth.is_open() && !auth.inner.authenticator.anonymous);
    }

    #[test]
    fn open_paths() {
        assert!(is_open_path("/livez") && is_open_path("/readyz") && is_open_path("/healthz"));
        assert!(is_open_path("/readyz/ping"));
        assert!(!is_open_path("/readyzz") && !is_open_path("/metrics") && !is_open_path("/api"));
    }
}
