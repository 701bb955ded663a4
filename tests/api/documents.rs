//! Documents, versions and fragments (addendum §6).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid_order_by, assert_invalid_parameter,
    assert_not_found_with_id, assert_plain, assert_utc_timestamp, data_of, ends_with_line_column,
    eventually, is_uuid, keys_of, paragraphs, spawn_app, spawn_app_with_license,
    spawn_app_without_worker, str_of,
};

/// The fields of a document version, sorted.
pub(crate) const VERSION_FIELDS: [&str; 10] = [
    "classification",
    "created_at",
    "expired_at",
    "external_identifier",
    "id",
    "metadata",
    "pipeline_id",
    "status",
    "updated_at",
    "version",
];

/// The fields of a fragment outside search results, without `embedding`, sorted.
const FRAGMENT_FIELDS: [&str; 9] = [
    "classification",
    "document_id",
    "expired_at",
    "id",
    "metadata",
    "order_id",
    "page_content",
    "score",
    "version",
];

fn versions_of(reply: &Reply) -> Vec<i64> {
    reply
        .body
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {}", reply.text))
        .iter()
        .map(|v| v["version"].as_i64().expect("version"))
        .collect()
}

fn version_of(body: &Value) -> i64 {
    body["version"].as_i64().expect("version")
}

/// A text long enough for several fragments with the default splitter.
fn long_text(word: &str) -> String {
    paragraphs(word, 60)
}

async fn versions_count(app: &TestApp, doc: &str) -> i64 {
    app.count("SELECT count(*) FROM documents WHERE id = $1", doc)
        .await
}

#[tokio::test]
async fn both_create_routes_return_a_pending_version() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let before = chrono::Utc::now();
    let reply = app
        .submit(
            &pid,
            &json!({
                "pipeline_id": uuid::Uuid::new_v4(),
                "external_identifier": "guide",
                "classification": "internal",
                "metadata": {"year": 2024, "team": "docs"},
                "text": "The guide.",
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let v = reply.body.clone();
    assert_eq!(keys_of(&v), VERSION_FIELDS, "{v}");
    let id = str_of(&v, "id").to_owned();
    assert!(is_uuid(&id));
    assert_eq!(&id[14..15], "7", "UUID v7: {id}");
    assert_eq!(
        v["pipeline_id"],
        json!(pid),
        "the body's pipeline_id is ignored"
    );
    assert_eq!(v["external_identifier"], "guide");
    assert_eq!(v["classification"], "internal");
    assert_eq!(v["metadata"], json!({"year": 2024, "team": "docs"}));
    assert_eq!(v["status"], "pending");
    assert_eq!(v["expired_at"], Value::Null);
    let created = assert_utc_timestamp(&v["created_at"]);
    assert_utc_timestamp(&v["updated_at"]);
    assert_eq!(
        version_of(&v),
        created.timestamp_micros(),
        "version = created_at in µs"
    );
    assert!(created >= before - chrono::Duration::seconds(5));
    assert!(created <= chrono::Utc::now() + chrono::Duration::seconds(5));

    // `POST /documents` names the pipeline in the body; metadata defaults to {}.
    let reply = app
        .post(
            "/documents",
            &json!({"pipeline_id": pid, "external_identifier": "flat", "classification": "public", "text": "Flat."}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), VERSION_FIELDS);
    assert_eq!(reply.body["pipeline_id"], json!(pid));
    assert_eq!(reply.body["metadata"], json!({}));
    assert_eq!(reply.body["status"], "pending");

    // A new version through the other route shares the id and has a larger version.
    let reply = app
        .post(
            "/documents",
            &json!({"pipeline_id": pid, "external_identifier": "guide", "classification": "internal", "text": "The guide, again."}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["id"], json!(id));
    assert!(version_of(&reply.body) > version_of(&v));
    assert_eq!(versions_count(&app, &id).await, 2);

    // Without `pipeline_id`, `POST /documents` cannot be deserialized.
    let reply = app
        .post(
            "/documents",
            &json!({"external_identifier": "x", "classification": "public", "text": "x"}),
        )
        .await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type: ",
    );
    // Required fields of either route.
    for body in [
        json!({"classification": "public", "text": "x"}),
        json!({"external_identifier": "x", "text": "x"}),
        json!({"external_identifier": "x", "classification": "public"}),
        json!({"external_identifier": "x", "classification": "public", "text": 5}),
    ] {
        let reply = app.submit(&pid, &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type: ",
        );
    }
}

#[tokio::test]
async fn post_documents_without_pipeline_id_is_a_body_error() {
    // Interface §Errors: a missing field is 422 whose reason ends with line and column, and
    // §Metrics counts only requests that passed body parsing.
    let app = spawn_app_without_worker().await;
    let before = app.api_metric("service_document_queue_added").await;
    let reply = app
        .post(
            "/documents",
            &json!({"external_identifier": "x", "classification": "public", "text": "x"}),
        )
        .await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type: ",
    );
    assert!(reply.text.contains("pipeline_id"), "{}", reply.text);
    let after = app.api_metric("service_document_queue_added").await;
    let mut problems = Vec::new();
    if !ends_with_line_column(&reply.text) {
        problems.push(format!("no line and column in {:?}", reply.text));
    }
    if after != before {
        problems.push(format!(
            "service_document_queue_added went from {before} to {after} for a body that does not parse"
        ));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn queue_added_counts_every_parsed_create_request() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let added = || app.api_metric("service_document_queue_added");
    assert_eq!(added().await, 0.0, "starts at 0");

    let ok = json!({"external_identifier": "a", "classification": "public", "text": "a"});
    let reply = app.submit(&pid, &ok).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(added().await, 1.0);

    // Rejected after parsing: still counted.
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "b", "classification": "nope", "text": "b"}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");
    assert_eq!(added().await, 2.0);
    let reply = app.submit(&uuid::Uuid::new_v4().to_string(), &ok).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    assert_eq!(added().await, 3.0);
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "", "classification": "public", "text": "b"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert_eq!(added().await, 4.0);
    let reply = app
        .post(
            "/documents",
            &json!({"pipeline_id": pid, "external_identifier": "c", "classification": "public", "text": "c"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(added().await, 5.0);

    // Not counted: no key, a wrong secret, invalid JSON, a wrong field type.
    let path = format!("/pipelines/{pid}/documents");
    let reply = app.req(Method::POST, &path).json(&ok).send().await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let id = app.master_id.to_string();
    let reply = app.as_key((&id, "wrong")).post(&path, &ok).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = app
        .req(Method::POST, &path)
        .as_master()
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON",
    );
    let reply = app
        .req(Method::POST, "/documents")
        .as_master()
        .header("content-type", "application/json")
        .body(r#"{"pipeline_id": x}"#)
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON",
    );
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "d", "classification": "public", "text": ["x"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(added().await, 5.0);
}

#[tokio::test]
async fn create_errors_name_the_first_failed_check() {
    let app = spawn_app_without_worker().await;
    let schema = json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}}, "required": ["team"]});
    let pid = app
        .new_pipeline_id(json!({"metadata_schema": schema}))
        .await;
    let good = |extra: Value| {
        let mut body = json!({"external_identifier": "doc", "classification": "public", "metadata": {"team": "a"}, "text": "t"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };

    // Unknown pipeline (both routes): 404 with the id.
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app.submit(&missing, &good(json!({}))).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    let reply = app
        .post("/documents", &good(json!({"pipeline_id": missing})))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);

    // The pipeline exists but the key cannot write: 403 (also without any permission).
    let forbidden = format!(
        "Unauthorized: access level AccessLevel(WRITE) required for pipelines with id Some({pid})"
    );
    for permissions in [json!({"pipelines": 5}), json!({})] {
        let key = app.create_key(permissions, json!(["*"])).await;
        let reply = app
            .as_key(&key)
            .post(&format!("/pipelines/{pid}/documents"), &good(json!({})))
            .await;
        assert_error(&reply, StatusCode::FORBIDDEN, &forbidden);
        let reply = app
            .as_key(&key)
            .post("/documents", &good(json!({"pipeline_id": pid})))
            .await;
        assert_error(&reply, StatusCode::FORBIDDEN, &forbidden);
    }

    // Undeclared classification, or one outside the allow-list.
    let reply = app
        .submit(&pid, &good(json!({"classification": "secret"})))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");
    let public_only = app
        .create_key(json!({"pipelines": 6}), json!(["public"]))
        .await;
    let path = format!("/pipelines/{pid}/documents");
    let reply = app
        .as_key(&public_only)
        .post(&path, &good(json!({"classification": "internal"})))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");
    let reply = app.as_key(&public_only).post(&path, &good(json!({}))).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    // Existence comes before validation.
    let reply = app
        .submit(
            &pid,
            &good(json!({"classification": "secret", "external_identifier": "", "metadata": {"year": "x"}})),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");

    // External identifiers: 1 to 1024 characters.
    for external_identifier in [String::new(), "x".repeat(1025), "é".repeat(1025)] {
        let reply = app
            .submit(
                &pid,
                &good(json!({"external_identifier": external_identifier})),
            )
            .await;
        assert_invalid_parameter(&reply, "Invalid external_identifier");
    }
    for external_identifier in ["x".repeat(1024), "é".repeat(1024), "1".to_owned()] {
        let reply = app
            .submit(
                &pid,
                &good(json!({"external_identifier": external_identifier})),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }

    // Metadata against the schema: details map the top-level field.
    let reply = app
        .submit(
            &pid,
            &good(json!({"metadata": {"team": "a", "year": "2024"}})),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid metadata");
    let details = reply.body["error"]["details"].as_object().expect("details");
    assert_eq!(
        details.keys().collect::<Vec<_>>(),
        ["year"],
        "{}",
        reply.text
    );
    assert!(details["year"].is_string());
    let reply = app
        .submit(&pid, &good(json!({"metadata": {"year": 2024}})))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid metadata");
    let details = reply.body["error"]["details"].as_object().expect("details");
    assert_eq!(
        details.keys().collect::<Vec<_>>(),
        ["team"],
        "{}",
        reply.text
    );
    let reply = app
        .submit(&pid, &good(json!({"metadata": {"year": 1.5}})))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid metadata");
    let details = reply.body["error"]["details"].as_object().expect("details");
    let mut fields: Vec<&String> = details.keys().collect();
    fields.sort();
    assert_eq!(fields, ["team", "year"], "{}", reply.text);

    // Classification of earlier versions.
    let reply = app
        .submit(&pid, &good(json!({"external_identifier": "fixed"})))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app
        .submit(
            &pid,
            &good(json!({"external_identifier": "fixed", "classification": "internal"})),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Classification mismatch");

    // Splitter override.
    let unknown = uuid::Uuid::new_v4().to_string();
    let reply = app
        .submit(&pid, &good(json!({"text_splitter_id": unknown})))
        .await;
    assert_not_found_with_id(&reply, "Text Splitter not found", &unknown);
    let character = app.seeded("/text-splitters", "character").await;
    let reply = app
        .submit(
            &pid,
            &good(json!({"external_identifier": "split", "text_splitter_id": character})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app
        .submit(
            &pid,
            &good(json!({"external_identifier": "split2", "text_splitter_id": null})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn a_document_limit_refuses_new_documents_but_not_new_versions() {
    let (app, _license) = spawn_app_with_license(
        r#"{"limits": {"documents": 1}}"#,
        AppOptions {
            no_worker: true,
            ..AppOptions::default()
        },
    )
    .await;
    let pid = app.new_pipeline_id(json!({})).await;
    let first = app.submit_text(&pid, "first", "one").await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "second", "classification": "public", "text": "two"}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Document",
    );
    let again = app.submit_text(&pid, "first", "one, again").await;
    assert_eq!(again["id"], first["id"]);
    let reply = app.get(&format!("/pipelines/{pid}/documents")).await;
    assert_eq!(
        data_of(&reply).len(),
        2,
        "two current versions of one document"
    );
    assert_eq!(
        app.count(
            "SELECT count(DISTINCT id) FROM documents WHERE pipeline_id = $1",
            &pid
        )
        .await,
        1
    );
}

#[tokio::test]
async fn reads_select_current_exact_or_as_of_versions() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let v1 = app.submit_text(&pid, "doc", "first version").await;
    app.step().await;
    let v2 = app.submit_text(&pid, "doc", "second version").await;
    let doc = str_of(&v1, "id").to_owned();
    let (n1, n2) = (version_of(&v1), version_of(&v2));
    let path = format!("/pipelines/{pid}/documents/{doc}");

    // While v2 is pending, both are current, newest first.
    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(versions_of(&reply), [n2, n1]);
    assert_eq!(reply.body[0]["status"], "pending");
    assert_eq!(reply.body[1]["status"], "success");
    for version in reply.body.as_array().unwrap() {
        assert_eq!(keys_of(version), VERSION_FIELDS);
    }
    app.step().await;

    let reply = app.get(&path).await;
    assert_eq!(versions_of(&reply), [n2]);
    assert_eq!(reply.body[0]["status"], "success");
    assert_eq!(reply.body[0]["expired_at"], Value::Null);

    // `version`: that version, expired or not.
    let reply = app.get(&format!("{path}?version={n1}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(versions_of(&reply), [n1]);
    let expired_at = assert_utc_timestamp(&reply.body[0]["expired_at"]);
    assert!(
        expired_at.timestamp_micros() > n2,
        "v1 expired when v2 was processed"
    );
    let reply = app.get(&format!("{path}?version={n2}")).await;
    assert_eq!(versions_of(&reply), [n2]);

    // `as_of`: the document as it was then.
    let reply = app.get(&format!("{path}?as_of={n1}")).await;
    assert_eq!(versions_of(&reply), [n1], "{}", reply.text);
    let reply = app.get(&format!("{path}?as_of={}", n2 - 1)).await;
    assert_eq!(versions_of(&reply), [n1]);
    let reply = app.get(&format!("{path}?as_of={n2}")).await;
    assert_eq!(
        versions_of(&reply),
        [n2, n1],
        "before v2 was processed, both were current"
    );
    let now = chrono::Utc::now().timestamp_micros() + 1_000_000;
    let reply = app.get(&format!("{path}?as_of={now}")).await;
    assert_eq!(versions_of(&reply), [n2]);
    let reply = app.get(&format!("{path}?as_of={}", n1 - 1)).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    // `version` wins over `as_of`.
    let reply = app
        .get(&format!("{path}?as_of={}&version={n1}", n1 - 1))
        .await;
    assert_eq!(versions_of(&reply), [n1]);
    let reply = app.get(&format!("{path}?version={}", n1 + 1)).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);

    // The versions route: everything, newest first.
    let reply = app.get(&format!("{path}/versions")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(versions_of(&reply), [n2, n1]);
    assert!(reply.body[1]["expired_at"].is_string());
    assert_eq!(reply.body[0]["expired_at"], Value::Null);
    for version in reply.body.as_array().unwrap() {
        assert_eq!(keys_of(version), VERSION_FIELDS);
        assert_eq!(version["id"], json!(doc));
    }

    // Bad values.
    for query in [
        "version=-1",
        "as_of=-1",
        "version=253402300800000000",
        "as_of=253402300800000000",
    ] {
        let reply = app.get(&format!("{path}?{query}")).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid version");
    }
    let reply = app.get(&format!("{path}?version=253402300799999999")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Document not found");
    for query in ["version=abc", "as_of=1.5", "version=1&version=2"] {
        let reply = app.get(&format!("{path}?{query}")).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
    }

    // Unknown document, another pipeline, unknown pipeline, no read.
    let unknown = uuid::Uuid::new_v4().to_string();
    let reply = app
        .get(&format!("/pipelines/{pid}/documents/{unknown}"))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &unknown);
    let reply = app
        .get(&format!("/pipelines/{pid}/documents/{unknown}/versions"))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &unknown);
    let other = app.new_pipeline_id(json!({})).await;
    let reply = app
        .get(&format!("/pipelines/{other}/documents/{doc}"))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let reply = app
        .get(&format!("/pipelines/{other}/documents/{doc}/versions"))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .get(&format!("/pipelines/{missing}/documents/{doc}"))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    let key = app.create_key(json!({"pipelines": 3}), json!(["*"])).await;
    let reply = app.as_key(&key).get(&path).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reader = app.create_key(json!({"pipelines": 4}), json!([])).await;
    let reply = app.as_key(&reader).get(&path).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "read needs no allow-list: {}",
        reply.text
    );
}

#[tokio::test]
async fn versions_kept_current_are_listed_separately() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let v1 = app.submit_text(&pid, "doc", "first").await;
    app.step().await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "doc", "classification": "public", "text": "second", "expire_older_versions": false}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let v2 = reply.body;
    app.step().await;
    let doc = str_of(&v1, "id");
    let reply = app.get(&format!("/pipelines/{pid}/documents/{doc}")).await;
    assert_eq!(versions_of(&reply), [version_of(&v2), version_of(&v1)]);
    assert!(
        reply
            .body
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["status"] == "success" && v["expired_at"].is_null())
    );
    let reply = app.get(&format!("/pipelines/{pid}/documents")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let data = data_of(&reply);
    assert_eq!(data.len(), 2, "{}", reply.text);
    assert!(data.iter().all(|d| d["id"] == json!(doc)));
    let mut listed: Vec<i64> = data.iter().map(version_of).collect();
    listed.sort_unstable();
    assert_eq!(listed, [version_of(&v1), version_of(&v2)]);
    assert_eq!(keys_of(&data[0]), VERSION_FIELDS);

    // A third version with the default expires both once processed.
    let v3 = app.submit_text(&pid, "doc", "third").await;
    app.step().await;
    let reply = app.get(&format!("/pipelines/{pid}/documents/{doc}")).await;
    assert_eq!(versions_of(&reply), [version_of(&v3)]);
    let reply = app.get(&format!("/pipelines/{pid}/documents")).await;
    assert_eq!(data_of(&reply).len(), 1);
}

#[tokio::test]
async fn document_list_filters_and_orders() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let submit = |ext: &'static str, classification: &'static str| {
        let app = &app;
        let pid = &pid;
        async move {
            let reply = app
                .submit(
                    pid,
                    &json!({"external_identifier": ext, "classification": classification, "text": ext}),
                )
                .await;
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
            reply.body
        }
    };
    submit("alpha-1", "public").await;
    let alpha2 = submit("alpha-2", "internal").await;
    submit("beta-1", "public").await;
    app.step().await;
    submit("gamma", "public").await;
    let expired = submit("expired", "public").await;
    let reply = app
        .delete(&format!(
            "/pipelines/{pid}/documents/{}?expire=true",
            str_of(&expired, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);

    let list = |query: String| {
        let app = &app;
        let pid = &pid;
        async move {
            let reply = app
                .get(&format!("/pipelines/{pid}/documents?{query}"))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{query}: {}", reply.text);
            let names: Vec<String> = data_of(&reply)
                .iter()
                .map(|d| str_of(d, "external_identifier").to_owned())
                .collect();
            (names, reply)
        }
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };

    let (names, reply) = list(String::new()).await;
    assert_eq!(
        sorted(names),
        ["alpha-1", "alpha-2", "beta-1", "gamma"],
        "expired versions leave the list"
    );
    assert!(reply.body["page_info"].is_object() && reply.body["query_info"].is_object());
    let (names, reply) = list("status=pending".to_owned()).await;
    assert_eq!(names, ["gamma"]);
    assert_eq!(
        reply.body["query_info"]["status"], "pending",
        "{}",
        reply.text
    );
    let (names, _) = list("status=success".to_owned()).await;
    assert_eq!(sorted(names), ["alpha-1", "alpha-2", "beta-1"]);
    let (names, _) = list("status=failed".to_owned()).await;
    assert!(names.is_empty());
    let (names, _) = list("classification=internal".to_owned()).await;
    assert_eq!(names, ["alpha-2"]);
    let (names, _) = list("external_identifier=beta-1".to_owned()).await;
    assert_eq!(names, ["beta-1"]);
    let (names, _) = list("external_identifier$contains=alpha".to_owned()).await;
    assert_eq!(sorted(names), ["alpha-1", "alpha-2"]);
    let (names, _) =
        list("external_identifier$contains=a&external_identifier$contains=1".to_owned()).await;
    assert_eq!(sorted(names), ["alpha-1", "beta-1"]);
    let (names, _) = list(format!("created_at$gt={}", str_of(&alpha2, "created_at"))).await;
    assert_eq!(sorted(names), ["beta-1", "gamma"]);
    let (names, _) = list(format!("id={}", str_of(&alpha2, "id"))).await;
    assert_eq!(names, ["alpha-2"]);
    let (names, _) = list("status=success&classification=public".to_owned()).await;
    assert_eq!(sorted(names), ["alpha-1", "beta-1"]);

    // Orders.
    let (names, _) = list("order_by=external_identifier".to_owned()).await;
    assert_eq!(names, ["alpha-1", "alpha-2", "beta-1", "gamma"]);
    let (names, _) = list("order_by=-external_identifier".to_owned()).await;
    assert_eq!(names, ["gamma", "beta-1", "alpha-2", "alpha-1"]);
    let (names, _) = list("order_by=created_at".to_owned()).await;
    assert_eq!(names, ["alpha-1", "alpha-2", "beta-1", "gamma"]);
    let (names, _) = list("order_by=-classification&order_by=external_identifier".to_owned()).await;
    assert_eq!(names, ["alpha-1", "beta-1", "gamma", "alpha-2"]);
    let (names, _) = list("order_by=-updated_at".to_owned()).await;
    assert_eq!(names.first().map(String::as_str), Some("gamma"));
    let (names, _) = list("order_by=id&first=2".to_owned()).await;
    assert_eq!(names.len(), 2);
    for field in ["status", "version", "metadata", "pipeline_id"] {
        let reply = app
            .get(&format!("/pipelines/{pid}/documents?order_by={field}"))
            .await;
        assert_invalid_order_by(&reply, json!([field]));
    }

    // Without read on the pipeline: 404.
    for permissions in [json!({}), json!({"pipelines": 2})] {
        let key = app.create_key(permissions, json!(["*"])).await;
        let reply = app
            .as_key(&key)
            .get(&format!("/pipelines/{pid}/documents"))
            .await;
        assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    }
    let missing = uuid::Uuid::new_v4();
    let reply = app.get(&format!("/pipelines/{missing}/documents")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
}

#[tokio::test]
async fn expiring_and_deleting_documents() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let v1 = app.submit_text(&pid, "doc", &long_text("first")).await;
    app.step().await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "doc", "classification": "public", "text": long_text("second"), "expire_older_versions": false}),
        )
        .await;
    let v2 = reply.body;
    app.step().await;
    let doc = str_of(&v1, "id").to_owned();
    let path = format!("/pipelines/{pid}/documents/{doc}");
    let fragment_ids: Vec<String> = sqlx::query_scalar::<_, uuid::Uuid>(
        "SELECT id FROM fragments WHERE document_id = $1 ORDER BY version, order_id",
    )
    .bind(uuid::Uuid::parse_str(&doc).unwrap())
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|id| id.to_string())
    .collect();
    assert!(fragment_ids.len() >= 4);

    // Expiry: 200 with the versions it expired, newest first.
    let reply = app.delete(&format!("{path}?expire=true")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(versions_of(&reply), [version_of(&v2), version_of(&v1)]);
    for version in reply.body.as_array().unwrap() {
        assert_eq!(keys_of(version), VERSION_FIELDS);
        assert_utc_timestamp(&version["expired_at"]);
    }
    let reply = app.delete(&format!("{path}?expire=true")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!([]));

    let reply = app.get(&path).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let reply = app.get(&format!("/pipelines/{pid}/documents")).await;
    assert!(data_of(&reply).is_empty(), "{}", reply.text);
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v1)))
        .await;
    assert_eq!(versions_of(&reply), [version_of(&v1)]);
    assert!(reply.body[0]["expired_at"].is_string());
    let reply = app.get(&format!("{path}/versions")).await;
    assert_eq!(versions_of(&reply).len(), 2);
    // Expired fragments stay readable by id, with `expired_at`.
    let query: Vec<String> = fragment_ids.iter().map(|id| format!("id={id}")).collect();
    let reply = app
        .get(&format!("/pipelines/{pid}/fragments?{}", query.join("&")))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let fragments = reply.body.as_array().unwrap();
    assert_eq!(fragments.len(), fragment_ids.len());
    assert!(
        fragments.iter().all(|f| f["expired_at"].is_string()),
        "{}",
        reply.text
    );

    // Permanent deletion: 204, everything gone.
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    let reply = app.get(&format!("{path}/versions")).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v1)))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    for sql in [
        "SELECT count(*) FROM documents WHERE id = $1",
        "SELECT count(*) FROM fragments WHERE document_id = $1",
        "SELECT count(*) FROM document_texts WHERE document_id = $1",
    ] {
        assert_eq!(app.count(sql, &doc).await, 0, "{sql}");
    }
    let pipeline = app.get(&format!("/pipelines/{pid}")).await.body;
    let ve = uuid::Uuid::parse_str(str_of(&pipeline, "default_vector_embedding_id")).unwrap();
    let vectors: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM vectors_{}",
        ve.simple()
    )))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(vectors, 0);
    let reply = app
        .get(&format!("/pipelines/{pid}/fragments?{}", query.join("&")))
        .await;
    assert_eq!(reply.body, json!([]));
    let reply = app.delete(&path).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let reply = app.delete(&format!("{path}?expire=true")).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);

    // A new submission of the identifier after permanent deletion gets a new id.
    let again = app.submit_text(&pid, "doc", "anew").await;
    assert_ne!(again["id"], json!(doc));
}

#[tokio::test]
async fn expiry_and_deletion_need_write_and_the_classification_in_the_allow_list() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let internal = app
        .submit(
            &pid,
            &json!({"external_identifier": "in", "classification": "internal", "text": "inside"}),
        )
        .await
        .body;
    let public = app.submit_text(&pid, "out", "outside").await;
    let internal_path = format!("/pipelines/{pid}/documents/{}", str_of(&internal, "id"));
    let public_path = format!("/pipelines/{pid}/documents/{}", str_of(&public, "id"));
    let forbidden = format!(
        "Unauthorized: access level AccessLevel(WRITE) required for pipelines with id Some({pid})"
    );

    let public_only = app
        .create_key(json!({"pipelines": 6}), json!(["public"]))
        .await;
    for path in [
        internal_path.clone(),
        format!("{internal_path}?expire=true"),
    ] {
        let reply = app.as_key(&public_only).delete(&path).await;
        assert_error(&reply, StatusCode::FORBIDDEN, &forbidden);
    }
    assert_eq!(versions_count(&app, str_of(&internal, "id")).await, 1);
    let reply = app.get(&internal_path).await;
    assert_eq!(reply.body[0]["expired_at"], Value::Null, "not expired");

    let reader = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let reply = app.as_key(&reader).delete(&public_path).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &forbidden);
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .delete(&format!(
            "/pipelines/{missing}/documents/{}",
            str_of(&public, "id")
        ))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);

    let reply = app
        .as_key(&public_only)
        .delete(&format!("{public_path}?expire=true"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().map(Vec::len), Some(1));
    let reply = app.as_key(&public_only).delete(&public_path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = app.as_key(&reader).delete(&internal_path).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &forbidden);
    let reply = app.delete(&internal_path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn fragments_of_a_version() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "doc", "classification": "internal", "metadata": {"year": 2021}, "text": long_text("alpha")}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let v1 = reply.body;
    let doc = str_of(&v1, "id").to_owned();
    let path = format!("/pipelines/{pid}/documents/{doc}/fragments");

    // Pending: an empty page.
    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(data_of(&reply).is_empty(), "{}", reply.text);
    app.step().await;

    let reply = app.get(&format!("{path}?count=true")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let all = data_of(&reply).clone();
    let n = all.len();
    assert!(n >= 4, "several fragments: {n}");
    assert_eq!(reply.body["page_info"]["count"], n);
    for (i, fragment) in all.iter().enumerate() {
        assert_eq!(keys_of(fragment), FRAGMENT_FIELDS, "{fragment}");
        assert_eq!(fragment["order_id"], i);
        assert_eq!(fragment["document_id"], json!(doc));
        assert_eq!(fragment["version"], v1["version"]);
        assert_eq!(fragment["classification"], "internal");
        assert_eq!(fragment["metadata"], json!({"year": 2021}));
        assert_eq!(fragment["score"], Value::Null);
        assert_eq!(fragment["expired_at"], Value::Null);
        assert!(str_of(fragment, "page_content").contains("alpha"));
    }
    let ids: Vec<String> = all.iter().map(|f| str_of(f, "id").to_owned()).collect();

    // Orders and pagination.
    let reply = app.get(&format!("{path}?order_by=-order_id")).await;
    let orders: Vec<i64> = data_of(&reply)
        .iter()
        .map(|f| f["order_id"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = (0..i64::try_from(n).unwrap()).rev().collect();
    assert_eq!(orders, expected);
    let reply = app.get(&format!("{path}?first=2")).await;
    assert_eq!(
        data_of(&reply)
            .iter()
            .map(|f| f["order_id"].clone())
            .collect::<Vec<_>>(),
        [json!(0), json!(1)]
    );
    assert_eq!(reply.body["page_info"]["has_next"], true);
    let after = str_of(&reply.body["page_info"], "after").to_owned();
    let reply = app.get(&format!("{path}?first=2&after={after}")).await;
    assert_eq!(data_of(&reply)[0]["order_id"], 2);
    let reply = app
        .get(&format!("{path}?limit=2&offset=2&count=true"))
        .await;
    assert_eq!(data_of(&reply)[0]["id"], json!(ids[2]));
    assert_eq!(reply.body["page_info"]["count"], n);
    let reply = app.get(&format!("{path}?order_by=id")).await;
    assert_eq!(data_of(&reply).len(), n);
    let reply = app.get(&format!("{path}?order_by=page_content")).await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );

    // Embeddings on request.
    let reply = app.get(&format!("{path}?include_embedding=true")).await;
    for fragment in data_of(&reply) {
        let embedding = fragment["embedding"].as_array().expect("embedding");
        assert_eq!(embedding.len(), 384);
        assert!(embedding.iter().all(Value::is_f64));
    }
    let reply = app.get(&format!("{path}?include_embedding=false")).await;
    assert!(data_of(&reply).iter().all(|f| f.get("embedding").is_none()));

    // A second version, pending: the default (newest current) is it, so an empty page; the
    // first stays readable by `version`.
    let v2 = app
        .submit(
            &pid,
            &json!({"external_identifier": "doc", "classification": "internal", "text": long_text("beta")}),
        )
        .await
        .body;
    let reply = app.get(&path).await;
    assert!(data_of(&reply).is_empty(), "{}", reply.text);
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v2)))
        .await;
    assert!(data_of(&reply).is_empty());
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v1)))
        .await;
    assert_eq!(data_of(&reply).len(), n);
    app.step().await;
    let reply = app.get(&path).await;
    assert!(str_of(&data_of(&reply)[0], "page_content").contains("beta"));
    assert_eq!(data_of(&reply)[0]["version"], v2["version"]);
    // The expired version's fragments, by version, carry `expired_at`.
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v1)))
        .await;
    assert!(
        data_of(&reply).iter().all(|f| f["expired_at"].is_string()),
        "{}",
        reply.text
    );

    // Errors.
    let reply = app
        .get(&format!("{path}?version={}", version_of(&v1) + 1))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let unknown = uuid::Uuid::new_v4().to_string();
    let reply = app
        .get(&format!("/pipelines/{pid}/documents/{unknown}/fragments"))
        .await;
    assert_not_found_with_id(&reply, "Document not found", &unknown);
    let reply = app.get(&format!("{path}?version=-5")).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid version");
    let reply = app.get(&format!("{path}?first=1&limit=1")).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
    let reply = app
        .delete(&format!("/pipelines/{pid}/documents/{doc}?expire=true"))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = app.get(&path).await;
    assert_not_found_with_id(&reply, "Document not found", &doc);
    let key = app.create_key(json!({}), json!(["*"])).await;
    let reply = app
        .as_key(&key)
        .get(&format!("{path}?version={}", version_of(&v1)))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
}

#[tokio::test]
async fn fragments_by_id_in_request_order() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let other = app.new_pipeline_id(json!({})).await;
    let doc = app.submit_text(&pid, "doc", &long_text("gamma")).await;
    let foreign = app.submit_text(&other, "doc", "other pipeline").await;
    app.step().await;
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}/fragments",
            str_of(&doc, "id")
        ))
        .await;
    let listed = data_of(&reply).clone();
    assert!(listed.len() >= 3);
    let foreign_fragment = app
        .get(&format!(
            "/pipelines/{other}/documents/{}/fragments",
            str_of(&foreign, "id")
        ))
        .await;
    let foreign_id = str_of(&data_of(&foreign_fragment)[0], "id").to_owned();
    let (a, b, c) = (
        str_of(&listed[0], "id"),
        str_of(&listed[1], "id"),
        str_of(&listed[2], "id"),
    );
    let unknown = uuid::Uuid::new_v4();

    let reply = app
        .get(&format!(
            "/pipelines/{pid}/fragments?id={c}&id={unknown}&id={a}&id={foreign_id}&id={b}"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let expected = json!([listed[2], listed[0], listed[1]]);
    assert_eq!(
        reply.body, expected,
        "request order, unknown and foreign ids omitted"
    );
    let reply = app
        .post(
            &format!("/pipelines/{pid}/fragments"),
            &json!({"ids": [c, unknown, a, foreign_id, b]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, expected, "deprecated POST answers the same");

    let reply = app
        .get(&format!(
            "/pipelines/{pid}/fragments?id={b}&include_embedding=true"
        ))
        .await;
    assert_eq!(
        reply.body[0]["embedding"].as_array().map(Vec::len),
        Some(384)
    );
    let reply = app
        .post(
            &format!("/pipelines/{pid}/fragments?include_embedding=true"),
            &json!({"ids": [b]}),
        )
        .await;
    assert_eq!(
        reply.body[0]["embedding"].as_array().map(Vec::len),
        Some(384)
    );
    let reply = app.get(&format!("/pipelines/{pid}/fragments")).await;
    assert_eq!(reply.body, json!([]));
    let reply = app
        .get(&format!("/pipelines/{pid}/fragments?id=not-a-uuid"))
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to deserialize query string",
    );
    let reply = app
        .post(&format!("/pipelines/{pid}/fragments"), &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);

    // Expired fragments are included.
    app.delete(&format!(
        "/pipelines/{pid}/documents/{}?expire=true",
        str_of(&doc, "id")
    ))
    .await;
    let reply = app.get(&format!("/pipelines/{pid}/fragments?id={a}")).await;
    assert_eq!(reply.body.as_array().map(Vec::len), Some(1));
    assert!(reply.body[0]["expired_at"].is_string(), "{}", reply.text);

    // Read on the pipeline is needed.
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .get(&format!("/pipelines/{missing}/fragments?id={a}"))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    let key = app.create_key(json!({"pipelines": 3}), json!(["*"])).await;
    let reply = app
        .as_key(&key)
        .get(&format!("/pipelines/{pid}/fragments?id={a}"))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
}

#[tokio::test]
async fn full_text_pipelines_store_a_text_search_vector() {
    let app = spawn_app_without_worker().await;
    let text_only = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    let both = app
        .new_pipeline_id(json!({"has_full_text_search": true}))
        .await;
    let vectors_only = app.new_pipeline_id(json!({})).await;
    let mut docs = Vec::new();
    for pid in [&text_only, &both, &vectors_only] {
        docs.push(app.submit_text(pid, "doc", &long_text("harbour")).await);
    }
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 3, "{outcome:?}");

    let with_tsv = "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND tsv IS NOT NULL";
    let without_tsv = "SELECT count(*) FROM fragments WHERE pipeline_id = $1 AND tsv IS NULL";
    for pid in [&text_only, &both] {
        assert!(app.count(with_tsv, pid).await > 0);
        assert_eq!(app.count(without_tsv, pid).await, 0);
    }
    assert!(app.count(without_tsv, &vectors_only).await > 0);
    assert_eq!(app.count(with_tsv, &vectors_only).await, 0);

    // A pipeline without a model has no embeddings to include.
    let reply = app
        .get(&format!(
            "/pipelines/{text_only}/documents/{}/fragments?include_embedding=true",
            str_of(&docs[0], "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(!data_of(&reply).is_empty());
    assert!(data_of(&reply).iter().all(|f| f.get("embedding").is_none()));
    let reply = app
        .get(&format!(
            "/pipelines/{both}/documents/{}/fragments?include_embedding=true",
            str_of(&docs[1], "id")
        ))
        .await;
    assert!(
        data_of(&reply)
            .iter()
            .all(|f| f["embedding"].as_array().map(Vec::len) == Some(384))
    );
}

// ---- Batch submission (extension) ------------------------------------------------------------

#[tokio::test]
async fn a_batch_is_stored_in_order_and_processed() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{pid}/documents/batch");
    let reply = app
        .post(
            &path,
            &json!({"documents": [
                {"external_identifier": "a", "classification": "public", "text": "Alpha text."},
                {"external_identifier": "b", "classification": "internal", "text": "Bravo text.", "metadata": {"year": 2024}},
                {"external_identifier": "a", "classification": "public", "text": "Alpha again."}
            ]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let versions = reply.body.as_array().expect("array");
    let identifiers: Vec<&str> = versions
        .iter()
        .map(|v| v["external_identifier"].as_str().expect("identifier"))
        .collect();
    assert_eq!(identifiers, ["a", "b", "a"]);
    assert_eq!(
        versions[0]["id"], versions[2]["id"],
        "one document, two versions"
    );
    assert!(versions[2]["version"].as_i64() > versions[0]["version"].as_i64());
    assert!(versions.iter().all(|v| v["status"] == "pending"));

    // Each item is queued: the worker processes all of them.
    eventually(
        "both documents processed",
        std::time::Duration::from_secs(5),
        || async {
            let list = app
                .get(&format!(
                    "/pipelines/{pid}/documents?status=success&count=true"
                ))
                .await;
            (list.body["page_info"]["count"] == json!(2)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn an_invalid_item_stores_nothing() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{pid}/documents/batch");
    let good = json!({"external_identifier": "good", "classification": "public", "text": "Fine."});
    for (bad, status, message) in [
        (
            json!({"external_identifier": "x", "classification": "nope", "text": "t"}),
            404,
            "Classification not found",
        ),
        (
            json!({"external_identifier": "x", "classification": "public", "text": "t", "metadata": {"year": "MMXXIV"}}),
            400,
            "Invalid metadata",
        ),
        (
            json!({"external_identifier": "", "classification": "public", "text": "t"}),
            400,
            "Invalid parameter",
        ),
    ] {
        let reply = app
            .post(&path, &json!({"documents": [good.clone(), bad]}))
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
        let details = &reply.body["error"]["details"];
        assert_eq!(details["index"], 1, "{}", reply.text);
        assert_eq!(details["status"], status, "{}", reply.text);
        assert_eq!(details["message"], message, "{}", reply.text);
    }
    let list = app
        .get(&format!("/pipelines/{pid}/documents?count=true"))
        .await;
    assert_eq!(list.body["page_info"]["count"], 0, "nothing stored");

    for documents in [json!([]), json!(vec![good; 1001])] {
        let reply = app.post(&path, &json!({"documents": documents})).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
        assert_eq!(
            reply.body["error"]["details"]["error"],
            "documents must hold 1 to 1000 items"
        );
    }
}

#[tokio::test]
async fn a_batch_needs_write_and_counts_against_the_license() {
    let (app, _license) = spawn_app_with_license(
        r#"{"expires_at": null, "limits": {"documents": 2}}"#,
        AppOptions::default(),
    )
    .await;
    let pid = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{pid}/documents/batch");
    let item =
        |id: &str| json!({"external_identifier": id, "classification": "public", "text": "t"});
    let reply = app
        .post(
            &path,
            &json!({"documents": [item("a"), item("b"), item("c")]}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Document",
    );
    // Two new documents and a second version of one of them fit.
    let reply = app
        .post(
            &path,
            &json!({"documents": [item("a"), item("b"), item("a")]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);

    let key = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let reply = app
        .as_key(&key)
        .post(&path, &json!({"documents": [item("d")]}))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
}
