//! `paging::decode` on arbitrary text (a `continue` query parameter): it
//! never panics, refuses every token not made with the server's secret, and
//! tokens made by `encode` decode to what was encoded whatever the key holds.
#![no_main]

use kubefold_engine::event::ObjectKey;
use kubefold_engine::paging::{decode, encode, TokenError};
use libfuzzer_sys::fuzz_target;

/// The secret the seeds in `fuzz/seeds/continue_token/` were made with.
const SECRET: &[u8] = b"kubefold-fuzz-secret";

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((rv, key)) = decode(SECRET, token) {
        // Only a token made with SECRET decodes; re-encoding it is accepted too.
        assert_eq!(
            decode(SECRET, &encode(SECRET, rv, &key)),
            Ok((rv, key.clone()))
        );
        assert_eq!(
            decode(b"another-secret", token),
            Err(TokenError::Tampered),
            "{token:?}"
        );
    }

    // The input as a key: `namespace/name/cluster` with any characters.
    let mut parts = token.splitn(3, '/');
    let key = ObjectKey {
        namespace: parts.next().unwrap_or_default().to_string(),
        name: parts.next().unwrap_or_default().to_string(),
        cluster: parts.next().unwrap_or_default().to_string(),
    };
    let rv = data
        .iter()
        .fold(0u64, |h, b| h.rotate_left(7) ^ u64::from(*b));
    let encoded = encode(SECRET, rv, &key);
    assert_eq!(decode(SECRET, &encoded), Ok((rv, key.clone())), "{key:?}");
    assert_eq!(
        decode(b"another-secret", &encoded),
        Err(TokenError::Tampered),
        "{key:?}"
    );
});
