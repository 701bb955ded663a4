//! Metadata filters as large as a request body holds (2 MB), through HTTP: starts Trove in
//! this process against the test Postgres and NATS, creates a pipeline (`hash` model, schema
//! `{year: integer, name: string}`), ingests N one-fragment documents with the service's
//! worker, then times `POST /pipelines/{id}/search` (similarity, k 5) with filters of each
//! shape, each just under 2 MB:
//!
//! - `$not` nested 230,000 deep, `$and` nested 140,000 deep (an empty map beside each);
//! - one `$in` of about 270,000 integers, one `$not-in` of about 200,000 strings;
//! - an `$or` of 60,000 equalities and an `$and` of 60,000 inequalities of one field (each
//!   compiles to one list), and an `$or` of 60,000 range comparisons (`$lt`, `$gt`: each
//!   evaluated on its own);
//! - `$and` and `$or` alternating 1,000 deep (beyond a few thousand the database's parser
//!   refuses the expression).
//!
//! Each filter is sent `--runs` times (5) after one warm-up; the median is printed with the
//! body size and the result count. A filter whose warm-up fails (the statement timeout,
//! `TROVE_STATEMENT_TIMEOUT`) is printed with the error and the time it took.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench filters --
//! [--docs=5000] [--runs=5]`.

#![expect(
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a load tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::app::{self, Http};

fn option(name: &str, default: usize) -> usize {
    std::env::args()
        .find_map(|arg| {
            arg.strip_prefix(&format!("--{name}="))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(default)
}

/// One search with a body given as text: the time, and the number of results or the
/// error's status and message.
async fn search_text(
    http: &Http,
    path: &str,
    body: &str,
) -> (Duration, Result<usize, (reqwest::StatusCode, String)>) {
    let started = Instant::now();
    let response = http
        .request(reqwest::Method::POST, path)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("search");
    let status = response.status();
    let text = response.text().await.expect("search body");
    let elapsed = started.elapsed();
    if !status.is_success() {
        return (elapsed, Err((status, text)));
    }
    let hits: Vec<Value> = serde_json::from_str(&text).expect("search json");
    (elapsed, Ok(hits.len()))
}

/// The filters measured, as `(name, JSON text)`, each under 2 MB inside the body.
fn filters() -> Vec<(&'static str, String)> {
    let recent = r#"{"year":{"$gt":2010}}"#;
    let nots = format!(
        "{}{recent}{}",
        r#"{"$not":"#.repeat(230_000),
        "}".repeat(230_000)
    );
    let ands = format!(
        "{}{recent}{}",
        r#"{"$and":[{},"#.repeat(140_000),
        "]}".repeat(140_000)
    );
    let years: Vec<i64> = (0..270_000).map(|n| 1_000 + n).collect();
    let in_list = json!({"year": {"$in": years}}).to_string();
    let names: Vec<String> = (0..200_000).map(|n| format!("{n:x}")).collect();
    let not_in = json!({"name": {"$not-in": names}}).to_string();
    // Many conditions on the schema's field, in an `$or` and in an `$and`.
    let parts: Vec<Value> = (0..60_000)
        .map(|n| json!({"year": {"$eq": 1_000 + n}}))
        .collect();
    let or_conditions = json!({"$or": parts}).to_string();
    let parts: Vec<Value> = (0..60_000).map(|n| json!({"year": {"$neq": n}})).collect();
    let and_conditions = json!({"$and": parts}).to_string();
    // Comparisons no list expresses: each one is evaluated for every fragment.
    let parts: Vec<Value> = (0..60_000)
        .map(|n| {
            if n % 2 == 0 {
                json!({"year": {"$lt": -n}})
            } else {
                json!({"year": {"$gt": 3_000 + n}})
            }
        })
        .collect();
    let or_ranges = json!({"$or": parts}).to_string();
    let mut alternating = recent.to_owned();
    for level in 0..1_000 {
        alternating = if level % 2 == 0 {
            format!(r#"{{"$and":[{{"year":{{"$ge":0}}}},{alternating}]}}"#)
        } else {
            format!(r#"{{"$or":[{{"year":{{"$lt":0}}}},{alternating}]}}"#)
        };
    }
    vec![
        ("$not 230,000 deep", nots),
        ("$and 140,000 deep", ands),
        ("$in of 270,000 integers", in_list),
        ("$not-in of 200,000 strings", not_in),
        ("$or of 60,000 equalities", or_conditions),
        ("$and of 60,000 inequalities", and_conditions),
        ("$or of 60,000 range comparisons", or_ranges),
        ("$and/$or alternating 1,000 deep", alternating),
    ]
}

#[tokio::main]
async fn main() {
    let docs = option("docs", 5_000);
    let runs = option("runs", 5).max(1);
    let (admin, nats) = app::servers();
    let trove = app::start(&admin, &nats, false).await;
    let (state, http) = (&trove.state, &trove.http);

    let model = http
        .json(reqwest::Method::GET, "/embedding-models?name=default", None)
        .await["data"][0]["id"]
        .clone();
    let splitter = http
        .json(
            reqwest::Method::GET,
            "/text-splitters?name=recursive-character",
            None,
        )
        .await["data"][0]["id"]
        .clone();
    let pipeline = http
        .json(
            reqwest::Method::POST,
            "/pipelines",
            Some(json!({
                "name": "bench-filters", "embedding_model_id": model,
                "default_text_splitter_id": splitter, "classifications": ["public"],
                "metadata_schema": {"type": "object", "properties": {
                    "year": {"type": "integer"}, "name": {"type": "string"}}},
            })),
        )
        .await;
    let pid = pipeline["id"].as_str().expect("pipeline id").to_owned();
    let started = Instant::now();
    for chunk in (0..docs).collect::<Vec<_>>().chunks(1_000) {
        let documents: Vec<Value> = chunk
            .iter()
            .map(|n| {
                json!({"external_identifier": format!("doc-{n}"), "classification": "public",
                       "text": format!("Document {n} about topic {} and year {}.", n % 97, 2000 + n % 25),
                       "metadata": {"year": 2000 + n % 25, "name": format!("{:x}", n * 7)}})
            })
            .collect();
        http.json(
            reqwest::Method::POST,
            &format!("/pipelines/{pid}/documents/batch"),
            Some(json!({"documents": documents})),
        )
        .await;
    }
    let worker = trove::startup::build_worker(state).await.expect("worker");
    let mut stored = 0;
    while stored < docs {
        let outcome = worker
            .step(Duration::from_millis(500))
            .await
            .expect("worker step");
        stored += outcome.stored;
    }
    eprintln!("{docs} documents ingested in {:.1?}", started.elapsed());

    let path = format!("/pipelines/{pid}/search");
    println!("filter | body | results | median of {runs} | min | max");
    for (name, filter) in filters() {
        let body = format!(
            r#"{{"query":"document about a topic","type":"similarity","classification":"public","params":{{"k":5}},"filters":{filter}}}"#
        );
        assert!(
            body.len() <= 2 * 1024 * 1024,
            "{name}: {} bytes",
            body.len()
        );
        let results = match search_text(http, &path, &body).await {
            (_, Ok(results)) => results,
            (elapsed, Err((status, text))) => {
                // Measured once: an error (the statement timeout) is not a figure to repeat.
                println!(
                    "{name} | {:.2} MB | {status} {text:.120} | after {:.0} ms",
                    body.len() as f64 / 1_048_576.0,
                    elapsed.as_secs_f64() * 1_000.0
                );
                continue;
            }
        };
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        for _ in 0..runs {
            times.push(search_text(http, &path, &body).await.0);
        }
        times.sort();
        println!(
            "{name} | {:.2} MB | {results} | {:.0} ms | {:.0} ms | {:.0} ms",
            body.len() as f64 / 1_048_576.0,
            times[runs / 2].as_secs_f64() * 1_000.0,
            times[0].as_secs_f64() * 1_000.0,
            times[runs - 1].as_secs_f64() * 1_000.0,
        );
    }

    trove.stop(false).await;
}
