//! kubefold engine.
