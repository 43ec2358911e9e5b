//! Continue tokens for paginated lists ("Retrieving large results sets in
//! chunks", Kubernetes API Concepts): opaque to clients, they carry the
//! snapshot RV that every page is read at and the last key served, and a
//! keyed checksum so that a modified token is refused instead of serving a
//! wrong page.
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>

use std::hash::{Hash, Hasher};

use base64::Engine;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::event::ObjectKey;

/// Why a token was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not base64 or not the token's JSON.
    #[error("continue key is not valid: malformed token")]
    Malformed,
    /// The checksum does not match: the token was modified.
    #[error("continue key is not valid: token was modified")]
    Tampered,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    rv: u64,
    ns: String,
    name: String,
    cluster: String,
    mac: String,
}

fn mac(secret: &[u8], rv: u64, key: &ObjectKey) -> String {
    // Two SipHash passes seeded differently give 128 bits of checksum.
    let digest = |seed: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        secret.hash(&mut h);
        rv.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    format!("{:016x}{:016x}", digest(1), digest(2))
}

/// Encodes a token: the next page starts after `last` at snapshot `rv`.
pub fn encode(secret: &[u8], rv: u64, last: &ObjectKey) -> String {
    let payload = Payload {
        rv,
        ns: last.namespace.clone(),
        name: last.name.clone(),
        cluster: last.cluster.clone(),
        mac: mac(secret, rv, last),
    };
    let json = serde_json::to_vec(&payload).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// Decodes a token into (snapshot RV, last key served).
pub fn decode(secret: &[u8], token: &str) -> Result<(u64, ObjectKey), TokenError> {
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| TokenError::Malformed)?;
    let p: Payload = serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
    let key = ObjectKey { namespace: p.ns, name: p.name, cluster: p.cluster };
    if mac(secret, p.rv, &key) != p.mac {
        return Err(TokenError::Tampered);
    }
    Ok((p.rv, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey { namespace: "default".into(), name: "web-0".into(), cluster: "member1".into() }
    }

    #[test]
    fn tokens_round_trip() {
        let t = encode(b"s", 42, &key());
        assert_eq!(decode(b"s", &t), Ok((42, key())));
    }

    #[test]
    fn modified_tokens_are_refused() {
        let t = encode(b"s", 42, &key());
        assert_eq!(decode(b"other", &t), Err(TokenError::Tampered));
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&t).unwrap();
        let forged = String::from_utf8(json).unwrap().replace("\"rv\":42", "\"rv\":41");
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
        assert_eq!(decode(b"s", &forged), Err(TokenError::Tampered));
        assert_eq!(decode(b"s", "not a token!"), Err(TokenError::Malformed));
        assert_eq!(decode(b"s", "e30"), Err(TokenError::Malformed)); // "{}"
        // Every single-character change is refused or decodes to the same token.
        for i in 0..t.len() {
            let mut bytes = t.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            if changed != t {
                assert!(decode(b"s", &changed).is_err() || decode(b"s", &changed) == Ok((42, key())));
            }
        }
    }
}
