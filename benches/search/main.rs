//! End-to-end similarity search at scale: starts Trove in this process against the test
//! Postgres and NATS, creates a pipeline through HTTP (default `hash` model, 384 dimensions,
//! a metadata schema with a `tenant` integer of 1 % selectivity), bulk-loads N fragments with
//! binary COPY straight into `documents`, `fragments` and the association's vector table,
//! rebuilds the HNSW index with the service's DDL, then measures `POST /pipelines/{id}/search`
//! (`similarity`, k 5) against the same statement run directly, with and without the filter.
//!
//! Reported per N and filter: HNSW build time, p50/p99 through HTTP, p50/p99 of the raw
//! statement (the plan of `trove::retrieval::search::nearest_plan` run by `run_plan`, as the
//! service runs it: on a pooled connection of `trove::store::connect_lazy`, whose sessions
//! carry the `hnsw.iterative_scan` and `hnsw.ef_search` settings, alone or in a transaction
//! that sets the plan's `ef_search`), p50 of the library call
//! (`trove::retrieval::search::similarity`), the ratio of the p50s, and recall@5 against an
//! exact scan (in process over every vector, cross-checked with the statement run with index
//! scans disabled). The three paths take turns query by query, each running every query
//! once, a third of the list apart (so none profits from another's freshly read pages).
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
//! Run: `scripts/bench-search [sizes…] [--queries=1000] …`, or directly
//! `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench search -- 100000 1000000`
//! (sizes default to 100000). Options: `--queries=N` measured queries per scenario (1000),
//! `--warmup=N` (200), `--concurrency=N` (4; 0 skips), `--sweep=40,100,200,400` ef_search
//! values (empty skips), `--sweep-queries=N` (300), `--exact-sql=N` queries cross-checked by
//! an exact scan in SQL (20), `--maintenance-work-mem-mb=N` (default N × 4 KiB, at least
//! 256 MB), `--parallel-workers=N` (`max_parallel_maintenance_workers`, 1), `--wait-quiet=S`
//! (before the index build and each measurement, wait up to S seconds until other work
//! leaves the CPUs under 15 % busy; 0), `--keep` (keep the database and print its name).
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
use common::report::{Column, print_table};
use common::text::Language;
use load::Corpus;
use target::{Probe, Target};

const DIM: usize = 384;
const K: usize = 5;
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
                _ if arg == "--keep" => options.keep = true,
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
}

async fn run_size(n: usize, options: &Options, admin: &str, nats: &str) -> Vec<Summary> {
    println!("\n==================== N = {n} fragments ====================");
    let trove = app::start(admin, nats, false).await;
    let (mut target, splitter_id) = target::create(&trove).await;
    let language = Language::new(7);
    let corpus = load::generate(n, &language, &trove.state);
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
    let (warmup, measured) = probes(&language, options);
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
    };
    let mut summaries = Vec::new();
    for filter in scenario::Filter::ALL {
        summaries.push(scenario::run(&mut bench, filter).await);
    }
    breakdown::run(&bench).await;
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

/// The warm-up and measured queries: fresh topic texts, each with a tenant.
fn probes(language: &Language, options: &Options) -> (Vec<Probe>, Vec<Probe>) {
    let mut rng = SmallRng::seed_from_u64(0xC0FFEE);
    let mut probes = |count: usize| -> Vec<Probe> {
        (0..count)
            .map(|_| {
                let text = language.query(&mut rng);
                let vector = hash_embedding(&text, DIM);
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

fn print_summary(summaries: &[Summary]) {
    println!("\n==================== summary (sequential, 1 client, k {K}) ====================");
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
            ]
        })
        .collect();
    print_table(&columns, &rows);
    println!(
        "(latencies in ms; ratio = HTTP p50 / raw SQL p50; recall@{K} of the HTTP results against an exact scan, tie-aware; `rec SQL` the raw statement's; `rec ids` the share of exact ids)"
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
        "similarity search bench: sizes {:?}, {} queries per scenario, k {K}, {} cores, tokio runtime shared by the service and the clients; {}",
        options.sizes,
        options.queries,
        std::thread::available_parallelism().map_or(0, usize::from),
        app::postgres_memory(&admin).await
    );
    let mut summaries = Vec::new();
    for &n in &options.sizes {
        summaries.extend(run_size(n, &options, &admin, &nats).await);
    }
    print_summary(&summaries);
}
