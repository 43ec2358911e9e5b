//! Cell formatting the printers share: reading values at JSON pointers,
//! ages (`HumanDuration`), label selectors and labels, short lists.

use chrono::{DateTime, Utc};

use super::row::{ROW_MARK, SINCE_MARK};
use super::Now;
use crate::json::Json;
use crate::selector::LabelSelector;

/// Kubernetes' duration formatting for AGE (duration.HumanDuration: "5s", "3m2s", "10m", "2d3h", "3y45d" ...).
///
/// About two significant figures; up to two seconds in the future reads
/// `0s` (clock skew), further in the future `<invalid>`.
pub fn human_duration(d: chrono::Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d.num_minutes();
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d.num_hours();
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            dy => format!("{years}y{dy}d"),
        };
    }
    format!("{years}y")
}

/// The string at a JSON pointer, `""` when absent.
pub(super) fn text<'a, J: Json>(value: &'a J, pointer: &str) -> &'a str {
    value
        .walk(pointer)
        .and_then(J::as_str)
        .unwrap_or_default()
}

/// The integer at a JSON pointer, 0 when absent (Go's zero value).
pub(super) fn int<J: Json>(value: &J, pointer: &str) -> i64 {
    value.walk(pointer).and_then(J::as_i64).unwrap_or(0)
}

/// The array at a JSON pointer, empty when absent.
pub(super) fn items<'a, J: Json>(value: &'a J, pointer: &str) -> &'a [J] {
    value
        .walk(pointer)
        .and_then(J::as_array)
        .unwrap_or(&[])
}

/// A timestamp at a JSON pointer; `None` when absent or unparsable (Go's zero time).
pub(super) fn timestamp<J: Json>(value: &J, pointer: &str) -> Option<DateTime<Utc>> {
    let text = value.walk(pointer).and_then(J::as_str)?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `translateTimestampSince`: the age of a timestamp, `<unknown>` when unset.
pub(super) fn since(time: Option<DateTime<Utc>>, now: Now) -> String {
    match time {
        Some(time) => match now {
            Now::At(now) => human_duration(now.signed_duration_since(time)),
            Now::Later => format!("{ROW_MARK}{SINCE_MARK}{}.{:09}{ROW_MARK}", time.timestamp(), time.timestamp_subsec_nanos()),
        },
        None => "<unknown>".to_string(),
    }
}

pub(super) fn age<J: Json>(object: &J, now: Now) -> String {
    since(timestamp(object, "/metadata/creationTimestamp"), now)
}

/// `metav1.FormatLabelSelector`: `<none>` for an empty or missing selector,
/// `<error>` for an invalid one.
pub(super) fn format_label_selector<J: Json>(selector: Option<&J>) -> String {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return "<none>".to_string();
    };
    match LabelSelector::from_label_selector(&selector.as_value()) {
        Ok(parsed) if parsed.is_empty() => "<none>".to_string(),
        Ok(parsed) => parsed.to_string(),
        Err(_) => "<error>".to_string(),
    }
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
pub(super) fn format_labels<J: Json>(labels: Option<&J>) -> String {
    let pairs: Vec<String> = labels
        .and_then(J::members)
        .map(|mut members| {
            // Members are in their written order: sorted by key here.
            members.sort_by_key(|(k, _)| *k);
            members.into_iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    }
}

/// `listWithMoreString` over at most three items: `a,b,c + 2 more...`, `<unset>` when empty.
pub(super) fn list_with_more(all: impl Iterator<Item = String>) -> String {
    const MAX: usize = 3;
    let all: Vec<String> = all.collect();
    if all.len() > MAX {
        return format!("{} + {} more...", all[..MAX].join(","), all.len() - MAX);
    }
    if all.is_empty() {
        "<unset>".to_string()
    } else {
        all.join(",")
    }
}

pub(super) fn condition_is<J: Json>(conditions: &[J], type_: &str, status: &str) -> bool {
    conditions.iter().any(|c| {
        c.get("type").and_then(J::as_str) == Some(type_)
            && c.get("status").and_then(J::as_str) == Some(status)
    })
}
