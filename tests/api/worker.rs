//! The ingestion worker and the Document status table (interface §States and transitions,
//! addendum §2.5, §6.2, §15 items 9–11), driven step by step.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::PullConsumer;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use trove::ingest::queue::Job;
use trove::ingest::worker::{StepOutcome, Worker};
use trove::store::ingestion::fail_stale_pending as sweep;
use uuid::Uuid;

use crate::helpers::{
    AppOptions, TestApp, assert_error, assert_utc_timestamp, data_of, eventually, free_port,
    metric_value, paragraphs, spawn_app_with, spawn_app_without_worker, str_of, uuid_of,
    worker_metric,
};

/// The seven worker metrics.
const WORKER_METRICS: [&str; 7] = [
    "service_document_queue_processed",
    "service_document_queue_success",
    "service_document_queue_skip",
    "service_document_queue_failed",
    "service_document_queue_processed_latency",
    "service_document_queue_text_splitter_latency",
    "service_document_queue_embedding_latency",
];

const PROCESSED: &str = "service_document_queue_processed";
const SUCCESS: &str = "service_document_queue_success";
const SKIP: &str = "service_document_queue_skip";
const FAILED: &str = "service_document_queue_failed";

async fn step(worker: &Worker) -> StepOutcome {
    worker.step(Duration::from_millis(300)).await.expect("step")
}

/// The job of a submitted version.
fn job_of(version: &Value) -> Job {
    Job {
        pipeline_id: uuid_of(version, "pipeline_id"),
        document_id: uuid_of(version, "id"),
        version: version["version"].as_i64().expect("version"),
    }
}

/// The status of one version, read through the API.
async fn status_of(app: &TestApp, version: &Value) -> String {
    let reply = app
        .get(&format!(
            "/pipelines/{}/documents/{}?version={}",
            str_of(version, "pipeline_id"),
            str_of(version, "id"),
            version["version"]
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    str_of(&reply.body[0], "status").to_owned()
}

/// `(fragments, distinct order ids, max order id + 1)` stored for one version.
async fn fragment_set(app: &TestApp, version: &Value) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT order_id), coalesce(max(order_id) + 1, 0)::bigint
         FROM fragments WHERE document_id = $1 AND version = $2",
    )
    .bind(uuid_of(version, "id"))
    .bind(version["version"].as_i64().unwrap())
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// Asserts exactly one set of fragments (order ids 0..n, each once), `n > 0`; returns n.
async fn assert_one_fragment_set(app: &TestApp, version: &Value) -> i64 {
    let (count, distinct, span) = fragment_set(app, version).await;
    assert!(count > 0, "no fragments for {version}");
    assert_eq!(
        (count, distinct, span),
        (count, count, count),
        "one set of fragments"
    );
    let pipeline = app
        .get(&format!("/pipelines/{}", str_of(version, "pipeline_id")))
        .await
        .body;
    if let Some(ve) = pipeline["default_vector_embedding_id"].as_str() {
        let ve = Uuid::parse_str(ve).unwrap();
        let vectors: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM vectors_{} v JOIN fragments f ON f.id = v.fragment_id
             WHERE f.document_id = $1 AND f.version = $2",
            ve.simple()
        )))
        .bind(uuid_of(version, "id"))
        .bind(version["version"].as_i64().unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap();
        assert_eq!(vectors, count, "one vector per fragment");
    }
    count
}

async fn raw_texts(app: &TestApp, version: &Value) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM document_texts WHERE document_id = $1 AND version = $2",
    )
    .bind(uuid_of(version, "id"))
    .bind(version["version"].as_i64().unwrap())
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// A text long enough for several fragments with the default splitter.
fn long_text(word: &str) -> String {
    paragraphs(word, 40)
}

#[tokio::test]
async fn a_pending_version_becomes_success_with_fragments() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "doc", &long_text("kelp")).await;
    assert_eq!(
        raw_texts(&app, &version).await,
        1,
        "raw text held until processed"
    );
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 1,
            stored: 1,
            skipped: 0,
            failed: 0
        }
    );
    assert_eq!(status_of(&app, &version).await, "success");
    let n = assert_one_fragment_set(&app, &version).await;
    assert!(n > 1);
    assert_eq!(raw_texts(&app, &version).await, 0, "raw text dropped");
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}",
            str_of(&version, "id")
        ))
        .await;
    assert!(
        reply.body[0]["updated_at"].as_str().unwrap() > version["updated_at"].as_str().unwrap(),
        "updated_at set on the status change"
    );
    assert_eq!(worker_metric(&worker, PROCESSED), 1.0);
    assert_eq!(worker_metric(&worker, SUCCESS), 1.0);
    assert_eq!(worker_metric(&worker, SKIP), 0.0);
    assert_eq!(worker_metric(&worker, FAILED), 0.0);
    // Acknowledged: nothing comes back.
    assert_eq!(step(&worker).await.jobs, 0);
}

#[tokio::test]
async fn empty_text_is_success_and_counted_as_skip() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "empty", "").await;
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 1);
    assert_eq!(outcome.skipped, 1, "{outcome:?}");
    assert_eq!(outcome.failed, 0);
    assert_eq!(status_of(&app, &version).await, "success");
    assert_eq!(fragment_set(&app, &version).await.0, 0);
    assert_eq!(raw_texts(&app, &version).await, 0);
    let text = worker.metrics.render();
    assert_eq!(metric_value(&text, SKIP), Some(1.0), "{text}");
    assert_eq!(metric_value(&text, SUCCESS), Some(0.0), "{text}");
    assert_eq!(metric_value(&text, FAILED), Some(0.0), "{text}");
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}/fragments",
            str_of(&version, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(data_of(&reply).is_empty());
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
}

#[tokio::test]
async fn a_job_delivered_again_after_success_or_failure_is_skipped_and_acknowledged() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let done = app.submit_text(&pid, "done", &long_text("reef")).await;
    let worker = app.worker().await;
    assert_eq!(step(&worker).await.stored, 1);
    let n = assert_one_fragment_set(&app, &done).await;

    // The same job again.
    app.state.queue.publish(&job_of(&done)).await.unwrap();
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 1,
            stored: 0,
            skipped: 1,
            failed: 0
        }
    );
    assert_eq!(assert_one_fragment_set(&app, &done).await, n, "unchanged");
    assert_eq!(status_of(&app, &done).await, "success");
    assert_eq!(worker_metric(&worker, SKIP), 1.0);
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");

    // A failed version (pending for more than 24 hours) delivered again.
    let stale = app.submit_text(&pid, "stale", "stale text").await;
    sqlx::query("UPDATE documents SET created_at = now() - interval '25 hours' WHERE id = $1")
        .bind(uuid_of(&stale, "id"))
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(sweep(&app.pool).await.unwrap(), 1);
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 1);
    assert_eq!(outcome.skipped, 1, "{outcome:?}");
    assert_eq!(status_of(&app, &stale).await, "failed");
    assert_eq!(fragment_set(&app, &stale).await.0, 0);
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
    assert_eq!(worker_metric(&worker, FAILED), 0.0);
}

#[tokio::test]
async fn a_document_deleted_before_processing_is_acknowledged_as_success() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "gone", &long_text("drift")).await;
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/documents/{}",
            str_of(&version, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 1);
    assert_eq!(outcome.failed, 0);
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(worker_metric(&worker, SUCCESS), 1.0);
    assert_eq!(worker_metric(&worker, FAILED), 0.0);
    let fragments: i64 = sqlx::query_scalar("SELECT count(*) FROM fragments")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(fragments, 0, "nothing stored");
    let documents: i64 = sqlx::query_scalar("SELECT count(*) FROM documents")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(documents, 0);
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
}

#[tokio::test]
async fn a_version_expired_while_pending_is_processed_and_stays_expired() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "doc", &long_text("tide")).await;
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/documents/{}?expire=true",
            str_of(&version, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}?version={}",
            str_of(&version, "id"),
            version["version"]
        ))
        .await;
    assert_eq!(reply.body[0]["status"], "success");
    assert!(reply.body[0]["expired_at"].is_string(), "{}", reply.text);
    assert_one_fragment_set(&app, &version).await;
    let unexpired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM fragments WHERE document_id = $1 AND expired_at IS NULL",
    )
    .bind(uuid_of(&version, "id"))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(unexpired, 0, "its fragments are expired too");
}

#[tokio::test]
async fn jobs_of_a_deleted_pipeline_are_acknowledged() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    app.submit_text(&pid, "a", "first").await;
    app.submit_text(&pid, "b", "second").await;
    let reply = app.delete(&format!("/pipelines/{pid}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 2);
    assert_eq!(outcome.failed, 0, "{outcome:?}");
    assert_eq!(worker_metric(&worker, FAILED), 0.0);
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
    let fragments: i64 = sqlx::query_scalar("SELECT count(*) FROM fragments")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(fragments, 0);
}

/// Points a model row at a closed local port (an `openai` model), or back to `hash`.
async fn break_model(app: &TestApp, model_id: Uuid, broken: bool) {
    let (provider, parameters) = if broken {
        (
            "openai",
            json!({"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-test"}),
        )
    } else {
        ("hash", json!({"dimensions": 384}))
    };
    sqlx::query(
        "UPDATE embedding_models SET provider = $2, parameters = $3, secret_parameters = NULL WHERE id = $1",
    )
    .bind(model_id)
    .bind(provider)
    .bind(parameters)
    .execute(&app.pool)
    .await
    .unwrap();
}

/// An app without a worker of its own whose returned jobs come back after one second.
async fn app_returning_jobs_for_a_second() -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        redelivery_delay: Some(Duration::from_secs(1)),
        ..AppOptions::default()
    })
    .await
}

#[tokio::test]
async fn a_failing_group_stays_pending_and_is_delivered_again_after_the_delay() {
    let app = app_returning_jobs_for_a_second().await;
    let model = app.create_hash_model("flaky", 384).await;
    let model_id = uuid_of(&model, "id");
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model_id}))
        .await;
    let mut versions = Vec::new();
    for i in 0..3 {
        versions.push(
            app.submit_text(&pid, &format!("doc-{i}"), &long_text("storm"))
                .await,
        );
    }
    break_model(&app, model_id, true).await;

    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 3,
            stored: 0,
            skipped: 0,
            failed: 3
        }
    );
    for version in &versions {
        assert_eq!(status_of(&app, version).await, "pending");
        assert_eq!(fragment_set(&app, version).await.0, 0);
        assert_eq!(
            raw_texts(&app, version).await,
            1,
            "raw text kept for the retry"
        );
    }
    assert_eq!(worker_metric(&worker, FAILED), 3.0);
    assert_eq!(worker_metric(&worker, PROCESSED), 3.0);
    assert_eq!(worker_metric(&worker, SUCCESS), 0.0);

    // Not before the delay...
    let early = worker.step(Duration::from_millis(150)).await.unwrap();
    assert_eq!(early.jobs, 0, "redelivered before the delay: {early:?}");

    // ...but after it.
    break_model(&app, model_id, false).await;
    // Time passes: the redelivery delay (1 s).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 3,
            stored: 3,
            skipped: 0,
            failed: 0
        }
    );
    for version in &versions {
        assert_eq!(status_of(&app, version).await, "success");
        assert_one_fragment_set(&app, version).await;
    }
    assert_eq!(worker_metric(&worker, FAILED), 3.0);
    assert_eq!(worker_metric(&worker, SUCCESS), 3.0);
    assert_eq!(worker_metric(&worker, PROCESSED), 6.0);
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
}

#[tokio::test]
async fn a_failure_on_one_document_returns_only_its_job() {
    let app = app_returning_jobs_for_a_second().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let bad = app.submit_text(&pid, "bad", &long_text("squall")).await;
    let good = app.submit_text(&pid, "good", &long_text("calm")).await;
    // Make the raw text of one version unreadable (as after a change of TROVE_SECRET).
    let original: Vec<u8> =
        sqlx::query_scalar("SELECT text FROM document_texts WHERE document_id = $1")
            .bind(uuid_of(&bad, "id"))
            .fetch_one(&app.pool)
            .await
            .unwrap();
    sqlx::query("UPDATE document_texts SET text = $2 WHERE document_id = $1")
        .bind(uuid_of(&bad, "id"))
        .bind(b"not a ciphertext at all".to_vec())
        .execute(&app.pool)
        .await
        .unwrap();

    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 2);
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(outcome.failed, 1, "{outcome:?}");
    assert_eq!(status_of(&app, &bad).await, "pending");
    assert_eq!(status_of(&app, &good).await, "success");
    assert_eq!(worker_metric(&worker, FAILED), 1.0);

    sqlx::query("UPDATE document_texts SET text = $2 WHERE document_id = $1")
        .bind(uuid_of(&bad, "id"))
        .bind(original)
        .execute(&app.pool)
        .await
        .unwrap();
    // Time passes: the redelivery delay (1 s).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 1,
            stored: 1,
            skipped: 0,
            failed: 0
        }
    );
    assert_eq!(status_of(&app, &bad).await, "success");
    assert_one_fragment_set(&app, &bad).await;
    assert_one_fragment_set(&app, &good).await;
}

/// A fake OpenAI-compatible embeddings server that refuses (400) any request holding a text with
/// the word `poison`, as a model refuses an input longer than it reads, and answers the others.
#[poem::handler]
async fn picky_embeddings(body: poem::web::Json<Value>) -> poem::Response {
    use poem::IntoResponse as _;
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    if inputs
        .iter()
        .any(|text| text.as_str().is_some_and(|t| t.contains("poison")))
    {
        return poem::Response::builder()
            .status(poem::http::StatusCode::BAD_REQUEST)
            .body(r#"{"error": {"message": "This input is refused."}}"#);
    }
    embeddings_answer(&body).into_response()
}

#[tokio::test]
async fn a_document_the_model_refuses_fails_alone() {
    let app = app_returning_jobs_for_a_second().await;
    let pid = pipeline_with_fake_model(
        &app,
        poem::Route::new().at("/v1/embeddings", poem::post(picky_embeddings)),
    )
    .await;
    let first = app.submit_text(&pid, "first", &long_text("calm")).await;
    let poison = app.submit_text(&pid, "poison", &long_text("poison")).await;
    let last = app.submit_text(&pid, "last", &long_text("breeze")).await;

    // The model refuses the group's request: each document is then embedded alone, and only
    // the refused one returns to the queue.
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 3,
            stored: 2,
            skipped: 0,
            failed: 1
        }
    );
    assert_eq!(status_of(&app, &first).await, "success");
    assert_eq!(status_of(&app, &last).await, "success");
    assert_eq!(status_of(&app, &poison).await, "pending");
    assert_one_fragment_set(&app, &first).await;
    assert_one_fragment_set(&app, &last).await;
    assert_eq!(worker_metric(&worker, PROCESSED), 3.0);
    assert_eq!(worker_metric(&worker, SUCCESS), 2.0);
    assert_eq!(worker_metric(&worker, FAILED), 1.0);
    // Delivered again after the delay, it fails again, alone.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let outcome = step(&worker).await;
    assert_eq!((outcome.jobs, outcome.failed), (1, 1), "{outcome:?}");
    assert_eq!(status_of(&app, &poison).await, "pending");
}

#[tokio::test]
async fn a_job_fetched_by_a_worker_that_dies_is_delivered_again_after_the_ack_wait() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(Duration::from_secs(2)),
        ..AppOptions::default()
    })
    .await;
    let pid = app.new_pipeline_id(json!({})).await;
    let worker = app.worker().await; // creates the durable consumer
    let version = app.submit_text(&pid, "doc", &long_text("wreck")).await;

    // A worker fetches the job and dies before acknowledging it.
    let stream = app
        .state
        .queue
        .jetstream()
        .get_stream(&app.queue.stream)
        .await
        .unwrap();
    let consumer: PullConsumer = stream.get_consumer(&app.queue.consumer).await.unwrap();
    let mut messages = consumer.fetch().max_messages(10).messages().await.unwrap();
    let mut fetched = 0;
    while let Some(message) = messages.next().await {
        let message = message.unwrap();
        let job: Job = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(job, job_of(&version));
        fetched += 1;
    }
    drop(messages);
    assert_eq!(fetched, 1);
    let started = Instant::now();

    // In flight: not delivered to another worker meanwhile.
    let early = worker.step(Duration::from_millis(200)).await.unwrap();
    assert_eq!(early.jobs, 0, "{early:?}");
    assert_eq!(status_of(&app, &version).await, "pending");

    // Time passes: the ack wait ends.
    tokio::time::sleep(Duration::from_millis(2200).saturating_sub(started.elapsed())).await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 1, "{outcome:?}");
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(status_of(&app, &version).await, "success");
    assert_one_fragment_set(&app, &version).await;
    assert_eq!(step(&worker).await.jobs, 0, "acknowledged");
}

/// A fake OpenAI-compatible embeddings server whose first `slow` requests take `delay` (a
/// slow model), the others none; answers 384-dimension vectors.
#[derive(Default)]
struct SlowEmbeddings {
    slow: usize,
    delay: Duration,
    /// Requests received.
    requests: usize,
}

type SlowShared = std::sync::Arc<std::sync::Mutex<SlowEmbeddings>>;

#[poem::handler]
async fn slow_embeddings(
    body: poem::web::Json<Value>,
    state: poem::web::Data<&SlowShared>,
) -> poem::web::Json<Value> {
    let delay = {
        let mut state = state.0.lock().unwrap();
        state.requests += 1;
        if state.slow > 0 {
            state.slow -= 1;
            state.delay
        } else {
            Duration::ZERO
        }
    };
    // The fake server's pace: a slow answer.
    tokio::time::sleep(delay).await;
    embeddings_answer(&body)
}

/// An OpenAI-compatible answer to an embeddings request: a vector of 384 dimensions per input.
fn embeddings_answer(body: &Value) -> poem::web::Json<Value> {
    let count = body["input"].as_array().map_or(0, Vec::len);
    let data: Vec<Value> = (0..count)
        .map(|index| {
            let vector: Vec<f32> = (0..384).map(|i| ((index + i) % 7) as f32 + 1.0).collect();
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    poem::web::Json(json!({"object": "list", "data": data, "model": body["model"]}))
}

/// A pipeline whose embedding model answers through [`slow_embeddings`]; returns its id.
async fn pipeline_with_slow_model(app: &TestApp, fake: &SlowShared) -> String {
    use poem::EndpointExt;
    pipeline_with_fake_model(
        app,
        poem::Route::new()
            .at("/v1/embeddings", poem::post(slow_embeddings))
            .data(fake.clone()),
    )
    .await
}

/// A pipeline whose embedding model (a `hash` model of 384 dimensions made `openai`) answers
/// through the fake OpenAI-compatible server `fake`; returns its id.
async fn pipeline_with_fake_model<E>(app: &TestApp, fake: E) -> String
where
    E: poem::IntoEndpoint + Send + 'static,
    E::Endpoint: 'static,
{
    let address = crate::helpers::serve_on_loopback(fake);
    let model = app.create_hash_model("fake", 384).await;
    let model_id = uuid_of(&model, "id");
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model_id}))
        .await;
    sqlx::query(
        "UPDATE embedding_models SET provider = 'openai', parameters = $2, secret_parameters = NULL
         WHERE id = $1",
    )
    .bind(model_id)
    .bind(json!({"base_url": format!("http://{address}/v1"), "api_key": "sk-test"}))
    .execute(&app.pool)
    .await
    .unwrap();
    pid
}

/// Waits until the fake embeddings server has received `count` requests.
async fn embedding_requests(fake: &SlowShared, count: usize) {
    eventually(
        &format!("{count} embedding requests"),
        Duration::from_secs(10),
        || async { (fake.lock().unwrap().requests >= count).then_some(()) },
    )
    .await;
}

/// Steps `worker` until `busy` finishes, asserting that it never receives a job meanwhile;
/// returns the busy step's outcome.
async fn idle_while(
    worker: &Worker,
    busy: tokio::task::JoinHandle<StepOutcome>,
    limit: Duration,
) -> StepOutcome {
    let started = Instant::now();
    while !busy.is_finished() {
        let outcome = worker.step(Duration::from_millis(200)).await.unwrap();
        assert_eq!(
            outcome.jobs,
            0,
            "a job of a live worker's batch was delivered to another worker after {:?}: {outcome:?}",
            started.elapsed()
        );
        assert!(started.elapsed() < limit, "the busy step did not finish");
    }
    busy.await.unwrap()
}

#[tokio::test]
async fn an_existing_consumer_takes_the_configured_ack_wait() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(Duration::from_secs(2)),
        ..AppOptions::default()
    })
    .await;
    // A consumer already in place with a five-minute ack wait.
    app.state.queue.ensure_stream().await.unwrap();
    let stream = app
        .state
        .queue
        .jetstream()
        .get_stream(&app.queue.stream)
        .await
        .unwrap();
    stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(app.queue.consumer.clone()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(300),
            max_deliver: -1,
            filter_subject: format!("{}.>", app.queue.subject_prefix),
            ..Default::default()
        })
        .await
        .unwrap();
    let info = stream.consumer_info(&app.queue.consumer).await.unwrap();
    assert_eq!(info.config.ack_wait, Duration::from_secs(300));

    let worker = app.worker().await;
    let info = stream.consumer_info(&app.queue.consumer).await.unwrap();
    assert_eq!(
        info.config.ack_wait,
        Duration::from_secs(2),
        "the worker updates the consumer"
    );
    // Still the same durable consumer, and it works.
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "doc", &long_text("keel")).await;
    assert_eq!(step(&worker).await.stored, 1);
    assert_eq!(status_of(&app, &version).await, "success");
}

#[tokio::test]
async fn a_live_worker_keeps_a_batch_slower_than_the_ack_wait() {
    let ack_wait = Duration::from_secs(2);
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(ack_wait),
        ..AppOptions::default()
    })
    .await;
    let fake = SlowShared::default();
    // The batch's embedding takes three ack waits.
    {
        let mut fake = fake.lock().unwrap();
        fake.slow = 1;
        fake.delay = 3 * ack_wait;
    }
    let pid = pipeline_with_slow_model(&app, &fake).await;
    let mut versions = Vec::new();
    for i in 0..3 {
        versions.push(
            app.submit_text(&pid, &format!("doc-{i}"), &long_text("ballast"))
                .await,
        );
    }
    let slow = app.worker().await;
    let other = app.worker().await;
    let started = Instant::now();
    let busy = tokio::spawn(async move { slow.step(Duration::from_millis(300)).await.unwrap() });
    // The whole batch is fetched and being embedded.
    embedding_requests(&fake, 1).await;

    let outcome = idle_while(&other, busy, Duration::from_secs(30)).await;
    assert!(
        started.elapsed() > 3 * ack_wait,
        "the batch took {:?}",
        started.elapsed()
    );
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 3,
            stored: 3,
            skipped: 0,
            failed: 0
        }
    );
    assert_eq!(fake.lock().unwrap().requests, 1, "embedded once");
    for version in &versions {
        assert_eq!(status_of(&app, version).await, "success");
        assert_one_fragment_set(&app, version).await;
    }
    // Acknowledged: nothing comes back after another ack wait (time passes).
    tokio::time::sleep(ack_wait + Duration::from_millis(500)).await;
    assert_eq!(step(&other).await.jobs, 0, "acknowledged");
}

#[tokio::test]
async fn a_job_returned_mid_batch_comes_back_after_the_delay_while_the_batch_goes_on() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(Duration::from_secs(3)),
        redelivery_delay: Some(Duration::from_secs(1)),
        ..AppOptions::default()
    })
    .await;
    let fake = SlowShared::default();
    {
        let mut fake = fake.lock().unwrap();
        fake.slow = 1;
        fake.delay = Duration::from_secs(8);
    }
    let pid = pipeline_with_slow_model(&app, &fake).await;
    let bad = app.submit_text(&pid, "bad", &long_text("bilge")).await;
    let good = app.submit_text(&pid, "good", &long_text("hull")).await;
    // The raw text of one version is unreadable: its job is returned at once, the other one's
    // embedding takes more than two ack waits.
    sqlx::query("UPDATE document_texts SET text = $2 WHERE document_id = $1")
        .bind(uuid_of(&bad, "id"))
        .bind(b"not a ciphertext at all".to_vec())
        .execute(&app.pool)
        .await
        .unwrap();
    let slow = app.worker().await;
    let other = app.worker().await;
    let busy = tokio::spawn(async move { slow.step(Duration::from_millis(300)).await.unwrap() });
    embedding_requests(&fake, 1).await;
    let returned = Instant::now();

    // The returned job is not kept in progress with the batch: it comes back after its delay.
    let mut outcome = StepOutcome::default();
    while outcome.jobs == 0 {
        assert!(
            returned.elapsed() < Duration::from_secs(3),
            "the returned job did not come back after the redelivery delay"
        );
        outcome = other.step(Duration::from_millis(200)).await.unwrap();
    }
    assert!(!busy.is_finished(), "the batch is still being worked on");
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 1,
            stored: 0,
            skipped: 0,
            failed: 1
        }
    );
    let outcome = busy.await.unwrap();
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(outcome.failed, 1, "{outcome:?}");
    assert_eq!(status_of(&app, &good).await, "success");
    assert_eq!(status_of(&app, &bad).await, "pending");
}

#[tokio::test]
async fn the_jobs_of_a_worker_that_dies_mid_batch_come_back_within_the_ack_wait() {
    let ack_wait = Duration::from_secs(2);
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(ack_wait),
        ..AppOptions::default()
    })
    .await;
    let fake = SlowShared::default();
    {
        let mut fake = fake.lock().unwrap();
        fake.slow = 1;
        fake.delay = Duration::from_secs(25);
    }
    let pid = pipeline_with_slow_model(&app, &fake).await;
    let mut versions = Vec::new();
    for i in 0..3 {
        versions.push(
            app.submit_text(&pid, &format!("doc-{i}"), &long_text("flotsam"))
                .await,
        );
    }
    let doomed = app.worker().await;
    let other = app.worker().await;
    let busy = tokio::spawn(async move { doomed.step(Duration::from_millis(300)).await.unwrap() });
    embedding_requests(&fake, 1).await;

    // The batch is held for more than two ack waits (marked in progress), then its worker
    // dies in the middle of the embedding.
    let started = Instant::now();
    while started.elapsed() < ack_wait * 5 / 2 {
        let outcome = other.step(Duration::from_millis(200)).await.unwrap();
        assert_eq!(
            outcome.jobs, 0,
            "delivered while its worker lives: {outcome:?}"
        );
    }
    assert_eq!(
        fake.lock().unwrap().requests,
        1,
        "the batch is being embedded"
    );
    busy.abort();
    assert!(busy.await.unwrap_err().is_cancelled());
    let died = Instant::now();

    let mut outcome = StepOutcome::default();
    while outcome.jobs == 0 {
        assert!(
            died.elapsed() < ack_wait + Duration::from_secs(2),
            "the dead worker's jobs did not come back within the ack wait"
        );
        outcome = other.step(Duration::from_millis(200)).await.unwrap();
    }
    let back = died.elapsed();
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 3,
            stored: 3,
            skipped: 0,
            failed: 0
        }
    );
    eprintln!("jobs of a dead worker back after {back:?} (ack wait {ack_wait:?})");
    for version in &versions {
        assert_eq!(status_of(&app, version).await, "success");
        assert_one_fragment_set(&app, version).await;
    }
    assert_eq!(step(&other).await.jobs, 0, "acknowledged");
}

#[tokio::test]
async fn two_deliveries_in_one_batch_never_duplicate_fragments() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "doc", &long_text("swell")).await;
    app.state.queue.publish(&job_of(&version)).await.unwrap();
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 2, "{outcome:?}");
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(outcome.skipped, 1, "{outcome:?}");
    assert_eq!(outcome.failed, 0);
    assert_eq!(status_of(&app, &version).await, "success");
    assert_one_fragment_set(&app, &version).await;
    assert_eq!(step(&worker).await.jobs, 0, "both acknowledged");
}

#[tokio::test]
async fn one_step_processes_the_groups_of_two_pipelines() {
    let app = spawn_app_without_worker().await;
    let first = app.new_pipeline_id(json!({})).await;
    let second = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    let mut versions = Vec::new();
    for i in 0..10 {
        for pid in [&first, &second] {
            versions.push(
                app.submit_text(
                    pid,
                    &format!("doc-{i}"),
                    &format!("Text {i} of {pid}. ").repeat(80),
                )
                .await,
            );
        }
    }
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(
        outcome,
        StepOutcome {
            jobs: 20,
            stored: 20,
            skipped: 0,
            failed: 0
        }
    );
    for version in &versions {
        assert_eq!(status_of(&app, version).await, "success");
        assert_one_fragment_set(&app, version).await;
    }
    assert_eq!(worker_metric(&worker, PROCESSED), 20.0);
    assert_eq!(worker_metric(&worker, SUCCESS), 20.0);
    for pid in [&first, &second] {
        let reply = app
            .get(&format!("/pipelines/{pid}/documents?status=success"))
            .await;
        assert_eq!(data_of(&reply).len(), 10);
    }
    assert_eq!(step(&worker).await.jobs, 0);
}

#[tokio::test]
async fn a_job_that_cannot_be_queued_leaves_the_version_failed() {
    let started = Instant::now();
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([("TROVE_NATS_URL".to_owned(), "nats://127.0.0.1:1".to_owned())]),
        ..AppOptions::default()
    })
    .await;
    let spawned = started.elapsed();
    let pid = app.new_pipeline_id(json!({})).await;
    let submitted = Instant::now();
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "lost", "classification": "public", "text": "queued nowhere"}),
        )
        .await;
    let submission = submitted.elapsed();
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "NATS error");
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents?external_identifier=lost"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let listed = data_of(&reply);
    assert_eq!(listed.len(), 1, "the version is kept: {}", reply.text);
    assert_eq!(listed[0]["status"], "failed");
    assert_eq!(status_of(&app, &listed[0]).await, "failed");
    assert_eq!(raw_texts(&app, &listed[0]).await, 0, "raw text dropped");
    assert_eq!(
        outbox_entries(&app, &listed[0]).await,
        0,
        "nothing to publish again"
    );
    assert_eq!(app.api_metric("service_document_queue_added").await, 1.0);
    eprintln!(
        "nats unreachable: app start {spawned:?}, submission {submission:?}, total {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_sweep_fails_versions_pending_for_more_than_24_hours() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let stale = app.submit_text(&pid, "stale", "old text").await;
    let fresh = app.submit_text(&pid, "fresh", "new text").await;
    sqlx::query(
        "UPDATE documents SET created_at = now() - interval '25 hours' WHERE id = $1 AND version = $2",
    )
    .bind(uuid_of(&stale, "id"))
    .bind(stale["version"].as_i64().unwrap())
    .execute(&app.pool)
    .await
    .unwrap();
    // One under the limit stays pending.
    sqlx::query("UPDATE documents SET created_at = now() - interval '23 hours' WHERE id = $1")
        .bind(uuid_of(&fresh, "id"))
        .execute(&app.pool)
        .await
        .unwrap();

    assert_eq!(sweep(&app.pool).await.unwrap(), 1);
    assert_eq!(status_of(&app, &stale).await, "failed");
    assert_eq!(raw_texts(&app, &stale).await, 0, "raw text dropped");
    assert_eq!(status_of(&app, &fresh).await, "pending");
    assert_eq!(raw_texts(&app, &fresh).await, 1);
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}",
            str_of(&stale, "id")
        ))
        .await;
    assert!(
        reply.body[0]["updated_at"].as_str() > stale["updated_at"].as_str(),
        "updated_at set on the status change"
    );
    assert_eq!(sweep(&app.pool).await.unwrap(), 0);

    // The queued jobs: the failed version is skipped, the other processed.
    let worker = app.worker().await;
    let outcome = step(&worker).await;
    assert_eq!(outcome.jobs, 2);
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(outcome.skipped, 1, "{outcome:?}");
    assert_eq!(status_of(&app, &stale).await, "failed");
    assert_eq!(status_of(&app, &fresh).await, "success");
    assert_eq!(
        worker_metric(&worker, FAILED),
        0.0,
        "the sweep adds nothing to failed"
    );
}

/// An app without worker whose sweep publishes again the jobs unconfirmed for 1 second.
async fn app_republishing_after_a_second() -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        republish_after: Some(Duration::from_secs(1)),
        ..AppOptions::default()
    })
    .await
}

/// Outbox entries (jobs not confirmed queued) of one version.
async fn outbox_entries(app: &TestApp, version: &Value) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_outbox WHERE document_id = $1 AND version = $2")
        .bind(uuid_of(version, "id"))
        .bind(version["version"].as_i64().unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// Waits for the background removal of a submitted version's outbox entry (`ingest::outbox`).
async fn outbox_entry_removed(app: &TestApp, version: &Value) {
    eventually(
        "the outbox entry removed",
        Duration::from_secs(5),
        || async { (outbox_entries(app, version).await == 0).then_some(()) },
    )
    .await;
}

/// Puts back the outbox entry of a submitted version (once the submission's removal has
/// happened), as when its submission published the job but stopped before recording it.
async fn unconfirm(app: &TestApp, version: &Value) {
    outbox_entry_removed(app, version).await;
    sqlx::query("INSERT INTO job_outbox (document_id, version, created_at) VALUES ($1, $2, $3)")
        .bind(uuid_of(version, "id"))
        .bind(version["version"].as_i64().unwrap())
        .bind(assert_utc_timestamp(&version["created_at"]))
        .execute(&app.pool)
        .await
        .unwrap();
}

/// Stores a version exactly as a submission commits it (`pending`, its encrypted text and its
/// outbox entry) without publishing its job: the state a process killed between the commit
/// and the publish leaves. Returns the version as the API shows it.
async fn commit_without_publishing(app: &TestApp, pid: &str, external_identifier: &str) -> Value {
    let text = long_text("jetsam");
    let encrypted = app.state.cipher.encrypt(text.as_bytes());
    let now = chrono::Utc::now();
    let mut tx = app.pool.begin().await.unwrap();
    let mut rows = trove::store::documents::insert(
        &mut tx,
        &[trove::store::documents::NewVersion {
            id: Uuid::now_v7(),
            version: now.timestamp_micros(),
            created_at: now,
            pipeline_id: Uuid::parse_str(pid).unwrap(),
            external_identifier,
            classification: "public",
            metadata: &json!({}),
            text_splitter_id: None,
            expire_older_versions: true,
            encrypted_text: &encrypted,
            format: None,
        }],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    serde_json::to_value(rows.pop().unwrap()).unwrap()
}

#[tokio::test]
async fn a_version_whose_job_was_never_published_is_processed_after_the_republish_delay() {
    let app = app_republishing_after_a_second().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let worker = app.worker().await;
    let stranded = commit_without_publishing(&app, &pid, "stranded").await;
    let committed = Instant::now();
    assert_eq!(stranded["status"], "pending");
    assert_eq!(outbox_entries(&app, &stranded).await, 1);
    // No job exists, and a version just committed is left to its own publish.
    assert_eq!(step(&worker).await.jobs, 0);
    assert_eq!(worker.republish_unconfirmed().await.unwrap(), 0);

    // The worker's own loop (step loops and sweep) processes it once the delay has passed,
    // without any new submission.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.clone().run(1, stopped));
    eventually(
        "the stranded version processed within 15 s of its commit",
        Duration::from_secs(15).saturating_sub(committed.elapsed()),
        || async { (status_of(&app, &stranded).await != "pending").then_some(()) },
    )
    .await;
    let processed = committed.elapsed();
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
    assert!(processed >= Duration::from_secs(1), "{processed:?}");
    eprintln!("a version whose job was never published processed after {processed:?}");
    assert_eq!(status_of(&app, &stranded).await, "success");
    assert_one_fragment_set(&app, &stranded).await;
    assert_eq!(outbox_entries(&app, &stranded).await, 0);
    assert_eq!(worker_metric(&worker, SUCCESS), 1.0);
    assert_eq!(worker_metric(&worker, SKIP), 0.0);
    // Nothing else was queued.
    assert_eq!(step(&worker).await.jobs, 0);
    assert_eq!(worker.republish_unconfirmed().await.unwrap(), 0);
}

#[tokio::test]
async fn a_submission_confirms_its_job_and_nothing_is_published_again() {
    let app = app_republishing_after_a_second().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let worker = app.worker().await;
    let version = app.submit_text(&pid, "doc", &long_text("buoy")).await;
    outbox_entry_removed(&app, &version).await;
    // Pending (no worker ran) beyond the delay: its job is in the queue, so none is added.
    // Time passes: the republish delay (1 s).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(worker.republish_unconfirmed().await.unwrap(), 0);
    assert_eq!(
        step(&worker).await,
        StepOutcome {
            jobs: 1,
            stored: 1,
            skipped: 0,
            failed: 0
        }
    );
    assert_eq!(step(&worker).await.jobs, 0);
}

#[tokio::test]
async fn a_job_queued_twice_by_the_sweep_is_processed_once() {
    let app = app_republishing_after_a_second().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let worker = app.worker().await;
    // Published and already processed, but the submission stopped before recording the
    // publish: nothing is queued again.
    let done = app.submit_text(&pid, "done", &long_text("anchor")).await;
    assert_eq!(step(&worker).await.stored, 1);
    unconfirm(&app, &done).await;
    let fragments_of_done = assert_one_fragment_set(&app, &done).await;
    // Published, not processed yet, and the same: the sweep cannot tell, and queues the job a
    // second time.
    let waiting = app
        .submit_text(&pid, "waiting", &long_text("mooring"))
        .await;
    unconfirm(&app, &waiting).await;

    // Time passes: the republish delay (1 s).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Two sweeps at once (two workers): each job is published again once.
    let other = app.worker().await;
    let (first, second) = tokio::join!(
        worker.republish_unconfirmed(),
        other.republish_unconfirmed()
    );
    assert_eq!(
        first.unwrap() + second.unwrap(),
        1,
        "only the waiting version's job"
    );
    assert_eq!(outbox_entries(&app, &waiting).await, 0);
    assert_eq!(
        outbox_entries(&app, &done).await,
        0,
        "a processed version's entry is dropped"
    );
    assert_eq!(worker.republish_unconfirmed().await.unwrap(), 0);

    // Two jobs for one version: stored once, the second delivery skipped.
    assert_eq!(
        step(&worker).await,
        StepOutcome {
            jobs: 2,
            stored: 1,
            skipped: 1,
            failed: 0
        }
    );
    assert_eq!(status_of(&app, &waiting).await, "success");
    assert_one_fragment_set(&app, &waiting).await;
    assert_eq!(
        assert_one_fragment_set(&app, &done).await,
        fragments_of_done
    );
    assert_eq!(step(&worker).await.jobs, 0, "both acknowledged");
}

#[tokio::test]
async fn an_unconfirmed_job_is_claimed_at_most_once_per_republish_delay() {
    use trove::store::ingestion::{claim_unconfirmed_jobs, forget_queued_jobs};
    let app = app_republishing_after_a_second().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let stranded = commit_without_publishing(&app, &pid, "stranded").await;
    let after = Duration::from_secs(1);
    assert!(
        claim_unconfirmed_jobs(&app.pool, after, 10)
            .await
            .unwrap()
            .is_empty(),
        "too recent"
    );
    // Time passes: the delay `after`.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let claimed = claim_unconfirmed_jobs(&app.pool, after, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].document_id, uuid_of(&stranded, "id"));
    assert_eq!(claimed[0].pipeline_id.to_string(), pid);
    // Claimed (its publish failed, say): not again within the delay, but after it.
    assert!(
        claim_unconfirmed_jobs(&app.pool, after, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Time passes: the delay `after`.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        claim_unconfirmed_jobs(&app.pool, after, 10).await.unwrap(),
        claimed
    );
    forget_queued_jobs(&app.pool, &[claimed[0].document_id], &[claimed[0].version])
        .await
        .unwrap();
    assert_eq!(outbox_entries(&app, &stranded).await, 0);
    // A deleted document takes its entry with it.
    let gone = commit_without_publishing(&app, &pid, "gone").await;
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/documents/{}",
            str_of(&gone, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(outbox_entries(&app, &gone).await, 0);
}

/// GETs a URL until it answers (at most `limit`). A raw client: the server is the worker's
/// metrics listener, not the app.
async fn get_when_up(url: &str, limit: Duration) -> (StatusCode, String) {
    let client = reqwest::Client::new();
    eventually(&format!("an answer from {url}"), limit, || async {
        let response = client.get(url).send().await.ok()?;
        let status = response.status();
        Some((status, response.text().await.unwrap_or_default()))
    })
    .await
}

#[tokio::test]
async fn the_in_process_worker_serves_its_metrics() {
    let port = free_port();
    let _app = spawn_app_with(AppOptions {
        no_worker: false,
        env: HashMap::from([(
            "TROVE_WORKER_METRICS_LISTEN".to_owned(),
            format!("127.0.0.1:{port}"),
        )]),
        ..AppOptions::default()
    })
    .await;
    let base = format!("http://127.0.0.1:{port}");
    let (status, body) = get_when_up(&format!("{base}/health"), Duration::from_secs(10)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "OK");
    for path in ["/anything", "/", "/metrics"] {
        let (status, text) = get_when_up(&format!("{base}{path}"), Duration::from_secs(1)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            text.contains("# TYPE service_document_queue_processed counter"),
            "{text}"
        );
        for name in WORKER_METRICS {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("# TYPE {name} "))),
                "{name} missing: {text}"
            );
            assert!(
                metric_value(&text, name).is_some(),
                "{name} has no value: {text}"
            );
        }
        for name in &WORKER_METRICS[4..] {
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{text}");
        }
        assert!(!text.contains("# HELP"), "{text}");
        assert!(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .all(|l| l.contains("description=\"")),
            "each worker metric carries a description label: {text}"
        );
    }
}

#[tokio::test]
async fn the_in_process_worker_processes_documents() {
    let app = spawn_app_with(AppOptions {
        no_worker: false,
        ..AppOptions::default()
    })
    .await;
    let pid = app.new_pipeline_id(json!({})).await;
    let version = app.submit_text(&pid, "doc", &long_text("current")).await;
    eventually(
        "the worker of `trove serve` processed the job",
        Duration::from_secs(15),
        || async { (status_of(&app, &version).await == "success").then_some(()) },
    )
    .await;
    assert_one_fragment_set(&app, &version).await;
}

#[tokio::test]
async fn concurrent_batches_store_every_version_once_and_stop_cleanly() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let mut versions = Vec::new();
    for i in 0..240 {
        versions.push(
            app.submit_text(
                &pid,
                &format!("doc-{i}"),
                &format!("Document {i} of the batch."),
            )
            .await,
        );
    }
    let worker = app.worker().await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Three loops over one consumer: at least two batches of 100 are in flight at once.
    let running = tokio::spawn(worker.clone().run(3, stopped));
    eventually("240 of 240 processed", Duration::from_secs(120), || async {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM documents WHERE pipeline_id = $1 AND status = 'success'",
        )
        .bind(Uuid::parse_str(&pid).unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap();
        (done == 240).then_some(())
    })
    .await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the worker stops after its current batches")
        .unwrap();
    for version in &versions {
        assert_one_fragment_set(&app, version).await;
    }
    assert_eq!(worker_metric(&worker, SUCCESS), 240.0);
    assert_eq!(worker_metric(&worker, PROCESSED), 240.0);
}

/// A NATS server of this test's own, on a free port, with its JetStream store in a temporary
/// folder kept across restarts.
struct OwnNats {
    port: u16,
    store: std::path::PathBuf,
    process: Option<std::process::Child>,
}

impl OwnNats {
    async fn start() -> Self {
        let port = free_port();
        let store = std::env::temp_dir().join(format!("trove-nats-{}", Uuid::new_v4().simple()));
        let mut nats = Self {
            port,
            store,
            process: None,
        };
        nats.restart().await;
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn restart(&mut self) {
        let child = std::process::Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server runs (scripts/test installs it)");
        self.process = Some(child);
        let port = self.port;
        eventually(
            "nats-server started",
            Duration::from_secs(10),
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(drop)
            },
        )
        .await;
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// NATS stopped during submissions: 500 `NATS error` and the version `failed`; once NATS is
/// back, submissions are queued and processed again without restarting Trove.
#[tokio::test]
async fn submissions_recover_when_nats_comes_back() {
    let mut nats = OwnNats::start().await;
    let app = spawn_app_with(AppOptions {
        env: HashMap::from([("TROVE_NATS_URL".to_owned(), nats.url())]),
        ..AppOptions::default()
    })
    .await;
    let pid = app.new_pipeline_id(json!({})).await;
    let body = |id: &str| json!({"external_identifier": id, "classification": "public", "text": "queued text"});
    let reply = app.submit(&pid, &body("before")).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);

    nats.stop();
    let reply = app.submit(&pid, &body("during")).await;
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "NATS error");
    let listed = app
        .get(&format!(
            "/pipelines/{pid}/documents?external_identifier=during"
        ))
        .await;
    assert_eq!(data_of(&listed)[0]["status"], "failed", "{}", listed.text);

    nats.restart().await;
    eventually("submissions recovered", Duration::from_secs(30), || async {
        let reply = app.submit(&pid, &body("after")).await;
        if reply.status == StatusCode::CREATED {
            return Some(());
        }
        assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "NATS error");
        None
    })
    .await;
    eventually(
        "the version after recovery processed",
        Duration::from_secs(60),
        || async {
            let done = app
                .get(&format!(
                    "/pipelines/{pid}/documents?external_identifier=after&status=success"
                ))
                .await;
            (data_of(&done).len() == 1).then_some(())
        },
    )
    .await;
}
