//! Printers of the discovery.k8s.io group: endpoint slices.

use serde_json::Value;

use super::format::{items, list_with_more, text};
use crate::json::Json;

/// ADDRESSTYPE, PORTS, ENDPOINTS, AGE of an endpoint slice (`printEndpointSlice`).
pub(super) fn endpoint_slice_cells<J: Json>(object: &J, age: Value) -> Vec<Value> {
    let ports = items(object, "/ports").iter().map(|port| {
        match (
            port.get("port").and_then(J::as_i64),
            port.get("name").and_then(J::as_str),
        ) {
            (Some(number), _) => number.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".to_string(),
        }
    });
    let addresses = items(object, "/endpoints")
        .iter()
        .flat_map(|endpoint| items(endpoint, "/addresses"))
        .map(|address| address.as_str().unwrap_or_default().to_string());
    vec![
        Value::from(text(object, "/addressType")),
        Value::from(list_with_more(ports)),
        Value::from(list_with_more(addresses)),
        age,
    ]
}
