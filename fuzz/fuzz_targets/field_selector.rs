//! `FieldSelector::parse` on arbitrary text (a `fieldSelector` query
//! parameter): it never panics, and a selector it accepts prints to text
//! (values escaped) that parses back to the same terms.
//!
//! The order of the terms is compared as a set: like apimachinery's
//! `fields.ParseSelector`, the parser orders terms by their text as written,
//! so `a==z,a=\=` and its printed form `a=z,a=\=` may list the same terms in
//! another order.
#![no_main]

use kubefold_engine::selector::{FieldRequirement, FieldSelector};
use libfuzzer_sys::fuzz_target;

fn sorted(selector: &FieldSelector) -> Vec<(String, bool, String)> {
    let mut terms: Vec<_> = selector
        .requirements
        .iter()
        .map(
            |FieldRequirement {
                 field,
                 negated,
                 value,
             }| (field.clone(), *negated, value.clone()),
        )
        .collect();
    terms.sort();
    terms
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(selector) = FieldSelector::parse(input) else {
        return;
    };
    let canonical = selector.to_string();
    let reparsed = FieldSelector::parse(&canonical).unwrap_or_else(|e| {
        panic!("{input:?} printed as {canonical:?}, which does not parse: {e}")
    });
    assert_eq!(
        sorted(&reparsed),
        sorted(&selector),
        "{input:?} printed as {canonical:?}"
    );
    // A missing field reads as "": matching an empty object never panics.
    let _ = selector.matches_pairs(&[]);
});
