//! End-to-end similarity search at scale: starts Trove in this process against the test
//! Postgres and NATS, creates a pipeline through HTTP (default `hash` model, or with
//! `--vectors=minilm` an `openai` model on a fake server answering with MiniLM vectors; 384
//! dimensions; a metadata schema with a `tenant` integer of 1 % selectivity), bulk-loads N
//! fragments with binary COPY straight into `documents`, `fragments` and the association's
//! vector table, rebuilds the HNSW index with the service's DDL, then measures
//! `POST /pipelines/{id}/search` (`similarity`, k 5) against the same statement run directly,
//! with and without the filter.
//!
//! Reported per N and filter: HNSW build time, p50/p99 through HTTP, p50/p99 of the raw
//! statement (the plan of `trove::retrieval::search::nearest_plan` run by `run_plan`, as the
//! service runs it: on a pooled connection of `trove::store::connect_lazy`, whose sessions
//! carry the `hnsw.iterative_scan` and `hnsw.ef_search` settings, alone or in a transaction
//! that sets the plan's `ef_search`), p50 of the library call
//! (`trove::retrieval::search::similarity`), the ratio of the p50s, recall@5 against an
//! exact scan (in process over every vector, cross-checked with the statement run with index
//! scans disabled), and recall@10 of a k-10 HTTP search of every measured query (untimed,
//! after the measured ones) against the exact top-10. The three paths take turns query by
//! query, each running every query once, a third of the list apart (so none profits from
//! another's freshly read pages).
//! The filtered search runs three times: with the pipeline's default (Trove's own index on each
//! declared field), without any index on the field (the schema's `"x-trove-index": false`),
//! then with a metadata index on the field. Then
//! index scan settings on the raw statement (ef_search values, strict order), the same
//! searches with 4 concurrent clients, and a breakdown of the service path.
//!
//! Data: synthetic texts from a topic model (20,000 pseudo-words, 2,000 topics of 40 words;
//! each fragment mixes a primary and a secondary topic with common words), embedded with the
//! service's own `hash` embedder, so queries sent as text through HTTP embed to exactly the
//! vectors given to the raw statement. Queries are fresh texts of one topic (6–14 words).
//!
//! Real vectors (`--vectors=minilm`): hash vectors hide recall problems that a real model's
//! vectors show. With this option the fragment and query texts (the same ones) are embedded
//! with the local all-MiniLM-L6-v2 (`trove_embed`, from `TROVE_MODELS_DIR`, 384 d, unit
//! vectors) in batches of 64, with a progress line on stderr every 5 s, and kept in a cache:
//! `.data/bench-vectors/minilm-search-<N>-seed7.f32` (`common::real_vectors`: the fragment
//! and query vectors, a header with their counts, the dimension and hashes of the first texts;
//! written atomically), which later runs of the same N load instead (and say so); a run with
//! more queries than the file holds embeds and appends the missing ones. The fragment vectors
//! are loaded by COPY as the hash ones are. The pipeline's model is then an `openai` embedding
//! model registered through HTTP on a fake OpenAI-compatible embeddings server in this
//! process (`POST /v1/embeddings` on loopback) that answers each text with its cached vector
//! (computing only texts it does not know, such as the probe `Trove` of the model's
//! creation), so a search through HTTP embeds its query to exactly the raw statement's vector
//! and its latency measures retrieval, not a forward pass; it costs one loopback request, which
//! the breakdown times in place of the hash embedding.
//!
//! Run: `scripts/bench-search [sizes…] [--queries=1000] …`, or directly
//! `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench search -- 100000 1000000`
//! (sizes default to 100000). Options: `--queries=N` measured queries per scenario (1000),
//! `--warmup=N` (200), `--concurrency=N` (4; 0 skips), `--sweep=40,100,200,400` ef_search
//! values (empty skips), `--sweep-queries=N` (300), `--exact-sql=N` queries cross-checked by
//! an exact scan in SQL (20), `--maintenance-work-mem-mb=N` (default N × 4 KiB, at least
//! 256 MB), `--parallel-workers=N` (`max_parallel_maintenance_workers`, 1), `--wait-quiet=S`
//! (before the index build and each measurement, wait up to S seconds until other work
//! leaves the CPUs under 15 % busy; 0), `--keep` (keep the database and print its name),
//! `--unfiltered` (the unfiltered scenario only: no filtered ones, no breakdown),
//! `--vectors=hash|minilm` (`hash`; see *Real vectors*; `minilm` needs `TROVE_MODELS_DIR`).
//!
//! Modules: `load` (the corpus and its COPY, the index build), `target` (the pipeline, its
//! queries and statements), `scenario` (one filter scenario), `breakdown` (the service path
//! step by step); `../common` holds what the service bench (`benches/service.rs`) shares:
//! starting Trove, the floor statement, exact neighbours and recall, percentiles, tables.

#![expect(
    clippy::expect_used,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    reason = "a load tool: failures abort the run"
)]

#[path = "../common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

mod breakdown;
mod load;
mod scenario;
mod target;

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sqlx::{Connection, PgConnection, PgPool};
use trove::providers::hash_embedding::hash_embedding;

use common::app::{self, Running};
use common::real_vectors::{self, CacheKey, FakeEmbeddings, VectorSource};
use common::report::{Column, print_table};
use common::text::Language;
use load::Corpus;
use target::{Probe, Target};

const DIM: usize = 384;
const K: usize = 5;
/// The second k of the recall figures (a k-10 search of every measured query, untimed).
const K10: usize = 10;
/// The seed of the synthetic language, also in the name of the vector cache's files.
const LANGUAGE_SEED: u64 = 7;
const TENANTS: i64 = 100;
const FRAGMENTS_PER_DOCUMENT: usize = 8;

// ---- Options -----------------------------------------------------------------------------

struct Options {
    sizes: Vec<usize>,
    queries: usize,
    warmup: usize,
    concurrency: usize,
    sweep: Vec<u32>,
    sweep_queries: usize,
    exact_sql: usize,
    maintenance_work_mem_mb: Option<u64>,
    parallel_workers: u32,
    wait_quiet: u64,
    keep: bool,
    vectors: VectorSource,
    /// `--unfiltered`: the unfiltered scenario only (no filtered ones, no breakdown).
    unfiltered: bool,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            sizes: Vec::new(),
            queries: 1000,
            warmup: 200,
            concurrency: 4,
            sweep: vec![40, 100, 200, 400],
            sweep_queries: 300,
            exact_sql: 20,
            maintenance_work_mem_mb: None,
            parallel_workers: 1,
            wait_quiet: 0,
            keep: false,
            vectors: VectorSource::Hash,
            unfiltered: false,
        };
        for arg in std::env::args().skip(1) {
            let number = |v: &str| -> usize { v.replace('_', "").parse().expect("a number") };
            match arg.split_once('=') {
                Some(("--queries", v)) => options.queries = number(v),
                Some(("--warmup", v)) => options.warmup = number(v),
                Some(("--concurrency", v)) => options.concurrency = number(v),
                Some(("--sweep", v)) => {
                    options.sweep = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.parse().expect("ef_search values"))
                        .collect();
                }
                Some(("--sweep-queries", v)) => options.sweep_queries = number(v),
                Some(("--exact-sql", v)) => options.exact_sql = number(v),
                Some(("--maintenance-work-mem-mb", v)) => {
                    options.maintenance_work_mem_mb = Some(number(v) as u64);
                }
                Some(("--parallel-workers", v)) => options.parallel_workers = number(v) as u32,
                Some(("--wait-quiet", v)) => options.wait_quiet = number(v) as u64,
                Some(("--vectors", v)) => options.vectors = VectorSource::parse(v),
                _ if arg == "--keep" => options.keep = true,
                _ if arg == "--unfiltered" => options.unfiltered = true,
                _ if arg.starts_with("--") => {} // `--bench` from cargo
                _ => options.sizes.push(number(&arg)),
            }
        }
        if options.sizes.is_empty() {
            options.sizes.push(100_000);
        }
        options
    }
}

// ---- One size ----------------------------------------------------------------------------

/// One size under measurement: Trove, its loaded pipeline, the queries, and the connections
/// the statements run on alone.
struct Bench<'a> {
    n: usize,
    options: &'a Options,
    trove: Running,
    /// A plain connection to the bench's database (loading, ANALYZE, settings).
    db: PgConnection,
    /// The pool the statements run on alone (`trove::store::connect_lazy`, 4 connections).
    raw: trove::store::Pool,
    target: Target,
    corpus: Corpus,
    warmup: Vec<Probe>,
    measured: Vec<Probe>,
    /// The HNSW build's time.
    build: Duration,
    /// With `--vectors=minilm`: the fake embeddings server the pipeline's model calls.
    fake: Option<FakeEmbeddings>,
}

/// One row of the summary.
struct Summary {
    n: usize,
    filter: &'static str,
    build_s: f64,
    http: (f64, f64),
    sql: (f64, f64),
    library: f64,
    recall: f64,
    recall_ids: f64,
    recall_sql: f64,
    /// Recall@10 of the HTTP results of a k-10 search of every measured query.
    recall10: f64,
}

async fn run_size(n: usize, options: &Options, admin: &str, nats: &str) -> Vec<Summary> {
    println!("\n==================== N = {n} fragments ====================");
    let trove = app::start(admin, nats, false).await;
    let language = Language::new(LANGUAGE_SEED);
    let (mut warmup, mut measured) = probes(&language, options);
    let mut corpus = load::generate(n, &language, &trove.state, options.vectors);
    let fake = match options.vectors {
        VectorSource::Hash => None,
        VectorSource::MiniLm => {
            Some(real_vectors_of(n, &mut corpus, &mut warmup, &mut measured).await)
        }
    };
    let model_id = match &fake {
        Some(fake) => Some(fake.register(&trove.http, "bench-minilm").await),
        None => None,
    };
    let (mut target, splitter_id) = target::create(&trove, model_id).await;
    let mut db = PgConnection::connect(&trove.url).await.expect("bench db");
    load::copy_corpus(&mut db, &corpus, &target, splitter_id).await;
    let build = load::build_hnsw(&mut db, n, options, &trove.state, &target.vector_table()).await;
    target.estimated_rows =
        trove::store::pipelines::search_context(trove.state.pool.pg_pool(), target.pipeline_id)
            .await
            .expect("search context")
            .expect("pipeline")
            .ve_estimated_rows
            .map_or(0.0, f64::from);
    target.choose_paths(&trove.state.pool).await;
    print_server_settings(&mut db).await;
    let raw = trove::store::connect_lazy(&trove.url, 16).expect("raw pool");
    print_session_settings(&raw).await;
    let mut bench = Bench {
        n,
        options,
        trove,
        db,
        raw,
        target,
        corpus,
        warmup,
        measured,
        build,
        fake,
    };
    let mut summaries = Vec::new();
    let filters = if options.unfiltered {
        &scenario::Filter::ALL[..1]
    } else {
        &scenario::Filter::ALL[..]
    };
    for &filter in filters {
        summaries.push(scenario::run(&mut bench, filter).await);
    }
    if !options.unfiltered {
        breakdown::run(&bench).await;
    }
    let Bench { trove, db, raw, .. } = bench;
    drop(db);
    raw.close().await;
    trove.stop(options.keep).await;
    summaries
}

async fn print_server_settings(db: &mut PgConnection) {
    let settings: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, current_setting(name) FROM unnest(ARRAY['shared_buffers', 'work_mem', 'jit', 'effective_cache_size']) AS name",
    )
    .fetch_all(db)
    .await
    .expect("settings");
    println!(
        "server: {}",
        settings
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

async fn print_session_settings(raw: &PgPool) {
    let session: (String, String) = sqlx::query_as(
        "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search')",
    )
    .fetch_one(raw)
    .await
    .expect("session settings");
    println!(
        "session settings of the service's connections (and the raw statement's): hnsw.iterative_scan = {}, hnsw.ef_search = {}",
        session.0, session.1
    );
}

/// With `--vectors=minilm`: the fragments' and queries' MiniLM vectors (from the cache, or
/// computed and cached) put in place of the hash vectors, and the fake embeddings server that
/// answers the service with them (queries, fragments, and anything else computed).
async fn real_vectors_of(
    n: usize,
    corpus: &mut Corpus,
    warmup: &mut [Probe],
    measured: &mut [Probe],
) -> FakeEmbeddings {
    let model = real_vectors::load_model();
    let key = CacheKey {
        kind: "search".to_owned(),
        size: Some(n),
        seed: LANGUAGE_SEED,
    };
    let probes: Vec<&mut Probe> = warmup.iter_mut().chain(measured.iter_mut()).collect();
    let query_texts: Vec<String> = probes.iter().map(|p| p.text.clone()).collect();
    let vectors = {
        let model = model.clone();
        let texts = corpus.texts.clone();
        tokio::task::spawn_blocking(move || {
            let fragments: Vec<&str> = texts.iter().map(String::as_str).collect();
            let queries: Vec<&str> = query_texts.iter().map(String::as_str).collect();
            real_vectors::cached_vectors(&model, &key, &fragments, &queries)
        })
        .await
        .expect("vectors")
    };
    assert_eq!(vectors.dim, DIM);
    corpus.replace_vectors(&vectors.fragments);
    let mut known: Vec<(String, Vec<f32>)> = Vec::with_capacity(n + probes.len());
    for (probe, vector) in probes.into_iter().zip(vectors.queries) {
        probe.vector.clone_from(&vector);
        known.push((probe.text.clone(), vector));
    }
    known.extend(corpus.texts.iter().cloned().zip(vectors.fragments));
    FakeEmbeddings::start(model, known).await
}

/// The warm-up and measured queries: fresh topic texts, each with a tenant, and (for `hash`
/// vectors) their vector.
fn probes(language: &Language, options: &Options) -> (Vec<Probe>, Vec<Probe>) {
    let mut rng = SmallRng::seed_from_u64(0xC0FFEE);
    let hash = options.vectors == VectorSource::Hash;
    let mut probes = |count: usize| -> Vec<Probe> {
        (0..count)
            .map(|_| {
                let text = language.query(&mut rng);
                let vector = if hash {
                    hash_embedding(&text, DIM)
                } else {
                    Vec::new()
                };
                Probe {
                    text,
                    vector,
                    tenant: rng.random_range(0..TENANTS),
                }
            })
            .collect()
    };
    let warmup = probes(options.warmup);
    let measured = probes(options.queries);
    println!(
        "queries: {} fresh topic texts (6–14 words), k = {K}; warm-up {} others; example: {:?}",
        measured.len(),
        warmup.len(),
        measured
            .first()
            .map(|p| p.text.as_str())
            .unwrap_or_default()
    );
    (warmup, measured)
}

fn print_summary(summaries: &[Summary], vectors: VectorSource) {
    println!(
        "\n==================== summary (sequential, 1 client, k {K}, {} vectors) ====================",
        vectors.label()
    );
    let columns = [
        Column::right("N", 9, 0),
        Column::left("filter", 15, 2),
        Column::right("build s", 9, 1),
        Column::right("HTTP p50", 9, 2),
        Column::right("HTTP p99", 9, 1),
        Column::right("SQL p50", 9, 2),
        Column::right("SQL p99", 9, 1),
        Column::right("lib p50", 9, 2),
        Column::right("ratio", 7, 2),
        Column::right("recall", 8, 2),
        Column::right("rec SQL", 8, 1),
        Column::right("rec ids", 8, 1),
        Column::right("rec@10", 8, 1),
    ];
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.n.to_string(),
                s.filter.to_owned(),
                format!("{:.1}", s.build_s),
                format!("{:.3}", s.http.0),
                format!("{:.3}", s.http.1),
                format!("{:.3}", s.sql.0),
                format!("{:.3}", s.sql.1),
                format!("{:.3}", s.library),
                format!("{:.2}", s.http.0 / s.sql.0),
                format!("{:.4}", s.recall),
                format!("{:.4}", s.recall_sql),
                format!("{:.4}", s.recall_ids),
                format!("{:.4}", s.recall10),
            ]
        })
        .collect();
    print_table(&columns, &rows);
    println!(
        "(latencies in ms; ratio = HTTP p50 / raw SQL p50; recall@{K} of the HTTP results against an exact scan, tie-aware; `rec SQL` the raw statement's; `rec ids` the share of exact ids; `rec@10` recall@{K10} of a k-{K10} HTTP search of every measured query, tie-aware)"
    );
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "warn,sqlx::query=error,sqlx::postgres::notice=info",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = Options::parse();
    let (admin, nats) = app::servers();
    println!(
        "similarity search bench: sizes {:?}, {} queries per scenario, k {K}, {} vectors, {} cores, tokio runtime shared by the service and the clients; {}",
        options.sizes,
        options.queries,
        options.vectors.label(),
        std::thread::available_parallelism().map_or(0, usize::from),
        app::postgres_memory(&admin).await
    );
    let mut summaries = Vec::new();
    for &n in &options.sizes {
        summaries.extend(run_size(n, &options, &admin, &nats).await);
    }
    print_summary(&summaries, options.vectors);
}
