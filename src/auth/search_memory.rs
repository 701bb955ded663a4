//! What a search reads before its statement, remembered per key and pipeline.
//!
//! Every search reads its key (with the key's permission entries) and its pipeline's search
//! context in one statement before its own: a round trip, and about 0.18 ms of Postgres's time,
//! for each search. The read is remembered here, with the search epoch it was made at
//! (`migrations/0014_search_epoch.sql`). The next search with the same key on the same pipeline
//! verifies the request's secret against the remembered hash and the key's expiration against
//! the clock, and runs its statement gated on that epoch (`retrieval::search::VectorQuery::gate`):
//! every change to a key, its permissions or the pipeline's configuration moves the epoch in
//! the transaction that makes it, so a search whose statement starts after such a change was
//! committed finds the gate closed, on every replica, and is made again from a fresh read.
//! A gated statement that returns no rows proves nothing either way and is made again too.
//!
//! Similarity and MMR searches are answered so, under filters and classifications too: their
//! statement also confirms what ingestion changes without moving the epoch, the association's
//! estimated vector count the path and the walk were planned from (it follows the table's pages
//! and `ANALYZE`), and, for a filter comparing integer fields, that no stored version has been
//! recorded since with a value of them the database cannot convert (rule 6). Full-text
//! searches, and searches of a pipeline whose model embeds on a remote server, read afresh: the
//! remote call costs far more than the read saved, and must not be made for a key refused
//! since. A key check that refuses the key (with its right secret) or finds it without read and
//! execute on the pipeline forgets what was remembered for the pair.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::auth::AuthContext;
use crate::auth::key_check::Credentials;
use crate::store::api_keys::KeyForAuth;
use crate::store::pipelines::SearchContext;

/// (key, pipeline) pairs remembered at most.
pub const CAPACITY: u64 = 4096;

/// How long a pair no search used is kept.
pub const IDLE: Duration = Duration::from_secs(600);

/// One key's checks on one pipeline, as read together.
pub struct Remembered {
    secret_hash: Vec<u8>,
    expiration: Option<DateTime<Utc>>,
    pub auth: AuthContext,
    pub context: SearchContext,
}

/// The remembered reads, by (key, pipeline).
#[derive(Clone)]
pub struct SearchMemory {
    entries: moka::sync::Cache<(Uuid, Uuid), Arc<Remembered>>,
}

impl Default for SearchMemory {
    fn default() -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_idle(IDLE)
                .build(),
        }
    }
}

impl SearchMemory {
    /// Remembers a read whose key check passed.
    pub fn remember(&self, key: &KeyForAuth, auth: &AuthContext, context: &SearchContext) {
        let remembered = Remembered {
            secret_hash: key.secret_hash.clone(),
            expiration: key.expiration,
            auth: auth.clone(),
            context: context.clone(),
        };
        self.entries
            .insert((key.id, context.pipeline.id), Arc::new(remembered));
    }

    /// Forgets the read remembered for the request's key on `pipeline_id`, when the request's
    /// secret opens it (a request without the key's secret cannot make its searches read
    /// afresh).
    pub fn forget(&self, credentials: &Credentials<'_>, pipeline_id: Uuid) {
        let pair = (credentials.key_id, pipeline_id);
        let opened = self
            .entries
            .get(&pair)
            .is_some_and(|remembered| credentials.open(&remembered.secret_hash, true, None));
        if opened {
            self.entries.invalidate(&pair);
        }
    }

    /// The read remembered for the request's key on `pipeline_id`, when the request's secret
    /// opens it and the key has not expired since.
    pub fn recall(
        &self,
        credentials: &Credentials<'_>,
        pipeline_id: Uuid,
    ) -> Option<Arc<Remembered>> {
        let remembered = self.entries.get(&(credentials.key_id, pipeline_id))?;
        credentials
            .open(&remembered.secret_hash, true, remembered.expiration)
            .then_some(remembered)
    }
}
