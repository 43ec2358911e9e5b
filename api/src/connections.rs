//! Open connections against the process's descriptors: kubefold never runs
//! out of them, whatever clients do. A connection may take two descriptors
//! (its socket, and the duplicate a watch polls, see
//! `watch::ConnectionSocket`); beside them the process keeps a reserve of
//! `fileDescriptorReserve` for itself (the store, member connections,
//! backups). Of the connections that fit:
//! - the first ones are served in full;
//! - the last few (the overflow lane) answer one request each and close:
//!   health checks (`/livez`, `/readyz`, `/healthz`) as usual, anything
//!   else 503 ServiceUnavailable with Retry-After, so that `/livez` is
//!   answered while the process is full;
//! - beyond them accept stops (actix's per-worker connection limit): new
//!   connections wait in the listen queue until others close.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderValue, CONNECTION};
use actix_web::middleware::Next;
use kubefold_engine::status::{Status, StatusDetails};

/// Paths the overflow lane serves (the rest get 503).
const HEALTH_PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];

/// How many connections kubefold takes, from the descriptors it may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served in full.
    pub full: usize,
    /// Connections at most, the overflow lane included; accept stops there.
    pub total: usize,
}

impl ConnectionLimits {
    /// The limits for a process that may open `nofile` descriptors, has
    /// `in_use` open, and keeps `reserve` for itself; each connection is
    /// counted at two descriptors. The overflow lane is a sixteenth of the
    /// connections, at least 4.
    pub fn new(nofile: usize, in_use: usize, reserve: usize) -> ConnectionLimits {
        let total = (nofile.saturating_sub(in_use).saturating_sub(reserve) / 2).max(8);
        let lane = (total / 16).max(4);
        ConnectionLimits { full: total - lane, total }
    }

    /// The limits of this process: its open-files soft limit
    /// (RLIMIT_NOFILE), the descriptors open now, and `reserve` (`None`:
    /// a tenth of the limit, at least 64).
    pub fn of_process(reserve: Option<usize>) -> ConnectionLimits {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.map_or(1 << 20, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let in_use = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(64);
        ConnectionLimits::new(nofile, in_use, reserve.unwrap_or_else(|| default_reserve(nofile)))
    }
}

/// A tenth of the open-files limit, at least 64.
pub fn default_reserve(nofile: usize) -> usize {
    (nofile / 10).max(64)
}

/// Open connections (counted when actix hands them to kubefold, after the
/// TLS handshake).
#[derive(Debug, Default)]
pub struct Connections {
    open: AtomicUsize,
    full: AtomicUsize,
}

/// A connection while it is open, kept in its connection data.
#[derive(Debug)]
pub struct OpenConnection {
    connections: Arc<Connections>,
    /// Whether it is in the overflow lane.
    pub overflow: bool,
}

impl Connections {
    /// Counting against `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Connections> {
        Arc::new(Connections { open: AtomicUsize::new(0), full: AtomicUsize::new(limits.full) })
    }

    /// Counts a new connection; in the overflow lane when the full ones are
    /// taken.
    pub fn open(self: &Arc<Self>) -> OpenConnection {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("kubefold_connections").increment(1.0);
        let overflow = before >= self.full.load(Ordering::Relaxed);
        if overflow {
            metrics::counter!("kubefold_connections_overflow_total").increment(1);
        }
        OpenConnection { connections: self.clone(), overflow }
    }

    /// Connections open now.
    pub fn count(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.connections.open.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("kubefold_connections").decrement(1.0);
    }
}

/// The middleware of the overflow lane: on a connection there, health
/// checks are answered and anything else gets 503 ServiceUnavailable with
/// `Retry-After: 1`; either way the connection closes after the response.
pub async fn overflow_lane(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let overflow = req.conn_data::<OpenConnection>().is_some_and(|c| c.overflow);
    if !overflow {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let mut response = if HEALTH_PATHS.contains(&req.path()) {
        next.call(req).await?.map_into_left_body()
    } else {
        let mut status = Status::new(503, "ServiceUnavailable", "kubefold holds as many connections as its open-files limit allows; please try again later.");
        status.details = Some(StatusDetails { retry_after_seconds: Some(1), ..Default::default() });
        tracing::debug!(path = req.path(), peer = ?req.peer_addr(), "Request refused: too many open connections.");
        req.into_response(crate::respond::status(&status)).map_into_right_body()
    };
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response.response_mut().head_mut().set_connection_type(actix_web::http::ConnectionType::Close);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_leave_the_reserve_and_count_two_descriptors_a_connection() {
        let l = ConnectionLimits::new(20_000, 50, 2_000);
        assert_eq!(l.total, 8_975);
        assert_eq!(l.full, 8_975 - 560);
        let l = ConnectionLimits::new(300, 40, 64);
        assert_eq!((l.full, l.total), (92, 98));
        // A limit below what is open already still takes a few.
        assert_eq!(ConnectionLimits::new(100, 90, 64).total, 8);
        assert_eq!(default_reserve(20_000), 2_000);
        assert_eq!(default_reserve(256), 64);
    }

    #[test]
    fn connections_past_the_full_ones_are_in_the_overflow_lane_until_others_close() {
        let c = Connections::new(ConnectionLimits { full: 2, total: 3 });
        let a = c.open();
        let b = c.open();
        let over = c.open();
        assert!(!a.overflow && !b.overflow && over.overflow);
        assert_eq!(c.count(), 3);
        drop(a);
        drop(over);
        assert!(!c.open().overflow, "a closed connection frees its place");
    }
}
