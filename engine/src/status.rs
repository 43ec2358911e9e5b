//! status.
