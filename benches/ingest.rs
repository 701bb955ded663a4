//! End-to-end ingestion through HTTP: starts Trove in this process (API and worker) against the
//! test Postgres and NATS, submits documents of about 2 KB with 16 concurrent clients, and
//! waits until every version is `success`. Reports documents/s and fragments/s.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench ingest -- 10000 hash`
//! (`model` is `hash` (default) or `local` for all-MiniLM-L6-v2 from `TROVE_MODELS_DIR`; with
//! `local`, the same fragments are then embedded by the model alone, in the worker's groups
//! of 100 documents, and the ratio of the two times is printed).
//!
//! The pipeline has three classifications and the documents are spread over them. With
//! `--search-after`, as soon as the last version is `success`, similarity (k 5) and MMR (k 5,
//! fetch_k 20) searches naming all three classifications run in turn for 20 s, with the p50 of
//! each per 2-second window; then the `EXPLAIN (ANALYZE, BUFFERS)` of the similarity statement
//! (built as the service builds it) and the table statistics are printed; then `ANALYZE` of
//! `fragments` and of the vector table, 10 s more of searches, and the plan again.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a load tool: failures abort the run"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use tokio::sync::Semaphore;
use trove::config::{Config, QueueNames};
use trove::startup::Application;
use uuid::Uuid;

const SECRET: &str = "BenchBenchBenchBenchBenchBenchBenchBenchBench+/0";

/// The pipeline's classifications; document `i` has the `i % 3`-th.
const CLASSIFICATIONS: [&str; 3] = ["public", "internal", "restricted"];

fn words(seed: usize, count: usize) -> String {
    const VOCABULARY: [&str; 24] = [
        "harbour", "ledger", "river", "signal", "engine", "market", "winter", "orchard", "copper",
        "lantern", "meadow", "archive", "bridge", "canvas", "delta", "forest", "granite",
        "horizon", "island", "journal", "kernel", "lattice", "mosaic", "nectar",
    ];
    (0..count)
        .map(|i| VOCABULARY[(seed * 7 + i * 13 + i / 5) % VOCABULARY.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// About 2 KB of text in paragraphs.
fn document(seed: usize) -> String {
    (0..4)
        .map(|p| format!("Section {p} of record {seed}. {}", words(seed + p, 70)))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let search_after = std::env::args().any(|a| a == "--search-after");
    let documents: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let model = args.get(1).cloned().unwrap_or_else(|| "hash".to_owned());
    let admin = std::env::var("TROVE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://trove@127.0.0.1:55432/postgres".to_owned());
    let nats = std::env::var("TROVE_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:54222".to_owned());

    let database = format!("trove_bench_{}", Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(&admin)
        .await
        .expect("database server");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut conn)
        .await
        .expect("create db");
    let root = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(r, _)| r)
        .to_owned();
    let master = Uuid::new_v4();
    let env = std::collections::HashMap::from([
        ("TROVE_DATABASE_URL", format!("{root}/{database}")),
        ("TROVE_NATS_URL", nats),
        ("TROVE_LISTEN", "127.0.0.1:0".to_owned()),
        ("TROVE_MASTER_KEY_ID", master.to_string()),
        ("TROVE_MASTER_KEY_SECRET", SECRET.to_owned()),
        (
            "TROVE_SECRET",
            "YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoYmU=".to_owned(),
        ),
        ("TROVE_WORKER_METRICS_LISTEN", "off".to_owned()),
        ("TROVE_LOG", "warn".to_owned()),
        (
            "TROVE_MODELS_DIR",
            std::env::var("TROVE_MODELS_DIR").unwrap_or_default(),
        ),
    ]);
    // The index build parameters come from the environment, as for the service.
    let mut config = Config::from_lookup(|k| {
        env.get(k).cloned().or_else(|| {
            k.starts_with("TROVE_HNSW_")
                .then(|| std::env::var(k).ok())?
        })
    })
    .expect("config");
    println!(
        "HNSW index: m = {}, ef_construction = {}",
        config.hnsw.m(),
        config.hnsw.ef_construction()
    );
    let tag = Uuid::new_v4().simple().to_string();
    config.queue = QueueNames {
        stream: format!("BENCH_{tag}"),
        subject_prefix: format!("bench.{tag}"),
        consumer: format!("bench-{tag}"),
        ..QueueNames::default()
    };
    let app = Application::build(config).await.expect("trove starts");
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));

    let client = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str| {
        client
            .request(method, format!("{base}{path}"))
            .header("x-api-key", master.to_string())
            .header("x-api-key-secret", SECRET)
    };
    let models: Value = call(reqwest::Method::GET, "/embedding-models")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let model_id = match model.as_str() {
        "local" => {
            let created: Value = call(reqwest::Method::POST, "/embedding-models")
                .json(&json!({"name": "minilm", "provider": "local", "model_name": "all-MiniLM-L6-v2"}))
                .send().await.unwrap().json().await.unwrap();
            created["id"].clone()
        }
        _ => {
            let created: Value = call(reqwest::Method::POST, "/embedding-models")
                .json(&json!({"name": "hash", "provider": "hash", "model_name": "feature-hash", "parameters": {"dimensions": 384}}))
                .send().await.unwrap().json().await.unwrap();
            created["id"].clone()
        }
    };
    assert!(model_id.is_string(), "model created: {models}");
    let splitters: Value = call(
        reqwest::Method::GET,
        "/text-splitters?name=recursive-character",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let pipeline: Value = call(reqwest::Method::POST, "/pipelines")
        .json(&json!({"name": "bench", "embedding_model_id": model_id, "default_text_splitter_id": splitters["data"][0]["id"],
                      "classifications": CLASSIFICATIONS, "has_full_text_search": true}))
        .send().await.unwrap().json().await.unwrap();
    let pid = pipeline["id"]
        .as_str()
        .expect("pipeline created")
        .to_owned();
    println!(
        "ingesting {documents} documents of ~{} bytes with the {model} embedder",
        document(0).len()
    );

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(16));
    let mut tasks = Vec::with_capacity(documents);
    for i in 0..documents {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let request = call(reqwest::Method::POST, &format!("/pipelines/{pid}/documents"))
            .json(&json!({"external_identifier": format!("doc-{i}"),
                          "classification": CLASSIFICATIONS[i % CLASSIFICATIONS.len()], "text": document(i)}));
        tasks.push(tokio::spawn(async move {
            let status = request.send().await.map(|r| r.status()).ok();
            drop(permit);
            status
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Some(reqwest::StatusCode::CREATED));
    }
    let submitted = started.elapsed();
    loop {
        let page: Value = call(
            reqwest::Method::GET,
            &format!("/pipelines/{pid}/documents?status=success&count=true&first=0"),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        if page["page_info"]["count"].as_u64() == Some(documents as u64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    let mut db = PgConnection::connect(&format!("{root}/{database}"))
        .await
        .unwrap();
    let fragments: i64 = sqlx::query_scalar("SELECT count(*) FROM fragments")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let seconds = elapsed.as_secs_f64();
    println!(
        "submitted in {:.1} s; all success after {seconds:.1} s",
        submitted.as_secs_f64()
    );
    println!("{documents} documents, {fragments} fragments");
    println!(
        "{:.0} documents/s, {:.0} fragments/s",
        documents as f64 / seconds,
        fragments as f64 / seconds
    );
    if model == "local" {
        embedder_alone(documents, seconds);
    }
    if search_after {
        let search = |body: Value| {
            call(reqwest::Method::POST, &format!("/pipelines/{pid}/search")).json(&body)
        };
        searches_after_ingestion(
            &search,
            &mut db,
            &format!("{root}/{database}"),
            &pid,
            documents,
        )
        .await;
    }
    drop(db);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .ok();
}

/// Searches run one after another for `seconds`, alternating similarity and MMR; prints the p50
/// of each per 2-second window.
async fn search_windows<F>(search: &F, query: &str, seconds: u64)
where
    F: Fn(Value) -> reqwest::RequestBuilder,
{
    const WINDOW: Duration = Duration::from_secs(2);
    let bodies = [
        json!({"query": query, "type": "similarity", "classification": CLASSIFICATIONS, "params": {"k": 5}}),
        json!({"query": query, "type": "mmr", "classification": CLASSIFICATIONS, "params": {"k": 5, "fetch_k": 20}}),
    ];
    let started = Instant::now();
    let mut windows: Vec<[Vec<f64>; 2]> = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        for (kind, body) in bodies.iter().enumerate() {
            let at = started.elapsed();
            let sent = Instant::now();
            let reply = search(body.clone()).send().await.unwrap();
            let status = reply.status();
            let text = reply.text().await.unwrap();
            assert!(status.is_success(), "search: {status} {text}");
            let ms = sent.elapsed().as_secs_f64() * 1000.0;
            let window = usize::try_from(at.as_millis() / WINDOW.as_millis()).unwrap();
            if windows.len() <= window {
                windows.resize_with(window + 1, Default::default);
            }
            windows[window][kind].push(ms);
        }
    }
    let p50 = |samples: &mut Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for (i, [similarity, mmr]) in windows.iter_mut().enumerate() {
        println!(
            "  {:>2}–{:>2} s: similarity p50 {:>6.2} ms ({:>3} searches), mmr p50 {:>6.2} ms ({:>3})",
            i * 2,
            i * 2 + 2,
            p50(similarity),
            similarity.len(),
            p50(mmr),
            mmr.len()
        );
    }
}

/// `reltuples` and `relpages` of `fragments` and of the vector table, and when they were
/// last analysed.
async fn print_statistics(db: &mut PgConnection, vector_table: &str) {
    let rows: Vec<(String, f32, i32, Option<i64>, bool)> = sqlx::query_as(
        "SELECT c.relname::text, c.reltuples, c.relpages, s.n_mod_since_analyze,
                (s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL)
         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
         WHERE c.relname IN ('fragments', $1) ORDER BY c.relname",
    )
    .bind(vector_table)
    .fetch_all(db)
    .await
    .unwrap();
    for (name, tuples, pages, modified, analysed) in rows {
        println!(
            "  {name}: reltuples {tuples}, relpages {pages}, rows modified since analysed {}, analysed {analysed}",
            modified.unwrap_or(-1)
        );
    }
}

/// The `EXPLAIN (ANALYZE, BUFFERS)` of the similarity statement of `query` (k 5 over every
/// classification), built as the service builds it, on a connection set up as the service's.
async fn explain_similarity(pool: &sqlx::PgPool, pid: Uuid, ve: Uuid, query: &str) {
    use trove::retrieval::search::{DistanceStrategy, NearestPath, VectorQuery, nearest_plan};
    let classifications: Vec<String> = CLASSIFICATIONS.iter().map(|c| (*c).to_owned()).collect();
    let scope = trove::retrieval::search::Scope {
        pipeline_id: pid,
        classifications: &classifications,
        filter: None,
    };
    let vector = trove::providers::hash_embedding::hash_embedding(query, 384);
    let vector_query = VectorQuery {
        vector_embedding_id: ve,
        vector: &vector,
        strategy: DistanceStrategy::Cosine,
        unit_vectors: true,
        estimated_rows: 0.0,
        selectivity: None,
        path: NearestPath::Index,
        indexed: true,
        gate: None,
    };
    let plan = nearest_plan(&scope, &vector_query, None, 5, false).unwrap();
    let lines: Vec<(String,)> = sqlx::query_as_with(
        sqlx::AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {}", plan.sql)),
        plan.arguments,
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (line,) in lines {
        println!("    {line}");
    }
}

/// The `--search-after` phase (see the top of the file).
async fn searches_after_ingestion<F>(
    search: &F,
    db: &mut PgConnection,
    url: &str,
    pid: &str,
    documents: usize,
) where
    F: Fn(Value) -> reqwest::RequestBuilder,
{
    let pid: Uuid = pid.parse().unwrap();
    let ve: Uuid = sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1")
        .bind(pid)
        .fetch_one(&mut *db)
        .await
        .unwrap();
    let vector_table = trove::store::vectors::table_name(ve);
    let pool = trove::store::connect_lazy(url, 1).unwrap();
    // A document-like text that is none of the documents.
    let query = document(documents + 17);
    println!("statistics when the last version is success:");
    print_statistics(db, &vector_table).await;
    println!("plan of the similarity statement:");
    explain_similarity(&pool, pid, ve, &query).await;
    println!("searches right after ingestion (all three classifications):");
    search_windows(search, &query, 20).await;
    println!("statistics after them:");
    print_statistics(db, &vector_table).await;
    println!("plan of the similarity statement:");
    explain_similarity(&pool, pid, ve, &query).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ANALYZE fragments; ANALYZE {vector_table}"
    )))
    .execute(&mut *db)
    .await
    .unwrap();
    println!("after ANALYZE:");
    print_statistics(db, &vector_table).await;
    search_windows(search, &query, 10).await;
    println!("plan of the similarity statement:");
    explain_similarity(&pool, pid, ve, &query).await;
    pool.close().await;
}

/// The time all-MiniLM-L6-v2 alone needs for the same fragments (split in process with the
/// seeded `recursive-character` configuration, embedded in the worker's groups of 100
/// documents), compared with the pipeline's `pipeline_seconds`.
fn embedder_alone(documents: usize, pipeline_seconds: f64) {
    let dir =
        std::path::PathBuf::from(std::env::var("TROVE_MODELS_DIR").expect("TROVE_MODELS_DIR"));
    let model = trove_embed::LocalModel::load(&dir, "all-MiniLM-L6-v2", 0).expect("model loads");
    let config = trove_text::SplitterConfig::default_for("recursive-character").unwrap();
    let groups: Vec<Vec<String>> = (0..documents)
        .collect::<Vec<_>>()
        .chunks(100)
        .map(|chunk| {
            chunk
                .iter()
                .flat_map(|i| trove_text::split(&config, &document(*i)))
                .collect()
        })
        .collect();
    let fragments: usize = groups.iter().map(Vec::len).sum();
    let started = Instant::now();
    for group in &groups {
        let texts: Vec<&str> = group.iter().map(String::as_str).collect();
        model.embed(&texts).expect("embeds");
    }
    let alone = started.elapsed().as_secs_f64();
    println!(
        "embedder alone: {fragments} fragments in {alone:.1} s ({:.0} fragments/s); pipeline / embedder = {:.3}",
        fragments as f64 / alone,
        pipeline_seconds / alone
    );
}
