//! The type catalog: the types known (built in, or discovered from members
//! and persisted), the resource selection in force, and the catalog served
//! from them. The selection is the supervisor's to set (through its
//! [`Supervision`](super::Supervision)); a type grows only by discovery, from
//! the watcher that discovered it (through its
//! [`WatcherReport`](super::WatcherReport)). Everyone reads.

use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use kubefold_engine::resources::{self, ResourceType, TypeRef};
use kubefold_engine::selection::ResourceSelection;
use kubefold_store::Store;

/// The store meta key of the types discovered from members (JSON list of
/// [`ResourceType`]): a restart serves them before any member is contacted.
pub const DISCOVERED_TYPES_KEY: &str = "discovered-types";

/// The types discovered from members before, as the store keeps them; none
/// when unreadable (they are discovered again).
pub fn discovered_types(store: &Store) -> Vec<ResourceType> {
    let bytes = match store.meta(DISCOVERED_TYPES_KEY) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Vec::new(),
        Err(e) => {
            tracing::warn!(error = %e, "Discovered resource types unreadable; they are discovered again.");
            return Vec::new();
        }
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "Discovered resource types unreadable; they are discovered again.");
        Vec::new()
    })
}

/// The types known and selected.
pub struct Catalog {
    catalog: ArcSwap<Vec<ResourceType>>,
    known: RwLock<Vec<ResourceType>>,
    selection: ArcSwap<ResourceSelection>,
}

impl Catalog {
    /// The `known` types under the default selection (every built-in type
    /// from every cluster).
    pub(super) fn new(known: Vec<ResourceType>) -> Catalog {
        let selection = ResourceSelection::default();
        Catalog {
            catalog: ArcSwap::from_pointee(selection.catalog(&known)),
            known: RwLock::new(known),
            selection: ArcSwap::from_pointee(selection),
        }
    }

    /// The aggregated resource types: those selected and known, as
    /// discovery serves them now.
    pub fn catalog(&self) -> Arc<Vec<ResourceType>> {
        self.catalog.load_full()
    }

    /// The resource selection in force.
    pub fn selection(&self) -> Arc<ResourceSelection> {
        self.selection.load_full()
    }

    /// The type `type_ref` names: a built-in one, or one discovered from a member.
    pub fn known_type(&self, type_ref: &TypeRef) -> Option<ResourceType> {
        if let Some(r) = resources::builtin().into_iter().find(|r| type_ref.names(r)) {
            return Some(r);
        }
        self.known.read().unwrap_or_else(|e| e.into_inner()).iter().find(|r| type_ref.names(r)).cloned()
    }

    /// The known type with the store key `key` (`example.com/v1/widgets`).
    pub fn known_type_by_key(&self, key: &str) -> Option<ResourceType> {
        if let Some(r) = resources::find_by_key(&resources::builtin(), key) {
            return Some(r.clone());
        }
        resources::find_by_key(&self.known.read().unwrap_or_else(|e| e.into_inner()), key).cloned()
    }

    /// Puts `selection` in force for discovery at once.
    pub(super) fn set_selection(&self, selection: ResourceSelection) {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        self.catalog.store(Arc::new(selection.catalog(&known)));
        self.selection.store(Arc::new(selection));
    }

    /// Records a type discovered from a member (new, or with changed
    /// details such as printer columns): persisted in `store`, and served
    /// at once when selected.
    pub(super) fn learn_type(&self, store: &Store, resource: ResourceType) {
        if resource.is_builtin() {
            return;
        }
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        match known.iter_mut().find(|r| r.key() == resource.key()) {
            Some(existing) if *existing == resource => return,
            Some(existing) => *existing = resource,
            None => known.push(resource),
        }
        let discovered: Vec<&ResourceType> = known.iter().filter(|r| !r.is_builtin()).collect();
        match serde_json::to_vec(&discovered) {
            Ok(bytes) => {
                if let Err(e) = store.put_meta(DISCOVERED_TYPES_KEY, &bytes) {
                    tracing::error!(error = %e, "Cannot persist the discovered resource types.");
                }
            }
            Err(e) => tracing::error!(error = %e, "Cannot encode the discovered resource types."),
        }
        self.catalog.store(Arc::new(self.selection().catalog(&known)));
    }
}
