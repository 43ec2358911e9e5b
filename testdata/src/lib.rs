//! kubefold-testdata: the member-cluster simulator and workload generators
//! that every kubefold test, demo and benchmark runs against.
//!
//! - [`sim`]: a single-cluster Kubernetes API server over real HTTP
//!   (discovery, list, watch, get, create, update, patch, delete,
//!   subresources, pod logs), with a request log for tests.
//! - [`workload`]: deterministic generators of realistic objects (the demo
//!   workload, load pods, churn edits).

pub mod sim;
pub mod workload;

pub use sim::{run_cli, start, RequestRecord, SimArgs, SimConfig, SimHandle, SimTls, Workload};
