//! The key check: headers `x-api-key` and `x-api-key-secret`, verified against the database on
//! every request.

use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;
use http::HeaderMap;
use uuid::Uuid;

use super::AuthContext;
use crate::crypto::verify_key_secret;
use crate::error::ApiError;
use crate::store;
use crate::store::Pool;

/// A header's value when it is present and made of visible ASCII; anything else counts as
/// missing (interface: "a header value with characters other than visible ASCII is reported
/// as missing").
fn visible_header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?;
    let bytes = value.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return None;
    }
    value.to_str().ok()
}

/// The last second (since the epoch) in which an unreadable database was logged.
static LAST_OUTAGE_LOG: AtomicU64 = AtomicU64::new(0);

/// A key check that could not read the database: counted each time, logged at most once a
/// second (an outage under load would otherwise write a line per request).
fn record_outage(error: &store::DatabaseError, unavailable: &prometheus::Counter) {
    unavailable.inc();
    let now = u64::try_from(Utc::now().timestamp()).unwrap_or(0);
    if LAST_OUTAGE_LOG.swap(now, Ordering::Relaxed) != now {
        tracing::error!(
            %error,
            "key check could not read the database: answering 401 Invalid API Key or Secret"
        );
    }
}

/// The credentials a request carries, checked in the interface's order (key header, secret
/// header, key id) before anything is read.
pub struct Credentials<'a> {
    pub key_id: Uuid,
    secret: &'a str,
}

impl Credentials<'_> {
    /// Whether these credentials open a key with this secret hash, activity and expiration
    /// now. The secret is verified first, so every refusal costs the same.
    pub fn open(
        &self,
        secret_hash: &[u8],
        active: bool,
        expiration: Option<chrono::DateTime<Utc>>,
    ) -> bool {
        let secret_ok = verify_key_secret(self.key_id, self.secret, secret_hash);
        secret_ok && active && expiration.is_none_or(|t| t > Utc::now())
    }
}

/// The request's credentials, or the interface's 401 for what is missing or malformed.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials<'_>, ApiError> {
    let key = visible_header(headers, "x-api-key").ok_or(ApiError::NoApiKey)?;
    let secret = visible_header(headers, "x-api-key-secret").ok_or(ApiError::NoApiSecret)?;
    let key_id = Uuid::parse_str(key).map_err(|_| ApiError::InvalidKeyId)?;
    Ok(Credentials { key_id, secret })
}

/// Authenticates a request. Failures are the interface's 401s; a database that cannot be
/// reached also answers `Invalid API Key or Secret`, and is counted in `unavailable` and
/// logged so that operators can tell an outage from bad credentials.
pub async fn authenticate(
    pool: &Pool,
    headers: &HeaderMap,
    unavailable: &prometheus::Counter,
) -> Result<AuthContext, ApiError> {
    let credentials = credentials(headers)?;
    // The key and its permissions, in one statement; the permissions are only used once the
    // key is verified.
    let read = match pool.acquire_warm().await {
        Ok(mut connection) => {
            let read = store::api_keys::key_for_auth(&mut connection, credentials.key_id).await;
            if read.is_ok() {
                connection.park();
            }
            read
        }
        Err(error) => Err(error),
    };
    verify(&credentials, read, unavailable)
}

/// The key check on a key as read for `credentials` (`None`: no such key; an error: the
/// database could not be read).
pub fn verify(
    credentials: &Credentials<'_>,
    read: Result<store::api_keys::KeyRead, store::DatabaseError>,
    unavailable: &prometheus::Counter,
) -> Result<AuthContext, ApiError> {
    let (key, entries) = match read {
        Ok(Some(found)) => found,
        Ok(None) => return Err(ApiError::InvalidKeyOrSecret),
        Err(error) => {
            record_outage(&error, unavailable);
            return Err(ApiError::InvalidKeyOrSecret);
        }
    };
    if !credentials.open(&key.secret_hash, key.active, key.expiration) {
        return Err(ApiError::InvalidKeyOrSecret);
    }
    Ok(AuthContext {
        key_id: key.id,
        name: key.name,
        description: key.description,
        is_master: key.is_master,
        entries,
    })
}
