//! Continue tokens for paginated lists ("Retrieving large results sets in
//! chunks", Kubernetes API Concepts): opaque to clients, they carry the
//! snapshot RV that every page is read at and the last key served, and a
//! keyed checksum so that a modified token is refused instead of serving a
//! wrong page. A token may also carry how many objects the pages before
//! the next one held, so that the next page's `remainingItemCount` needs
//! no walk over the rest of the list.
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
    /// Objects of the pages before the next one, when known. Tokens
    /// without it (made before it existed) stay valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<u64>,
    mac: String,
}

fn mac(secret: &[u8], rv: u64, key: &ObjectKey, listed: Option<u64>) -> String {
    // Two SipHash passes seeded differently give 128 bits of checksum.
    let digest = |seed: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        secret.hash(&mut h);
        rv.hash(&mut h);
        key.hash(&mut h);
        if let Some(n) = listed {
            n.hash(&mut h);
        }
        h.finish()
    };
    format!("{:016x}{:016x}", digest(1), digest(2))
}

/// Encodes a token: the next page starts after `last` at snapshot `rv`.
pub fn encode(secret: &[u8], rv: u64, last: &ObjectKey) -> String {
    encode_listed(secret, rv, last, None)
}

/// [`encode`], with the number of objects the pages up to `last` held.
pub fn encode_listed(secret: &[u8], rv: u64, last: &ObjectKey, listed: Option<u64>) -> String {
    let payload = Payload {
        rv,
        ns: last.namespace.clone(),
        name: last.name.clone(),
        cluster: last.cluster.clone(),
        n: listed,
        mac: mac(secret, rv, last, listed),
    };
    let json = serde_json::to_vec(&payload).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// Decodes a token into (snapshot RV, last key served).
pub fn decode(secret: &[u8], token: &str) -> Result<(u64, ObjectKey), TokenError> {
    decode_listed(secret, token).map(|(rv, key, _)| (rv, key))
}

/// [`decode`], with the number of objects the pages before held when the
/// token says.
pub fn decode_listed(secret: &[u8], token: &str) -> Result<(u64, ObjectKey, Option<u64>), TokenError> {
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| TokenError::Malformed)?;
    let p: Payload = serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
    let key = ObjectKey { namespace: p.ns, name: p.name, cluster: p.cluster };
    if mac(secret, p.rv, &key, p.n) != p.mac {
        return Err(TokenError::Tampered);
    }
    Ok((p.rv, key, p.n))
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
    fn tokens_carry_the_objects_listed_and_older_tokens_stay_valid() {
        let t = encode_listed(b"s", 42, &key(), Some(1500));
        assert_eq!(decode_listed(b"s", &t), Ok((42, key(), Some(1500))));
        assert_eq!(decode(b"s", &t), Ok((42, key())));
        // A token without the count (as made before it existed) decodes, without one.
        let old = encode(b"s", 42, &key());
        assert!(!String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&old).unwrap()).unwrap().contains("\"n\""));
        assert_eq!(decode_listed(b"s", &old), Ok((42, key(), None)));
        // The count is under the checksum: changed, added or removed, refused.
        let json = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&t).unwrap()).unwrap();
        for forged in [json.replace("\"n\":1500", "\"n\":1499"), json.replace("\"n\":1500,", "")] {
            let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
            assert_eq!(decode_listed(b"s", &forged), Err(TokenError::Tampered));
        }
        let json = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&old).unwrap()).unwrap();
        let added = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.replace("\"mac\"", "\"n\":7,\"mac\""));
        assert_eq!(decode_listed(b"s", &added), Err(TokenError::Tampered));
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
