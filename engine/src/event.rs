//! event.
