//! Row templates: a Table row computed once, when an object is ingested,
//! and printed for each request with the name's suffix and the ages filled
//! in; and what a row reads of an object ([`row_keeps`], [`ingest_keep`]).

use chrono::{DateTime, Utc};

use super::format::human_duration;
use super::{cells_at, row_conditions, Now, Printer};
use crate::json::Json;
use crate::keep::{merge_keeps, Keep};
use crate::resources::ResourceType;

/// What a pod's row reads (see `pod_cells`): its metadata, its status, and of
/// its spec only the container names (and init containers' restart policy),
/// readiness gates and node. The rest of a pod's spec (containers' env,
/// probes, volumes, tolerations) is most of its bytes.
static POD_ROW: Keep = Keep::Fields(&[
    ("metadata", Keep::Fields(&[("name", Keep::All), ("creationTimestamp", Keep::All), ("deletionTimestamp", Keep::All)])),
    (
        "status",
        Keep::Fields(&[
            ("phase", Keep::All),
            ("reason", Keep::All),
            ("podIP", Keep::All),
            ("podIPs", Keep::All),
            ("nominatedNodeName", Keep::All),
            ("conditions", Keep::Fields(&[("type", Keep::All), ("status", Keep::All), ("reason", Keep::All)])),
            ("initContainerStatuses", CONTAINER_STATUS_ROW),
            ("containerStatuses", CONTAINER_STATUS_ROW),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("containers", Keep::Fields(&[("name", Keep::All)])),
            ("initContainers", Keep::Fields(&[("name", Keep::All), ("restartPolicy", Keep::All)])),
            ("readinessGates", Keep::All),
            ("nodeName", Keep::All),
        ]),
    ),
]);

/// What a pod's row reads of a container's status (see `pod_cells`): not
/// its image, image ID or container ID, nor the times and messages of its
/// states but the last termination's end.
const CONTAINER_STATUS_ROW: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("restartCount", Keep::All),
    ("lastState", Keep::Fields(&[("terminated", Keep::Fields(&[("finishedAt", Keep::All)]))])),
    (
        "state",
        Keep::Fields(&[
            ("waiting", Keep::Fields(&[("reason", Keep::All)])),
            ("terminated", Keep::Fields(&[("exitCode", Keep::All), ("reason", Keep::All), ("signal", Keep::All)])),
            ("running", Keep::Fields(&[])),
        ]),
    ),
    ("ready", Keep::All),
    ("started", Keep::All),
]);

/// What a row of a type without printer columns reads: its name and age.
static METADATA_ROW: Keep = Keep::Fields(&[("metadata", Keep::Fields(&[("name", Keep::All), ("creationTimestamp", Keep::All)]))]);

/// The parts of an object of `resource` its Table row reads.
pub fn row_keeps(resource: &ResourceType) -> &'static Keep {
    match Printer::of(resource) {
        Printer::Pod => &POD_ROW,
        Printer::Default if resource.printer_columns.is_empty() => &METADATA_ROW,
        _ => &Keep::All,
    }
}

/// Whether the rows of a type are printed from templates made at ingest
/// ([`row_template`]): not for custom resources' printer columns, which can
/// change while objects are stored.
pub fn has_row_template(resource: &ResourceType) -> bool {
    !(Printer::of(resource) == Printer::Default && !resource.printer_columns.is_empty())
}

/// What ingest parses of an object of a type, in one pruned parse: what its
/// field selectors read ([`crate::fields::keep`]) and, when its rows have
/// templates, what its row reads ([`row_keeps`]).
pub fn ingest_keep(resource: &ResourceType) -> &'static Keep {
    let fields = crate::fields::keep(&resource.group, &resource.plural);
    if !has_row_template(resource) {
        return fields;
    }
    type Merged = std::collections::HashMap<(String, String), &'static Keep>;
    static MERGED: std::sync::OnceLock<std::sync::Mutex<Merged>> = std::sync::OnceLock::new();
    let mut merged = MERGED.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    // One per built-in type (the key decides both parts), made once.
    merged
        .entry((resource.group.clone(), resource.plural.clone()))
        .or_insert_with(|| Box::leak(Box::new(merge_keeps(row_keeps(resource), fields))))
}

/// Parses an object's JSON, valid JSON already checked, keeping only what
/// `keep` names: the other members are skipped, never built nor checked
/// again (a pod's row needs about half of its bytes). See [`crate::scan`].
pub fn parse_for_row<'a>(json: &'a [u8], keep: &'static Keep) -> serde_json::Result<crate::json::Node<'a>> {
    crate::scan::prune(json, keep)
}

/// Starts a mark in a row template's strings: a NUL character, written
/// `\u0000` in the template's JSON, then what the mark stands for.
pub(super) const ROW_MARK: char = '\u{0}';
/// After [`ROW_MARK`]: the served name's suffix (`_<cluster>` or nothing).
pub(super) const SUFFIX_MARK: char = 'Q';
/// After [`ROW_MARK`]: the age of a time, `S<Unix seconds>.<nanoseconds>`
/// and a closing [`ROW_MARK`].
pub(super) const SINCE_MARK: char = 'S';
/// The first byte of every row template: the version of its layout. A
/// template of another version is not used (the row is printed from the body).
pub(super) const ROW_TEMPLATE_VERSION: u8 = 1;

/// A Table row computed once, when the object is ingested, and printed for
/// each request by [`write_row_template`]: the row's `"cells":[...]` (and
/// `,"conditions":[...]`), with marks where the served name's suffix and
/// the ages go, since those depend on the request and the time.
///
/// `object` holds what [`row_keeps`] names (or more); `name` is the
/// member's name of the object. `None` for types whose columns can change
/// while objects are stored (custom resources' printer columns) and for
/// objects with a NUL character in their text, which a mark could not be
/// told from. `may_hold_nul`: false when the object's text is known to
/// hold none (its strings and keys are not searched then).
pub fn row_template<J: Json>(resource: &ResourceType, object: &J, name: &str, cluster: &str, may_hold_nul: bool) -> Option<Vec<u8>> {
    if Printer::of(resource) == Printer::Default && !resource.printer_columns.is_empty() {
        return None;
    }
    if (may_hold_nul && has_nul(object)) || name.contains(ROW_MARK) || cluster.contains(ROW_MARK) {
        return None;
    }
    let display_name = format!("{name}{ROW_MARK}{SUFFIX_MARK}");
    let cells = cells_at(resource, object, &display_name, cluster, Now::Later);
    let mut out = vec![ROW_TEMPLATE_VERSION];
    out.extend_from_slice(b"\"cells\":");
    serde_json::to_writer(&mut out, &cells).ok()?;
    let conditions = row_conditions(resource, object);
    if !conditions.is_empty() {
        out.extend_from_slice(b",\"conditions\":");
        serde_json::to_writer(&mut out, &conditions).ok()?;
    }
    Some(out)
}

/// Whether any key or string in `value` has a NUL character.
fn has_nul<J: Json>(value: &J) -> bool {
    if let Some(s) = value.as_str() {
        return s.contains(ROW_MARK);
    }
    if let Some(items) = value.as_array() {
        return items.iter().any(has_nul);
    }
    value.members().is_some_and(|members| members.into_iter().any(|(k, v)| k.contains(ROW_MARK) || has_nul(v)))
}

/// Writes the row of a template from [`row_template`] as printed at `now`,
/// for the object's name served with `name_suffix`: the row's members,
/// without braces. Returns false, having written nothing, for a template
/// of another version or a damaged one.
pub fn write_row_template(template: &[u8], name_suffix: &str, now: DateTime<Utc>, out: &mut Vec<u8>) -> bool {
    const MARK: &[u8] = b"\\u0000";
    let start = out.len();
    let Some((&ROW_TEMPLATE_VERSION, text)) = template.split_first() else { return false };
    let (mut i, mut copied) = (0, 0);
    while i < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        if !text[i..].starts_with(MARK) {
            // Another escape: its second byte never starts a mark.
            i += 2;
            continue;
        }
        out.extend_from_slice(&text[copied..i]);
        let rest = &text[i + MARK.len()..];
        match rest.first().map(|&b| b as char) {
            Some(SUFFIX_MARK) => {
                write_json_text(out, name_suffix);
                i += MARK.len() + 1;
            }
            Some(SINCE_MARK) => {
                let time = rest
                    .windows(MARK.len())
                    .position(|w| w == MARK)
                    .and_then(|end| Some((end, parse_mark_time(&rest[1..end])?)));
                let Some((end, time)) = time else {
                    out.truncate(start);
                    return false;
                };
                out.extend_from_slice(human_duration(now.signed_duration_since(time)).as_bytes());
                i += MARK.len() + end + MARK.len();
            }
            _ => {
                out.truncate(start);
                return false;
            }
        }
        copied = i;
    }
    out.extend_from_slice(&text[copied.min(text.len())..]);
    true
}

/// The time of a [`SINCE_MARK`]: `<Unix seconds>.<nanoseconds>`.
fn parse_mark_time(text: &[u8]) -> Option<DateTime<Utc>> {
    let text = std::str::from_utf8(text).ok()?;
    let (seconds, nanos) = text.split_once('.')?;
    DateTime::from_timestamp(seconds.parse().ok()?, nanos.parse().ok()?)
}

/// Writes `text` as the inside of a JSON string.
fn write_json_text(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.extend_from_slice(text.as_bytes());
    } else {
        let quoted = serde_json::to_vec(text).expect("strings serialize");
        out.extend_from_slice(&quoted[1..quoted.len() - 1]);
    }
}
