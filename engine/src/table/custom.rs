//! Custom resources' printer columns (`additionalPrinterColumns`), as the
//! apiextensions-apiserver's table convertor prints them.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::format::since;
use super::Now;
use crate::resources::ResourceType;

/// Whether one of a custom resource's printer columns already shows the
/// creation time (kubefold adds `Age` otherwise).
pub(super) fn shows_creation_time(resource: &ResourceType) -> bool {
    resource
        .printer_columns
        .iter()
        .any(|c| c.json_path.trim_start_matches('{').trim_end_matches('}') == ".metadata.creationTimestamp")
}

/// The cells of a custom resource's printer columns, as the
/// apiextensions-apiserver's table convertor computes them: the value at the
/// column's JSONPath, typed by the column (`integer`, `number`, `boolean`
/// cells are JSON numbers and booleans; `date` cells are ages like `AGE`;
/// `string` cells print the value), `null` when the path finds nothing.
/// <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#additional-printer-columns>
pub(super) fn printer_column_cells(resource: &ResourceType, object: &Value, now: Now) -> Vec<Value> {
    resource
        .printer_columns
        .iter()
        .map(|column| {
            let Some(value) = json_path(object, &column.json_path) else { return Value::Null };
            match (column.type_.as_str(), value) {
                ("string", Value::String(s)) => Value::from(s.as_str()),
                ("string", Value::Null) => Value::Null,
                ("string", other) => Value::from(other.to_string()),
                ("integer", Value::Number(n)) => match n.as_i64() {
                    Some(i) => Value::from(i),
                    None => n.as_f64().filter(|f| f.fract() == 0.0).map_or(Value::Null, |f| Value::from(f as i64)),
                },
                ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
                ("boolean", Value::Bool(b)) => Value::from(*b),
                ("date", Value::String(s)) => DateTime::parse_from_rfc3339(s)
                    .map_or(Value::Null, |t| Value::from(since(Some(t.with_timezone(&Utc)), now))),
                _ => Value::Null,
            }
        })
        .collect()
}

/// The value at a simple JSONPath (the subset CRD printer columns allow:
/// fields and array indices, `.spec.ports[0].port`, `.metadata.labels['app.kubernetes.io/name']`,
/// optionally wrapped in `{}`); `None` when the path finds nothing or uses
/// anything else (filters, wildcards, ranges).
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    let mut at = object;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            if field.is_empty() || field == "*" {
                return None;
            }
            at = at.get(field)?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inside = after[..end].trim();
            let quoted = inside
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inside.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            at = match quoted {
                Some(field) => at.get(field)?,
                None => {
                    let index: i64 = inside.parse().ok()?;
                    let items = at.as_array()?;
                    let index = if index < 0 { items.len() as i64 + index } else { index };
                    items.get(usize::try_from(index).ok()?)?
                }
            };
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(at)
}
