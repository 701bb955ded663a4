//! Trove in this process on a fresh database of the test Postgres and its own JetStream stream,
//! and an HTTP client with the master key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use trove::config::{Config, QueueNames};
use trove::startup::Application;
use trove::state::AppState;
use uuid::Uuid;

pub const SECRET: &str = "BenchBenchBenchBenchBenchBenchBenchBenchBench+/0";

/// The test servers: `TROVE_TEST_DATABASE_URL` (a database to connect to for creating others)
/// and `TROVE_TEST_NATS_URL`, with the local defaults.
pub fn servers() -> (String, String) {
    let admin = std::env::var("TROVE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://trove@127.0.0.1:55432/postgres".to_owned());
    let nats = std::env::var("TROVE_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:54222".to_owned());
    (admin, nats)
}

/// The test Postgres's shared memory, for a run's header: `shared_buffers` and whether it
/// is on huge pages (docs/operations.md, *Memory*).
pub async fn postgres_memory(admin: &str) -> String {
    let read = async {
        let mut db = PgConnection::connect(admin).await?;
        sqlx::query_as::<_, (String, String)>(
            "SELECT current_setting('shared_buffers'), current_setting('huge_pages_status')",
        )
        .fetch_one(&mut db)
        .await
    };
    match read.await {
        Ok((buffers, huge)) => format!("Postgres shared_buffers {buffers}, huge pages {huge}"),
        Err(e) => format!("Postgres shared memory unknown ({e})"),
    }
}

/// A running Trove and what it was started on.
pub struct Running {
    pub state: AppState,
    pub http: Http,
    /// The URL of its database.
    pub url: String,
    pub database: String,
    pub master: Uuid,
    admin: PgConnection,
    nats: String,
    stream: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

/// A new database on the server of `admin`: its name, its URL, and the connection to `admin`
/// that created it (and drops it).
pub async fn create_database(admin: &str) -> (String, String, PgConnection) {
    let database = format!("trove_bench_{}", Uuid::new_v4().simple());
    let mut admin_conn = PgConnection::connect(admin).await.expect("database server");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin_conn)
        .await
        .expect("create db");
    let root = admin.rsplit_once('/').map_or(admin, |(r, _)| r);
    let url = format!("{root}/{database}");
    (database, url, admin_conn)
}

/// Creates a database and starts Trove on it (API, and the worker when `worker`), with the
/// HNSW parameters (`TROVE_HNSW_*`), the worker concurrency (`TROVE_WORKER_CONCURRENCY`) and
/// the embedding threads (`TROVE_EMBED_THREADS`) of the environment as the service reads them.
pub async fn start(admin: &str, nats: &str, worker: bool) -> Running {
    start_with(admin, nats, worker, &[]).await
}

/// [`start`] with more of Trove's variables (`TROVE_EXTENSIONS`, …), which take precedence.
pub async fn start_with(
    admin: &str,
    nats: &str,
    worker: bool,
    variables: &[(&'static str, &str)],
) -> Running {
    let (database, url, admin) = create_database(admin).await;
    let database = Database {
        name: database,
        url,
        admin,
        master: Uuid::new_v4(),
    };
    start_on(database, nats, worker, variables).await
}

/// A database Trove runs on: its name and URL, the connection to the server that drops it, and
/// the master key id its installation has or will record.
pub struct Database {
    pub name: String,
    pub url: String,
    pub admin: PgConnection,
    pub master: Uuid,
}

/// Starts Trove on `database` as [`start_with`] does.
pub async fn start_on(
    database: Database,
    nats: &str,
    worker: bool,
    variables: &[(&'static str, &str)],
) -> Running {
    let Database {
        name: database,
        url,
        admin: admin_conn,
        master,
    } = database;
    let mut env = HashMap::from([
        ("TROVE_DATABASE_URL", url.clone()),
        ("TROVE_NATS_URL", nats.to_owned()),
        ("TROVE_LISTEN", "127.0.0.1:0".to_owned()),
        ("TROVE_MASTER_KEY_ID", master.to_string()),
        ("TROVE_MASTER_KEY_SECRET", SECRET.to_owned()),
        (
            "TROVE_SECRET",
            "YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoYmU=".to_owned(),
        ),
        ("TROVE_WORKER", worker.to_string()),
        ("TROVE_WORKER_METRICS_LISTEN", "off".to_owned()),
        ("TROVE_LOG", "warn".to_owned()),
    ]);
    env.extend(variables.iter().map(|(k, v)| (*k, (*v).to_owned())));
    // `BENCH_READ_ON_PRIMARY=1`: the database named as its own read replica, so searches take
    // the read replicas' path (the statement on the replica's pool, a remembered search's
    // epoch confirmed on the primary first) on identical data: what that path costs.
    if std::env::var("BENCH_READ_ON_PRIMARY").is_ok_and(|v| v == "1") {
        env.insert("TROVE_DATABASE_READ_URL", url.clone());
    }
    let mut config = Config::from_lookup(|k| {
        env.get(k).cloned().or_else(|| {
            (k.starts_with("TROVE_HNSW_")
                || k == "TROVE_WORKER_CONCURRENCY"
                || k == "TROVE_EMBED_THREADS")
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
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    Running {
        state,
        http: Http {
            client: reqwest::Client::new(),
            base,
            key: master.to_string(),
        },
        url,
        database,
        master,
        admin: admin_conn,
        nats: nats.to_owned(),
        stream,
        stop,
        server,
    }
}

impl Running {
    /// Stops the server, deletes its stream and drops its database (unless `keep`).
    pub async fn stop(self, keep: bool) {
        let Self {
            state,
            database,
            mut admin,
            nats,
            stream,
            stop,
            server,
            ..
        } = self;
        let _ = stop.send(());
        let _ = server.await;
        state.pool.close().await;
        drop(state);
        if let Ok(client) = async_nats::connect(nats).await {
            let _ = async_nats::jetstream::new(client)
                .delete_stream(&stream)
                .await;
        }
        if keep {
            println!("kept database {database}");
        } else {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await
            .ok();
        }
    }
}

/// Requests with the master key.
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
    pub key: String,
}

impl Http {
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.key)
            .header("x-api-key-secret", SECRET)
    }

    /// A JSON request that must succeed; its JSON answer.
    pub async fn json(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
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
    /// The hits' ids and scores, in the answer's order.
    pub async fn search(&self, path: &str, body: &Value) -> (Duration, Vec<(Uuid, f64)>) {
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
