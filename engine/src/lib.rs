//! kubefold's domain core: the rules of the Kubernetes API that kubefold
//! implements, with no I/O and no async, testable with literal inputs.
//!
//! - [`resources`]: the catalog of aggregated resource types (discovery).
//! - [`names`]: qualified names `<name>_<cluster>` and their parsing.
//! - [`object`]: turning a member's object into the served form and back.
//! - [`estimator`]: scheduler-estimator endpoint resolution (pure rules).
//! - [`event`]: events, the persisted envelope, and index entries.
//! - [`index`]: the merged index with its one `apply` and relist diffs.
//! - [`paging`]: continue tokens.
//! - [`selection`]: which types are aggregated from which clusters and namespaces.
//! - [`selector`]: label and field selectors.
//! - [`fields`]: per-type selectable fields.
//! - [`table`]: server-side printing (`meta.k8s.io/v1` Table).
//! - [`status`]: Kubernetes `Status` errors.

pub mod estimator;
pub mod event;
pub mod fields;
pub mod index;
pub mod names;
pub mod object;
pub mod openapi;
pub mod paging;
pub mod resources;
pub mod selection;
pub mod selector;
pub mod status;
pub mod table;
