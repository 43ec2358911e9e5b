//! kubefold api.
