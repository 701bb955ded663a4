//! Test harness: every test gets a fresh database (cloned from a migrated template), its own
//! JetStream stream and subjects, and a Trove server on a free port, reached over real HTTP.

use std::collections::HashMap;

use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, PgPool};
use trove::config::{Config, QueueNames};
use trove::startup::Application;
use uuid::Uuid;

use crate::database::{admin_url, url_with_db};

/// The master key every test app is installed with.
pub const MASTER_SECRET: &str = "MasterMasterMasterMasterMasterMasterMaster+/0123";

/// A running test application.
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub master_id: Uuid,
    pub master_secret: String,
    pub pool: PgPool,
    pub database: String,
    pub queue: QueueNames,
    /// The application's shared state (to drive a worker step by step).
    pub state: trove::state::AppState,
}

/// A response: status, headers and body (JSON when it parses, else a string).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub body: Value,
}

impl Reply {
    /// The `error.message` of a JSON error body.
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

fn nats_url() -> String {
    std::env::var("TROVE_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:54222".to_owned())
}

/// The template's name changes whenever a migration changes.
fn template_name() -> String {
    let mut hasher = Sha256::new();
    for m in trove::store::migrations::MIGRATIONS {
        hasher.update(m.sql.as_bytes());
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("trove_test_tpl_{hex}")
}

/// A test database is used for less than this (a test binary runs for minutes).
const STALE_AFTER_SECONDS: u64 = 1800;

/// Drops, once per test process, the test databases of earlier runs: named
/// `trove_test_<unix seconds>_<uuid>` and older than [`STALE_AFTER_SECONDS`], or named
/// `trove_test_<uuid>` (no time: always stale). Tests leave their
/// databases behind; a server that runs the tests again and again would otherwise collect
/// thousands, and autovacuum visits every one. Templates of earlier migrations go too. A
/// database still connected to is kept (`DROP DATABASE` refuses it).
async fn drop_stale_databases(conn: &mut PgConnection) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database
         WHERE datname ~ '^trove_test_([0-9]+_)?[0-9a-f]{32}$'",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("list test databases");
    for name in names {
        let created = name
            .strip_prefix("trove_test_")
            .and_then(|rest| rest.split_once('_'))
            .and_then(|(secs, _)| secs.parse::<u64>().ok());
        if created.is_some_and(|secs| now.saturating_sub(secs) < STALE_AFTER_SECONDS) {
            continue;
        }
        drop_unless_connected(conn, &name).await;
    }
    // Templates of earlier migrations.
    let templates: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database
         WHERE datname ~ '^trove_test_tpl_[0-9a-f]{12}$' AND datname <> $1",
    )
    .bind(template_name())
    .fetch_all(&mut *conn)
    .await
    .expect("list test templates");
    for name in templates {
        drop_unless_connected(conn, &name).await;
    }
}

/// `DROP DATABASE` without force: refused (and left) while anything is connected to it.
async fn drop_unless_connected(conn: &mut PgConnection, name: &str) {
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name}"
    )))
    .execute(&mut *conn)
    .await;
}

/// Creates (once, under an advisory lock) the migrated template, then a fresh database from it.
async fn fresh_database() -> String {
    let admin = admin_url();
    let mut conn = PgConnection::connect(&admin)
        .await
        .expect("test database server reachable");
    sqlx::query("SELECT pg_advisory_lock(7243)")
        .execute(&mut conn)
        .await
        .expect("lock");
    let template = template_name();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&template)
            .fetch_one(&mut conn)
            .await
            .expect("check template");
    if !exists {
        let building = format!("{template}_building");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {building}"
        )))
        .execute(&mut conn)
        .await
        .expect("drop stale template");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {building}")))
            .execute(&mut conn)
            .await
            .expect("create template");
        let pool = PgPool::connect(&url_with_db(&admin, &building))
            .await
            .expect("connect template");
        trove::store::migrations::migrate(&pool)
            .await
            .expect("migrate template");
        pool.close().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {building} RENAME TO {template}"
        )))
        .execute(&mut conn)
        .await
        .expect("publish template");
    }
    drop_stale_databases(&mut conn).await;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let name = format!("trove_test_{created}_{}", Uuid::new_v4().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name} TEMPLATE {template}"
    )))
    .execute(&mut conn)
    .await
    .expect("create test database");
    sqlx::query("SELECT pg_advisory_unlock(7243)")
        .execute(&mut conn)
        .await
        .expect("unlock");
    conn.close().await.ok();
    name
}

/// Options of a test app.
#[derive(Default)]
pub struct AppOptions {
    /// Extra environment values (e.g. `TROVE_LICENSE`).
    pub env: HashMap<String, String>,
    /// An existing database to reuse (restart tests).
    pub database: Option<String>,
    /// The stream, subjects and consumer of an earlier app to use (its timings and replicas
    /// are this app's own).
    pub queue_of: Option<QueueNames>,
    /// Do not start the in-process worker.
    pub no_worker: bool,
    /// Shorter redelivery delay of failed jobs (default 10 s).
    pub redelivery_delay: Option<std::time::Duration>,
    /// Shorter ack wait (default Trove's, 20 s), to test a worker killed before acknowledging.
    pub ack_wait: Option<std::time::Duration>,
    /// Shorter delay after which the sweep publishes again the job of a version never
    /// confirmed queued (default Trove's, 60 s).
    pub republish_after: Option<std::time::Duration>,
}

/// Starts an app on a fresh database.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(AppOptions::default()).await
}

/// Starts an app with options.
pub async fn spawn_app_with(options: AppOptions) -> TestApp {
    if std::env::var("TEST_LOG").is_ok() {
        trove::telemetry::init("info,sqlx=warn", trove::config::LogFormat::Text);
    }
    let database = match options.database {
        Some(db) => db,
        None => fresh_database().await,
    };
    let database_url = url_with_db(&admin_url(), &database);
    // Apps sharing a database share the master key that installed it.
    let master_id = options
        .env
        .get("TROVE_MASTER_KEY_ID")
        .map_or_else(Uuid::new_v4, |id| {
            Uuid::parse_str(id).expect("a master key id")
        });
    let mut env: HashMap<String, String> = HashMap::from([
        ("TROVE_DATABASE_URL".to_owned(), database_url.clone()),
        ("TROVE_NATS_URL".to_owned(), nats_url()),
        ("TROVE_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("TROVE_MASTER_KEY_ID".to_owned(), master_id.to_string()),
        (
            "TROVE_MASTER_KEY_SECRET".to_owned(),
            MASTER_SECRET.to_owned(),
        ),
        (
            "TROVE_SECRET".to_owned(),
            "dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=".to_owned(),
        ),
        ("TROVE_WORKER_METRICS_LISTEN".to_owned(), "off".to_owned()),
        (
            "TROVE_WORKER".to_owned(),
            if options.no_worker { "false" } else { "true" }.to_owned(),
        ),
    ]);
    if let Ok(dir) = std::env::var("TROVE_MODELS_DIR") {
        env.insert("TROVE_MODELS_DIR".to_owned(), dir);
    }
    env.extend(options.env);
    let mut config = Config::from_lookup(|k| env.get(k).cloned()).expect("test configuration");
    let tag = Uuid::new_v4().simple().to_string();
    let (stream, subject_prefix, consumer) = match options.queue_of {
        Some(names) => (names.stream, names.subject_prefix, names.consumer),
        None => (
            format!("TEST_{tag}"),
            format!("test.{tag}"),
            format!("test-{tag}"),
        ),
    };
    config.queue = QueueNames {
        stream,
        subject_prefix,
        consumer,
        redelivery_delay: options
            .redelivery_delay
            .unwrap_or(std::time::Duration::from_secs(10)),
        ack_wait: options.ack_wait.unwrap_or(trove::config::DEFAULT_ACK_WAIT),
        republish_after: options
            .republish_after
            .unwrap_or(trove::config::DEFAULT_REPUBLISH_AFTER),
        replicas: config.queue.replicas,
    };
    let queue = config.queue.clone();
    let app = Application::build(config)
        .await
        .expect("application starts");
    let address = format!("http://{}", app.local_addr());
    let pool = app.state().pool.pg_pool().clone();
    let state = app.state().clone();
    tokio::spawn(app.run_until(std::future::pending()));
    TestApp {
        address,
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client"),
        master_id,
        master_secret: MASTER_SECRET.to_owned(),
        pool,
        database,
        queue,
        state,
    }
}

/// An API key as `(id, secret)`: anything [`Req::as_key`] takes.
pub trait Credentials {
    fn pair(&self) -> (String, String);
}

impl Credentials for (String, String) {
    fn pair(&self) -> (String, String) {
        self.clone()
    }
}

impl Credentials for (&str, &str) {
    fn pair(&self) -> (String, String) {
        (self.0.to_owned(), self.1.to_owned())
    }
}

impl Credentials for (&String, &str) {
    fn pair(&self) -> (String, String) {
        (self.0.clone(), self.1.to_owned())
    }
}

impl Credentials for (&String, &String) {
    fn pair(&self) -> (String, String) {
        (self.0.clone(), self.1.clone())
    }
}

impl<C: Credentials + ?Sized> Credentials for &C {
    fn pair(&self) -> (String, String) {
        (**self).pair()
    }
}

/// A request to the test app, built with [`TestApp::req`]: no key unless [`Req::as_key`] or
/// [`Req::as_master`] sets one.
#[must_use = "a request does nothing until sent"]
pub struct Req {
    builder: reqwest::RequestBuilder,
    key: Option<(String, String)>,
    master: (String, String),
}

impl Req {
    /// Sends the key as `x-api-key` / `x-api-key-secret`.
    #[expect(
        clippy::wrong_self_convention,
        reason = "a builder step, read as `req.as_key(key)` like `app.as_key(key)`"
    )]
    pub fn as_key(mut self, key: impl Credentials) -> Self {
        self.key = Some(key.pair());
        self
    }

    /// Sends the master key.
    #[expect(
        clippy::wrong_self_convention,
        reason = "a builder step, read as `req.as_master()`"
    )]
    pub fn as_master(mut self) -> Self {
        self.key = Some(self.master.clone());
        self
    }

    /// A JSON body.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, body: &T) -> Self {
        self.builder = self.builder.json(body);
        self
    }

    /// A JSON body when there is one.
    pub fn json_opt<T: serde::Serialize + ?Sized>(self, body: Option<&T>) -> Self {
        match body {
            Some(body) => self.json(body),
            None => self,
        }
    }

    /// A raw body (no content type unless set with [`Req::header`]).
    pub fn body(mut self, body: impl Into<reqwest::Body>) -> Self {
        self.builder = self.builder.body(body);
        self
    }

    /// One more header (added after any earlier one of the same name).
    pub fn header<V>(mut self, name: &str, value: V) -> Self
    where
        V: TryInto<reqwest::header::HeaderValue>,
        V::Error: std::fmt::Debug,
    {
        let value = value.try_into().expect("header value");
        self.builder = self.builder.header(name, value);
        self
    }

    fn build(self) -> reqwest::RequestBuilder {
        match self.key {
            Some((id, secret)) => self
                .builder
                .header("x-api-key", id)
                .header("x-api-key-secret", secret),
            None => self.builder,
        }
    }

    /// Sends the request and reads the whole response.
    pub async fn send(self) -> Reply {
        self.try_send().await.expect("request sent")
    }

    /// Sends the request and reads the whole response; a request that could not be sent is an
    /// error rather than a failed test.
    pub async fn try_send(self) -> Result<Reply, reqwest::Error> {
        Ok(Reply::read(self.build().send().await?).await)
    }

    /// Sends the request; the response unread (a test that reads a stream as it comes).
    pub async fn stream(self) -> reqwest::Response {
        self.build().send().await.expect("request sent")
    }
}

impl Reply {
    /// Reads a whole response.
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            text,
            body,
        }
    }
}

/// The shorthands of [`TestApp`] with a key other than the master key ([`TestApp::as_key`]).
pub struct Keyed<'a> {
    app: &'a TestApp,
    key: (String, String),
}

impl Keyed<'_> {
    fn req(&self, method: Method, path: &str) -> Req {
        self.app.req(method, path).as_key(&self.key)
    }

    /// `GET` with this key.
    pub async fn get(&self, path: &str) -> Reply {
        self.req(Method::GET, path).send().await
    }

    /// `POST` of a JSON body with this key.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.req(Method::POST, path).json(body).send().await
    }

    /// `PATCH` of a JSON body with this key.
    pub async fn patch(&self, path: &str, body: &Value) -> Reply {
        self.req(Method::PATCH, path).json(body).send().await
    }

    /// `DELETE` with this key.
    pub async fn delete(&self, path: &str) -> Reply {
        self.req(Method::DELETE, path).send().await
    }
}

impl TestApp {
    /// A request without a key: add one with [`Req::as_key`] or [`Req::as_master`].
    pub fn req(&self, method: Method, path: &str) -> Req {
        Req {
            builder: self
                .client
                .request(method, format!("{}{}", self.address, path)),
            key: None,
            master: self.master_key(),
        }
    }

    /// The shorthands below sent with another key: `app.as_key(&key).get(path)`.
    pub fn as_key(&self, key: impl Credentials) -> Keyed<'_> {
        Keyed {
            app: self,
            key: key.pair(),
        }
    }

    /// `GET` with the master key.
    pub async fn get(&self, path: &str) -> Reply {
        self.req(Method::GET, path).as_master().send().await
    }

    /// `POST` of a JSON body with the master key.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.req(Method::POST, path)
            .as_master()
            .json(body)
            .send()
            .await
    }

    /// `PATCH` of a JSON body with the master key.
    pub async fn patch(&self, path: &str, body: &Value) -> Reply {
        self.req(Method::PATCH, path)
            .as_master()
            .json(body)
            .send()
            .await
    }

    /// `DELETE` with the master key.
    pub async fn delete(&self, path: &str) -> Reply {
        self.req(Method::DELETE, path).as_master().send().await
    }

    /// Creates a key with the master key; returns `(id, secret)`.
    pub async fn create_key(&self, permissions: Value, classifications: Value) -> (String, String) {
        let reply = self
            .post(
                "/api-keys",
                &serde_json::json!({"name": "test key", "permissions": permissions, "classifications": classifications}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        (
            reply.body["id"].as_str().expect("id").to_owned(),
            reply.body["secret"].as_str().expect("secret").to_owned(),
        )
    }

    /// The master key as a `(id, secret)` pair.
    pub fn master_key(&self) -> (String, String) {
        (self.master_id.to_string(), self.master_secret.clone())
    }

    /// Creates a key with the master key from a full create body; returns the 201 body.
    pub async fn create_key_with(&self, body: Value) -> Value {
        let reply = self.post("/api-keys", &body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }

    /// Applies permission entries to a key with the master key (expects 200).
    pub async fn grant(&self, key_id: &str, entries: Value) {
        let reply = self
            .post(&format!("/api-keys/{key_id}/permissions"), &entries)
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
}

/// The `(id, secret)` pair of a create response.
pub fn key_of(created: &Value) -> (String, String) {
    (
        created["id"].as_str().expect("id").to_owned(),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

/// Asserts a JSON error body: status, exact `error.message`, JSON content type.
pub fn assert_error(reply: &Reply, status: StatusCode, message: &str) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.message(), message, "{}", reply.text);
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "content type {:?}",
        reply.header("content-type")
    );
}

/// Asserts a plain-text (non-JSON) error: status and a text prefix.
pub fn assert_plain(reply: &Reply, status: StatusCode, prefix: &str) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert!(
        reply.text.starts_with(prefix),
        "expected a body starting {prefix:?}, got {:?}",
        reply.text
    );
    assert_not_json(reply);
}

/// Asserts a plain-text (non-JSON) error: status and exact body.
pub fn assert_text(reply: &Reply, status: StatusCode, text: &str) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.text, text);
    assert_not_json(reply);
}

fn assert_not_json(reply: &Reply) {
    assert!(
        !reply
            .header("content-type")
            .unwrap_or_default()
            .contains("json"),
        "plain-text error with content type {:?}",
        reply.header("content-type")
    );
}

/// Asserts an RFC 3339 UTC timestamp ending in `Z`; returns it parsed.
pub fn assert_utc_timestamp(value: &Value) -> chrono::DateTime<chrono::Utc> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("timestamp: {value}"));
    assert!(text.ends_with('Z'), "not UTC with Z: {text}");
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("not RFC 3339: {text}: {e}"))
        .with_timezone(&chrono::Utc)
}

/// Whether a string is a UUID.
pub fn is_uuid(text: &str) -> bool {
    Uuid::parse_str(text).is_ok()
}

/// Whether `text` ends with `at line <n> column <m>` (serde's position suffix).
pub fn ends_with_line_column(text: &str) -> bool {
    let Some(index) = text.rfind(" at line ") else {
        return false;
    };
    let rest = &text[index + " at line ".len()..];
    let Some((line, column)) = rest.split_once(" column ") else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(line) && digits(column)
}

/// The names of the 13 object types, alphabetically.
pub const OBJECT_TYPES: [&str; 13] = [
    "agents",
    "api-keys",
    "context-messages",
    "contexts",
    "documents",
    "embedding-models",
    "embedding-providers",
    "llms",
    "permissions",
    "pipelines",
    "taxonomies",
    "text-splitter-providers",
    "text-splitters",
];

/// The fields of a search result (a fragment with its `embedding`), sorted.
pub const SEARCH_RESULT_FIELDS: [&str; 10] = [
    "classification",
    "document_id",
    "embedding",
    "expired_at",
    "id",
    "metadata",
    "order_id",
    "page_content",
    "score",
    "version",
];

/// The all-zero object id of type entries.
pub const TYPE_ENTRY: &str = "00000000-0000-0000-0000-000000000000";

impl TestApp {
    /// Creates a `hash` embedding model of `dimensions` with the master key; returns the 201
    /// body.
    pub async fn create_hash_model(&self, name: &str, dimensions: u32) -> Value {
        let reply = self
            .post(
                "/embedding-models",
                &serde_json::json!({
                    "name": name,
                    "provider": "hash",
                    "model_name": "feature-hash",
                    "parameters": {"dimensions": dimensions},
                }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }
}

// ---------------------------------------------------------------------------------------------
// Pipelines, documents and the ingestion worker.
// ---------------------------------------------------------------------------------------------

/// Starts an app whose worker is driven by the test (`TestApp::step`).
pub async fn spawn_app_without_worker() -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        ..AppOptions::default()
    })
    .await
}

/// Starts an app whose worker is driven by the test, with these environment values (e.g.
/// `TROVE_EXTENSIONS`; an empty value is not set).
pub async fn spawn_app_without_worker_with(env: &[(&str, &str)]) -> TestApp {
    spawn_app_with(AppOptions {
        env: env
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        no_worker: true,
        ..AppOptions::default()
    })
    .await
}

/// A temporary file (e.g. a license), removed when dropped.
pub struct TempFile(std::path::PathBuf);

impl TempFile {
    pub fn new(content: &str) -> Self {
        let path = std::env::temp_dir().join(format!("trove-test-{}.json", Uuid::new_v4()));
        std::fs::write(&path, content).expect("write temporary file");
        Self(path)
    }

    pub fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The value of an unlabelled-or-labelled metric line `name{...} value` / `name value` of an
/// exposition (the first such line), if present.
pub fn metric_value(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// The string at `value[key]` (panics with the value otherwise).
pub fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key:?} in {value}"))
}

/// `value[key]` as a UUID.
pub fn uuid_of(value: &Value, key: &str) -> Uuid {
    Uuid::parse_str(str_of(value, key)).unwrap_or_else(|e| panic!("{key}: {e} in {value}"))
}

/// The sorted keys of a JSON object.
pub fn keys_of(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// `GET path` with the master key, expecting 200; the body.
pub async fn ok(app: &TestApp, path: &str) -> Value {
    let reply = app.get(path).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
    reply.body
}

/// The keys of a JSON object, as a set.
pub fn key_set(value: &Value) -> std::collections::BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// `data` of a list envelope.
pub fn data_of(reply: &Reply) -> &Vec<Value> {
    reply.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data array: {}", reply.text))
}

impl TestApp {
    /// The id of a seeded object by name (`/embedding-models`, `/text-splitters`).
    pub async fn seeded(&self, path: &str, name: &str) -> String {
        let reply = self.get(&format!("{path}?name={name}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.body["data"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no seeded {path} named {name}"))
            .to_owned()
    }

    /// The body of a pipeline on the `default` model and the `recursive-character` splitter,
    /// classifications `public`, `internal` (internal inherits public), schema `year`
    /// (integer), `team` (string); `extra` fields replace these.
    pub async fn pipeline_body(&self, extra: Value) -> Value {
        let model = self.seeded("/embedding-models", "default").await;
        let splitter = self.seeded("/text-splitters", "recursive-character").await;
        let mut body = serde_json::json!({
            "name": format!("p-{}", Uuid::new_v4().simple()),
            "embedding_model_id": model,
            "default_text_splitter_id": splitter,
            "classifications": ["public", "internal"],
            "hierarchy": [["internal", "public"]],
            "metadata_schema": {"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}}},
        });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        body
    }

    /// Creates a pipeline (see [`TestApp::pipeline_body`]); returns the 201 body.
    pub async fn new_pipeline(&self, extra: Value) -> Value {
        let body = self.pipeline_body(extra).await;
        let reply = self.post("/pipelines", &body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }

    /// `POST /pipelines/{pid}/documents/batch` with the master key (expects 201).
    pub async fn submit_batch(&self, pid: &str, documents: Vec<Value>) {
        let reply = self
            .post(
                &format!("/pipelines/{pid}/documents/batch"),
                &serde_json::json!({"documents": documents}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }

    /// Creates a pipeline; returns its id.
    pub async fn new_pipeline_id(&self, extra: Value) -> String {
        str_of(&self.new_pipeline(extra).await, "id").to_owned()
    }

    /// `POST /pipelines/{pid}/documents` with the master key.
    pub async fn submit(&self, pid: &str, body: &Value) -> Reply {
        self.post(&format!("/pipelines/{pid}/documents"), body)
            .await
    }

    /// Submits a `public` document version; returns the 201 body.
    pub async fn submit_text(&self, pid: &str, external_identifier: &str, text: &str) -> Value {
        let reply = self
            .submit(
                pid,
                &serde_json::json!({"external_identifier": external_identifier, "classification": "public", "text": text}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }

    /// A worker on this app's queue and database.
    pub async fn worker(&self) -> trove::ingest::worker::Worker {
        trove::startup::build_worker(&self.state)
            .await
            .expect("worker")
    }

    /// One worker step (a fresh worker, 300 ms fetch wait).
    pub async fn step(&self) -> trove::ingest::worker::StepOutcome {
        self.worker()
            .await
            .step(std::time::Duration::from_millis(300))
            .await
            .expect("step")
    }

    /// `SELECT count(*) ... WHERE ... = $1` with one UUID bound.
    pub async fn count(&self, sql: &'static str, id: &str) -> i64 {
        let id = Uuid::parse_str(id).expect("uuid");
        sqlx::query_scalar(sql)
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The value of a metric of `GET /metrics` (0 when absent).
    pub async fn api_metric(&self, name: &str) -> f64 {
        let reply = self.req(Method::GET, "/metrics").send().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        metric_value(&reply.text, name).unwrap_or(0.0)
    }
}

/// The value of a worker metric (panics when absent).
pub fn worker_metric(worker: &trove::ingest::worker::Worker, name: &str) -> f64 {
    let text = worker.metrics.render();
    metric_value(&text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Serves `endpoint` on a free port of 127.0.0.1 in the background (fake upstream servers);
/// returns its address.
pub fn serve_on_loopback<E>(endpoint: E) -> std::net::SocketAddr
where
    E: poem::IntoEndpoint + Send + 'static,
    E::Endpoint: 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    listener.set_nonblocking(true).expect("nonblocking");
    let acceptor = poem::listener::TcpAcceptor::from_std(listener).expect("acceptor");
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(endpoint));
    address
}

// ---------------------------------------------------------------------------------------------
// Lists, errors and permission messages shared by the resource modules.
// ---------------------------------------------------------------------------------------------

/// The `name` of each object of a list envelope's `data`.
pub fn names(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|o| o["name"].as_str().expect("name").to_owned())
        .collect()
}

/// The `id` of each object of a list envelope's `data`.
pub fn ids(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|o| o["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Asserts `400 Invalid order_by parameter` whose `details` list the refused fields.
pub fn assert_invalid_order_by(reply: &Reply, fields: Value) {
    assert_error(reply, StatusCode::BAD_REQUEST, "Invalid order_by parameter");
    assert_eq!(reply.body["error"]["details"], fields, "{}", reply.text);
}

/// Asserts `400 Invalid parameter` whose `details.error` is `reason`.
pub fn assert_invalid(reply: &Reply, reason: &str) {
    assert_error(reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"]["error"], reason,
        "{}",
        reply.text
    );
}

/// Asserts `400 Invalid parameter` whose `details` are exactly `{"error": reason}`.
pub fn assert_invalid_parameter(reply: &Reply, reason: &str) {
    assert_error(reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"],
        serde_json::json!({"error": reason}),
        "{}",
        reply.text
    );
}

/// Asserts a 404 with `message` whose `details.id` is `id`.
pub fn assert_not_found(reply: &Reply, message: &str, id: &str) {
    assert_error(reply, StatusCode::NOT_FOUND, message);
    assert_eq!(reply.body["error"]["details"]["id"], id, "{}", reply.text);
}

/// Asserts a 404 with `message` whose `details` are exactly `{"id": id}`.
pub fn assert_not_found_with_id(reply: &Reply, message: &str, id: &str) {
    assert_error(reply, StatusCode::NOT_FOUND, message);
    assert_eq!(
        reply.body["error"]["details"],
        serde_json::json!({"id": id}),
        "{}",
        reply.text
    );
}

/// The 403 message of a key lacking `level` (`WRITE`, `READ | EXECUTE`, …) on the objects of
/// `object_type` (`id` of one object, or none for the type, as on creation).
pub fn denied(level: &str, object_type: &str, id: Option<&str>) -> String {
    let id = id.map_or_else(|| "None".to_owned(), |id| format!("Some({id})"));
    format!(
        "Unauthorized: access level AccessLevel({level}) required for {object_type} with id {id}"
    )
}

/// The 403 message of a change without write on the object `id`.
pub fn write_denied(object_type: &str, id: &str) -> String {
    denied("WRITE", object_type, Some(id))
}

/// The 403 message of a creation without write on the type.
pub fn create_denied(object_type: &str) -> String {
    denied("WRITE", object_type, None)
}

// ---------------------------------------------------------------------------------------------
// Time, ports and licenses.
// ---------------------------------------------------------------------------------------------

/// Fails the test instead of hanging it (10 s).
pub async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), future)
        .await
        .expect("finished in time")
}

/// Polls `check` until it returns `Some`, for at most `timeout` (every fiftieth of it, between
/// 10 and 200 ms); returns that value, or fails the test saying what was awaited. `check` may
/// itself assert on what it sees meanwhile.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    let every = (timeout / 50).clamp(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(200),
    );
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "still waiting after {timeout:?}: {what}"
        );
        tokio::time::sleep(every).await;
    }
}

/// Waits (60 s at most) until `count` versions of the pipeline are `success`.
pub async fn wait_until_processed(app: &TestApp, pid: &str, count: usize) {
    eventually(
        &format!("{count} documents processed"),
        std::time::Duration::from_secs(60),
        || async {
            let reply = app
                .get(&format!("/pipelines/{pid}/documents?status=success"))
                .await;
            (data_of(&reply).len() == count).then_some(())
        },
    )
    .await;
}

/// A free TCP port of 127.0.0.1 (free when asked: the caller binds it soon after).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    listener.local_addr().expect("address").port()
}

/// Every byte but ASCII letters and digits as `%XX`.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Starts an app under the license `content` (with other `options`); the file lives as long
/// as the returned [`TempFile`].
pub async fn spawn_app_with_license(content: &str, options: AppOptions) -> (TestApp, TempFile) {
    let file = TempFile::new(content);
    let mut options = options;
    options.env.insert("TROVE_LICENSE".to_owned(), file.path());
    (spawn_app_with(options).await, file)
}

/// The `content-type` of a response ("" when absent).
pub fn content_type(response: &reqwest::Response) -> &str {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The id of the (only) embedding model of a pipeline body.
pub fn model_of(pipeline: &Value) -> String {
    let models = pipeline["embedding_models"]
        .as_object()
        .expect("embedding models");
    str_of(models.values().next().expect("one model"), "id").to_owned()
}

/// A text of `count` paragraphs about `word` (several fragments with the default splitter).
pub fn paragraphs(word: &str, count: usize) -> String {
    (0..count)
        .map(|i| format!("{word} paragraph {i} with a few more words to fill the line."))
        .collect::<Vec<_>>()
        .join("\n\n")
}
