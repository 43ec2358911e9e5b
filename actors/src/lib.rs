//! kubefold actors.
