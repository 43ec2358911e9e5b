//! kubefold's actors: they own the moving parts of the engine.
//!
//! - [`cluster`]: member cluster connection settings, kube clients, backups.
//! - [`fleet`]: the shared read view (published snapshot, members' status,
//!   type catalog), each part with its one writer's handle.
//! - [`aggregator`]: applies batches through the reflector, commits the
//!   events to the store, publishes them.
//! - [`machine`]: the cluster watcher's sans-I/O state machine.
//! - [`watcher`]: the `ClusterWatcher` actor (one per cluster × resource type).
//! - [`relists`]: the bound on lists running at once.
//! - [`cluster_series`]: the bound on members with metric series of their own.
//! - [`supervisor`]: starts the watchers and stops them.
//! - [`resolver`]: the `Resolver` actor (scheduler-estimator endpoints).
//! - [`probe`]: the resolver's probes of estimator endpoints.
//! - [`messages`]: the messages between them.

pub mod aggregator;
pub mod background;
pub mod cluster;
pub mod cluster_series;
pub mod fleet;
pub mod machine;
pub mod messages;
pub mod probe;
pub mod relists;
pub mod resolver;
pub mod supervisor;
pub mod watcher;
