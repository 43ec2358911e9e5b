//! kubefold's actors: they own the moving parts of the engine.
//!
//! - [`cluster`]: member cluster connection settings and kube clients.
//! - [`fleet`]: the shared read view (snapshot, event fan-out, store, status)
//!   that HTTP workers read concurrently while the aggregator alone writes.
//! - [`aggregator`]: numbers events, commits them to the store, publishes them.
//! - [`machine`]: the cluster watcher's sans-I/O state machine.
//! - [`watcher`]: the `ClusterWatcher` actor (one per cluster × resource type).
//! - [`supervisor`]: starts the aggregator and the watchers and stops them.
//! - [`messages`]: the messages between them.

pub mod aggregator;
pub mod cluster;
pub mod fleet;
pub mod machine;
pub mod messages;
pub mod resolver;
pub mod supervisor;
pub mod watcher;
