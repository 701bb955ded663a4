//! Each pipeline's word statistics, `word_counts`: written by triggers on `fragments` (see the
//! migration that creates it) as rows of changes, one per word for each statement that changes
//! what counts, and read by the lexical list of a hybrid search as sums
//! (`trove_query::hybrid::lexical_ctes`). Folding a pipeline's rows into one per word keeps
//! those sums short.

use sqlx::PgPool;
use uuid::Uuid;

/// A pipeline's rows are folded once this many statements have added to them since the last
/// fold (each adds one row for the word `''`).
pub const FOLD_AFTER: i64 = 32;

/// Class of the advisory lock held by a fold (any fixed number unique to Trove), with the
/// pipeline's hash as the key: one fold of a pipeline at a time, and none waits for another.
const FOLD_LOCK_CLASS: i32 = 0x776f_7264;

/// Folds the pipeline's rows into one per word when more than [`FOLD_AFTER`] statements have
/// added to them and no other fold of the pipeline is under way. Returns whether it folded.
pub async fn fold_if_scattered(pool: &PgPool, pipeline_id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (locked, scattered): (bool, bool) = sqlx::query_as(
        "SELECT pg_try_advisory_xact_lock($1, hashtext($2::text)),
                (SELECT count(*) FROM (SELECT FROM word_counts
                                       WHERE pipeline_id = $2 AND word = '' LIMIT $3 + 1) AS s) > $3",
    )
    .bind(FOLD_LOCK_CLASS)
    .bind(pipeline_id)
    .bind(FOLD_AFTER)
    .fetch_one(&mut *tx)
    .await?;
    if !(locked && scattered) {
        return Ok(false);
    }
    sqlx::query(
        "WITH gone AS (
             DELETE FROM word_counts w
             WHERE w.pipeline_id = $1
               AND w.word IN (SELECT word FROM word_counts WHERE pipeline_id = $1
                              GROUP BY word HAVING count(*) > 1)
             RETURNING w.word, w.fragments, w.length)
         INSERT INTO word_counts (pipeline_id, word, fragments, length)
         SELECT $1, word, sum(fragments), sum(length) FROM gone GROUP BY word
         HAVING sum(fragments) <> 0 OR sum(length) <> 0",
    )
    .bind(pipeline_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
