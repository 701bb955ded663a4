//! Rerankers (extension `hybrid`): LLM registrations with the provider `cohere` or `tei`,
//! named by similarity and hybrid searches in `params.rerank`, against a fake reranker on
//! loopback that serves both shapes, errors, malformed bodies and stalls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use poem::web::Json as PoemJson;
use poem::{EndpointExt, IntoResponse, Response, Route, handler, http::StatusCode as PoemStatus};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, serve_on_loopback, spawn_app_without_worker_with};

/// The secret the registrations hold; it must never come back.
const KEY: &str = "sk-rerank-secret-0123456789";

/// How the fake answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Scores each document by how many times it holds the word "zebra".
    Scores,
    Status,
    Malformed,
    Stall,
}

/// A request the fake received: its `authorization` header and its body.
type Received = (Option<String>, Value);

#[derive(Clone)]
struct Fake {
    mode: Arc<Mutex<Mode>>,
    requests: Arc<Mutex<Vec<Received>>>,
}

#[handler]
async fn rerank(
    req: &poem::Request,
    body: PoemJson<Value>,
    fake: poem::web::Data<&Fake>,
) -> Response {
    let authorization = req.header("authorization").map(str::to_owned);
    fake.requests
        .lock()
        .unwrap()
        .push((authorization, body.0.clone()));
    let mode = *fake.mode.lock().unwrap();
    match mode {
        Mode::Status => {
            return (
                PoemStatus::BAD_GATEWAY,
                format!("upstream failed for key {KEY}"),
            )
                .into_response();
        }
        Mode::Malformed => return PoemJson(json!({"unexpected": true})).into_response(),
        Mode::Stall => tokio::time::sleep(Duration::from_secs(30)).await,
        Mode::Scores => {}
    }
    let texts = body.0.get("documents").or(body.0.get("texts")).cloned();
    let scored: Vec<(usize, f64)> = texts
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let zebras = text.as_str().unwrap_or_default().matches("zebra").count();
            (index, zebras as f64 / 10.0)
        })
        .collect();
    if body.0.get("documents").is_some() {
        let results: Vec<Value> = scored
            .iter()
            .map(|(index, score)| json!({"index": index, "relevance_score": score}))
            .collect();
        PoemJson(json!({"results": results, "meta": {}})).into_response()
    } else {
        let results: Vec<Value> = scored
            .iter()
            .map(|(index, score)| json!({"index": index, "score": score}))
            .collect();
        PoemJson(json!(results)).into_response()
    }
}

impl Fake {
    fn start() -> (Self, String) {
        let fake = Fake {
            mode: Arc::new(Mutex::new(Mode::Scores)),
            requests: Arc::new(Mutex::new(Vec::new())),
        };
        let address = serve_on_loopback(Route::new().at("/rerank", rerank).data(fake.clone()));
        (fake, format!("http://{address}"))
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn last(&self) -> Received {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

async fn app_with(extensions: &str) -> TestApp {
    spawn_app_without_worker_with(&[
        ("TROVE_EXTENSIONS", extensions),
        ("TROVE_RERANK_TIMEOUT", "1"),
    ])
    .await
}

/// Texts whose zebra count is the reverse of their closeness to "animals of the savanna".
const TEXTS: [(&str, &str); 4] = [
    ("a", "Animals of the savanna: lions and elephants."),
    ("b", "Savanna animals such as giraffes graze at dawn. zebra"),
    ("c", "Wild animals roam the grassland. zebra zebra"),
    (
        "d",
        "A recipe for bread with flour and yeast. zebra zebra zebra",
    ),
];

async fn pipeline(app: &TestApp) -> String {
    let pid = app
        .new_pipeline_id(json!({"has_full_text_search": true}))
        .await;
    for (name, text) in TEXTS {
        app.submit_text(&pid, name, text).await;
    }
    while app.step().await.stored > 0 {}
    pid
}

async fn register(app: &TestApp, provider: &str, endpoint: &str) -> String {
    let reply = app
        .post(
            "/llms",
            &json!({"name": format!("{provider}-{}", uuid::Uuid::new_v4().simple()), "provider": provider,
                    "endpoint": endpoint, "model": "rerank-small", "api_key": KEY}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert!(!reply.text.contains(KEY));
    reply.body["id"].as_str().unwrap().to_owned()
}

async fn search(app: &TestApp, pid: &str, kind: &str, params: Value) -> crate::helpers::Reply {
    app.post(
        &format!("/pipelines/{pid}/search"),
        &json!({"query": "animals of the savanna", "type": kind, "classification": "public", "params": params}),
    )
    .await
}

fn ids(reply: &crate::helpers::Reply) -> Vec<String> {
    reply
        .body
        .as_array()
        .unwrap_or_else(|| panic!("{}", reply.text))
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_owned())
        .collect()
}

fn texts(reply: &crate::helpers::Reply) -> Vec<String> {
    reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["page_content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_reranked_order_follows_the_rerankers_scores_in_both_shapes() {
    let app = app_with("hybrid").await;
    let (fake, endpoint) = Fake::start();
    let pid = pipeline(&app).await;
    for provider in ["cohere", "tei"] {
        let reranker = register(&app, provider, &endpoint).await;
        let reply = search(
            &app,
            &pid,
            "similarity",
            json!({"k": 3, "rerank": reranker, "rerank_candidates": 4}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert!(reply.header("x-trove-rerank").is_none());
        assert_eq!(
            texts(&reply),
            [TEXTS[3].1, TEXTS[2].1, TEXTS[1].1],
            "{provider}: by the fake's scores"
        );
        let scores: Vec<f64> = reply
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["score"].as_f64().unwrap())
            .collect();
        assert_eq!(scores, [0.3, 0.2, 0.1]);
        let (authorization, body) = fake.last();
        assert_eq!(
            authorization.as_deref(),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(body["query"], "animals of the savanna");
        if provider == "cohere" {
            assert_eq!(body["model"], "rerank-small");
            assert_eq!(body["top_n"], 4);
            assert_eq!(body["documents"].as_array().unwrap().len(), 4);
        } else {
            assert_eq!(body["texts"].as_array().unwrap().len(), 4);
            assert!(body.get("model").is_none());
        }
    }
    // Hybrid: the ranks of each list stay with the reranked results.
    let reranker = register(&app, "cohere", &endpoint).await;
    let reply = search(&app, &pid, "hybrid", json!({"k": 2, "rerank": reranker})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(texts(&reply), [TEXTS[3].1, TEXTS[2].1]);
    for fragment in reply.body.as_array().unwrap() {
        assert!(fragment.get("similarity_rank").is_some(), "{fragment}");
        assert!(fragment.get("full_text_rank").is_some(), "{fragment}");
    }
}

#[tokio::test]
async fn a_failing_reranker_leaves_the_order_before_reranking() {
    let app = app_with("hybrid").await;
    let (fake, endpoint) = Fake::start();
    let pid = pipeline(&app).await;
    let reranker = register(&app, "cohere", &endpoint).await;
    let plain = search(&app, &pid, "similarity", json!({"k": 3})).await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{address}")
    };
    let refused = register(&app, "tei", &closed).await;
    for (mode, reranker, reason) in [
        (Mode::Status, &reranker, "status"),
        (Mode::Malformed, &reranker, "malformed"),
        (Mode::Stall, &reranker, "timeout"),
        (Mode::Scores, &refused, "connection"),
    ] {
        fake.set(mode);
        let reply = search(
            &app,
            &pid,
            "similarity",
            json!({"k": 3, "rerank": reranker}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{reason}: {}", reply.text);
        assert_eq!(reply.header("x-trove-rerank"), Some("skipped"), "{reason}");
        assert_eq!(
            ids(&reply),
            ids(&plain),
            "{reason}: the order before reranking"
        );
        assert!(!reply.text.contains(KEY));
        let metrics = app.get("/metrics").await.text;
        let line = format!("trove_rerank_failures_total{{reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&line), "{reason}: {metrics}");
        assert!(!metrics.contains(KEY));
    }
}

#[tokio::test]
async fn a_rerankers_error_text_never_holds_its_key() {
    let (fake, endpoint) = Fake::start();
    fake.set(Mode::Status);
    let client =
        trove::providers::llm::LlmClient::new(Duration::from_secs(1), Duration::from_secs(1))
            .unwrap();
    let target = trove::providers::rerank::RerankTarget {
        provider: trove::providers::rerank::RerankProvider::Cohere,
        endpoint: &endpoint,
        model: Some("m"),
        api_key: Some(KEY),
    };
    let failure = client
        .rerank(&target, "q", &["text".to_owned()], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(failure.reason.label(), "status");
    assert!(failure.message.contains("502"), "{}", failure.message);
    assert!(
        failure.message.contains("[redacted]"),
        "{}",
        failure.message
    );
    assert!(!failure.message.contains(KEY), "{}", failure.message);
}

#[tokio::test]
async fn rerankers_and_chat_models_are_not_interchangeable() {
    let app = app_with("hybrid").await;
    let (_fake, endpoint) = Fake::start();
    let pid = pipeline(&app).await;
    let reranker = register(&app, "tei", &endpoint).await;
    let reply = app
        .post(
            &format!("/llms/{reranker}/query"),
            &json!({"prompt": "hi", "stream": false}),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"]["error"],
        format!("LLM {reranker} is a reranker")
    );
    let chat = app
        .post(
            "/llms",
            &json!({"name": "chat", "provider": "openai", "endpoint": endpoint, "api_key": "k"}),
        )
        .await;
    let chat = chat.body["id"].as_str().unwrap().to_owned();
    let reply = search(&app, &pid, "similarity", json!({"k": 2, "rerank": chat})).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"]["error"],
        format!("LLM {chat} is not a reranker")
    );
    let unknown = uuid::Uuid::new_v4();
    let reply = search(&app, &pid, "hybrid", json!({"k": 2, "rerank": unknown})).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "LLM not found");
    for candidates in [0, 1001] {
        let reply = search(
            &app,
            &pid,
            "similarity",
            json!({"k": 2, "rerank": reranker, "rerank_candidates": candidates}),
        )
        .await;
        assert_error(
            &reply,
            StatusCode::BAD_REQUEST,
            "Invalid search type or parameters",
        );
    }
    // A key that may read the reranker but not execute it: as if it did not exist.
    let key = app
        .create_key(json!({"pipelines": 5, "llms": 4}), json!(["*"]))
        .await;
    let reply = app
        .as_key(&key)
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "x", "type": "similarity", "classification": "public",
                    "params": {"k": 2, "rerank": reranker}}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "LLM not found");
}

#[tokio::test]
async fn with_the_extension_off_rerankers_do_not_exist() {
    let app = app_with("").await;
    let (fake, endpoint) = Fake::start();
    let reply = app
        .post(
            "/llms",
            &json!({"name": "r", "provider": "cohere", "endpoint": endpoint, "model": "m"}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert!(
        reply
            .text
            .contains("unknown variant `cohere`, expected `openai` or `ollama`"),
        "{}",
        reply.text
    );
    // `params.rerank` is an unknown field, ignored.
    let pid = pipeline(&app).await;
    let reply = search(
        &app,
        &pid,
        "similarity",
        json!({"k": 2, "rerank": uuid::Uuid::new_v4()}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().unwrap().len(), 2);
    assert!(fake.requests.lock().unwrap().is_empty());
}
