//! Pipelines, documents and the ingestion worker, end to end.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app_without_worker};

/// Runs worker steps until `documents` versions are stored (ten at most).
async fn store_all(app: &TestApp, documents: usize) {
    let mut stored = 0;
    for _ in 0..10 {
        stored += app.step().await.stored;
        if stored == documents {
            break;
        }
    }
    assert_eq!(stored, documents);
}

#[tokio::test]
async fn a_document_becomes_searchable_fragments_without_plaintext_at_rest() {
    let app = spawn_app_without_worker().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let pid = pipeline["id"].as_str().unwrap();
    assert!(pipeline["default_vector_embedding_id"].is_string());
    let text = "Zanzibar harbour notes. ".repeat(100);
    let reply = app
        .post(
            &format!("/pipelines/{pid}/documents"),
            &json!({"external_identifier": "doc-1", "classification": "public", "metadata": {"year": 2024}, "text": text}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["status"], "pending");
    let doc_id = reply.body["id"].as_str().unwrap().to_owned();
    assert_eq!(&doc_id[14..15], "7", "document ids are UUID v7: {doc_id}");

    let outcome = app.step().await;
    assert_eq!(outcome.jobs, 1);
    assert_eq!(outcome.stored, 1, "{outcome:?}");

    let read = app
        .get(&format!("/pipelines/{pid}/documents/{doc_id}"))
        .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    assert_eq!(read.body[0]["status"], "success");

    let fragments = app
        .get(&format!(
            "/pipelines/{pid}/documents/{doc_id}/fragments?count=true"
        ))
        .await;
    assert_eq!(fragments.status, StatusCode::OK, "{}", fragments.text);
    let data = fragments.body["data"].as_array().unwrap();
    assert!(data.len() >= 3, "{}", fragments.text);
    assert_eq!(data[0]["order_id"], 0);
    assert!(
        data[0]["page_content"]
            .as_str()
            .unwrap()
            .contains("Zanzibar")
    );
    assert_eq!(data[0]["metadata"], json!({"year": 2024}));
    assert!(data[0].get("embedding").is_none());

    // Nothing readable at rest.
    let contents: Vec<Vec<u8>> = sqlx::query_scalar("SELECT content FROM fragments")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(!contents.is_empty());
    for content in contents {
        assert!(
            !content.windows(8).any(|w| w == b"Zanzibar"),
            "plaintext found in fragments.content"
        );
    }
    let texts: i64 = sqlx::query_scalar("SELECT count(*) FROM document_texts")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(texts, 0, "raw text is dropped once processed");

    // A second delivery of the same job changes nothing.
    let again = app.step().await;
    assert_eq!(again.jobs, 0);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM fragments")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, i64::try_from(data.len()).unwrap());

    // Embeddings on request.
    let with = app
        .get(&format!(
            "/pipelines/{pid}/documents/{doc_id}/fragments?include_embedding=true"
        ))
        .await;
    assert_eq!(
        with.body["data"][0]["embedding"].as_array().unwrap().len(),
        384
    );
}

#[tokio::test]
async fn versions_expire_older_ones_when_processed() {
    let app = spawn_app_without_worker().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let pid = pipeline["id"].as_str().unwrap();
    let submit = |text: &'static str| {
        let app = &app;
        async move {
            app.post(
                &format!("/pipelines/{pid}/documents"),
                &json!({"external_identifier": "same", "classification": "public", "text": text}),
            )
            .await
        }
    };
    let first = submit("first version").await;
    app.step().await;
    let second = submit("second version").await;
    assert_eq!(
        first.body["id"], second.body["id"],
        "versions share the document id"
    );
    assert!(second.body["version"].as_i64() > first.body["version"].as_i64());
    let doc = first.body["id"].as_str().unwrap();
    // Until the new version is processed, the old one stays current.
    let current = app.get(&format!("/pipelines/{pid}/documents/{doc}")).await;
    assert_eq!(current.body.as_array().unwrap().len(), 2);
    app.step().await;
    let current = app.get(&format!("/pipelines/{pid}/documents/{doc}")).await;
    assert_eq!(
        current.body.as_array().unwrap().len(),
        1,
        "{}",
        current.text
    );
    assert_eq!(current.body[0]["version"], second.body["version"]);
    let versions = app
        .get(&format!("/pipelines/{pid}/documents/{doc}/versions"))
        .await;
    assert_eq!(versions.body.as_array().unwrap().len(), 2);
    assert!(versions.body[1]["expired_at"].is_string());
    // A different classification for a new version is refused.
    let mismatch = app
        .post(
            &format!("/pipelines/{pid}/documents"),
            &json!({"external_identifier": "same", "classification": "internal", "text": "x"}),
        )
        .await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    assert_eq!(mismatch.message(), "Classification mismatch");
}

/// `pg_class.reltuples` of a table (negative until it is first analysed) and its row count.
async fn counted_and_actual_rows(app: &TestApp, table: &str) -> (f32, i64) {
    let reltuples: f32 =
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)")
            .bind(table)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let rows: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&app.pool)
            .await
            .unwrap();
    (reltuples, rows)
}

/// The ids of the fragments of a similarity and an MMR search over both classifications, for
/// each query.
async fn found_fragments(app: &TestApp, pid: &str, queries: &[&str]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for query in queries {
        for body in [
            json!({"query": query, "type": "similarity", "classification": ["public", "internal"], "params": {"k": 4}}),
            json!({"query": query, "type": "mmr", "classification": ["public", "internal"], "params": {"k": 3, "fetch_k": 8}}),
        ] {
            let reply = app.post(&format!("/pipelines/{pid}/search"), &body).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            let ids: Vec<String> = reply
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|hit| hit["id"].as_str().unwrap().to_owned())
                .collect();
            assert!(!ids.is_empty(), "{}", reply.text);
            found.push(ids);
        }
    }
    found
}

#[tokio::test]
async fn the_worker_analyses_the_tables_a_group_made_stale_and_searches_need_no_later_analysis() {
    let app = spawn_app_without_worker().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let pid = pipeline["id"].as_str().unwrap();
    let topics = [
        "harbour ships unload copper at dawn",
        "orchard apples ripen in late summer",
        "granite bridges cross the river delta",
        "winter lanterns light the market square",
        "archive ledgers record every journal entry",
        "forest paths wind toward the island meadow",
    ];
    let documents = 12;
    for i in 0..documents {
        let topic = topics[i % topics.len()];
        let text = format!("{topic}. Record {i}.\n\n{topic} again, in other words {i}.");
        let classification = if i % 2 == 0 { "public" } else { "internal" };
        let reply = app
            .submit(
                pid,
                &json!({"external_identifier": format!("d{i}"), "classification": classification, "text": text}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    store_all(&app, documents).await;

    // Right after the step, without waiting for autovacuum (a minute), both tables are
    // analysed: their statistics count every row.
    let vectors = vector_table(&app, pid).await;
    for table in ["fragments", vectors.as_str()] {
        let (reltuples, rows) = counted_and_actual_rows(&app, table).await;
        assert!(rows > 0, "{table} has rows");
        assert!(
            reltuples >= 0.0,
            "{table} is analysed: reltuples {reltuples}"
        );
        assert!(
            (f64::from(reltuples) - rows as f64).abs() < 0.5,
            "{table}: reltuples {reltuples}, {rows} rows"
        );
    }

    // Searches now return what they return after a manual ANALYZE.
    let queries = ["copper harbour", "apples in summer", "lanterns in winter"];
    let before = found_fragments(&app, pid, &queries).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ANALYZE fragments; ANALYZE {vectors}"
    )))
    .execute(&app.pool)
    .await
    .unwrap();
    let after = found_fragments(&app, pid, &queries).await;
    assert_eq!(before, after);
}

/// The name of the vector table of pipeline `pid`.
async fn vector_table(app: &TestApp, pid: &str) -> String {
    let ve: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1::uuid")
            .bind(pid)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    trove::store::vectors::table_name(ve)
}

/// Rows of `table` whose inserting transaction's commit is not yet recorded in them (their
/// hint bit), read from the table's pages as they are, with `pageinspect`.
async fn rows_without_commit_hint(app: &TestApp, table: &str) -> i64 {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT count(*)
         FROM generate_series(0, pg_relation_size($1::regclass) / current_setting('block_size')::int - 1) AS b,
              heap_page_items(get_raw_page($1, b::int)) AS t
         WHERE t.lp_flags = 1 AND t.t_infomask & (256 | 512) = 0",
    )
    .bind(table)
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_stored_group_is_read_back_so_that_searches_right_after_it_find_its_commit_recorded() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A first group large enough that the next one does not grow the tables by a fifth: the
    // worker analyses a table a group grows that much, and an analysis reads the rows too.
    for i in 0..12 {
        let text = format!("Ledger page {i}. ").repeat(60);
        app.submit_text(&pid, &format!("d{i}"), &text).await;
    }
    store_all(&app, 12).await;
    app.submit_text(&pid, "late", "Copper harbour at dawn. ".repeat(5).as_str())
        .await;
    assert_eq!(app.step().await.stored, 1);

    // Nothing has searched since; every row of both tables already records its commit, so
    // the first search to meet them neither asks the commit log nor writes their pages.
    for table in ["fragments".to_owned(), vector_table(&app, &pid).await] {
        assert_eq!(rows_without_commit_hint(&app, &table).await, 0, "{table}");
    }
}

#[tokio::test]
async fn a_groups_rows_are_written_in_the_order_of_the_indexed_string_fields_then_classification() {
    let app = spawn_app_without_worker().await;
    // `team` is the schema's only indexed string field; `year` an integer, `site` not indexed.
    let schema = json!({"type": "object", "properties": {
        "year": {"type": "integer"},
        "team": {"type": "string"},
        "site": {"type": "string", "x-trove-index": false},
    }});
    let pid = app.new_pipeline(json!({"metadata_schema": schema})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let teams = ["c", "a", "b", "a", "c", "b", "a", "c"];
    let documents: Vec<Value> = teams
        .iter()
        .enumerate()
        .map(|(i, team)| {
            json!({
                "external_identifier": format!("d{i}"),
                "classification": if i % 3 == 0 { "public" } else { "internal" },
                "metadata": {"team": team, "year": 2020 - i as i64, "site": format!("s{}", 9 - i)},
                "text": format!("Harbour ledger {i}. ").repeat(90),
            })
        })
        .collect();
    app.submit_batch(&pid, documents).await;
    assert_eq!(app.step().await.stored, teams.len());

    let vectors = vector_table(&app, &pid).await;
    for (table, condition) in [
        ("fragments", format!("pipeline_id = '{pid}'")),
        (vectors.as_str(), "true".to_owned()),
    ] {
        // The rows in the order they lie in the table's pages.
        let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT metadata->>'team', classification FROM {table} WHERE {condition} ORDER BY ctid"
        )))
        .fetch_all(&app.pool)
        .await
        .unwrap();
        assert!(
            rows.len() > teams.len(),
            "{table}: several fragments a document"
        );
        let mut sorted = rows.clone();
        sorted.sort();
        assert_eq!(rows, sorted, "{table}");
    }
}

#[tokio::test]
async fn a_fragment_whose_words_exceed_a_full_text_vector_keeps_those_of_its_beginning() {
    let app = spawn_app_without_worker().await;
    let splitter = app
        .post(
            "/text-splitters",
            &json!({"name": "whole", "provider": "recursive-character",
                    "parameters": {"chunk_size": 2_000_000, "chunk_overlap": 0}}),
        )
        .await;
    assert_eq!(splitter.status, StatusCode::CREATED, "{}", splitter.text);
    let pipeline = app
        .new_pipeline(
            json!({"has_full_text_search": true, "default_text_splitter_id": splitter.body["id"]}),
        )
        .await;
    let pid = pipeline["id"].as_str().unwrap();
    // One fragment of 120,000 distinct words: their vector would take about 2 MB.
    let mut text = "Zanzibar".to_owned();
    for i in 0..120_000 {
        text.push_str(&format!(" w{i:06}"));
    }
    text.push_str(" Kilimanjaro");
    app.submit_text(pid, "ids", &text).await;
    store_all(&app, 1).await;
    for (query, fragments) in [("Zanzibar", 1), ("Kilimanjaro", 0)] {
        let reply = app
            .post(
                &format!("/pipelines/{pid}/search"),
                &json!({"query": query, "type": "search", "classification": "public"}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body.as_array().unwrap().len(), fragments, "{query}");
    }
}
