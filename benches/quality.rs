//! Retrieval quality on real reference text: which search finds the page that answers a
//! question, on a corpus of manual pages and questions labelled with their page.
//!
//! 1. The corpus: the manual pages listed in `benches/quality/pages.txt` (one `<name>.<section>`
//!    a line), rendered from `/usr/share/man` with `man --nh --nj -P cat -l` at 100 columns
//!    (no hyphenation, no justification; backspace overstrikes and escape sequences removed).
//!    The rendered texts are kept under `.data/quality/<hash>/`, keyed by the hash of the list
//!    and of the rendering, so later runs skip rendering. A listed page missing from the machine
//!    stops the run before anything starts, naming it.
//! 2. Trove in this process (API and worker) on a fresh database of the test Postgres and its
//!    own JetStream stream, with `TROVE_EXTENSIONS=hybrid` and `TROVE_MODELS_DIR`: the seeded
//!    `default` embedding model must be `local` all-MiniLM-L6-v2 (the run stops otherwise). A
//!    pipeline through HTTP: that model, the seeded `recursive-character` splitter (1,000 /
//!    200), full-text search on, one classification (`public`), the metadata schema
//!    `{page: string}`. Every page is a document (`external_identifier` and `metadata.page` the
//!    page's name), submitted through `POST /pipelines/{id}/documents/batch` in bodies of at
//!    most 2 MiB, and the run waits until every version is `success` (a `failed` one stops it).
//! 3. The questions of `benches/quality/questions.json`
//!    (`[{"question", "kind": "plain" | "exact", "page"}]`): each is labelled with the one page
//!    that answers it; `plain` ones are asked in a user's words, `exact` ones name an option,
//!    variable, error, file or command that appears in the page. For each question, through
//!    `POST /pipelines/{id}/search`, one client, the kinds in turn: `similarity`, `search` (full
//!    text: every word of the query), and `hybrid` with `fetch_k` 5, 10, 20, 50, 100 and 200
//!    (`rrf_k` 60, both weights 1); k 30 fragments (k = `fetch_k` below 30, since a larger k
//!    raises the candidates of each list to k). Also, for information, the lexical list
//!    alone: `hybrid` with `similarity_weight` 0 (`fetch_k` 100), the fragments it did not
//!    find dropped.
//!    Each answer is reduced to its pages in result order (a page counts at its first
//!    fragment); the rank of the labelled page gives hit@5, MRR@10 and nDCG@10 (one relevant
//!    page: 1 / log2(rank + 1) within the first 10), by search and by kind of question. The
//!    searches are timed (send to last byte); the first five questions are searched once
//!    before, unmeasured.
//!
//! Printed: the corpus and ingestion figures, the table (markdown), the targets (hybrid at
//! least as good as the better single list on each kind of question, and its hit@5 over all
//! questions at least 5 points above similarity's; a miss with the 95 % interval of the
//! difference, by a paired bootstrap over the questions), how many hybrid answers order pages
//! of equal fused scores by fragment id (ids are new with each ingestion; the table also gives
//! each hybrid search's measures averaged over random orders of its answers' ties), the
//! questions where hybrid ranks the page lower than a single list does, and the command.
//!
//! Run: `TROVE_MODELS_DIR=.data/models TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo
//! bench --bench quality`. Options: `--keep` (keep the database and print its name),
//! `--database=NAME` (search the corpus a kept database holds: no ingestion; the list of pages
//! must be the same), `--fetch-k=5,10,20,50,100,200` (the hybrid searches), `--details` (every
//! question's ranks), `--wait-quiet=S` (before the searches, wait up to S seconds until other
//! work leaves the CPUs under 15 % busy; 0).

#![expect(
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a measuring tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use common::app::{self, Http, Running};
use common::measure::{load_average, pct, wait_quiet};

const PAGES: &str = "benches/quality/pages.txt";
const QUESTIONS: &str = "benches/quality/questions.json";
/// How a page is rendered; part of the cache key.
const RENDER: &str =
    "MANWIDTH=100 LC_ALL=C.UTF-8 man --nh --nj -P cat -l <file>; overstrikes and escapes removed";
const MAN_ROOT: &str = "/usr/share/man";
/// Fragments asked of every search.
const K: u64 = 30;
const FETCH_KS: [u64; 6] = [5, 10, 20, 50, 100, 200];
const RRF_K: f64 = 60.0;
/// The lexical list alone is read with this `fetch_k`.
const LEXICAL_FETCH_K: u64 = 100;
const CLASSIFICATION: &str = "public";
/// Every run uses the same, so that a kept database can be searched again.
const TROVE_SECRET: &str = "cXVhbGl0eXF1YWxpdHlxdWFsaXR5cXVhbGl0eXF1YWw=";
/// The largest request body the interface takes (2 MiB).
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
const POLL: Duration = Duration::from_millis(500);
/// Ingestion that counts no new `success` for this long has stalled (a group of 100 long
/// pages is embedded in one call).
const STALLED: Duration = Duration::from_secs(900);
/// Questions searched once before the measured pass.
const WARM_UP: usize = 5;

fn fail(message: &str) -> ! {
    eprintln!("quality bench: {message}");
    std::process::exit(1)
}

// ---- Options -----------------------------------------------------------------------------

struct Options {
    keep: bool,
    database: Option<String>,
    fetch_ks: Vec<u64>,
    details: bool,
    wait_quiet: u64,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            keep: false,
            database: None,
            fetch_ks: FETCH_KS.to_vec(),
            details: false,
            wait_quiet: 0,
        };
        for arg in std::env::args().skip(1) {
            let number = |v: &str| -> u64 {
                v.replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("{arg}: not a number")))
            };
            match arg.split_once('=') {
                Some(("--database", v)) => options.database = Some(v.to_owned()),
                Some(("--fetch-k", v)) => {
                    options.fetch_ks = v.split(',').filter(|s| !s.is_empty()).map(number).collect();
                }
                Some(("--wait-quiet", v)) => options.wait_quiet = number(v),
                _ if arg == "--keep" => options.keep = true,
                _ if arg == "--details" => options.details = true,
                _ if arg == "--bench" => {}
                _ => fail(&format!("unknown option {arg}")),
            }
        }
        options
    }

    /// The command that runs the bench with these options.
    fn command(&self) -> String {
        let mut command = "TROVE_MODELS_DIR=.data/models TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench quality".to_owned();
        let mut args = Vec::new();
        if self.fetch_ks != FETCH_KS {
            let list: Vec<String> = self.fetch_ks.iter().map(u64::to_string).collect();
            args.push(format!("--fetch-k={}", list.join(",")));
        }
        if self.wait_quiet > 0 {
            args.push(format!("--wait-quiet={}", self.wait_quiet));
        }
        if !args.is_empty() {
            let _ = write!(command, " -- {}", args.join(" "));
        }
        command
    }
}

// ---- The corpus --------------------------------------------------------------------------

struct Page {
    name: String,
    text: String,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The listed pages, and the hash of the list and of the rendering (hex).
fn page_list() -> (Vec<String>, String) {
    let path = repository().join(PAGES);
    let list = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    let pages: Vec<String> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let mut seen = HashSet::new();
    if let Some(twice) = pages.iter().find(|p| !seen.insert(p.as_str())) {
        fail(&format!("{PAGES} lists {twice} twice"));
    }
    let mut hasher = Sha256::new();
    hasher.update(RENDER.as_bytes());
    for page in &pages {
        hasher.update(b"\n");
        hasher.update(page.as_bytes());
    }
    let hash: String = hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    (pages, hash)
}

/// The file of `page` (`tar.1` → `/usr/share/man/man1/tar.1.gz`), if the machine has it.
fn man_file(page: &str) -> Option<PathBuf> {
    let section = page.rsplit_once('.')?.1.chars().next()?;
    let dir = Path::new(MAN_ROOT).join(format!("man{section}"));
    [format!("{page}.gz"), page.to_owned()]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
}

/// Plain text: overstrikes (`c\bc`, `_\bc`) and escape sequences removed; other control
/// characters than newlines and tabs refused.
fn clean(page: &str, raw: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{8}' => {
                out.pop();
            }
            '\u{1b}' => {
                // CSI: ESC [ parameters final byte.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
            }
            _ => out.push(c),
        }
    }
    let text: String = out.into_iter().collect();
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        fail(&format!(
            "{page}: the rendered text holds the control character {c:?}"
        ));
    }
    text.trim_end().to_owned() + "\n"
}

async fn render_page(page: &str, file: &Path) -> String {
    let output = tokio::process::Command::new("man")
        .args(["--nh", "--nj", "-P", "cat", "-l"])
        .arg(file)
        .env("MANWIDTH", "100")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("MAN_KEEP_FORMATTING")
        .env_remove("MANPAGER")
        .env_remove("PAGER")
        .output()
        .await
        .unwrap_or_else(|e| fail(&format!("man (needed to render the corpus): {e}")));
    if !output.status.success() {
        fail(&format!(
            "man {}: {} {}",
            file.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = clean(page, &String::from_utf8_lossy(&output.stdout));
    if text.len() < 200 {
        fail(&format!(
            "{page}: rendered to {} bytes only ({})",
            text.len(),
            file.display()
        ));
    }
    text
}

/// The corpus, rendered now or read from the cache; whether it was rendered now, and how long
/// that took.
async fn corpus(pages: &[String], hash: &str) -> (Vec<Page>, Option<Duration>) {
    let dir = repository().join(".data/quality").join(hash);
    if dir.join("complete").exists() {
        let read = pages
            .iter()
            .map(|name| {
                let path = dir.join(format!("{name}.txt"));
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
                Page {
                    name: name.clone(),
                    text,
                }
            })
            .collect();
        return (read, None);
    }
    let files: Vec<Option<PathBuf>> = pages.iter().map(|p| man_file(p)).collect();
    let missing: Vec<&str> = pages
        .iter()
        .zip(&files)
        .filter(|(_, f)| f.is_none())
        .map(|(p, _)| p.as_str())
        .collect();
    if !missing.is_empty() {
        fail(&format!(
            "{} listed page(s) missing under {MAN_ROOT}: {} (install them or remove them from {PAGES})",
            missing.len(),
            missing.join(", ")
        ));
    }
    // Two pages naming the same file would be two copies of one document.
    let mut real = HashMap::new();
    for (page, file) in pages.iter().zip(&files) {
        let file = file.as_ref().expect("checked");
        let target = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
        if let Some(other) = real.insert(target.clone(), page) {
            fail(&format!(
                "{other} and {page} are the same page ({})",
                target.display()
            ));
        }
    }
    println!(
        "rendering {} pages into {} ({RENDER})",
        pages.len(),
        dir.display()
    );
    let started = Instant::now();
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", partial.display())));
    let mut rendered = Vec::with_capacity(pages.len());
    // Two at a time.
    for pair in pages.iter().zip(&files).collect::<Vec<_>>().chunks(2) {
        let texts = futures_util::future::join_all(
            pair.iter()
                .map(|(page, file)| render_page(page, file.as_ref().expect("checked"))),
        )
        .await;
        for ((page, _), text) in pair.iter().zip(texts) {
            std::fs::write(partial.join(format!("{page}.txt")), &text).expect("cache write");
            rendered.push(Page {
                name: (*page).clone(),
                text,
            });
        }
    }
    std::fs::write(partial.join("complete"), format!("{RENDER}\n")).expect("cache write");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).expect("cache rename");
    (rendered, Some(started.elapsed()))
}

// ---- Questions ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct Question {
    question: String,
    kind: QuestionKind,
    page: String,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum QuestionKind {
    Plain,
    Exact,
}

fn questions(pages: &[String]) -> Vec<Question> {
    let path = repository().join(QUESTIONS);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    let questions: Vec<Question> =
        serde_json::from_str(&text).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    let known: HashSet<&str> = pages.iter().map(String::as_str).collect();
    let mut seen = HashSet::new();
    for q in &questions {
        if !known.contains(q.page.as_str()) {
            fail(&format!(
                "{QUESTIONS}: {:?} names {}, which {PAGES} does not list",
                q.question, q.page
            ));
        }
        if !seen.insert(q.question.as_str()) {
            fail(&format!("{QUESTIONS}: {:?} twice", q.question));
        }
    }
    questions
}

// ---- Trove -------------------------------------------------------------------------------

/// Starts Trove (API and worker, extension `hybrid`) on a new database, or on the kept
/// database `existing` with the master key its installation recorded.
async fn start(admin: &str, nats: &str, existing: Option<&str>) -> Running {
    let models = std::env::var("TROVE_MODELS_DIR").unwrap_or_else(|_| {
        fail("TROVE_MODELS_DIR is not set: the corpus is embedded with the local all-MiniLM-L6-v2 (TROVE_MODELS_DIR=.data/models)")
    });
    let database = match existing {
        Some(database) => {
            let admin_conn = PgConnection::connect(admin).await.expect("database server");
            let root = admin.rsplit_once('/').map_or(admin, |(r, _)| r);
            let url = format!("{root}/{database}");
            let mut db = PgConnection::connect(&url)
                .await
                .unwrap_or_else(|e| fail(&format!("database {database}: {e}")));
            let master: Uuid = sqlx::query_scalar("SELECT master_key_id FROM installation")
                .fetch_one(&mut db)
                .await
                .unwrap_or_else(|e| fail(&format!("database {database}: no installation ({e})")));
            db.close().await.ok();
            app::Database {
                name: database.to_owned(),
                url,
                admin: admin_conn,
                master,
            }
        }
        None => {
            let (name, url, admin) = app::create_database(admin).await;
            app::Database {
                name,
                url,
                admin,
                master: Uuid::new_v4(),
            }
        }
    };
    let variables = [
        ("TROVE_SECRET", TROVE_SECRET),
        ("TROVE_EXTENSIONS", "hybrid"),
        ("TROVE_MODELS_DIR", models.as_str()),
    ];
    app::start_on(database, nats, true, &variables).await
}

/// The seeded `default` model, which must be the local all-MiniLM-L6-v2.
async fn default_model(http: &Http) -> Value {
    let models = http
        .json(reqwest::Method::GET, "/embedding-models?name=default", None)
        .await;
    let model = models["data"][0].clone();
    if model["provider"] != "local" || model["model_name"] != "all-MiniLM-L6-v2" {
        fail(&format!(
            "the seeded embedding model `default` is {} {}, not local all-MiniLM-L6-v2: the model did not load from TROVE_MODELS_DIR={}",
            model["provider"],
            model["model_name"],
            std::env::var("TROVE_MODELS_DIR").unwrap_or_default()
        ));
    }
    model
}

fn pipeline_name(hash: &str) -> String {
    format!("quality-{hash}")
}

async fn create_pipeline(http: &Http, model: &Value, hash: &str) -> Uuid {
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
                "name": pipeline_name(hash),
                "description": format!("Manual pages of {PAGES} ({RENDER})"),
                "embedding_model_id": model["id"],
                "default_text_splitter_id": splitter["id"],
                "classifications": [CLASSIFICATION],
                "has_full_text_search": true,
                "metadata_schema": {
                    "type": "object",
                    "properties": {"page": {"type": "string"}}
                },
            })),
        )
        .await;
    pipeline["id"].as_str().expect("id").parse().expect("uuid")
}

/// The pipeline of this corpus in a kept database.
async fn find_pipeline(http: &Http, hash: &str, database: &str) -> Uuid {
    let name = pipeline_name(hash);
    let pipelines = http
        .json(
            reqwest::Method::GET,
            &format!("/pipelines?name={name}"),
            None,
        )
        .await;
    pipelines["data"][0]["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            fail(&format!(
                "database {database} holds no pipeline {name}: it was kept with another list of pages"
            ))
        })
}

/// Request bodies of at most 1,000 documents and 2 MiB.
fn batches(pages: &[Page]) -> Vec<Value> {
    let mut bodies = Vec::new();
    let mut chunk: Vec<Value> = Vec::new();
    // `{"documents":[…]}` with a comma between items.
    let mut bytes = 16;
    for page in pages {
        let item = json!({
            "external_identifier": page.name,
            "classification": CLASSIFICATION,
            "text": page.text,
            "metadata": {"page": page.name},
        });
        let size = serde_json::to_vec(&item).expect("json").len() + 1;
        assert!(
            size + 16 <= MAX_BODY_BYTES,
            "{} alone is larger than a request body",
            page.name
        );
        if !chunk.is_empty() && (chunk.len() == 1000 || bytes + size > MAX_BODY_BYTES) {
            bodies.push(json!({"documents": std::mem::take(&mut chunk)}));
            bytes = 16;
        }
        bytes += size;
        chunk.push(item);
    }
    if !chunk.is_empty() {
        bodies.push(json!({"documents": chunk}));
    }
    bodies
}

/// How many versions of the pipeline have `status`.
async fn count(http: &Http, pipeline_id: Uuid, status: &str) -> u64 {
    let page = http
        .json(
            reqwest::Method::GET,
            &format!("/pipelines/{pipeline_id}/documents?status={status}&count=true&first=0"),
            None,
        )
        .await;
    page["page_info"]["count"].as_u64().expect("count")
}

struct Ingestion {
    requests: usize,
    submitted: Duration,
    total: Duration,
}

async fn ingest(http: &Http, pipeline_id: Uuid, pages: &[Page]) -> Ingestion {
    let bodies = batches(pages);
    let path = format!("/pipelines/{pipeline_id}/documents/batch");
    let started = Instant::now();
    for body in &bodies {
        let response = http
            .request(reqwest::Method::POST, &path)
            .json(body)
            .send()
            .await
            .expect("submission");
        let status = response.status();
        if status != reqwest::StatusCode::CREATED {
            let text = response.text().await.unwrap_or_default();
            fail(&format!("{path}: {status} {text}"));
        }
    }
    let submitted = started.elapsed();
    let documents = pages.len() as u64;
    let mut progress = (0, Instant::now());
    loop {
        let done = count(http, pipeline_id, "success").await;
        if done == documents {
            break;
        }
        let failed = count(http, pipeline_id, "failed").await;
        if failed > 0 {
            fail(&format!("{failed} version(s) failed"));
        }
        if done != progress.0 {
            println!(
                "  {done} of {documents} versions success after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            progress = (done, Instant::now());
        }
        if progress.1.elapsed() > STALLED {
            fail(&format!(
                "ingestion stalled at {done} of {documents} versions success"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    Ingestion {
        requests: bodies.len(),
        submitted,
        total: started.elapsed(),
    }
}

/// Fragments and whether the vector table has its HNSW index (not deferred).
async fn stored(url: &str, pipeline_id: Uuid) -> (i64, bool) {
    let mut db = PgConnection::connect(url).await.expect("bench db");
    let fragments = sqlx::query_scalar(
        "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND expired_at IS NULL",
    )
    .bind(pipeline_id)
    .fetch_one(&mut db)
    .await
    .expect("fragments");
    let deferred: Option<bool> = sqlx::query_scalar(
        "SELECT bool_or(deferred_index_at IS NOT NULL) FROM vector_embeddings WHERE pipeline_id = $1",
    )
    .bind(pipeline_id)
    .fetch_one(&mut db)
    .await
    .ok()
    .flatten();
    db.close().await.ok();
    (fragments, !deferred.unwrap_or(false))
}

// ---- Searches ----------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Search {
    Similarity,
    FullText,
    Hybrid(u64),
    /// The lexical list of a hybrid search alone (diagnostic).
    Lexical,
}

impl Search {
    fn name(self) -> String {
        match self {
            Self::Similarity => "similarity".to_owned(),
            Self::FullText => "full text (`search`)".to_owned(),
            Self::Hybrid(f) => format!("hybrid, fetch_k {f}"),
            Self::Lexical => {
                format!(
                    "lexical list alone (hybrid, similarity_weight 0, fetch_k {LEXICAL_FETCH_K})"
                )
            }
        }
    }

    fn body(self, question: &str) -> Value {
        let (kind, params) = match self {
            Self::Similarity => ("similarity", json!({"k": K})),
            Self::FullText => ("search", json!({"k": K})),
            Self::Hybrid(f) => (
                "hybrid",
                json!({"k": K.min(f), "fetch_k": f, "rrf_k": RRF_K,
                       "similarity_weight": 1.0, "full_text_weight": 1.0}),
            ),
            Self::Lexical => (
                "hybrid",
                json!({"k": K, "fetch_k": LEXICAL_FETCH_K, "rrf_k": RRF_K,
                       "similarity_weight": 0.0, "full_text_weight": 1.0}),
            ),
        };
        json!({
            "query": question,
            "type": kind,
            "classification": CLASSIFICATION,
            "params": params,
        })
    }
}

/// One search: its time (send to last byte) and its fragments in result order (for the
/// lexical list alone, those it found).
async fn search(http: &Http, path: &str, search: Search, question: &str) -> (Duration, Vec<Hit>) {
    let request = http
        .request(reqwest::Method::POST, path)
        .json(&search.body(question))
        .build()
        .expect("request");
    let started = Instant::now();
    let response = http.client.execute(request).await.expect("search");
    let status = response.status();
    let bytes = response.bytes().await.expect("search body");
    let elapsed = started.elapsed();
    if !status.is_success() {
        fail(&format!(
            "{} search for {question:?}: {status} {}",
            search.name(),
            String::from_utf8_lossy(&bytes)
        ));
    }
    let hits: Vec<Value> = serde_json::from_slice(&bytes).expect("search json");
    let hits = hits
        .iter()
        .filter(|hit| search != Search::Lexical || !hit["full_text_rank"].is_null())
        .map(|hit| Hit {
            page: hit["metadata"]["page"]
                .as_str()
                .expect("metadata.page")
                .to_owned(),
            score: hit["score"].as_f64().expect("score"),
        })
        .collect();
    (elapsed, hits)
}

/// A fragment of an answer: its page and score.
struct Hit {
    page: String,
    score: f64,
}

/// The rank (from 1) of `page` among the pages of an answer's fragments, each page at its first
/// fragment.
fn page_rank<'a>(hits: impl IntoIterator<Item = &'a Hit>, page: &str) -> Option<usize> {
    let mut pages: Vec<&str> = Vec::new();
    for hit in hits {
        if !pages.contains(&hit.page.as_str()) {
            pages.push(&hit.page);
        }
    }
    pages.iter().position(|p| *p == page).map(|r| r + 1)
}

/// Whether two neighbours among an answer's first 10 fragments have the same score and
/// different pages: their order (by fragment id, new with each ingestion) decides the pages'
/// ranks.
fn tied(hits: &[Hit]) -> bool {
    hits[..hits.len().min(10)]
        .windows(2)
        .any(|w| w[0].score == w[1].score && w[0].page != w[1].page)
}

/// What one search kind found for every question.
struct Measured {
    search: Search,
    /// The labelled page's rank among the pages of each question's answer (from 1).
    ranks: Vec<Option<usize>>,
    /// Each answer's fragments.
    hits: Vec<Vec<Hit>>,
    times: Vec<Duration>,
}

async fn measure(
    http: &Http,
    pipeline_id: Uuid,
    questions: &[Question],
    searches: &[Search],
) -> Vec<Measured> {
    let path = format!("/pipelines/{pipeline_id}/search");
    for q in questions.iter().take(WARM_UP) {
        for &s in searches {
            search(http, &path, s, &q.question).await;
        }
    }
    let mut measured: Vec<Measured> = searches
        .iter()
        .map(|&search| Measured {
            search,
            ranks: Vec::with_capacity(questions.len()),
            hits: Vec::with_capacity(questions.len()),
            times: Vec::with_capacity(questions.len()),
        })
        .collect();
    for (i, q) in questions.iter().enumerate() {
        // The kinds in turn, starting from another one at each question.
        for step in 0..searches.len() {
            let m = &mut measured[(i + step) % searches.len()];
            let (elapsed, hits) = search(http, &path, m.search, &q.question).await;
            m.ranks.push(page_rank(&hits, &q.page));
            m.hits.push(hits);
            m.times.push(elapsed);
        }
    }
    measured
}

// ---- Metrics -----------------------------------------------------------------------------

#[derive(Clone, Copy, Default)]
struct Scores {
    hit5: f64,
    mrr10: f64,
    ndcg10: f64,
}

/// One question's hit@5, reciprocal rank within 10 and nDCG@10 (one relevant page).
fn question_scores(rank: Option<usize>) -> Scores {
    match rank {
        Some(r) if r <= 10 => Scores {
            hit5: f64::from(u8::from(r <= 5)),
            mrr10: 1.0 / r as f64,
            ndcg10: 1.0 / (r as f64 + 1.0).log2(),
        },
        _ => Scores::default(),
    }
}

/// The mean of each measure (0 for none).
fn mean(scores: impl IntoIterator<Item = Scores>) -> Scores {
    let (mut sum, mut n) = (Scores::default(), 0_usize);
    for s in scores {
        sum.hit5 += s.hit5;
        sum.mrr10 += s.mrr10;
        sum.ndcg10 += s.ndcg10;
        n += 1;
    }
    let n = n.max(1) as f64;
    Scores {
        hit5: sum.hit5 / n,
        mrr10: sum.mrr10 / n,
        ndcg10: sum.ndcg10 / n,
    }
}

fn scores(ranks: &[Option<usize>]) -> Scores {
    mean(ranks.iter().map(|r| question_scores(*r)))
}

/// Resamples of the questions drawn for [`difference_interval`].
const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// The 95 % interval of the mean of paired differences (one a question: a hybrid search's
/// measure minus a single list's), by a bootstrap over the questions with a fixed seed, so
/// that a run prints the same interval for the same ranks. An interval that holds 0 says the
/// questions cannot tell the two searches apart on that measure.
fn difference_interval(differences: &[f64]) -> (f64, f64) {
    if differences.is_empty() {
        return (0.0, 0.0);
    }
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let n = differences.len();
    let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            (0..n)
                .map(|_| differences[rng.random_range(0..n)])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((BOOTSTRAP_RESAMPLES - 1) as f64 * q).round() as usize];
    (at(0.025), at(0.975))
}

/// The question classes of the table: plain, exact, all.
const CLASSES: [(&str, Option<QuestionKind>); 3] = [
    ("plain", Some(QuestionKind::Plain)),
    ("exact", Some(QuestionKind::Exact)),
    ("all", None),
];

/// One of a question's or a search's [`Scores`].
type Measure = fn(Scores) -> f64;

/// The measures the targets compare, by name.
const MEASURES: [(&str, Measure); 3] = [
    ("hit@5", |s| s.hit5),
    ("MRR@10", |s| s.mrr10),
    ("nDCG@10", |s| s.ndcg10),
];

fn class_scores(m: &Measured, questions: &[Question]) -> [Scores; 3] {
    class_scores_of(&m.ranks, questions)
}

/// The scores of each class, from each question's rank of its page.
fn class_scores_of(ranks: &[Option<usize>], questions: &[Question]) -> [Scores; 3] {
    CLASSES.map(|(_, kind)| {
        let ranks: Vec<Option<usize>> = ranks
            .iter()
            .zip(questions)
            .filter(|(_, q)| kind.is_none_or(|k| q.kind == k))
            .map(|(r, _)| *r)
            .collect();
        scores(&ranks)
    })
}

/// Orders of the tied fragments drawn for [`tie_averaged_scores`].
const TIE_ORDERS: usize = 200;

/// A search's scores with each run of fragments of equal scores in a random order, the mean
/// over [`TIE_ORDERS`] orders (seeded): what a hybrid search gives on average over
/// ingestions, whose new fragment ids order its ties.
fn tie_averaged_scores(m: &Measured, questions: &[Question]) -> [Scores; 3] {
    let mut rng = SmallRng::seed_from_u64(0x71e5);
    let mut orders = Vec::with_capacity(TIE_ORDERS);
    for _ in 0..TIE_ORDERS {
        let ranks: Vec<Option<usize>> = m
            .hits
            .iter()
            .zip(questions)
            .map(|(hits, q)| {
                let mut order: Vec<&Hit> = hits.iter().collect();
                for run in order.chunk_by_mut(|a, b| a.score == b.score) {
                    run.shuffle(&mut rng);
                }
                page_rank(order, &q.page)
            })
            .collect();
        orders.push(class_scores_of(&ranks, questions));
    }
    [0, 1, 2].map(|c| mean(orders.iter().map(|o| o[c])))
}

fn rank_text(rank: Option<usize>) -> String {
    rank.map_or("–".to_owned(), |r| r.to_string())
}

fn print_table(measured: &[Measured], questions: &[Question]) {
    let counts = CLASSES.map(|(_, kind)| {
        questions
            .iter()
            .filter(|q| kind.is_none_or(|k| q.kind == k))
            .count()
    });
    println!(
        "\n| search | plain ({}): hit@5 | MRR@10 | nDCG@10 | exact ({}): hit@5 | MRR@10 | nDCG@10 | all ({}): hit@5 | MRR@10 | nDCG@10 | p50 ms |",
        counts[0], counts[1], counts[2]
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for m in measured {
        let mut row = format!("| {} |", m.search.name());
        for s in class_scores(m, questions) {
            let _ = write!(row, " {:.2} | {:.3} | {:.3} |", s.hit5, s.mrr10, s.ndcg10);
        }
        let _ = write!(row, " {:.1} |", pct(&m.times, 50.0));
        println!("{row}");
    }
    for m in measured {
        if let Search::Hybrid(_) = m.search {
            let mut row = format!(
                "| {}, equal scores in random order (mean of {TIE_ORDERS} orders) |",
                m.search.name()
            );
            for s in tie_averaged_scores(m, questions) {
                let _ = write!(row, " {:.2} | {:.3} | {:.3} |", s.hit5, s.mrr10, s.ndcg10);
            }
            println!("{row} – |");
        }
    }
}

/// The targets: hybrid (each `fetch_k`) against the better single list on every class and
/// measure, and hybrid's hit@5 over all questions against similarity's.
fn print_targets(measured: &[Measured], questions: &[Question]) {
    let by = |s: Search| measured.iter().find(|m| m.search == s);
    let (Some(similarity), Some(full_text)) = (by(Search::Similarity), by(Search::FullText)) else {
        return;
    };
    let singles = [similarity, full_text];
    let single = singles.map(|m| class_scores(m, questions));
    println!("\ntargets:");
    let mut best: Option<(u64, f64)> = None;
    for m in measured {
        let Search::Hybrid(f) = m.search else {
            continue;
        };
        let hybrid = class_scores(m, questions);
        let mut misses = Vec::new();
        for (c, (class, kind)) in CLASSES.iter().enumerate() {
            for (name, measure) in MEASURES {
                let (h, s) = (
                    measure(hybrid[c]),
                    [measure(single[0][c]), measure(single[1][c])],
                );
                let better = usize::from(s[1] > s[0]);
                if h + 1e-9 >= s[better] {
                    continue;
                }
                let differences: Vec<f64> = questions
                    .iter()
                    .enumerate()
                    .filter(|(_, q)| kind.is_none_or(|k| q.kind == k))
                    .map(|(i, _)| {
                        measure(question_scores(m.ranks[i]))
                            - measure(question_scores(singles[better].ranks[i]))
                    })
                    .collect();
                let (low, high) = difference_interval(&differences);
                misses.push(format!(
                    "{class} {name} {h:.3} < {:.3}, difference's 95 % interval {low:+.3} to {high:+.3}",
                    s[better]
                ));
            }
        }
        let gain = (hybrid[2].hit5 - single[0][2].hit5) * 100.0;
        println!(
            "  hybrid fetch_k {f}: at least the better single list on every kind of question: {}; hit@5 over all {:+.1} points over similarity (target +5): {}",
            if misses.is_empty() {
                "met".to_owned()
            } else {
                format!("MISSED ({})", misses.join("; "))
            },
            gain,
            if gain >= 5.0 - 1e-9 { "met" } else { "MISSED" }
        );
        let overall = hybrid[2].ndcg10;
        if best.is_none_or(|(_, b)| overall > b + 1e-12) {
            best = Some((f, overall));
        }
    }
    if let Some((f, ndcg)) = best {
        println!("  best hybrid over all questions (nDCG@10): fetch_k {f} ({ndcg:.3})");
    }
}

/// Questions where a hybrid search ranks the page lower than a single list, the full-text
/// lists that came back empty, and (with `details`) every question's ranks.
fn print_diagnostics(measured: &[Measured], questions: &[Question], details: bool) {
    let by = |s: Search| measured.iter().find(|m| m.search == s);
    let Some(full_text) = by(Search::FullText) else {
        return;
    };
    for (class, kind) in CLASSES {
        let (mut empty, mut n) = (0, 0);
        for (q, hits) in questions.iter().zip(&full_text.hits) {
            if kind.is_none_or(|k| q.kind == k) {
                n += 1;
                empty += usize::from(hits.is_empty());
            }
        }
        println!("full-text answers with no fragment, {class}: {empty} of {n}");
    }
    let tie_counts: Vec<String> = measured
        .iter()
        .filter(|m| matches!(m.search, Search::Hybrid(_)))
        .map(|m| {
            let n = m.hits.iter().filter(|h| tied(h)).count();
            format!("{} {n}", m.search.name())
        })
        .collect();
    println!(
        "answers of {} questions whose first 10 fragments hold equal scores of different pages (ordered by fragment id): {}",
        questions.len(),
        tie_counts.join(", ")
    );
    let header: Vec<String> = measured.iter().map(|m| m.search.name()).collect();
    let hybrids: Vec<&Measured> = measured
        .iter()
        .filter(|m| matches!(m.search, Search::Hybrid(_)))
        .collect();
    let singles: Vec<&Measured> = measured
        .iter()
        .filter(|m| matches!(m.search, Search::Similarity | Search::FullText))
        .collect();
    let position = |r: Option<usize>| r.unwrap_or(usize::MAX);
    println!(
        "\nranks of the labelled page (– not among the answer's pages), in the order: {}",
        header.join("; ")
    );
    println!("questions where a hybrid search ranks the page lower than the better single list:");
    for (i, q) in questions.iter().enumerate() {
        let better = singles
            .iter()
            .map(|m| position(m.ranks[i]))
            .min()
            .unwrap_or(usize::MAX);
        let worse = hybrids.iter().any(|m| position(m.ranks[i]) > better);
        if worse || details {
            let ranks: Vec<String> = measured.iter().map(|m| rank_text(m.ranks[i])).collect();
            println!(
                "  {}{} [{}] {:?} → {}: {}",
                if worse && details { "* " } else { "" },
                match q.kind {
                    QuestionKind::Plain => "plain",
                    QuestionKind::Exact => "exact",
                },
                i,
                q.question,
                q.page,
                ranks.join(" ")
            );
        }
    }
}

// ---- Main --------------------------------------------------------------------------------

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
    let started = Instant::now();
    let (pages, hash) = page_list();
    let questions = questions(&pages);
    let (corpus, rendering) = corpus(&pages, &hash).await;
    let bytes: usize = corpus.iter().map(|p| p.text.len()).sum();
    let servers = app::servers();
    println!(
        "quality bench: {} pages ({:.1} MB of text, {}), {} questions ({} plain, {} exact); {} cores, load average {}; {}",
        corpus.len(),
        bytes as f64 / 1e6,
        rendering.map_or("rendered text from the cache".to_owned(), |d| format!(
            "rendered in {:.0} s",
            d.as_secs_f64()
        )),
        questions.len(),
        questions
            .iter()
            .filter(|q| q.kind == QuestionKind::Plain)
            .count(),
        questions
            .iter()
            .filter(|q| q.kind == QuestionKind::Exact)
            .count(),
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average(),
        app::postgres_memory(&servers.0).await
    );

    let trove = start(&servers.0, &servers.1, options.database.as_deref()).await;
    let model = default_model(&trove.http).await;
    let pipeline_id = match &options.database {
        Some(database) => {
            let pipeline_id = find_pipeline(&trove.http, &hash, database).await;
            let success = count(&trove.http, pipeline_id, "success").await;
            if success != corpus.len() as u64 {
                fail(&format!(
                    "database {database}: {success} versions success, not {}",
                    corpus.len()
                ));
            }
            pipeline_id
        }
        None => {
            let pipeline_id = create_pipeline(&trove.http, &model, &hash).await;
            println!(
                "ingesting {} pages with local all-MiniLM-L6-v2 (load average {})",
                corpus.len(),
                load_average()
            );
            let ingestion = ingest(&trove.http, pipeline_id, &corpus).await;
            println!(
                "ingestion: {} batch requests submitted in {:.1} s; every version success {:.0} s after the first request",
                ingestion.requests,
                ingestion.submitted.as_secs_f64(),
                ingestion.total.as_secs_f64()
            );
            pipeline_id
        }
    };
    let (fragments, indexed) = stored(&trove.url, pipeline_id).await;
    println!(
        "{fragments} fragments; HNSW index {}",
        if indexed {
            "present"
        } else {
            "deferred (exact searches)"
        }
    );

    let mut searches = vec![Search::Similarity, Search::FullText];
    searches.extend(options.fetch_ks.iter().map(|&f| Search::Hybrid(f)));
    searches.push(Search::Lexical);
    wait_quiet(options.wait_quiet).await;
    let searching = Instant::now();
    let measured = measure(&trove.http, pipeline_id, &questions, &searches).await;
    println!(
        "\n{} searches in {:.1} s (load average {})",
        questions.len() * searches.len(),
        searching.elapsed().as_secs_f64(),
        load_average()
    );
    print_table(&measured, &questions);
    print_targets(&measured, &questions);
    println!();
    print_diagnostics(&measured, &questions, options.details);
    println!(
        "\n{} · {} in all · {}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        format_args!("{:.0} s", started.elapsed().as_secs_f64()),
        options.command()
    );
    let keep = options.keep || options.database.is_some();
    let database = trove.database.clone();
    trove.stop(keep).await;
    if keep {
        println!("search it again with `cargo bench --bench quality -- --database={database}`");
    }
}
