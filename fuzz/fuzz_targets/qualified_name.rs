//! `names::parse` on arbitrary text (a name in a request path or body): it
//! never panics; a qualified result is exact (`qualify` gives the input
//! back, the cluster part has no separator), and any non-empty name
//! qualified with a valid cluster name parses back to the same two parts.
#![no_main]

use kubefold_engine::names::{is_valid_cluster_name, parse, qualify, RequestedName, SEPARATOR};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    match parse(input) {
        RequestedName::Qualified { name, cluster } => {
            assert!(!name.is_empty() && !cluster.is_empty(), "{input:?}");
            assert!(!cluster.contains(SEPARATOR), "{input:?}");
            assert_eq!(qualify(name, cluster), input);
        }
        RequestedName::Bare(name) => {
            assert_eq!(name, input);
            // Bare only when no split gives two non-empty parts.
            if let Some((n, c)) = input.rsplit_once(SEPARATOR) {
                assert!(n.is_empty() || c.is_empty(), "{input:?}");
            }
        }
    }

    // The input as `name|cluster`.
    if let Some((name, cluster)) = input.split_once('|') {
        if !name.is_empty() && is_valid_cluster_name(cluster) {
            assert_eq!(
                parse(&qualify(name, cluster)),
                RequestedName::Qualified { name, cluster },
                "{input:?}"
            );
        }
    }
});
