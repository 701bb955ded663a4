//! The JetStream stream that carries document processing jobs.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::config::QueueNames;

/// How long the queue keeps a job (interface: 24 hours from submission).
pub const JOB_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// A handle on the queue. Cloning is cheap.
#[derive(Clone)]
pub struct Queue {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    names: QueueNames,
    replicas: ReplicaGauges,
}

/// The stream's replica count as last seen and the one configured, for the metrics of the
/// process (`trove_queue_stream_replicas`, `trove_queue_stream_replicas_setting`): they differ
/// when the stream was created with another count, or is not there yet (0).
#[derive(Clone)]
pub struct ReplicaGauges {
    pub stream: prometheus::IntGauge,
    pub setting: prometheus::IntGauge,
}

impl ReplicaGauges {
    fn new(setting: usize) -> Self {
        let gauge = |name: &str, help: &str| {
            prometheus::IntGauge::new(name, help)
                .unwrap_or_else(|_| unreachable!("valid metric name"))
        };
        let gauges = Self {
            stream: gauge(
                "trove_queue_stream_replicas",
                "replicas of the queue's stream as last seen (0: not seen yet)",
            ),
            setting: gauge(
                "trove_queue_stream_replicas_setting",
                "replicas the queue's stream is created with (TROVE_QUEUE_REPLICAS)",
            ),
        };
        gauges.setting.set(gauge_value(setting));
        gauges
    }

    /// Both gauges, to register with a process's registry.
    pub fn collectors(&self) -> [Box<dyn prometheus::core::Collector>; 2] {
        [
            Box::new(self.stream.clone()),
            Box::new(self.setting.clone()),
        ]
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stream's replica count (JetStream reads 0 as 1).
fn replicas_of(config: &stream::Config) -> usize {
    config.num_replicas.max(1)
}

impl Queue {
    /// Connects to NATS: to one of `urls` (servers of one cluster), moving to another one of
    /// them, or of the servers the cluster announces, when it goes away. The connection is
    /// retried in the background, so a NATS that is down at start is reported per request
    /// (`NATS error`) rather than by a crash.
    pub async fn connect(
        urls: &[String],
        names: QueueNames,
    ) -> Result<Self, async_nats::ConnectError> {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(5)))
            .connect(urls)
            .await?;
        let jetstream = jetstream::new(client.clone());
        let replicas = ReplicaGauges::new(names.replicas);
        Ok(Self {
            client,
            jetstream,
            names,
            replicas,
        })
    }

    /// The replica gauges (registered by the API's and the worker's metrics).
    pub fn replica_gauges(&self) -> &ReplicaGauges {
        &self.replicas
    }

    /// The names of the stream, subjects and consumer.
    pub fn names(&self) -> &QueueNames {
        &self.names
    }

    /// The raw client (health and shutdown).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The stream's configuration.
    fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.names.stream.clone(),
            subjects: vec![format!("{}.>", self.names.subject_prefix)],
            max_age: JOB_RETENTION,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            num_replicas: self.names.replicas,
            ..Default::default()
        }
    }

    /// Creates the stream when it does not exist, with `TROVE_QUEUE_REPLICAS` replicas. An
    /// existing stream is left as it is: when its replica count differs from the setting, a
    /// warning says so at every start and the metrics show both counts (an operator changes
    /// it with `nats stream edit <stream> --replicas <n>`).
    pub async fn ensure_stream(&self) -> Result<(), QueueError> {
        let stream = self
            .jetstream
            .get_or_create_stream(self.stream_config())
            .await
            .map_err(QueueError::new)?;
        let replicas = self.saw_stream(&stream.cached_info().config);
        if replicas != self.names.replicas {
            tracing::warn!(
                stream = %self.names.stream,
                stream_replicas = replicas,
                setting = self.names.replicas,
                "the queue's stream exists with another replica count than TROVE_QUEUE_REPLICAS; \
                 it is left as it is (nats stream edit <stream> --replicas <n> changes it)"
            );
        }
        Ok(())
    }

    /// Records the stream's replica count in its gauge and returns it.
    fn saw_stream(&self, config: &stream::Config) -> usize {
        let replicas = replicas_of(config);
        self.replicas.stream.set(gauge_value(replicas));
        replicas
    }

    /// Jobs waiting or being processed: the workers' consumer's jobs not yet delivered plus
    /// those delivered and not yet acknowledged. The stream keeps every job for
    /// [`JOB_RETENTION`] (done or not), so its message count is history, not the queue; before
    /// a worker created the consumer, every job in the stream is waiting.
    pub async fn jobs_in_progress(&self) -> Result<u64, QueueError> {
        let stream = match self.jetstream.get_stream(&self.names.stream).await {
            Ok(stream) => stream,
            // No stream yet (NATS was down at start): nothing is queued.
            Err(e)
                if matches!(
                    e.kind(),
                    jetstream::context::GetStreamErrorKind::JetStream(inner)
                        if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                return Ok(0);
            }
            Err(e) => return Err(QueueError::new(e)),
        };
        self.saw_stream(&stream.cached_info().config);
        match stream.consumer_info(&self.names.consumer).await {
            Ok(info) => Ok(info
                .num_pending
                .saturating_add(u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX))),
            Err(e)
                if matches!(
                    e.kind(),
                    jetstream::context::ConsumerInfoErrorKind::NotFound
                ) =>
            {
                let info = stream.get_info().await.map_err(QueueError::new)?;
                Ok(info.state.messages)
            }
            Err(e) => Err(QueueError::new(e)),
        }
    }
}

/// JetStream could not be reached or refused an operation; the text is its client's.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct QueueError(Box<dyn std::error::Error + Send + Sync>);

impl QueueError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }
}

/// A document processing job: which version to process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub pipeline_id: uuid::Uuid,
    pub document_id: uuid::Uuid,
    pub version: i64,
}

/// A backfill job: the next batch of one range of an association's backfill
/// (`store::vector_embeddings`), after the fragment `after` (from the range's start without).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackfillJob {
    pub pipeline_id: uuid::Uuid,
    pub backfill: uuid::Uuid,
    pub range: u32,
    pub after: Option<uuid::Uuid>,
}

impl BackfillJob {
    /// The first job of a range.
    pub fn start(pipeline_id: uuid::Uuid, vector_embedding_id: uuid::Uuid, range: u32) -> Self {
        Self {
            pipeline_id,
            backfill: vector_embedding_id,
            range,
            after: None,
        }
    }
}

/// What a queue message asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub enum Message {
    Backfill(BackfillJob),
    Document(Job),
}

impl Queue {
    /// Publishes backfill jobs and waits for JetStream to store them.
    pub async fn publish_backfill(&self, jobs: &[BackfillJob]) -> Result<(), QueueError> {
        for job in jobs {
            let subject = format!("{}.{}.backfill", self.names.subject_prefix, job.pipeline_id);
            self.publish_stored(subject, job).await?;
        }
        Ok(())
    }

    /// Publishes a job and waits for JetStream to store it.
    pub async fn publish(&self, job: &Job) -> Result<(), QueueError> {
        let subject = format!("{}.{}", self.names.subject_prefix, job.pipeline_id);
        self.publish_stored(subject, job).await
    }

    /// Publishes `message` as JSON on `subject` and waits for JetStream to store it.
    async fn publish_stored(
        &self,
        subject: String,
        message: &impl serde::Serialize,
    ) -> Result<(), QueueError> {
        let payload = serde_json::to_vec(message).map_err(QueueError::new)?;
        let ack = self
            .jetstream
            .publish(subject, payload.into())
            .await
            .map_err(QueueError::new)?;
        ack.await.map(|_| ()).map_err(QueueError::new)
    }

    /// The JetStream context (the worker's consumer).
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }
}
