//! A get: the object a name designates, as served (JSON or a Table of one row).

use kubefold_engine::status::Status;

use super::params::Query;
use super::scope::{resolve_name, Scope};
use super::table::{IncludeObject, TablePrinter};
use super::Reader;

/// The served body of the object `name` designates in `scope`, from the
/// latest snapshot: the object itself, or (`table`: the client asked for
/// one) a Table of its row.
pub fn get(reader: &Reader, scope: &Scope, name: &str, query: &Query, table: bool) -> Result<Vec<u8>, Status> {
    let snapshot = reader.fleet.snapshot();
    let (key, entry) = resolve_name(&snapshot, scope, name)?;
    let body = reader
        .fleet
        .store()
        .body(entry.rv)
        .map_err(|e| Status::internal(e.to_string()))?
        .ok_or_else(|| Status::internal(format!("object body at resourceVersion {} is missing from the store", entry.rv)))?;
    let suffix = scope.name_suffix(&key.cluster);
    if table {
        let printer = TablePrinter::new(&scope.resource, IncludeObject::parse(query.include_object.as_deref())?);
        return Ok(printer.single(&body, suffix.as_deref(), entry.rv, &key.cluster, false));
    }
    Ok(body.to_bytes(suffix.as_deref(), entry.rv))
}
