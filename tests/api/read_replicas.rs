//! Searches on a read replica (`TROVE_DATABASE_READ_URL`): a primary of its own with a
//! streaming replica (`support/postgres.rs`), whose replay the tests pause to see where a
//! search read. Two apps share the primary: one tolerating a lag of ten minutes (it keeps
//! reading on a paused replica), one a lag of one second (it moves to the primary).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    AppOptions, TestApp, assert_error, eventually, metric_value, spawn_app_with, str_of,
    wait_until_processed,
};
use crate::postgres::PgServer;

const DATABASE: &str = "trove_replicated";

/// A primary, its replica and two apps on them (both serving searches on the replica).
struct Replicated {
    primary: PgServer,
    replica: PgServer,
    /// Reads on the replica while it lags by up to 600 s.
    patient: TestApp,
    /// Reads on the primary once the replica lags by more than 1 s.
    strict: TestApp,
}

/// The master key of both apps.
const MASTER_KEY_ID: &str = "5e2f0b4c-8a41-4d5e-9c3b-2f6a7d8e9f01";

async fn app_on(primary: &PgServer, replica: &PgServer, max_lag: &str, worker: bool) -> TestApp {
    let env = [
        ("TROVE_MASTER_KEY_ID", MASTER_KEY_ID.to_owned()),
        ("TROVE_DATABASE_URL", primary.url(DATABASE)),
        ("TROVE_DATABASE_READ_URL", replica.url(DATABASE)),
        ("TROVE_READ_REPLICA_MAX_LAG", max_lag.to_owned()),
    ];
    spawn_app_with(AppOptions {
        env: env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        database: Some(DATABASE.to_owned()),
        no_worker: !worker,
        ..AppOptions::default()
    })
    .await
}

impl Replicated {
    async fn start() -> Self {
        let primary = PgServer::primary();
        primary.create_database(DATABASE).await;
        let replica = PgServer::standby_of(&primary);
        let patient = app_on(&primary, &replica, "600", true).await;
        let strict = app_on(&primary, &replica, "1", false).await;
        let replicated = Self {
            primary,
            replica,
            patient,
            strict,
        };
        replicated.replica.wait_caught_up(&replicated.primary).await;
        replicated
            .wait_lag("in use", |lag| (0.0..=1.0).contains(&lag))
            .await;
        replicated
    }

    /// The lag both apps report for the replica.
    async fn lags(&self) -> (Option<f64>, Option<f64>) {
        let name = format!(
            "trove_read_replica_lag_seconds{{replica=\"{}\"}}",
            self.replica.name(DATABASE)
        );
        let mut lags = Vec::new();
        for app in [&self.patient, &self.strict] {
            let reply = app.get("/metrics").await;
            lags.push(metric_value(&reply.text, &name));
        }
        (lags[0], lags[1])
    }

    /// Waits until both apps report a lag that `holds`.
    async fn wait_lag(&self, what: &str, holds: impl Fn(f64) -> bool) {
        eventually(what, Duration::from_secs(20), || async {
            match self.lags().await {
                (Some(a), Some(b)) if holds(a) && holds(b) => Some(()),
                _ => None,
            }
        })
        .await;
    }

    /// A pipeline on a `hash` model with full-text search and `texts` processed.
    async fn pipeline(&self, texts: &[&str]) -> String {
        let app = &self.patient;
        let model = app
            .create_hash_model(&format!("hash-{}", uuid::Uuid::new_v4().simple()), 64)
            .await;
        let pid = app
            .new_pipeline_id(json!({
                "embedding_model_id": str_of(&model, "id"),
                "has_full_text_search": true,
            }))
            .await;
        for (n, text) in texts.iter().enumerate() {
            app.submit_text(&pid, &format!("doc-{n}"), text).await;
        }
        wait_until_processed(app, &pid, texts.len()).await;
        pid
    }
}

/// The texts a search returns, in order.
async fn search(
    app: &TestApp,
    key: Option<&(String, String)>,
    pid: &str,
    kind: &str,
) -> Vec<String> {
    let reply = search_reply(app, key, pid, kind, "lighthouse").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    texts(&reply.body)
}

async fn search_reply(
    app: &TestApp,
    key: Option<&(String, String)>,
    pid: &str,
    kind: &str,
    query: &str,
) -> crate::helpers::Reply {
    let body = json!({"query": query, "type": kind, "classification": "public", "params": {"k": 10, "fetch_k": 20}});
    let path = format!("/pipelines/{pid}/search");
    match key {
        Some(key) => app.as_key(key).post(&path, &body).await,
        None => app.post(&path, &body).await,
    }
}

fn texts(results: &Value) -> Vec<String> {
    let mut texts: Vec<String> = results
        .as_array()
        .expect("an array of results")
        .iter()
        .map(|r| str_of(r, "page_content").to_owned())
        .collect();
    texts.sort();
    texts
}

const FIRST: &str = "The lighthouse keeper logs every ship.";
const SECOND: &str = "A second lighthouse stands on the northern cape.";

/// Both texts, as [`texts`] orders them.
fn both() -> Vec<String> {
    let mut both = vec![FIRST.to_owned(), SECOND.to_owned()];
    both.sort();
    both
}

#[tokio::test]
async fn searches_read_on_the_replica_and_move_to_the_primary_when_it_lags() {
    let r = Replicated::start().await;
    let pid = r.pipeline(&[FIRST]).await;
    r.replica.wait_caught_up(&r.primary).await;
    for kind in ["similarity", "mmr", "search"] {
        assert_eq!(
            search(&r.patient, None, &pid, kind).await,
            [FIRST],
            "{kind}"
        );
    }

    // The replica stops replaying: what the primary stores from now on is not on it.
    r.replica.pause_replay(true).await;
    r.patient.submit_text(&pid, "doc-1", SECOND).await;
    wait_until_processed(&r.patient, &pid, 2).await;
    for kind in ["similarity", "mmr", "search"] {
        assert_eq!(
            search(&r.patient, None, &pid, kind).await,
            [FIRST],
            "{kind}: a lag of minutes is allowed, the search reads on the replica"
        );
    }
    // The strict app sees the replica fall behind by more than a second, and reads on the
    // primary.
    eventually(
        "the strict app skips the replica",
        Duration::from_secs(20),
        || async {
            let lag = r.lags().await.1?;
            (lag > 1.0).then_some(())
        },
    )
    .await;
    for kind in ["similarity", "mmr", "search"] {
        assert_eq!(search(&r.strict, None, &pid, kind).await, both(), "{kind}");
    }

    // Replay resumes: both apps read on the replica again, and find both documents.
    r.replica.pause_replay(false).await;
    r.replica.wait_caught_up(&r.primary).await;
    r.wait_lag("the replica in use again", |lag| (0.0..=1.0).contains(&lag))
        .await;
    for app in [&r.patient, &r.strict] {
        assert_eq!(search(app, None, &pid, "similarity").await, both());
    }
}

#[tokio::test]
async fn a_pipeline_the_replica_has_not_replayed_is_searched_on_the_primary() {
    let r = Replicated::start().await;
    r.replica.pause_replay(true).await;
    // Created and processed after the pause: its vector table is not on the replica, so
    // vector searches read on the primary; its fragments are not on the replica either,
    // which a full-text search there finds as it finds any document stored since the
    // replica's replay (within the lag allowed).
    let pid = r.pipeline(&[FIRST]).await;
    for kind in ["similarity", "mmr"] {
        assert_eq!(
            search(&r.patient, None, &pid, kind).await,
            [FIRST],
            "{kind}"
        );
    }
    assert!(search(&r.patient, None, &pid, "search").await.is_empty());
    r.replica.pause_replay(false).await;
    r.replica.wait_caught_up(&r.primary).await;
    assert_eq!(search(&r.patient, None, &pid, "search").await, [FIRST]);
}

#[tokio::test]
async fn a_key_changed_on_the_primary_is_refused_on_its_next_search() {
    let r = Replicated::start().await;
    let pid = r.pipeline(&[FIRST]).await;
    let entry = |permission: u8| json!([{"object_type": "pipelines", "object_id": pid, "permission": permission, "classifications": ["public"]}]);
    let mut keys = Vec::new();
    for _ in 0..3 {
        let key = r.patient.create_key(json!({}), json!([])).await;
        r.patient.grant(&key.0, entry(5)).await;
        keys.push(key);
    }
    r.replica.wait_caught_up(&r.primary).await;
    // Each key searches twice (the second on what the first read: `search_memory`).
    for key in &keys {
        for _ in 0..2 {
            assert_eq!(
                search(&r.patient, Some(key), &pid, "similarity").await,
                [FIRST]
            );
        }
    }

    // The replica does not replay the changes to the keys.
    r.replica.pause_replay(true).await;
    for (key, change) in keys[..2].iter().zip([
        json!({"active": false}),
        json!({"expiration": "2001-02-03T04:05:06Z"}),
    ]) {
        let reply = r
            .patient
            .patch(&format!("/api-keys/{}", key.0), &change)
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    r.patient.grant(&keys[2].0, entry(0)).await;
    for kind in ["similarity", "mmr", "search"] {
        for key in &keys[..2] {
            let reply = search_reply(&r.patient, Some(key), &pid, kind, "lighthouse").await;
            assert_error(
                &reply,
                StatusCode::UNAUTHORIZED,
                "Invalid API Key or Secret",
            );
        }
        let reply = search_reply(&r.patient, Some(&keys[2]), &pid, kind, "lighthouse").await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{kind}: {}",
            reply.text
        );
        assert_eq!(reply.message(), "Pipeline not found", "{kind}");
    }
    r.replica.pause_replay(false).await;
}

#[tokio::test]
async fn a_replica_that_goes_away_is_skipped() {
    let mut r = Replicated::start().await;
    let pid = r.pipeline(&[FIRST]).await;
    r.replica.wait_caught_up(&r.primary).await;
    assert_eq!(search(&r.patient, None, &pid, "similarity").await, [FIRST]);
    r.replica.kill();
    // Before a check has noticed, and after.
    for kind in ["similarity", "mmr", "search"] {
        assert_eq!(
            search(&r.patient, None, &pid, kind).await,
            [FIRST],
            "{kind}"
        );
    }
    r.wait_lag("the replica reported unreachable", |lag| lag == -1.0)
        .await;
    for kind in ["similarity", "mmr", "search"] {
        assert_eq!(
            search(&r.patient, None, &pid, kind).await,
            [FIRST],
            "{kind}"
        );
    }
    // Back: in use again.
    r.replica.start();
    r.wait_lag("the replica in use again", |lag| (0.0..=1.0).contains(&lag))
        .await;
    assert_eq!(search(&r.patient, None, &pid, "similarity").await, [FIRST]);
}
