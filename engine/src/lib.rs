//! kubefold's domain core: the rules of the Kubernetes API that kubefold
//! implements, with no I/O and no async, testable with literal inputs.
//!
//! - [`resources`]: the catalog of aggregated resource types (discovery).
//! - [`names`]: qualified names `<name>_<cluster>` and their parsing.
//! - [`object`]: turning a member's object into the served form and back.
//! - [`estimator`]: scheduler-estimator endpoint resolution (pure rules).
//! - [`event`]: events, the persisted envelope, and index entries.
//! - [`index`]: the merged index with its one `apply`.
//! - [`reflector`]: what a watcher's batch does to the index (relists, tombstones).
//! - [`paging`]: continue tokens.
//! - [`selection`]: which types are aggregated from which clusters and namespaces.
//! - [`selector`]: label and field selectors.
//! - [`fields`]: per-type selectable fields.
//! - [`check`]: checking JSON text without reading it (watch lines).
//! - [`skip`]: skipping over JSON text byte by byte (under `check` and `scan`).
//! - [`scan`]: walking JSON text that has been validated already.
//! - [`json`]: reading parsed JSON, serde_json's or the walk's.
//! - [`keep`]: what a parse keeps of an object, and the parsers that keep only that.
//! - [`table`]: server-side printing (`meta.k8s.io/v1` Table): printers by API group, row templates.
//! - [`status`]: Kubernetes `Status` errors.
//! - [`openapi`]: the OpenAPI documents of the served types.

pub mod check;
pub mod estimator;
pub mod event;
pub mod fields;
pub mod index;
pub mod json;
pub mod keep;
pub mod names;
pub mod object;
pub mod openapi;
pub mod paging;
pub mod reflector;
pub mod resources;
pub mod scan;
pub mod selection;
pub mod selector;
pub mod skip;
pub mod status;
pub mod table;

/// The kubernetes/api testdata fixtures (`testdata/fixtures` in the
/// repository) the unit tests read: (file, group, plural), and their bytes.
#[cfg(test)]
pub(crate) mod fixtures {
    /// Every fixture with the type it holds.
    pub const API_TYPES: &[(&str, &str, &str)] = &[
        ("apps.v1.Deployment.json", "apps", "deployments"),
        ("apps.v1.ReplicaSet.json", "apps", "replicasets"),
        ("apps.v1.StatefulSet.json", "apps", "statefulsets"),
        ("core.v1.ConfigMap.json", "", "configmaps"),
        ("core.v1.Event.json", "", "events"),
        ("core.v1.Namespace.json", "", "namespaces"),
        ("core.v1.Node.json", "", "nodes"),
        ("core.v1.Pod.json", "", "pods"),
        ("core.v1.Service.json", "", "services"),
        ("discovery.k8s.io.v1.EndpointSlice.json", "discovery.k8s.io", "endpointslices"),
    ];

    /// The bytes of one fixture file.
    pub fn read(file: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/fixtures/kubernetes-api-testdata").join(file);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (the fixtures are in testdata/fixtures)", path.display()))
    }
}
