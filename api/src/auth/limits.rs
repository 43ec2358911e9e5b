//! Per-client request limits, as kube-apiserver's max-in-flight filter:
//! requests being handled at once and long-running ones ([`is_long_running`])
//! held open, each counted by a slot released when its response is sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::body::MessageBody;
use kubefold_engine::status::Status;

use crate::request::RequestInfo;

/// Whether a request is long-running, which kube-apiserver's max-in-flight
/// limit does not count once it started (`BasicLongRunningRequestCheck`
/// with the verbs `watch` and `proxy` and the subresources `attach`,
/// `exec`, `proxy`, `log` and `portforward`): any watch (also of kubefold's
/// admin streams) and those subresources.
pub fn is_long_running(info: &RequestInfo) -> bool {
    const SUBRESOURCES: [&str; 5] = ["attach", "exec", "proxy", "log", "portforward"];
    let subresource = info.subresource.as_deref().filter(|_| info.is_resource_request);
    info.verb == "watch" || info.verb == "proxy" || subresource.is_some_and(|s| SUBRESOURCES.contains(&s)) || info.watch
}

/// 429 TooManyRequests with `Retry-After: 1`.
pub fn too_many_requests() -> Status {
    let mut status = Status::new(429, "TooManyRequests", "Too many requests, please try again later.");
    status.details = Some(kubefold_engine::status::StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
    status
}

/// 429 TooManyRequests with `Retry-After: 1`, for a client that holds
/// `maxLongRunningPerClient` watches or streams open already.
pub fn too_many_long_running() -> Status {
    let mut status = Status::new(429, "TooManyRequests", "Too many long-running requests (watches, logs, streams) open from this client, please try again later.");
    status.details = Some(kubefold_engine::status::StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
    status
}

/// Requests in flight per client.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) max: usize,
    pub(crate) counts: Mutex<HashMap<String, usize>>,
}

/// A slot of [`InFlight`], released on drop.
pub(crate) struct InFlightGuard {
    in_flight: Arc<InFlight>,
    client: String,
}

impl InFlight {
    pub(crate) fn acquire(self: &Arc<Self>, client: String) -> Option<InFlightGuard> {
        if self.max == 0 {
            return Some(InFlightGuard { in_flight: self.clone(), client: String::new() });
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(client.clone()).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(InFlightGuard { in_flight: self.clone(), client })
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.in_flight.max == 0 {
            return;
        }
        let mut counts = self.in_flight.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

/// A response body that holds its request's in-flight slot until it is
/// sent (or dropped because its client went away).
pub struct Counted<B> {
    pub(crate) body: B,
    pub(crate) _slot: Option<InFlightGuard>,
    pub(crate) _long_running: Option<InFlightGuard>,
}

impl<B: MessageBody + Unpin> MessageBody for Counted<B> {
    type Error = B::Error;

    fn size(&self) -> actix_web::body::BodySize {
        self.body.size()
    }

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<actix_web::web::Bytes, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_next(cx)
    }

    fn try_into_bytes(self) -> Result<actix_web::web::Bytes, Self> {
        let Counted { body, _slot, _long_running } = self;
        body.try_into_bytes().map_err(|body| Counted { body, _slot, _long_running })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use actix_web::http::Method;

    #[test]
    fn watches_logs_and_streams_are_long_running_lists_and_gets_are_not() {
        let long = |method: Method, path: &str, query: &str| is_long_running(&RequestInfo::new(&method, path, query));
        assert!(long(Method::GET, "/api/v1/pods", "watch=1"));
        assert!(long(Method::GET, "/clusters/m1/apis/apps/v1/namespaces/a/deployments", "watch=true&resourceVersion=5"));
        assert!(long(Method::GET, "/api/v1/namespaces/a/pods/p_m1/log", "follow=true"));
        assert!(long(Method::POST, "/api/v1/namespaces/a/pods/p_m1/exec", "command=sh"));
        assert!(long(Method::GET, "/admin/v1/estimators", "watch=true"));
        assert!(!long(Method::GET, "/api/v1/pods", ""));
        assert!(!long(Method::GET, "/api/v1/pods", "watch=false&limit=500"));
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p_m1", ""));
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p_m1/status", ""));
        assert!(!long(Method::PATCH, "/apis/apps/v1/namespaces/a/deployments/d_m1/scale", ""));
        assert!(!long(Method::GET, "/admin/v1/clusters", ""));
    }

    #[test]
    fn in_flight_slots_are_released() {
        let in_flight = Arc::new(InFlight { max: 2, counts: Mutex::new(HashMap::new()) });
        let a = in_flight.acquire("user:a".into()).unwrap();
        let b = in_flight.acquire("user:a".into()).unwrap();
        assert!(in_flight.acquire("user:a".into()).is_none());
        assert!(in_flight.acquire("user:b".into()).is_some());
        drop(a);
        let c = in_flight.acquire("user:a".into()).unwrap();
        drop((b, c));
        assert!(in_flight.counts.lock().unwrap().is_empty());
    }
}
