//! Continue tokens for paginated lists ("Retrieving large results sets in
//! chunks", Kubernetes API Concepts): opaque to clients, they carry the
//! snapshot RV that every page is read at and the last key served, and a
//! keyed checksum (HMAC-SHA256 under kubefold's token secret) so that a
//! modified token is refused instead of serving a wrong page. A token may also carry how many objects the pages before
//! the next one held, so that the next page's `remainingItemCount` needs
//! no walk over the rest of the list.
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>

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
    /// A token of an earlier kubefold, whose checksum is no longer made:
    /// the client starts the list again, as after a compaction.
    #[error("the provided continue parameter is too old to display a consistent list result (it was made by an earlier kubefold); start a new list without the continue parameter")]
    Outdated,
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

/// Hex digits of the checksum tokens carry; tokens of an earlier kubefold
/// carried 32 (two SipHash passes of std's `DefaultHasher`, whose algorithm
/// std may change between releases).
const MAC_HEX_DIGITS: usize = 64;

/// What the checksum covers: everything the token says, each field
/// length-prefixed so that no two payloads share an input.
fn mac_input(rv: u64, key: &ObjectKey, listed: Option<u64>) -> Vec<u8> {
    let mut input = Vec::with_capacity(64 + key.namespace.len() + key.name.len() + key.cluster.len());
    input.extend_from_slice(&rv.to_be_bytes());
    for field in [&key.namespace, &key.name, &key.cluster] {
        input.extend_from_slice(&(field.len() as u64).to_be_bytes());
        input.extend_from_slice(field.as_bytes());
    }
    match listed {
        Some(n) => {
            input.push(1);
            input.extend_from_slice(&n.to_be_bytes());
        }
        None => input.push(0),
    }
    input
}

/// HMAC-SHA256 under `secret` of [`mac_input`], in hex.
fn mac(secret: &[u8], rv: u64, key: &ObjectKey, listed: Option<u64>) -> String {
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret), &mac_input(rv, key, listed));
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string; `None` when it is not one.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    text.as_bytes().chunks(2).map(|pair| Some(digit(*pair.first()?)? << 4 | digit(*pair.get(1)?)?)).collect()
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
    if p.mac.len() != MAC_HEX_DIGITS {
        return Err(if p.mac.len() == 32 && p.mac.bytes().all(|b| b.is_ascii_hexdigit()) { TokenError::Outdated } else { TokenError::Tampered });
    }
    // ring compares the tags in constant time.
    let tag = from_hex(&p.mac).ok_or(TokenError::Tampered)?;
    ring::hmac::verify(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret), &mac_input(p.rv, &key, p.n), &tag).map_err(|_| TokenError::Tampered)?;
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
    fn tokens_of_an_earlier_kubefold_are_outdated_not_tampered() {
        // A token as kubefold wrote them before HMAC-SHA256: a 32-digit checksum.
        let old = r#"{"rv":42,"ns":"default","name":"web-0","cluster":"member1","mac":"0123456789abcdef0123456789abcdef"}"#;
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(old);
        assert_eq!(decode(b"s", &old), Err(TokenError::Outdated));
        let t = encode(b"s", 42, &key());
        let json = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&t).unwrap()).unwrap();
        let mac = serde_json::from_str::<serde_json::Value>(&json).unwrap()["mac"].as_str().unwrap().to_string();
        assert_eq!(mac.len(), 64, "HMAC-SHA256 in hex");
        // Any other length is a modified token.
        let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.replace(&mac, &mac[..40]));
        assert_eq!(decode(b"s", &short), Err(TokenError::Tampered));
    }

    /// The checksum is HMAC-SHA256 as RFC 4231 defines it (its test case 2
    /// checks the primitive), over the token's fields.
    #[test]
    fn the_checksum_is_hmac_sha256() {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe");
        let tag = ring::hmac::sign(&key, b"what do ya want for nothing?");
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        // Stable across builds and releases: a fixed input gives a fixed checksum.
        let k = ObjectKey { namespace: "default".into(), name: "web-0".into(), cluster: "member1".into() };
        assert_eq!(mac(b"secret", 42, &k, Some(7)), mac(b"secret", 42, &k, Some(7)));
        assert_ne!(mac(b"secret", 42, &k, Some(7)), mac(b"secret", 42, &k, None));
        let shifted = ObjectKey { namespace: "defaultweb-0".into(), name: "".into(), cluster: "member1".into() };
        assert_ne!(mac(b"secret", 42, &k, None), mac(b"secret", 42, &shifted, None), "fields are length-prefixed");
        assert_eq!(from_hex("00ff7a"), Some(vec![0, 255, 122]));
        assert_eq!(from_hex("0g"), None);
        assert_eq!(from_hex("abc"), None);
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
