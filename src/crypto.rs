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

/// AES-256-GCM encryption of data at rest (fragment text, raw document text, LLM keys,
/// secret embedding-model parameters). The stored form is `nonce (12 bytes) || ciphertext`.
pub mod at_rest {
    use aes_gcm::aead::{Aead, KeyInit};
    use aes_gcm::{Aes256Gcm, Nonce};
    use rand::RngCore;

    /// Why stored data could not be read back (another `TROVE_SECRET`, or corruption).
    #[derive(Debug, thiserror::Error)]
    #[error("decryption failed")]
    pub struct DecryptionError;

    /// A cipher built once from `TROVE_SECRET`.
    #[derive(Clone)]
    pub struct Cipher(Aes256Gcm);

    impl std::fmt::Debug for Cipher {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Cipher(***)")
        }
    }

    impl Cipher {
        pub fn new(key: &[u8; 32]) -> Self {
            Self(Aes256Gcm::new(key.into()))
        }

        /// Encrypts with a fresh random nonce.
        pub fn encrypt(&self, plaintext: &[u8]) -> Vec<u8> {
            let mut nonce = [0u8; 12];
            rand::rng().fill_bytes(&mut nonce);
            // Encryption only fails for inputs beyond 64 GiB, far above the 2 MB body limit.
            let ciphertext = self
                .0
                .encrypt(Nonce::from_slice(&nonce), plaintext)
                .unwrap_or_default();
            let mut out = Vec::with_capacity(12 + ciphertext.len());
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&ciphertext);
            out
        }

        /// Decrypts what [`Cipher::encrypt`] produced.
        pub fn decrypt(&self, stored: &[u8]) -> Result<Vec<u8>, DecryptionError> {
            if stored.len() < 12 {
                return Err(DecryptionError);
            }
            let (nonce, ciphertext) = stored.split_at(12);
            self.0
                .decrypt(Nonce::from_slice(nonce), ciphertext)
                .map_err(|_| DecryptionError)
        }

        /// Decrypts UTF-8 text.
        pub fn decrypt_text(&self, stored: &[u8]) -> Result<String, DecryptionError> {
            String::from_utf8(self.decrypt(stored)?).map_err(|_| DecryptionError)
        }
    }

    #[cfg(test)]
    #[expect(clippy::unwrap_used, reason = "tests fail loudly")]
    mod tests {
        use super::*;

        #[test]
        fn round_trip_and_wrong_key() {
            let a = Cipher::new(&[1; 32]);
            let b = Cipher::new(&[2; 32]);
            let stored = a.encrypt("secret text".as_bytes());
            assert!(!stored.windows(6).any(|w| w == b"secret"));
            assert_eq!(a.decrypt_text(&stored).unwrap(), "secret text");
            assert!(b.decrypt(&stored).is_err());
            assert!(a.decrypt(&stored[..5]).is_err());
            // Fresh nonces: the same text encrypts differently each time.
            assert_ne!(a.encrypt(b"x"), a.encrypt(b"x"));
        }
    }
}
