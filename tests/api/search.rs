//! `POST /pipelines/{id}/search` end to end: ingestion, then similarity, MMR and full-text
//! searches with classifications and metadata filters.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    AppOptions, TestApp, percent_encode, spawn_app_with, spawn_app_without_worker,
};

const DOCS: [(&str, &str, &str, i64); 6] = [
    (
        "cats",
        "public",
        "Cats purr and sleep in the sun all afternoon.",
        2020,
    ),
    (
        "dogs",
        "public",
        "Dogs bark at the mailman and fetch sticks in the park.",
        2021,
    ),
    (
        "ships",
        "internal",
        "Container ships cross the ocean carrying cargo between harbours.",
        2022,
    ),
    (
        "trains",
        "internal",
        "Freight trains haul coal across the plains at night.",
        2023,
    ),
    (
        "secret",
        "restricted",
        "The vault combination is stored in the secret archive.",
        2024,
    ),
    (
        "kittens",
        "public",
        "Kittens purr loudly and sleep curled in the sun.",
        2025,
    ),
];

/// A pipeline with full-text search, six documents ingested.
async fn searchable_app() -> (TestApp, String) {
    let app = spawn_app_without_worker().await;
    let model = app.get("/embedding-models?name=default").await.body["data"][0]["id"].clone();
    let splitter = app
        .get("/text-splitters?name=recursive-character")
        .await
        .body["data"][0]["id"]
        .clone();
    let pipeline = app
        .post(
            "/pipelines",
            &json!({
                "name": "search", "embedding_model_id": model, "default_text_splitter_id": splitter,
                "has_full_text_search": true,
                "classifications": ["public", "internal", "restricted"],
                "hierarchy": [["internal", "public"], ["restricted", "internal"]],
                "metadata_schema": {"type": "object", "properties": {"year": {"type": "integer"}, "name": {"type": "string"}}},
            }),
        )
        .await;
    assert_eq!(pipeline.status, StatusCode::CREATED, "{}", pipeline.text);
    let pid = pipeline.body["id"].as_str().unwrap().to_owned();
    for (name, classification, text, year) in DOCS {
        let reply = app
            .post(
                &format!("/pipelines/{pid}/documents"),
                &json!({"external_identifier": name, "classification": classification, "text": text, "metadata": {"year": year, "name": name}}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let outcome = app.step().await;
    assert_eq!(outcome.stored, DOCS.len(), "{outcome:?}");
    (app, pid)
}

/// Changes a key with the master key (expects 200).
async fn change_key(app: &TestApp, key_id: &str, changes: Value) {
    let reply = app.patch(&format!("/api-keys/{key_id}"), &changes).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

async fn search(app: &TestApp, pid: &str, body: Value) -> crate::helpers::Reply {
    app.post(&format!("/pipelines/{pid}/search"), &body).await
}

/// The `metadata.name` of each search result.
fn result_names(reply: &crate::helpers::Reply) -> Vec<String> {
    reply
        .body
        .as_array()
        .unwrap_or_else(|| panic!("{}", reply.text))
        .iter()
        .map(|f| f["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn similarity_ranks_by_distance_within_the_readers_classifications() {
    let (app, pid) = searchable_app().await;
    let reply = search(&app, &pid, json!({"query": "cats purr and sleep in the sun", "type": "similarity", "classification": "public"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let hits = reply.body.as_array().unwrap();
    assert_eq!(
        hits.len(),
        3,
        "public sees only the three public documents: {}",
        reply.text
    );
    assert_eq!(hits[0]["metadata"]["name"], "cats");
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(
        scores.windows(2).all(|w| w[0] <= w[1]),
        "ascending distance: {scores:?}"
    );
    assert!(hits[0].get("embedding").is_none());
    assert_eq!(hits[0]["expired_at"], Value::Null);
    assert!(
        hits[0]["page_content"]
            .as_str()
            .unwrap()
            .starts_with("Cats")
    );

    // Hierarchy: restricted inherits internal which inherits public.
    let all = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": ["restricted"], "params": {"k": 10}})).await;
    assert_eq!(all.body.as_array().unwrap().len(), 6);
    // Exact matching (search_type 0): only the named classification.
    let exact = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": {"classifications": ["internal"], "search_type": 0}, "params": {"k": 10}})).await;
    assert_eq!(exact.body.as_array().unwrap().len(), 2, "{}", exact.text);
    // Validation (search_type 1) of an undefined name.
    let undefined = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": {"classifications": ["nope"], "search_type": 1}})).await;
    assert_eq!(undefined.status, StatusCode::NOT_FOUND);
    assert_eq!(undefined.message(), "Classification not found");
    let empty = search(
        &app,
        &pid,
        json!({"query": "x", "type": "similarity", "classification": []}),
    )
    .await;
    assert_eq!(empty.body, json!([]));
}

#[tokio::test]
async fn params_defaults_zeros_and_threshold() {
    let (app, pid) = searchable_app().await;
    let defaults = search(
        &app,
        &pid,
        json!({"query": "ocean", "type": "similarity", "classification": "restricted"}),
    )
    .await;
    assert_eq!(
        defaults.body.as_array().unwrap().len(),
        5,
        "k defaults to 5"
    );
    let zero = search(&app, &pid, json!({"query": "ocean", "type": "similarity", "classification": "restricted", "params": {}})).await;
    assert_eq!(zero.body, json!([]), "params present: omitted k is 0");
    let close = search(&app, &pid, json!({"query": "Cats purr and sleep in the sun all afternoon.", "type": "similarity", "classification": "restricted", "params": {"k": 10, "threshold": 0.0001}})).await;
    assert_eq!(
        result_names(&close),
        vec!["cats"],
        "threshold keeps only the identical text (distance 0)"
    );
    let too_big = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": "public", "params": {"k": 70000}})).await;
    assert_eq!(too_big.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn mmr_returns_diverse_results_in_distance_order() {
    let (app, pid) = searchable_app().await;
    let reply = search(&app, &pid, json!({"query": "cats purr sleep sun", "type": "mmr", "classification": "public", "params": {"k": 2, "fetch_k": 3, "lambda_mult": 0.1}})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let hits = reply.body.as_array().unwrap();
    assert_eq!(hits.len(), 2);
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores[0] <= scores[1]);
    let min_k = search(&app, &pid, json!({"query": "cats", "type": "mmr", "classification": "public", "params": {"k": 5, "fetch_k": 2}})).await;
    assert_eq!(
        min_k.body.as_array().unwrap().len(),
        2,
        "at most min(k, fetch_k)"
    );
}

#[tokio::test]
async fn a_selection_among_many_candidates_keeps_distance_order() {
    let (app, pid) = searchable_app().await;
    let notes = (0..150)
        .map(|i| {
            let name = format!("note-{i}");
            let text = format!("Note {i}: the cats of house {} purr at {} o'clock.", i % 13, i % 24);
            json!({"external_identifier": name, "classification": "public", "text": text, "metadata": {"year": 2000 + i, "name": name}})
        })
        .collect();
    app.submit_batch(&pid, notes).await;
    while app.step().await.stored > 0 {}
    // 120 picks among 150 candidates, each compared with those left: made on the blocking pool.
    let reply = search(&app, &pid, json!({"query": "cats purring at noon", "type": "mmr", "classification": "public", "params": {"k": 120, "fetch_k": 150}})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let hits = reply.body.as_array().unwrap();
    assert_eq!(hits.len(), 120);
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] <= w[1]), "{scores:?}");
    let ids: std::collections::HashSet<&str> =
        hits.iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 120);
}

#[tokio::test]
async fn full_text_requires_every_word() {
    let (app, pid) = searchable_app().await;
    let reply = search(
        &app,
        &pid,
        json!({"query": "purr sun", "type": "search", "classification": "public"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut found = result_names(&reply);
    found.sort();
    assert_eq!(found, vec!["cats", "kittens"]);
    let scores: Vec<f64> = reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "descending rank: {scores:?}"
    );
    let none = search(
        &app,
        &pid,
        json!({"query": "purr ocean", "type": "search", "classification": "public"}),
    )
    .await;
    assert_eq!(none.body, json!([]));
    let empty = search(
        &app,
        &pid,
        json!({"query": "", "type": "search", "classification": "public"}),
    )
    .await;
    assert_eq!(empty.body, json!([]));
    // A query of 50,000 words is parsed once for the statement, not where Postgres plans it
    // (whose recursion over so many words exceeds its stack).
    let long = search(
        &app,
        &pid,
        json!({"query": "purr sun ".repeat(25_000), "type": "search", "classification": "public"}),
    )
    .await;
    assert_eq!(long.status, StatusCode::OK, "{}", long.text);
    let mut found = result_names(&long);
    found.sort();
    assert_eq!(found, vec!["cats", "kittens"]);
}

#[tokio::test]
async fn filters_apply_before_k() {
    let (app, pid) = searchable_app().await;
    let reply = search(&app, &pid, json!({"query": "animals", "type": "similarity", "classification": "restricted", "params": {"k": 10},
        "filters": {"$or": [{"year": {"$lt": 2021}}, {"name": {"$in": ["secret", "ships"]}}]}})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut found = result_names(&reply);
    found.sort();
    assert_eq!(found, vec!["cats", "secret", "ships"]);
    let schema = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": "public", "filters": {"color": {"$eq": "red"}}})).await;
    assert_eq!(schema.status, StatusCode::BAD_REQUEST);
    assert_eq!(schema.message(), "Schema error");
    let grammar = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": "public", "filters": {"year": 2020}})).await;
    assert_eq!(
        grammar.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        grammar.text
    );
}

#[tokio::test]
async fn search_errors() {
    let (app, pid) = searchable_app().await;
    let query_type = search(
        &app,
        &pid,
        json!({"query": "x", "type": "query", "classification": "public"}),
    )
    .await;
    assert_eq!(
        (query_type.status, query_type.message()),
        (StatusCode::BAD_REQUEST, "Invalid search type or parameters")
    );
    let hybrid = search(
        &app,
        &pid,
        json!({"query": "x", "type": "hybrid", "classification": "public"}),
    )
    .await;
    assert_eq!(
        (hybrid.status, hybrid.message()),
        (
            StatusCode::NOT_IMPLEMENTED,
            "Hybrid placeholder is not implemented yet"
        )
    );
    let other = search(
        &app,
        &pid,
        json!({"query": "x", "type": "fuzzy", "classification": "public"}),
    )
    .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    let embedding = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": "public", "params": {"k": 1, "embedding": uuid::Uuid::new_v4()}})).await;
    assert_eq!(
        (embedding.status, embedding.message()),
        (StatusCode::BAD_REQUEST, "Vector embedding not found")
    );
    let max_ip = search(&app, &pid, json!({"query": "x", "type": "similarity", "classification": "public", "distance_strategy": "max-inner-product"})).await;
    assert_eq!(max_ip.status, StatusCode::INTERNAL_SERVER_ERROR);
    let unknown = search(
        &app,
        &uuid::Uuid::new_v4().to_string(),
        json!({"query": "x", "type": "similarity", "classification": "public"}),
    )
    .await;
    assert_eq!(
        (unknown.status, unknown.message()),
        (StatusCode::NOT_FOUND, "Pipeline not found")
    );
    // Read without execute is "not found" on pipeline routes.
    let reader = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let denied = app
        .req(Method::POST, &format!("/pipelines/{pid}/search"))
        .as_key(&reader)
        .json(&json!({"query": "x", "type": "similarity", "classification": "public"}))
        .send()
        .await;
    assert_eq!(denied.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_document_list_filters_by_metadata() {
    let (app, pid) = searchable_app().await;
    let filter = percent_encode(r#"{"year": {"$gt": 2022}}"#);
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents?metadata={filter}&order_by=external_identifier"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let ids: Vec<&str> = reply.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["external_identifier"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["kittens", "secret", "trains"]);
    assert_eq!(
        reply.body["query_info"]["metadata"],
        json!({"year": {"$gt": 2022}})
    );
    let grammar = app
        .get(&format!(
            "/pipelines/{pid}/documents?metadata={}",
            percent_encode(r#"{"year": 2020}"#)
        ))
        .await;
    assert_eq!(grammar.status, StatusCode::BAD_REQUEST);
    assert!(
        grammar
            .text
            .starts_with("Failed to deserialize query string"),
        "{}",
        grammar.text
    );
    let schema = app
        .get(&format!(
            "/pipelines/{pid}/documents?metadata={}",
            percent_encode(r#"{"color": {"$eq": "x"}}"#)
        ))
        .await;
    assert_eq!(
        (schema.status, schema.message()),
        (StatusCode::BAD_REQUEST, "Schema error")
    );
}

/// Across random hierarchies, a reader never receives a fragment whose classification is
/// outside the transitive closure of the names it gave.
#[tokio::test]
async fn no_classification_leaks_across_random_hierarchies() {
    let app = spawn_app_without_worker().await;
    let model = app.get("/embedding-models?name=default").await.body["data"][0]["id"].clone();
    let splitter = app
        .get("/text-splitters?name=recursive-character")
        .await
        .body["data"][0]["id"]
        .clone();
    let worker = trove::startup::build_worker(&app.state).await.unwrap();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for scenario in 0..12 {
        let names: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
        // Edges only from a lower to a higher index: no cycles.
        let mut hierarchy = Vec::new();
        for a in 0..6 {
            for b in (a + 1)..6 {
                if next(3) == 0 {
                    hierarchy.push((names[a].clone(), names[b].clone()));
                }
            }
        }
        let pipeline = app
            .post(
                "/pipelines",
                &json!({"name": format!("leak-{scenario}"), "embedding_model_id": model, "default_text_splitter_id": splitter,
                        "has_full_text_search": true, "classifications": names,
                        "hierarchy": hierarchy.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>()}),
            )
            .await;
        assert_eq!(pipeline.status, StatusCode::CREATED, "{}", pipeline.text);
        let pid = pipeline.body["id"].as_str().unwrap().to_owned();
        for (i, name) in names.iter().enumerate() {
            for copy in 0..2 {
                let reply = app
                    .post(
                        &format!("/pipelines/{pid}/documents"),
                        &json!({"external_identifier": format!("{name}-{copy}"), "classification": name,
                                "text": format!("shared words about topic {i} copy {copy}")}),
                    )
                    .await;
                assert_eq!(reply.status, StatusCode::CREATED);
            }
        }
        worker.step(Duration::from_millis(300)).await.unwrap();
        for _ in 0..4 {
            let reader: Vec<String> = names.iter().filter(|_| next(3) == 0).cloned().collect();
            // The closure: the names plus everything they inherit, transitively.
            let mut closure: std::collections::BTreeSet<String> = reader.iter().cloned().collect();
            loop {
                let before = closure.len();
                for (a, b) in &hierarchy {
                    if closure.contains(a) {
                        closure.insert(b.clone());
                    }
                }
                if closure.len() == before {
                    break;
                }
            }
            for kind in ["similarity", "mmr", "search"] {
                let reply = search(
                    &app,
                    &pid,
                    json!({"query": "shared words", "type": kind, "classification": reader,
                                                       "params": {"k": 100, "fetch_k": 100}}),
                )
                .await;
                assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
                let got: std::collections::BTreeSet<String> = reply
                    .body
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f["classification"].as_str().unwrap().to_owned())
                    .collect();
                assert!(
                    got.is_subset(&closure),
                    "{kind}: reader {reader:?} got {got:?}, closure {closure:?}"
                );
                if kind != "mmr" {
                    assert_eq!(
                        got, closure,
                        "{kind}: every allowed classification is found"
                    );
                }
            }
        }
    }
}

// ---- Distance strategies ------------------------------------------------------------------

fn scores(reply: &crate::helpers::Reply) -> Vec<f64> {
    reply
        .body
        .as_array()
        .unwrap_or_else(|| panic!("{}", reply.text))
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn euclidean_and_dot_product_on_unit_vectors_follow_the_cosine_order() {
    let (app, pid) = searchable_app().await;
    let body = |strategy: &str| {
        json!({"query": "pets that sleep a lot", "type": "similarity", "classification": "internal",
               "distance_strategy": strategy, "params": {"k": 4}})
    };
    let cosine = search(&app, &pid, body("cosine")).await;
    let euclidean = search(&app, &pid, body("euclidean-distance")).await;
    let dot = search(&app, &pid, body("dot-product")).await;
    for reply in [&cosine, &euclidean, &dot] {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    assert_eq!(result_names(&cosine).len(), 4);
    assert_eq!(result_names(&euclidean), result_names(&cosine));
    assert_eq!(result_names(&dot), result_names(&cosine));
    // For unit vectors: |a − b| = √(2 · cosine distance), −a·b = cosine distance − 1.
    for ((c, e), d) in scores(&cosine)
        .iter()
        .zip(scores(&euclidean))
        .zip(scores(&dot))
    {
        assert!((e - (2.0 * c).sqrt()).abs() < 1e-4, "{c} {e}");
        assert!((d - (c - 1.0)).abs() < 1e-4, "{c} {d}");
    }
    // Thresholds apply to the requested distance.
    let top = scores(&euclidean)[1];
    let mut limited = body("euclidean-distance");
    limited["params"]["threshold"] = json!(top + 1e-6);
    let reply = search(&app, &pid, limited).await;
    assert_eq!(
        result_names(&reply),
        result_names(&euclidean)[..2].to_vec(),
        "{}",
        reply.text
    );
}

/// An OpenAI-compatible server whose vectors are not of unit length: the first word of a
/// text picks one of three 2-d vectors.
#[poem::handler]
fn raw_vectors(body: poem::web::Json<Value>) -> poem::web::Json<Value> {
    let data: Vec<Value> = body["input"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let text = text.as_str().unwrap_or_default();
            let embedding = match text.split_whitespace().next() {
                Some("bravo") => [10.0, 0.5],
                Some("charlie") => [0.9, 0.4],
                _ => [1.0, 0.0],
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    poem::web::Json(json!({"object": "list", "data": data, "model": "raw"}))
}

#[tokio::test]
async fn euclidean_and_dot_product_on_other_vectors_rank_by_their_own_distance() {
    let address = crate::helpers::serve_on_loopback(
        poem::Route::new().at("/v1/embeddings", poem::post(raw_vectors)),
    );
    let app = spawn_app_without_worker().await;
    let model = app
        .post(
            "/embedding-models",
            &json!({"name": "raw", "provider": "openai", "model_name": "raw",
                    "parameters": {"base_url": format!("http://{address}/v1"), "api_key": "k"}}),
        )
        .await;
    assert_eq!(model.status, StatusCode::CREATED, "{}", model.text);
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model.body["id"]}))
        .await;
    for name in ["alpha", "bravo", "charlie"] {
        app.submit_text(&pid, name, &format!("{name} fragment"))
            .await;
    }
    assert_eq!(app.step().await.stored, 3);
    let order = |reply: &crate::helpers::Reply| -> Vec<String> {
        reply
            .body
            .as_array()
            .unwrap_or_else(|| panic!("{}", reply.text))
            .iter()
            .map(|h| h["page_content"].as_str().unwrap().to_owned())
            .collect()
    };
    for (strategy, first, second, third, score) in [
        ("cosine", "alpha", "bravo", "charlie", 0.0),
        ("euclidean-distance", "alpha", "charlie", "bravo", 0.0),
        ("dot-product", "bravo", "alpha", "charlie", -10.0),
    ] {
        let reply = search(
            &app,
            &pid,
            json!({"query": "alpha", "type": "similarity", "classification": "public",
                   "distance_strategy": strategy}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(
            order(&reply),
            [first, second, third].map(|n| format!("{n} fragment")),
            "{strategy}"
        );
        assert!((scores(&reply)[0] - score).abs() < 1e-6, "{}", reply.text);
    }
}

#[tokio::test]
async fn every_connection_searches_with_iterative_scans() {
    let app = spawn_app_with(AppOptions::default()).await;
    let (scan, ef): (String, String) = sqlx::query_as(
        "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search')",
    )
    .fetch_one(app.state.pool.pg_pool())
    .await
    .unwrap();
    assert_eq!(scan, "relaxed_order");
    assert_eq!(ef, trove::store::SESSION_EF_SEARCH.to_string());
}

/// A search whose scope the planner expects few fragments in (here a metadata filter)
/// computes the distance of every admitted fragment instead of walking the HNSW index: the
/// results are the exact ranking, and the statement's plan never reads the index, while the
/// same statement on the index path does.
#[tokio::test]
async fn selective_scopes_are_searched_exactly() {
    use trove::retrieval::cost;
    use trove::retrieval::search::{self, DistanceStrategy, NearestPath, Scope, VectorQuery};

    let (app, pid) = searchable_app().await;
    let pipeline = app.get(&format!("/pipelines/{pid}")).await;
    assert_eq!(pipeline.status, StatusCode::OK, "{}", pipeline.text);
    let ve = uuid::Uuid::parse_str(
        pipeline.body["default_vector_embedding_id"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let table = trove::store::vectors::table_name(ve);
    let model = app.get("/embedding-models?name=default").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = "cats sleeping in the sun";
    let embedded = app
        .post(
            &format!("/embedding-models/{model}/query"),
            &json!({"text": text}),
        )
        .await;
    assert_eq!(embedded.status, StatusCode::OK, "{}", embedded.text);
    let vector: Vec<f32> = embedded.body["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();

    // Through the interface: the exact ranking under the filter, with exact scores.
    let filter = json!({"year": {"$ge": 2021}});
    let reply = search(
        &app,
        &pid,
        json!({"query": text, "type": "similarity", "classification": "restricted",
        "params": {"k": 3}, "filters": filter}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let literal = format!(
        "[{}]",
        vector
            .iter()
            .map(f32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let expected: Vec<(String, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT f.metadata->>'name', v.embedding <=> $1::vector
         FROM fragments f JOIN {table} v ON v.fragment_id = f.id
         WHERE f.pipeline_id = $2 AND (f.metadata->>'year')::bigint >= 2021
         ORDER BY 2, 1 LIMIT 3"
    )))
    .bind(&literal)
    .bind(uuid::Uuid::parse_str(&pid).unwrap())
    .fetch_all(app.state.pool.pg_pool())
    .await
    .unwrap();
    assert_eq!(
        result_names(&reply),
        expected.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    );
    for (got, (_, want)) in scores(&reply).iter().zip(&expected) {
        assert!((got - want).abs() < 1e-6, "score {got} != {want}");
    }

    // The choice: the scope admits a few of six fragments, fewer than a walk visits, so the
    // path is exact; the planner scans rather than use an index on six rows, so the scope is
    // tested in `fragments`.
    let schema = json!({"type": "object", "properties": {"year": {"type": "integer"}, "name": {"type": "string"}}});
    let typed =
        trove_query::filter::validate(&serde_json::from_value(filter).unwrap(), &schema).unwrap();
    let classifications = ["public", "internal", "restricted"].map(str::to_owned);
    let scope = Scope {
        pipeline_id: uuid::Uuid::parse_str(&pid).unwrap(),
        classifications: &classifications,
        filter: Some(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        )),
    };
    let estimate = search::estimate_scope(&app.state.pool, &scope, true)
        .await
        .unwrap();
    assert!(estimate.admitted <= 6.0, "estimate {estimate:?}");
    assert_eq!(cost::choose(6.0, Some(estimate), 3), NearestPath::ExactScan);

    // The plans: with sorts disabled (so a planner that can walk the index does, even on six
    // rows), the index path reads the HNSW index and the exact path still does not.
    let mut conn = app.state.pool.acquire().await.unwrap();
    sqlx::query("SET enable_sort = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    for (path, uses_index) in [
        (NearestPath::Index, true),
        (NearestPath::Exact, false),
        (NearestPath::ExactScan, false),
    ] {
        let query = VectorQuery {
            vector_embedding_id: ve,
            vector: &vector,
            strategy: DistanceStrategy::Cosine,
            unit_vectors: true,
            estimated_rows: 6.0,
            selectivity: None,
            path,
            indexed: true,
            gate: None,
        };
        let plan = search::nearest_plan(&scope, &query, None, 3, false).unwrap();
        let (explained,): (sqlx::types::Json<Value>,) = sqlx::query_as_with(
            sqlx::AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {}", plan.sql)),
            plan.arguments,
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        let explained = explained.0.to_string();
        assert_eq!(
            explained.contains(&format!("{table}_hnsw")),
            uses_index,
            "{path:?}: {explained}"
        );
    }
    sqlx::query("RESET enable_sort")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// A search reads its key in the same statement as the pipeline's search context: every
/// refusal of the key check holds there, on the very next request.
#[tokio::test]
async fn a_search_checks_its_key_in_the_context_read() {
    let (app, pid) = searchable_app().await;
    let path = format!("/pipelines/{pid}/search");
    let body = json!({"query": "cats", "type": "similarity", "classification": "public"});
    let created = app.create_key_with(json!({"name": "searcher"})).await;
    let key = crate::helpers::key_of(&created);
    app.grant(
        &key.0,
        json!([{"object_type": "pipelines", "object_id": pid, "permission": 5, "classifications": ["public"]}]),
    )
    .await;
    let search_as = |key: (String, String)| {
        let app = &app;
        let path = path.clone();
        let body = body.clone();
        async move {
            app.req(Method::POST, &path)
                .as_key(&key)
                .json(&body)
                .send()
                .await
        }
    };
    let found = search_as(key.clone()).await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.text);
    assert!(!found.body.as_array().unwrap().is_empty());

    let refused = |reply: crate::helpers::Reply| {
        crate::helpers::assert_error(
            &reply,
            StatusCode::UNAUTHORIZED,
            "Invalid API Key or Secret",
        );
    };
    refused(search_as((key.0.clone(), "wrong".to_owned())).await);
    refused(search_as((uuid::Uuid::new_v4().to_string(), key.1.clone())).await);

    change_key(&app, &key.0, json!({"expiration": "2001-02-03T04:05:06Z"})).await;
    refused(search_as(key.clone()).await);
    change_key(&app, &key.0, json!({"expiration": null})).await;
    assert_eq!(search_as(key.clone()).await.status, StatusCode::OK);

    change_key(&app, &key.0, json!({"active": false})).await;
    refused(search_as(key).await);
}

/// A key's next search on a pipeline is answered on what its last one read (the key check and
/// the search context), confirmed inside its statement: the same fragments, and every change
/// to the key, its permissions or the pipeline takes effect on the very next search, also
/// through a second replica that remembered the key before the first made the change.
#[tokio::test]
async fn a_remembered_search_answers_as_a_fresh_one_until_anything_it_read_changes() {
    let (app, pid) = searchable_app().await;
    let replica = spawn_app_with(AppOptions {
        no_worker: true,
        database: Some(app.database.clone()),
        ..AppOptions::default()
    })
    .await;
    let path = format!("/pipelines/{pid}/search");
    // "restricted" inherits the other two: the search sees every classification.
    let body = json!({"query": "cats", "type": "similarity", "classification": "restricted"});
    let created = app.create_key_with(json!({"name": "searcher"})).await;
    let key = crate::helpers::key_of(&created);
    let grant = |permission: u8| json!([{"object_type": "pipelines", "object_id": pid, "permission": permission, "classifications": ["*"]}]);
    app.grant(&key.0, grant(5)).await;
    let search_on = |on: &'static str, key: (String, String)| {
        let app = if on == "replica" { &replica } else { &app };
        let (path, body) = (path.clone(), body.clone());
        async move {
            app.req(Method::POST, &path)
                .as_key(&key)
                .json(&body)
                .send()
                .await
        }
    };
    let remembered = |app: &TestApp| app.state.metrics.searches_remembered.get();
    let refused = |reply: crate::helpers::Reply| {
        crate::helpers::assert_error(
            &reply,
            StatusCode::UNAUTHORIZED,
            "Invalid API Key or Secret",
        );
    };

    let fresh = search_on("app", key.clone()).await;
    assert_eq!(fresh.status, StatusCode::OK, "{}", fresh.text);
    assert_eq!(result_names(&fresh).len(), DOCS.len().min(5));
    assert_eq!(remembered(&app), 0.0);
    let again = search_on("app", key.clone()).await;
    assert_eq!(again.body, fresh.body);
    assert_eq!(remembered(&app), 1.0);
    refused(search_on("app", (key.0.clone(), "wrong".to_owned())).await);
    for expected in [0.0, 1.0] {
        let reply = search_on("replica", key.clone()).await;
        assert_eq!(reply.body, fresh.body);
        assert_eq!(remembered(&replica), expected);
    }

    // Deactivated through the first replica: refused by both, the second included.
    change_key(&app, &key.0, json!({"active": false})).await;
    refused(search_on("replica", key.clone()).await);
    refused(search_on("app", key.clone()).await);
    change_key(&app, &key.0, json!({"active": true})).await;
    for _ in 0..2 {
        assert_eq!(search_on("replica", key.clone()).await.body, fresh.body);
    }
    assert_eq!(remembered(&replica), 2.0);

    // Execute withdrawn (a search then finds no pipeline, as the interface says).
    app.grant(&key.0, grant(4)).await;
    let denied = search_on("replica", key.clone()).await;
    crate::helpers::assert_error(&denied, StatusCode::NOT_FOUND, "Pipeline not found");
    app.grant(&key.0, grant(5)).await;
    for _ in 0..2 {
        assert_eq!(search_on("replica", key.clone()).await.body, fresh.body);
    }
    assert_eq!(remembered(&replica), 3.0);

    // An expiration passes between two searches.
    let soon = chrono::Utc::now() + chrono::Duration::seconds(2);
    change_key(&app, &key.0, json!({"expiration": soon.to_rfc3339()})).await;
    for _ in 0..2 {
        assert_eq!(search_on("replica", key.clone()).await.body, fresh.body);
    }
    assert_eq!(remembered(&replica), 4.0);
    // Time passes: the key expires.
    let left = soon - chrono::Utc::now();
    tokio::time::sleep(left.to_std().unwrap_or_default() + Duration::from_millis(50)).await;
    refused(search_on("replica", key.clone()).await);

    // The pipeline deleted.
    change_key(&app, &key.0, json!({"expiration": null})).await;
    assert_eq!(search_on("app", key.clone()).await.body, fresh.body);
    let deleted = app.delete(&format!("/pipelines/{pid}")).await;
    assert!(deleted.status.is_success(), "{}", deleted.text);
    let gone = search_on("app", key.clone()).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
    assert_eq!(remembered(&app), 1.0);
}

/// A scope that names every classification of its pipeline is estimated without its
/// classification condition: with as many fragments of each of three classifications, the
/// planner's own estimate of `classification IN (all three)` is 0.70 of them (the sampled
/// frequencies, ⅓ each as `real`, sum to just over 1, so it combines them as independent),
/// which would put a 5 % filter under the walk's threshold after some ingestions.
#[tokio::test]
async fn a_scope_naming_every_classification_is_estimated_as_the_whole_pipeline() {
    use trove::retrieval::search::{self, Scope};
    let app = spawn_app_without_worker().await;
    let model = app.create_hash_model("estimate", 16).await;
    let pipeline = app
        .new_pipeline(json!({
            "embedding_model_id": model["id"],
            "classifications": ["public", "internal", "restricted"],
            "hierarchy": [],
        }))
        .await;
    let pid = pipeline["id"].as_str().unwrap().to_owned();
    let classes = ["public", "internal", "restricted"];
    let documents: Vec<Value> = (0..60)
        .map(|i| {
            json!({"external_identifier": format!("d{i}"), "classification": classes[i % 3],
                   "metadata": {"year": 2020 + i % 2}, "text": format!("short text number {i}")})
        })
        .collect();
    app.submit_batch(&pid, documents).await;
    while app.step().await.jobs > 0 {}
    sqlx::query("ANALYZE fragments")
        .execute(&app.pool)
        .await
        .unwrap();

    let all = classes.map(str::to_owned);
    let scope = Scope {
        pipeline_id: uuid::Uuid::parse_str(&pid).unwrap(),
        classifications: &all,
        filter: None,
    };
    let every = search::estimate_scope(&app.state.pool, &scope, true)
        .await
        .unwrap();
    assert!((59.0..=61.0).contains(&every.admitted), "{every:?}");
    // The same through the service's cache, which knows the pipeline's classifications.
    let cached = search::estimate_scope_cached(
        &app.state.pool,
        &trove::retrieval::estimates::ScopeEstimates::new(),
        &scope,
        &search::EstimateBasis {
            vectors: 60.0,
            metadata_indexes: &[],
            pipeline_changed: chrono::Utc::now(),
            pipeline_classifications: 3,
        },
    )
    .await
    .unwrap();
    assert_eq!(cached.admitted, every.admitted);
    // Two of the three keep their condition, and the planner sums their shares.
    let two = ["public", "internal"].map(str::to_owned);
    let some = search::estimate_scope(
        &app.state.pool,
        &Scope {
            classifications: &two,
            ..scope
        },
        false,
    )
    .await
    .unwrap();
    assert!((39.0..=41.0).contains(&some.admitted), "{some:?}");
}

/// A filter on a declared field reads the fragments it admits through Trove's own index on
/// the field (the default), as through a metadata index; with the schema's
/// `"x-trove-index": false` it tests each of the pipeline's fragments. Either way a search
/// returns the exact ranking under the filter.
#[tokio::test]
async fn a_filter_on_a_declared_field_reads_through_its_index_unless_the_schema_says_otherwise() {
    use trove::retrieval::cost::Reach;
    use trove::retrieval::search::{self, Scope};
    let app = spawn_app_without_worker().await;
    let model = app.create_hash_model("declared", 16).await;
    let schema = json!({"type": "object", "properties": {
        "category": {"type": "string"}, "name": {"type": "string"}}});
    let pipeline = app
        .new_pipeline(json!({
            "embedding_model_id": model["id"],
            "classifications": ["public"],
            "hierarchy": [],
            "metadata_schema": schema,
        }))
        .await;
    let pid = pipeline["id"].as_str().unwrap().to_owned();
    let pipeline_id = uuid::Uuid::parse_str(&pid).unwrap();
    for batch in 0..2 {
        let documents: Vec<Value> = (batch * 600..(batch + 1) * 600)
            .map(|i| {
                json!({"external_identifier": format!("d{i}"), "classification": "public",
                       "metadata": {"category": format!("c{:03}", i % 120), "name": format!("n{i}")},
                       "text": format!("fragment {i} of topic {} and theme {}", i % 7, i % 11)})
            })
            .collect();
        app.submit_batch(&pid, documents).await;
    }
    while app.step().await.jobs > 0 {}
    sqlx::query("ANALYZE fragments")
        .execute(&app.pool)
        .await
        .unwrap();

    let filter = json!({"category": {"$eq": "c007"}});
    let typed =
        trove_query::filter::validate(&serde_json::from_value(filter.clone()).unwrap(), &schema)
            .unwrap();
    let classifications = ["public".to_owned()];
    let scope = Scope {
        pipeline_id,
        classifications: &classifications,
        filter: Some(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        )),
    };
    let body = json!({"query": "fragment of topic 3 and theme 5", "type": "similarity",
                      "classification": "public", "params": {"k": 5}, "filters": filter});
    // Every admitted fragment's exact distance: a search's hits must be the nearest of them,
    // each with its own distance as its score (ties in any order).
    let embedded = app
        .post(
            &format!("/embedding-models/{}/query", model["id"].as_str().unwrap()),
            &json!({"text": "fragment of topic 3 and theme 5"}),
        )
        .await;
    assert_eq!(embedded.status, StatusCode::OK, "{}", embedded.text);
    let ve = pipeline["default_vector_embedding_id"].as_str().unwrap();
    let table = trove::store::vectors::table_name(uuid::Uuid::parse_str(ve).unwrap());
    let admitted: Vec<(String, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT f.metadata->>'name', v.embedding <=> $1::text::vector FROM fragments f
         JOIN {table} v ON v.fragment_id = f.id
         WHERE f.pipeline_id = $2 AND f.metadata->>'category' = 'c007' ORDER BY 2"
    )))
    .bind(embedded.body["embedding"].to_string())
    .bind(pipeline_id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(admitted.len() > 5, "{admitted:?}");
    let assert_exact = |reply: &crate::helpers::Reply| {
        let (names, scores) = (result_names(reply), scores(reply));
        assert_eq!(names.len(), 5, "{}", reply.text);
        for ((name, score), (_, nearest)) in names.iter().zip(&scores).zip(&admitted) {
            let (_, distance) = admitted.iter().find(|(n, _)| n == name).unwrap();
            assert!(
                (score - distance).abs() < 1e-6,
                "{name}: {score} != {distance}"
            );
            assert!(
                (score - nearest).abs() < 1e-6,
                "{name}: {score} != {nearest}"
            );
        }
    };
    assert_exact(&search(&app, &pid, body.clone()).await);
    let estimate = search::estimate_scope(&app.state.pool, &scope, true)
        .await
        .unwrap();
    assert_eq!(estimate.reach, Reach::Indexed, "{estimate:?}");

    let mut unindexed = schema.clone();
    unindexed["x-trove-index"] = json!(false);
    let patched = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"metadata_schema": unindexed}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let estimate = search::estimate_scope(&app.state.pool, &scope, true)
        .await
        .unwrap();
    assert_eq!(estimate.reach, Reach::Scanned, "{estimate:?}");
    assert_exact(&search(&app, &pid, body).await);
}

/// The exact path reads the scope from the association's vector table, which holds each
/// fragment's classification, metadata and whether it is current: after new versions move
/// fragments out of a filter's scope and a document is expired, a search returns the exact
/// ranking over the current fragments only; the vector table's indexes on declared fields
/// follow the schema and the metadata indexes, and the ranking stays exact with and without
/// them.
#[tokio::test]
async fn the_exact_path_sees_only_current_fragments_after_new_versions_and_expiry() {
    let app = spawn_app_without_worker().await;
    let model = app.create_hash_model("current", 16).await;
    let schema = json!({"type": "object", "properties": {
        "category": {"type": "string"}, "name": {"type": "string"}}});
    let pipeline = app
        .new_pipeline(json!({
            "embedding_model_id": model["id"],
            "classifications": ["public", "internal"],
            "hierarchy": [["internal", "public"]],
            "metadata_schema": schema,
        }))
        .await;
    let pid = pipeline["id"].as_str().unwrap().to_owned();
    let pipeline_id = uuid::Uuid::parse_str(&pid).unwrap();
    let ve = pipeline["default_vector_embedding_id"].as_str().unwrap();
    let table = trove::store::vectors::table_name(uuid::Uuid::parse_str(ve).unwrap());
    let document = |i: usize, category: &str| {
        json!({"external_identifier": format!("d{i}"),
               "classification": if (i / 120) % 2 == 1 { "internal" } else { "public" },
               "metadata": {"category": category, "name": format!("n{i}")},
               "text": format!("fragment {i} of topic {} and theme {}", i % 7, i % 11)})
    };
    for batch in 0..2 {
        let documents: Vec<Value> = (batch * 600..(batch + 1) * 600)
            .map(|i| document(i, &format!("c{:03}", i % 120)))
            .collect();
        app.submit_batch(&pid, documents).await;
    }
    while app.step().await.jobs > 0 {}
    // New versions move two documents of c007 out of it, and one of its documents expires.
    app.submit_batch(&pid, vec![document(7, "c008"), document(127, "c008")])
        .await;
    while app.step().await.jobs > 0 {}
    let versions = app
        .get(&format!(
            "/pipelines/{pid}/documents?external_identifier=d247"
        ))
        .await;
    assert_eq!(versions.status, StatusCode::OK, "{}", versions.text);
    let expired_id = versions.body["data"][0]["id"].as_str().unwrap().to_owned();
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/documents/{expired_id}?expire=true"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    sqlx::query("ANALYZE fragments")
        .execute(&app.pool)
        .await
        .unwrap();

    // Every vector of an expired fragment is kept, not live; every other one is.
    let (stale, expired): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FILTER (WHERE v.live = (f.expired_at IS NOT NULL)),
                count(*) FILTER (WHERE NOT v.live)
         FROM {table} v JOIN fragments f ON f.id = v.fragment_id"
    )))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stale, 0);
    assert_eq!(expired, 3);

    let text = "fragment of topic 3 and theme 5";
    let embedded = app
        .post(
            &format!("/embedding-models/{}/query", model["id"].as_str().unwrap()),
            &json!({"text": text}),
        )
        .await;
    assert_eq!(embedded.status, StatusCode::OK, "{}", embedded.text);
    let nearest: Vec<(String, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT f.metadata->>'name', v.embedding <=> $1::text::vector FROM fragments f
         JOIN {table} v ON v.fragment_id = f.id
         WHERE f.pipeline_id = $2 AND f.expired_at IS NULL AND f.classification = 'public'
           AND f.metadata->>'category' = 'c007'
         ORDER BY 2"
    )))
    .bind(embedded.body["embedding"].to_string())
    .bind(pipeline_id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let names_admitted: Vec<&str> = nearest.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(nearest.len(), 3, "{names_admitted:?}");
    for gone in ["n7", "n127", "n247"] {
        assert!(!names_admitted.contains(&gone), "{names_admitted:?}");
    }
    let body = json!({"query": text, "type": "similarity", "classification": "public",
                      "params": {"k": 10}, "filters": {"category": {"$eq": "c007"}}});
    let assert_exact = |reply: &crate::helpers::Reply| {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let mut got: Vec<(String, f64)> =
            result_names(reply).into_iter().zip(scores(reply)).collect();
        got.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut want = nearest.clone();
        want.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        assert_eq!(got.len(), want.len(), "{}", reply.text);
        for ((name, score), (wanted, distance)) in got.iter().zip(&want) {
            assert_eq!(name, wanted, "{}", reply.text);
            assert!(
                (score - distance).abs() < 1e-6,
                "{name}: {score} != {distance}"
            );
        }
    };
    let vector_field_indexes = || {
        let pool = app.pool.clone();
        let table = table.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexname LIKE 'vf\\_%'",
            )
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    // Both declared fields are indexed by default; without them, and with a metadata index
    // on one of them, the ranking is the same.
    assert_eq!(vector_field_indexes().await, 2);
    assert_exact(&search(&app, &pid, body.clone()).await);
    let mut unindexed = schema.clone();
    unindexed["x-trove-index"] = json!(false);
    let patched = app
        .patch(
            &format!("/pipelines/{pid}"),
            &json!({"metadata_schema": unindexed}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(vector_field_indexes().await, 0);
    assert_exact(&search(&app, &pid, body.clone()).await);
    let index = app
        .post(
            &format!("/pipelines/{pid}/indexes"),
            &json!({"field": "category"}),
        )
        .await;
    assert_eq!(index.status, StatusCode::CREATED, "{}", index.text);
    assert_eq!(vector_field_indexes().await, 1);
    assert_exact(&search(&app, &pid, body.clone()).await);
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/indexes/{}",
            index.body["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(vector_field_indexes().await, 0);
    assert_exact(&search(&app, &pid, body).await);
}

/// A filter value holding U+0000, which no stored value can hold, compares as a value no
/// fragment holds, at any depth: never a database error.
#[tokio::test]
async fn filter_values_holding_nul_compare_as_values_no_fragment_holds() {
    let (app, pid) = searchable_app().await;
    let taxonomy = uuid::Uuid::new_v4();
    let cases = [
        (json!({"name": {"$eq": "ca\u{0}ts"}}), vec![]),
        (json!({"name": {"$like": "%\u{0}%"}}), vec![]),
        (json!({"name": {"$ilike": "\u{0}"}}), vec![]),
        (json!({"name": {"$teq": ["cats\u{0}", taxonomy]}}), vec![]),
        (json!({"name": {"$in": ["cats", "\u{0}"]}}), vec!["cats"]),
        (json!({"name": {"$in": ["\u{0}"]}}), vec![]),
        (
            json!({"name": {"$gt": "s\u{0}"}}),
            vec!["secret", "ships", "trains"],
        ),
        (json!({"name": {"$le": "d\u{0}x"}}), vec!["cats"]),
        (
            json!({"name": {"$neq": "\u{0}"}}),
            vec!["cats", "dogs", "kittens", "secret", "ships", "trains"],
        ),
        (
            json!({"name": {"$not-in": ["\u{0}", "a\u{0}"]}}),
            vec!["cats", "dogs", "kittens", "secret", "ships", "trains"],
        ),
        (
            json!({"$and": [{"year": {"$ge": 2020}}, {"$not": {"$or": [{"name": {"$eq": "\u{0}"}}, {"name": {"$in": ["dogs", "x\u{0}"]}}]}}]}),
            vec!["cats", "kittens", "secret", "ships", "trains"],
        ),
    ];
    for (filters, expected) in cases {
        let reply = search(&app, &pid, json!({"query": "animals", "type": "similarity", "classification": "restricted", "params": {"k": 10}, "filters": filters})).await;
        assert_eq!(reply.status, StatusCode::OK, "{filters}: {}", reply.text);
        let mut found = result_names(&reply);
        found.sort();
        assert_eq!(found, expected, "{filters}");

        let listed = app
            .get(&format!(
                "/pipelines/{pid}/documents?metadata={}",
                percent_encode(&filters.to_string())
            ))
            .await;
        assert_eq!(listed.status, StatusCode::OK, "{filters}: {}", listed.text);
        let mut names: Vec<&str> = listed.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["external_identifier"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        assert_eq!(names, expected, "the document list, {filters}");
    }
}
