//! How long the jobs of a worker killed with `kill -9` wait before another worker stores
//! them: seconds from the kill to `success` of every document the killed worker held.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… cargo bench --bench redelivery -- 8 200` (8 kills, 200
//! documents held by each killed worker, the defaults; a worker holds at most 200 jobs, two
//! batches of 100). The time measured is the queue's, not the build's: `--profile dev` skips the
//! release build and measures the same.
//!
//! The bench starts a NATS server of its own (the workers use the service's stream and
//! consumer names), Trove's API in this process without a worker, and a fake OpenAI-compatible
//! embedding server that can hold its answers. Each round:
//!
//! 1. submits the documents (one batch request) while no worker runs;
//! 2. starts a `trove worker` process of the built binary (the victim; default ack wait, 20 s,
//!    and concurrency, 2): it fetches every job (two batches of 100) and sends their texts to
//!    the embedding server, which holds the answers, so the victim holds every job;
//! 3. starts a second `trove worker` (the survivor) and waits until it serves its metrics;
//! 4. waits until the victim has held the jobs for one to four thirds of the ack wait (it marks
//!    them in progress every third), at random, so that the kills fall at every phase of the
//!    marks;
//! 5. kills the victim (`SIGKILL`), lets the embedding server answer again, and waits until
//!    every document is `success` (their `updated_at` is the start of the survivor's storing
//!    transaction);
//! 6. stops the survivor.
//!
//! Prints, per round and over all rounds, the p50 and the maximum of `updated_at` minus the
//! moment of the kill, and per round when the survivor's embedding request arrived (the
//! redelivery).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measuring tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use trove::config::Config;
use trove::startup::Application;
use uuid::Uuid;

const SECRET: &str = "BenchBenchBenchBenchBenchBenchBenchBenchBench+/0";
const DATA_SECRET: &str = "YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoYmU=";
/// Dimensions of the fake embeddings.
const DIMENSIONS: usize = 8;

/// The fake embedding server: `POST …/embeddings` answers unit vectors; while `hold` is true
/// it keeps every answer back (until released, or until the client's connection closes).
struct FakeEmbedder {
    addr: SocketAddr,
    hold: watch::Sender<bool>,
    /// Inputs of the requests being held.
    held_inputs: Arc<AtomicUsize>,
    /// When each request arrived.
    arrivals: Arc<std::sync::Mutex<Vec<Instant>>>,
}

impl FakeEmbedder {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (hold, _) = watch::channel(false);
        let held_inputs = Arc::new(AtomicUsize::new(0));
        let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (hold_for_server, held, seen) = (hold.clone(), held_inputs.clone(), arrivals.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (hold, held, seen) = (hold_for_server.subscribe(), held.clone(), seen.clone());
                tokio::spawn(serve_connection(stream, hold, held, seen));
            }
        });
        Self {
            addr,
            hold,
            held_inputs,
            arrivals,
        }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// One keep-alive HTTP/1.1 connection: requests one after another.
async fn serve_connection(
    mut stream: TcpStream,
    mut hold: watch::Receiver<bool>,
    held: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<Instant>>>,
) {
    let mut buffer = Vec::new();
    while let Some(body) = read_request(&mut stream, &mut buffer).await {
        seen.lock().unwrap().push(Instant::now());
        let inputs = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["input"].as_array().map(Vec::len))
            .unwrap_or(0);
        if *hold.borrow() {
            held.fetch_add(inputs, Ordering::SeqCst);
            let mut probe = [0u8; 1];
            let released = tokio::select! {
                _ = hold.wait_for(|hold| !*hold) => true,
                // The client sends nothing while it waits: a read ends only when it is gone.
                _ = stream.read(&mut probe) => false,
            };
            held.fetch_sub(inputs, Ordering::SeqCst);
            if !released {
                return;
            }
        }
        let mut unit = vec![0.0f32; DIMENSIONS];
        unit[0] = 1.0;
        let data: Vec<Value> = (0..inputs)
            .map(|index| json!({"object": "embedding", "index": index, "embedding": unit}))
            .collect();
        let answer = json!({"object": "list", "data": data, "model": "fake"}).to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(answer.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// Reads one request (head and `content-length` body); `None` when the connection ends.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some(body)
}

/// A NATS server of the bench's own, on a free port, with its store in a temporary folder.
struct OwnNats {
    port: u16,
    store: std::path::PathBuf,
    process: Child,
}

impl OwnNats {
    fn start() -> Self {
        let port = free_port();
        let store = std::env::temp_dir().join(format!("trove-bench-nats-{}", Uuid::new_v4()));
        let process = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            port,
            store,
            process,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// A `trove worker` process of the built binary, its metrics on `metrics_port`.
fn start_worker(database_url: &str, nats_url: &str, metrics_port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_trove"))
        .arg("worker")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TROVE_DATABASE_URL", database_url)
        .env("TROVE_NATS_URL", nats_url)
        .env("TROVE_SECRET", DATA_SECRET)
        .env(
            "TROVE_WORKER_METRICS_LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .env("TROVE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("the trove binary runs")
}

/// Waits until a worker serves `/health` on its metrics port.
async fn wait_until_serving(metrics_port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = format!("http://127.0.0.1:{metrics_port}/health");
    while !reqwest::get(&url)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "the worker did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value at `fraction` (0–1) of sorted `values`.
fn quantile(sorted: &[f64], fraction: f64) -> f64 {
    let position = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[position]
}

/// Starts the API (no worker) on a fresh database; returns its base URL and master key id.
async fn start_api(database_url: &str, nats_url: &str) -> (String, Uuid) {
    let master = Uuid::new_v4();
    let env = std::collections::HashMap::from([
        ("TROVE_DATABASE_URL", database_url.to_owned()),
        ("TROVE_NATS_URL", nats_url.to_owned()),
        ("TROVE_LISTEN", "127.0.0.1:0".to_owned()),
        ("TROVE_MASTER_KEY_ID", master.to_string()),
        ("TROVE_MASTER_KEY_SECRET", SECRET.to_owned()),
        ("TROVE_SECRET", DATA_SECRET.to_owned()),
        ("TROVE_WORKER", "false".to_owned()),
        ("TROVE_WORKER_METRICS_LISTEN", "off".to_owned()),
        ("TROVE_LOG", "warn".to_owned()),
    ]);
    let config = Config::from_lookup(|k| env.get(k).cloned()).expect("config");
    let app = Application::build(config).await.expect("trove starts");
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    (base, master)
}

/// What one round needs.
struct Bench {
    base: String,
    master: String,
    client: reqwest::Client,
    database_url: String,
    nats_url: String,
    fake: FakeEmbedder,
    pipeline: String,
}

impl Bench {
    fn call(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.master)
            .header("x-api-key-secret", SECRET)
    }

    /// A pipeline whose embedding model is the fake server.
    async fn create_pipeline(&mut self) {
        let model: Value = self
            .call(reqwest::Method::POST, "/embedding-models")
            .json(
                &json!({"name": "fake", "provider": "openai", "model_name": "fake",
                          "parameters": {"base_url": self.fake.base_url(), "api_key": "k"}}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let splitters: Value = self
            .call(
                reqwest::Method::GET,
                "/text-splitters?name=recursive-character",
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let pipeline: Value = self
            .call(reqwest::Method::POST, "/pipelines")
            .json(
                &json!({"name": "redelivery", "embedding_model_id": model["id"],
                          "default_text_splitter_id": splitters["data"][0]["id"],
                          "classifications": ["public"]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        self.pipeline = pipeline["id"]
            .as_str()
            .unwrap_or_else(|| panic!("pipeline created: {pipeline} (model {model})"))
            .to_owned();
    }

    /// Submits `count` documents in batches of up to 1,000; returns their ids.
    async fn submit(&self, round: usize, count: usize) -> Vec<Uuid> {
        let mut ids = Vec::with_capacity(count);
        for start in (0..count).step_by(1000) {
            let documents: Vec<Value> = (start..count.min(start + 1000))
                .map(|i| {
                    json!({"external_identifier": format!("r{round}-d{i}"),
                                "classification": "public",
                                "text": format!("Round {round}, document {i}: a short text.")})
                })
                .collect();
            let created: Value = self
                .call(
                    reqwest::Method::POST,
                    &format!("/pipelines/{}/documents/batch", self.pipeline),
                )
                .json(&json!({"documents": documents}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let versions = created.as_array().unwrap_or_else(|| panic!("{created}"));
            ids.extend(
                versions
                    .iter()
                    .map(|v| Uuid::parse_str(v["id"].as_str().unwrap()).unwrap()),
            );
        }
        ids
    }

    /// One round; returns the seconds from the kill to each held document's `success`.
    async fn round(&self, round: usize, count: usize, db: &mut PgConnection) -> Vec<f64> {
        let ids = self.submit(round, count).await;
        self.fake.hold.send_replace(true);
        let victim_port = free_port();
        let mut victim = start_worker(&self.database_url, &self.nats_url, victim_port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.fake.held_inputs.load(Ordering::SeqCst) < count {
            assert!(
                Instant::now() < deadline,
                "the victim holds {} of {count} documents",
                self.fake.held_inputs.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let held_at = Instant::now();
        let survivor_port = free_port();
        let mut survivor = start_worker(&self.database_url, &self.nats_url, survivor_port);
        wait_until_serving(survivor_port).await;
        // After at least one mark, at any phase of the marks; before the embedding request
        // times out (30 s) and is sent again.
        let mark_interval = trove::config::DEFAULT_ACK_WAIT / 3;
        let held_for = mark_interval + 3 * mark_interval.mul_f64(rand::random::<f64>());
        tokio::time::sleep_until((held_at + held_for).into()).await;

        victim.kill().unwrap();
        let killed: DateTime<Utc> = Utc::now();
        let killed_at = Instant::now();
        victim.wait().unwrap();
        self.fake.hold.send_replace(false);

        let deadline = Instant::now() + Duration::from_secs(120);
        let done = loop {
            let done: Vec<DateTime<Utc>> = sqlx::query_scalar(
                "SELECT updated_at FROM documents WHERE id = ANY($1) AND status = 'success'",
            )
            .bind(&ids)
            .fetch_all(&mut *db)
            .await
            .unwrap();
            if done.len() == count {
                break done;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} documents stored 120 s after the kill",
                done.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        stop(&mut survivor);
        let arrivals = std::mem::take(&mut *self.fake.arrivals.lock().unwrap());
        let redelivered = arrivals
            .iter()
            .find(|at| **at > killed_at)
            .map_or(f64::NAN, |at| (*at - killed_at).as_secs_f64());
        let mut seconds: Vec<f64> = done
            .iter()
            .map(|at| (*at - killed).num_microseconds().unwrap() as f64 / 1e6)
            .collect();
        seconds.sort_by(f64::total_cmp);
        println!(
            "round {round}: killed {:.1} s after it received its jobs, which the survivor \
             received {redelivered:.1} s after the kill; {count} documents: p50 {:.1} s, \
             max {:.1} s from the kill to success",
            held_for.as_secs_f64(),
            quantile(&seconds, 0.5),
            quantile(&seconds, 1.0),
        );
        seconds
    }
}

/// Stops a worker with SIGTERM (it finishes its batch) and waits for it.
fn stop(worker: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let _ = worker.wait();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(8);
    let count: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    assert!(
        (1..=200).contains(&count),
        "a worker holds at most 200 jobs (two batches of 100)"
    );
    let (admin, _) = common::app::servers();
    let (database, database_url, mut admin_conn) = common::app::create_database(&admin).await;
    let nats = OwnNats::start();

    let (base, master) = start_api(&database_url, &nats.url()).await;
    let mut bench = Bench {
        base,
        master: master.to_string(),
        client: reqwest::Client::new(),
        database_url: database_url.clone(),
        nats_url: nats.url(),
        fake: FakeEmbedder::start().await,
        pipeline: String::new(),
    };
    bench.create_pipeline().await;
    let mut db = PgConnection::connect(&database_url).await.unwrap();
    println!(
        "{rounds} rounds of {count} documents held by a worker killed with SIGKILL; \
         ack wait {} s",
        trove::config::DEFAULT_ACK_WAIT.as_secs()
    );
    let mut all = Vec::new();
    for round in 1..=rounds {
        all.extend(bench.round(round, count, &mut db).await);
    }
    all.sort_by(f64::total_cmp);
    println!(
        "all {} documents: p50 {:.1} s, max {:.1} s from the kill to success",
        all.len(),
        quantile(&all, 0.5),
        quantile(&all, 1.0)
    );
    drop(db);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin_conn)
    .await
    .ok();
}
