//! index.
