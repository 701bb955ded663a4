//! Key secrets: generation, hashing and constant-time verification.
//!
//! API key secrets are 48 characters drawn from 64 symbols (288 random bits). Against such
//! high-entropy secrets a slow password hash buys nothing: nobody can enumerate 2^288
//! candidates. What matters is that the stored value does not reveal the secret and that
//! comparison leaks no timing. We store HMAC-SHA256 keyed by a fixed domain label over the key
//! id and the secret (so equal secrets on two keys hash differently) and compare in constant
//! time.

use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use uuid::Uuid;

const DOMAIN: &[u8] = b"trove api key secret v1";

/// A new random secret: 36 random bytes as standard base64, exactly 48 characters.
pub fn generate_key_secret() -> String {
    let mut bytes = [0u8; 36];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The stored hash of a key's secret.
pub fn hash_key_secret(key_id: Uuid, secret: &str) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(DOMAIN) {
        Ok(mac) => mac,
        Err(_) => unreachable!("hmac accepts keys of any length"),
    };
    mac.update(key_id.as_bytes());
    mac.update(secret.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Whether `secret` matches the stored hash, compared in constant time.
pub fn verify_key_secret(key_id: Uuid, secret: &str, stored: &[u8]) -> bool {
    let computed = hash_key_secret(key_id, secret);
    computed.ct_eq(stored).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::is_valid_key_secret;

    #[test]
    fn generated_secrets_have_the_interface_shape() {
        for _ in 0..100 {
            let s = generate_key_secret();
            assert!(is_valid_key_secret(&s), "{s}");
        }
    }

    #[test]
    fn hash_depends_on_key_and_secret() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let h = hash_key_secret(a, "s");
        assert!(verify_key_secret(a, "s", &h));
        assert!(!verify_key_secret(a, "t", &h));
        assert!(!verify_key_secret(b, "s", &h));
    }
}
