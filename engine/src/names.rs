//! names.
