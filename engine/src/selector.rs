//! selector.
