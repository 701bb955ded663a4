//! Model migration (extension): how fast the workers backfill a model added to a pipeline, next
//! to the model alone on the same fragments, and what a running backfill costs searches on the
//! pipeline's default model.
//!
//! Trove runs in this process (API and worker) on a fresh database of the test Postgres. A
//! pipeline on a `hash` model of 384 dimensions with the seeded `recursive-character` splitter
//! gets N synthetic topic documents of about 2 KB (`--docs`, 1,000), submitted in batches; once
//! every one is `success`:
//!
//! 1. **The model alone**: the pipeline's current fragments, read and decrypted, embedded in
//!    batches of 256 (the backfill's batch) through the service's own embedder, timed per call
//!    and summed: the floor a backfill cannot beat.
//! 2. **Searches before**: similarity k 5 on the default model at one client for
//!    `--search-seconds` (5), queries of one topic each.
//! 3. **The backfill**: `POST /pipelines/{id}/embedding-models` with the new model, timed until
//!    the association is `ready` (polled every 50 ms; its index built), nothing else running.
//! 4. **Searches during a backfill**: the association removed and added again, the same
//!    searches at one client for as long as that backfill runs; their p50 against the one
//!    before (the count is printed).
//!
//! Both for a second `hash` model (256 dimensions: the backfill's own work shows, the model
//! costs nearly nothing) and for the local all-MiniLM-L6-v2 (`--models=hash,local`; `local`
//! needs `TROVE_MODELS_DIR`). Printed per model: fragments, the model alone (s, fragments/s),
//! the backfill (s, fragments/s), its overhead over the model alone, the search p50 before and
//! during, and their ratio; the targets (overhead ≤ 15 %, ratio ≤ 1.3).
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… TROVE_MODELS_DIR=… cargo bench --bench
//! backfill -- --docs=1000 --models=hash,local`.

#![expect(
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a load tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::time::{Duration, Instant};

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use reqwest::Method;
use serde_json::{Value, json};
use trove::providers::embedding::model_spec;

use common::app::{self, Running};
use common::measure::pct;
use common::report::{Column, print_table};
use common::text::{Language, TOPICS};

const BATCH: usize = 256;

struct Options {
    docs: usize,
    models: Vec<String>,
    search_seconds: u64,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            docs: 1000,
            models: vec!["hash".to_owned(), "local".to_owned()],
            search_seconds: 5,
        };
        for arg in std::env::args().skip(1) {
            match arg.split_once('=') {
                Some(("--docs", v)) => options.docs = v.parse().expect("--docs=N"),
                Some(("--models", v)) => {
                    options.models = v.split(',').map(str::to_owned).collect();
                }
                Some(("--search-seconds", v)) => {
                    options.search_seconds = v.parse().expect("--search-seconds=S");
                }
                _ if arg == "--bench" => {}
                _ => panic!("unknown option {arg}"),
            }
        }
        options
    }
}

/// A document of about 2 KB from the topic model.
fn document(language: &Language, rng: &mut SmallRng) -> String {
    let primary = rng.random_range(0..TOPICS);
    let secondary = rng.random_range(0..TOPICS);
    let mut text = String::new();
    while text.len() < 2000 {
        text.push_str(&language.fragment(rng, primary, secondary));
        text.push_str("\n\n");
    }
    text
}

/// Creates a model; returns its id.
async fn create_model(running: &Running, body: Value) -> String {
    let model = running
        .http
        .json(Method::POST, "/embedding-models", Some(body))
        .await;
    model["id"].as_str().expect("id").to_owned()
}

/// The pipeline's current fragments, decrypted.
async fn fragment_texts(running: &Running, pipeline: &str) -> Vec<String> {
    let rows: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT content FROM fragments WHERE pipeline_id = $1::uuid AND expired_at IS NULL ORDER BY id",
    )
    .bind(pipeline)
    .fetch_all(running.state.pool.pg_pool())
    .await
    .expect("fragments");
    rows.iter()
        .map(|c| running.state.cipher.decrypt_text(c).expect("decrypt"))
        .collect()
}

/// Seconds the service's embedder takes for `texts` in batches of [`BATCH`].
async fn model_alone(running: &Running, model: &str, texts: &[String]) -> f64 {
    let id = model.parse().expect("uuid");
    let stored = trove::store::embedding::model(&running.state.pool, id)
        .await
        .expect("read")
        .expect("model");
    let spec = model_spec(&running.state.cipher, &stored).expect("spec");
    let embedder = running
        .state
        .embedders
        .embedder(&spec)
        .await
        .expect("embedder");
    // One call first, outside the timing: a local model loads on first use.
    embedder.embed(&texts[..1]).await.expect("embed");
    let mut seconds = 0.0;
    for batch in texts.chunks(BATCH) {
        let started = Instant::now();
        embedder.embed(batch).await.expect("embed");
        seconds += started.elapsed().as_secs_f64();
    }
    seconds
}

/// Similarity searches at one client until `until` says stop; their latencies.
async fn searches_while<F: Fn() -> bool>(
    running: &Running,
    pipeline: &str,
    queries: &[String],
    stop: F,
) -> Vec<Duration> {
    let path = format!("/pipelines/{pipeline}/search");
    let mut samples = Vec::new();
    for query in queries.iter().cycle() {
        if stop() {
            break;
        }
        let body = json!({"query": query, "type": "similarity", "classification": "public", "params": {"k": 5}});
        samples.push(running.http.search(&path, &body).await.0);
    }
    samples
}

/// Adds `model` to the pipeline (removing it first if it is there) and waits until it is
/// `ready`: the seconds it took, and the latencies of the searches of `queries` run meanwhile
/// at one client.
async fn backfill_with(
    running: &Running,
    pipeline: &str,
    model: &str,
    queries: Option<&[String]>,
) -> (f64, Vec<Duration>) {
    let path = format!("/pipelines/{pipeline}/embedding-models");
    let list = running.http.json(Method::GET, &path, None).await;
    for association in list.as_array().expect("list") {
        if association["embedding_model"]["id"] == model && association["default"] == false {
            let response = running
                .http
                .request(
                    Method::DELETE,
                    &format!("{path}/{}", association["id"].as_str().expect("id")),
                )
                .send()
                .await
                .expect("delete");
            assert!(response.status().is_success(), "{}", response.status());
        }
    }
    let started = Instant::now();
    let added = running
        .http
        .json(
            Method::POST,
            &path,
            Some(json!({"embedding_model_id": model})),
        )
        .await;
    let id = added["id"].as_str().expect("id").to_owned();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poll = {
        let http = running.http.clone();
        let done = done.clone();
        let path = path.clone();
        tokio::spawn(async move {
            loop {
                let list = http.json(Method::GET, &path, None).await;
                let status = list
                    .as_array()
                    .and_then(|a| a.iter().find(|a| a["id"] == id.as_str()))
                    .map(|a| a["status"].as_str().unwrap_or_default().to_owned())
                    .unwrap_or_default();
                assert_ne!(status, "failed", "backfill failed: {list}");
                if status == "ready" {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    return started.elapsed().as_secs_f64();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let during = match queries {
        Some(queries) => {
            searches_while(running, pipeline, queries, || {
                done.load(std::sync::atomic::Ordering::SeqCst)
            })
            .await
        }
        None => Vec::new(),
    };
    (poll.await.expect("poll"), during)
}

struct Row {
    model: String,
    fragments: usize,
    alone: f64,
    backfill: f64,
    before: f64,
    during: f64,
    during_count: usize,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let options = Options::parse();
    let (admin, nats) = app::servers();
    println!(
        "backfill bench: {} documents, models {:?}; load average {}",
        options.docs,
        options.models,
        common::measure::load_average()
    );
    let mut rows = Vec::new();
    for model in &options.models {
        let models_dir = std::env::var("TROVE_MODELS_DIR").unwrap_or_default();
        let running =
            app::start_with(&admin, &nats, true, &[("TROVE_MODELS_DIR", &models_dir)]).await;
        let default_model = create_model(
            &running,
            json!({"name": "hash-384", "provider": "hash", "model_name": "feature-hash", "parameters": {"dimensions": 384}}),
        )
        .await;
        let splitter: Value = running
            .http
            .json(
                Method::GET,
                "/text-splitters?name=recursive-character",
                None,
            )
            .await;
        let pipeline = running
            .http
            .json(
                Method::POST,
                "/pipelines",
                Some(json!({
                    "name": "backfill", "embedding_model_id": default_model,
                    "default_text_splitter_id": splitter["data"][0]["id"],
                    "classifications": ["public"],
                })),
            )
            .await;
        let pipeline = pipeline["id"].as_str().expect("id").to_owned();
        let language = Language::new(7);
        let mut rng = SmallRng::seed_from_u64(11);
        let documents: Vec<Value> = (0..options.docs)
            .map(|i| json!({"external_identifier": format!("d{i}"), "classification": "public", "text": document(&language, &mut rng)}))
            .collect();
        for chunk in documents.chunks(500) {
            running
                .http
                .json(
                    Method::POST,
                    &format!("/pipelines/{pipeline}/documents/batch"),
                    Some(json!({"documents": chunk})),
                )
                .await;
        }
        loop {
            let pending: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM documents WHERE pipeline_id = $1::uuid AND status = 'pending'",
            )
            .bind(&pipeline)
            .fetch_one(running.state.pool.pg_pool())
            .await
            .expect("count");
            if pending == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Let the burst's index build and analyses finish.
        tokio::time::sleep(Duration::from_secs(3)).await;

        let new_model = match model.as_str() {
            "hash" => {
                create_model(
                    &running,
                    json!({"name": "hash-256", "provider": "hash", "model_name": "feature-hash", "parameters": {"dimensions": 256}}),
                )
                .await
            }
            "local" => {
                create_model(
                    &running,
                    json!({"name": "minilm", "provider": "local", "model_name": "all-MiniLM-L6-v2", "dimensions": 384}),
                )
                .await
            }
            other => panic!("unknown model {other}"),
        };
        let texts = fragment_texts(&running, &pipeline).await;
        let alone = model_alone(&running, &new_model, &texts).await;
        let queries: Vec<String> = (0..500).map(|_| language.query(&mut rng)).collect();
        let until = Instant::now() + Duration::from_secs(options.search_seconds);
        let before =
            searches_while(&running, &pipeline, &queries, || Instant::now() >= until).await;

        // The backfill alone, then again (the association removed and added anew) with
        // searches on the default model running meanwhile.
        let (backfill, _) = backfill_with(&running, &pipeline, &new_model, None).await;
        let (_, during) = backfill_with(&running, &pipeline, &new_model, Some(&queries)).await;
        rows.push(Row {
            model: model.clone(),
            fragments: texts.len(),
            alone,
            backfill,
            before: pct(&before, 50.0),
            during: pct(&during, 50.0),
            during_count: during.len(),
        });
        running.stop(false).await;
    }

    let columns = [
        Column::left("model", 6, 0),
        Column::right("fragments", 9, 2),
        Column::right("alone s", 7, 2),
        Column::right("alone f/s", 9, 2),
        Column::right("backfill s", 10, 2),
        Column::right("backfill f/s", 12, 2),
        Column::right("overhead", 8, 2),
        Column::right("p50 before ms", 13, 2),
        Column::right("p50 during ms", 13, 2),
        Column::right("ratio", 5, 2),
        Column::right("searches during", 15, 2),
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.model.clone(),
                r.fragments.to_string(),
                format!("{:.2}", r.alone),
                format!("{:.0}", r.fragments as f64 / r.alone),
                format!("{:.2}", r.backfill),
                format!("{:.0}", r.fragments as f64 / r.backfill),
                format!("{:+.1} %", (r.backfill / r.alone - 1.0) * 100.0),
                format!("{:.2}", r.before),
                format!("{:.2}", r.during),
                format!("{:.2}", r.during / r.before),
                r.during_count.to_string(),
            ]
        })
        .collect();
    print_table(&columns, &table);
    println!(
        "targets: backfill overhead over the model alone ≤ 15 %; search p50 during ≤ 1.3 × before"
    );
}
