//! kubefold store.
