//! Deferred HNSW builds for bursts of ingestion: the worker drops an association's index for
//! a burst, searches stay exact meanwhile, the index is built with one of the last two batches
//! in its transaction (or a second after the last, when documents were still arriving), and a
//! build that dies leaves the index deferred for the next one.

use std::collections::HashMap;

use pgvector::Vector;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use trove::config::HnswParams;

use crate::helpers::{AppOptions, TestApp, eventually, spawn_app_with};

const DIMENSIONS: usize = 64;

const WORDS: [&str; 24] = [
    "harbour", "copper", "orchard", "apples", "granite", "bridge", "river", "delta", "winter",
    "lantern", "market", "square", "archive", "ledger", "journal", "forest", "island", "meadow",
    "signal", "tower", "valley", "mill", "glacier", "canyon",
];

/// An app whose worker the test drives, deferring indexes for bursts of 50 fragments or more.
async fn app() -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([("TROVE_INDEX_DEFER_ROWS".to_owned(), "50".to_owned())]),
        ..AppOptions::default()
    })
    .await
}

/// A pipeline on a `hash` model of [`DIMENSIONS`]; returns its id and its vector table.
async fn pipeline(app: &TestApp) -> (String, String) {
    let model = app
        .create_hash_model(&format!("h-{}", Uuid::new_v4().simple()), 64)
        .await;
    let pipeline = app
        .new_pipeline(json!({"embedding_model_id": model["id"]}))
        .await;
    let ve: Uuid = serde_json::from_value(pipeline["default_vector_embedding_id"].clone())
        .expect("association id");
    (
        pipeline["id"].as_str().expect("id").to_owned(),
        trove::store::vectors::table_name(ve),
    )
}

/// A short text (one fragment) of four words drawn by `i`.
fn text(i: usize) -> String {
    (0..4)
        .map(|j| WORDS[(i * 7 + j * 5 + i / 3) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Submits documents `from..to` through the batch endpoint, `year` 2020 + i % 4.
async fn submit(app: &TestApp, pid: &str, from: usize, to: usize) {
    let documents: Vec<Value> = (from..to)
        .map(|i| {
            json!({"external_identifier": format!("d{i}"), "classification": "public",
                   "metadata": {"year": 2020 + i % 4}, "text": text(i)})
        })
        .collect();
    app.submit_batch(pid, documents).await;
}

/// The configured `m` (the default), as recorded for a deferred index.
fn default_m() -> Option<i32> {
    i32::try_from(HnswParams::DEFAULT.m()).ok()
}

/// The configured `ef_construction` (the default), as recorded for a deferred index.
fn default_ef() -> Option<i32> {
    i32::try_from(HnswParams::DEFAULT.ef_construction()).ok()
}

/// The default build parameters as an index definition shows them.
fn default_options() -> String {
    format!(
        "m='{}', ef_construction='{}'",
        HnswParams::DEFAULT.m(),
        HnswParams::DEFAULT.ef_construction()
    )
}

/// The index's oid (`None` when it does not exist) and the recorded build parameters.
async fn index(app: &TestApp, table: &str) -> (Option<u32>, Option<i32>, Option<i32>) {
    let oid: Option<i64> = sqlx::query_scalar("SELECT to_regclass($1)::oid::int8")
        .bind(format!("{table}_hnsw"))
        .fetch_one(&app.pool)
        .await
        .expect("index oid");
    let (m, ef): (Option<i32>, Option<i32>) = sqlx::query_as(
        "SELECT deferred_index_m, deferred_index_ef_construction FROM vector_embeddings
         WHERE 'vectors_' || replace(id::text, '-', '') = $1",
    )
    .bind(table)
    .fetch_one(&app.pool)
    .await
    .expect("association");
    (oid.and_then(|o| u32::try_from(o).ok()), m, ef)
}

/// The cosine distances of the `k` nearest current fragments to `query`, optionally of one
/// year, by an exact scan in SQL.
async fn exact_distances(
    app: &TestApp,
    table: &str,
    query: &str,
    year: Option<i64>,
    k: i64,
) -> Vec<f64> {
    let vector = Vector::from(trove::providers::hash_embedding::hash_embedding(
        query, DIMENSIONS,
    ));
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT (v.embedding <=> $1)::float8 AS d FROM {table} v JOIN fragments f ON f.id = v.fragment_id
         WHERE f.expired_at IS NULL AND ($2::int8 IS NULL OR (f.metadata->>'year')::int8 = $2)
         ORDER BY d LIMIT $3"
    )))
    .bind(vector)
    .bind(year)
    .bind(k)
    .fetch_all(&app.pool)
    .await
    .expect("exact scan")
}

/// The scores of a similarity search through HTTP.
async fn searched_distances(app: &TestApp, pid: &str, query: &str, year: Option<i64>) -> Vec<f64> {
    let mut body = json!({"query": query, "type": "similarity", "classification": "public", "params": {"k": 5}});
    if let Some(year) = year {
        body["filters"] = json!({"year": {"$eq": year}});
    }
    let reply = app.post(&format!("/pipelines/{pid}/search"), &body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply
        .body
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| hit["score"].as_f64().expect("score"))
        .collect()
}

/// Searches (unfiltered and under a filter) return exactly the nearest distances.
async fn assert_searches_exact(app: &TestApp, pid: &str, table: &str) {
    for (i, year) in [(3, None), (11, Some(2021)), (17, Some(2023))] {
        let query = text(i);
        let found = searched_distances(app, pid, &query, year).await;
        let exact = exact_distances(app, table, &query, year, 5).await;
        assert_eq!(found.len(), exact.len(), "{query} {year:?}");
        for (f, e) in found.iter().zip(&exact) {
            assert!(
                (f - e).abs() < 1e-5,
                "{query} {year:?}: {found:?} vs {exact:?}"
            );
        }
    }
}

/// Polls the test database for up to 5 s for a backend running a statement that starts with
/// `statement` and waits for a lock, and cancels its statement (`terminate`: ends its
/// connection); fails the test with `what` when none comes.
async fn interrupt_waiting(app: &TestApp, statement: &str, terminate: bool, what: &str) {
    eventually(what, std::time::Duration::from_secs(5), || async {
        let interrupted: bool = sqlx::query_scalar(
            "SELECT coalesce(bool_or(CASE WHEN $2 THEN pg_terminate_backend(pid)
                                          ELSE pg_cancel_backend(pid) END), false)
             FROM pg_stat_activity
             WHERE datname = current_database() AND starts_with(query, $1)
               AND wait_event_type = 'Lock'",
        )
        .bind(statement)
        .bind(terminate)
        .fetch_one(&app.pool)
        .await
        .expect("interrupt");
        interrupted.then_some(())
    })
    .await;
}

/// One worker step in a task of its own.
async fn spawn_step(app: &TestApp) -> tokio::task::JoinHandle<trove::ingest::worker::StepOutcome> {
    let worker = app.worker().await;
    tokio::spawn(async move {
        worker
            .step(std::time::Duration::from_millis(300))
            .await
            .expect("step")
    })
}

/// The index is still deferred after a failed build, searches are exact, and the sweep builds
/// it (the pipeline has nothing pending).
async fn assert_deferred_until_the_sweep(app: &TestApp, pid: &str, table: &str) {
    let (oid, m, ef) = index(app, table).await;
    assert_eq!(
        (oid, m, ef),
        (None, default_m(), default_ef()),
        "still deferred"
    );
    assert_searches_exact(app, pid, table).await;
    app.worker().await.build_idle_deferred_indexes().await;
    let (oid, m, _) = index(app, table).await;
    assert!(oid.is_some() && m.is_none(), "built by the sweep");
    assert_searches_exact(app, pid, table).await;
}

#[tokio::test]
async fn a_burst_is_stored_without_the_index_which_is_built_with_one_of_its_last_batches() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    let (before, m, _) = index(&app, &table).await;
    assert!(
        before.is_some() && m.is_none(),
        "a new association has its index"
    );

    submit(&app, &pid, 0, 250).await;
    // The first batch of 100: a burst of 250 fragments into an empty association drops the
    // index, and the batch is stored without it.
    let first = app.step().await;
    assert_eq!(first.stored, 100, "{first:?}");
    let (oid, m, ef) = index(&app, &table).await;
    assert_eq!(
        (oid, m, ef),
        (None, default_m(), default_ef()),
        "index deferred"
    );
    assert_searches_exact(&app, &pid, &table).await;

    // The second, once nothing was submitted for a second: 50 versions are left after it, so
    // the index is built in its transaction, over its rows too.
    // Time passes: a second without submissions.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let second = app.step().await;
    assert_eq!(second.stored, 100, "{second:?}");
    let (oid, m, _) = index(&app, &table).await;
    assert!(
        oid.is_some() && oid != before && m.is_none(),
        "index built again"
    );
    let indexed: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = $1::oid")
        .bind(i64::from(oid.expect("index")))
        .fetch_one(&app.pool)
        .await
        .expect("index rows");
    assert_eq!(indexed, 200.0, "the build saw the group's own rows");
    let third = app.step().await;
    assert_eq!(third.stored, 50, "{third:?}");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM documents WHERE pipeline_id = $1 AND status = 'success'",
            &pid
        )
        .await,
        250
    );
    let vectors: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&app.pool)
            .await
            .expect("count");
    assert_eq!(vectors, 250);
    assert_searches_exact(&app, &pid, &table).await;

    // A burst smaller than half the association goes into the live index.
    submit(&app, &pid, 250, 300).await;
    app.step().await;
    assert_eq!(index(&app, &table).await.0, oid, "index kept");
}

#[tokio::test]
async fn a_build_that_dies_leaves_the_index_deferred_for_the_sweep() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 30).await;
    // 30 fragments: under the 50 a burst needs.
    app.step().await;
    assert!(index(&app, &table).await.0.is_some());
    let ve: Uuid =
        sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1::uuid")
            .bind(&pid)
            .fetch_one(&app.pool)
            .await
            .expect("association");
    let params = HnswParams::DEFAULT;
    assert!(
        trove::store::vectors::defer_index(&app.pool, ve, params)
            .await
            .expect("defer")
    );
    assert_searches_exact(&app, &pid, &table).await;

    // A writer holds the table, so the build waits; its connection is then terminated.
    let mut writer = app.pool.begin().await.expect("writer");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {table} IN ROW EXCLUSIVE MODE"
    )))
    .execute(&mut *writer)
    .await
    .expect("lock");
    let pool = app.pool.clone();
    let build =
        tokio::spawn(async move { trove::store::ingestion::build_deferred_index(&pool, ve).await });
    interrupt_waiting(
        &app,
        "CREATE INDEX",
        true,
        "the build waited for the writer",
    )
    .await;
    assert!(build.await.expect("join").is_err(), "the build failed");
    writer.rollback().await.expect("rollback");
    assert_deferred_until_the_sweep(&app, &pid, &table).await;
}

#[tokio::test]
async fn a_build_that_fails_in_the_last_group_leaves_the_group_stored_and_the_index_deferred() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 150).await;
    assert_eq!(app.step().await.stored, 100);
    assert_eq!(index(&app, &table).await.0, None, "index deferred");
    // Time passes: a second without submissions.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    // The association's row is held, so the build's last statement waits; it is then cancelled.
    let mut holder = app.pool.begin().await.expect("holder");
    sqlx::query("SELECT 1 FROM vector_embeddings WHERE pipeline_id = $1::uuid FOR UPDATE")
        .bind(&pid)
        .execute(&mut *holder)
        .await
        .expect("row lock");
    let step = spawn_step(&app).await;
    interrupt_waiting(
        &app,
        "UPDATE vector_embeddings",
        false,
        "the build waited for the association's row",
    )
    .await;
    let last = step.await.expect("join");
    assert_eq!((last.stored, last.failed), (50, 0), "{last:?}");
    holder.rollback().await.expect("release");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM documents WHERE pipeline_id = $1 AND status = 'success'",
            &pid
        )
        .await,
        150
    );
    assert_deferred_until_the_sweep(&app, &pid, &table).await;
}

#[tokio::test]
async fn a_burst_whose_last_batch_finds_recent_submissions_is_built_a_second_later() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 150).await;
    app.step().await;
    assert_eq!(index(&app, &table).await.0, None, "index deferred");
    // More documents arrive just before the last batch is stored: the worker cannot tell
    // whether the burst is over, stores the batch without the index and looks again later.
    submit(&app, &pid, 150, 160).await;
    let last = app.step().await;
    assert_eq!(last.stored, 60, "{last:?}");
    eventually(
        "the index built once the pipeline had no submission for a second",
        std::time::Duration::from_secs(10),
        || async {
            let (oid, m, _) = index(&app, &table).await;
            (oid.is_some() && m.is_none()).then_some(())
        },
    )
    .await;
    assert_searches_exact(&app, &pid, &table).await;
}

#[tokio::test]
async fn a_group_waits_for_an_index_build_longer_than_the_statement_timeout() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([("TROVE_STATEMENT_TIMEOUT".to_owned(), "1".to_owned())]),
        ..AppOptions::default()
    })
    .await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 20).await;
    // A build holds the table (SHARE) for longer than the statement timeout.
    let mut build = app.pool.begin().await.expect("build");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {table} IN SHARE MODE"
    )))
    .execute(&mut *build)
    .await
    .expect("lock");
    let step = spawn_step(&app).await;
    // Time passes: the lock is held beyond the statement timeout.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    build.commit().await.expect("release");
    let outcome = step.await.expect("join");
    assert_eq!((outcome.stored, outcome.failed), (20, 0), "{outcome:?}");
}

/// The build at the end of a burst analyses `fragments` before its versions become `success`:
/// the worker last analysed it when the table held five groups (a group of 100 adds no more
/// than a fifth of 500 rows), so the searches after the burst would otherwise estimate their
/// scopes from a fraction of it.
#[tokio::test]
async fn the_build_at_the_end_of_a_burst_analyses_the_fragments() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    let analysed_rows = || async {
        sqlx::query_scalar::<_, f32>("SELECT reltuples FROM pg_class WHERE relname = 'fragments'")
            .fetch_one(&app.pool)
            .await
            .expect("reltuples")
    };
    submit(&app, &pid, 0, 800).await;
    for _ in 0..6 {
        assert_eq!(app.step().await.stored, 100);
    }
    assert_eq!(index(&app, &table).await.0, None, "index deferred");
    assert_eq!(analysed_rows().await, 500.0);

    // Two batches left and nothing submitted for a second: the index is built with the
    // seventh, and the table analysed in its transaction with the 700 fragments it then holds.
    // Time passes: a second without submissions.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(app.step().await.stored, 100);
    assert!(index(&app, &table).await.0.is_some(), "index built");
    assert_eq!(analysed_rows().await, 700.0);
}

/// Migration 13 replaces an association's index on the vectors as stored with the half
/// precision one: it drops the old index and records its build parameters, searches are exact
/// until the sweep builds the new index, and exact again through it.
#[tokio::test]
async fn migration_13_rebuilds_the_index_in_half_precision_through_the_sweep() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 30).await;
    app.step().await;
    let definition = |app: &TestApp| {
        let pool = app.pool.clone();
        let name = format!("{table}_hnsw");
        async move {
            sqlx::query_scalar::<_, Option<String>>("SELECT pg_get_indexdef(to_regclass($1))")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("index definition")
        }
    };
    let built = definition(&app).await.expect("index");
    assert!(built.contains("halfvec(64)"), "{built}");

    // The schema migration 13 starts from: the index on the vectors as stored.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP INDEX {table}_hnsw;
         CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)
             WITH (m = 12, ef_construction = 40);
         DELETE FROM _trove_migrations WHERE version = 13;"
    )))
    .execute(&app.pool)
    .await
    .expect("index before migration 13");
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    assert_eq!(index(&app, &table).await, (None, Some(12), Some(40)));
    assert_searches_exact(&app, &pid, &table).await;

    app.worker().await.build_idle_deferred_indexes().await;
    assert_eq!(index(&app, &table).await.1, None, "built by the sweep");
    assert_eq!(
        definition(&app).await.expect("index"),
        built.replace(&default_options(), "m='12', ef_construction='40'")
    );
    assert_searches_exact(&app, &pid, &table).await;
}

/// Migration 15 copies each fragment's classification, metadata and currency into its
/// association's vector table and indexes them: the HNSW index is dropped and recorded, as by
/// migration 13, and built again on the live rows by the sweep; the indexes on declared fields
/// are created when the migrations are applied. Searches are exact throughout, the vector of a
/// replaced version left out.
#[tokio::test]
async fn migration_15_copies_the_scope_into_the_vector_table() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 30).await;
    app.step().await;
    let replaced = json!({"external_identifier": "d3", "classification": "public",
                          "metadata": {"year": 2022}, "text": text(3)});
    app.submit_batch(&pid, vec![replaced]).await;
    app.step().await;
    let indexes = |app: &TestApp| {
        let pool = app.pool.clone();
        let table = table.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname",
            )
            .bind(table)
            .fetch_all(&pool)
            .await
            .expect("indexes")
        }
    };
    let before = indexes(&app).await;
    assert_eq!(before.len(), 5, "{before:?}");

    // The schema migration 15 starts from: no such columns, an index on every row.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE {table} DROP COLUMN classification, DROP COLUMN metadata, DROP COLUMN live;
         CREATE INDEX {table}_hnsw ON {table}
             USING hnsw ((l2_normalize(embedding)::halfvec({DIMENSIONS})) halfvec_cosine_ops)
             WITH (m = 12, ef_construction = 40);
         DELETE FROM _trove_migrations WHERE version = 15;"
    )))
    .execute(&app.pool)
    .await
    .expect("table before migration 15");
    assert_eq!(indexes(&app).await.len(), 2, "the key and the HNSW index");
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    let (copied, expired): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FILTER (WHERE v.classification = f.classification
                                  AND v.metadata = f.metadata
                                  AND v.live = (f.expired_at IS NULL)),
                count(*) FILTER (WHERE NOT v.live)
         FROM {table} v JOIN fragments f ON f.id = v.fragment_id"
    )))
    .fetch_one(&app.pool)
    .await
    .expect("copied columns");
    assert_eq!((copied, expired), (31, 1));
    assert_eq!(index(&app, &table).await, (None, Some(12), Some(40)));
    assert_eq!(indexes(&app).await.len(), 4, "all but the HNSW index");
    assert_searches_exact(&app, &pid, &table).await;

    app.worker().await.build_idle_deferred_indexes().await;
    assert_eq!(index(&app, &table).await.1, None, "built by the sweep");
    let after = indexes(&app).await;
    assert_eq!(
        after,
        before
            .iter()
            .map(|d| d.replace(&default_options(), "m='12', ef_construction='40'"))
            .collect::<Vec<_>>()
    );
    assert_searches_exact(&app, &pid, &table).await;
}

/// The association of a pipeline's default model.
async fn association(app: &TestApp, pid: &str) -> Uuid {
    sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1::uuid")
        .bind(pid)
        .fetch_one(&app.pool)
        .await
        .expect("association")
}

/// The oid and options of the index named `name` (`None` when it does not exist).
async fn index_options(app: &TestApp, name: &str) -> Option<(i64, Vec<String>)> {
    sqlx::query_as("SELECT oid::int8, reloptions::text[] FROM pg_class WHERE oid = to_regclass($1)")
        .bind(name)
        .fetch_optional(&app.pool)
        .await
        .expect("index options")
}

/// Runs `statements` on the test database.
async fn execute(app: &TestApp, statements: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(statements))
        .execute(&app.pool)
        .await
        .expect("statements");
}

/// An index built with the former defaults (`m` 10, `ef_construction` 64, on hash vectors)
/// is rebuilt by the sweep with the configured parameters beside the old one, which then gives
/// it its place; searches are exact before and after. A new index that a rebuild which died
/// left invalid is dropped and built again; one left valid (its swap timed out) is put in place
/// as it is. Indexes of other parameters are left alone.
#[tokio::test]
async fn the_sweep_rebuilds_an_index_of_the_former_defaults_with_the_configured_parameters() {
    let app = app().await;
    let (pid, table) = pipeline(&app).await;
    let (other_pid, other_table) = pipeline(&app).await;
    submit(&app, &pid, 0, 30).await;
    submit(&app, &other_pid, 0, 10).await;
    app.step().await;
    let ve = association(&app, &pid).await;
    let live = format!("{table}_hnsw");
    let next = format!("{table}_hnsw_next");
    let configured = vec![
        format!("m={}", HnswParams::DEFAULT.m()),
        format!("ef_construction={}", HnswParams::DEFAULT.ef_construction()),
    ];
    assert_eq!(
        index_options(&app, &live).await.expect("index").1,
        configured
    );
    let worker = app.worker().await;
    assert_eq!(worker.upgrade_an_index().await, None, "nothing to upgrade");

    let former = |table: &str| {
        trove::store::vectors::hnsw_index_sql(
            table,
            u32::try_from(DIMENSIONS).expect("dimensions"),
            HnswParams::FORMER_DEFAULT,
        )
    };
    let other_index = index_options(&app, &format!("{other_table}_hnsw")).await;
    execute(&app, format!("DROP INDEX {live}; {}", former(&table))).await;
    assert_eq!(
        index_options(&app, &live).await.expect("index").1,
        ["m=10", "ef_construction=64"]
    );
    assert_searches_exact(&app, &pid, &table).await;
    assert_eq!(worker.upgrade_an_index().await, Some(ve));
    assert_eq!(
        index_options(&app, &live).await.expect("index").1,
        configured
    );
    assert_eq!(index_options(&app, &next).await, None);
    assert_searches_exact(&app, &pid, &table).await;
    assert_eq!(
        worker.upgrade_an_index().await,
        None,
        "one index to upgrade"
    );
    assert_eq!(
        index_options(&app, &format!("{other_table}_hnsw")).await,
        other_index,
        "an index of other parameters is left alone"
    );

    // A new index left by a rebuild: invalid (its build died), then valid (its swap timed out).
    for valid in [false, true] {
        let new_index = trove::store::vectors::hnsw_index_sql(
            &table,
            u32::try_from(DIMENSIONS).expect("dimensions"),
            HnswParams::DEFAULT,
        )
        .replace(&format!("{live} ON"), &format!("{next} ON"));
        execute(
            &app,
            format!("DROP INDEX {live}; {}; {new_index};", former(&table)),
        )
        .await;
        if !valid {
            execute(
                &app,
                format!(
                    "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{next}'::regclass"
                ),
            )
            .await;
        }
        let (left, _) = index_options(&app, &next).await.expect("left index");
        assert_eq!(worker.upgrade_an_index().await, Some(ve));
        let (oid, options) = index_options(&app, &live).await.expect("index");
        assert_eq!(options, configured);
        assert_eq!(
            oid == left,
            valid,
            "a valid index is put in place, an invalid one rebuilt"
        );
        assert_eq!(index_options(&app, &next).await, None);
        assert_searches_exact(&app, &pid, &table).await;
    }
}

/// A deployment that configures the former defaults keeps its indexes as they are.
#[tokio::test]
async fn a_deployment_configured_with_the_former_defaults_keeps_its_indexes() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([
            ("TROVE_HNSW_M".to_owned(), "10".to_owned()),
            ("TROVE_HNSW_EF_CONSTRUCTION".to_owned(), "64".to_owned()),
        ]),
        ..AppOptions::default()
    })
    .await;
    let (pid, table) = pipeline(&app).await;
    submit(&app, &pid, 0, 10).await;
    app.step().await;
    let before = index_options(&app, &format!("{table}_hnsw")).await;
    assert_eq!(
        before.as_ref().expect("index").1,
        ["m=10", "ef_construction=64"]
    );
    assert_eq!(app.worker().await.upgrade_an_index().await, None);
    assert_eq!(index_options(&app, &format!("{table}_hnsw")).await, before);
}
