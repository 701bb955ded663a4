//! The cases a new user meets first, end to end: Trove runs in this process (API and worker)
//! on fresh databases of the test Postgres and the test NATS.
//!
//! 1. A pipeline created through HTTP: a `hash` embedding model of 384 dimensions (with
//!    `--vectors=minilm`, an `openai` model on a fake server answering with all-MiniLM-L6-v2
//!    vectors; see *Real vectors* below), the seeded
//!    `recursive-character` splitter (chunk size 1,000, overlap 200), full-text search off,
//!    three classifications (`public`, `internal`, `restricted`; document `i` has the
//!    `i % 3`-th), the metadata schema `{category: string, year: integer, score: number,
//!    published: boolean}` and no metadata index (Trove's own indexes on declared fields, the
//!    default, are kept). Documents are synthetic topic texts of about
//!    2 KB (deterministic seed), `category` uniform over `c00`–`c19`, `year` uniform over
//!    2020–2024 (independent of it), `score` in 0–100, `published` half true.
//! 2. Ingestion of N documents by 8 concurrent clients, one document per request
//!    (`POST /pipelines/{id}/documents`), timed from the first request until the document list
//!    counts every version `success` (polled every 100 ms) → documents/s and fragments/s. Then
//!    the same on a fresh installation (a new database, a new pipeline) through
//!    `POST /pipelines/{id}/documents/batch`: requests of up to 1,000 documents and 2 MiB, the
//!    largest body the interface takes (909 documents of these; fewer when N is small, so
//!    that the 8 clients all have one), 8 clients.
//! 3. Searches on that second pipeline, the first one started as soon as the poll has seen the
//!    last `success` (no `ANALYZE` or anything else between), every search naming all three
//!    classifications: similarity k 5; MMR k 5, fetch_k 20; similarity k 5 under the 5 %
//!    filter `{"category": {"$eq": "c07"}}`; under the 1 % filter
//!    `{"$and": [{"category": {"$eq": "c07"}}, {"year": {"$eq": 2022}}]}`. First a window of
//!    5 s taking the four in turn, 250 ms each, HTTP searches taking turns with their floor
//!    (below; the p50 of each over the window, and of each slice), then each
//!    measured at one client (p50/p99) and 8 clients (searches/s and p50), then the window's
//!    mix again for as long with other queries (the same turns long after ingestion), then the two
//!    filters with the declared fields' indexes turned off (`PATCH /pipelines/{id}` with the
//!    schema's `"x-trove-index": false`: no index serves them), then with metadata indexes on
//!    `category` and `year` through `POST /pipelines/{id}/indexes`.
//! 4. Next to each, its floor: the same statement alone on a pooled connection with the
//!    service's session settings (`common::floor`: the path the service chooses, the plan of
//!    `trove::retrieval::search`, run by its `run_plan`), taking turns with the HTTP searches at
//!    one client, and at 8 clients on 8 connections. Recall@5 of the HTTP results against an
//!    exact scan: the pipeline's vectors read back from its vector table once every search has
//!    run, exact distances in process over the filtered scope (tie-aware); for MMR, against
//!    MMR's selection among the exact 20 nearest. Recall@10 (`rec@10`) of the similarity kinds:
//!    after each one-client run, a k-10 search of every measured query through HTTP (untimed)
//!    against the exact top-10 of its scope.
//!
//! 5. With `--hybrid`: both pipelines have full-text search on (`has_full_text_search: true`,
//!    so the ingestion figures include computing and storing the fragments' full-text vectors)
//!    and Trove runs with `TROVE_EXTENSIONS=hybrid`. After the same mix later, and before the
//!    declared fields' indexes are turned off: similarity k 10 and hybrid k 10 with the default
//!    candidates (no `fetch_k`: the service's default per list, `rrf_k` 60), each without a
//!    filter and under the 5 % filter, first for as long as the first window in turns (250 ms
//!    each, so that the ratios also compare searches of the same seconds), then each at one
//!    client (p50/p99) and 8 clients (searches/s), beside its floor (for hybrid: the service's
//!    `search::hybrid` alone on a pooled connection, the vector list's path chosen for its
//!    candidates as the service chooses it). The queries are the same synthetic topic texts:
//!    their words are the corpus's, so the lexical list (fragments holding any word of the
//!    query) is rarely empty. Then, not timed: how many fragments hold a word of each of the
//!    first 100 measured queries (the lexical list ranks all of them), the text search
//!    configurations those queries were given, and how many of the hybrid results each list
//!    contributed. `--explain` then writes the `EXPLAIN (ANALYZE, BUFFERS)` of the hybrid
//!    statement (without and with the filter) of two of those 100 queries, the one of the
//!    median lexical list and the one of the largest, to stderr, as the notices of
//!    `auto_explain` on a connection of its own.
//!
//! Real vectors (`--vectors=minilm`): hash vectors hide recall problems that a real model's
//! vectors show. With this option the documents are split in process as the seeded
//! `recursive-character` splitter splits them, and those fragment texts and the queries of
//! every stream are embedded with the local all-MiniLM-L6-v2 (`trove_embed`, from
//! `TROVE_MODELS_DIR`) in batches of 64 with a progress line on stderr every 5 s, and cached
//! under `.data/bench-vectors/` (`common::real_vectors`): `minilm-service-<N>-seed11.f32`
//! for the fragments, `minilm-service-queries-<stream seed>-seed11.f32` for each query
//! stream; later runs load them instead (and say so). Each installation's pipeline gets an
//! `openai` embedding model registered through HTTP on a fake OpenAI-compatible embeddings
//! server in this process (`POST /v1/embeddings` on loopback), which answers each text with
//! its cached vector: the queries (so a search's latency measures retrieval, not a forward
//! pass) and the fragments the worker embeds during ingestion. A text it does not know (a
//! fragment the service split otherwise, the probe `Trove`) it computes in process with the
//! same model and keeps; the report says how many. Ingestion in this mode is slower than with
//! `hash` (a loopback request of JSON vectors per group of fragments, and any fragment
//! computed in process), so its documents/s are not comparable with `hash` runs.
//!
//! Printed: the ingestion rows, the first window against the steady state, a table of every
//! scenario (Trove p50/p99 or searches/s, floor p50 and searches/s, the p50 ratio, recall@k
//! (tie-aware, against the exact k nearest of the scope; not for hybrid), hits returned / k,
//! the floor's path), the project's targets, met or not, and with `--hybrid` hybrid against
//! similarity and its targets: hybrid p50 at one client ≤ 1.5 × similarity's and hybrid
//! searches/s at 8 clients ≥ 0.6 × similarity's, without and under the 5 % filter.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench service --
//! --docs=2000,20000`. Options: `--docs=N,…` documents per run (2000), `--clients=N`
//! ingestion clients and search concurrency (8), `--batch=N` documents per bulk request at
//! most (1000), `--window=S` the first window (5), `--queries=N` measured queries per scenario
//! at one client (300), `--concurrent-queries=N` searches per scenario at 8 clients, at most
//! (2000), `--concurrent-seconds=S` at most that long per scenario and path (10),
//! `--wait-quiet=S` (before each ingestion, wait up to S seconds until other work leaves the
//! CPUs under 15 % busy; 0), `--keep` (keep the databases and print their names), `--hybrid`
//! (step 5), `--explain` (with `--hybrid`: the hybrid statement's plans on stderr),
//! `--vectors=hash|minilm` (`hash`; see *Real vectors*; `minilm` needs `TROVE_MODELS_DIR`).

#![expect(
    clippy::expect_used,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    reason = "a load tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sea_query::Condition;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool, Row};
use trove::providers::hash_embedding::hash_embedding;
use trove::retrieval::estimates::ScopeEstimates;
use trove::retrieval::mmr::{self, Similarity};
use trove::retrieval::search::Scope;
use trove_query::classification::ClassificationRequest;
use uuid::Uuid;

use common::app::{self, Http, Running};
use common::floor::{Floor, FloorSearch, HybridFloor, floor, hybrid_floor};
use common::measure::{load_average, pct, run_concurrent_for, wait_quiet};
use common::real_vectors::{self, CacheKey, FakeEmbeddings, VectorSource};
use common::recall::{ExactQuery, Vectors, exact_top, recall};
use common::report::{Column, print_table};
use common::text::{Language, TOPICS};

const DIM: usize = 384;
const K: usize = 5;
/// The second k of the recall figures (a k-10 search of every measured query, untimed).
const K10: usize = 10;
/// The seed of the synthetic language, also in the names of the vector cache's files.
const LANGUAGE_SEED: u64 = 11;
const FETCH_K: usize = 20;
const CLASSIFICATIONS: [&str; 3] = ["public", "internal", "restricted"];
const CATEGORIES: usize = 20;
const FIRST_YEAR: i64 = 2020;
const YEARS: i64 = 5;
/// The value of the 5 % filter, and the year the 1 % filter adds.
const CATEGORY: &str = "c07";
const YEAR: i64 = 2022;
/// A document is paragraphs of one topic pair until it has this many bytes.
const DOCUMENT_BYTES: usize = 1900;
const POLL: Duration = Duration::from_millis(100);
/// Ingestion that counts no new `success` for this long has stalled.
const STALLED: Duration = Duration::from_secs(120);

// ---- Options -----------------------------------------------------------------------------

struct Options {
    docs: Vec<usize>,
    clients: usize,
    batch: usize,
    window: u64,
    queries: usize,
    concurrent_queries: usize,
    concurrent_seconds: u64,
    wait_quiet: u64,
    keep: bool,
    /// Full-text search on, the extension `hybrid` on, and the hybrid scenarios.
    hybrid: bool,
    explain: bool,
    /// Where the vectors come from (`--vectors=hash|minilm`).
    vectors: VectorSource,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            docs: vec![2000],
            clients: 8,
            batch: 1000,
            window: 5,
            queries: 300,
            concurrent_queries: 2000,
            concurrent_seconds: 10,
            wait_quiet: 0,
            keep: false,
            hybrid: false,
            explain: false,
            vectors: VectorSource::Hash,
        };
        for arg in std::env::args().skip(1) {
            let number = |v: &str| -> usize { v.replace('_', "").parse().expect("a number") };
            match arg.split_once('=') {
                Some(("--docs", v)) => {
                    options.docs = v.split(',').filter(|s| !s.is_empty()).map(number).collect();
                }
                Some(("--clients", v)) => options.clients = number(v).max(1),
                Some(("--batch", v)) => options.batch = number(v).clamp(1, 1000),
                Some(("--window", v)) => options.window = number(v) as u64,
                Some(("--queries", v)) => options.queries = number(v).max(1),
                Some(("--concurrent-queries", v)) => options.concurrent_queries = number(v),
                Some(("--concurrent-seconds", v)) => options.concurrent_seconds = number(v) as u64,
                Some(("--wait-quiet", v)) => options.wait_quiet = number(v) as u64,
                Some(("--vectors", v)) => options.vectors = VectorSource::parse(v),
                _ if arg == "--keep" => options.keep = true,
                _ if arg == "--hybrid" => options.hybrid = true,
                _ if arg == "--explain" => options.explain = true,
                _ => {} // `--bench` from cargo
            }
        }
        options
    }
}

// ---- Documents ---------------------------------------------------------------------------

struct Document {
    text: String,
    category: usize,
    year: i64,
    score: f64,
    published: bool,
}

fn documents(n: usize, language: &Language) -> Vec<Document> {
    let mut rng = SmallRng::seed_from_u64(0xD0C5);
    (0..n)
        .map(|_| {
            let primary = rng.random_range(0..TOPICS);
            let secondary = rng.random_range(0..TOPICS);
            let mut paragraphs = Vec::new();
            let mut bytes = 0;
            while bytes < DOCUMENT_BYTES {
                let paragraph = language.fragment(&mut rng, primary, secondary);
                bytes += paragraph.len() + 2;
                paragraphs.push(paragraph);
            }
            Document {
                text: paragraphs.join("\n\n"),
                category: rng.random_range(0..CATEGORIES),
                year: FIRST_YEAR + rng.random_range(0..YEARS),
                score: (rng.random::<f64>() * 1000.0).round() / 10.0,
                published: rng.random_bool(0.5),
            }
        })
        .collect()
}

/// The body of one document's submission.
fn submission(i: usize, document: &Document) -> Value {
    json!({
        "external_identifier": format!("doc-{i:06}"),
        "classification": CLASSIFICATIONS[i % CLASSIFICATIONS.len()],
        "text": document.text,
        "metadata": {
            "category": format!("c{:02}", document.category),
            "year": document.year,
            "score": document.score,
            "published": document.published,
        },
    })
}

// ---- Pipeline and ingestion --------------------------------------------------------------

/// The pipeline's metadata schema.
fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "category": {"type": "string"},
            "year": {"type": "integer"},
            "score": {"type": "number"},
            "published": {"type": "boolean"}
        }
    })
}

/// The model (`hash`, or with `fake` an `openai` model on the fake embeddings server) and the
/// pipeline, through the interface.
async fn create_pipeline(http: &Http, full_text: bool, fake: Option<&FakeEmbeddings>) -> Uuid {
    let model_id = match fake {
        Some(fake) => fake.register(http, "bench-minilm").await,
        None => http
            .json(
                reqwest::Method::POST,
                "/embedding-models",
                Some(
                    json!({"name": "hash", "provider": "hash", "model_name": "feature-hash",
                            "parameters": {"dimensions": DIM}}),
                ),
            )
            .await["id"]
            .clone(),
    };
    let splitters = http
        .json(
            reqwest::Method::GET,
            "/text-splitters?name=recursive-character",
            None,
        )
        .await;
    let splitter = &splitters["data"][0];
    assert_eq!(splitter["parameters"]["chunk_size"], 1000, "{splitter}");
    assert_eq!(splitter["parameters"]["chunk_overlap"], 200, "{splitter}");
    let pipeline = http
        .json(
            reqwest::Method::POST,
            "/pipelines",
            Some(json!({
                "name": "bench-service",
                "embedding_model_id": model_id,
                "default_text_splitter_id": splitter["id"],
                "classifications": CLASSIFICATIONS,
                "has_full_text_search": full_text,
                "metadata_schema": metadata_schema(),
            })),
        )
        .await;
    pipeline["id"].as_str().expect("id").parse().expect("uuid")
}

/// One ingestion run.
struct Ingestion {
    mode: &'static str,
    /// Documents per request (the mean).
    per_request: f64,
    documents: usize,
    fragments: i64,
    submitted: Duration,
    total: Duration,
}

/// When the poll saw every version `success`, and how long that poll took.
struct Done {
    seen: Instant,
    poll: Duration,
}

/// Submits `bodies` to `path` with `clients` concurrent clients (each takes the next body),
/// then polls until the pipeline counts `documents` versions `success`.
async fn ingest(
    http: &Http,
    pipeline_id: Uuid,
    path: &str,
    bodies: Vec<Value>,
    documents: usize,
    clients: usize,
) -> (Duration, Duration, Done) {
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, path) = (http.clone(), path.to_owned());
            let (bodies, next) = (bodies.clone(), next.clone());
            tokio::spawn(async move {
                while let Some(body) = bodies.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let response = http
                        .request(reqwest::Method::POST, &path)
                        .json(body)
                        .send()
                        .await
                        .expect("submission");
                    let status = response.status();
                    if status != reqwest::StatusCode::CREATED {
                        let text = response.text().await.unwrap_or_default();
                        panic!("{path}: {status} {text}");
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client");
    }
    let submitted = started.elapsed();
    let done = wait_for_success(http, pipeline_id, documents).await;
    (submitted, done.seen - started, done)
}

async fn wait_for_success(http: &Http, pipeline_id: Uuid, documents: usize) -> Done {
    let path = format!("/pipelines/{pipeline_id}/documents?status=success&count=true&first=0");
    let mut progress = (0, Instant::now());
    loop {
        let started = Instant::now();
        let page = http.json(reqwest::Method::GET, &path, None).await;
        let poll = started.elapsed();
        let count = page["page_info"]["count"].as_u64().expect("count") as usize;
        if count == documents {
            return Done {
                seen: Instant::now(),
                poll,
            };
        }
        if count != progress.0 {
            progress = (count, Instant::now());
        }
        assert!(
            progress.1.elapsed() < STALLED,
            "ingestion stalled at {count} of {documents} versions success"
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn count_fragments(url: &str, pipeline_id: Uuid) -> i64 {
    let mut db = PgConnection::connect(url).await.expect("bench db");
    let count = sqlx::query_scalar("SELECT count(*) FROM fragments WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .fetch_one(&mut db)
        .await
        .expect("fragments");
    db.close().await.ok();
    count
}

/// The largest request body the interface takes (2 MiB).
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Documents per request (the mean) and the request bodies of a mode: one document each, or
/// batches of at most `batch` documents and of at most 2 MiB (1,000 documents of 2 KB do not
/// fit), and fewer when there are few documents, so that every client has one.
fn requests(submissions: &[Value], bulk: bool, options: &Options) -> (f64, Vec<Value>) {
    if !bulk {
        return (1.0, submissions.to_vec());
    }
    let most = options
        .batch
        .min(submissions.len().div_ceil(options.clients))
        .max(1);
    let mut bodies = Vec::new();
    let mut chunk: Vec<Value> = Vec::new();
    // `{"documents":[…]}` with a comma between items.
    let mut bytes = 16;
    for submission in submissions {
        let size = serde_json::to_vec(submission).expect("json").len() + 1;
        if !chunk.is_empty() && (chunk.len() == most || bytes + size > MAX_BODY_BYTES) {
            bodies.push(json!({"documents": std::mem::take(&mut chunk)}));
            bytes = 16;
        }
        bytes += size;
        chunk.push(submission.clone());
    }
    if !chunk.is_empty() {
        bodies.push(json!({"documents": chunk}));
    }
    (submissions.len() as f64 / bodies.len() as f64, bodies)
}

/// One ingestion on a fresh installation: Trove, its pipeline (and what its searches need,
/// read before the documents come), the documents submitted and processed. Returns Trove
/// still running, for the searches.
async fn fresh_ingestion(
    submissions: &[Value],
    bulk: bool,
    options: &Options,
    servers: &(String, String),
    fake: Option<&FakeEmbeddings>,
) -> (Running, Searched, Ingestion, Done) {
    let extensions: &[(&str, &str)] = if options.hybrid {
        &[("TROVE_EXTENSIONS", "hybrid")]
    } else {
        &[]
    };
    let trove = app::start_with(&servers.0, &servers.1, true, extensions).await;
    let pipeline_id = create_pipeline(&trove.http, options.hybrid, fake).await;
    let searched = Searched::new(&trove, pipeline_id, options.clients).await;
    let (per_request, bodies) = requests(submissions, bulk, options);
    let path = if bulk {
        format!("/pipelines/{pipeline_id}/documents/batch")
    } else {
        format!("/pipelines/{pipeline_id}/documents")
    };
    let mode = if bulk {
        "bulk (documents/batch)"
    } else {
        "per document"
    };
    wait_quiet(options.wait_quiet).await;
    println!(
        "ingesting {} documents, {mode}, {per_request:.0} per request, {} clients (load average {})",
        submissions.len(),
        options.clients,
        load_average()
    );
    let (submitted, total, done) = ingest(
        &trove.http,
        pipeline_id,
        &path,
        bodies,
        submissions.len(),
        options.clients,
    )
    .await;
    let ingestion = Ingestion {
        mode,
        per_request,
        documents: submissions.len(),
        fragments: 0,
        submitted,
        total,
    };
    (trove, searched, ingestion, done)
}

// ---- Searches ----------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Similarity,
    Mmr,
    Filter5,
    Filter1,
    /// Similarity k 10, without a filter or under the 5 % filter (`--hybrid`).
    Similarity10 {
        filtered: bool,
    },
    /// Hybrid k 10 with the default candidates, without a filter or under the 5 % filter.
    Hybrid {
        filtered: bool,
    },
}

const KINDS: [Kind; 4] = [Kind::Similarity, Kind::Mmr, Kind::Filter5, Kind::Filter1];

/// The hybrid comparison (`--hybrid`), in the order its window takes them.
const HYBRID_KINDS: [Kind; 4] = [
    Kind::Similarity10 { filtered: false },
    Kind::Hybrid { filtered: false },
    Kind::Similarity10 { filtered: true },
    Kind::Hybrid { filtered: true },
];

/// `k` of the hybrid comparison.
const HYBRID_K: usize = 10;
/// The candidates of each list of a hybrid search without `fetch_k` (the service's default,
/// never fewer than `k`).
const HYBRID_CANDIDATES: usize = {
    let default = trove::retrieval::kinds::DEFAULT_HYBRID_FETCH_K as usize;
    if default > HYBRID_K {
        default
    } else {
        HYBRID_K
    }
};

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Similarity => "similarity k 5",
            Self::Mmr => "MMR k 5 fetch_k 20",
            Self::Filter5 => "5 % filter (category)",
            Self::Filter1 => "1 % filter (category, year)",
            Self::Similarity10 { filtered: false } => "similarity k 10",
            Self::Similarity10 { filtered: true } => "similarity k 10, 5 % filter",
            Self::Hybrid { filtered: false } => "hybrid k 10",
            Self::Hybrid { filtered: true } => "hybrid k 10, 5 % filter",
        }
    }

    /// Results asked for.
    fn k(self) -> usize {
        match self {
            Self::Similarity10 { .. } | Self::Hybrid { .. } => HYBRID_K,
            _ => K,
        }
    }

    /// The rows the vector statement selects (MMR's candidates, a hybrid search's vector
    /// list), for which the service chooses its path.
    fn statement_rows(self) -> usize {
        match self {
            Self::Mmr => FETCH_K,
            Self::Hybrid { .. } => HYBRID_CANDIDATES,
            _ => self.k(),
        }
    }

    fn filter(self) -> Option<Value> {
        match self {
            Self::Similarity
            | Self::Mmr
            | Self::Similarity10 { filtered: false }
            | Self::Hybrid { filtered: false } => None,
            Self::Filter5
            | Self::Similarity10 { filtered: true }
            | Self::Hybrid { filtered: true } => Some(json!({"category": {"$eq": CATEGORY}})),
            Self::Filter1 => Some(json!({"$and": [
                {"category": {"$eq": CATEGORY}},
                {"year": {"$eq": YEAR}}
            ]})),
        }
    }

    fn body(self, query: &str) -> Value {
        let (kind, params) = match self {
            Self::Mmr => ("mmr", json!({"k": K, "fetch_k": FETCH_K})),
            // No `fetch_k`: the default candidates.
            Self::Hybrid { .. } => ("hybrid", json!({"k": HYBRID_K})),
            _ => ("similarity", json!({"k": self.k()})),
        };
        let mut body = json!({
            "query": query,
            "type": kind,
            "classification": CLASSIFICATIONS,
            "params": params,
        });
        if let Some(filter) = self.filter() {
            body["filters"] = filter;
        }
        body
    }
}

/// A query: its text and its vector (the service's `hash` embedding computes the same; with
/// `--vectors=minilm` the fake embeddings server answers the service with the same).
struct Probe {
    text: String,
    vector: Vec<f32>,
}

/// `count` queries of the stream `seed`; their vectors the `hash` embedder's, or empty (for
/// [`real_vectors_of`] to fill).
fn probes(language: &Language, seed: u64, count: usize, source: VectorSource) -> Vec<Probe> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let text = language.query(&mut rng);
            let vector = match source {
                VectorSource::Hash => hash_embedding(&text, DIM),
                VectorSource::MiniLm => Vec::new(),
            };
            Probe { text, vector }
        })
        .collect()
}

/// The searched pipeline, as the service sees it.
struct Searched {
    http: Http,
    /// The URL of Trove's database.
    url: String,
    path: String,
    pipeline_id: Uuid,
    ve_id: Uuid,
    classifications: Vec<String>,
    pipeline_classifications: usize,
    schema: Value,
    service_pool: PgPool,
    /// The floor's connections, one per client.
    floor_pool: trove::store::Pool,
}

impl Searched {
    async fn new(trove: &Running, pipeline_id: Uuid, clients: usize) -> Self {
        let context =
            trove::store::pipelines::search_context(trove.state.pool.pg_pool(), pipeline_id)
                .await
                .expect("search context")
                .expect("pipeline");
        let names: Vec<String> = CLASSIFICATIONS.iter().map(|c| (*c).to_owned()).collect();
        let classifications = trove_query::classification::resolve(
            &ClassificationRequest::hierarchical(names),
            &context.classification_names,
            &context.hierarchy(),
        )
        .expect("resolved");
        Self {
            http: trove.http.clone(),
            url: trove.url.clone(),
            path: format!("/pipelines/{pipeline_id}/search"),
            pipeline_id,
            ve_id: context.pipeline.ve_id.expect("association"),
            classifications,
            pipeline_classifications: context.classification_names.len(),
            schema: context.pipeline.metadata_schema.clone(),
            service_pool: trove.state.pool.pg_pool().clone(),
            // Twice the clients: the warm connections are at most half the pool, and each
            // concurrent floor takes one, which remembers its candidate list as the service's do.
            floor_pool: trove::store::connect_lazy(&trove.url, 2 * clients as u32)
                .expect("floor pool"),
        }
    }

    /// The kind's filter compiled as the service compiles it.
    fn condition(&self, kind: Kind) -> Option<Condition> {
        let filter: trove_query::filter::Filter =
            serde_json::from_value(kind.filter()?).expect("filter");
        let typed = trove_query::filter::validate(&filter, &self.schema).expect("valid filter");
        Some(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        ))
    }

    /// What the service reads now as the association's vector count.
    async fn estimated_rows(&self) -> f64 {
        trove::store::pipelines::search_context(&self.service_pool, self.pipeline_id)
            .await
            .expect("search context")
            .expect("pipeline")
            .ve_estimated_rows
            .map_or(0.0, f64::from)
    }

    fn floor_search(&self, kind: Kind, probe: &Probe, estimated_rows: f64) -> FloorSearch {
        FloorSearch {
            pipeline_id: self.pipeline_id,
            vector_embedding_id: self.ve_id,
            classifications: self.classifications.clone(),
            pipeline_classifications: self.pipeline_classifications,
            filter: self.condition(kind),
            vector: probe.vector.clone(),
            limit: kind.statement_rows() as u64,
            mmr: kind == Kind::Mmr,
            estimated_rows,
        }
    }

    /// The lexical side of a hybrid kind's floor.
    fn lexical(kind: Kind, probe: &Probe) -> Option<HybridFloor> {
        matches!(kind, Kind::Hybrid { .. }).then(|| HybridFloor {
            text: probe.text.clone(),
            k: kind.k() as u64,
        })
    }

    /// The floor of a search of `kind` for `probe`.
    async fn floor(
        &self,
        estimates: &ScopeEstimates,
        kind: Kind,
        probe: &Probe,
        estimated_rows: f64,
    ) -> Floor {
        run_floor(
            &self.floor_pool,
            estimates,
            self.floor_search(kind, probe, estimated_rows),
            Self::lexical(kind, probe),
        )
        .await
    }
}

/// A vector search's floor, or a hybrid search's when `lexical` is given.
async fn run_floor(
    pool: &trove::store::Pool,
    estimates: &ScopeEstimates,
    search: FloorSearch,
    lexical: Option<HybridFloor>,
) -> Floor {
    match lexical {
        Some(lexical) => hybrid_floor(pool, estimates, search, &lexical).await,
        None => floor(pool, estimates, search).await,
    }
}

/// How long the first window searches one kind before the next: each kind is searched as its
/// steady state is measured, one search after another (see [`first_window`]).
const WINDOW_SLICE: Duration = Duration::from_millis(250);

/// Latencies of a window of searches, by kind: through HTTP, and the floor's in turns with them.
struct Window {
    http: Vec<Vec<Duration>>,
    floor: Vec<Vec<Duration>>,
    /// The slice each search of a kind fell in (0 for the first slice of the window).
    slice: Vec<Vec<usize>>,
}

/// The searches of the first `seconds`, the four kinds in turn for [`WINDOW_SLICE`] each (20
/// slices in 5 s, five of each kind), a query through HTTP and then another as its floor, as
/// the steady state takes turns (so a window that runs slower tells whether Postgres or the
/// service does). Taking the kinds in turn search by search made the filtered ones 20–60 %
/// slower than the same searches one after another, also long after ingestion (the scope's
/// pages, the same at every search of a filter, leave the processor's caches between two of
/// them), which is not what the window is to measure. `kinds` are the kinds taken in turn
/// ([`KINDS`] for the first window and the same mix later).
async fn first_window(s: &Searched, kinds: &[Kind], probes: &[Probe], seconds: u64) -> Window {
    let mut window = Window {
        http: vec![Vec::new(); kinds.len()],
        floor: vec![Vec::new(); kinds.len()],
        slice: vec![Vec::new(); kinds.len()],
    };
    let estimates = ScopeEstimates::new();
    let started = Instant::now();
    let mut rows = None;
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        let slice = (started.elapsed().as_millis() / WINDOW_SLICE.as_millis()) as usize;
        let kind = slice % kinds.len();
        let probe = &probes[i % probes.len()];
        let (elapsed, _) = s.http.search(&s.path, &kinds[kind].body(&probe.text)).await;
        window.http[kind].push(elapsed);
        window.slice[kind].push(slice / kinds.len());
        // Read after the first search, which nothing precedes.
        let rows = match rows {
            Some(rows) => rows,
            None => *rows.insert(s.estimated_rows().await),
        };
        // Another query than the HTTP search's (half the list apart, as in the steady state):
        // the same one would find the pages its walk reads still in the processor's caches.
        let other = &probes[(i + probes.len() / 2) % probes.len()];
        let floor = s.floor(&estimates, kinds[kind], other, rows).await;
        window.floor[kind].push(floor.elapsed);
        i += 1;
    }
    window
}

/// One scenario's measurements.
struct Scenario {
    kind: Kind,
    indexes: Indexes,
    http: Vec<Duration>,
    floor: Vec<Duration>,
    /// The ids each measured query's HTTP search returned.
    ids: Vec<Vec<Uuid>>,
    /// The ids of a k-10 search of each measured query (untimed; for recall@10): the same
    /// search with k 10 for the similarity kinds, none for MMR and hybrid.
    ids10: Vec<Vec<Uuid>>,
    /// Queries whose HTTP results are not the floor's (similarity), or not among its
    /// candidates (MMR).
    differing: usize,
    /// Floor statements that took the exact path.
    exact_path: usize,
    /// The share of the association the last floor's scope estimate admitted (restricted).
    estimated_share: Option<f64>,
    concurrent: Concurrent,
}

struct Concurrent {
    http: Vec<Duration>,
    http_wall: Duration,
    floor: Vec<Duration>,
    floor_wall: Duration,
}

/// One client: HTTP and the floor take turns, each over every query, half the list apart.
async fn sequential(s: &Searched, kind: Kind, probes: &[Probe], indexes: Indexes) -> Scenario {
    let estimates = ScopeEstimates::new();
    let rows = s.estimated_rows().await;
    let n = probes.len();
    let mut out = Scenario {
        kind,
        indexes,
        http: Vec::with_capacity(n),
        floor: Vec::with_capacity(n),
        ids: vec![Vec::new(); n],
        ids10: Vec::new(),
        differing: 0,
        exact_path: 0,
        estimated_share: None,
        concurrent: Concurrent {
            http: Vec::new(),
            http_wall: Duration::ZERO,
            floor: Vec::new(),
            floor_wall: Duration::ZERO,
        },
    };
    let mut floor_ids = vec![Vec::new(); n];
    for i in 0..n {
        for step in 0..2 {
            let q = (i + ((i + step) % 2) * n.div_ceil(2)) % n;
            if (i + step) % 2 == 0 {
                let (elapsed, hits) = s.http.search(&s.path, &kind.body(&probes[q].text)).await;
                out.http.push(elapsed);
                out.ids[q] = hits.iter().map(|h| h.0).collect();
            } else {
                let statement = s.floor(&estimates, kind, &probes[q], rows).await;
                out.floor.push(statement.elapsed);
                out.exact_path += usize::from(statement.exact);
                out.estimated_share = statement.selectivity;
                floor_ids[q] = statement.hits.iter().map(|h| h.0).collect::<Vec<Uuid>>();
            }
        }
    }
    out.differing = out
        .ids
        .iter()
        .zip(&floor_ids)
        .filter(|(http, floor)| match kind {
            Kind::Mmr => !http.iter().all(|id| floor.contains(id)),
            _ => http != floor,
        })
        .count();
    out.ids10 = match kind {
        Kind::Similarity10 { .. } => out.ids.clone(),
        Kind::Mmr | Kind::Hybrid { .. } => Vec::new(),
        Kind::Similarity | Kind::Filter5 | Kind::Filter1 => {
            let mut ids10 = Vec::with_capacity(n);
            for probe in probes {
                let mut body = kind.body(&probe.text);
                body["params"]["k"] = json!(K10);
                let (_, hits) = s.http.search(&s.path, &body).await;
                ids10.push(hits.iter().map(|h| h.0).collect());
            }
            ids10
        }
    };
    out
}

/// `clients` concurrent clients through HTTP, then as many on the floor's connections.
async fn concurrent(s: &Searched, kind: Kind, probes: &[Probe], options: &Options) -> Concurrent {
    let (c, count) = (options.clients, probes.len());
    let limit = Some(Duration::from_secs(options.concurrent_seconds));
    let bodies: Arc<Vec<Value>> = Arc::new(probes.iter().map(|p| kind.body(&p.text)).collect());
    let (http, path) = (Arc::new(s.http.clone()), Arc::new(s.path.clone()));
    let (http_times, http_wall) = run_concurrent_for(c, count, limit, move |i| {
        let (http, path, bodies) = (http.clone(), path.clone(), bodies.clone());
        async move { http.search(&path, &bodies[i]).await.0 }
    })
    .await;
    let rows = s.estimated_rows().await;
    let searches: Arc<Vec<(FloorSearch, Option<HybridFloor>)>> = Arc::new(
        probes
            .iter()
            .map(|p| (s.floor_search(kind, p, rows), Searched::lexical(kind, p)))
            .collect(),
    );
    let (pool, estimates) = (s.floor_pool.clone(), ScopeEstimates::new());
    let (floor_times, floor_wall) = run_concurrent_for(c, count, limit, move |i| {
        let (pool, estimates, searches) = (pool.clone(), estimates.clone(), searches.clone());
        async move {
            let (search, lexical) = searches[i].clone();
            run_floor(&pool, &estimates, search, lexical).await.elapsed
        }
    })
    .await;
    Concurrent {
        http: http_times,
        http_wall,
        floor: floor_times,
        floor_wall,
    }
}

/// A scenario at one client, then at `clients`.
async fn scenario(
    s: &Searched,
    kind: Kind,
    indexes: Indexes,
    queries: &Queries,
    options: &Options,
) -> Scenario {
    let mut out = sequential(s, kind, &queries.measured, indexes).await;
    out.concurrent = concurrent(s, kind, &queries.concurrent, options).await;
    println!(
        "  {}{}: 1 client HTTP p50 {:.3} ms, floor {:.3} ms; {} clients {:.0} searches/s, floor {:.0} (load average {})",
        kind.name(),
        indexes.label(),
        pct(&out.http, 50.0),
        pct(&out.floor, 50.0),
        options.clients,
        rate(&out.concurrent.http, out.concurrent.http_wall),
        rate(&out.concurrent.floor, out.concurrent.floor_wall),
        load_average()
    );
    out
}

fn rate(samples: &[Duration], wall: Duration) -> f64 {
    samples.len() as f64 / wall.as_secs_f64()
}

/// The indexes serving a filtered scenario's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Indexes {
    /// The pipeline's default: Trove keeps an index on each declared field.
    Declared,
    /// The schema's `"x-trove-index": false`: no index serves the filters.
    Off,
    /// Metadata indexes made through `POST /pipelines/{id}/indexes` (declared fields not indexed).
    Metadata,
}

impl Indexes {
    fn label(self) -> &'static str {
        match self {
            Self::Declared => "",
            Self::Off => " no idx",
            Self::Metadata => " +idx",
        }
    }
}

/// Turns the indexes of the pipeline's declared fields off through the interface (the schema
/// again with `"x-trove-index": false`); the time it took.
async fn drop_declared_field_indexes(s: &Searched) -> Duration {
    let mut schema = metadata_schema();
    schema["x-trove-index"] = json!(false);
    let started = Instant::now();
    s.http
        .json(
            reqwest::Method::PATCH,
            &format!("/pipelines/{}", s.pipeline_id),
            Some(json!({"metadata_schema": schema})),
        )
        .await;
    started.elapsed()
}

/// Metadata indexes on the filtered fields, through the interface; the time of each.
async fn add_indexes(s: &Searched) -> Vec<(&'static str, Duration)> {
    let mut times = Vec::new();
    for field in ["category", "year"] {
        let started = Instant::now();
        s.http
            .json(
                reqwest::Method::POST,
                &format!("/pipelines/{}/indexes", s.pipeline_id),
                Some(json!({"field": field})),
            )
            .await;
        times.push((field, started.elapsed()));
    }
    times
}

/// Everything measured on the searched pipeline.
struct Searches {
    /// The first window.
    window: Window,
    /// Latencies of the same mix of searches once the steady state has been measured (before
    /// the metadata indexes).
    late_window: Window,
    /// From the poll seeing the last `success` to the first search.
    first_after: Duration,
    /// When the first search started.
    first_at: chrono::DateTime<chrono::Utc>,
    scenarios: Vec<Scenario>,
    /// The time of the PATCH turning the declared fields' indexes off (dropping them).
    declared_off: Duration,
    indexes: Vec<(&'static str, Duration)>,
    /// Hybrid against similarity (`--hybrid`).
    hybrid: Option<HybridSearches>,
}

/// The queries of each phase, made before ingestion so that none is made between the last
/// `success` and the first search.
struct Queries {
    window: Vec<Probe>,
    late_window: Vec<Probe>,
    measured: Vec<Probe>,
    concurrent: Vec<Probe>,
    hybrid_window: Vec<Probe>,
}

/// The seeds of the query streams: window, measured, concurrent, late window, hybrid window.
const QUERY_SEEDS: [u64; 5] = [
    0x5EED_0001,
    0x5EED_0002,
    0x5EED_0003,
    0x5EED_0004,
    0x5EED_0005,
];

impl Queries {
    fn new(language: &Language, options: &Options) -> Self {
        let [window, measured, concurrent, late_window, hybrid_window] = QUERY_SEEDS;
        let source = options.vectors;
        Self {
            window: probes(language, window, 4000, source),
            late_window: probes(language, late_window, 4000, source),
            measured: probes(language, measured, options.queries, source),
            concurrent: probes(
                language,
                concurrent,
                options.concurrent_queries.max(1),
                source,
            ),
            // Searched only with `--hybrid`.
            hybrid_window: probes(
                language,
                hybrid_window,
                if options.hybrid { 4000 } else { 0 },
                source,
            ),
        }
    }

    /// Each stream's seed and its queries.
    fn streams_mut(&mut self) -> [(u64, &mut Vec<Probe>); 5] {
        let [window, measured, concurrent, late_window, hybrid_window] = QUERY_SEEDS;
        [
            (window, &mut self.window),
            (measured, &mut self.measured),
            (concurrent, &mut self.concurrent),
            (late_window, &mut self.late_window),
            (hybrid_window, &mut self.hybrid_window),
        ]
    }
}

/// With `--vectors=minilm`: MiniLM vectors of the documents' fragments (split in process as the
/// seeded `recursive-character` splitter splits them) and of every query stream, from the
/// cache or computed and cached (a file for the fragments, one per query stream); the queries'
/// vectors put in place, and the fake embeddings server started with them all.
async fn real_vectors_of(
    n: usize,
    documents: &[Document],
    queries: &mut Queries,
) -> FakeEmbeddings {
    let model = real_vectors::load_model();
    let config =
        trove_text::SplitterConfig::default_for("recursive-character").expect("splitter config");
    let fragments: Vec<String> = documents
        .iter()
        .flat_map(|d| trove_text::split(&config, &d.text))
        .collect();
    let mut streams = queries.streams_mut();
    let mut jobs = vec![(
        CacheKey {
            kind: "service".to_owned(),
            size: Some(n),
            seed: LANGUAGE_SEED,
        },
        fragments,
        Vec::new(),
    )];
    for (seed, probes) in &streams {
        if !probes.is_empty() {
            jobs.push((
                CacheKey {
                    kind: format!("service-queries-{seed:x}"),
                    size: None,
                    seed: LANGUAGE_SEED,
                },
                Vec::new(),
                probes.iter().map(|p| p.text.clone()).collect(),
            ));
        }
    }
    let computed = {
        let model = Arc::clone(&model);
        tokio::task::spawn_blocking(move || {
            jobs.into_iter()
                .map(|(key, fragments, queries)| {
                    let f: Vec<&str> = fragments.iter().map(String::as_str).collect();
                    let q: Vec<&str> = queries.iter().map(String::as_str).collect();
                    let vectors = real_vectors::cached_vectors(&model, &key, &f, &q);
                    (fragments, vectors)
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("vectors")
    };
    let mut computed = computed.into_iter();
    let (fragments, corpus) = computed.next().expect("the fragments' vectors");
    let mut known: Vec<(String, Vec<f32>)> = fragments.into_iter().zip(corpus.fragments).collect();
    let fragment_count = known.len();
    for (_, probes) in streams.iter_mut().filter(|(_, p)| !p.is_empty()) {
        let (_, vectors) = computed.next().expect("a stream's vectors");
        for (probe, vector) in probes.iter_mut().zip(vectors.queries) {
            probe.vector.clone_from(&vector);
            known.push((probe.text.clone(), vector));
        }
    }
    println!(
        "{} fragments of {n} documents split in process; the fake embeddings server knows {} texts",
        fragment_count,
        known.len()
    );
    FakeEmbeddings::start(model, known).await
}

/// The searches right after ingestion (see the top of the file).
async fn searches(s: &Searched, done: &Done, queries: &Queries, options: &Options) -> Searches {
    let first_at = chrono::Utc::now();
    let first_after = done.seen.elapsed();
    let window = first_window(s, &KINDS, &queries.window, options.window).await;
    println!("steady state (load average {}):", load_average());
    let mut scenarios = Vec::new();
    for kind in KINDS {
        let scenario = scenario(s, kind, Indexes::Declared, queries, options).await;
        scenarios.push(scenario);
    }
    let late_window = first_window(s, &KINDS, &queries.late_window, options.window).await;
    let hybrid = if options.hybrid {
        Some(hybrid_searches(s, queries, options).await)
    } else {
        None
    };
    let declared_off = drop_declared_field_indexes(s).await;
    for kind in [Kind::Filter5, Kind::Filter1] {
        scenarios.push(scenario(s, kind, Indexes::Off, queries, options).await);
    }
    let indexes = add_indexes(s).await;
    for kind in [Kind::Filter5, Kind::Filter1] {
        scenarios.push(scenario(s, kind, Indexes::Metadata, queries, options).await);
    }
    Searches {
        window,
        late_window,
        first_after,
        first_at,
        scenarios,
        declared_off,
        indexes,
        hybrid,
    }
}

/// Hybrid against similarity (`--hybrid`): the window of the four kinds in turn, each kind at
/// one client and at `clients`, then what the lists held (not timed) and, with `--explain`,
/// the plans.
async fn hybrid_searches(s: &Searched, queries: &Queries, options: &Options) -> HybridSearches {
    println!(
        "hybrid against similarity (load average {}):",
        load_average()
    );
    let window = first_window(s, &HYBRID_KINDS, &queries.hybrid_window, options.window).await;
    let mut scenarios = Vec::new();
    for kind in HYBRID_KINDS {
        scenarios.push(scenario(s, kind, Indexes::Declared, queries, options).await);
    }
    let sample = &queries.measured[..queries.measured.len().min(LEXICAL_SAMPLE)];
    let matches = lexical_matches(s, sample).await;
    let mut lists = Vec::new();
    for filtered in [false, true] {
        lists.push(list_shares(s, Kind::Hybrid { filtered }, &queries.measured).await);
    }
    if options.explain {
        // The sampled queries whose lexical lists are the median and the largest.
        let mut by_matches: Vec<usize> = (0..sample.len()).collect();
        by_matches.sort_by_key(|&i| matches.all[i]);
        for (which, i) in [
            ("median", by_matches[by_matches.len() / 2]),
            ("largest", by_matches[by_matches.len() - 1]),
        ] {
            explain_hybrid(s, &sample[i], which, matches.all[i]).await;
        }
    }
    HybridSearches {
        window,
        scenarios,
        matches,
        lists,
    }
}

/// Queries whose lexical matches are counted.
const LEXICAL_SAMPLE: usize = 100;

/// What the hybrid comparison measured.
struct HybridSearches {
    /// The four kinds in turn.
    window: Window,
    /// In the order of [`HYBRID_KINDS`].
    scenarios: Vec<Scenario>,
    matches: LexicalMatches,
    /// Without and under the 5 % filter.
    lists: Vec<ListShares>,
}

/// The fragments holding any word of each sampled query (what the lexical list ranks), in the
/// pipeline and under the 5 % filter, and the text search configuration each query was given.
struct LexicalMatches {
    all: Vec<i64>,
    filtered: Vec<i64>,
    fragments: i64,
    configs: Vec<(String, usize)>,
}

async fn lexical_matches(s: &Searched, probes: &[Probe]) -> LexicalMatches {
    use sea_query::PostgresQueryBuilder;
    use sea_query_sqlx::SqlxBinder;
    let mut db = PgConnection::connect(&s.url).await.expect("bench db");
    let mut matches = LexicalMatches {
        all: Vec::new(),
        filtered: Vec::new(),
        fragments: 0,
        configs: Vec::new(),
    };
    for probe in probes {
        let config = lexical_config(&probe.text);
        match matches.configs.iter_mut().find(|(c, _)| c == config) {
            Some((_, n)) => *n += 1,
            None => matches.configs.push((config.to_owned(), 1)),
        }
        // The lexical list as `trove_query::hybrid` builds it, unlimited.
        for (kind, counts) in [
            (Kind::Hybrid { filtered: false }, &mut matches.all),
            (Kind::Hybrid { filtered: true }, &mut matches.filtered),
        ] {
            let scope = Scope {
                pipeline_id: s.pipeline_id,
                classifications: &s.classifications,
                filter: s.condition(kind),
            };
            let lexical = trove_query::hybrid::Lexical {
                config,
                query: &probe.text,
                fetch: 1_000_000_000,
            };
            let (sql, values) = trove_query::hybrid::lexical_candidates(&scope, &lexical)
                .build_sqlx(PostgresQueryBuilder);
            let ids: Vec<Uuid> = sqlx::query_scalar_with(sqlx::AssertSqlSafe(sql), values)
                .fetch_all(&mut db)
                .await
                .expect("lexical list");
            counts.push(ids.len() as i64);
        }
    }
    matches.fragments = sqlx::query_scalar(
        "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND expired_at IS NULL",
    )
    .bind(s.pipeline_id)
    .fetch_one(&mut db)
    .await
    .expect("fragments");
    db.close().await.ok();
    matches
}

/// The text search configuration of the lexical list of `text`, as
/// `trove::retrieval::search::hybrid` chooses it.
fn lexical_config(text: &str) -> &'static str {
    trove_text::likeliest_text_search_config(text)
}

/// Where a hybrid kind's results came from, over the measured queries (searched once more).
struct ListShares {
    queries: usize,
    hits: usize,
    /// Results with a rank in the vector list, in the lexical list, in both.
    vector: usize,
    lexical: usize,
    both: usize,
    /// Queries none of whose results is in the lexical list.
    without_lexical: usize,
}

async fn list_shares(s: &Searched, kind: Kind, probes: &[Probe]) -> ListShares {
    let mut shares = ListShares {
        queries: probes.len(),
        hits: 0,
        vector: 0,
        lexical: 0,
        both: 0,
        without_lexical: 0,
    };
    for probe in probes {
        let answer = s
            .http
            .json(reqwest::Method::POST, &s.path, Some(kind.body(&probe.text)))
            .await;
        let hits = answer.as_array().expect("a list of hits");
        let ranked = |hit: &Value, list: &str| !hit[list].is_null();
        let lexical = hits.iter().filter(|h| ranked(h, "full_text_rank")).count();
        shares.hits += hits.len();
        shares.vector += hits.iter().filter(|h| ranked(h, "similarity_rank")).count();
        shares.lexical += lexical;
        shares.both += hits
            .iter()
            .filter(|h| ranked(h, "similarity_rank") && ranked(h, "full_text_rank"))
            .count();
        shares.without_lexical += usize::from(lexical == 0);
    }
    shares
}

/// The `EXPLAIN (ANALYZE, BUFFERS)` of the hybrid statement of `probe`, without and under the
/// filter: the floor's statement on a connection of its own with `auto_explain` reporting as
/// notices (written to stderr), after two runs of each that warm it.
async fn explain_hybrid(s: &Searched, probe: &Probe, which: &str, matches: i64) {
    // Two connections: the one parked (loaded with `auto_explain`, the one the floor takes)
    // and one for the floor's other reads.
    let pool = trove::store::connect_lazy(&s.url, 2).expect("explain pool");
    let set = |statement: &'static str| {
        let pool = pool.clone();
        async move {
            let mut conn = pool.acquire_warm().await.expect("connection");
            sqlx::raw_sql(statement)
                .execute(&mut *conn)
                .await
                .expect("auto_explain");
            conn.park();
        }
    };
    set(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = -1;
         SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on;
         SET auto_explain.log_level = notice",
    )
    .await;
    let estimates = ScopeEstimates::new();
    let rows = s.estimated_rows().await;
    for kind in [
        Kind::Hybrid { filtered: false },
        Kind::Hybrid { filtered: true },
    ] {
        let run = || {
            run_floor(
                &pool,
                &estimates,
                s.floor_search(kind, probe, rows),
                Searched::lexical(kind, probe),
            )
        };
        run().await;
        run().await;
        println!(
            "plan of {} for the sampled query of the {which} lexical list ({matches} fragments; {:?}, {}): on stderr (auto_explain)",
            kind.name(),
            probe.text,
            lexical_config(&probe.text)
        );
        set("SET auto_explain.log_min_duration = 0").await;
        let explained = run().await;
        set("SET auto_explain.log_min_duration = -1").await;
        println!(
            "  that run took {:.3} ms",
            explained.elapsed.as_secs_f64() * 1000.0
        );
    }
    pool.close().await;
}

// ---- Recall ------------------------------------------------------------------------------

/// The pipeline's vectors, read back from its vector table, and the fragments each filter
/// admits.
struct Corpus {
    vectors: Vectors,
    five: Vec<u32>,
    one: Vec<u32>,
}

async fn read_corpus(url: &str, s: &Searched) -> Corpus {
    let mut db = PgConnection::connect(url).await.expect("bench db");
    let table = trove::store::vectors::table_name(s.ve_id);
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT f.id, v.embedding, f.metadata->>'category', (f.metadata->>'year')::bigint
         FROM {table} v JOIN fragments f ON f.id = v.fragment_id
         WHERE f.pipeline_id = $1 AND f.expired_at IS NULL"
    )))
    .bind(s.pipeline_id)
    .fetch_all(&mut db)
    .await
    .expect("vectors");
    db.close().await.ok();
    let mut corpus = Corpus {
        vectors: Vectors::with_capacity(DIM, rows.len()),
        five: Vec::new(),
        one: Vec::new(),
    };
    for row in rows {
        let vector: pgvector::Vector = row.get(1);
        let index = corpus.vectors.push(row.get(0), vector.as_slice());
        if row.get::<Option<String>, _>(2).as_deref() == Some(CATEGORY) {
            corpus.five.push(index);
            if row.get::<Option<i64>, _>(3) == Some(YEAR) {
                corpus.one.push(index);
            }
        }
    }
    corpus
}

/// Recall@k of a scenario's HTTP results: tie-aware against the exact top-k of its scope; for
/// MMR, the share of MMR's selection among the exact 20 nearest that the search returned;
/// none (NaN) for hybrid, whose results are not the nearest.
/// Recall@10 of a scenario's k-10 searches ([`Scenario::ids10`]), tie-aware against the exact
/// top-10 of its scope; none (NaN) for MMR and hybrid.
fn recall10_of(corpus: &Corpus, scenario: &Scenario, probes: &[Probe]) -> f64 {
    let scope = match scenario.kind {
        Kind::Hybrid { .. } | Kind::Mmr => return f64::NAN,
        Kind::Similarity | Kind::Similarity10 { filtered: false } => None,
        Kind::Filter5 | Kind::Similarity10 { filtered: true } => Some(corpus.five.as_slice()),
        Kind::Filter1 => Some(corpus.one.as_slice()),
    };
    let queries: Vec<ExactQuery<'_>> = probes
        .iter()
        .map(|p| (p.vector.as_slice(), scope))
        .collect();
    let (mut found, mut wanted) = (0, 0);
    for ((probe, top), ids) in probes
        .iter()
        .zip(exact_top(&corpus.vectors, &queries, K10))
        .zip(&scenario.ids10)
    {
        let (tie_aware, _, k) = recall(&corpus.vectors, &probe.vector, &top, ids);
        found += tie_aware;
        wanted += k;
    }
    found as f64 / wanted.max(1) as f64
}

fn recall_of(corpus: &Corpus, scenario: &Scenario, probes: &[Probe]) -> f64 {
    let scope = match scenario.kind {
        Kind::Hybrid { .. } => return f64::NAN,
        Kind::Similarity | Kind::Mmr | Kind::Similarity10 { filtered: false } => None,
        Kind::Filter5 | Kind::Similarity10 { filtered: true } => Some(corpus.five.as_slice()),
        Kind::Filter1 => Some(corpus.one.as_slice()),
    };
    let queries: Vec<ExactQuery<'_>> = probes
        .iter()
        .map(|p| (p.vector.as_slice(), scope))
        .collect();
    let (mut found, mut wanted) = (0, 0);
    if scenario.kind == Kind::Mmr {
        for ((probe, top), ids) in probes
            .iter()
            .zip(exact_top(&corpus.vectors, &queries, FETCH_K))
            .zip(&scenario.ids)
        {
            let candidates: Vec<&[f32]> = top
                .items
                .iter()
                .map(|(_, i)| corpus.vectors.vector(*i))
                .collect();
            let chosen = mmr::select(&probe.vector, &candidates, K, 0.5, Similarity::Cosine);
            let returned: Vec<Option<u32>> =
                ids.iter().map(|id| corpus.vectors.index_of(id)).collect();
            found += chosen
                .iter()
                .filter(|&&c| returned.contains(&Some(top.items[c].1)))
                .count();
            wanted += chosen.len();
        }
    } else {
        for ((probe, top), ids) in probes
            .iter()
            .zip(exact_top(&corpus.vectors, &queries, scenario.kind.k()))
            .zip(&scenario.ids)
        {
            let (tie_aware, _, k) = recall(&corpus.vectors, &probe.vector, &top, ids);
            found += tie_aware;
            wanted += k;
        }
    }
    found as f64 / wanted.max(1) as f64
}

// ---- Report ------------------------------------------------------------------------------

fn print_ingestion(rows: &[Ingestion]) {
    let columns = [
        Column::left("ingestion", 24, 0),
        Column::right("docs/request", 12, 2),
        Column::right("documents", 9, 2),
        Column::right("fragments", 9, 2),
        Column::right("submitted s", 11, 2),
        Column::right("success s", 9, 2),
        Column::right("docs/s", 7, 2),
        Column::right("fragments/s", 11, 2),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let seconds = r.total.as_secs_f64();
            vec![
                r.mode.to_owned(),
                format!("{:.0}", r.per_request),
                r.documents.to_string(),
                r.fragments.to_string(),
                format!("{:.1}", r.submitted.as_secs_f64()),
                format!("{seconds:.1}"),
                format!("{:.0}", r.documents as f64 / seconds),
                format!("{:.0}", r.fragments as f64 / seconds),
            ]
        })
        .collect();
    print_table(&columns, &cells);
}

/// The first window's p50 against the steady p50 (one client) of each kind, and against the
/// same mix of searches taken again later; the same for the floor.
fn print_window(searches: &Searches, window: u64) {
    let columns = [
        Column::left("scenario", 28, 0),
        Column::right("searches", 8, 2),
        Column::right(FIRST_LABEL, 13, 2),
        Column::right("steady p50", 10, 2),
        Column::right("ratio", 6, 2),
        Column::right("same mix later p50", 18, 2),
        Column::right("ratio", 6, 2),
        Column::right("floor: first-win", 16, 3),
        Column::right("steady", 7, 2),
        Column::right("later", 7, 2),
    ];
    let rows: Vec<Vec<String>> = KINDS
        .iter()
        .enumerate()
        .zip(&searches.scenarios)
        .map(|((k, kind), steady)| {
            let (first, late) = (
                pct(&searches.window.http[k], 50.0),
                pct(&searches.late_window.http[k], 50.0),
            );
            let steady_p50 = pct(&steady.http, 50.0);
            let floor_first = pct(&searches.window.floor[k], 50.0);
            vec![
                kind.name().to_owned(),
                searches.window.http[k].len().to_string(),
                format!("{first:.3}"),
                format!("{steady_p50:.3}"),
                format!("{:.2}", first / steady_p50),
                format!("{late:.3}"),
                format!("{:.2}", first / late),
                format!("{floor_first:.3}"),
                format!("{:.3}", pct(&steady.floor, 50.0)),
                format!("{:.3}", pct(&searches.late_window.floor[k], 50.0)),
            ]
        })
        .collect();
    println!(
        "\nfirst {window} s after the last success (first search {:.0} ms after the poll saw it; ms; HTTP searches in turns with the floor):",
        searches.first_after.as_secs_f64() * 1000.0
    );
    print_table(&columns, &rows);
    println!("by slice of the first window, HTTP / floor p50 (ms):");
    for (k, kind) in KINDS.iter().enumerate() {
        let w = &searches.window;
        let slices = w.slice[k].last().map_or(0, |last| last + 1);
        let by_slice: Vec<String> = (0..slices)
            .map(|n| {
                let of = |samples: &[Duration]| -> Vec<Duration> {
                    samples
                        .iter()
                        .zip(&w.slice[k])
                        .filter(|(_, slice)| **slice == n)
                        .map(|(d, _)| *d)
                        .collect()
                };
                format!(
                    "{:.2} / {:.2}",
                    pct(&of(&w.http[k]), 50.0),
                    pct(&of(&w.floor[k]), 50.0)
                )
            })
            .collect();
        println!("  {:<28}{}", kind.name(), by_slice.join("   "));
    }
}

const FIRST_LABEL: &str = "first-win p50";

fn scenario_rows(scenario: &Scenario, recall: (f64, f64), clients: usize) -> [Vec<String>; 2] {
    let figure = |r: f64| {
        if r.is_nan() {
            String::new()
        } else {
            format!("{r:.4}")
        }
    };
    let name = format!("{}{}", scenario.kind.name(), scenario.indexes.label());
    let path = if scenario.exact_path == scenario.floor.len() {
        "exact"
    } else if scenario.exact_path == 0 {
        "index"
    } else {
        "mixed"
    };
    let path = match scenario.estimated_share {
        Some(share) => format!("{path} (est. {:.2} %)", share * 100.0),
        None => path.to_owned(),
    };
    let hits: usize = scenario.ids.iter().map(Vec::len).sum();
    let mean_hits = hits as f64 / scenario.ids.len().max(1) as f64;
    let c = &scenario.concurrent;
    let one = vec![
        name.clone(),
        "1".to_owned(),
        format!("{:.3}", pct(&scenario.http, 50.0)),
        format!("{:.3}", pct(&scenario.http, 99.0)),
        String::new(),
        format!("{:.3}", pct(&scenario.floor, 50.0)),
        String::new(),
        format!(
            "{:.2}",
            pct(&scenario.http, 50.0) / pct(&scenario.floor, 50.0)
        ),
        figure(recall.0),
        figure(recall.1),
        format!("{mean_hits:.2}/{}", scenario.kind.k()),
        path.clone(),
    ];
    let many = vec![
        name,
        clients.to_string(),
        format!("{:.3}", pct(&c.http, 50.0)),
        format!("{:.3}", pct(&c.http, 99.0)),
        format!("{:.0}", rate(&c.http, c.http_wall)),
        format!("{:.3}", pct(&c.floor, 50.0)),
        format!("{:.0}", rate(&c.floor, c.floor_wall)),
        format!("{:.2}", pct(&c.http, 50.0) / pct(&c.floor, 50.0)),
        String::new(),
        String::new(),
        String::new(),
        path,
    ];
    [one, many]
}

fn print_scenarios(scenarios: &[Scenario], recalls: &[(f64, f64)], clients: usize) {
    let columns = [
        Column::left("scenario", 32, 0),
        Column::right("c", 2, 2),
        Column::right("p50 ms", 8, 2),
        Column::right("p99 ms", 8, 2),
        Column::right("req/s", 6, 2),
        Column::right("floor p50", 9, 2),
        Column::right("floor req/s", 11, 2),
        Column::right("ratio", 6, 2),
        Column::right("recall@k", 8, 2),
        Column::right("rec@10", 7, 2),
        Column::right("hits/k", 7, 2),
        Column::left("path", 5, 2),
    ];
    let rows: Vec<Vec<String>> = scenarios
        .iter()
        .zip(recalls)
        .flat_map(|(scenario, recall)| scenario_rows(scenario, *recall, clients))
        .collect();
    println!(
        "\nsearches (Trove through HTTP; floor: the same statement alone on a pooled connection; ratio = p50 / floor p50; recall@k of the measured searches, rec@10 of a k-10 search of each query, both tie-aware against an exact scan; hits/k: mean hits returned; path: the floor's):"
    );
    print_table(&columns, &rows);
}

/// The project's targets, met or not.
fn print_targets(n: usize, ingestion: &[Ingestion], searches: &Searches, recalls: &[(f64, f64)]) {
    println!("\ntargets (N = {n} documents):");
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    for ((k, kind), steady) in KINDS.iter().enumerate().zip(&searches.scenarios) {
        let first = pct(&searches.window.http[k], 50.0);
        let (alone, mixed) = (
            first / pct(&steady.http, 50.0),
            first / pct(&searches.late_window.http[k], 50.0),
        );
        println!(
            "  first-window p50 ≤ 1.2 × steady p50, {}: {alone:.2} against the kind alone: {}; {mixed:.2} against the same mix later: {}",
            kind.name(),
            verdict(alone <= 1.2),
            verdict(mixed <= 1.2)
        );
    }
    let scenarios = &searches.scenarios;
    let plain = &scenarios[0];
    // The 5 % filter with the pipeline's default (its declared fields indexed) and with the
    // declared fields' indexes off: no metadata index made either way.
    for (i, how) in [
        (2, "declared fields indexed, the default"),
        (4, "\"x-trove-index\": false"),
    ] {
        let five = &scenarios[i];
        let ratio = pct(&five.http, 50.0) / pct(&plain.http, 50.0);
        let all_hits = five.ids.iter().all(|ids| ids.len() == K);
        println!(
            "  5 % filter without a metadata index ({how}): p50 ≤ 2 × unfiltered p50 ({ratio:.2}), all {K} hits ({all_hits}), recall@5 ≥ 0.95 ({:.4}): {}{}",
            recalls[i].0,
            verdict(ratio <= 2.0 && all_hits && recalls[i].0 >= 0.95),
            if n == 20_000 {
                ""
            } else {
                " (the target names 20,000 documents)"
            }
        );
    }
    // The same ratio where both kinds were searched in the same seconds (the machine's speed
    // drifts between scenarios measured a minute apart).
    let interleaved = |window: &Window| pct(&window.http[2], 50.0) / pct(&window.http[0], 50.0);
    println!(
        "    the same ratio within the first window {:.2}, within the same mix later {:.2}",
        interleaved(&searches.window),
        interleaved(&searches.late_window)
    );
    let c = &plain.concurrent;
    let searches_per_s = rate(&c.http, c.http_wall);
    println!(
        "  unfiltered similarity, 8 clients ≥ 1,000 searches/s: {searches_per_s:.0}: {}",
        verdict(searches_per_s >= 1000.0)
    );
    let ratio = pct(&plain.http, 50.0) / pct(&plain.floor, 50.0);
    println!(
        "  unfiltered similarity, 1 client, HTTP p50 ≤ 1.3 × its statement's p50: {ratio:.2}: {}",
        verdict(ratio <= 1.3)
    );
    for (row, target) in ingestion.iter().zip([2600.0, 4000.0]) {
        let per_s = row.fragments as f64 / row.total.as_secs_f64();
        println!(
            "  ingestion {} ≥ {target:.0} fragments/s: {per_s:.0}: {}",
            row.mode,
            verdict(per_s >= target)
        );
    }
}

// ---- One size ----------------------------------------------------------------------------

async fn run_size(n: usize, options: &Options, servers: &(String, String), language: &Language) {
    println!("\n==================== N = {n} documents ====================");
    let documents = documents(n, language);
    let bytes: usize = documents.iter().map(|d| d.text.len()).sum();
    println!(
        "documents: synthetic topic texts, mean {} bytes; category 1 of {CATEGORIES}, year 1 of {YEARS}",
        bytes / n.max(1)
    );
    let submissions: Vec<Value> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| submission(i, d))
        .collect();
    let mut queries = Queries::new(language, options);
    let fake = match options.vectors {
        VectorSource::Hash => None,
        VectorSource::MiniLm => Some(real_vectors_of(n, &documents, &mut queries).await),
    };
    drop(documents);
    let fake = fake.as_ref();
    let started = Instant::now();
    let (trove, searched, mut per_document, _) =
        fresh_ingestion(&submissions, false, options, servers, fake).await;
    per_document.fragments = count_fragments(&trove.url, searched.pipeline_id).await;
    searched.floor_pool.close().await;
    trove.stop(options.keep).await;
    let (trove, searched, mut bulk, done) =
        fresh_ingestion(&submissions, true, options, servers, fake).await;
    let searches = searches(&searched, &done, &queries, options).await;
    bulk.fragments = count_fragments(&trove.url, searched.pipeline_id).await;
    let measured = Measured {
        n,
        ingestion: [per_document, bulk],
        searches,
        queries,
        done,
    };
    report(&trove, &searched, &measured, options).await;
    if let Some(fake) = fake {
        let (known, computed) = fake.counts();
        println!(
            "fake embeddings server: {known} inputs answered with cached vectors, {computed} computed in process (texts it did not know)"
        );
    }
    searched.floor_pool.close().await;
    trove.stop(options.keep).await;
    println!("N = {n}: {:.0} s in all", started.elapsed().as_secs_f64());
}

/// What one size measured.
struct Measured {
    n: usize,
    ingestion: [Ingestion; 2],
    searches: Searches,
    queries: Queries,
    done: Done,
}

/// Recall, then every table.
async fn report(trove: &Running, searched: &Searched, measured: &Measured, options: &Options) {
    let Measured {
        n,
        ingestion,
        searches,
        queries,
        done,
    } = measured;
    let last_success: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT max(updated_at) FROM documents WHERE pipeline_id = $1")
            .bind(searched.pipeline_id)
            .fetch_one(trove.state.pool.pg_pool())
            .await
            .expect("last success");
    let started = Instant::now();
    let corpus = read_corpus(&trove.url, searched).await;
    let recalls: Vec<(f64, f64)> = searches
        .scenarios
        .iter()
        .map(|s| {
            (
                recall_of(&corpus, s, &queries.measured),
                recall10_of(&corpus, s, &queries.measured),
            )
        })
        .collect();
    println!(
        "\nrecall: {} vectors read back, exact top-k in process over {} queries per scenario in {:.1} s; result lists differing from the floor's: {}",
        corpus.vectors.len(),
        queries.measured.len(),
        started.elapsed().as_secs_f64(),
        searches
            .scenarios
            .iter()
            .map(|s| s.differing.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "\ningestion ({} clients{}):",
        options.clients,
        if options.hybrid {
            "; full-text search on: these figures include computing and storing the fragments' full-text vectors"
        } else {
            ""
        }
    );
    print_ingestion(ingestion);
    if let Some(last) = last_success {
        println!(
            "last version stored (its transaction's start) {:.0} ms before the first search (at {}); the poll that saw it took {:.1} ms",
            (searches.first_at - last).num_microseconds().unwrap_or(0) as f64 / 1000.0,
            searches.first_at.format("%H:%M:%S%.3f UTC"),
            done.poll.as_secs_f64() * 1000.0
        );
    }
    print_window(searches, options.window);
    print_scenarios(&searches.scenarios, &recalls, options.clients);
    println!(
        "declared fields' indexes turned off (dropped) in {:.0} ms; metadata indexes: {}",
        searches.declared_off.as_secs_f64() * 1000.0,
        searches
            .indexes
            .iter()
            .map(|(field, d)| format!("{field} {:.0} ms", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    print_targets(*n, ingestion, searches, &recalls);
    if let Some(hybrid) = &searches.hybrid {
        let recalls: Vec<(f64, f64)> = hybrid
            .scenarios
            .iter()
            .map(|s| {
                (
                    recall_of(&corpus, s, &queries.measured),
                    recall10_of(&corpus, s, &queries.measured),
                )
            })
            .collect();
        print_hybrid(hybrid, &recalls, options);
    }
}

/// Hybrid against similarity: the window, the table, what the lists held, and the targets.
fn print_hybrid(hybrid: &HybridSearches, recalls: &[(f64, f64)], options: &Options) {
    println!(
        "\nhybrid against similarity (k 10; hybrid without fetch_k: {HYBRID_CANDIDATES} candidates per list, rrf_k 60; the queries' words are the corpus's; result lists differing from the floor's: {}):",
        hybrid
            .scenarios
            .iter()
            .map(|s| s.differing.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    print_scenarios(&hybrid.scenarios, recalls, options.clients);
    let w = &hybrid.window;
    println!(
        "the four in turn for {} s ({} ms each; searches {}): HTTP p50 {} ms, floor p50 {} ms",
        options.window,
        WINDOW_SLICE.as_millis(),
        w.http
            .iter()
            .map(|h| h.len().to_string())
            .collect::<Vec<_>>()
            .join(" / "),
        w.http
            .iter()
            .map(|h| format!("{:.3}", pct(h, 50.0)))
            .collect::<Vec<_>>()
            .join(" / "),
        w.floor
            .iter()
            .map(|h| format!("{:.3}", pct(h, 50.0)))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    let m = &hybrid.matches;
    let configs: Vec<String> = m.configs.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let share = |counts: &[i64], p: f64| {
        let mut sorted = counts.to_vec();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted
            .get(rank.min(sorted.len()).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    for (label, counts) in [("the pipeline", &m.all), ("the 5 % filter", &m.filtered)] {
        println!(
            "fragments holding a word of the query, in {label} (of {} fragments; {} queries): min {}, p50 {}, p90 {}, max {}; none for {} queries",
            m.fragments,
            counts.len(),
            share(counts, 0.0),
            share(counts, 50.0),
            share(counts, 90.0),
            share(counts, 100.0),
            counts.iter().filter(|c| **c == 0).count()
        );
    }
    println!(
        "text search configurations of those queries: {}",
        configs.join(", ")
    );
    for (label, lists) in ["without a filter", "under the 5 % filter"]
        .iter()
        .zip(&hybrid.lists)
    {
        let per_query = |n: usize| n as f64 / lists.queries.max(1) as f64;
        println!(
            "hybrid results {label} ({} queries, searched once more): {:.2} per query, {:.2} from the vector list, {:.2} from the lexical list, {:.2} in both; queries without a result of the lexical list: {}",
            lists.queries,
            per_query(lists.hits),
            per_query(lists.vector),
            per_query(lists.lexical),
            per_query(lists.both),
            lists.without_lexical
        );
    }
    println!("\nhybrid targets:");
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    for (pair, label) in hybrid
        .scenarios
        .chunks(2)
        .zip(["without a filter", "under the 5 % filter"])
    {
        let [similarity, hybrid_search] = pair else {
            continue;
        };
        let p50 = |s: &Scenario| pct(&s.http, 50.0);
        let throughput = |s: &Scenario| rate(&s.concurrent.http, s.concurrent.http_wall);
        let latency = p50(hybrid_search) / p50(similarity);
        let searches_per_s = throughput(hybrid_search) / throughput(similarity);
        println!(
            "  {label}: hybrid p50 at 1 client ≤ 1.5 × similarity's: {:.3} / {:.3} ms = {latency:.2}: {}",
            p50(hybrid_search),
            p50(similarity),
            verdict(latency <= 1.5)
        );
        println!(
            "  {label}: hybrid at {} clients ≥ 0.6 × similarity's searches/s: {:.0} / {:.0} = {searches_per_s:.2}: {}",
            options.clients,
            throughput(hybrid_search),
            throughput(similarity),
            verdict(searches_per_s >= 0.6)
        );
        let floor_p50 = |s: &Scenario| pct(&s.floor, 50.0);
        let floor_rate = |s: &Scenario| rate(&s.concurrent.floor, s.concurrent.floor_wall);
        println!(
            "    statements alone: p50 {:.3} / {:.3} ms = {:.2}; {} clients {:.0} / {:.0} searches/s = {:.2}",
            floor_p50(hybrid_search),
            floor_p50(similarity),
            floor_p50(hybrid_search) / floor_p50(similarity),
            options.clients,
            floor_rate(hybrid_search),
            floor_rate(similarity),
            floor_rate(hybrid_search) / floor_rate(similarity)
        );
    }
    let in_turn = |hybrid_index: usize| {
        pct(&w.http[hybrid_index], 50.0) / pct(&w.http[hybrid_index - 1], 50.0)
    };
    println!(
        "  the p50 ratio in the same seconds (the four in turn): {:.2} without a filter, {:.2} under the 5 % filter",
        in_turn(1),
        in_turn(3)
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
    let servers = app::servers();
    println!(
        "service bench: documents {:?}, {} clients, {} queries per scenario at 1 client, {} vectors, {} cores, tokio runtime shared by the service, its worker and the clients; {}{}",
        options.docs,
        options.clients,
        options.queries,
        options.vectors.label(),
        std::thread::available_parallelism().map_or(0, usize::from),
        app::postgres_memory(&servers.0).await,
        if options.hybrid {
            "; --hybrid: full-text search on (ingestion includes the full-text vectors), TROVE_EXTENSIONS=hybrid"
        } else {
            ""
        }
    );
    let language = Language::new(LANGUAGE_SEED);
    for &n in &options.docs {
        run_size(n, &options, &servers, &language).await;
    }
}
