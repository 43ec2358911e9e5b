//! fields.
