//! Every metric the service exposes, named in one place.
//!
//! The exposition format is the plain-text one with `# TYPE` lines only (no `# HELP`); names
//! carry no added suffix. Values accumulate from process start.

use prometheus::{
    Counter, CounterVec, Encoder, GaugeVec, HistogramOpts, HistogramVec, Opts, Registry,
    TextEncoder,
};

/// Buckets of `axum_http_requests_duration_seconds`.
pub const DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Metrics of the API server.
#[derive(Clone)]
pub struct ApiMetrics {
    registry: Registry,
    pub requests_total: CounterVec,
    pub requests_duration: HistogramVec,
    pub requests_pending: GaugeVec,
    pub document_queue_added: Counter,
    /// Key checks that could not read the database (answered 401 as the interface says):
    /// `trove_key_check_unavailable_total`, Trove's own name beside the interface's metrics.
    pub key_check_unavailable: Counter,
    /// Searches answered on the key check and search context remembered from an earlier
    /// search, confirmed current inside their statement (`auth::search_memory`):
    /// `trove_searches_remembered_total`.
    pub searches_remembered: Counter,
    /// Searches whose reranker failed and that came back in their order before reranking,
    /// by reason (`timeout`, `connection`, `status`, `malformed`):
    /// `trove_rerank_failures_total` (extension `hybrid`).
    pub rerank_failures: CounterVec,
}

impl ApiMetrics {
    /// Creates the registry. Registration of these fixed, distinct names cannot fail; if it
    /// ever did, the metric would simply be missing from the exposition.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests_total = CounterVec::new(
            Opts::new(
                "axum_http_requests_total",
                "HTTP requests whose response head was returned",
            ),
            &["method", "status", "endpoint"],
        );
        let requests_duration = HistogramVec::new(
            HistogramOpts::new(
                "axum_http_requests_duration_seconds",
                "seconds to response head",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["method", "status", "endpoint"],
        );
        let requests_pending = GaugeVec::new(
            Opts::new(
                "axum_http_requests_pending",
                "requests in progress, including open streams",
            ),
            &["method", "endpoint"],
        );
        let document_queue_added = Counter::new(
            "service_document_queue_added",
            "document create requests past key check and body parsing",
        );
        let key_check_unavailable = Counter::new(
            "trove_key_check_unavailable_total",
            "key checks answered 401 because the database could not be read",
        );
        let searches_remembered = Counter::new(
            "trove_searches_remembered_total",
            "searches answered on a remembered key check and context, confirmed by their statement",
        );
        let rerank_failures = CounterVec::new(
            Opts::new(
                "trove_rerank_failures_total",
                "searches answered in their order before reranking because the reranker failed",
            ),
            &["reason"],
        );
        // Constructors only fail on invalid names, and these names are valid literals.
        let (
            Ok(requests_total),
            Ok(requests_duration),
            Ok(requests_pending),
            Ok(document_queue_added),
            Ok(key_check_unavailable),
            Ok(searches_remembered),
            Ok(rerank_failures),
        ) = (
            requests_total,
            requests_duration,
            requests_pending,
            document_queue_added,
            key_check_unavailable,
            searches_remembered,
            rerank_failures,
        )
        else {
            unreachable!("metric names are valid literals")
        };
        for collector in [
            Box::new(requests_total.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(requests_duration.clone()),
            Box::new(requests_pending.clone()),
            Box::new(document_queue_added.clone()),
            Box::new(key_check_unavailable.clone()),
            Box::new(searches_remembered.clone()),
            Box::new(rerank_failures.clone()),
        ] {
            if let Err(error) = registry.register(collector) {
                tracing::error!(%error, "metric registration failed");
            }
        }
        Self {
            registry,
            requests_total,
            requests_duration,
            requests_pending,
            document_queue_added,
            key_check_unavailable,
            searches_remembered,
            rerank_failures,
        }
    }

    /// Adds metrics kept elsewhere (the queue's replica gauges).
    pub fn register(
        &self,
        collectors: impl IntoIterator<Item = Box<dyn prometheus::core::Collector>>,
    ) {
        for collector in collectors {
            if let Err(error) = self.registry.register(collector) {
                tracing::error!(%error, "metric registration failed");
            }
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Encodes a registry as text with `# TYPE` lines only.
pub fn render(registry: &Registry) -> String {
    let mut buffer = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&registry.gather(), &mut buffer) {
        tracing::error!(%error, "metrics encoding failed");
    }
    let text = String::from_utf8_lossy(&buffer);
    let mut out = String::with_capacity(text.len());
    for line in text.lines().filter(|l| !l.starts_with("# HELP")) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Metrics of an ingestion worker (served on `TROVE_WORKER_METRICS_LISTEN`).
#[derive(Clone)]
pub struct WorkerMetrics {
    registry: Registry,
    pub processed: Counter,
    pub success: Counter,
    pub skip: Counter,
    pub failed: Counter,
    pub processed_latency: prometheus::Gauge,
    pub text_splitter_latency: prometheus::Gauge,
    pub embedding_latency: prometheus::Gauge,
    /// Fragments left to embed per association being backfilled (label `vector_embedding`).
    pub backfill_remaining: prometheus::IntGaugeVec,
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, description: &str| {
            let opts = Opts::new(name, description).const_label("description", description);
            let counter =
                Counter::with_opts(opts).unwrap_or_else(|_| unreachable!("valid metric name"));
            if let Err(error) = registry.register(Box::new(counter.clone())) {
                tracing::error!(%error, "metric registration failed");
            }
            counter
        };
        let gauge = |name: &str, description: &str| {
            let opts = Opts::new(name, description).const_label("description", description);
            let gauge = prometheus::Gauge::with_opts(opts)
                .unwrap_or_else(|_| unreachable!("valid metric name"));
            if let Err(error) = registry.register(Box::new(gauge.clone())) {
                tracing::error!(%error, "metric registration failed");
            }
            gauge
        };
        Self {
            processed: counter(
                "service_document_queue_processed",
                "Documents taken from the queue for processing",
            ),
            success: counter(
                "service_document_queue_success",
                "Documents stored, or deleted before processing",
            ),
            skip: counter(
                "service_document_queue_skip",
                "Documents no longer pending, or with empty text",
            ),
            failed: counter(
                "service_document_queue_failed",
                "Documents whose processing failed",
            ),
            processed_latency: gauge(
                "service_document_queue_processed_latency",
                "Seconds spent processing document groups",
            ),
            text_splitter_latency: gauge(
                "service_document_queue_text_splitter_latency",
                "Seconds spent splitting text",
            ),
            embedding_latency: gauge(
                "service_document_queue_embedding_latency",
                "Seconds spent computing embeddings",
            ),
            backfill_remaining: {
                let gauge = prometheus::IntGaugeVec::new(
                    Opts::new(
                        "trove_backfill_fragments_remaining",
                        "Fragments an embedding model added to a pipeline has still to embed",
                    ),
                    &["vector_embedding"],
                )
                .unwrap_or_else(|_| unreachable!("valid metric name"));
                if let Err(error) = registry.register(Box::new(gauge.clone())) {
                    tracing::error!(%error, "metric registration failed");
                }
                gauge
            },
            registry,
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}
