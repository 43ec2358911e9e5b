//! `LabelSelector::parse` on arbitrary text (a `labelSelector` query
//! parameter): it never panics, and a selector it accepts prints (`Display`,
//! the canonical `labels.Selector.String()` form) to text that parses back
//! to the same selector and prints the same again.
#![no_main]

use kubefold_engine::selector::LabelSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Query parameters reach the parser as `&str`; other bytes cannot.
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(selector) = LabelSelector::parse(input) else {
        return;
    };
    let canonical = selector.to_string();
    let reparsed = LabelSelector::parse(&canonical).unwrap_or_else(|e| {
        panic!("{input:?} printed as {canonical:?}, which does not parse: {e}")
    });
    assert_eq!(reparsed, selector, "{input:?} printed as {canonical:?}");
    assert_eq!(
        reparsed.to_string(),
        canonical,
        "{input:?}: canonical form is not stable"
    );
    // Matching a labelled object never panics either, whatever the values.
    let labels: Vec<(String, String)> = selector
        .requirements
        .iter()
        .map(|r| (r.key.clone(), r.values.first().cloned().unwrap_or_default()))
        .collect();
    let _ = selector.matches_pairs(&labels);
});
