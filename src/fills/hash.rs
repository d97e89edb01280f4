//! K3: the request hash stored with an idempotency key.
//!
//! Canonical form: the body parsed as JSON and written back by `serde_json`
//! with object keys sorted (byte order), no insignificant whitespace, strings
//! escaped as serde_json escapes them, numbers as serde_json prints them.
//! So whitespace and key order do not change the hash; any change of a value
//! (including `"1.0"` vs `"1"`: decimals are strings) does. A body that is
//! not JSON is hashed as its raw bytes (it is rejected upstream anyway).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Canonical bytes of a JSON value (sorted keys, no whitespace).
pub fn canonical_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Serialising a &str cannot fail.
                out.extend(serde_json::to_vec(k).unwrap_or_default());
                out.push(b':');
                write_canonical(&m[k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).unwrap_or_default()),
    }
}

/// Hex SHA-256 of the canonical form of a request body (K3).
pub fn request_hash(body: &[u8]) -> String {
    let bytes = match serde_json::from_slice::<Value>(body) {
        Ok(v) => canonical_json(&v),
        Err(_) => body.to_vec(),
    };
    hex::encode(Sha256::digest(&bytes))
}

/// Hex SHA-256 of an already parsed body.
pub fn value_hash(v: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = br#"{"events":[{"kind":"FILL","qty":"1","b":{"y":1,"x":[true,null]}}]}"#;
        let b = b"{ \"events\" : [ { \"b\": {\"x\": [true, null], \"y\": 1}, \"qty\": \"1\",\n \"kind\": \"FILL\" } ] }";
        assert_eq!(request_hash(a), request_hash(b));
        assert_eq!(
            canonical_json(&serde_json::from_slice(b).unwrap()),
            br#"{"events":[{"b":{"x":[true,null],"y":1},"kind":"FILL","qty":"1"}]}"#.to_vec()
        );
    }

    #[test]
    fn values_matter() {
        let a = br#"{"events":[{"qty":"1"}]}"#;
        let b = br#"{"events":[{"qty":"1.0"}]}"#;
        let c = br#"{"events":[{"qty":"1"},{"qty":"1"}]}"#;
        assert_ne!(request_hash(a), request_hash(b));
        assert_ne!(request_hash(a), request_hash(c));
        assert_eq!(request_hash(a).len(), 64);
        assert_eq!(
            value_hash(&serde_json::from_slice(a).unwrap()),
            request_hash(a)
        );
    }
}
