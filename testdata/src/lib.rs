//! kubefold testdata.
