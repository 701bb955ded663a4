//! Configuration from the environment (a `.env` file in the working directory is read first).
//!
//! A missing or malformed required value stops the process at start with a message naming the
//! variable. Secret values are kept in [`Secret`], whose `Debug` never shows them.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use uuid::Uuid;

use crate::license::License;

/// A value that must never reach logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The secret value, for the one place that needs it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where the worker serves its metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    Off,
    Addr(SocketAddr),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The master key's configured values (used only at installation).
#[derive(Debug, Clone)]
pub struct MasterKey {
    pub id: Uuid,
    pub secret: Secret<String>,
}

/// Names and timings of the JetStream objects; tests give each test its own names and
/// shorter timings.
#[derive(Debug, Clone)]
pub struct QueueNames {
    pub stream: String,
    pub subject_prefix: String,
    pub consumer: String,
    /// Delay before a failed job is delivered again (interface: 10 seconds).
    pub redelivery_delay: std::time::Duration,
    /// How long a fetched job may go without word from its worker (an acknowledgement, a
    /// return or an in-progress mark, sent every third of it) before JetStream delivers it
    /// again: a worker that dies gives its jobs back within it (`TROVE_QUEUE_ACK_WAIT`).
    pub ack_wait: std::time::Duration,
    /// How long after its submission a pending version whose job was never confirmed queued
    /// (its outbox entry is still there) has its job published again by the workers' sweep
    /// (`TROVE_PENDING_REPUBLISH_AFTER`).
    pub republish_after: std::time::Duration,
    /// Replicas of the stream when Trove creates it (`TROVE_QUEUE_REPLICAS`, 1–5). An existing
    /// stream keeps its own; a different count is reported, not changed.
    pub replicas: usize,
}

/// The default ack wait: a dead worker's jobs come back within 20 seconds, while a live
/// worker marks its batch in progress every 6.7 seconds.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(20);

/// The default delay after which the job of a version never confirmed queued is published
/// again: far above the time a submission takes to publish (its request times out after 5
/// seconds), so a slow publish is not doubled.
pub const DEFAULT_REPUBLISH_AFTER: Duration = Duration::from_secs(60);

impl Default for QueueNames {
    fn default() -> Self {
        Self {
            stream: "TROVE_DOCUMENTS".to_owned(),
            subject_prefix: "trove.documents".to_owned(),
            consumer: "trove-workers".to_owned(),
            redelivery_delay: std::time::Duration::from_secs(10),
            ack_wait: DEFAULT_ACK_WAIT,
            republish_after: DEFAULT_REPUBLISH_AFTER,
            replicas: 1,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: Secret<String>,
    /// Read replicas of the database (`TROVE_DATABASE_READ_URL`, comma-separated), where
    /// searches read fragments and vectors, each in turn. Secrets like the primary's URL.
    pub database_read_urls: Vec<Secret<String>>,
    /// How far behind the primary a replica may be and still serve searches
    /// (`TROVE_READ_REPLICA_MAX_LAG`).
    pub read_replica_max_lag: Duration,
    /// The NATS servers (`TROVE_NATS_URL`, comma-separated): the client connects to one of
    /// them and moves to another when it goes away. Their user info is a secret: never log
    /// them.
    pub nats_urls: Vec<String>,
    pub listen: SocketAddr,
    pub master_key: Option<MasterKey>,
    /// AES-256-GCM key for data at rest.
    pub secret: Secret<[u8; 32]>,
    pub license: License,
    pub sidecar_url: Option<String>,
    pub sidecar_listen: SocketAddr,
    pub run_worker: bool,
    /// Batches a worker processes at once (`TROVE_WORKER_CONCURRENCY`, 1–64).
    pub worker_concurrency: usize,
    pub worker_metrics_listen: MetricsListen,
    pub models_dir: Option<PathBuf>,
    /// Threads of each local embedding model (`TROVE_EMBED_THREADS`; 0: one per core).
    pub embed_threads: usize,
    pub log_filter: String,
    pub log_format: LogFormat,
    pub queue: QueueNames,
    /// Build parameters of the HNSW index of associations created from now on
    /// (`TROVE_HNSW_M`, `TROVE_HNSW_EF_CONSTRUCTION`).
    pub hnsw: HnswParams,
    /// How long a connection to a model server may take (`TROVE_LLM_CONNECT_TIMEOUT`).
    pub llm_connect_timeout: Duration,
    /// How long a model server may keep Trove waiting for the head of its answer or between
    /// two chunks of it (`TROVE_LLM_READ_TIMEOUT`).
    pub llm_read_timeout: Duration,
    /// Longest a database statement may run before the database cancels it
    /// (`TROVE_STATEMENT_TIMEOUT`; zero: no limit).
    pub statement_timeout: Duration,
    /// Fragments a burst of ingestion must bring at least, and more than half the rows an
    /// association holds, for the worker to drop its HNSW index and build it once the burst is
    /// stored (`TROVE_INDEX_DEFER_ROWS`; 0: never).
    pub index_defer_rows: u64,
    /// The largest request body of a file submission, `POST /pipelines/{pipeline_id}/files`
    /// (`TROVE_MAX_FILE_BYTES`).
    pub max_file_bytes: u64,
    /// The extensions of the interface switched on (`TROVE_EXTENSIONS`).
    pub extensions: Extensions,
    /// How long a search waits for its reranker before answering in the order it had
    /// (`TROVE_RERANK_TIMEOUT`, extension `hybrid`).
    pub rerank_timeout: Duration,
    /// How long a conversation context is kept after its last change before `trove serve`
    /// deletes it with its messages (`TROVE_CONTEXT_RETENTION`, extension `conversations`);
    /// `None`: until it is deleted.
    pub context_retention: Option<Duration>,
}

/// An extension of the interface that changes one of its answers: off unless a deployment
/// names it in `TROVE_EXTENSIONS` (capabilities that only add routes to a resource of the
/// interface need no switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// `hybrid` searches and placeholders, and rerankers.
    Hybrid,
    /// Conversation contexts and their messages (`/contexts`): paths the interface answers
    /// 404, and data kept per key.
    Conversations,
}

impl Extension {
    /// Every extension, in the order their names are listed.
    pub const ALL: [Self; 2] = [Self::Hybrid, Self::Conversations];

    /// The name in `TROVE_EXTENSIONS`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hybrid => "hybrid",
            Self::Conversations => "conversations",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The extensions a deployment switched on; none by default (exactly the interface).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extensions(u32);

impl Extensions {
    /// No extension: the interface exactly.
    pub const NONE: Self = Self(0);

    /// These extensions and `extension`.
    #[must_use]
    pub fn with(self, extension: Extension) -> Self {
        Self(self.0 | extension.bit())
    }

    /// Whether `extension` is on.
    pub fn has(self, extension: Extension) -> bool {
        self.0 & extension.bit() != 0
    }

    /// `TROVE_EXTENSIONS`: names separated by commas (spaces around them and empty items
    /// ignored); an unknown name is refused with the known ones.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut extensions = Self::NONE;
        for name in text
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let Some(extension) = Extension::ALL.into_iter().find(|e| e.name() == name) else {
                let known: Vec<&str> = Extension::ALL.iter().map(|e| e.name()).collect();
                return Err(format!(
                    "unknown extension {name:?}; known extensions: {}",
                    known.join(", ")
                ));
            };
            extensions = extensions.with(extension);
        }
        Ok(extensions)
    }
}

/// Default of `TROVE_INDEX_DEFER_ROWS`.
pub const DEFAULT_INDEX_DEFER_ROWS: u64 = 2000;

/// `TROVE_INDEX_DEFER_ROWS`: a whole number of fragments (0: never defer).
fn index_defer_rows(value: Option<String>) -> Result<u64, ConfigError> {
    let Some(value) = value else {
        return Ok(DEFAULT_INDEX_DEFER_ROWS);
    };
    value.trim().parse::<u64>().map_err(|_| {
        err(
            "TROVE_INDEX_DEFER_ROWS",
            format!("expected a whole number of fragments (0: never), got {value:?}"),
        )
    })
}

/// Default of `TROVE_MAX_FILE_BYTES` (64 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// `TROVE_MAX_FILE_BYTES`: a whole number of bytes, at least 1.
fn max_file_bytes(value: Option<String>) -> Result<u64, ConfigError> {
    let Some(value) = value else {
        return Ok(DEFAULT_MAX_FILE_BYTES);
    };
    match value.trim().parse::<u64>() {
        Ok(bytes) if bytes > 0 => Ok(bytes),
        _ => Err(err(
            "TROVE_MAX_FILE_BYTES",
            format!("expected a whole number of bytes above 0, got {value:?}"),
        )),
    }
}

/// The longest `TROVE_CONTEXT_RETENTION` (100 years): the sweep's cutoff stays a valid time.
pub const MAX_CONTEXT_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `TROVE_CONTEXT_RETENTION`: a duration written as the statistics' `interval` (`30d`, `12h`,
/// `1h30m`), more than 0 and at most [`MAX_CONTEXT_RETENTION`]; unset: contexts are kept
/// until deleted.
fn context_retention(value: Option<String>) -> Result<Option<Duration>, ConfigError> {
    let Some(value) = value else {
        return Ok(None);
    };
    crate::time::parse_prometheus_duration(value.trim())
        .filter(|retention| !retention.is_zero() && *retention <= MAX_CONTEXT_RETENTION)
        .map(Some)
        .ok_or_else(|| {
            err(
                "TROVE_CONTEXT_RETENTION",
                format!(
                    "expected a duration such as 30d, 12h or 1h30m (units y, w, d, h, m, s, ms, \
                     largest first; more than 0, at most 100y), got {value:?}"
                ),
            )
        })
}

/// Default of `TROVE_STATEMENT_TIMEOUT`.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// `TROVE_STATEMENT_TIMEOUT`: seconds from 0 (no limit) to 86400.
fn statement_timeout(value: Option<String>) -> Result<Duration, ConfigError> {
    let Some(value) = value else {
        return Ok(DEFAULT_STATEMENT_TIMEOUT);
    };
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=86_400.0).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            err(
                "TROVE_STATEMENT_TIMEOUT",
                format!("expected seconds (0 for no limit, at most 86400), got {value:?}"),
            )
        })
}

/// A configuration error: names the variable and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {reason}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub reason: String,
}

fn err(variable: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        reason: reason.into(),
    }
}

/// Whether a string is a valid API key secret: 48 characters of `A–Z a–z 0–9 + /`.
pub fn is_valid_key_secret(secret: &str) -> bool {
    secret.len() == 48
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

impl Config {
    /// Reads `.env` (if present) and the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        // A missing .env file is normal; a malformed one is reported.
        if let Err(e) = dotenvy::dotenv()
            && !e.not_found()
        {
            return Err(err(".env", e.to_string()));
        }
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Builds the configuration from a lookup function (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let database_url =
            get("TROVE_DATABASE_URL").ok_or_else(|| err("TROVE_DATABASE_URL", "required"))?;
        let nats_urls = nats_urls_from(&get)?;
        let database_read_urls = database_read_urls_from(&get)?;
        let listen = parse_addr("TROVE_LISTEN", get("TROVE_LISTEN"), "127.0.0.1:8080")?;
        let master_key = master_key_from(&get)?;
        let secret = secret_from(&get)?;

        let license = match get("TROVE_LICENSE") {
            None => License::unlimited(),
            Some(path) => {
                License::from_file(&PathBuf::from(path)).map_err(|e| err("TROVE_LICENSE", e))?
            }
        };

        let run_worker = match get("TROVE_WORKER").as_deref() {
            None | Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(_) => return Err(err("TROVE_WORKER", "must be true, false, 1 or 0")),
        };
        let worker_metrics_listen = match get("TROVE_WORKER_METRICS_LISTEN").as_deref() {
            Some("off") => MetricsListen::Off,
            other => MetricsListen::Addr(parse_addr(
                "TROVE_WORKER_METRICS_LISTEN",
                other.map(str::to_owned),
                "0.0.0.0:9090",
            )?),
        };
        let hnsw = hnsw_from(&get)?;
        let llm_connect_timeout = seconds(&get, "TROVE_LLM_CONNECT_TIMEOUT", 10.0)?;
        let (ack_wait, republish_after) = queue_timings_from(&get)?;
        let llm_read_timeout = seconds(&get, "TROVE_LLM_READ_TIMEOUT", 120.0)?;
        let rerank_timeout = seconds(&get, "TROVE_RERANK_TIMEOUT", 3.0)?;
        let log_format = match get("TROVE_LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(_) => return Err(err("TROVE_LOG_FORMAT", "must be text or json")),
        };

        Ok(Self {
            database_url: Secret::new(database_url),
            database_read_urls,
            read_replica_max_lag: seconds(&get, "TROVE_READ_REPLICA_MAX_LAG", 5.0)?,
            nats_urls,
            listen,
            master_key,
            secret: Secret::new(secret),
            license,
            sidecar_url: get("TROVE_SIDECAR_URL"),
            sidecar_listen: parse_addr(
                "TROVE_SIDECAR_LISTEN",
                get("TROVE_SIDECAR_LISTEN"),
                "127.0.0.1:50051",
            )?,
            run_worker,
            worker_concurrency: worker_concurrency_from(&get)?,
            worker_metrics_listen,
            models_dir: get("TROVE_MODELS_DIR").map(PathBuf::from),
            embed_threads: embed_threads_from(&get)?,
            log_filter: get("TROVE_LOG").unwrap_or_else(|| "info".to_owned()),
            log_format,
            queue: QueueNames {
                ack_wait,
                republish_after,
                replicas: queue_replicas_from(&get)?,
                ..QueueNames::default()
            },
            hnsw,
            llm_connect_timeout,
            llm_read_timeout,
            statement_timeout: statement_timeout(get("TROVE_STATEMENT_TIMEOUT"))?,
            index_defer_rows: index_defer_rows(get("TROVE_INDEX_DEFER_ROWS"))?,
            max_file_bytes: max_file_bytes(get("TROVE_MAX_FILE_BYTES"))?,
            extensions: match get("TROVE_EXTENSIONS") {
                Some(names) => {
                    Extensions::parse(&names).map_err(|reason| err("TROVE_EXTENSIONS", reason))?
                }
                None => Extensions::NONE,
            },
            rerank_timeout,
            context_retention: context_retention(get("TROVE_CONTEXT_RETENTION"))?,
        })
    }
}

/// A lookup of non-empty environment values, as `Config::from_lookup` reads them.
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `TROVE_MASTER_KEY_ID` and `TROVE_MASTER_KEY_SECRET`: both or neither.
fn master_key_from(get: Lookup<'_>) -> Result<Option<MasterKey>, ConfigError> {
    let master_key = match (get("TROVE_MASTER_KEY_ID"), get("TROVE_MASTER_KEY_SECRET")) {
        (None, None) => None,
        (Some(id), Some(secret)) => {
            let id = Uuid::parse_str(&id).map_err(|e| err("TROVE_MASTER_KEY_ID", e.to_string()))?;
            if !is_valid_key_secret(&secret) {
                return Err(err(
                    "TROVE_MASTER_KEY_SECRET",
                    "must be 48 characters of A-Z a-z 0-9 + /",
                ));
            }
            Some(MasterKey {
                id,
                secret: Secret::new(secret),
            })
        }
        (None, Some(_)) => {
            return Err(err(
                "TROVE_MASTER_KEY_ID",
                "required with TROVE_MASTER_KEY_SECRET",
            ));
        }
        (Some(_), None) => {
            return Err(err(
                "TROVE_MASTER_KEY_SECRET",
                "required with TROVE_MASTER_KEY_ID",
            ));
        }
    };
    Ok(master_key)
}

/// `TROVE_SECRET`: base64 of the 32-byte key for data at rest.
fn secret_from(get: Lookup<'_>) -> Result<[u8; 32], ConfigError> {
    let secret = get("TROVE_SECRET").ok_or_else(|| err("TROVE_SECRET", "required"))?;
    let secret = base64::engine::general_purpose::STANDARD
        .decode(secret.trim())
        .map_err(|_| err("TROVE_SECRET", "must be base64"))?;
    let secret: [u8; 32] = secret
        .try_into()
        .map_err(|_| err("TROVE_SECRET", "must be base64 of exactly 32 bytes"))?;
    Ok(secret)
}

/// `TROVE_HNSW_M` and `TROVE_HNSW_EF_CONSTRUCTION`, within pgvector's bounds.
fn hnsw_from(get: Lookup<'_>) -> Result<HnswParams, ConfigError> {
    let number = |variable: &'static str, default: u32| match get(variable) {
        None => Ok(default),
        Some(value) => value
            .trim()
            .parse::<u32>()
            .map_err(|_| err(variable, format!("expected a whole number, got {value:?}"))),
    };
    let m = number("TROVE_HNSW_M", HnswParams::DEFAULT.m())?;
    HnswParams::check_m(m).map_err(|reason| err("TROVE_HNSW_M", reason))?;
    let ef_construction = number(
        "TROVE_HNSW_EF_CONSTRUCTION",
        HnswParams::DEFAULT.ef_construction(),
    )?;
    HnswParams::new(m, ef_construction).map_err(|reason| err("TROVE_HNSW_EF_CONSTRUCTION", reason))
}

/// A duration in seconds (more than 0, at most a day), `default` when unset.
fn seconds(get: Lookup<'_>, variable: &'static str, default: f64) -> Result<Duration, ConfigError> {
    match get(variable) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(value) => value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                err(
                    variable,
                    format!("expected seconds (more than 0, at most 86400), got {value:?}"),
                )
            }),
    }
}

/// `TROVE_QUEUE_ACK_WAIT` and `TROVE_PENDING_REPUBLISH_AFTER`, each from 1 to 3600 seconds.
fn queue_timings_from(get: Lookup<'_>) -> Result<(Duration, Duration), ConfigError> {
    let ack_wait = seconds(get, "TROVE_QUEUE_ACK_WAIT", DEFAULT_ACK_WAIT.as_secs_f64())?;
    if ack_wait < Duration::from_secs(1) || ack_wait > Duration::from_secs(3600) {
        return Err(err(
            "TROVE_QUEUE_ACK_WAIT",
            "expected seconds from 1 to 3600",
        ));
    }
    let republish_after = seconds(
        get,
        "TROVE_PENDING_REPUBLISH_AFTER",
        DEFAULT_REPUBLISH_AFTER.as_secs_f64(),
    )?;
    if republish_after < Duration::from_secs(1) || republish_after > Duration::from_secs(3600) {
        return Err(err(
            "TROVE_PENDING_REPUBLISH_AFTER",
            "expected seconds from 1 to 3600",
        ));
    }
    Ok((ack_wait, republish_after))
}

/// Step loops of a worker by default: while one batch waits for Postgres, another is split and
/// embedded and a third fetched. On the 2-core service benchmark (20,000 documents through the
/// batch endpoint) three loops stored the burst in 3.9 s where two took 5–6 s (the CPUs idle
/// a tenth of that time).
pub const DEFAULT_WORKER_CONCURRENCY: usize = 3;

/// `TROVE_WORKER_CONCURRENCY`: 1 to 64, default [`DEFAULT_WORKER_CONCURRENCY`].
fn worker_concurrency_from(get: Lookup<'_>) -> Result<usize, ConfigError> {
    match get("TROVE_WORKER_CONCURRENCY") {
        None => Ok(DEFAULT_WORKER_CONCURRENCY),
        Some(value) => value
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                err(
                    "TROVE_WORKER_CONCURRENCY",
                    format!("expected a number from 1 to 64, got {value:?}"),
                )
            }),
    }
}

/// The NATS server of `TROVE_NATS_URL` unset.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// `TROVE_NATS_URL`: one or more NATS server addresses, comma-separated.
fn nats_urls_from(get: Lookup<'_>) -> Result<Vec<String>, ConfigError> {
    let Some(value) = get("TROVE_NATS_URL") else {
        return Ok(vec![DEFAULT_NATS_URL.to_owned()]);
    };
    address_list("TROVE_NATS_URL", &value, |entry| {
        entry
            .parse::<async_nats::ServerAddr>()
            .map(drop)
            .map_err(|error| format!("is not a NATS server address ({error})"))
    })
}

/// `TROVE_DATABASE_READ_URL`: none, or one or more Postgres URLs, comma-separated.
fn database_read_urls_from(get: Lookup<'_>) -> Result<Vec<Secret<String>>, ConfigError> {
    let Some(value) = get("TROVE_DATABASE_READ_URL") else {
        return Ok(Vec::new());
    };
    let urls = address_list("TROVE_DATABASE_READ_URL", &value, |entry| {
        // The rest of the URL is read when the replica's pool is made, at start too.
        let postgres = matches!(
            entry.split_once("://"),
            Some(("postgres" | "postgresql", rest)) if !rest.is_empty()
        );
        postgres
            .then_some(())
            .ok_or_else(|| "is not a Postgres URL".to_owned())
    })?;
    Ok(urls.into_iter().map(Secret::new).collect())
}

/// A comma-separated list of server addresses (spaces around each are ignored), each checked
/// by `check`. An empty entry or one `check` refuses stops the start; the message gives the
/// entry's position, never its text (it may hold a password).
fn address_list(
    variable: &'static str,
    value: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>, ConfigError> {
    value
        .split(',')
        .enumerate()
        .map(|(index, entry)| {
            let position = index + 1;
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(err(
                    variable,
                    format!("entry {position} of the comma-separated list is empty"),
                ));
            }
            check(entry)
                .map(|()| entry.to_owned())
                .map_err(|reason| err(variable, format!("entry {position} {reason}")))
        })
        .collect()
}

/// `TROVE_QUEUE_REPLICAS`: replicas of the stream Trove creates, 1 (default) to 5.
fn queue_replicas_from(get: Lookup<'_>) -> Result<usize, ConfigError> {
    match get("TROVE_QUEUE_REPLICAS") {
        None => Ok(1),
        Some(value) => value
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=5).contains(n))
            .ok_or_else(|| {
                err(
                    "TROVE_QUEUE_REPLICAS",
                    format!("expected a number from 1 to 5, got {value:?}"),
                )
            }),
    }
}

/// `TROVE_EMBED_THREADS`: threads of each local model, 0 (default) for one per core.
fn embed_threads_from(get: Lookup<'_>) -> Result<usize, ConfigError> {
    match get("TROVE_EMBED_THREADS") {
        None => Ok(0),
        Some(value) => value.trim().parse().map_err(|_| {
            err(
                "TROVE_EMBED_THREADS",
                format!("expected a number of threads (0: one per core), got {value:?}"),
            )
        }),
    }
}

fn parse_addr(
    variable: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let value = value.unwrap_or_else(|| default.to_owned());
    // Accept host names such as `localhost:8080` as well as literal addresses.
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    use std::net::ToSocketAddrs;
    value
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| err(variable, format!("not a socket address: {value}")))
}

/// The build parameters of an association's HNSW index: `m`, the links a vector keeps per
/// layer (twice that on the bottom layer), and `ef_construction`, the candidate list searched
/// to choose them. Larger values give a better graph (higher recall at the same search cost)
/// and cost more per stored vector; they are fixed when the index is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HnswParams {
    m: u32,
    ef_construction: u32,
}

impl HnswParams {
    /// Trove's defaults: `m` 16 and `ef_construction` 128. On all-MiniLM-L6-v2 vectors (384
    /// dimensions) of the search benchmark's 100,000 fragments, with the candidate list of
    /// [`crate::retrieval::cost`] (200 there), they gave recall@5 0.965 and recall@10 0.956,
    /// against 0.874 and 0.856 with the former defaults, for searches about 1.4 times as long
    /// and a build 3 times as long (51 s against 17 s). `ef_construction` 256 reached the same
    /// recall at a list of 150 in about the same time but took twice as long to build, which
    /// ingestion pays on every burst. See docs/benchmarks.md.
    pub const DEFAULT: Self = Self {
        m: 16,
        ef_construction: 128,
    };

    /// The defaults of earlier versions (`m` 10, `ef_construction` 64), chosen on hash
    /// vectors; on real model vectors they gave recall@5 0.90 at 15,000 fragments and 0.84 at
    /// 100,000. The worker rebuilds
    /// the indexes built with them with the configured parameters when these differ
    /// ([`crate::ingest::worker::Worker::upgrade_an_index`]).
    pub const FORMER_DEFAULT: Self = Self {
        m: 10,
        ef_construction: 64,
    };

    /// Checked parameters: `m` 2–100, `ef_construction` 4–1000 and at least `2 × m`
    /// (pgvector's own bounds).
    pub fn new(m: u32, ef_construction: u32) -> Result<Self, String> {
        Self::check_m(m)?;
        if !(4..=1000).contains(&ef_construction) || ef_construction < 2 * m {
            return Err(format!(
                "ef_construction must be from 4 to 1000 and at least 2 × m ({}), got {ef_construction}",
                2 * m
            ));
        }
        Ok(Self { m, ef_construction })
    }

    /// Checks `m` alone (2–100): with a valid `m`, [`Self::new`] can only refuse
    /// `ef_construction`.
    pub fn check_m(m: u32) -> Result<(), String> {
        if (2..=100).contains(&m) {
            Ok(())
        } else {
            Err(format!("m must be from 2 to 100, got {m}"))
        }
    }

    pub fn m(self) -> u32 {
        self.m
    }

    pub fn ef_construction(self) -> u32 {
        self.ef_construction
    }
}

impl Default for HnswParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const SECRET: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    /// The configuration of the required values and `extra`.
    fn with(extra: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        let mut pairs = vec![
            ("TROVE_DATABASE_URL", "postgres://x"),
            ("TROVE_SECRET", SECRET),
        ];
        pairs.extend_from_slice(extra);
        Config::from_lookup(lookup(&pairs))
    }

    #[test]
    fn required_values_are_named() {
        let e = Config::from_lookup(lookup(&[])).unwrap_err();
        assert_eq!(e.variable, "TROVE_DATABASE_URL");
        let e = Config::from_lookup(lookup(&[("TROVE_DATABASE_URL", "postgres://x")])).unwrap_err();
        assert_eq!(e.variable, "TROVE_SECRET");
        let e = Config::from_lookup(lookup(&[
            ("TROVE_DATABASE_URL", "postgres://x"),
            ("TROVE_SECRET", "abc"),
        ]))
        .unwrap_err();
        assert_eq!(e.variable, "TROVE_SECRET");
    }

    #[test]
    fn defaults_apply() {
        let c = Config::from_lookup(lookup(&[
            ("TROVE_DATABASE_URL", "postgres://x"),
            ("TROVE_SECRET", SECRET),
        ]))
        .unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.nats_urls, ["nats://127.0.0.1:4222"]);
        assert_eq!(c.queue.replicas, 1);
        assert!(c.run_worker);
        assert!(c.master_key.is_none());
        assert_eq!(format!("{:?}", c.database_url), "Secret(***)");
        assert_eq!(c.queue.ack_wait, Duration::from_secs(20));
        assert_eq!(c.queue.republish_after, Duration::from_secs(60));
    }

    #[test]
    fn queue_timings_are_checked() {
        let c = with(&[("TROVE_QUEUE_ACK_WAIT", "7.5")]).unwrap();
        assert_eq!(c.queue.ack_wait, Duration::from_millis(7500));
        let c = with(&[("TROVE_PENDING_REPUBLISH_AFTER", "90")]).unwrap();
        assert_eq!(c.queue.republish_after, Duration::from_secs(90));
        for variable in ["TROVE_QUEUE_ACK_WAIT", "TROVE_PENDING_REPUBLISH_AFTER"] {
            for value in ["0.5", "3601", "x", "-1"] {
                let e = with(&[(variable, value)]).unwrap_err();
                assert_eq!(e.variable, variable, "{value}");
            }
        }
    }

    #[test]
    fn nats_servers_are_a_list() {
        let c = with(&[("TROVE_NATS_URL", "nats://127.0.0.1:4222")]).unwrap();
        assert_eq!(c.nats_urls, ["nats://127.0.0.1:4222"]);
        let c = with(&[(
            "TROVE_NATS_URL",
            " nats://a:4222 ,nats://b:4223,  tls://user:pw@c:4224 ",
        )])
        .unwrap();
        assert_eq!(
            c.nats_urls,
            ["nats://a:4222", "nats://b:4223", "tls://user:pw@c:4224"]
        );
        // A host without a scheme is a NATS address, as the client reads it.
        assert_eq!(
            with(&[("TROVE_NATS_URL", "a:4222")]).unwrap().nats_urls,
            ["a:4222"]
        );
        for (value, reason) in [
            (
                "nats://a:4222,,nats://b:4222",
                "entry 2 of the comma-separated list is empty",
            ),
            (
                "nats://a:4222,",
                "entry 2 of the comma-separated list is empty",
            ),
            (
                ",nats://a:4222",
                "entry 1 of the comma-separated list is empty",
            ),
            (" , ", "entry 1 of the comma-separated list is empty"),
            (
                "nats://a:4222, http://user:hunter2@b:80",
                "entry 2 is not a NATS server address",
            ),
            ("nats://a:99999", "entry 1 is not a NATS server address"),
        ] {
            let e = with(&[("TROVE_NATS_URL", value)]).unwrap_err();
            assert_eq!(e.variable, "TROVE_NATS_URL", "{value}");
            assert!(e.reason.starts_with(reason), "{value}: {}", e.reason);
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn read_replicas_are_a_list() {
        let c = with(&[]).unwrap();
        assert!(c.database_read_urls.is_empty());
        assert_eq!(c.read_replica_max_lag, Duration::from_secs(5));
        let c = with(&[
            (
                "TROVE_DATABASE_READ_URL",
                " postgres://r1/db , postgresql://u:hunter2@r2:5433/db",
            ),
            ("TROVE_READ_REPLICA_MAX_LAG", "0.5"),
        ])
        .unwrap();
        let urls: Vec<&str> = c
            .database_read_urls
            .iter()
            .map(|u| u.expose().as_str())
            .collect();
        assert_eq!(
            urls,
            ["postgres://r1/db", "postgresql://u:hunter2@r2:5433/db"]
        );
        assert_eq!(c.read_replica_max_lag, Duration::from_millis(500));
        assert!(!format!("{c:?}").contains("hunter2"));
        for (value, reason) in [
            (
                "postgres://r1/db,",
                "entry 2 of the comma-separated list is empty",
            ),
            (
                "postgres://r1/db, mysql://u:hunter2@r2/db",
                "entry 2 is not a Postgres URL",
            ),
        ] {
            let e = with(&[("TROVE_DATABASE_READ_URL", value)]).unwrap_err();
            assert_eq!(e.variable, "TROVE_DATABASE_READ_URL", "{value}");
            assert_eq!(e.reason, reason, "{value}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
        let e = with(&[("TROVE_READ_REPLICA_MAX_LAG", "0")]).unwrap_err();
        assert_eq!(e.variable, "TROVE_READ_REPLICA_MAX_LAG");
    }

    #[test]
    fn queue_replicas_are_checked() {
        assert_eq!(with(&[]).unwrap().queue.replicas, 1);
        for n in 1..=5 {
            let value = n.to_string();
            let c = Config::from_lookup(lookup(&[
                ("TROVE_DATABASE_URL", "postgres://x"),
                ("TROVE_SECRET", SECRET),
                ("TROVE_QUEUE_REPLICAS", &value),
            ]))
            .unwrap();
            assert_eq!(c.queue.replicas, n);
        }
        assert_eq!(
            with(&[("TROVE_QUEUE_REPLICAS", " 3 ")])
                .unwrap()
                .queue
                .replicas,
            3
        );
        for value in ["0", "6", "-1", "x", "2.5", "99999999999999999999999"] {
            let e = with(&[("TROVE_QUEUE_REPLICAS", value)]).unwrap_err();
            assert_eq!(e.variable, "TROVE_QUEUE_REPLICAS", "{value}");
            assert!(e.reason.contains("from 1 to 5"), "{value}: {}", e.reason);
        }
    }

    #[test]
    fn index_parameters_are_checked() {
        assert_eq!(with(&[]).unwrap().hnsw, HnswParams::DEFAULT);
        let c = with(&[("TROVE_HNSW_M", "12"), ("TROVE_HNSW_EF_CONSTRUCTION", "40")]).unwrap();
        assert_eq!((c.hnsw.m(), c.hnsw.ef_construction()), (12, 40));
        for (pairs, variable) in [
            (&[("TROVE_HNSW_M", "x")][..], "TROVE_HNSW_M"),
            (&[("TROVE_HNSW_M", "200")][..], "TROVE_HNSW_M"),
            (
                &[("TROVE_HNSW_EF_CONSTRUCTION", "-1")][..],
                "TROVE_HNSW_EF_CONSTRUCTION",
            ),
            (
                &[("TROVE_HNSW_M", "40"), ("TROVE_HNSW_EF_CONSTRUCTION", "64")][..],
                "TROVE_HNSW_EF_CONSTRUCTION",
            ),
        ] {
            assert_eq!(with(pairs).unwrap_err().variable, variable, "{pairs:?}");
        }
    }

    #[test]
    fn statement_timeout_is_checked() {
        assert_eq!(
            with(&[]).unwrap().statement_timeout,
            DEFAULT_STATEMENT_TIMEOUT
        );
        assert_eq!(
            with(&[]).unwrap().index_defer_rows,
            DEFAULT_INDEX_DEFER_ROWS
        );
        assert_eq!(
            with(&[("TROVE_INDEX_DEFER_ROWS", "0")])
                .unwrap()
                .index_defer_rows,
            0
        );
        assert!(with(&[("TROVE_INDEX_DEFER_ROWS", "-1")]).is_err());
        assert_eq!(with(&[]).unwrap().max_file_bytes, DEFAULT_MAX_FILE_BYTES);
        assert_eq!(
            with(&[("TROVE_MAX_FILE_BYTES", "1024")])
                .unwrap()
                .max_file_bytes,
            1024
        );
        assert!(with(&[("TROVE_MAX_FILE_BYTES", "0")]).is_err());
        let c = with(&[("TROVE_STATEMENT_TIMEOUT", "0.25")]).unwrap();
        assert_eq!(c.statement_timeout, Duration::from_millis(250));
        let c = with(&[("TROVE_STATEMENT_TIMEOUT", "0")]).unwrap();
        assert_eq!(c.statement_timeout, Duration::ZERO);
        for value in ["-1", "86401", "x", "NaN"] {
            let e = with(&[("TROVE_STATEMENT_TIMEOUT", value)]).unwrap_err();
            assert_eq!(e.variable, "TROVE_STATEMENT_TIMEOUT", "{value}");
        }
    }

    #[test]
    fn extensions_are_off_unless_named() {
        let c = with(&[]).unwrap();
        assert_eq!(c.extensions, Extensions::NONE);
        assert!(!c.extensions.has(Extension::Hybrid));
        let c = with(&[("TROVE_EXTENSIONS", " hybrid, ,hybrid")]).unwrap();
        assert!(c.extensions.has(Extension::Hybrid));
        assert!(!c.extensions.has(Extension::Conversations));
        let c = with(&[("TROVE_EXTENSIONS", "conversations")]).unwrap();
        assert!(c.extensions.has(Extension::Conversations));
        assert!(!c.extensions.has(Extension::Hybrid));
        let c = with(&[("TROVE_EXTENSIONS", "hybrid,conversations")]).unwrap();
        assert!(c.extensions.has(Extension::Hybrid) && c.extensions.has(Extension::Conversations));
        let e = with(&[("TROVE_EXTENSIONS", "hybrid,fuzzy")]).unwrap_err();
        assert_eq!(e.variable, "TROVE_EXTENSIONS");
        assert_eq!(
            e.reason,
            "unknown extension \"fuzzy\"; known extensions: hybrid, conversations"
        );
    }

    #[test]
    fn context_retention_is_a_positive_duration() {
        assert_eq!(with(&[]).unwrap().context_retention, None);
        for (value, expected) in [
            ("30d", Duration::from_secs(30 * 24 * 3600)),
            (" 1h30m ", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("100y", MAX_CONTEXT_RETENTION),
        ] {
            let c = with(&[("TROVE_CONTEXT_RETENTION", value)]).unwrap();
            assert_eq!(c.context_retention, Some(expected), "{value}");
        }
        for value in ["0", "0s", "30", "1.5h", "-1d", "1m1h", "101y", "x"] {
            let e = with(&[("TROVE_CONTEXT_RETENTION", value)]).unwrap_err();
            assert_eq!(e.variable, "TROVE_CONTEXT_RETENTION", "{value}");
            assert!(
                e.reason.ends_with(&format!("got {value:?}")),
                "{}",
                e.reason
            );
        }
    }

    #[test]
    fn master_secret_is_checked() {
        let e = Config::from_lookup(lookup(&[
            ("TROVE_DATABASE_URL", "postgres://x"),
            ("TROVE_SECRET", SECRET),
            (
                "TROVE_MASTER_KEY_ID",
                "00000000-0000-0000-0000-000000000001",
            ),
            ("TROVE_MASTER_KEY_SECRET", "short"),
        ]))
        .unwrap_err();
        assert_eq!(e.variable, "TROVE_MASTER_KEY_SECRET");
    }
}
