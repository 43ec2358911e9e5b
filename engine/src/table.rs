//! table.
