//! The `hybrid` extension: hybrid searches (both lists fused by reciprocal rank), hybrid agent
//! placeholders and the MCP tool, switched on by `TROVE_EXTENSIONS`; with the switch off,
//! every `hybrid` answer is the interface's 501.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::{Value, json};
use trove_query::search::Scope;
use uuid::Uuid;

use crate::helpers::{TestApp, assert_error, spawn_app_without_worker_with};

/// Short notes, some found by meaning, some only by an exact word.
const NOTES: [(&str, &str, &str, i64); 10] = [
    (
        "remote",
        "public",
        "Employees may work from home up to three days a week.",
        2023,
    ),
    (
        "sso",
        "public",
        "Release 4.2 adds single sign-on with SAML and OpenID Connect.",
        2024,
    ),
    (
        "certs",
        "internal",
        "The broker stalled after the TLS certificate expired; error E4711.",
        2024,
    ),
    (
        "travel",
        "public",
        "Travel expenses are reimbursed within fourteen days.",
        2025,
    ),
    (
        "laptops",
        "public",
        "New laptops are ordered through the IT service desk.",
        2022,
    ),
    (
        "oncall",
        "internal",
        "The on-call engineer answers pages within fifteen minutes.",
        2023,
    ),
    (
        "office",
        "public",
        "The office is closed on public holidays and weekends.",
        2021,
    ),
    (
        "flag",
        "public",
        "Set the option max_connections to raise the pool size.",
        2024,
    ),
    (
        "backup",
        "internal",
        "Backups run nightly and are kept for thirty days.",
        2022,
    ),
    (
        "parking",
        "public",
        "Parking permits are renewed every January.",
        2025,
    ),
];

async fn hybrid_app(extensions: &str) -> TestApp {
    spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", extensions)]).await
}

/// A pipeline of the notes (full-text search on, unless `extra` says otherwise), processed.
async fn notes_pipeline(app: &TestApp, extra: Value) -> String {
    let mut body = json!({"has_full_text_search": true});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let pid = app.new_pipeline_id(body).await;
    let documents = NOTES
        .iter()
        .map(|(name, classification, text, year)| {
            json!({"external_identifier": name, "classification": classification, "text": text, "metadata": {"year": year, "team": name}})
        })
        .collect();
    app.submit_batch(&pid, documents).await;
    while app.step().await.stored > 0 {}
    pid
}

async fn search(app: &TestApp, pid: &str, body: Value) -> crate::helpers::Reply {
    app.post(&format!("/pipelines/{pid}/search"), &body).await
}

fn names(results: &Value) -> Vec<String> {
    results
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {results}"))
        .iter()
        .map(|f| {
            f["metadata"]["team"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn with_the_extension_off_hybrid_answers_501_as_the_interface_says() {
    let app = hybrid_app("").await;
    let pid = app
        .new_pipeline_id(json!({"has_full_text_search": true}))
        .await;
    let reply = search(
        &app,
        &pid,
        json!({"query": "x", "type": "hybrid", "classification": "public"}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Hybrid placeholder is not implemented yet",
    );
    assert!(
        reply.body["error"].get("details").is_none(),
        "{}",
        reply.text
    );
    let agent = app
        .post(
            "/agents",
            &json!({"name": "h", "prompt": [{"role": "system", "template": "{c}"}, {"role": "user", "template": "{q}"}],
                    "placeholders": [{"name": "q", "type": "query"}, {"name": "c", "type": "hybrid", "target": "q"}]}),
        )
        .await;
    assert_error(&agent, StatusCode::NOT_IMPLEMENTED, "Not implemented");
    let document: Value = app.get("/openapi.json").await.body;
    assert!(
        document
            .pointer("/components/schemas/SearchParams/properties/rrf_k")
            .is_none()
    );
}

#[tokio::test]
async fn a_hybrid_search_fuses_both_lists_by_reciprocal_rank() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    // An exact identifier only the lexical list knows, and words the vector list finds.
    let reply = search(
        &app,
        &pid,
        json!({"query": "what does error E4711 mean for working from home", "type": "hybrid",
               "classification": "internal", "params": {"k": 4}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let results = reply.body.as_array().unwrap();
    assert_eq!(results.len(), 4, "{}", reply.text);
    let found = names(&reply.body);
    assert!(found.contains(&"certs".to_owned()), "{found:?}");
    assert!(found.contains(&"remote".to_owned()), "{found:?}");
    let mut previous = f64::INFINITY;
    for fragment in results {
        let score = fragment["score"].as_f64().unwrap();
        assert!(score <= previous, "descending fused scores: {}", reply.text);
        previous = score;
        let ranks = [&fragment["similarity_rank"], &fragment["full_text_rank"]];
        assert!(
            ranks.iter().any(|r| r.as_u64().is_some_and(|r| r >= 1)),
            "{fragment}"
        );
        let expected: f64 = ranks
            .iter()
            .filter_map(|r| r.as_f64())
            .map(|rank| 1.0 / (60.0 + rank))
            .sum();
        assert!((score - expected).abs() < 1e-12, "{fragment}");
        assert!(fragment.get("embedding").is_none());
        assert_eq!(fragment["expired_at"], Value::Null);
    }
    // Omitted params: k 5; a reader of `public` never sees `internal` notes.
    let reply = search(
        &app,
        &pid,
        json!({"query": "certificate expired E4711", "type": "hybrid", "classification": "public"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().unwrap().len(), 5, "{}", reply.text);
    assert!(!names(&reply.body).contains(&"certs".to_owned()));
}

#[tokio::test]
async fn the_lexical_list_reads_the_first_100_000_bytes_of_a_longer_query() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    // 110,000 distinct words after two of a note: their text search vector would exceed the
    // megabyte Postgres allows, so the lexical list reads the query's first 100,000 bytes.
    let mut query = "certificate E4711".to_owned();
    for i in 0..110_000 {
        query.push_str(&format!(" w{i:06}"));
    }
    assert!(query.len() > 850_000);
    let reply = search(
        &app,
        &pid,
        json!({"query": query, "type": "hybrid", "classification": "internal", "params": {"k": 3}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let results = reply.body.as_array().unwrap();
    assert_eq!(results.len(), 3, "{}", reply.text);
    assert!(
        results
            .iter()
            .any(|f| f["metadata"]["team"] == "certs" && f["full_text_rank"] == 1),
        "{}",
        reply.text
    );
}

/// The lexical list of a scope as the hybrid statement builds it, run on its own: ids best
/// first.
async fn lexical_list(
    app: &TestApp,
    pid: &str,
    classifications: &[String],
    query: &str,
    fetch: u64,
) -> Vec<Uuid> {
    lexical_list_in(app, pid, classifications, None, query, fetch).await
}

/// [`lexical_list`] within a metadata filter.
async fn lexical_list_in(
    app: &TestApp,
    pid: &str,
    classifications: &[String],
    filter: Option<sea_query::Condition>,
    query: &str,
    fetch: u64,
) -> Vec<Uuid> {
    use sea_query::PostgresQueryBuilder;
    use sea_query_sqlx::SqlxBinder;
    let scope = Scope {
        pipeline_id: Uuid::parse_str(pid).unwrap(),
        classifications,
        filter,
    };
    let lexical = trove_query::hybrid::Lexical {
        config: trove_text::likeliest_text_search_config(query),
        query,
        fetch,
    };
    let (sql, values) =
        trove_query::hybrid::lexical_candidates(&scope, &lexical).build_sqlx(PostgresQueryBuilder);
    sqlx::query_scalar_with(sqlx::AssertSqlSafe(sql), values)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_postings_and_the_full_text_index_give_the_same_lexical_list() {
    // Without a metadata filter the candidates come from the postings, under one from the
    // full-text index: where both read every fragment holding a word (a small pipeline), the
    // lists are the same.
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    let every = sea_query::Cond::all().add(sea_query::Expr::cust("true"));
    for classifications in [
        vec!["public".to_owned(), "internal".to_owned()],
        vec!["public".to_owned()],
    ] {
        for (query, fetch) in [
            ("days of work from home and travel", 10),
            ("certificate expired broker", 3),
            ("max_connections pool option", 10),
            ("the service desk orders laptops", 2),
        ] {
            let postings = lexical_list(&app, &pid, &classifications, query, fetch).await;
            let index = lexical_list_in(
                &app,
                &pid,
                &classifications,
                Some(every.clone()),
                query,
                fetch,
            )
            .await;
            // Every query finds a note among all of them; the broker's is internal.
            assert_eq!(
                postings.is_empty(),
                classifications.len() == 1 && query.contains("broker"),
                "{query} in {classifications:?}"
            );
            assert_eq!(postings, index, "{query} in {classifications:?}");
        }
    }
}

#[tokio::test]
async fn the_fused_order_is_the_rrf_of_the_two_lists_obtained_separately() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    let classifications = vec!["public".to_owned(), "internal".to_owned()];
    let mut cases = vec![
        (
            "days of work from home and travel".to_owned(),
            3,
            60.0,
            1.0,
            1.0,
            10,
        ),
        ("certificate expired broker".to_owned(), 5, 1.0, 1.0, 0.5, 4),
        (
            "max_connections pool option".to_owned(),
            10,
            2.5,
            0.2,
            1.0,
            6,
        ),
        (
            "public holidays parking January".to_owned(),
            2,
            60.0,
            1.0,
            0.0,
            10,
        ),
        (
            "laptops ordered service desk".to_owned(),
            8,
            30.0,
            0.0,
            3.0,
            3,
        ),
    ];
    // And cases drawn at random (a fixed seed, so a failure can be replayed): queries of two
    // to four words of the notes, any k and candidates, any constant and weights.
    let words: Vec<&str> = NOTES
        .iter()
        .flat_map(|(_, _, text, _)| text.split_whitespace())
        .collect();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(20_261_128);
    for _ in 0..15 {
        use rand::Rng;
        let length = rng.random_range(2..=4);
        let query: Vec<&str> = (0..length)
            .map(|_| words[rng.random_range(0..words.len())])
            .collect();
        let weights = [0.0, 0.3, 1.0, 2.0];
        let similarity_weight = weights[rng.random_range(0..weights.len())];
        let full_text_weight = if similarity_weight == 0.0 {
            weights[rng.random_range(1..weights.len())]
        } else {
            weights[rng.random_range(0..weights.len())]
        };
        cases.push((
            query.join(" "),
            rng.random_range(1..=10),
            rng.random_range(0.1..100.0),
            similarity_weight,
            full_text_weight,
            rng.random_range(1..=12),
        ));
    }
    for (query, k, rrf_k, similarity_weight, full_text_weight, fetch_k) in cases {
        let query = query.as_str();
        let hybrid = search(
            &app,
            &pid,
            json!({"query": query, "type": "hybrid", "classification": ["internal"],
                   "params": {"k": k, "fetch_k": fetch_k, "rrf_k": rrf_k,
                              "similarity_weight": similarity_weight, "full_text_weight": full_text_weight}}),
        )
        .await;
        assert_eq!(hybrid.status, StatusCode::OK, "{}", hybrid.text);
        // Candidates per list: fetch_k, never fewer than k.
        let fetch = fetch_k.max(k);
        // The vector list: the similarity search of the same scope (ten notes: exact).
        let similar = search(
            &app,
            &pid,
            json!({"query": query, "type": "similarity", "classification": ["internal"],
                   "params": {"k": fetch}}),
        )
        .await;
        let vector: Vec<Uuid> = similar
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|f| Uuid::parse_str(f["id"].as_str().unwrap()).unwrap())
            .collect();
        let lexical = lexical_list(&app, &pid, &classifications, query, fetch as u64).await;
        let mut fused: HashMap<Uuid, f64> = HashMap::new();
        for (list, weight) in [(&vector, similarity_weight), (&lexical, full_text_weight)] {
            for (rank, id) in list.iter().enumerate() {
                *fused.entry(*id).or_default() += weight / (rrf_k + (rank + 1) as f64);
            }
        }
        let mut expected: Vec<(Uuid, f64)> = fused.into_iter().collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        expected.truncate(k);
        let got: Vec<(Uuid, f64)> = hybrid
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    Uuid::parse_str(f["id"].as_str().unwrap()).unwrap(),
                    f["score"].as_f64().unwrap(),
                )
            })
            .collect();
        let ids = |list: &[(Uuid, f64)]| list.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(ids(&got), ids(&expected), "{query}: {}", hybrid.text);
        for ((_, got), (_, expected)) in got.iter().zip(&expected) {
            assert!(
                (got - expected).abs() < 1e-12,
                "{query}: {got} vs {expected}"
            );
        }
    }
}

#[tokio::test]
async fn a_filter_that_empties_one_list_is_filled_from_the_other() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    // No note of 2025 holds these words: the lexical list is empty, the vector list fills k.
    let reply = search(
        &app,
        &pid,
        json!({"query": "certificate broker stalled", "type": "hybrid", "classification": "internal",
               "params": {"k": 2}, "filters": {"year": {"$eq": 2025}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let results = reply.body.as_array().unwrap();
    assert_eq!(results.len(), 2, "{}", reply.text);
    for fragment in results {
        assert_eq!(fragment["metadata"]["year"], 2025);
        assert_eq!(fragment["full_text_rank"], Value::Null);
    }
    // A threshold no vector passes: the lexical list alone.
    let reply = search(
        &app,
        &pid,
        json!({"query": "E4711", "type": "hybrid", "classification": "internal",
               "params": {"k": 3, "threshold": -1.0}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(names(&reply.body), ["certs"]);
    assert_eq!(reply.body[0]["similarity_rank"], Value::Null);
    assert_eq!(reply.body[0]["full_text_rank"], 1);
}

#[tokio::test]
async fn hybrid_errors_are_those_of_the_other_kinds() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    for params in [
        json!({"k": 3, "rrf_k": 0}),
        json!({"k": 3, "rrf_k": -5}),
        json!({"k": 3, "similarity_weight": 0, "full_text_weight": 0}),
        json!({"k": 3, "similarity_weight": -1}),
    ] {
        let reply = search(
            &app,
            &pid,
            json!({"query": "x", "type": "hybrid", "classification": "public", "params": params}),
        )
        .await;
        assert_error(
            &reply,
            StatusCode::BAD_REQUEST,
            "Invalid search type or parameters",
        );
    }
    let reply = search(
        &app,
        &pid,
        json!({"query": "x", "type": "hybrid", "classification": {"classifications": ["nope"], "search_type": 1}}),
    )
    .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");
    let reply = search(
        &app,
        &pid,
        json!({"query": "x", "type": "hybrid", "classification": "public", "params": {"k": 0}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, json!([]));

    // No full-text search: 501 with the parsed parameters.
    let no_text = app.new_pipeline_id(json!({})).await;
    let reply = search(
        &app,
        &no_text,
        json!({"query": "x", "type": "hybrid", "classification": "public", "params": {"k": 2}}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Full text search is not enabled for this pipeline",
    );
    assert_eq!(
        reply.body["error"]["details"]["params"],
        json!({"k": 2, "fetch_k": 10, "lambda_mult": 0.5, "threshold": null, "embedding": null,
               "rrf_k": 60.0, "similarity_weight": 1.0, "full_text_weight": 1.0})
    );
    // No embedding model: 400 Vector embedding not found.
    let text_only = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    let reply = search(
        &app,
        &text_only,
        json!({"query": "x", "type": "hybrid", "classification": "public"}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );
    assert_eq!(
        reply.body["error"]["details"],
        json!({"embedding_id": null})
    );
}

#[tokio::test]
async fn hybrid_placeholders_retrieve_through_the_same_search() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    let prompt = json!([{"role": "system", "template": "Notes:\n{notes}"}, {"role": "user", "template": "{q}"}]);
    let created = app
        .post(
            "/agents",
            &json!({"name": "hybrid", "prompt": prompt,
                    "placeholders": [{"name": "q", "type": "query"},
                                     {"name": "notes", "type": "hybrid", "target": "q", "params": {"k": 2, "rrf_k": 10}}]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        created.body["placeholders"][1]["params"],
        json!({"k": 2, "fetch_k": 10, "lambda_mult": 0.5, "threshold": null, "embedding": null,
               "rrf_k": 10.0, "similarity_weight": 1.0, "full_text_weight": 1.0})
    );
    let agent = created.body["id"].as_str().unwrap();
    let dry_run = app
        .req(reqwest::Method::POST, &format!("/agents/{agent}/search"))
        .as_master()
        .header("x-pipeline-id", pid.as_str())
        .json(&json!({"variables": {"q": "error E4711 certificate"}, "classification": "internal"}))
        .send()
        .await;
    assert_eq!(dry_run.status, StatusCode::OK, "{}", dry_run.text);
    let text = dry_run.text;
    assert!(text.contains("E4711"), "{text}");
    assert!(text.contains("full_text_rank"), "{text}");

    let invalid = app
        .post(
            "/agents",
            &json!({"name": "bad", "prompt": prompt,
                    "placeholders": [{"name": "q", "type": "query"},
                                     {"name": "notes", "type": "hybrid", "target": "q", "params": {"k": 2, "rrf_k": 0}}]}),
        )
        .await;
    assert_error(
        &invalid,
        StatusCode::BAD_REQUEST,
        "Invalid placeholder of type hybrid",
    );
}

#[tokio::test]
async fn the_document_describes_the_extension_when_it_is_on() {
    let app = hybrid_app("hybrid").await;
    let document: Value = app.get("/openapi.json").await.body;
    for schema in ["SearchParams", "PlaceholderParams"] {
        let path = format!("/components/schemas/{schema}/properties/full_text_weight");
        let property = document
            .pointer(&path)
            .unwrap_or_else(|| panic!("no {path}"));
        assert!(
            property["description"]
                .as_str()
                .unwrap()
                .contains("Extension `hybrid`")
        );
    }
    let page = app.get("/docs").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.text.contains("similarity_weight"),
        "the reference embeds the document"
    );
}

/// The pipeline's word statistics as `word_counts` sums them, and as counted from its current
/// fragments: (word, fragments, length), '' for all of them.
async fn word_statistics(
    app: &TestApp,
    pid: &str,
) -> (Vec<(String, i64, i64)>, Vec<(String, i64, i64)>) {
    let pid = Uuid::parse_str(pid).unwrap();
    let kept = sqlx::query_as(
        "SELECT word, sum(fragments)::bigint, sum(length)::bigint FROM word_counts
         WHERE pipeline_id = $1 GROUP BY word HAVING sum(fragments) <> 0 ORDER BY word",
    )
    .bind(pid)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let counted = sqlx::query_as(
        "SELECT w.word, count(*), sum(octet_length(f.content))::bigint FROM fragments f
         CROSS JOIN LATERAL (SELECT '' AS word UNION ALL SELECT unnest(tsvector_to_array(f.tsv))) w
         WHERE f.pipeline_id = $1 AND f.expired_at IS NULL AND f.tsv IS NOT NULL
         GROUP BY w.word ORDER BY w.word",
    )
    .bind(pid)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    (kept, counted)
}

/// The pipeline's postings as stored, and as computed from its current fragments with its
/// reference length: (word, fragment, classification, impact), sorted.
async fn postings(app: &TestApp, pid: &str) -> (Vec<Posting>, Vec<Posting>) {
    let pid = Uuid::parse_str(pid).unwrap();
    let kept = sqlx::query_as(
        "SELECT word, fragment_id, classification, impact FROM postings WHERE pipeline_id = $1
         ORDER BY word, fragment_id",
    )
    .bind(pid)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let computed = sqlx::query_as(
        "SELECT u.lexeme, f.id, f.classification,
                (cardinality(u.positions) * 2.2 / (cardinality(u.positions)
                 + 1.2 * (0.25 + 0.75 * octet_length(f.content) / m.avgdl)))::real
         FROM fragments f JOIN posting_norms m USING (pipeline_id) CROSS JOIN LATERAL unnest(f.tsv) u
         WHERE f.pipeline_id = $1 AND f.expired_at IS NULL AND f.tsv IS NOT NULL
           AND octet_length(u.lexeme) <= 1000
         ORDER BY u.lexeme, f.id",
    )
    .bind(pid)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    (kept, computed)
}

type Posting = (String, Uuid, String, f32);

/// The pipeline's reference length for its postings' impacts.
async fn reference_length(app: &TestApp, pid: &str) -> f64 {
    sqlx::query_scalar("SELECT avgdl FROM posting_norms WHERE pipeline_id = $1::uuid")
        .bind(pid)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_long_token_under_a_long_classification_is_stored_without_postings() {
    // A word of 2,040 random letters and digits (a lexeme may have 2,046 bytes) and a
    // classification of 255 four-byte characters would not fit in a row of the postings'
    // index: the fragment is stored, the word left out of its postings, the others kept.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_261_207);
    let classification: String = (0..255)
        .map(|_| char::from_u32(rng.random_range(0x2_0000..0x2_A6DF)).unwrap())
        .collect();
    let token: String = (0..2040)
        .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
        .collect();
    let app = hybrid_app("hybrid").await;
    // Fragments of up to 4,000 characters, so that the word stays whole.
    let splitter = app
        .post(
            "/text-splitters",
            &json!({"name": "long", "provider": "recursive-character",
                    "parameters": {"chunk_size": 4000, "chunk_overlap": 0}}),
        )
        .await;
    assert_eq!(splitter.status, StatusCode::CREATED, "{}", splitter.text);
    let pid = app
        .new_pipeline_id(
            json!({"has_full_text_search": true, "classifications": [classification],
                                "hierarchy": [], "default_text_splitter_id": splitter.body["id"]}),
        )
        .await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "blob", "classification": classification,
                    "text": format!("The checksum {token} closes the release notes.")}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    while app.step().await.stored > 0 {}
    let status: String =
        sqlx::query_scalar("SELECT status FROM documents WHERE pipeline_id = $1::uuid")
            .bind(&pid)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(status, "success");
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT lexeme FROM fragments, unnest(tsv) WHERE pipeline_id = $1::uuid
         AND octet_length(lexeme) > 1000",
    )
    .bind(&pid)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(held, [token.to_lowercase()]);
    let (stored, computed) = postings(&app, &pid).await;
    assert!(
        stored.iter().any(|(word, ..)| word == "checksum"),
        "{stored:?}"
    );
    assert!(stored.iter().all(|(word, ..)| word.len() <= 1000));
    assert_eq!(stored, computed);
    let reply = search(
        &app,
        &pid,
        json!({"query": "release checksum", "type": "hybrid", "classification": classification,
               "params": {"k": 1}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body[0]["full_text_rank"], 1, "{}", reply.text);
}

#[tokio::test]
async fn the_word_statistics_follow_every_write_and_fold() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    let (kept, counted) = word_statistics(&app, &pid).await;
    assert!(counted.len() > 20, "{counted:?}");
    assert_eq!(kept, counted);
    // The postings, with the first fragments' average length as the reference.
    let reference = reference_length(&app, &pid).await;
    let (stored, computed) = postings(&app, &pid).await;
    assert!(stored.len() > counted.len(), "{stored:?}");
    assert_eq!(stored, computed);

    // A new version expires the old one; a deleted document leaves; a pipeline without
    // full-text search counts nothing.
    app.submit_text(
        &pid,
        "parking",
        "Parking permits are renewed online every March.",
    )
    .await;
    app.submit_text(&pid, "garden", "The roof garden opens in spring.")
        .await;
    while app.step().await.stored > 0 {}
    let garden = app
        .count(
            "SELECT count(*) FROM documents WHERE pipeline_id = $1",
            &pid,
        )
        .await;
    assert_eq!(garden, NOTES.len() as i64 + 2);
    let backup: Uuid = sqlx::query_scalar(
        "SELECT id FROM documents WHERE pipeline_id = $1 AND external_identifier = 'backup'",
    )
    .bind(Uuid::parse_str(&pid).unwrap())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let reply = app
        .delete(&format!("/pipelines/{pid}/documents/{backup}"))
        .await;
    assert!(reply.status.is_success(), "{}", reply.text);
    let (kept, counted) = word_statistics(&app, &pid).await;
    assert!(
        counted.iter().any(|(word, _, _)| word == "march"),
        "{counted:?}"
    );
    assert!(
        !counted.iter().any(|(word, _, _)| word == "nightly"),
        "{counted:?}"
    );
    assert_eq!(kept, counted);
    let (stored, computed) = postings(&app, &pid).await;
    assert!(stored.iter().any(|(word, ..)| word == "march"));
    assert!(!stored.iter().any(|(word, ..)| word == "nightly"));
    assert_eq!(stored, computed);
    assert_eq!(reference_length(&app, &pid).await, reference);
    let plain = app.new_pipeline_id(json!({})).await;
    app.submit_text(&plain, "plain", "Words nobody counts.")
        .await;
    while app.step().await.stored > 0 {}
    assert_eq!(word_statistics(&app, &plain).await, (vec![], vec![]));
    assert_eq!(postings(&app, &plain).await, (vec![], vec![]));

    // Folded: one row per word, the same sums.
    let rows = |pid: String| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM word_counts WHERE pipeline_id = $1")
                .bind(Uuid::parse_str(&pid).unwrap())
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let scattered = rows(pid.clone()).await;
    assert!(scattered > counted.len() as i64, "{scattered}");
    let pipeline_id = Uuid::parse_str(&pid).unwrap();
    for _ in 0..trove::store::words::FOLD_AFTER {
        sqlx::query("INSERT INTO word_counts VALUES ($1, '', 0, 0)")
            .bind(pipeline_id)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    assert!(
        trove::store::words::fold_if_scattered(&app.pool, pipeline_id)
            .await
            .unwrap()
    );
    assert_eq!(rows(pid.clone()).await, counted.len() as i64);
    assert_eq!(
        word_statistics(&app, &pid).await,
        (counted.clone(), counted)
    );
    assert!(
        !trove::store::words::fold_if_scattered(&app.pool, pipeline_id)
            .await
            .unwrap()
    );

    // A deleted pipeline takes its statistics and postings with it.
    let reply = app.delete(&format!("/pipelines/{pid}")).await;
    assert!(reply.status.is_success(), "{}", reply.text);
    assert_eq!(rows(pid.clone()).await, 0);
    assert_eq!(postings(&app, &pid).await, (vec![], vec![]));
    let norms = app
        .count(
            "SELECT count(*) FROM posting_norms WHERE pipeline_id = $1",
            &pid,
        )
        .await;
    assert_eq!(norms, 0);
}

#[tokio::test]
async fn the_word_statistics_of_a_large_fragment_sort_its_words_alone() {
    let app = hybrid_app("hybrid").await;
    let pid = notes_pipeline(&app, json!({})).await;
    let pipeline_id = Uuid::parse_str(&pid).unwrap();
    // A fragment of 25,000 distinct words added to a stored version, with the statistics'
    // grouping made to sort: each of its words' rows must not carry the fragment's 200 KB.
    let text: String = (0..25_000).map(|i| format!("w{i:06} ")).collect();
    let mut tx = app.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL enable_hashagg = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SET LOCAL temp_file_limit = '64MB'")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO fragments (id, pipeline_id, document_id, version, order_id, classification,
                                metadata, content, tsv)
         SELECT gen_random_uuid(), f.pipeline_id, f.document_id, f.version, 1000, f.classification,
                f.metadata, convert_to($2, 'UTF8'), fragment_tsvector('english', $2)
         FROM fragments f WHERE f.pipeline_id = $1 LIMIT 1",
    )
    .bind(pipeline_id)
    .bind(&text)
    .execute(&mut *tx)
    .await
    .unwrap();
    let counted: i64 = sqlx::query_scalar(
        "SELECT sum(fragments)::bigint FROM word_counts WHERE pipeline_id = $1 AND word = 'w024999'",
    )
    .bind(pipeline_id)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(counted, 1);
    tx.rollback().await.unwrap();
}
