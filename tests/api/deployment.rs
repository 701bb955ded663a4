//! Several processes at once, as deployed (docs/deployment.md): a Postgres primary with a
//! streaming replica, a three-node JetStream cluster (stream replicas 3), two `trove serve`
//! (worker off) and two `trove worker`, all started on loopback from the installed binaries.
//! The load goes through both API processes while a NATS server and a worker are killed and
//! started again.
//!
//! `TROVE_CLUSTER_SUBMISSIONS` sets the number of submissions (default 200),
//! `TROVE_CLUSTER_SEARCHES` the searches of each throughput run (default 100) and
//! `TROVE_CLUSTER_BIN` the `trove` binary (default: this build's). `scripts/cluster-test`
//! runs 2,000 submissions against a release binary; the figures are printed on a line starting
//! `cluster figures:`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

use crate::helpers::{MASTER_SECRET, Reply, eventually, free_port, metric_value};
use crate::nats_cluster::{Cluster, leader};
use crate::postgres::PgServer;

/// The database of the cluster, on the primary and (replicated) on the standby.
const DATABASE: &str = "trove";

/// Paragraphs of each shape of document: one fragment, then several (the seeded
/// `recursive-character` splitter cuts at 1,000 characters).
const SHAPES: [usize; 4] = [1, 20, 40, 70];

/// Submissions in flight at once, spread over the two API processes.
const CONCURRENCY: usize = 16;

/// A whole number from the environment, or `default`.
fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: {v:?}")))
        .unwrap_or(default)
}

/// A folder under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("trove-{what}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temporary folder");
        Self(dir)
    }
}

impl Drop for TempDir {
    /// Removes the folder, unless the test failed: its logs are then kept for reading.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for its logs: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Trove processes.
// ---------------------------------------------------------------------------------------------

/// The `trove` binary: `TROVE_CLUSTER_BIN`, else this build's.
fn trove_bin() -> PathBuf {
    std::env::var("TROVE_CLUSTER_BIN").map_or_else(
        |_| PathBuf::from(env!("CARGO_BIN_EXE_trove")),
        PathBuf::from,
    )
}

/// One `trove serve` or `trove worker` process, its standard error appended to a log file.
/// Dropping it kills it.
struct Trove {
    name: String,
    command: &'static str,
    env: Vec<(String, String)>,
    dir: PathBuf,
    process: Option<Child>,
}

impl Trove {
    fn new(name: &str, command: &'static str, env: Vec<(String, String)>, dir: &Path) -> Self {
        let mut trove = Self {
            name: name.to_owned(),
            command,
            env,
            dir: dir.to_owned(),
            process: None,
        };
        trove.spawn();
        trove
    }

    /// Starts the process with its own environment only (no `TROVE_*` of the tests' own, no
    /// `.env`: it runs in the temporary folder).
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", self.name)))
            .expect("log file");
        let mut command = Command::new(trove_bin());
        for (name, _) in std::env::vars() {
            if name.starts_with("TROVE_") {
                command.env_remove(name);
            }
        }
        let child = command
            .arg(self.command)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", trove_bin().display()));
        self.process = Some(child);
    }

    /// Kills the process (SIGKILL: nothing finished, nothing acknowledged).
    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The peak resident memory of the running process (`VmHWM`), in MiB.
    fn peak_rss_mib(&self) -> f64 {
        let pid = self.process.as_ref().map_or(0, Child::id);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    }

    /// The process's log so far (for failure messages).
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("{}.log", self.name)))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Trove {
    fn drop(&mut self) {
        // A failed test shows what each process logged last.
        if std::thread::panicking() {
            eprintln!(
                "---- {} (its last log lines) ----\n{}",
                self.name,
                self.log_tail()
            );
        }
        self.kill();
    }
}

/// Waits until `GET url` answers 200 (the process is up), failing with its log otherwise.
async fn wait_up(http: &reqwest::Client, url: &str, trove: &mut Trove) {
    let started = Instant::now();
    loop {
        if let Ok(reply) = http.get(url).send().await
            && reply.status() == StatusCode::OK
        {
            return;
        }
        if let Some(Ok(Some(status))) = trove.process.as_mut().map(Child::try_wait) {
            panic!("{} exited ({status}): {}", trove.name, trove.log_tail());
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} not up after 60 s: {}",
            trove.name,
            trove.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An API process reached over HTTP with the master key.
#[derive(Clone)]
struct Api {
    base: String,
    master: (String, String),
    http: reqwest::Client,
}

impl Api {
    fn req(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.master.0)
            .header("x-api-key-secret", &self.master.1)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        Reply::read(request.send().await.expect("request sent")).await
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(self.req(Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(self.req(Method::POST, path).json(body)).await
    }

    /// The sum of the values of metric `name` in an exposition at `url` (0 when absent).
    async fn metric_at(http: &reqwest::Client, url: &str, name: &str) -> f64 {
        let reply = Reply::read(http.get(url).send().await.expect("metrics")).await;
        assert_eq!(reply.status, StatusCode::OK, "{url}: {}", reply.text);
        metric_value(&reply.text, name).unwrap_or(0.0)
    }

    async fn metric(&self, name: &str) -> f64 {
        Self::metric_at(&self.http, &format!("{}/metrics", self.base), name).await
    }
}

// ---------------------------------------------------------------------------------------------
// The documents.
// ---------------------------------------------------------------------------------------------

/// The text of document `i`: `SHAPES[i % 4]` paragraphs of the same length whatever `i`, so
/// that every document of a shape splits into the same number of fragments.
fn text_of(i: usize) -> String {
    (0..SHAPES[i % SHAPES.len()])
        .map(|p| {
            format!(
                "Document {i:06} paragraph {p:03} on topic {:02}, a few more words to fill it.",
                i % 50
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The submission body of document `i`.
fn document(i: usize) -> Value {
    json!({
        "external_identifier": format!("doc-{i:06}"),
        "classification": "public",
        "text": text_of(i),
    })
}

/// What the load saw: versions answered 201, and the submissions answered
/// 500 `NATS error` (sent again until accepted).
#[derive(Default)]
struct Load {
    accepted: Vec<(Uuid, i64)>,
    nats_errors: usize,
}

/// Submits documents `0..n` through the APIs in turn, `CONCURRENCY` at once; a submission
/// answered 500 `NATS error` (a NATS server gone, leaders being elected) is sent again after
/// 100 ms. `done` counts the documents accepted.
async fn submit_all(apis: &[Api], pid: &str, n: usize, done: &AtomicUsize) -> Load {
    let path = format!("/pipelines/{pid}/documents");
    let results: Vec<(Uuid, i64, usize)> = futures_util::stream::iter(0..n)
        .map(|i| {
            let api = &apis[i % apis.len()];
            let path = &path;
            async move {
                let body = document(i);
                let mut errors = 0;
                loop {
                    let reply = api.post(path, &body).await;
                    if reply.status == StatusCode::CREATED {
                        done.fetch_add(1, Ordering::Relaxed);
                        let id =
                            Uuid::parse_str(reply.body["id"].as_str().expect("id")).expect("uuid");
                        let version = reply.body["version"].as_i64().expect("version");
                        return (id, version, errors);
                    }
                    assert_eq!(
                        (reply.status, reply.message()),
                        (StatusCode::INTERNAL_SERVER_ERROR, "NATS error"),
                        "doc {i}: {}",
                        reply.text
                    );
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    Load {
        accepted: results.iter().map(|(id, v, _)| (*id, *v)).collect(),
        nats_errors: results.iter().map(|(_, _, e)| e).sum(),
    }
}

/// Waits until `done` reaches `count`.
async fn reached(done: &AtomicUsize, count: usize) {
    while done.load(Ordering::Relaxed) < count {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(status, fragments, distinct order ids, largest order id + 1)` of every version of the
/// pipeline, by external identifier.
async fn versions(pool: &PgPool, pid: Uuid) -> Vec<(String, String, i64, i64, i64)> {
    sqlx::query_as(
        "SELECT d.external_identifier, d.status, count(f.id), count(DISTINCT f.order_id),
                coalesce(max(f.order_id) + 1, 0)::bigint
         FROM documents d LEFT JOIN fragments f
           ON f.document_id = d.id AND f.version = d.version
         WHERE d.pipeline_id = $1
         GROUP BY d.id, d.version, d.external_identifier, d.status",
    )
    .bind(pid)
    .fetch_all(pool)
    .await
    .expect("versions")
}

/// Versions of the pipeline that are `success`.
async fn successes(pool: &PgPool, pid: Uuid) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM documents WHERE pipeline_id = $1 AND status = 'success'",
    )
    .bind(pid)
    .fetch_one(pool)
    .await
    .expect("count")
}

/// `count` searches, `CONCURRENCY / 2` at once, through the APIs in turn; searches per second.
async fn search_rate(apis: &[Api], pid: &str, count: usize) -> f64 {
    let started = Instant::now();
    let path = format!("/pipelines/{pid}/search");
    futures_util::stream::iter(0..count)
        .map(|i| {
            let api = &apis[i % apis.len()];
            let path = &path;
            async move {
                let reply = api.post(path, &search_body(i)).await;
                assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            }
        })
        .buffer_unordered(CONCURRENCY / 2)
        .collect::<Vec<()>>()
        .await;
    count as f64 / started.elapsed().as_secs_f64()
}

fn search_body(i: usize) -> Value {
    json!({
        "query": format!("paragraph {:03} on topic {:02}", i % 55, i % 50),
        "type": "similarity",
        "classification": "public",
        "params": {"k": 10},
    })
}

// ---------------------------------------------------------------------------------------------
// The test.
// ---------------------------------------------------------------------------------------------

/// Two API processes and two workers on a JetStream cluster and a Postgres primary with a
/// replica. Submissions through both APIs while the server leading the stream is killed and
/// started again, and a worker killed and started again: every version answered 201 ends
/// `success` once, with the fragments of a fault-free run of its text; searches through both
/// APIs (reading the replica) answer what an API on the primary alone answers; an MCP session
/// of one API is unknown to the other.
/// Asserts that two search answers are the same up to the order of equal scores: the same
/// scores in order, the same fragments (whole results) at each score, and at the last score,
/// which the `k` cut may split among fragments at the same distance, as many of them.
fn assert_same_answer(got: &Value, want: &Value, what: &str) {
    let results = |answer: &Value| -> Vec<(String, Value)> {
        answer
            .as_array()
            .expect("an array of results")
            .iter()
            .map(|r| (r["score"].to_string(), r.clone()))
            .collect()
    };
    let (got, want) = (results(got), results(want));
    let scores = |rs: &[(String, Value)]| rs.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>();
    assert_eq!(scores(&got), scores(&want), "{what}: scores");
    let last = want.last().map(|(s, _)| s.clone());
    let above_last = |rs: &[(String, Value)]| {
        let mut kept: Vec<String> = rs
            .iter()
            .filter(|(s, _)| Some(s) != last.as_ref())
            .map(|(_, r)| r.to_string())
            .collect();
        kept.sort();
        kept
    };
    assert_eq!(above_last(&got), above_last(&want), "{what}: results");
}

/// The replicas of `stream` as its leader reports them.
async fn stream_replicas(js: &async_nats::jetstream::Context, stream: &str) -> usize {
    js.get_stream(stream)
        .await
        .expect("stream")
        .get_info()
        .await
        .expect("stream info")
        .config
        .num_replicas
}

#[tokio::test]
async fn two_apis_two_workers_survive_a_dead_nats_server_and_a_dead_worker() {
    let n = setting("TROVE_CLUSTER_SUBMISSIONS", 200);
    let searches = setting("TROVE_CLUSTER_SEARCHES", 100);
    let http = reqwest::Client::new();

    let primary_server = PgServer::primary();
    let standby_server = PgServer::standby_of(&primary_server);
    let mut admin = PgConnection::connect(&primary_server.url("postgres"))
        .await
        .expect("primary reachable");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
        .execute(&mut admin)
        .await
        .expect("create database");
    admin.close().await.ok();
    let mut nats = Cluster::start().await;
    let logs = TempDir::new("cluster-logs");

    let master_id = Uuid::new_v4().to_string();
    let nats_urls = nats.all_urls();
    let common = |extra: &[(&str, String)]| -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("TROVE_DATABASE_URL", primary_server.url(DATABASE)),
            ("TROVE_NATS_URL", nats_urls.clone()),
            ("TROVE_QUEUE_REPLICAS", "3".to_owned()),
            ("TROVE_QUEUE_ACK_WAIT", "5".to_owned()),
            ("TROVE_MASTER_KEY_ID", master_id.clone()),
            ("TROVE_MASTER_KEY_SECRET", MASTER_SECRET.to_owned()),
            (
                "TROVE_SECRET",
                "dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=".to_owned(),
            ),
            ("TROVE_LOG", "info,sqlx=warn".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        env
    };
    let serve_env = |port: u16, read_url: Option<String>| {
        let mut extra = vec![
            ("TROVE_LISTEN", format!("127.0.0.1:{port}")),
            ("TROVE_WORKER", "false".to_owned()),
            ("TROVE_WORKER_METRICS_LISTEN", "off".to_owned()),
        ];
        if let Some(url) = read_url {
            extra.push(("TROVE_DATABASE_READ_URL", url));
        }
        common(&extra)
    };
    let api_of = |port: u16| Api {
        base: format!("http://127.0.0.1:{port}"),
        master: (master_id.clone(), MASTER_SECRET.to_owned()),
        http: http.clone(),
    };

    // The first API process migrates and installs; the others start on a current schema.
    let ports = [free_port(), free_port(), free_port()];
    let mut serves = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        // The third reads the primary only: the reference of the searches.
        let read_url = (i < 2).then(|| standby_server.url(DATABASE));
        let name = if i < 2 {
            format!("serve{}", i + 1)
        } else {
            "serve-primary".to_owned()
        };
        let mut serve = Trove::new(&name, "serve", serve_env(*port, read_url), &logs.0);
        wait_up(
            &http,
            &format!("http://127.0.0.1:{port}/healthz"),
            &mut serve,
        )
        .await;
        serves.push(serve);
    }
    let apis = [api_of(ports[0]), api_of(ports[1])];
    let reference = api_of(ports[2]);
    let worker_ports = [free_port(), free_port()];
    let mut workers = Vec::new();
    for (i, port) in worker_ports.iter().enumerate() {
        let env = common(&[("TROVE_WORKER_METRICS_LISTEN", format!("127.0.0.1:{port}"))]);
        let mut worker = Trove::new(&format!("worker{}", i + 1), "worker", env, &logs.0);
        wait_up(
            &http,
            &format!("http://127.0.0.1:{port}/metrics"),
            &mut worker,
        )
        .await;
        workers.push(worker);
    }
    let primary = PgPool::connect(&primary_server.url(DATABASE))
        .await
        .expect("primary pool");
    let standby = PgPool::connect(&standby_server.url(DATABASE))
        .await
        .expect("standby pool");

    // The stream, made by the first API process, has three replicas.
    let js = nats.jetstream().await;
    let stream = "TROVE_DOCUMENTS";
    assert_eq!(stream_replicas(&js, stream).await, 3);

    // A `hash` model (384 dimensions) and two pipelines on it: one for the fault-free run of
    // each shape, one for the load.
    let reply = apis[0]
        .post(
            "/embedding-models",
            &json!({"name": "hash-384", "provider": "hash", "model_name": "feature-hash",
                    "parameters": {"dimensions": 384}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let model = reply.body["id"].as_str().expect("model id").to_owned();
    let splitters = apis[1]
        .get("/text-splitters?name=recursive-character")
        .await;
    assert_eq!(splitters.status, StatusCode::OK, "{}", splitters.text);
    let splitter = splitters.body["data"][0]["id"]
        .as_str()
        .expect("seeded splitter")
        .to_owned();
    let mut pipelines = Vec::new();
    for (i, name) in ["fault-free", "load"].into_iter().enumerate() {
        let reply = apis[i]
            .post(
                "/pipelines",
                &json!({"name": name, "embedding_model_id": model,
                        "default_text_splitter_id": splitter, "classifications": ["public"]}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        pipelines.push(reply.body["id"].as_str().expect("pipeline id").to_owned());
    }
    let (fault_free, pid) = (pipelines[0].clone(), pipelines[1].clone());
    let fault_free_id = Uuid::parse_str(&fault_free).expect("uuid");
    let pipeline = Uuid::parse_str(&pid).expect("uuid");

    // The fault-free run: one document of each shape.
    let done = AtomicUsize::new(0);
    submit_all(&apis, &fault_free, SHAPES.len(), &done).await;
    eventually(
        "the fault-free documents processed",
        Duration::from_secs(60),
        || async {
            (successes(&primary, fault_free_id).await == SHAPES.len() as i64).then_some(())
        },
    )
    .await;
    let mut expected: HashMap<usize, i64> = HashMap::new();
    for (external, status, count, distinct, span) in versions(&primary, fault_free_id).await {
        assert_eq!(status, "success");
        assert_eq!((distinct, span), (count, count), "one set of fragments");
        let i: usize = external["doc-".len()..].parse().expect("index");
        expected.insert(i % SHAPES.len(), count);
    }
    assert_eq!(expected.len(), SHAPES.len());
    assert!(
        (1..SHAPES.len()).all(|s| expected[&s] > expected[&(s - 1)]),
        "shapes of more and more fragments: {expected:?}"
    );

    let added_before = apis[0].metric("service_document_queue_added").await
        + apis[1].metric("service_document_queue_added").await;

    // The load, and meanwhile the faults: the server leading the stream killed once a fifth of
    // the submissions are accepted and started again once 3 s have passed and two fifths are;
    // a worker killed at half and started again once 3 s have passed and seven tenths are.
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    let mut timeline: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut success_before_kill = 0.0;
    let (load, ()) = tokio::join!(submit_all(&apis, &pid, n, &done), async {
        reached(&done, n / 5).await;
        let victim = eventually("a stream leader", Duration::from_secs(20), || {
            leader(&js, stream, None)
        })
        .await;
        nats.kill(&victim);
        timeline.insert("nats_killed", started.elapsed());
        tokio::time::sleep(Duration::from_secs(3)).await;
        reached(&done, 2 * n / 5).await;
        nats.restart(&victim);
        timeline.insert("nats_restarted", started.elapsed());
        reached(&done, n / 2).await;
        let url = format!("http://127.0.0.1:{}/metrics", worker_ports[0]);
        success_before_kill = Api::metric_at(&http, &url, "service_document_queue_success").await;
        workers[0].kill();
        timeline.insert("worker_killed", started.elapsed());
        tokio::time::sleep(Duration::from_secs(3)).await;
        reached(&done, 7 * n / 10).await;
        workers[0].spawn();
        timeline.insert("worker_restarted", started.elapsed());
        // Up before its counts are read at the end (under load, the other worker may drain
        // the queue before this one listens).
        wait_up(&http, &url, &mut workers[0]).await;
    });
    let submitted = started.elapsed();
    assert_eq!(load.accepted.len(), n);
    nats.wait_ready().await;

    // Every version answered 201 ends `success`.
    let drain_timeout = Duration::from_secs(120 + n as u64 / 10);
    eventually(&format!("{n} versions success"), drain_timeout, || async {
        let done = successes(&primary, pipeline).await;
        assert!(done <= n as i64, "{done} versions success, {n} accepted");
        (done == n as i64).then_some(())
    })
    .await;
    let drained = started.elapsed();

    // Once each: one `success` version per document, with the fault-free run's fragments; the
    // other versions are the submissions answered `NATS error`, `failed`.
    let accepted: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT id, version FROM documents WHERE pipeline_id = $1 AND status = 'success'",
    )
    .bind(pipeline)
    .fetch_all(&primary)
    .await
    .expect("successes");
    let mut answered = load.accepted.clone();
    answered.sort();
    let mut succeeded = accepted;
    succeeded.sort();
    assert_eq!(
        succeeded, answered,
        "the versions answered 201 are the successes"
    );
    let mut per_document: HashMap<String, usize> = HashMap::new();
    let mut failed = 0;
    for (external, status, count, distinct, span) in versions(&primary, pipeline).await {
        if status != "success" {
            assert_eq!(status, "failed", "{external}");
            failed += 1;
            continue;
        }
        *per_document.entry(external.clone()).or_default() += 1;
        let i: usize = external["doc-".len()..].parse().expect("index");
        assert_eq!(
            (count, distinct, span),
            (expected[&(i % SHAPES.len())], count, count),
            "{external}: the fragments of the fault-free run, once each"
        );
    }
    assert_eq!(per_document.len(), n);
    assert!(per_document.values().all(|&versions| versions == 1));
    assert_eq!(failed, load.nats_errors);
    let added = apis[0].metric("service_document_queue_added").await
        + apis[1].metric("service_document_queue_added").await;
    assert_eq!(added - added_before, (n + load.nats_errors) as f64);
    // No version stored twice by the workers either: their `success` counts, the killed
    // worker's as last read before its death, add up to at most the versions stored (it may
    // have stored a few more between that reading and its death); a job delivered again after
    // its version was stored counts as `skip`.
    let mut processed = vec![success_before_kill];
    let mut skipped = Vec::new();
    for port in worker_ports {
        let url = format!("http://127.0.0.1:{port}/metrics");
        assert_eq!(
            Api::metric_at(&http, &url, "service_document_queue_failed").await,
            0.0
        );
        processed.push(Api::metric_at(&http, &url, "service_document_queue_success").await);
        skipped.push(Api::metric_at(&http, &url, "service_document_queue_skip").await);
    }
    let stored = processed.iter().sum::<f64>();
    assert!(
        stored <= (n + SHAPES.len()) as f64,
        "{stored} versions stored by the workers, {} submitted: {processed:?}",
        n + SHAPES.len()
    );
    assert_eq!(stream_replicas(&js, stream).await, 3);

    // Searches through both APIs, once the replica has caught up, answer what the API on the
    // primary answers. The HNSW index a burst deferred is built after its last group: until the
    // replica has replayed the build, a search there scans the table exactly where the
    // primary walks the index.
    eventually(
        "the deferred HNSW index built",
        Duration::from_secs(120),
        || async {
            let deferred: bool = sqlx::query_scalar(
                "SELECT deferred_index_m IS NOT NULL FROM vector_embeddings WHERE pipeline_id = $1",
            )
            .bind(pipeline)
            .fetch_one(&primary)
            .await
            .expect("the association");
            (!deferred).then_some(())
        },
    )
    .await;
    // A search's HNSW walk is as long as the association's estimated size asks; an `ANALYZE`
    // of autovacuum between two searches would change it, and with it an approximate answer.
    sqlx::query("ANALYZE")
        .execute(&primary)
        .await
        .expect("analyze");
    let catch_up = standby_server.wait_caught_up(&primary_server).await;
    let replica_count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM documents WHERE pipeline_id = $1")
            .bind(pipeline)
            .fetch_one(&standby)
            .await
            .expect("replica count");
    assert_eq!(replica_count, (n + load.nats_errors) as i64);
    for i in 0..20 {
        let path = format!("/pipelines/{pid}/search");
        let want = reference.post(&path, &search_body(i)).await;
        assert_eq!(want.status, StatusCode::OK, "{}", want.text);
        assert_eq!(
            want.body.as_array().map_or(0, Vec::len),
            10,
            "{}",
            want.text
        );
        for api in &apis {
            let got = api.post(&path, &search_body(i)).await;
            assert_eq!(got.status, StatusCode::OK, "{}", got.text);
            assert_same_answer(
                &got.body,
                &want.body,
                &format!("search {i} through {}", api.base),
            );
        }
    }
    let one = search_rate(&apis[..1], &pid, searches).await;
    let two = search_rate(&apis, &pid, searches).await;

    // An MCP session lives in the API process that created it.
    let mcp = |api: &Api, session: Option<&str>, body: Value| {
        let mut request = api
            .req(Method::POST, "/mcp")
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request
    };
    let reply = apis[0]
        .send(mcp(
            &apis[0],
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "trove-cluster-test", "version": "1.0"}}}),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let session = reply
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = apis[0].send(mcp(&apis[0], Some(&session), note)).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let reply = apis[0]
        .send(mcp(&apis[0], Some(&session), ping.clone()))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = apis[1].send(mcp(&apis[1], Some(&session), ping)).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
    assert_eq!(reply.text, "Not Found: Session not found");

    // What the processes hold: connections to each server, peak memory.
    let connections = |pool: &PgPool| {
        let pool = pool.clone();
        async move {
            let count: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            )
            .bind(DATABASE)
            .fetch_one(&pool)
            .await
            .expect("connections");
            count - i64::from(pool.size()) + 1
        }
    };
    let (on_primary, on_replica) = (connections(&primary).await, connections(&standby).await);
    let rss: Vec<String> = serves
        .iter()
        .chain(&workers)
        .map(|trove| format!("{}={:.0}", trove.name, trove.peak_rss_mib()))
        .collect();

    let secs = |d: Duration| d.as_secs_f64();
    let last_fault = timeline.values().max().copied().unwrap_or_default();
    let worker_killed = timeline["worker_killed"];
    println!(
        "cluster figures: submissions={n} nats_errors={} submit_seconds={:.1} \
         submissions_per_second={:.1} drain_after_last_submission_seconds={:.1} \
         drain_after_worker_kill_seconds={:.1} drain_after_last_restart_seconds={:.1} \
         replica_catch_up_seconds={:.2} searches={searches} \
         searches_per_second_one_api={one:.1} searches_per_second_two_apis={two:.1} \
         worker_success={processed:?} worker_skip={skipped:?} \
         connections_primary={on_primary} connections_replica={on_replica} \
         peak_rss_mib=[{}] timeline={timeline:?}",
        load.nats_errors,
        secs(submitted),
        n as f64 / secs(submitted),
        secs(drained.saturating_sub(submitted)),
        secs(drained.saturating_sub(worker_killed)),
        secs(drained.saturating_sub(last_fault)),
        secs(catch_up),
        rss.join(" "),
    );
    primary.close().await;
    standby.close().await;
    drop(workers);
    drop(serves);
}
