//! Metadata filters as large as a body holds: nested tens of thousands deep, lists of
//! hundreds of thousands of values, through search and the document list; and the statement
//! timeout that stops a statement running too long.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{AppOptions, TestApp, assert_error, percent_encode, spawn_app_with};

/// `(name, year)` of the documents, one fragment each.
const DOCS: [(&str, i64); 6] = [
    ("cats", 2020),
    ("dogs", 2021),
    ("ships", 2022),
    ("trains", 2023),
    ("secret", 2024),
    ("kittens", 2025),
];

/// A pipeline with the six documents ingested; `env` is added to the app's environment.
async fn app_with_documents(env: &[(&str, &str)]) -> (TestApp, String) {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..AppOptions::default()
    })
    .await;
    let pid = app
        .new_pipeline_id(json!({"metadata_schema": {"type": "object", "properties": {
            "year": {"type": "integer"}, "name": {"type": "string"}}}}))
        .await;
    for (name, year) in DOCS {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": name, "classification": "public",
                        "text": format!("A short text about {name}."),
                        "metadata": {"year": year, "name": name}}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let outcome = app.step().await;
    assert_eq!(outcome.stored, DOCS.len(), "{outcome:?}");
    (app, pid)
}

/// A similarity search returning every document the filter admits, as sorted names; the
/// request's duration is printed.
async fn search_names(app: &TestApp, pid: &str, what: &str, filter: &Value) -> Vec<String> {
    let body = json!({"query": "a short text", "type": "similarity",
                      "classification": "public", "params": {"k": 10}, "filters": filter});
    let started = Instant::now();
    let reply = app.post(&format!("/pipelines/{pid}/search"), &body).await;
    eprintln!(
        "{what}: {} bytes, {:.0?}",
        body.to_string().len(),
        started.elapsed()
    );
    assert_eq!(reply.status, StatusCode::OK, "{what}: {:.300}", reply.text);
    let mut names: Vec<String> = reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The sorted names of the documents whose year satisfies `keep`.
fn names_where(keep: impl Fn(i64) -> bool) -> Vec<String> {
    let mut names: Vec<String> = DOCS
        .iter()
        .filter(|(_, year)| keep(*year))
        .map(|(name, _)| (*name).to_owned())
        .collect();
    names.sort();
    names
}

/// `depth` `$not` around `inner`, as JSON text.
fn nots(depth: usize, inner: &str) -> String {
    format!(
        "{}{inner}{}",
        r#"{"$not":"#.repeat(depth),
        "}".repeat(depth)
    )
}

/// `depth` `$and`, each with `sibling` beside the next, around `inner`, as JSON text.
fn ands(depth: usize, sibling: &str, inner: &str) -> String {
    format!(
        "{}{inner}{}",
        format!(r#"{{"$and":[{sibling},"#).repeat(depth),
        "]}".repeat(depth)
    )
}

/// Sends a search whose `filters` is the JSON text `filter` (which may nest deeper than
/// serde_json's own limit).
async fn search_raw(app: &TestApp, pid: &str, what: &str, filter: &str) -> Vec<String> {
    let body = format!(
        r#"{{"query": "a short text", "type": "similarity", "classification": "public",
             "params": {{"k": 10}}, "filters": {filter}}}"#
    );
    let started = Instant::now();
    let reply = app
        .req(Method::POST, &format!("/pipelines/{pid}/search"))
        .as_master()
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await;
    eprintln!("{what}: {} bytes, {:.0?}", body.len(), started.elapsed());
    assert_eq!(reply.status, StatusCode::OK, "{what}: {:.300}", reply.text);
    let mut names: Vec<String> = reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn deep_filters_search_like_their_shallow_equivalents() {
    let (app, pid) = app_with_documents(&[]).await;
    let recent = r#"{"year":{"$gt":2022}}"#;
    // 20,000 `$not` cancel out; one more negates.
    assert_eq!(
        search_raw(&app, &pid, "20,000 $not", &nots(20_000, recent)).await,
        names_where(|y| y > 2022)
    );
    assert_eq!(
        search_raw(&app, &pid, "20,001 $not", &nots(20_001, recent)).await,
        names_where(|y| y <= 2022)
    );
    // 20,000 `$and`, each with a condition of its own.
    let filter = ands(20_000, r#"{"name":{"$neq":"secret"}}"#, recent);
    assert_eq!(
        search_raw(&app, &pid, "20,000 $and", &filter).await,
        ["kittens", "trains"]
    );
    // `$and` and `$or` alternating 1,000 deep (no flattening applies): the conditions beside
    // them change nothing (true beside `$and`, false beside `$or`), so the innermost decides.
    let mut filter = recent.to_owned();
    for level in 0..1_000 {
        filter = if level % 2 == 0 {
            format!(r#"{{"$and":[{{"year":{{"$ge":2000}}}},{filter}]}}"#)
        } else {
            format!(r#"{{"$or":[{{"year":{{"$lt":2000}}}},{filter}]}}"#)
        };
    }
    assert_eq!(
        search_raw(&app, &pid, "1,000 alternating", &filter).await,
        names_where(|y| y > 2022)
    );
    // A chain of `$or` 20,000 deep whose every level adds one name.
    let mut filter = r#"{"name":{"$eq":"cats"}}"#.to_owned();
    for level in 0..20_000 {
        let name = if level == 19_999 { "ships" } else { "nobody" };
        filter = format!(r#"{{"$or":[{{"name":{{"$eq":"{name}"}}}},{filter}]}}"#);
    }
    assert_eq!(
        search_raw(&app, &pid, "20,000 $or", &filter).await,
        ["cats", "ships"]
    );
    // An error deep inside is still the grammar's 422.
    let broken = nots(20_000, r#"{"year": 2020}"#);
    let reply = app.req(Method::POST, &format!("/pipelines/{pid}/search")).as_master()
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"query": "x", "type": "similarity", "classification": "public", "filters": {broken}}}"#
            ))
            .send()
.await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{:.300}",
        reply.text
    );
    assert!(
        reply.text.starts_with(
            "Failed to deserialize the JSON body into the target type: invalid type: integer `2020`"
        ),
        "{:.300}",
        reply.text
    );
}

#[tokio::test]
async fn lists_of_200000_values_search_in_one_parameter() {
    let (app, pid) = app_with_documents(&[]).await;
    // 200,000 integers, two of them years of documents.
    let years: Vec<i64> = (0..200_000)
        .map(|n| {
            if n == 7 {
                2021
            } else if n == 150_000 {
                2023
            } else {
                3_000 + n
            }
        })
        .collect();
    let filter = json!({"year": {"$in": years}});
    assert_eq!(
        search_names(&app, &pid, "$in of 200,000 integers", &filter).await,
        ["dogs", "trains"]
    );
    let filter = json!({"year": {"$not-in": years}});
    assert_eq!(
        search_names(&app, &pid, "$not-in of 200,000 integers", &filter).await,
        ["cats", "kittens", "secret", "ships"]
    );
    // 200,000 strings, one of them a name.
    let names: Vec<String> = (0..200_000)
        .map(|n| {
            if n == 99_999 {
                "ships".to_owned()
            } else {
                format!("{n:x}")
            }
        })
        .collect();
    let filter = json!({"$or": [{"name": {"$in": names}}, {"name": {"$eq": "cats"}}]});
    assert_eq!(
        search_names(&app, &pid, "$in of 200,000 strings", &filter).await,
        ["cats", "ships"]
    );
    // Many conditions: 20,000 fields of a `$or`, each its own comparison.
    let parts: Vec<Value> = (0..20_000)
        .map(|n| json!({"year": {"$eq": if n == 19_999 { 2024 } else { 10_000 + n }}}))
        .collect();
    assert_eq!(
        search_names(
            &app,
            &pid,
            "$or of 20,000 conditions",
            &json!({"$or": parts})
        )
        .await,
        ["secret"]
    );
}

/// The document list's `metadata` parameter takes the same filters, as long as the URL
/// allows (about 64 KB).
/// Tens of thousands of comparisons of one field, as a 2 MB body holds them: equalities
/// under `$or` and inequalities under `$and` (one list each), range comparisons of the
/// integer field under `$or` and nested (one range set), each selecting what its few
/// equivalent comparisons select, within the statement timeout.
#[tokio::test]
async fn many_comparisons_of_one_field_search_as_one_test() {
    let (app, pid) = app_with_documents(&[("TROVE_STATEMENT_TIMEOUT", "10")]).await;
    let equalities: Vec<Value> = (0..60_000)
        .map(|n| json!({"year": {"$eq": 1_990 + n}}))
        .collect();
    assert_eq!(
        search_names(&app, &pid, "60,000 $eq", &json!({"$or": equalities})).await,
        names_where(|_| true)
    );
    let names: Vec<Value> = (0..60_000)
        .map(|n| json!({"name": {"$neq": if n == 7 { "ships".to_owned() } else { format!("n{n}") }}}))
        .collect();
    assert_eq!(
        search_names(&app, &pid, "60,000 $neq", &json!({"$and": names})).await,
        names_where(|y| y != 2022)
    );
    // Years below 2021 - n or above 2023 + n for every n: below 2021 or above 2023.
    let ranges: Vec<Value> = (0..60_000)
        .map(|n| {
            if n % 2 == 0 {
                json!({"year": {"$lt": 2_021 - n}})
            } else {
                json!({"year": {"$gt": 2_022 + n}})
            }
        })
        .collect();
    assert_eq!(
        search_names(&app, &pid, "60,000 ranges", &json!({"$or": ranges})).await,
        names_where(|y| !(2021..=2023).contains(&y))
    );
    // The intervals [2020 + 2n, 2020 + 2n] minus nothing, nested: the even years.
    let intervals: Vec<Value> = (0..20_000)
        .map(|n| {
            json!({"$and": [{"year": {"$ge": 2_020 + 2 * n}},
                            {"$not": {"year": {"$gt": 2_020 + 2 * n}}}]})
        })
        .collect();
    assert_eq!(
        search_names(&app, &pid, "20,000 intervals", &json!({"$or": intervals})).await,
        names_where(|y| y % 2 == 0)
    );
}

#[tokio::test]
async fn the_document_list_takes_deep_filters_and_long_lists() {
    let (app, pid) = app_with_documents(&[]).await;
    let list = |filter: String| {
        let app = &app;
        let pid = &pid;
        async move {
            let reply = app
                .get(&format!(
                    "/pipelines/{pid}/documents?order_by=external_identifier&metadata={}",
                    percent_encode(&filter)
                ))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{:.300}", reply.text);
            reply.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["external_identifier"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let recent = r#"{"year":{"$gt":2022}}"#;
    assert_eq!(
        list(nots(2_000, recent)).await,
        ["kittens", "secret", "trains"]
    );
    assert_eq!(list(nots(2_001, recent)).await, ["cats", "dogs", "ships"]);
    assert_eq!(
        list(ands(
            600,
            r#"{"year":{"$ge":2021}}"#,
            r#"{"year":{"$le":2022}}"#
        ))
        .await,
        ["dogs", "ships"]
    );
    let years: Vec<i64> = (0..5_000)
        .map(|n| if n == 4_999 { 2020 } else { 3_000 + n })
        .collect();
    assert_eq!(
        list(json!({"year": {"$in": years}}).to_string()).await,
        ["cats"]
    );
}

/// A statement that runs longer than `TROVE_STATEMENT_TIMEOUT` is cancelled: the interface's
/// 500 with the database's message; the connection serves the next request.
#[tokio::test]
async fn statements_stop_at_the_statement_timeout() {
    let (app, pid) = app_with_documents(&[("TROVE_STATEMENT_TIMEOUT", "0.5")]).await;
    let search = json!({"query": "a short text", "type": "similarity",
                        "classification": "public", "params": {"k": 10},
                        "filters": {"year": {"$gt": 2022}}});
    // Another session holds the fragments and documents, so statements wait for them.
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE fragments, documents IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let path = format!("/pipelines/{pid}/search");
    let reply = app.post(&path, &search).await;
    assert_error(
        &reply,
        StatusCode::INTERNAL_SERVER_ERROR,
        "canceling statement due to statement timeout",
    );
    let listed = app
        .get(&format!(
            "/pipelines/{pid}/documents?metadata={}",
            percent_encode(r#"{"year":{"$gt":2022}}"#)
        ))
        .await;
    assert_error(
        &listed,
        StatusCode::INTERNAL_SERVER_ERROR,
        "canceling statement due to statement timeout",
    );
    blocker.rollback().await.unwrap();
    // The same connections answer again (the pool keeps them).
    for _ in 0..3 {
        let reply = app.post(&path, &search).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(
            reply.body.as_array().map(Vec::len),
            Some(3),
            "{}",
            reply.text
        );
    }
    // Index builds are exempt: they run however long they take (here, waiting for a lock
    // held longer than the timeout).
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE fragments IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let index = {
        let app = &app;
        let path = format!("/pipelines/{pid}/indexes");
        async move { app.post(&path, &json!({"field": "year"})).await }
    };
    let release = async {
        // Time passes: the lock is held beyond the statement timeout.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        blocker.rollback().await.unwrap();
    };
    let (reply, ()) = tokio::join!(index, release);
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}
