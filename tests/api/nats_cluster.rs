//! A JetStream cluster: `TROVE_NATS_URL` listing several servers and `TROVE_QUEUE_REPLICAS`.
//! Each test starts its own three-node cluster on loopback from the `nats-server` binary.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use futures_util::TryStreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{AppOptions, TestApp, eventually, free_port, spawn_app_with};

/// One server of a [`Cluster`]: its arguments, kept to start it again.
struct Node {
    name: String,
    port: u16,
    args: Vec<String>,
    log: PathBuf,
    process: Option<Child>,
}

impl Node {
    /// Starts the server, its standard error appended to its log.
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new("nats-server")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server runs (scripts/test installs it)");
        self.process = Some(child);
    }
}

/// Three `nats-server` processes with JetStream, routed to one another, each with its store in
/// a temporary folder. Dropping it kills them and removes the folder.
pub struct Cluster {
    nodes: Vec<Node>,
    monitor_ports: Vec<u16>,
    dir: PathBuf,
}

impl Cluster {
    /// Starts the three servers and waits until JetStream has a meta leader and every server
    /// reports healthy.
    pub async fn start() -> Self {
        let tag = Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("trove-nats-cluster-{tag}"));
        std::fs::create_dir_all(&dir).expect("cluster folder");
        let ports: Vec<(u16, u16, u16)> = (0..3)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let mut nodes = Vec::new();
        for (i, (port, cluster_port, monitor_port)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c, _))| format!("nats://127.0.0.1:{c}"))
                .collect();
            let store = dir.join(&name);
            let mut args: Vec<String> =
                ["-js", "-a", "127.0.0.1", "-p"].map(str::to_owned).to_vec();
            args.extend([
                port.to_string(),
                "-m".to_owned(),
                monitor_port.to_string(),
                "-n".to_owned(),
                name.clone(),
                "-sd".to_owned(),
                store.to_string_lossy().into_owned(),
                "--cluster_name".to_owned(),
                format!("trove-{tag}"),
                "--cluster".to_owned(),
                format!("nats://127.0.0.1:{cluster_port}"),
                "--routes".to_owned(),
                routes.join(","),
            ]);
            let mut node = Node {
                log: dir.join(format!("{name}.log")),
                name,
                port: *port,
                args,
                process: None,
            };
            node.spawn();
            nodes.push(node);
        }
        let cluster = Self {
            nodes,
            monitor_ports: ports.iter().map(|(_, _, m)| *m).collect(),
            dir,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// Waits until every server sees the same JetStream meta leader among three peers and
    /// answers its health check (a server started again answers it once it has caught up with
    /// its streams: a minute at most on a loaded machine).
    pub async fn wait_ready(&self) {
        let http = reqwest::Client::new();
        eventually(
            "a three-node JetStream cluster ready",
            Duration::from_secs(60),
            || async {
                for port in &self.monitor_ports {
                    let base = format!("http://127.0.0.1:{port}");
                    let jsz: Value = http
                        .get(format!("{base}/jsz"))
                        .send()
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()?;
                    let meta = &jsz["meta_cluster"];
                    let leader = meta["leader"].as_str().unwrap_or_default();
                    if leader.is_empty() || meta["cluster_size"] != 3 {
                        return None;
                    }
                    let health = http.get(format!("{base}/healthz")).send().await.ok()?;
                    if health.status() != StatusCode::OK {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    }

    /// The client URLs of the servers still running, comma-separated with spaces.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .filter(|node| node.process.is_some())
            .map(|node| format!("nats://127.0.0.1:{}", node.port))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The server of that name.
    fn node(&mut self, name: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.name == name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    /// The client URLs of all three servers, running or not, comma-separated.
    pub fn all_urls(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("nats://127.0.0.1:{}", node.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills (SIGKILL) the server of that name.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.node(name).process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again the server of that name, killed earlier, on its ports and store.
    pub fn restart(&mut self, name: &str) {
        let node = self.node(name);
        assert!(node.process.is_none(), "{name} is running");
        node.spawn();
    }

    /// A JetStream context on the servers still running.
    pub async fn jetstream(&self) -> jetstream::Context {
        let urls: Vec<String> = self.urls().split(", ").map(str::to_owned).collect();
        let client = async_nats::ConnectOptions::new()
            .request_timeout(Some(Duration::from_secs(5)))
            .connect(urls)
            .await
            .expect("connects to the cluster");
        jetstream::new(client)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The stream's information, as the cluster gives it.
async fn stream_info(js: &jetstream::Context, stream: &str) -> jetstream::stream::Info {
    js.get_stream(stream)
        .await
        .expect("the stream exists")
        .get_info()
        .await
        .expect("stream info")
}

/// The server leading the stream, or with `consumer` the stream's consumer.
pub async fn leader(
    js: &jetstream::Context,
    stream: &str,
    consumer: Option<&str>,
) -> Option<String> {
    let stream = js.get_stream(stream).await.ok()?;
    let cluster = match consumer {
        None => stream.get_info().await.ok()?.cluster,
        Some(consumer) => stream.consumer_info(consumer).await.ok()?.cluster,
    };
    cluster?.leader
}

/// Asks the leader of the stream (or of its consumer) to step down until `target` leads it.
async fn move_leader(js: &jetstream::Context, stream: &str, consumer: Option<&str>, target: &str) {
    let subject = match consumer {
        None => format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        Some(consumer) => format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"),
    };
    eventually(
        &format!("{target} leads {stream} {consumer:?}"),
        Duration::from_secs(20),
        || {
            let subject = subject.clone();
            async move {
                let now = leader(js, stream, consumer).await?;
                if now == target {
                    return Some(());
                }
                let _ = js.client().request(subject, "".into()).await;
                // Until another leader is elected.
                tokio::time::sleep(Duration::from_millis(300)).await;
                None
            }
        },
    )
    .await;
}

/// The value of an unlabelled metric of `GET /metrics`.
async fn metric(app: &TestApp, name: &str) -> Option<f64> {
    let reply = app.req(Method::GET, "/metrics").send().await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.text.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name).then(|| value.parse().ok())?
    })
}

/// Submits `public` documents `<prefix>-0` … `<prefix>-<n-1>`; every submission must be
/// accepted.
async fn submit_all(app: &TestApp, pid: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let reply = app
            .submit(
                pid,
                &json!({
                    "external_identifier": format!("{prefix}-{i}"),
                    "classification": "public",
                    "text": format!("Document {i} of {prefix}, queued on a JetStream cluster."),
                }),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{prefix}-{i}: {}",
            reply.text
        );
    }
}

/// Waits until `expected` versions of the pipeline are `success`, then checks that each has
/// exactly one set of fragments (order ids 0..n, each once) and that there are no other
/// versions.
async fn assert_all_processed_once(app: &TestApp, pid: &str, expected: i64) {
    let pipeline = Uuid::parse_str(pid).unwrap();
    eventually(
        &format!("{expected} versions success"),
        Duration::from_secs(60),
        || async {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM documents WHERE pipeline_id = $1 AND status = 'success'",
            )
            .bind(pipeline)
            .fetch_one(&app.pool)
            .await
            .unwrap();
            assert!(
                done <= expected,
                "{done} versions success, {expected} submitted"
            );
            (done == expected).then_some(())
        },
    )
    .await;
    let (versions, statuses): (i64, Vec<String>) = sqlx::query_as(
        "SELECT count(*), array_agg(DISTINCT status::text) FROM documents WHERE pipeline_id = $1",
    )
    .bind(pipeline)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((versions, statuses), (expected, vec!["success".to_owned()]));
    let sets: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT count(f.id), count(DISTINCT f.order_id), coalesce(max(f.order_id) + 1, 0)::bigint
         FROM documents d LEFT JOIN fragments f
           ON f.document_id = d.id AND f.version = d.version
         WHERE d.pipeline_id = $1
         GROUP BY d.id, d.version",
    )
    .bind(pipeline)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(sets.len() as i64, expected);
    for (count, distinct, span) in sets {
        assert!(count > 0, "a version without fragments");
        assert_eq!((distinct, span), (count, count), "one set of fragments");
    }
}

/// With the three servers in `TROVE_NATS_URL` and `TROVE_QUEUE_REPLICAS=3`, the stream is
/// created with three replicas; documents submitted before and after the server Trove is
/// connected to dies are all processed, each once.
#[tokio::test]
async fn several_nats_urls_and_replicas_survive_a_dead_server() {
    let mut cluster = Cluster::start().await;
    let app = spawn_app_with(AppOptions {
        env: HashMap::from([
            ("TROVE_NATS_URL".to_owned(), cluster.urls()),
            ("TROVE_QUEUE_REPLICAS".to_owned(), "3".to_owned()),
        ]),
        ack_wait: Some(Duration::from_secs(3)),
        ..AppOptions::default()
    })
    .await;
    let js = cluster.jetstream().await;
    let info = stream_info(&js, &app.queue.stream).await;
    assert_eq!(info.config.num_replicas, 3);
    let peers = info.cluster.as_ref().map_or(0, |c| c.replicas.len());
    assert_eq!(
        peers, 2,
        "a leader and two other replicas: {:?}",
        info.cluster
    );
    assert_eq!(metric(&app, "trove_queue_stream_replicas").await, Some(3.0));
    assert_eq!(
        metric(&app, "trove_queue_stream_replicas_setting").await,
        Some(3.0)
    );

    let pid = app.new_pipeline_id(json!({})).await;
    submit_all(&app, &pid, "before", 10).await;
    assert_all_processed_once(&app, &pid, 10).await;

    // The server Trove is connected to leads the stream and the workers' consumer: its death
    // takes both leaders and Trove's connection at once.
    let connected = app.state.queue.client().server_info().server_name;
    move_leader(&js, &app.queue.stream, None, &connected).await;
    move_leader(
        &js,
        &app.queue.stream,
        Some(&app.queue.consumer),
        &connected,
    )
    .await;
    // Jobs waiting or in a worker's hands when the server goes away.
    submit_all(&app, &pid, "during", 10).await;
    assert_eq!(
        app.state.queue.client().server_info().server_name,
        connected
    );
    cluster.kill(&connected);

    // While the two servers left elect new leaders for the stream and the consumer,
    // submissions answer 500 `NATS error` (their versions `failed`, as when NATS is down);
    // probes on another pipeline show when they are accepted again.
    let probes = app.new_pipeline_id(json!({})).await;
    let mut probe = 0;
    eventually(
        "submissions accepted again",
        Duration::from_secs(20),
        || {
            probe += 1;
            let body = json!({"external_identifier": format!("probe-{probe}"), "classification": "public", "text": "probe"});
            let (app, probes) = (&app, &probes);
            async move {
                let reply = app.submit(probes, &body).await;
                if reply.status == StatusCode::CREATED {
                    return Some(());
                }
                assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", reply.text);
                assert_eq!(reply.message(), "NATS error");
                None
            }
        },
    )
    .await;
    assert_ne!(
        app.state.queue.client().server_info().server_name,
        connected,
        "Trove moved to a live server"
    );
    let js = cluster.jetstream().await;
    submit_all(&app, &pid, "after", 10).await;
    assert_all_processed_once(&app, &pid, 30).await;
    let info = stream_info(&js, &app.queue.stream).await;
    assert_eq!(info.config.num_replicas, 3);
    let subject = format!("{}.{pid}", app.queue.subject_prefix);
    let jobs: Vec<(String, usize)> = js
        .get_stream(&app.queue.stream)
        .await
        .unwrap()
        .info_with_subjects(&subject)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(jobs, [(subject, 30)], "one job per submission");
}

/// A stream created with one replica and `TROVE_QUEUE_REPLICAS=3`: left as it is and reported
/// in the metrics (and a warning); once changed with a stream update, the metric follows.
#[tokio::test]
async fn existing_stream_with_other_replicas_is_reported() {
    let cluster = Cluster::start().await;
    let first = spawn_app_with(AppOptions {
        env: HashMap::from([("TROVE_NATS_URL".to_owned(), cluster.urls())]),
        no_worker: true,
        ..AppOptions::default()
    })
    .await;
    let js = cluster.jetstream().await;
    assert_eq!(
        stream_info(&js, &first.queue.stream)
            .await
            .config
            .num_replicas,
        1
    );
    assert_eq!(
        metric(&first, "trove_queue_stream_replicas").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&first, "trove_queue_stream_replicas_setting").await,
        Some(1.0)
    );

    let second = spawn_app_with(AppOptions {
        env: HashMap::from([
            ("TROVE_NATS_URL".to_owned(), cluster.urls()),
            ("TROVE_QUEUE_REPLICAS".to_owned(), "3".to_owned()),
        ]),
        queue_of: Some(first.queue.clone()),
        no_worker: true,
        ..AppOptions::default()
    })
    .await;
    assert_eq!(second.queue.stream, first.queue.stream);
    assert_eq!(
        metric(&second, "trove_queue_stream_replicas").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&second, "trove_queue_stream_replicas_setting").await,
        Some(3.0)
    );
    // Not changed behind the operator's back.
    let info = stream_info(&js, &first.queue.stream).await;
    assert_eq!(info.config.num_replicas, 1);

    // The operator's change (`nats stream edit <stream> --replicas 3`) shows once the stream
    // is read again (`GET /statistics` reads it).
    let mut config = info.config;
    config.num_replicas = 3;
    js.update_stream(config).await.expect("replicas raised");
    let reply = second.get("/statistics?interval=0").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        metric(&second, "trove_queue_stream_replicas").await,
        Some(3.0)
    );
}

/// `TROVE_QUEUE_REPLICAS=3` on a single server: the server refuses the stream, Trove starts
/// anyway and keeps retrying, submissions answer 500 `NATS error`, and the metrics show no
/// stream against the setting.
#[tokio::test]
async fn replicas_above_a_single_server_are_refused_not_hidden() {
    let app = spawn_app_with(AppOptions {
        env: HashMap::from([("TROVE_QUEUE_REPLICAS".to_owned(), "3".to_owned())]),
        no_worker: true,
        ..AppOptions::default()
    })
    .await;
    assert_eq!(metric(&app, "trove_queue_stream_replicas").await, Some(0.0));
    assert_eq!(
        metric(&app, "trove_queue_stream_replicas_setting").await,
        Some(3.0)
    );
    let pid = app.new_pipeline_id(json!({})).await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "x", "classification": "public", "text": "no stream"}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.text
    );
    assert_eq!(reply.message(), "NATS error");
}
