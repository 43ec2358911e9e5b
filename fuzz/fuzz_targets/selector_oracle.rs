//! kubefold's label and field selectors against the simulator's own
//! (`testdata/src/sim/selector.rs`, written apart from the Kubernetes docs)
//! on arbitrary text: both accept the same selectors, with the same error
//! messages, print them the same, and select the same label and field sets.
//!
//! The input is split at its first NUL byte: the selector, then the sets it
//! is matched against (lines of `key=value` pairs joined by `;`).
//!
//! The simulator's module is compiled in directly: it depends on nothing but
//! `std` and `serde_json`, and building the whole simulator crate here would
//! add its HTTP server to every fuzz build.
#![no_main]

use std::collections::BTreeMap;

use kubefold_engine::selector as engine;
use libfuzzer_sys::fuzz_target;

#[path = "../../testdata/src/sim/selector.rs"]
#[allow(dead_code)]
mod sim;

/// The label or field sets named by the tail of the input; always at least
/// one set per key the selector could use, so matching is exercised even
/// when the tail is empty.
fn sets(tail: &str, keys: &[String]) -> Vec<BTreeMap<String, String>> {
    let mut sets: Vec<BTreeMap<String, String>> = tail
        .lines()
        .map(|line| {
            line.split(';')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    sets.push(BTreeMap::new());
    for key in keys {
        for value in ["", "5", "a"] {
            sets.push(BTreeMap::from([(key.clone(), value.to_string())]));
        }
    }
    sets
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let (selector, tail) = input.split_once('\0').unwrap_or((input, ""));

    match (engine::LabelSelector::parse(selector), sim::LabelSelector::parse(selector)) {
        (Ok(theirs), Ok(ours)) => {
            assert_eq!(theirs.to_string(), ours.to_string(), "printed form of {selector:?}");
            let keys: Vec<String> = ours.requirements.iter().map(|r| r.key.clone()).collect();
            for labels in sets(tail, &keys) {
                assert_eq!(theirs.matches_map(&labels), ours.matches_map(&labels), "{selector:?} on {labels:?}");
            }
        }
        (Err(theirs), Err(ours)) => assert_eq!(theirs.to_string(), ours.to_string(), "error of {selector:?}"),
        (theirs, ours) => panic!("label selector {selector:?}: engine {theirs:?}, simulator {ours:?}"),
    }

    match (engine::FieldSelector::parse(selector), sim::FieldSelector::parse(selector)) {
        (Ok(theirs), Ok(ours)) => {
            assert_eq!(theirs.to_string(), ours.to_string(), "printed form of {selector:?}");
            let keys: Vec<String> = ours.terms.iter().map(|t| t.field.clone()).collect();
            for fields in sets(tail, &keys) {
                let pairs: Vec<(String, String)> = fields.into_iter().collect();
                assert_eq!(theirs.matches_pairs(&pairs), ours.matches_pairs(&pairs), "{selector:?} on {pairs:?}");
            }
        }
        (Err(theirs), Err(ours)) => assert_eq!(theirs.to_string(), ours.to_string(), "error of {selector:?}"),
        (theirs, ours) => panic!("field selector {selector:?}: engine {theirs:?}, simulator {ours:?}"),
    }
});
