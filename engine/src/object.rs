//! object.
