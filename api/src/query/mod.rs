//! Reads below the HTTP layer: no actix type is used here. A handler
//! ([`crate::read`], [`crate::watch`]) reads the request's
//! [`crate::request::RequestInfo`] and [`Query`], calls into these modules,
//! and writes what they return as the response.
//!
//! - [`params`]: list, get and watch parameters, as the Kubernetes API names them.
//! - [`scope`]: which objects a request sees ([`Scope`]), its selectors
//!   ([`Filter`]) and the object a name designates.
//! - [`snapshot`]: the index as of a resourceVersion, rewound through the event log.
//! - [`table`]: Table rows (server-side printing).
//! - [`get`]: one object as served.
//! - [`list`]: a list: paging, counting what is left, the list body.
//! - [`list_stream`]: the rest of a long list: the chunk pool, the
//!   worker's stream, the producer threads.
//! - [`list_shared`]: the rest of a long JSON list made by the worker and
//!   a helper thread together.
//! - [`watch`]: a watch's events from its start point on, for its client.

pub mod get;
pub mod list;
pub mod list_shared;
pub mod list_stream;
pub mod params;
pub mod scope;
pub mod snapshot;
pub mod table;
pub mod watch;
#[cfg(test)]
mod watch_fanout_tests;

use kubefold_actors::fleet::Fleet;

pub use params::{flag, Query, ReadAt};
pub use scope::{resolve_name, Filter, Scope, CLUSTER_SEARCH_KEY};
pub use table::{IncludeObject, TablePrinter};

/// What reads read: the fleet's published index and store, the snapshots
/// of the past, and the key of the continue tokens.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    /// The read view.
    pub fleet: &'a Fleet,
    /// Snapshots rewound through the event log.
    pub snapshots: &'a snapshot::Snapshots,
    /// Key of the continue-token checksum.
    pub token_secret: &'a [u8],
}

impl Reader<'_> {
    /// The index as of `rv` (see [`snapshot::Snapshots::at`]).
    pub fn snapshot_at(&self, rv: u64) -> Result<std::sync::Arc<kubefold_engine::index::Index>, kubefold_engine::status::Status> {
        self.snapshots.at(self.fleet, rv)
    }
}
