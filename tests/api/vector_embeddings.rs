//! Extension (model migration): an embedding model added to a pipeline after its creation,
//! backfilled by the workers from the stored fragments, searchable once `ready`, made the
//! default, removed (`/pipelines/{id}/embedding-models`).

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    AppOptions, TestApp, assert_error, assert_invalid_parameter, assert_not_found_with_id,
    eventually, metric_value, spawn_app, spawn_app_with, spawn_app_without_worker, str_of, uuid_of,
    wait_until_processed, worker_metric,
};

/// Texts of several fragments each (the seeded splitter cuts at 1,000 characters).
fn texts() -> Vec<(String, String)> {
    let topics = [
        "glaciers carve valleys as ice moves downhill under its own weight",
        "compilers translate source code into machine instructions in stages",
        "sourdough bread rises slowly because wild yeast ferments the dough",
        "tidal forces of the moon raise the oceans twice a day",
        "orchestras tune to the oboe before the concert begins",
        "volcanic islands form where magma rises through the ocean floor",
    ];
    topics
        .iter()
        .enumerate()
        .map(|(i, topic)| {
            let text = (0..12)
                .map(|n| format!("Paragraph {n} of document {i}: {topic}, again and again."))
                .collect::<Vec<_>>()
                .join("\n\n")
                .repeat(3);
            (format!("doc-{i}"), text)
        })
        .collect()
}

/// A pipeline on a new `hash` model of `dimensions` (full-text search on), with [`texts`]
/// submitted; returns its id and the model's id.
async fn pipeline_on(app: &TestApp, dimensions: u32) -> (String, String) {
    let model = app
        .create_hash_model(&format!("m-{}", Uuid::new_v4().simple()), dimensions)
        .await;
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model["id"], "has_full_text_search": true}))
        .await;
    for (id, text) in texts() {
        app.submit_text(&pid, &id, &text).await;
    }
    (pid, str_of(&model, "id").to_owned())
}

async fn add_model(app: &TestApp, pid: &str, model: &str) -> Value {
    let reply = app
        .post(
            &format!("/pipelines/{pid}/embedding-models"),
            &json!({"embedding_model_id": model}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

async fn association(app: &TestApp, pid: &str, id: &str) -> Value {
    let reply = app.get(&format!("/pipelines/{pid}/embedding-models")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply
        .body
        .as_array()
        .expect("array")
        .iter()
        .find(|a| a["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no association {id} in {}", reply.text))
}

async fn wait_ready(app: &TestApp, pid: &str, id: &str) -> Value {
    eventually("the backfill is ready", Duration::from_secs(60), || async {
        let association = association(app, pid, id).await;
        assert_ne!(association["status"], "failed", "{association}");
        (association["status"] == "ready").then_some(association)
    })
    .await
}

/// A similarity search's `(page_content, score)` pairs, ordered by score then text (the order
/// of equal scores is not part of the answer).
async fn search(app: &TestApp, pid: &str, query: &str, params: Value) -> Vec<(String, f64)> {
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": query, "type": "similarity", "classification": "public", "params": params}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut hits: Vec<(String, f64)> = reply
        .body
        .as_array()
        .expect("array")
        .iter()
        .map(|hit| {
            (
                str_of(hit, "page_content").to_owned(),
                (hit["score"].as_f64().expect("score") * 1e5).round() / 1e5,
            )
        })
        .collect();
    hits.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    hits
}

/// The same results up to the choice among fragments tied at the last score kept: the same
/// scores, and the same fragments above that score.
fn assert_same_results(found: &[(String, f64)], expected: &[(String, f64)], query: &str) {
    let scores = |hits: &[(String, f64)]| hits.iter().map(|h| h.1).collect::<Vec<_>>();
    assert_eq!(scores(found), scores(expected), "{query}");
    let last = expected.last().map_or(0.0, |h| h.1);
    let before = |hits: &[(String, f64)]| {
        hits.iter()
            .filter(|h| h.1 < last)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(before(found), before(expected), "{query}");
}

/// Vectors and current fragments of a pipeline's association.
async fn vector_counts(app: &TestApp, pid: &str, association: &str) -> (i64, i64) {
    let table = format!("vectors_{}", Uuid::parse_str(association).unwrap().simple());
    let vectors: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} WHERE live"
    )))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let fragments = app
        .count(
            "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND expired_at IS NULL",
            pid,
        )
        .await;
    (vectors, fragments)
}

const QUERIES: [&str; 3] = [
    "how do glaciers shape valleys",
    "wild yeast and bread",
    "ocean tides and the moon",
];

#[tokio::test]
async fn an_added_model_is_backfilled_searchable_made_default_and_the_old_one_removed() {
    let app = spawn_app_without_worker().await;
    let (pid, model_a) = pipeline_on(&app, 384).await;
    let worker = app.worker().await;
    while worker.step(Duration::from_millis(300)).await.unwrap().jobs > 0 {}
    let model_b = str_of(&app.create_hash_model("model-b", 256).await, "id").to_owned();

    let added = add_model(&app, &pid, &model_b).await;
    let vb = str_of(&added, "id").to_owned();
    assert_eq!(added["status"], "backfilling", "{added}");
    assert_eq!(added["embedding_model"]["id"], model_b.as_str());
    assert_eq!(added["default"], false);
    let (_, fragments) = vector_counts(&app, &pid, &vb).await;
    assert!(fragments > 6, "{fragments}");
    assert_eq!(added["fragments_total"], fragments);
    assert_eq!(added["fragments_done"], 0);
    crate::helpers::assert_utc_timestamp(&added["created_at"]);

    // The pipeline object: the interface's map lists ready associations only.
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    let va = str_of(&pipeline, "default_vector_embedding_id").to_owned();
    let models = pipeline["embedding_models"].as_object().unwrap();
    assert_eq!(models.len(), 1, "{pipeline}");
    assert_eq!(models[&va]["id"], model_a.as_str());
    let listed = pipeline["vector_embeddings"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{pipeline}");
    assert_eq!(listed[0]["id"], va.as_str());
    assert_eq!(listed[0]["status"], "ready");
    assert_eq!(listed[0]["default"], true);
    assert_eq!(listed[1]["id"], vb.as_str());

    // Before it is ready, a search naming it (by association or by model) is refused with
    // its progress, never answered from part of the vectors.
    for named in [&vb, &model_b] {
        let reply = app
            .post(
                &format!("/pipelines/{pid}/search"),
                &json!({"query": "glaciers", "type": "similarity", "classification": "public", "params": {"k": 3, "embedding": named}}),
            )
            .await;
        assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
        let details = &reply.body["error"]["details"];
        assert_eq!(details["fragments_total"], fragments, "{}", reply.text);
        assert_eq!(details["fragments_done"], 0, "{}", reply.text);
        assert_eq!(details["status"], "backfilling");
    }
    // Searches on the default go on meanwhile.
    assert_eq!(
        search(&app, &pid, "glaciers", json!({"k": 3})).await.len(),
        3
    );

    // A document submitted during the backfill is embedded with both models.
    let late = "Late document: the aurora appears when solar wind meets the magnetic field.";
    app.submit_text(&pid, "late", late).await;

    // The worker processes the backfill's jobs (and the late document's) until it is ready.
    let ready = eventually("ready", Duration::from_secs(60), || async {
        worker.step(Duration::from_millis(300)).await.unwrap();
        let a = association(&app, &pid, &vb).await;
        (a["status"] == "ready").then_some(a)
    })
    .await;
    assert_eq!(ready["fragments_done"], ready["fragments_total"], "{ready}");
    let fragments_done = ready["fragments_done"].as_i64().unwrap();
    assert!(fragments_done >= fragments, "{ready}");
    let (vectors, current) = vector_counts(&app, &pid, &vb).await;
    assert_eq!(vectors, current, "one vector per current fragment");
    assert_eq!(vector_counts(&app, &pid, &va).await.0, current);
    // Its index was built once, at the end.
    let index: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(format!(
            "vectors_{}_hnsw",
            Uuid::parse_str(&vb).unwrap().simple()
        ))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(index.is_some(), "HNSW index built");
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    assert_eq!(pipeline["embedding_models"].as_object().unwrap().len(), 2);
    assert_eq!(pipeline["embedding_models"][&vb]["id"], model_b.as_str());

    // Searching it returns what a pipeline built with that model returns.
    let fresh = app
        .new_pipeline_id(json!({"embedding_model_id": model_b, "has_full_text_search": true}))
        .await;
    for (id, text) in texts() {
        app.submit_text(&fresh, &id, &text).await;
    }
    app.submit_text(&fresh, "late", late).await;
    while worker.step(Duration::from_millis(300)).await.unwrap().jobs > 0 {}
    for query in QUERIES.iter().chain(&["aurora and solar wind"]) {
        let expected = search(&app, &fresh, query, json!({"k": 5})).await;
        assert_eq!(expected.len(), 5);
        for named in [&vb, &model_b] {
            let found = search(&app, &pid, query, json!({"k": 5, "embedding": named})).await;
            assert_same_results(&found, &expected, query);
        }
    }
    let late_hits = search(
        &app,
        &pid,
        "aurora and solar wind",
        json!({"k": 1, "embedding": vb}),
    )
    .await;
    assert_eq!(late_hits[0].0, late);

    // Made the default: searches without `params.embedding` use it from the next request.
    let reply = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"default_vector_embedding_id": vb}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["default_vector_embedding_id"], vb.as_str());
    for query in QUERIES {
        let expected = search(&app, &fresh, query, json!({"k": 5})).await;
        let found = search(&app, &pid, query, json!({"k": 5})).await;
        assert_same_results(&found, &expected, query);
    }
    // The default cannot be removed; the old model can, with its vectors.
    let reply = app
        .delete(&format!("/pipelines/{pid}/embedding-models/{vb}"))
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    let reply = app
        .delete(&format!("/pipelines/{pid}/embedding-models/{va}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let table: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(format!(
            "vectors_{}",
            Uuid::parse_str(&va).unwrap().simple()
        ))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(table, None, "the old vectors are dropped");
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    assert_eq!(pipeline["embedding_models"].as_object().unwrap().len(), 1);
    assert_eq!(pipeline["vector_embeddings"].as_array().unwrap().len(), 1);
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "glaciers", "type": "similarity", "classification": "public", "params": {"k": 3, "embedding": va}}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );

    // Documents submitted now go to the new default only, and are found.
    app.submit_text(
        &pid,
        "later",
        "Penguins huddle together through the polar winter.",
    )
    .await;
    while worker.step(Duration::from_millis(300)).await.unwrap().jobs > 0 {}
    let hits = search(&app, &pid, "penguins in winter", json!({"k": 1})).await;
    assert!(hits[0].0.starts_with("Penguins"), "{hits:?}");
    // The model is no longer used by the pipeline: deleting it is allowed now.
    let reply = app.delete(&format!("/embedding-models/{model_a}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn every_error_of_model_migration_has_its_status_and_message() {
    let app = spawn_app().await;
    let (pid, model_a) = pipeline_on(&app, 64).await;
    let model_b = str_of(&app.create_hash_model("errors-b", 32).await, "id").to_owned();
    let missing = Uuid::new_v4().to_string();
    let path = format!("/pipelines/{pid}/embedding-models");

    // The pipeline: missing, or without write.
    let reply = app
        .post(
            &format!("/pipelines/{missing}/embedding-models"),
            &json!({"embedding_model_id": model_b}),
        )
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    // The model: missing.
    let reply = app
        .post(&path, &json!({"embedding_model_id": missing}))
        .await;
    assert_not_found_with_id(&reply, "Embedding model not found", &missing);
    // The same model twice (the default's too).
    let reply = app
        .post(&path, &json!({"embedding_model_id": model_a}))
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let added = add_model(&app, &pid, &model_b).await;
    let vb = str_of(&added, "id").to_owned();
    let reply = app
        .post(&path, &json!({"embedding_model_id": model_b}))
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    // At most four models.
    for n in 0..2 {
        let model = app.create_hash_model(&format!("errors-{n}"), 16).await;
        add_model(&app, &pid, str_of(&model, "id")).await;
    }
    let fifth = app.create_hash_model("errors-fifth", 16).await;
    let reply = app
        .post(&path, &json!({"embedding_model_id": fifth["id"]}))
        .await;
    assert_invalid_parameter(&reply, "a pipeline holds at most 4 embedding models");

    // The default: an association of this pipeline, ready.
    let reply = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"default_vector_embedding_id": missing}),
        )
        .await;
    assert_invalid_parameter(
        &reply,
        &format!("{missing} is not a vector embedding of this pipeline"),
    );
    let other = app.new_pipeline(json!({})).await;
    let reply = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"default_vector_embedding_id": other["default_vector_embedding_id"]}),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    // A pipeline without an added model ignores the field, as the interface does.
    let reply = app
        .patch(
            &format!("/pipelines/{}", str_of(&other, "id")),
            &json!({"default_vector_embedding_id": missing}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["default_vector_embedding_id"],
        other["default_vector_embedding_id"]
    );
    assert!(
        reply.body.get("vector_embeddings").is_none(),
        "{}",
        reply.text
    );
    let reply = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"default_vector_embedding_id": null}),
        )
        .await;
    assert_invalid_parameter(&reply, "default_vector_embedding_id cannot be null");
    // Removing: unknown, the default.
    let reply = app.delete(&format!("{path}/{missing}")).await;
    assert_not_found_with_id(&reply, "Vector embedding not found", &missing);
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    let va = str_of(&pipeline, "default_vector_embedding_id");
    let reply = app.delete(&format!("{path}/{va}")).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    // A search naming a model the pipeline does not hold.
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "x", "type": "similarity", "classification": "public", "params": {"k": 1, "embedding": fifth["id"]}}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );
    // Its model is in use: not deletable while the association exists.
    let reply = app.delete(&format!("/embedding-models/{model_b}")).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    wait_ready(&app, &pid, &vb).await;
    let reply = app.delete(&format!("{path}/{vb}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn a_key_needs_write_on_the_pipeline_and_read_on_the_model() {
    let app = spawn_app().await;
    let (pid, _) = pipeline_on(&app, 32).await;
    let model = str_of(&app.create_hash_model("perm-b", 16).await, "id").to_owned();
    let path = format!("/pipelines/{pid}/embedding-models");
    let reader = app
        .create_key(json!({"pipelines": 5, "embedding-models": 4}), json!(["*"]))
        .await;
    let reply = app
        .as_key(&reader)
        .post(&path, &json!({"embedding_model_id": model}))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &pid);
    let reply = app.as_key(&reader).get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app
        .as_key(&reader)
        .delete(&format!("{path}/{}", Uuid::new_v4()))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &pid);
    let writer = app.create_key(json!({"pipelines": 7}), json!(["*"])).await;
    let reply = app
        .as_key(&writer)
        .post(&path, &json!({"embedding_model_id": model}))
        .await;
    assert_not_found_with_id(&reply, "Embedding model not found", &model);
}

#[tokio::test]
async fn a_full_text_only_pipeline_gains_its_first_model_as_its_default() {
    let app = spawn_app().await;
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    for (id, text) in texts() {
        app.submit_text(&pid, &id, &text).await;
    }
    wait_until_processed(&app, &pid, texts().len()).await;
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "glaciers", "type": "similarity", "classification": "public", "params": {"k": 1}}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );
    let model = str_of(&app.create_hash_model("first", 384).await, "id").to_owned();
    let added = add_model(&app, &pid, &model).await;
    let id = str_of(&added, "id").to_owned();
    let ready = wait_ready(&app, &pid, &id).await;
    assert_eq!(ready["default"], true, "{ready}");
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    assert_eq!(pipeline["default_vector_embedding_id"], id.as_str());
    let hits = search(&app, &pid, "glaciers carve valleys", json!({"k": 2})).await;
    assert_eq!(hits.len(), 2);
    assert!(hits[0].0.contains("glaciers"), "{hits:?}");
}

#[tokio::test]
async fn a_model_that_keeps_failing_leaves_the_association_failed_with_its_reason() {
    let app = spawn_app_with(AppOptions {
        redelivery_delay: Some(Duration::from_millis(200)),
        ..AppOptions::default()
    })
    .await;
    let (pid, _) = pipeline_on(&app, 32).await;
    wait_until_processed(&app, &pid, texts().len()).await;
    // A model whose OpenAI-compatible server went away after it was registered.
    let model = str_of(&app.create_hash_model("unreachable", 16).await, "id").to_owned();
    sqlx::query(
        "UPDATE embedding_models SET provider = 'openai', model_name = 'text-embedding-3-small',
                parameters = $2, secret_parameters = NULL WHERE id = $1",
    )
    .bind(Uuid::parse_str(&model).unwrap())
    .bind(json!({"base_url": "http://127.0.0.1:9/v1", "dimensions": 16}))
    .execute(&app.pool)
    .await
    .unwrap();
    let added = add_model(&app, &pid, &model).await;
    let id = str_of(&added, "id").to_owned();
    let failed = eventually("failed", Duration::from_secs(60), || async {
        let a = association(&app, &pid, &id).await;
        (a["status"] == "failed").then_some(a)
    })
    .await;
    let reason = str_of(&failed, "status_reason");
    assert!(reason.starts_with("embedding"), "{reason}");
    assert_eq!(failed["fragments_done"], 0);
    // Searches naming it are refused; the pipeline's other model is untouched.
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "glaciers", "type": "similarity", "classification": "public", "params": {"k": 1, "embedding": id}}),
        )
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    assert_eq!(reply.body["error"]["details"]["status"], "failed");
    assert_eq!(
        search(&app, &pid, "glaciers", json!({"k": 1})).await.len(),
        1
    );
    // New documents are stored without it.
    app.submit_text(&pid, "after", "Comets grow tails near the sun.")
        .await;
    wait_until_processed(&app, &pid, texts().len() + 1).await;
    let reply = app
        .delete(&format!("/pipelines/{pid}/embedding-models/{id}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn a_backfill_whose_worker_dies_resumes_without_duplicate_or_missing_vectors() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        ack_wait: Some(Duration::from_secs(2)),
        ..AppOptions::default()
    })
    .await;
    let model_a = app.create_hash_model("resume-a", 32).await;
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model_a["id"]}))
        .await;
    // 1,500 short documents: more than a batch per range.
    let documents: Vec<Value> = (0..1500)
        .map(|i| json!({"external_identifier": format!("d{i}"), "classification": "public", "text": format!("document {i} about topic {}", i % 37)}))
        .collect();
    for chunk in documents.chunks(500) {
        app.submit_batch(&pid, chunk.to_vec()).await;
    }
    let worker = app.worker().await;
    while worker.step(Duration::from_millis(300)).await.unwrap().jobs > 0 {}
    let model_b = str_of(&app.create_hash_model("resume-b", 24).await, "id").to_owned();
    let added = add_model(&app, &pid, &model_b).await;
    let id = str_of(&added, "id").to_owned();
    assert_eq!(added["fragments_total"], 1500);

    // A worker takes one of the backfill's jobs and dies before acknowledging it.
    let stream = app
        .state
        .queue
        .jetstream()
        .get_stream(&app.queue.stream)
        .await
        .unwrap();
    let consumer: PullConsumer = stream.get_consumer(&app.queue.consumer).await.unwrap();
    let mut messages = consumer.fetch().max_messages(1).messages().await.unwrap();
    let taken = messages.next().await.expect("a job").unwrap();
    let job: trove::ingest::queue::BackfillJob = serde_json::from_slice(&taken.payload).unwrap();
    assert_eq!(job.backfill.to_string(), id);
    drop(messages);

    // Another worker goes on with the other ranges; the taken one comes back after the ack
    // wait, and the backfill finishes.
    let done = eventually("ready", Duration::from_secs(60), || async {
        worker.step(Duration::from_millis(300)).await.unwrap();
        let a = association(&app, &pid, &id).await;
        if a["status"] == "backfilling" {
            let remaining = worker_metric(&worker, "trove_backfill_fragments_remaining");
            assert!(remaining >= 0.0);
        }
        (a["status"] == "ready").then_some(a)
    })
    .await;
    assert_eq!(done["fragments_done"], 1500, "{done}");
    let (vectors, fragments) = vector_counts(&app, &pid, &id).await;
    assert_eq!((vectors, fragments), (1500, 1500));
    let text = worker.metrics.render();
    assert_eq!(
        metric_value(&text, "trove_backfill_fragments_remaining"),
        None,
        "{text}"
    );
}

#[tokio::test]
async fn expired_fragments_are_not_backfilled_and_deleted_documents_leave_nothing() {
    let app = spawn_app().await;
    let (pid, _) = pipeline_on(&app, 32).await;
    wait_until_processed(&app, &pid, texts().len()).await;
    // A new version of doc-0 expires the old one's fragments; doc-1 is deleted.
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "doc-0", "classification": "public", "text": "A short replacement.", "expire_older_versions": true}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let replacement = reply.body;
    let doc1: Value = app
        .get(&format!(
            "/pipelines/{pid}/documents?external_identifier=doc-1"
        ))
        .await
        .body;
    let doc1 = uuid_of(&doc1["data"][0], "id");
    let reply = app
        .delete(&format!("/pipelines/{pid}/documents/{doc1}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    eventually("replacement stored", Duration::from_secs(30), || async {
        let reply = app
            .get(&format!(
                "/pipelines/{pid}/documents/{}?version={}",
                str_of(&replacement, "id"),
                replacement["version"]
            ))
            .await;
        (reply.body[0]["status"] == "success").then_some(())
    })
    .await;
    let expired = app
        .count(
            "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND expired_at IS NOT NULL",
            &pid,
        )
        .await;
    assert!(expired > 0, "the old version's fragments expired");
    let model = str_of(&app.create_hash_model("expiry-b", 16).await, "id").to_owned();
    let added = add_model(&app, &pid, &model).await;
    let id = str_of(&added, "id").to_owned();
    let ready = wait_ready(&app, &pid, &id).await;
    let (vectors, current) = vector_counts(&app, &pid, &id).await;
    assert_eq!(vectors, current);
    let table = format!("vectors_{}", Uuid::parse_str(&id).unwrap().simple());
    let all: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(all, current, "no vector of an expired fragment");
    assert_eq!(ready["fragments_total"], current);
}
