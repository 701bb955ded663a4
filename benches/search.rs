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
//! The filtered search runs twice: without, then with a metadata index on the field. Then
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

#![expect(
    clippy::expect_used,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::too_many_lines,
    reason = "a load tool: failures abort the run"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sea_query::Condition;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, Row};
use trove::config::{Config, QueueNames};
use trove::providers::hash_embedding::hash_embedding;
use trove::retrieval::cost::{self, ScopeEstimate};
use trove::retrieval::search::{
    self, DistanceStrategy, NearestPath, NearestPlan, Scope, VectorQuery,
};
use trove::startup::Application;
use trove::state::AppState;
use trove_query::classification::ClassificationRequest;
use uuid::Uuid;

const SECRET: &str = "BenchBenchBenchBenchBenchBenchBenchBenchBench+/0";
const DIM: usize = 384;
const K: usize = 5;
const TENANTS: i64 = 100;
const FRAGMENTS_PER_DOCUMENT: usize = 8;
const VOCABULARY: usize = 20_000;
const COMMON: usize = 500;
const TOPICS: usize = 2_000;
const TOPIC_WORDS: usize = 40;
const CHUNK: usize = 4 << 20;
/// What the service runs before the statement when `k` exceeds `SESSION_EF_SEARCH` (and the
/// older per-search transaction, measured for comparison).
const SET_CONFIG: &str = "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', $1, true)";
/// Microseconds from the Unix epoch to the Postgres epoch (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

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

// ---- Synthetic texts ---------------------------------------------------------------------

const SYLLABLES: [&str; 20] = [
    "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "ze", "ba", "de", "fi", "go", "hu", "ja",
    "ke", "li", "mo", "ni",
];

/// A pseudo-word per index: its base-20 digits as syllables (at least two), all distinct.
fn pseudo_word(index: usize) -> String {
    let mut digits = Vec::new();
    let mut n = index;
    loop {
        digits.push(n % SYLLABLES.len());
        n /= SYLLABLES.len();
        if n == 0 {
            break;
        }
    }
    if digits.len() < 2 {
        digits.push(0);
    }
    digits.iter().rev().map(|d| SYLLABLES[*d]).collect()
}

/// Words, topics and the two text shapes (fragments and queries).
struct Language {
    words: Vec<String>,
    topics: Vec<Vec<u32>>,
}

impl Language {
    fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let words = (0..VOCABULARY).map(pseudo_word).collect();
        let topics = (0..TOPICS)
            .map(|_| {
                (0..TOPIC_WORDS)
                    .map(|_| rng.random_range(COMMON as u32..VOCABULARY as u32))
                    .collect()
            })
            .collect();
        Self { words, topics }
    }

    /// A common word: heavily skewed towards the first indexes (40 % below 500).
    fn common(&self, rng: &mut SmallRng) -> &str {
        let u: f64 = rng.random();
        &self.words[((VOCABULARY as f64) * u.powi(4)) as usize]
    }

    /// A word of a topic, skewed towards its first words.
    fn topical(&self, rng: &mut SmallRng, topic: usize) -> &str {
        let u: f64 = rng.random();
        let i = ((TOPIC_WORDS as f64) * u.powf(1.5)) as usize;
        &self.words[self.topics[topic][i.min(TOPIC_WORDS - 1)] as usize]
    }

    fn sentence(tokens: Vec<&str>) -> String {
        let mut text = String::with_capacity(tokens.len() * 8);
        for (i, token) in tokens.iter().enumerate() {
            if i > 0 {
                text.push_str(if i % 12 == 0 { ". " } else { " " });
            }
            if i % 12 == 0 {
                let mut chars = token.chars();
                if let Some(first) = chars.next() {
                    text.extend(first.to_uppercase());
                    text.push_str(chars.as_str());
                }
            } else {
                text.push_str(token);
            }
        }
        text.push('.');
        text
    }

    /// A fragment of 40–64 words: 55 % primary topic, 15 % secondary, 30 % common words.
    fn fragment(&self, rng: &mut SmallRng, primary: usize, secondary: usize) -> String {
        let count = rng.random_range(40..=64);
        let tokens = (0..count)
            .map(|_| {
                let r: f64 = rng.random();
                if r < 0.55 {
                    self.topical(rng, primary)
                } else if r < 0.70 {
                    self.topical(rng, secondary)
                } else {
                    self.common(rng)
                }
            })
            .collect();
        Self::sentence(tokens)
    }

    /// A query of 6–14 words: 75 % of one topic, 25 % common words.
    fn query(&self, rng: &mut SmallRng) -> String {
        let topic = rng.random_range(0..TOPICS);
        let count = rng.random_range(6..=14);
        let tokens = (0..count)
            .map(|_| {
                if rng.random::<f64>() < 0.75 {
                    self.topical(rng, topic)
                } else {
                    self.common(rng)
                }
            })
            .collect();
        Self::sentence(tokens)
    }
}

// ---- Corpus and binary COPY --------------------------------------------------------------

struct Corpus {
    /// Per document: id, version (µs since the Unix epoch), tenant.
    documents: Vec<(Uuid, i64, i64)>,
    /// Per fragment: id, document index, encrypted content.
    fragments: Vec<(Uuid, u32, Vec<u8>)>,
    /// Every vector, back to back.
    vectors: Vec<f32>,
    norms: Vec<f32>,
    index_of: HashMap<Uuid, u32>,
    /// Fragment indexes of each tenant.
    by_tenant: Vec<Vec<u32>>,
}

impl Corpus {
    fn generate(n: usize, language: &Language, state: &AppState) -> Self {
        let mut rng = SmallRng::seed_from_u64(0x5EA2C4);
        let document_count = n.div_ceil(FRAGMENTS_PER_DOCUMENT);
        let start = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
        let mut documents = Vec::with_capacity(document_count);
        let mut fragments = Vec::with_capacity(n);
        let mut vectors = Vec::with_capacity(n * DIM);
        let mut norms = Vec::with_capacity(n);
        let mut index_of = HashMap::with_capacity(n);
        let mut by_tenant = vec![Vec::new(); TENANTS as usize];
        for d in 0..document_count {
            let tenant = rng.random_range(0..TENANTS);
            documents.push((Uuid::now_v7(), start + d as i64, tenant));
            let primary = rng.random_range(0..TOPICS);
            let secondary = rng.random_range(0..TOPICS);
            let here = FRAGMENTS_PER_DOCUMENT.min(n - d * FRAGMENTS_PER_DOCUMENT);
            for _ in 0..here {
                let text = language.fragment(&mut rng, primary, secondary);
                let vector = hash_embedding(&text, DIM);
                norms.push(vector.iter().map(|x| x * x).sum::<f32>().sqrt());
                vectors.extend_from_slice(&vector);
                let id = Uuid::now_v7();
                let index = fragments.len() as u32;
                index_of.insert(id, index);
                by_tenant[tenant as usize].push(index);
                fragments.push((id, d as u32, state.cipher.encrypt(text.as_bytes())));
            }
        }
        Self {
            documents,
            fragments,
            vectors,
            norms,
            index_of,
            by_tenant,
        }
    }

    fn vector(&self, index: u32) -> &[f32] {
        let i = index as usize * DIM;
        &self.vectors[i..i + DIM]
    }

    fn distance(&self, query: &[f32], query_norm: f32, index: u32) -> f64 {
        let dot = dot(query, self.vector(index));
        1.0 - f64::from(dot) / (f64::from(query_norm) * f64::from(self.norms[index as usize]))
    }
}

/// The binary COPY format (header, tuples, trailer), sent in chunks.
struct Binary {
    buf: Vec<u8>,
}

impl Binary {
    fn new() -> Self {
        let mut buf = Vec::with_capacity(CHUNK + (64 << 10));
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        Self { buf }
    }
    fn row(&mut self, fields: i16) {
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }
    fn len(&mut self, n: usize) {
        self.buf
            .extend_from_slice(&i32::try_from(n).expect("field size").to_be_bytes());
    }
    fn uuid(&mut self, id: Uuid) {
        self.len(16);
        self.buf.extend_from_slice(id.as_bytes());
    }
    fn int8(&mut self, v: i64) {
        self.len(8);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn int4(&mut self, v: i32) {
        self.len(4);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn boolean(&mut self, v: bool) {
        self.len(1);
        self.buf.push(u8::from(v));
    }
    fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.buf.extend_from_slice(v);
    }
    fn jsonb(&mut self, v: &str) {
        self.len(v.len() + 1);
        self.buf.push(1);
        self.buf.extend_from_slice(v.as_bytes());
    }
    fn timestamptz(&mut self, unix_micros: i64) {
        self.int8(unix_micros - PG_EPOCH_MICROS);
    }
    /// pgvector's binary form: dimensions (int16), 0 (int16), then float4 values.
    fn vector(&mut self, v: &[f32]) {
        self.len(4 + 4 * v.len());
        self.buf
            .extend_from_slice(&i16::try_from(v.len()).expect("dims").to_be_bytes());
        self.buf.extend_from_slice(&0i16.to_be_bytes());
        for x in v {
            self.buf.extend_from_slice(&x.to_be_bytes());
        }
    }
}

/// Streams rows into `COPY … FROM STDIN (FORMAT binary)`; returns the rows copied.
async fn copy_binary(
    conn: &mut PgConnection,
    statement: &str,
    rows: usize,
    mut encode: impl FnMut(&mut Binary, usize),
) -> u64 {
    let mut copy = conn.copy_in_raw(statement).await.expect("copy starts");
    let mut binary = Binary::new();
    for i in 0..rows {
        encode(&mut binary, i);
        if binary.buf.len() >= CHUNK {
            copy.send(std::mem::take(&mut binary.buf))
                .await
                .expect("copy data");
            binary.buf.reserve(CHUNK + (64 << 10));
        }
    }
    binary.buf.extend_from_slice(&(-1i16).to_be_bytes());
    copy.send(binary.buf).await.expect("copy data");
    copy.finish().await.expect("copy finishes")
}

/// Documents alternate between the two classifications.
fn classification(document: usize) -> &'static str {
    if document.is_multiple_of(2) {
        "public"
    } else {
        "restricted"
    }
}

fn metadata(tenant: i64, document: usize) -> String {
    json!({"tenant": tenant, "source": format!("bench-{document:07}")}).to_string()
}

// ---- Exact search ------------------------------------------------------------------------

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = a
        .chunks_exact(8)
        .remainder()
        .iter()
        .zip(b.chunks_exact(8).remainder())
        .map(|(x, y)| x * y)
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// The `K` closest (distance, fragment index), ascending.
#[derive(Clone, Default)]
struct TopK(Vec<(f64, u32)>);

impl TopK {
    fn push(&mut self, distance: f64, index: u32) {
        if self.0.len() == K && distance >= self.0[K - 1].0 {
            return;
        }
        let at = self.0.partition_point(|(d, _)| *d <= distance);
        self.0.insert(at, (distance, index));
        self.0.truncate(K);
    }
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// Exact top-k of every query over `candidates` (every fragment when `None`), on two threads.
fn exact_top(corpus: &Corpus, queries: &[Probe], filtered: bool) -> Vec<TopK> {
    let mut out = vec![TopK::default(); queries.len()];
    let half = queries.len().div_ceil(2).max(1);
    std::thread::scope(|scope| {
        for (qs, tops) in queries.chunks(half).zip(out.chunks_mut(half)) {
            scope.spawn(move || {
                for (block, tops) in qs.chunks(8).zip(tops.chunks_mut(8)) {
                    if filtered {
                        for (q, top) in block.iter().zip(tops.iter_mut()) {
                            let qn = norm(&q.vector);
                            for &i in &corpus.by_tenant[q.tenant as usize] {
                                top.push(corpus.distance(&q.vector, qn, i), i);
                            }
                        }
                    } else {
                        let qn: Vec<f32> = block.iter().map(|q| norm(&q.vector)).collect();
                        for i in 0..corpus.fragments.len() as u32 {
                            for ((q, top), n) in block.iter().zip(tops.iter_mut()).zip(&qn) {
                                top.push(corpus.distance(&q.vector, *n, i), i);
                            }
                        }
                    }
                }
            });
        }
    });
    out
}

/// Recall of `found` against the exact top-k: a result counts when its exact distance is
/// within the k-th exact distance (ties at the boundary are all correct answers). Also the
/// plain share of exact ids found.
fn recall(corpus: &Corpus, probe: &Probe, exact: &TopK, found: &[Uuid]) -> (usize, usize, usize) {
    let wanted = exact.0.len();
    let Some(&(kth, _)) = exact.0.last() else {
        return (0, 0, 0);
    };
    let qn = norm(&probe.vector);
    let mut tie_aware = 0;
    let mut ids = 0;
    for id in found.iter().take(K) {
        let Some(&index) = corpus.index_of.get(id) else {
            continue;
        };
        if corpus.distance(&probe.vector, qn, index) <= kth + 1e-6 {
            tie_aware += 1;
        }
        if exact.0.iter().any(|(_, i)| *i == index) {
            ids += 1;
        }
    }
    (tie_aware, ids, wanted)
}

// ---- The statement -----------------------------------------------------------------------

/// The statement run directly as the service runs it (`trove::retrieval::search::run_plan`):
/// on a pooled connection of `trove::store::connect_lazy`, whose sessions start with
/// `hnsw.iterative_scan = relaxed_order` and `hnsw.ef_search = SESSION_EF_SEARCH`, alone when
/// the plan keeps that candidate list, else in a transaction that sets the plan's.
async fn floor_search(pool: &PgPool, plan: NearestPlan) -> Vec<(Uuid, f64)> {
    let mut conn = pool.acquire().await.expect("connection");
    let rows = search::run_plan(&mut conn, plan)
        .await
        .expect("search statement");
    hits_of(&rows)
}

/// The statement with index scans disabled: an exact scan.
async fn exact_search(pool: &PgPool, plan: NearestPlan) -> Vec<(Uuid, f64)> {
    let NearestPlan { sql, arguments, .. } = plan;
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL enable_indexscan = off")
        .execute(&mut *tx)
        .await
        .expect("set");
    let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
        .fetch_all(&mut *tx)
        .await
        .expect("search statement");
    tx.commit().await.expect("commit");
    hits_of(&rows)
}

/// The statement alone on a connection whose session settings the caller chose.
async fn session_search(conn: &mut PgConnection, plan: NearestPlan) -> Vec<(Uuid, f64)> {
    let NearestPlan { sql, arguments, .. } = plan;
    let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
        .fetch_all(conn)
        .await
        .expect("search statement");
    hits_of(&rows)
}

/// (id, score) sorted by score, as the service re-sorts `relaxed_order` results.
fn hits_of(rows: &[sqlx::postgres::PgRow]) -> Vec<(Uuid, f64)> {
    let mut hits: Vec<(Uuid, f64)> = rows
        .iter()
        .map(|r| (r.get::<Uuid, _>("id"), r.get::<f64, _>("score")))
        .collect();
    hits.sort_by(|a, b| a.1.total_cmp(&b.1));
    hits.truncate(K);
    hits
}

// ---- Measurement helpers -----------------------------------------------------------------

/// A query: its text, its vector (the service computes the same), its tenant.
struct Probe {
    text: String,
    vector: Vec<f32>,
    tenant: i64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile in milliseconds.
fn pct(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    ms(sorted[rank.min(sorted.len()) - 1])
}

/// A plan line with vector literals (`'[…]'`) shortened.
fn elide_vectors(line: &str) -> String {
    let mut out = String::with_capacity(line.len().min(400));
    let mut rest = line;
    while let Some(start) = rest.find("'[") {
        out.push_str(&rest[..start]);
        match rest[start..].find("]'") {
            Some(end) => {
                out.push_str("'[…]'");
                rest = &rest[start + end + 2..];
            }
            None => {
                out.push_str("'[…");
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// (busy, total) jiffies of all CPUs, from `/proc/stat`.
fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Waits (at most `seconds`) until the machine is quiet: under 15 % CPU busy over two
/// consecutive 5-second windows (this process is idle meanwhile, so that is other work).
async fn wait_quiet(seconds: u64) {
    if seconds == 0 {
        return;
    }
    let started = Instant::now();
    let mut quiet_windows = 0;
    loop {
        let (busy0, total0) = cpu_jiffies();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (busy1, total1) = cpu_jiffies();
        let busy = (busy1 - busy0) as f64 / Ord::max(total1 - total0, 1) as f64;
        quiet_windows = if busy < 0.15 { quiet_windows + 1 } else { 0 };
        if quiet_windows >= 2 {
            return;
        }
        if started.elapsed().as_secs() >= seconds {
            println!(
                "(CPU still {:.0} % busy after waiting {seconds} s; measuring anyway)",
                busy * 100.0
            );
            return;
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

struct Http {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl Http {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.key)
            .header("x-api-key-secret", SECRET)
    }

    async fn json(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("http");
        let status = response.status();
        let value: Value = response.json().await.expect("json body");
        assert!(status.is_success(), "{path}: {status} {value}");
        value
    }

    /// One search; the timer covers sending the prepared request and reading the whole body.
    async fn search(&self, path: &str, body: &Value) -> (Duration, Vec<(Uuid, f64)>) {
        let request = self
            .request(reqwest::Method::POST, path)
            .json(body)
            .build()
            .expect("request");
        let started = Instant::now();
        let response = self.client.execute(request).await.expect("search");
        let status = response.status();
        let bytes = response.bytes().await.expect("search body");
        let elapsed = started.elapsed();
        assert!(
            status.is_success(),
            "search: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        let hits: Vec<Value> = serde_json::from_slice(&bytes).expect("search json");
        let hits = hits
            .iter()
            .map(|h| {
                (
                    h["id"].as_str().and_then(|s| s.parse().ok()).expect("id"),
                    h["score"].as_f64().expect("score"),
                )
            })
            .collect();
        (elapsed, hits)
    }
}

/// What a search scenario needs: the pipeline, its vector table and resolved
/// classifications.
struct Target {
    pipeline_id: Uuid,
    ve_id: Uuid,
    schema: Value,
    classifications: Vec<String>,
    path: String,
    /// What the service reads as the association's vector count (`pg_class.reltuples`).
    estimated_rows: f64,
    /// The planner's view of each tenant's filtered scope, from which the service chooses
    /// its path (`cost::choose`), by tenant.
    filtered_scopes: Vec<ScopeEstimate>,
}

impl Target {
    fn filter_json(probe: &Probe, filtered: bool) -> Option<Value> {
        filtered.then(|| json!({"tenant": {"$eq": probe.tenant}}))
    }

    fn condition(&self, probe: &Probe, filtered: bool) -> Option<Condition> {
        let filter = Self::filter_json(probe, filtered)?;
        let filter: trove_query::filter::Filter = serde_json::from_value(filter).expect("filter");
        let typed = trove_query::filter::validate(&filter, &self.schema).expect("valid filter");
        Some(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        ))
    }

    fn body(probe: &Probe, filtered: bool, k: u16) -> Value {
        let mut body = json!({
            "query": probe.text,
            "type": "similarity",
            "classification": "restricted",
            "params": {"k": k},
        });
        if let Some(filter) = Self::filter_json(probe, filtered) {
            body["filters"] = filter;
        }
        body
    }

    /// The vector side of the probe's search, as the service builds it.
    fn vector_query<'a>(&self, probe: &'a Probe, filtered: bool) -> VectorQuery<'a> {
        let scope = self
            .filtered_scopes
            .get(probe.tenant as usize)
            .copied()
            .filter(|_| filtered);
        VectorQuery {
            vector_embedding_id: self.ve_id,
            vector: &probe.vector,
            strategy: DistanceStrategy::Cosine,
            unit_vectors: true,
            estimated_rows: self.estimated_rows,
            selectivity: scope.map(|scope| cost::selectivity(self.estimated_rows, scope)),
            path: cost::choose(self.estimated_rows, scope, K as u64),
        }
    }

    /// Chooses the path of every tenant's filtered search as the service does, from the
    /// planner's current estimates; prints what was chosen.
    async fn choose_paths(&mut self, pool: &PgPool) {
        let mut estimates = Vec::with_capacity(TENANTS as usize);
        for tenant in 0..TENANTS {
            let probe = Probe {
                text: String::new(),
                vector: Vec::new(),
                tenant,
            };
            let scope = Scope {
                pipeline_id: self.pipeline_id,
                classifications: &self.classifications,
                filter: self.condition(&probe, true),
            };
            estimates.push(
                search::estimate_scope(pool, &scope)
                    .await
                    .expect("estimate"),
            );
        }
        let exact = estimates
            .iter()
            .filter(|&&e| {
                cost::choose(self.estimated_rows, Some(e), K as u64) == NearestPath::Exact
            })
            .count();
        let (low, high) = estimates.iter().fold((f64::INFINITY, 0.0f64), |(l, h), e| {
            (l.min(e.admitted), h.max(e.admitted))
        });
        println!(
            "path under the tenant filter: exact for {exact} of {TENANTS} tenants (planner's estimate {low:.0}–{high:.0} fragments, reached {:?})",
            estimates.first().map(|e| e.reach)
        );
        self.filtered_scopes = estimates;
    }

    /// The service's statement for the probe (`trove::retrieval::search::nearest_plan`).
    fn statement(&self, probe: &Probe, filtered: bool) -> NearestPlan {
        let scope = Scope {
            pipeline_id: self.pipeline_id,
            classifications: &self.classifications,
            filter: self.condition(probe, filtered),
        };
        search::nearest_plan(
            &scope,
            &self.vector_query(probe, filtered),
            None,
            K as u64,
            false,
        )
        .expect("statement")
    }

    async fn library(&self, pool: &PgPool, probe: &Probe, filtered: bool) -> Vec<(Uuid, f64)> {
        let scope = Scope {
            pipeline_id: self.pipeline_id,
            classifications: &self.classifications,
            filter: self.condition(probe, filtered),
        };
        let query = self.vector_query(probe, filtered);
        let mut conn = pool.acquire().await.expect("connection");
        search::similarity(&mut conn, &scope, &query, K as u64, None)
            .await
            .expect("library search")
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect()
    }
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

/// A statement built ahead for one concurrent search, taken once.
type PreparedStatement = std::sync::Mutex<Option<NearestPlan>>;

/// Results of the sequential run of one scenario.
struct Sequential {
    http: Vec<Duration>,
    sql: Vec<Duration>,
    library: Vec<Duration>,
    http_hits: Vec<Vec<Uuid>>,
    sql_hits: Vec<Vec<Uuid>>,
    differing: usize,
}

async fn run_sequential(
    http: &Http,
    target: &Target,
    raw: &PgPool,
    service: &PgPool,
    probes: &[Probe],
    filtered: bool,
) -> Sequential {
    let mut out = Sequential {
        http: Vec::with_capacity(probes.len()),
        sql: Vec::with_capacity(probes.len()),
        library: Vec::with_capacity(probes.len()),
        http_hits: Vec::with_capacity(probes.len()),
        sql_hits: Vec::with_capacity(probes.len()),
        differing: 0,
    };
    let n = probes.len();
    let mut http_hits = vec![Vec::new(); n];
    let mut sql_hits = vec![Vec::new(); n];
    // The three paths take turns, each on its own third of the query list at a given step,
    // so every path runs every query once, interleaved in time, and a query's pages are not
    // still in shared buffers from another path's run of it just before; the order rotates
    // so that no path always runs first.
    for i in 0..n {
        for step in 0..3 {
            let path = (i + step) % 3;
            let q = (i + path * n.div_ceil(3)) % n;
            let probe = &probes[q];
            match path {
                0 => {
                    let body = Target::body(probe, filtered, K as u16);
                    let (elapsed, hits) = http.search(&target.path, &body).await;
                    out.http.push(elapsed);
                    http_hits[q] = hits.iter().map(|h| h.0).collect();
                }
                1 => {
                    let plan = target.statement(probe, filtered);
                    let started = Instant::now();
                    let hits = floor_search(raw, plan).await;
                    out.sql.push(started.elapsed());
                    sql_hits[q] = hits.iter().map(|h| h.0).collect();
                }
                _ => {
                    let started = Instant::now();
                    let hits = target.library(service, probe, filtered).await;
                    out.library.push(started.elapsed());
                    std::hint::black_box(hits);
                }
            }
        }
    }
    out.differing = http_hits
        .iter()
        .zip(&sql_hits)
        .filter(|(a, b)| a != b)
        .count();
    out.http_hits = http_hits;
    out.sql_hits = sql_hits;
    out
}

/// Per-request latencies of `c` clients sharing `probes`, and the wall time.
async fn run_concurrent<F, Fut>(c: usize, probes: usize, f: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    let f = Arc::new(f);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..c {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = worker;
            while i < probes {
                samples.push(f(i).await);
                i += c;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.expect("client task"));
    }
    (samples, started.elapsed())
}

async fn time_n<F, Fut, T>(count: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        std::hint::black_box(f(i).await);
        samples.push(started.elapsed());
    }
    samples
}

// ---- One size ----------------------------------------------------------------------------

async fn run_size(n: usize, options: &Options, admin: &str, nats: &str) -> Vec<Summary> {
    println!("\n==================== N = {n} fragments ====================");
    let database = format!("trove_bench_{}", Uuid::new_v4().simple());
    let mut admin_conn = PgConnection::connect(admin).await.expect("database server");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin_conn)
        .await
        .expect("create db");
    let root = admin.rsplit_once('/').map_or(admin, |(r, _)| r).to_owned();
    let url = format!("{root}/{database}");
    let master = Uuid::new_v4();
    let env = HashMap::from([
        ("TROVE_DATABASE_URL", url.clone()),
        ("TROVE_NATS_URL", nats.to_owned()),
        ("TROVE_LISTEN", "127.0.0.1:0".to_owned()),
        ("TROVE_MASTER_KEY_ID", master.to_string()),
        ("TROVE_MASTER_KEY_SECRET", SECRET.to_owned()),
        (
            "TROVE_SECRET",
            "YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoYmU=".to_owned(),
        ),
        ("TROVE_WORKER", "false".to_owned()),
        ("TROVE_WORKER_METRICS_LISTEN", "off".to_owned()),
        ("TROVE_LOG", "warn".to_owned()),
    ]);
    // The index build parameters come from the environment, as for the service.
    let mut config = Config::from_lookup(|k| {
        env.get(k).cloned().or_else(|| {
            k.starts_with("TROVE_HNSW_")
                .then(|| std::env::var(k).ok())?
        })
    })
    .expect("config");
    let tag = Uuid::new_v4().simple().to_string();
    let stream = format!("BENCH_{tag}");
    config.queue = QueueNames {
        stream: stream.clone(),
        subject_prefix: format!("bench.{tag}"),
        consumer: format!("bench-{tag}"),
        ..QueueNames::default()
    };
    let app = Application::build(config).await.expect("trove starts");
    let state = app.state().clone();
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let http = Http {
        client: reqwest::Client::new(),
        base,
        key: master.to_string(),
    };

    // Pipeline through the interface, so the service creates its association and table.
    let models = http
        .json(reqwest::Method::GET, "/embedding-models", None)
        .await;
    let model = models["data"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["name"] == "default")
        .expect("default model")
        .clone();
    assert_eq!(model["provider"], "hash", "the default model is `hash`");
    assert_eq!(model["dimensions"], 384);
    let splitters = http
        .json(
            reqwest::Method::GET,
            "/text-splitters?name=recursive-character",
            None,
        )
        .await;
    let pipeline = http
        .json(
            reqwest::Method::POST,
            "/pipelines",
            Some(json!({
                "name": "bench-search",
                "embedding_model_id": model["id"],
                "default_text_splitter_id": splitters["data"][0]["id"],
                "classifications": ["public", "restricted"],
                "hierarchy": [["restricted", "public"]],
                "metadata_schema": {
                    "type": "object",
                    "properties": {
                        "tenant": {"type": "integer"},
                        "source": {"type": "string"}
                    }
                }
            })),
        )
        .await;
    let pipeline_id: Uuid = pipeline["id"].as_str().expect("id").parse().expect("uuid");
    let splitter_id: Uuid = splitters["data"][0]["id"]
        .as_str()
        .expect("splitter")
        .parse()
        .expect("uuid");
    let row = trove::store::pipelines::get(&state.pool, pipeline_id)
        .await
        .expect("pipeline row")
        .expect("pipeline");
    let ve_id = row.ve_id.expect("association");
    let table = trove::store::vectors::table_name(ve_id);
    let context = trove::store::pipelines::search_context(state.pool.pg_pool(), pipeline_id)
        .await
        .expect("search context")
        .expect("pipeline");
    let classifications = trove_query::classification::resolve(
        &ClassificationRequest::hierarchical(vec!["restricted".to_owned()]),
        &context.classification_names,
        &context.hierarchy(),
    )
    .expect("resolved");
    let mut target = Target {
        pipeline_id,
        ve_id,
        schema: row.metadata_schema.clone(),
        classifications,
        path: format!("/pipelines/{pipeline_id}/search"),
        estimated_rows: 0.0,
        filtered_scopes: Vec::new(),
    };

    // Data.
    let language = Language::new(7);
    let started = Instant::now();
    let corpus = Corpus::generate(n, &language, &state);
    let generated = started.elapsed();
    let content_bytes: usize = corpus.fragments.iter().map(|f| f.2.len()).sum();
    println!(
        "data: synthetic topic texts ({VOCABULARY} pseudo-words, {TOPICS} topics) embedded with the service's hash embedder ({DIM} d); {} documents × {FRAGMENTS_PER_DOCUMENT} fragments, mean encrypted content {} B; tenant 1 of {TENANTS} per document",
        corpus.documents.len(),
        content_bytes / n.max(1)
    );
    println!(
        "generate (texts, embeddings, AES-GCM): {:.1} s",
        generated.as_secs_f64()
    );

    let mut db = PgConnection::connect(&url).await.expect("bench db");
    sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX {table}_hnsw")))
        .execute(&mut db)
        .await
        .expect("drop hnsw");
    let started = Instant::now();
    let documents = &corpus.documents;
    let copied_documents = copy_binary(
        &mut db,
        "COPY documents (id, version, pipeline_id, external_identifier, classification, metadata, status, text_splitter_id, expire_older_versions, created_at, updated_at) FROM STDIN (FORMAT binary)",
        documents.len(),
        |b, d| {
            let (id, version, tenant) = documents[d];
            b.row(11);
            b.uuid(id);
            b.int8(version);
            b.uuid(pipeline_id);
            b.bytes(format!("doc-{d}").as_bytes());
            b.bytes(classification(d).as_bytes());
            b.jsonb(&metadata(tenant, d));
            b.bytes(b"success");
            b.uuid(splitter_id);
            b.boolean(false);
            b.timestamptz(version);
            b.timestamptz(version);
        },
    )
    .await;
    let t_documents = started.elapsed();
    let started = Instant::now();
    let fragments = &corpus.fragments;
    let copied_fragments = copy_binary(
        &mut db,
        "COPY fragments (id, pipeline_id, document_id, version, order_id, classification, metadata, content) FROM STDIN (FORMAT binary)",
        fragments.len(),
        |b, i| {
            let (id, d, ref content) = fragments[i];
            let d = d as usize;
            let (document_id, version, tenant) = documents[d];
            b.row(8);
            b.uuid(id);
            b.uuid(pipeline_id);
            b.uuid(document_id);
            b.int8(version);
            b.int4((i % FRAGMENTS_PER_DOCUMENT) as i32);
            b.bytes(classification(d).as_bytes());
            b.jsonb(&metadata(tenant, d));
            b.bytes(content);
        },
    )
    .await;
    let t_fragments = started.elapsed();
    let started = Instant::now();
    let copied_vectors = copy_binary(
        &mut db,
        &format!("COPY {table} (fragment_id, embedding) FROM STDIN (FORMAT binary)"),
        fragments.len(),
        |b, i| {
            b.row(2);
            b.uuid(fragments[i].0);
            b.vector(corpus.vector(i as u32));
        },
    )
    .await;
    let t_vectors = started.elapsed();
    assert_eq!(copied_fragments as usize, n);
    assert_eq!(copied_vectors as usize, n);
    println!(
        "COPY (binary): documents {copied_documents} rows in {:.1} s; fragments {copied_fragments} in {:.1} s ({:.0}/s); vectors {copied_vectors} in {:.1} s ({:.0}/s)",
        t_documents.as_secs_f64(),
        t_fragments.as_secs_f64(),
        n as f64 / t_fragments.as_secs_f64(),
        t_vectors.as_secs_f64(),
        n as f64 / t_vectors.as_secs_f64(),
    );
    let started = Instant::now();
    for relation in ["documents", "fragments", table.as_str()] {
        sqlx::raw_sql(AssertSqlSafe(format!("VACUUM (ANALYZE) {relation}")))
            .execute(&mut db)
            .await
            .expect("vacuum");
    }
    println!("VACUUM (ANALYZE): {:.1} s", started.elapsed().as_secs_f64());

    // HNSW build: the service's DDL and parameters (TROVE_HNSW_M, TROVE_HNSW_EF_CONSTRUCTION), in memory.
    let mwm_mb: u64 = options
        .maintenance_work_mem_mb
        .unwrap_or_else(|| Ord::max((n as u64 * 4096) >> 20, 256));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET maintenance_work_mem = '{mwm_mb}MB'; SET max_parallel_maintenance_workers = {}",
        options.parallel_workers
    )))
    .execute(&mut db)
    .await
    .expect("session settings");
    wait_quiet(options.wait_quiet).await;
    println!(
        "HNSW build: m = {}, ef_construction = {}, maintenance_work_mem = {mwm_mb} MB, max_parallel_maintenance_workers = {} (load average {})",
        state.config.hnsw.m(),
        state.config.hnsw.ef_construction(),
        options.parallel_workers,
        load_average()
    );
    let started = Instant::now();
    sqlx::raw_sql(AssertSqlSafe(trove::store::vectors::hnsw_index_sql(
        &table,
        state.config.hnsw,
    )))
    .execute(&mut db)
    .await
    .expect("hnsw build");
    let build = started.elapsed();
    let sizes: (i64, i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT pg_relation_size('{table}_hnsw'), pg_total_relation_size('{table}'), pg_total_relation_size('fragments')"
    )))
    .fetch_one(&mut db)
    .await
    .expect("sizes");
    println!(
        "HNSW build: {:.1} s; index {} MB, vector table {} MB, fragments {} MB",
        build.as_secs_f64(),
        sizes.0 >> 20,
        sizes.1 >> 20,
        sizes.2 >> 20
    );
    target.estimated_rows =
        trove::store::pipelines::search_context(state.pool.pg_pool(), pipeline_id)
            .await
            .expect("search context")
            .expect("pipeline")
            .ve_estimated_rows
            .map_or(0.0, f64::from);
    target.choose_paths(&state.pool).await;
    let settings: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, current_setting(name) FROM unnest(ARRAY['shared_buffers', 'work_mem', 'jit', 'effective_cache_size']) AS name",
    )
    .fetch_all(&mut db)
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

    // Queries.
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
    let mut raw = trove::store::connect_lazy(&url, 4).expect("raw pool");
    let session: (String, String) = sqlx::query_as(
        "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search')",
    )
    .fetch_one(raw.pg_pool())
    .await
    .expect("session settings");
    println!(
        "session settings of the service's connections (and the raw statement's): hnsw.iterative_scan = {}, hnsw.ef_search = {}",
        session.0, session.1
    );

    let mut summaries = Vec::new();
    for (filtered, indexed) in [(false, false), (true, false), (true, true)] {
        let label = match (filtered, indexed) {
            (false, _) => "none",
            (true, false) => "tenant 1%",
            (true, true) => "tenant 1% +idx",
        };
        println!("\n--- N = {n}, filter: {label} ---");
        if filtered {
            println!("filter: {{\"tenant\": {{\"$eq\": <query's tenant>}}}}");
        }
        if indexed {
            // A metadata index on the field, through the interface, then fresh statistics
            // (ANALYZE collects them for the index expression).
            let started = Instant::now();
            http.json(
                reqwest::Method::POST,
                &format!("/pipelines/{pipeline_id}/indexes"),
                Some(json!({"field": "tenant"})),
            )
            .await;
            let created = started.elapsed();
            sqlx::raw_sql("ANALYZE fragments")
                .execute(&mut db)
                .await
                .expect("analyze");
            // Every connection is reopened, as after a restart, so that no statement keeps the
            // plan-cache history of the scenario before (Postgres replans cached plans when an
            // index is added, but the choice between custom and generic plans remembers).
            raw.close().await;
            raw = trove::store::connect_lazy(&url, 4).expect("raw pool");
            let closed: i64 = sqlx::query_scalar(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
                     SELECT pid FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()
                       AND backend_type = 'client backend'
                     OFFSET 0) AS mine",
            )
            .fetch_one(&mut db)
            .await
            .expect("reconnect");
            // The service's pool pings a connection before use only after a second idle
            // (`store::connect_lazy`); past that, the terminated ones are found and replaced.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            println!(
                "metadata index on `tenant` (POST /pipelines/{{id}}/indexes): {:.1} s, then ANALYZE fragments; {closed} service connections closed so that plans are made afresh",
                created.as_secs_f64()
            );
            target.choose_paths(&raw).await;
        }
        // Plan of the statement.
        if let Some(probe) = measured.first() {
            let plan = target.statement(probe, filtered);
            if !filtered {
                println!(
                    "statement: {}; hnsw.ef_search {} (association of ~{} vectors), LIMIT {} cut to k after sorting",
                    plan.sql,
                    plan.ef_search.unwrap_or(trove::store::SESSION_EF_SEARCH),
                    target.estimated_rows,
                    plan.fetch
                );
            }
            let mut tx = raw.begin().await.expect("begin");
            if let Some(ef) = plan.ef_search {
                sqlx::query(SET_CONFIG)
                    .bind(ef.to_string())
                    .execute(&mut *tx)
                    .await
                    .expect("set_config");
            }
            let plan: Vec<String> = sqlx::query_scalar_with(
                AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {}", plan.sql)),
                plan.arguments,
            )
            .fetch_all(&mut *tx)
            .await
            .expect("explain");
            tx.commit().await.expect("commit");
            println!("plan (EXPLAIN ANALYZE, first query, query vector elided):");
            for line in plan {
                println!("    {}", elide_vectors(&line));
            }
        }
        wait_quiet(options.wait_quiet).await;
        // Warm-up of every path.
        let _ = run_sequential(&http, &target, &raw, &state.pool, &warmup, filtered).await;
        println!("measuring (load average {})", load_average());
        let seq = run_sequential(&http, &target, &raw, &state.pool, &measured, filtered).await;

        // Recall against the exact top-k.
        let started = Instant::now();
        let exact = exact_top(&corpus, &measured, filtered);
        let exact_time = started.elapsed();
        let mut counts = (0, 0, 0, 0);
        for ((probe, top), (http_hits, sql_hits)) in measured
            .iter()
            .zip(&exact)
            .zip(seq.http_hits.iter().zip(&seq.sql_hits))
        {
            let (tie, ids, wanted) = recall(&corpus, probe, top, http_hits);
            let (tie_sql, _, _) = recall(&corpus, probe, top, sql_hits);
            counts.0 += tie;
            counts.1 += ids;
            counts.2 += wanted;
            counts.3 += tie_sql;
        }
        let recall_http = counts.0 as f64 / counts.2.max(1) as f64;
        let recall_ids = counts.1 as f64 / counts.2.max(1) as f64;
        let recall_sql = counts.3 as f64 / counts.2.max(1) as f64;
        println!(
            "exact top-{K} in process over {} queries: {:.1} s",
            measured.len(),
            exact_time.as_secs_f64()
        );

        // Cross-check of the exact top-k with the statement run without index scans.
        let mut agree = 0;
        let mut max_delta = 0f64;
        let mut exact_sql_times = Vec::new();
        for (probe, top) in measured.iter().zip(&exact).take(options.exact_sql) {
            let plan = target.statement(probe, filtered);
            let started = Instant::now();
            let hits = exact_search(&raw, plan).await;
            exact_sql_times.push(started.elapsed());
            let delta = hits
                .iter()
                .zip(&top.0)
                .map(|(h, e)| (h.1 - e.0).abs())
                .fold(0f64, f64::max);
            max_delta = max_delta.max(delta);
            if hits.len() == top.0.len() && delta < 1e-5 {
                agree += 1;
            }
        }
        println!(
            "exact scan in SQL (enable_indexscan = off) on {} queries: distances agree with the in-process exact top-{K} on {agree} (max |Δ| {max_delta:.1e}); p50 {:.1} ms",
            exact_sql_times.len(),
            pct(&exact_sql_times, 50.0)
        );

        let http_p50 = pct(&seq.http, 50.0);
        let sql_p50 = pct(&seq.sql, 50.0);
        println!(
            "sequential, 1 client, {} queries: HTTP p50 {:.3} ms p99 {:.3} ms | raw SQL p50 {:.3} ms p99 {:.3} ms | library p50 {:.3} ms p99 {:.3} ms | ratio p50 {:.2}",
            measured.len(),
            http_p50,
            pct(&seq.http, 99.0),
            sql_p50,
            pct(&seq.sql, 99.0),
            pct(&seq.library, 50.0),
            pct(&seq.library, 99.0),
            http_p50 / sql_p50
        );
        println!(
            "recall@{K} (tie-aware): HTTP {recall_http:.4}, raw SQL {recall_sql:.4}; exact-id recall HTTP {recall_ids:.4}; result lists differing between HTTP and raw SQL: {}",
            seq.differing
        );
        summaries.push(Summary {
            n,
            filter: label,
            build_s: build.as_secs_f64(),
            http: (http_p50, pct(&seq.http, 99.0)),
            sql: (sql_p50, pct(&seq.sql, 99.0)),
            library: pct(&seq.library, 50.0),
            recall: recall_http,
            recall_ids,
            recall_sql,
        });

        // Index scan settings on the raw statement, set for the session of one connection:
        // the service's shape (relaxed order, LIMIT k) at several ef_search values, then a
        // larger LIMIT cut to k after sorting, and strict order.
        if !options.sweep.is_empty() {
            println!(
                "index scan settings (statement alone on one connection, session settings; first {} queries):",
                options.sweep_queries.min(measured.len())
            );
            // (iterative scan mode, ef_search, hnsw.max_scan_tuples, hnsw.scan_mem_multiplier);
            // pgvector's defaults for the last two are 20,000 and 1.
            let mut variants: Vec<(&str, u64, u64, u64)> = options
                .sweep
                .iter()
                .map(|&ef| ("relaxed_order", u64::from(ef), 20_000, 1))
                .collect();
            let service_ef = {
                let query = target.vector_query(&measured[0], filtered);
                cost::walk(query.estimated_rows, query.selectivity, K as u64)
                    .map_or(cost::MAX_EF_SEARCH, |walk| walk.ef_search)
            };
            variants.extend([
                ("strict_order", service_ef, 20_000, 1),
                ("relaxed_order", service_ef, 100_000, 1),
                ("relaxed_order", service_ef, 20_000, 8),
                ("relaxed_order", service_ef, 100_000, 8),
            ]);
            println!(
                "    iterative_scan   ef_search   LIMIT   max_scan_tuples   scan_mem_multiplier   p50 ms   p99 ms   recall@{K}"
            );
            let mut conn = PgConnection::connect(&url).await.expect("sweep connection");
            for (mode, ef, tuples, multiplier) in variants {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "SET hnsw.iterative_scan = {mode}; SET hnsw.ef_search = {ef}; SET hnsw.max_scan_tuples = {tuples}; SET hnsw.scan_mem_multiplier = {multiplier}"
                )))
                .execute(&mut conn)
                .await
                .expect("session settings");
                let mut times = Vec::new();
                let mut hits_total = (0, 0);
                let mut limit = 0;
                for (probe, top) in measured.iter().zip(&exact).take(options.sweep_queries) {
                    let plan = target.statement(probe, filtered);
                    limit = plan.fetch;
                    let started = Instant::now();
                    let hits = session_search(&mut conn, plan).await;
                    times.push(started.elapsed());
                    let ids: Vec<Uuid> = hits.iter().map(|h| h.0).collect();
                    let (tie, _, wanted) = recall(&corpus, probe, top, &ids);
                    hits_total.0 += tie;
                    hits_total.1 += wanted;
                }
                let marker = if ef == service_ef
                    && mode == "relaxed_order"
                    && tuples == 20_000
                    && multiplier == 1
                {
                    " (service)"
                } else {
                    ""
                };
                println!(
                    "    {mode:<14}   {ef:>9}   {limit:>5}   {tuples:>15}   {multiplier:>19}   {:>6.3}   {:>6.3}   {:.4}{marker}",
                    pct(&times, 50.0),
                    pct(&times, 99.0),
                    hits_total.0 as f64 / hits_total.1.max(1) as f64
                );
            }
            conn.close().await.ok();
        }

        // Concurrent clients.
        if options.concurrency > 0 {
            let c = options.concurrency;
            let bodies: Arc<Vec<Value>> = Arc::new(
                measured
                    .iter()
                    .map(|p| Target::body(p, filtered, K as u16))
                    .collect(),
            );
            let http_shared = Arc::new(Http {
                client: http.client.clone(),
                base: http.base.clone(),
                key: http.key.clone(),
            });
            let path = Arc::new(target.path.clone());
            let (http_times, http_wall) = run_concurrent(c, measured.len(), {
                let bodies = bodies.clone();
                move |i| {
                    let http = http_shared.clone();
                    let bodies = bodies.clone();
                    let path = path.clone();
                    async move { http.search(&path, &bodies[i]).await.0 }
                }
            })
            .await;
            let statements: Arc<Vec<PreparedStatement>> = Arc::new(
                measured
                    .iter()
                    .map(|p| std::sync::Mutex::new(Some(target.statement(p, filtered))))
                    .collect(),
            );
            let raw_shared = raw.clone();
            let (sql_times, sql_wall) = run_concurrent(c, measured.len(), move |i| {
                let statements = statements.clone();
                let raw = raw_shared.clone();
                async move {
                    let plan = statements[i].lock().expect("lock").take().expect("once");
                    let started = Instant::now();
                    floor_search(&raw, plan).await;
                    started.elapsed()
                }
            })
            .await;
            println!(
                "{c} concurrent clients: HTTP p50 {:.3} ms p99 {:.3} ms ({:.0} searches/s) | raw SQL p50 {:.3} ms p99 {:.3} ms ({:.0} searches/s)",
                pct(&http_times, 50.0),
                pct(&http_times, 99.0),
                http_times.len() as f64 / http_wall.as_secs_f64(),
                pct(&sql_times, 50.0),
                pct(&sql_times, 99.0),
                sql_times.len() as f64 / sql_wall.as_secs_f64(),
            );
        }
    }

    // Where the service path spends its time (sequential, p50 of 300 calls each).
    wait_quiet(options.wait_quiet).await;
    println!(
        "\n--- N = {n}: service path breakdown (p50 of 300 sequential calls each; load average {}) ---",
        load_average()
    );
    let pool = &state.pool;
    let rounds = 300;
    let probe = &measured[0];
    let key_check = time_n(rounds, |_| async move {
        trove::store::api_keys::key_for_auth(pool, master)
            .await
            .expect("key")
            .expect("master key")
    })
    .await;
    let context_read = time_n(rounds, |_| async move {
        trove::store::pipelines::search_context(pool.pg_pool(), pipeline_id)
            .await
            .expect("search context")
    })
    .await;
    let estimate = {
        let scope = Scope {
            pipeline_id,
            classifications: &target.classifications,
            filter: target.condition(probe, true),
        };
        let scope = &scope;
        time_n(rounds, |_| async move {
            search::estimate_scope(pool, scope).await.expect("estimate")
        })
        .await
    };
    let embed = time_n(rounds, |i| {
        let text = &measured[i % measured.len()].text;
        async move { hash_embedding(text, DIM) }
    })
    .await;
    let hits: Vec<search::Hit> = {
        let scope = Scope {
            pipeline_id,
            classifications: &target.classifications,
            filter: None,
        };
        let query = target.vector_query(probe, false);
        let mut conn = pool.acquire().await.expect("connection");
        search::similarity(&mut conn, &scope, &query, K as u64, None)
            .await
            .expect("hits")
    };
    let respond = time_n(rounds, |_| {
        let hits = hits.clone();
        let state = &state;
        async move {
            let objects: Vec<Value> = hits
                .into_iter()
                .map(|h| trove::service::search::hit_object(state, h).expect("hit"))
                .collect();
            serde_json::to_vec(&objects).expect("json")
        }
    })
    .await;
    let mut unauthenticated = Vec::new();
    for _ in 0..rounds {
        let request = http
            .client
            .post(format!("{}{}", http.base, target.path))
            .json(&Target::body(probe, false, K as u16))
            .build()
            .expect("request");
        let started = Instant::now();
        let response = http.client.execute(request).await.expect("http");
        let status = response.status();
        std::hint::black_box(response.bytes().await.expect("body"));
        unauthenticated.push(started.elapsed());
        assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    }
    let empty_body = Target::body(probe, false, 0);
    let mut empty_search = Vec::new();
    for _ in 0..rounds {
        empty_search.push(http.search(&target.path, &empty_body).await.0);
    }
    let statement_alone = time_n(rounds, |_| {
        let plan = target.statement(probe, false);
        let raw = &raw;
        async move { floor_search(raw, plan).await }
    })
    .await;
    let building = time_n(rounds, |_| {
        let plan = target.statement(probe, false);
        async move { plan }
    })
    .await;
    let library_call = time_n(rounds, |_| target.library(pool, probe, false)).await;
    let library_on_raw = time_n(rounds, |_| target.library(&raw, probe, false)).await;
    let in_transaction = time_n(rounds, |_| {
        let NearestPlan {
            sql,
            arguments,
            ef_search,
            ..
        } = target.statement(probe, false);
        let ef_search = ef_search.unwrap_or(trove::store::SESSION_EF_SEARCH);
        let raw = &raw;
        async move {
            let mut tx = raw.begin().await.expect("begin");
            sqlx::query(SET_CONFIG)
                .bind(ef_search.to_string())
                .execute(&mut *tx)
                .await
                .expect("set_config");
            let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
                .fetch_all(&mut *tx)
                .await
                .expect("select");
            tx.commit().await.expect("commit");
            rows
        }
    })
    .await;
    let full_http = {
        let body = Target::body(probe, false, K as u16);
        let mut samples = Vec::new();
        for _ in 0..rounds {
            samples.push(http.search(&target.path, &body).await.0);
        }
        samples
    };
    // The same under the tenant filter (the metadata index exists by now).
    let filtered_http = {
        let body = Target::body(probe, true, K as u16);
        let mut samples = Vec::new();
        for _ in 0..rounds {
            samples.push(http.search(&target.path, &body).await.0);
        }
        samples
    };
    let filtered_statement = time_n(rounds, |_| {
        let plan = target.statement(probe, true);
        let raw = &raw;
        async move { floor_search(raw, plan).await }
    })
    .await;
    let filtered_statement_service_pool = time_n(rounds, |_| {
        let plan = target.statement(probe, true);
        async move { floor_search(pool, plan).await }
    })
    .await;
    let rows = [
        (
            "HTTP search, k 5, no filter (same query each time)",
            &full_http,
        ),
        (
            "HTTP search, k 0 (key check ‖ search context; returns before embedding)",
            &empty_search,
        ),
        (
            "  HTTP round trip without a key (401 before any read)",
            &unauthenticated,
        ),
        ("  key check: key and permissions (1 read)", &key_check),
        (
            "  under a filter or some classifications: the planner's estimate of the fragments passing (EXPLAIN), beside embedding",
            &estimate,
        ),
        (
            "  search context: pipeline, model, classifications, vector count (1 read)",
            &context_read,
        ),
        ("hash embedding of the query text", &embed),
        (
            "search statement alone (session settings; what the service runs)",
            &statement_alone,
        ),
        (
            "  building it (nearest_plan: SQL text and bound values)",
            &building,
        ),
        (
            "  same in a transaction with set_config (BEGIN, set_config, SELECT, COMMIT)",
            &in_transaction,
        ),
        (
            "library call: retrieval::search::similarity on the service's pool (builds, runs, decodes)",
            &library_call,
        ),
        ("  same on the raw statement's pool", &library_on_raw),
        ("decrypt 5 hits + result JSON", &respond),
        (
            "HTTP search, k 5, tenant filter with its metadata index (same query each time)",
            &filtered_http,
        ),
        (
            "  its statement alone, on the raw statement's pool",
            &filtered_statement,
        ),
        (
            "  its statement alone, on the service's pool",
            &filtered_statement_service_pool,
        ),
    ];
    for (name, samples) in rows {
        println!("    {:<90} {:>8.3} ms", name, pct(samples, 50.0));
    }

    // Clean up.
    drop(db);
    raw.close().await;
    let _ = stop.send(());
    let _ = server.await;
    state.pool.close().await;
    drop(state);
    if let Ok(client) = async_nats::connect(nats).await {
        let _ = async_nats::jetstream::new(client)
            .delete_stream(&stream)
            .await;
    }
    if options.keep {
        println!("kept database {database}");
    } else {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
        )))
        .execute(&mut admin_conn)
        .await
        .ok();
    }
    summaries
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
    let admin = std::env::var("TROVE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://trove@127.0.0.1:55432/postgres".to_owned());
    let nats = std::env::var("TROVE_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:54222".to_owned());
    println!(
        "similarity search bench: sizes {:?}, {} queries per scenario, k {K}, {} cores, tokio runtime shared by the service and the clients",
        options.sizes,
        options.queries,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let mut summaries = Vec::new();
    for &n in &options.sizes {
        summaries.extend(run_size(n, &options, &admin, &nats).await);
    }
    println!("\n==================== summary (sequential, 1 client, k {K}) ====================");
    println!(
        "{:>9}  {:<15} {:>9}  {:>9} {:>9}  {:>9} {:>9}  {:>9}  {:>7}  {:>8} {:>8} {:>8}",
        "N",
        "filter",
        "build s",
        "HTTP p50",
        "HTTP p99",
        "SQL p50",
        "SQL p99",
        "lib p50",
        "ratio",
        "recall",
        "rec SQL",
        "rec ids"
    );
    for s in &summaries {
        println!(
            "{:>9}  {:<15} {:>9.1}  {:>9.3} {:>9.3}  {:>9.3} {:>9.3}  {:>9.3}  {:>7.2}  {:>8.4} {:>8.4} {:>8.4}",
            s.n,
            s.filter,
            s.build_s,
            s.http.0,
            s.http.1,
            s.sql.0,
            s.sql.1,
            s.library,
            s.http.0 / s.sql.0,
            s.recall,
            s.recall_sql,
            s.recall_ids
        );
    }
    println!(
        "(latencies in ms; ratio = HTTP p50 / raw SQL p50; recall@{K} of the HTTP results against an exact scan, tie-aware; `rec SQL` the raw statement's; `rec ids` the share of exact ids)"
    );
}
