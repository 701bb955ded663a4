//! What Trove adds between a client and a model server. Trove runs in this process on a fresh
//! database of the test Postgres (and the test NATS), with an `openai` LLM (with a key)
//! registered on the tests' fake model server (`tests/api/fake_llm.rs`, whose every answer is
//! its default: "Hello, world!" in four chunks). Each request goes alternately straight to the
//! fake and through Trove (which one goes first swaps every pair), on one client (keep-alive,
//! `TCP_NODELAY`); service, fake and client share this process's tokio runtime.
//!
//! 1. Whole chat completion: `POST <fake>/v1/chat/completions` against the relay
//!    `POST /compat/v1/chat/completions` (`x-llm-id`), timed from sending to the last byte.
//! 2. The same with `"stream": true`, timed to the first token: the first body chunk that
//!    completes the first content delta, `"content":"Hello"` (the role event before it has an
//!    empty content).
//! 3. `POST /llms/{llm_id}/query` (`{"prompt":"hi"}`, NDJSON) timed to its first `delta` line,
//!    against the direct streamed request of 2.
//! 4. An enriched completion (extension `conversations`: the relay with `X-Agent-Id`,
//!    `X-Pipeline-Id`, `X-Pipeline-Classification`, `"stream": true`) timed to its first
//!    `chat.completion.chunk` with content, against the same agent's execution
//!    (`POST /agents/{agent_id}/execute`, NDJSON) timed to its first `delta` line: the agent
//!    (a similarity placeholder for its question, a history placeholder) on an empty pipeline
//!    of the seeded `default` model (`hash`), so both retrieve the same (nothing) and the
//!    difference is the relay's reading and writing.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench relay --
//! --requests=2000` (`--requests=N` measured per path and scenario, 2000; `--warmup=N` pairs
//! before them, 200).

#![expect(clippy::expect_used, reason = "a load tool: failures abort the run")]

#[path = "../tests/api/fake_llm.rs"]
mod fake_llm;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use trove::config::{Config, QueueNames};
use trove::startup::Application;
use uuid::Uuid;

use fake_llm::FakeLlm;

const SECRET: &str = "BenchBenchBenchBenchBenchBenchBenchBenchBench+/0";
/// The LLM's key at the fake (sent as a bearer token on both paths).
const LLM_KEY: &str = "sk-bench-relay";
/// The first content delta of the default answer in the fake's SSE chunks.
const FIRST_TOKEN: &[u8] = br#""content":"Hello""#;
/// What a `delta` line of `POST /llms/{id}/query` holds.
const DELTA_LINE: &[u8] = br#""type":"delta""#;
/// The whole answer's text, checked (untimed) in whole answers.
const WHOLE_TEXT: &[u8] = b"Hello, world!";

struct Options {
    requests: usize,
    warmup: usize,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            requests: 2000,
            warmup: 200,
        };
        for arg in std::env::args().skip(1) {
            let number = |v: &str| -> usize { v.replace('_', "").parse().expect("a number") };
            match arg.split_once('=') {
                Some(("--requests", v)) => options.requests = number(v),
                Some(("--warmup", v)) => options.warmup = number(v),
                _ if arg == "--bench" => {} // from cargo
                _ => panic!("unknown argument {arg}: --requests=N, --warmup=N"),
            }
        }
        options
    }
}

// ---- Trove in this process ---------------------------------------------------------------

struct Trove {
    base: String,
    key: String,
    database: String,
    stream: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

/// Trove on a fresh database, without its worker, on a free loopback port.
async fn start_trove(admin: &str, nats: &str) -> Trove {
    let database = format!("trove_bench_{}", Uuid::new_v4().simple());
    admin_sql(admin, format!("CREATE DATABASE {database}")).await;
    let root = admin.rsplit_once('/').map_or(admin, |(r, _)| r);
    let master = Uuid::new_v4();
    let env = HashMap::from([
        ("TROVE_DATABASE_URL", format!("{root}/{database}")),
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
        ("TROVE_EXTENSIONS", "conversations".to_owned()),
    ]);
    let mut config = Config::from_lookup(|k| env.get(k).cloned()).expect("config");
    let tag = Uuid::new_v4().simple().to_string();
    let stream = format!("BENCH_{tag}");
    config.queue = QueueNames {
        stream: stream.clone(),
        subject_prefix: format!("bench.{tag}"),
        consumer: format!("bench-{tag}"),
        ..QueueNames::default()
    };
    let app = Application::build(config).await.expect("trove starts");
    let base = format!("http://{}", app.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    Trove {
        base,
        key: master.to_string(),
        database,
        stream,
        stop,
        server,
    }
}

/// Stops Trove, drops its database and its NATS stream.
async fn stop_trove(trove: Trove, admin: &str, nats: &str) {
    let _ = trove.stop.send(());
    let _ = trove.server.await;
    if let Ok(client) = async_nats::connect(nats).await {
        let _ = async_nats::jetstream::new(client)
            .delete_stream(&trove.stream)
            .await;
    }
    let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", trove.database);
    admin_sql(admin, drop).await;
}

async fn admin_sql(admin: &str, sql: String) {
    let mut conn = PgConnection::connect(admin).await.expect("database server");
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .expect("admin statement");
}

/// Registers an `openai` LLM on the fake with [`LLM_KEY`]; returns its id.
async fn register_llm(client: &reqwest::Client, trove: &Trove, fake: &FakeLlm) -> String {
    let response = client
        .post(format!("{}/llms", trove.base))
        .header("x-api-key", &trove.key)
        .header("x-api-key-secret", SECRET)
        .json(&json!({
            "name": "bench-relay",
            "provider": "openai",
            "endpoint": fake.openai_endpoint(),
            "model": "gpt-fake",
            "api_key": LLM_KEY,
        }))
        .send()
        .await
        .expect("POST /llms");
    let status = response.status();
    let body: Value = response.json().await.expect("JSON");
    assert!(status.is_success(), "POST /llms: {status} {body}");
    body["id"].as_str().expect("LLM id").to_owned()
}

/// `POST <path>` with the master key; the created object's id.
async fn create(client: &reqwest::Client, trove: &Trove, path: &str, body: &Value) -> String {
    let response = client
        .post(format!("{}{path}", trove.base))
        .header("x-api-key", &trove.key)
        .header("x-api-key-secret", SECRET)
        .json(body)
        .send()
        .await
        .expect("POST");
    let status = response.status();
    let body: Value = response.json().await.expect("JSON");
    assert!(status.is_success(), "POST {path}: {status} {body}");
    body["id"].as_str().expect("id").to_owned()
}

/// The id of the seeded object of `path` named `name`.
async fn seeded(client: &reqwest::Client, trove: &Trove, path: &str, name: &str) -> String {
    let body: Value = client
        .get(format!("{}{path}?name={name}", trove.base))
        .header("x-api-key", &trove.key)
        .header("x-api-key-secret", SECRET)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    body["data"][0]["id"]
        .as_str()
        .expect("seeded id")
        .to_owned()
}

/// An empty pipeline (classification `public`) and an agent retrieving from it with a history
/// placeholder; their ids.
async fn register_agent(client: &reqwest::Client, trove: &Trove) -> (String, String) {
    let model = seeded(client, trove, "/embedding-models", "default").await;
    let splitter = seeded(client, trove, "/text-splitters", "recursive-character").await;
    let pipeline = json!({
        "name": "bench-enriched",
        "embedding_model_id": model,
        "default_text_splitter_id": splitter,
        "classifications": ["public"],
    });
    let agent = json!({
        "name": "bench-enriched",
        "prompt": [
            {"role": "system", "template": "Use this context:\n{context}"},
            {"role": "user", "template": "{history}"},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question"},
            {"name": "history", "type": "history"}
        ]
    });
    (
        create(client, trove, "/pipelines", &pipeline).await,
        create(client, trove, "/agents", &agent).await,
    )
}

// ---- Timing ------------------------------------------------------------------------------

/// One way to send a request (URL, headers and body, prepared before the timer starts) and
/// where its timer stops.
#[derive(Clone)]
struct Target {
    url: String,
    headers: HeaderMap,
    body: Bytes,
    until: Until,
}

impl Target {
    fn new(url: String, headers: &[(&'static str, &str)], body: &Value, until: Until) -> Self {
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_str(value).expect("header value"));
        }
        let body = Bytes::from(serde_json::to_vec(body).expect("JSON"));
        Self {
            url,
            headers: map,
            body,
            until,
        }
    }
}

/// Where the timer stops.
#[derive(Clone, Copy)]
enum Until {
    /// The end of the body.
    LastByte,
    /// The first chunk after which the body so far holds this.
    First(&'static [u8]),
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends one request and reads its whole body; returns the time from sending to `until`.
async fn timed(client: &reqwest::Client, target: &Target) -> Duration {
    let until = target.until;
    let request = client
        .post(&target.url)
        .headers(target.headers.clone())
        .body(target.body.clone())
        .build()
        .expect("request");
    let started = Instant::now();
    let mut response = client.execute(request).await.expect("send");
    let mut seen = Vec::with_capacity(2048);
    let mut first = None;
    while let Some(chunk) = response.chunk().await.expect("body") {
        seen.extend_from_slice(&chunk);
        if let (None, Until::First(marker)) = (first, until)
            && contains(&seen, marker)
        {
            first = Some(started.elapsed());
        }
    }
    let end = started.elapsed();
    let status = response.status();
    let text = || String::from_utf8_lossy(&seen).into_owned();
    assert!(status.is_success(), "{}: {status} {}", target.url, text());
    match (until, first) {
        (Until::LastByte, _) if contains(&seen, WHOLE_TEXT) => end,
        (Until::First(_), Some(first)) => first,
        _ => panic!("{}: unexpected answer {}", target.url, text()),
    }
}

/// Nearest-rank percentile in milliseconds.
fn pct(samples: &[Duration], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1].as_secs_f64() * 1000.0
}

struct Row {
    name: &'static str,
    direct: [f64; 2],
    trove: [f64; 2],
    target: Option<f64>,
    /// The load average after the scenario.
    load: String,
}

/// A request straight to the fake, its counterpart through Trove, and the bound on the
/// difference of their p50s in milliseconds.
struct Scenario {
    name: &'static str,
    direct: Target,
    trove: Target,
    target: Option<f64>,
}

/// `warmup` then `requests` pairs: the direct request and Trove's, which first alternating.
async fn run(client: &reqwest::Client, options: &Options, scenario: &Scenario) -> Row {
    let (direct, trove) = (&scenario.direct, &scenario.trove);
    let mut direct_times = Vec::with_capacity(options.requests);
    let mut trove_times = Vec::with_capacity(options.requests);
    for i in 0..options.warmup + options.requests {
        let (d, t) = if i % 2 == 0 {
            let d = timed(client, direct).await;
            (d, timed(client, trove).await)
        } else {
            let t = timed(client, trove).await;
            (timed(client, direct).await, t)
        };
        if i >= options.warmup {
            direct_times.push(d);
            trove_times.push(t);
        }
    }
    Row {
        name: scenario.name,
        direct: [pct(&direct_times, 50.0), pct(&direct_times, 99.0)],
        trove: [pct(&trove_times, 50.0), pct(&trove_times, 99.0)],
        target: scenario.target,
        load: load_average(),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn print_summary(rows: &[Row]) {
    println!(
        "\n{:<42} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}  met  load after",
        "scenario (ms)", "direct p50", "direct p99", "Trove p50", "Trove p99", "Δ p50", "target"
    );
    for row in rows {
        let delta = row.trove[0] - row.direct[0];
        let (target, met) = match row.target {
            Some(t) => (format!("≤ {t}"), if delta <= t { "yes" } else { "NO" }),
            None => ("–".to_owned(), "–"),
        };
        let ([d50, d99], [t50, t99], name, load) = (row.direct, row.trove, row.name, &row.load);
        println!(
            "{name:<42} {d50:>10.3} {d99:>10.3} {t50:>10.3} {t99:>10.3} {delta:>+9.3} {target:>7}  {met:<3}  {load}"
        );
    }
}

/// What the enriched scenario runs: the pipeline and the agent.
struct Enriched {
    pipeline_id: String,
    agent_id: String,
}

/// The four scenarios: whole and streamed completions, direct and relayed, the query, and an
/// enriched completion against its agent's execution.
fn scenarios(fake: &FakeLlm, trove: &Trove, llm_id: &str, enriched: &Enriched) -> [Scenario; 4] {
    let direct_url = format!("{}/chat/completions", fake.openai_endpoint());
    let relay_url = format!("{}/compat/v1/chat/completions", trove.base);
    let query_url = format!("{}/llms/{llm_id}/query", trove.base);
    let bearer = format!("Bearer {LLM_KEY}");
    let direct_headers = [("authorization", bearer.as_str())];
    let trove_headers = [
        ("x-api-key", trove.key.as_str()),
        ("x-api-key-secret", SECRET),
        ("x-llm-id", llm_id),
    ];
    let messages = json!([{"role": "user", "content": "hi"}]);
    let whole = json!({"model": "gpt-fake", "messages": messages});
    let streamed = json!({"model": "gpt-fake", "messages": messages, "stream": true});
    let token = Until::First(FIRST_TOKEN);
    let direct_streamed = Target::new(direct_url.clone(), &direct_headers, &streamed, token);
    let query = json!({"prompt": "hi"});
    let execute_url = format!("{}/agents/{}/execute", trove.base, enriched.agent_id);
    let execute_headers = [
        ("x-api-key", trove.key.as_str()),
        ("x-api-key-secret", SECRET),
        ("x-llm-id", llm_id),
        ("x-pipeline-id", enriched.pipeline_id.as_str()),
    ];
    let execution = json!({"variables": {"question": "hi"}, "classification": "public"});
    let enriched_headers = [
        ("x-api-key", trove.key.as_str()),
        ("x-api-key-secret", SECRET),
        ("x-llm-id", llm_id),
        ("x-agent-id", enriched.agent_id.as_str()),
        ("x-pipeline-id", enriched.pipeline_id.as_str()),
        ("x-pipeline-classification", "public"),
    ];
    [
        Scenario {
            name: "1 whole completion, send → last byte",
            direct: Target::new(direct_url, &direct_headers, &whole, Until::LastByte),
            trove: Target::new(relay_url.clone(), &trove_headers, &whole, Until::LastByte),
            target: Some(1.0),
        },
        Scenario {
            name: "2 streamed completion, TTFT",
            direct: direct_streamed.clone(),
            trove: Target::new(relay_url.clone(), &trove_headers, &streamed, token),
            target: Some(2.0),
        },
        Scenario {
            name: "3 /llms/{id}/query NDJSON, first delta",
            direct: direct_streamed,
            trove: Target::new(
                query_url,
                &trove_headers[..2],
                &query,
                Until::First(DELTA_LINE),
            ),
            target: None,
        },
        Scenario {
            name: "4 enriched completion vs execution, TTFT",
            direct: Target::new(
                execute_url,
                &execute_headers,
                &execution,
                Until::First(DELTA_LINE),
            ),
            trove: Target::new(relay_url, &enriched_headers, &streamed, token),
            target: Some(1.0),
        },
    ]
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = Options::parse();
    let admin = std::env::var("TROVE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://trove@127.0.0.1:55432/postgres".to_owned());
    let nats = std::env::var("TROVE_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:54222".to_owned());
    let command = format!(
        "TROVE_TEST_DATABASE_URL={admin} TROVE_TEST_NATS_URL={nats} cargo bench --bench relay -- --requests={} --warmup={}",
        options.requests, options.warmup
    );
    println!(
        "relay bench: {} requests per path and scenario after {} warm-up pairs, {} cores, load {}",
        options.requests,
        options.warmup,
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );

    let fake = FakeLlm::start().await;
    let trove = start_trove(&admin, &nats).await;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(None)
        .build()
        .expect("HTTP client");
    let llm_id = register_llm(&client, &trove, &fake).await;
    let (pipeline_id, agent_id) = register_agent(&client, &trove).await;
    let enriched = Enriched {
        pipeline_id,
        agent_id,
    };

    let mut rows = Vec::new();
    for scenario in scenarios(&fake, &trove, &llm_id, &enriched) {
        rows.push(run(&client, &options, &scenario).await);
    }
    print_summary(&rows);
    println!(
        "(Δ p50 = Trove p50 − direct p50; scenario 3's direct column is the direct streamed TTFT, scenario 4's the agent's execution and its Trove column the enriched completion)\ncommand: {command}"
    );

    drop(client);
    stop_trove(trove, &admin, &nats).await;
    drop(fake);
}
