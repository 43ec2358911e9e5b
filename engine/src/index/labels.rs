//! The merged index's objects by label: for each type, each `key=value`
//! label its objects carry and the keys of those objects, in list order.
//! A label selector with an equality requirement (`shard=s7`, `app in
//! (web)`) reads the objects that carry that label instead of walking the
//! type: a 1% selector over two million pods walked two million entries.
//!
//! Only keys are held (shared with the index's maps): a new version of an
//! object with the same labels, the common change, leaves them as they are.

use std::sync::Arc;

use crate::event::{IndexEntry, ObjectKey};

/// One type's labels: `key=value` to the keys of the objects that carry it.
pub(super) type TypeLabels = imbl::HashMap<String, imbl::OrdSet<Arc<ObjectKey>>>;

/// Writes `key=value` into `pair` (a label key never holds `=`).
fn pair_text<'a>(pair: &'a mut String, key: &str, value: &str) -> &'a str {
    pair.clear();
    pair.push_str(key);
    pair.push('=');
    pair.push_str(value);
    pair.as_str()
}

/// Moves `key` from the labels of `old` to those of `new` (either absent
/// for an object added or taken out); nothing when they carry the same.
pub(super) fn relabel(labels: &mut TypeLabels, key: &Arc<ObjectKey>, old: Option<&IndexEntry>, new: Option<&IndexEntry>) {
    if let (Some(old), Some(new)) = (old, new) {
        if old.labels().eq(new.labels()) {
            return;
        }
    }
    let mut pair = String::new();
    if let Some(old) = old {
        for (k, v) in old.labels() {
            if new.is_some_and(|new| new.label(k) == Some(v)) {
                continue;
            }
            let text = pair_text(&mut pair, k, v);
            if let Some(keys) = labels.get_mut(text) {
                keys.remove::<ObjectKey>(key);
                if keys.is_empty() {
                    labels.remove(text);
                }
            }
        }
    }
    if let Some(new) = new {
        for (k, v) in new.labels() {
            if old.is_some_and(|old| old.label(k) == Some(v)) {
                continue;
            }
            let text = pair_text(&mut pair, k, v);
            match labels.get_mut(text) {
                Some(keys) => {
                    keys.insert(key.clone());
                }
                None => {
                    labels.insert(text.to_string(), imbl::OrdSet::unit(key.clone()));
                }
            }
        }
    }
}

/// Labels of objects loaded at once, in plain maps, added to the
/// persistent [`TypeLabels`] once (see `Index::load_all`).
#[derive(Default)]
pub(super) struct LoadedLabels {
    pairs: std::collections::HashMap<String, imbl::OrdSet<Arc<ObjectKey>>>,
    pair: String,
}

impl LoadedLabels {
    /// Adds one loaded object.
    pub(super) fn add(&mut self, key: &Arc<ObjectKey>, entry: &IndexEntry) {
        for (k, v) in entry.labels() {
            let text = pair_text(&mut self.pair, k, v);
            match self.pairs.get_mut(text) {
                Some(keys) => {
                    keys.insert(key.clone());
                }
                None => {
                    self.pairs.insert(text.to_string(), imbl::OrdSet::unit(key.clone()));
                }
            }
        }
    }

    /// Adds what was loaded to `labels`.
    pub(super) fn into(self, labels: &mut TypeLabels) {
        for (pair, keys) in self.pairs {
            match labels.get_mut(pair.as_str()) {
                Some(existing) => keys.into_iter().for_each(|key| {
                    existing.insert(key);
                }),
                None => {
                    labels.insert(pair, keys);
                }
            }
        }
    }
}

/// The keys of the objects of one type that carry `key=value`, if any does.
pub(super) fn carrying<'a>(labels: &'a TypeLabels, key: &str, value: &str) -> Option<&'a imbl::OrdSet<Arc<ObjectKey>>> {
    let mut pair = String::with_capacity(key.len() + value.len() + 1);
    labels.get(pair_text(&mut pair, key, value))
}
