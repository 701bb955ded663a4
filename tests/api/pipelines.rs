//! Pipelines, their classifications and metadata indexes (addendum §5, §7).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, assert_invalid_parameter, assert_not_found_with_id,
    assert_utc_timestamp, data_of, is_uuid, keys_of, spawn_app, spawn_app_without_worker, str_of,
    uuid_of,
};

/// The fields of a pipeline object, sorted.
const PIPELINE_FIELDS: [&str; 10] = [
    "created_at",
    "default_text_splitter_id",
    "default_vector_embedding_id",
    "description",
    "embedding_models",
    "has_full_text_search",
    "id",
    "metadata_schema",
    "name",
    "updated_at",
];

fn assert_schema_error(reply: &crate::helpers::Reply) {
    assert_error(reply, StatusCode::BAD_REQUEST, "Schema error");
    assert!(
        reply.body["error"].get("details").is_none(),
        "Schema error has no details: {}",
        reply.text
    );
}

async fn pipeline_count(app: &TestApp) -> usize {
    let reply = app.get("/pipelines").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    data_of(&reply).len()
}

#[tokio::test]
async fn create_returns_the_pipeline_object_without_classifications() {
    let app = spawn_app().await;
    let model = app.seeded("/embedding-models", "default").await;
    let splitter = app.seeded("/text-splitters", "recursive-character").await;
    let schema = json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": ["string", "null"]}}, "required": ["year"]});
    let body = app
        .pipeline_body(
            json!({"name": "handbook", "description": "Staff handbook", "metadata_schema": schema}),
        )
        .await;
    let reply = app.post("/pipelines", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let pipeline = reply.body.clone();
    assert_eq!(keys_of(&pipeline), PIPELINE_FIELDS, "{pipeline}");
    assert!(is_uuid(str_of(&pipeline, "id")));
    assert_eq!(pipeline["name"], "handbook");
    assert_eq!(pipeline["description"], "Staff handbook");
    assert_eq!(pipeline["default_text_splitter_id"], json!(splitter));
    assert_eq!(pipeline["has_full_text_search"], false);
    assert_eq!(pipeline["metadata_schema"], schema);
    let created = assert_utc_timestamp(&pipeline["created_at"]);
    let updated = assert_utc_timestamp(&pipeline["updated_at"]);
    assert!(updated >= created);

    // The vector embedding id is the association, not the model id; the model object is
    // nested under it.
    let ve = str_of(&pipeline, "default_vector_embedding_id");
    assert!(is_uuid(ve));
    assert_ne!(ve, model, "default_vector_embedding_id is not the model id");
    let models = pipeline["embedding_models"].as_object().expect("object");
    assert_eq!(models.len(), 1, "{pipeline}");
    let nested = &models[ve];
    assert_eq!(nested["id"], json!(model));
    assert_eq!(nested["name"], "default");
    assert_eq!(nested["dimensions"], 384);
    assert!(nested.get("provider").is_some() && nested.get("model_name").is_some());

    // GET answers the same object.
    let id = str_of(&pipeline, "id");
    let read = app.get(&format!("/pipelines/{id}")).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    assert_eq!(read.body, pipeline);

    // Defaults: description null, schema `{"type":"object","properties":{}}`.
    let body = json!({
        "name": "bare",
        "embedding_model_id": model,
        "default_text_splitter_id": splitter,
        "classifications": ["public"],
    });
    let reply = app.post("/pipelines", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), PIPELINE_FIELDS);
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["has_full_text_search"], false);
    assert_eq!(
        reply.body["metadata_schema"],
        json!({"type": "object", "properties": {}})
    );
}

#[tokio::test]
async fn full_text_only_pipelines_have_no_embedding_model() {
    let app = spawn_app().await;
    let reply = app
        .post(
            "/pipelines",
            &app.pipeline_body(json!({"embedding_model_id": null, "has_full_text_search": true}))
                .await,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["default_vector_embedding_id"], Value::Null);
    assert_eq!(reply.body["embedding_models"], json!({}));
    assert_eq!(reply.body["has_full_text_search"], true);

    // Omitting the model is the same as null.
    let mut body = app
        .pipeline_body(json!({"has_full_text_search": true}))
        .await;
    body.as_object_mut().unwrap().remove("embedding_model_id");
    let reply = app.post("/pipelines", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["embedding_models"], json!({}));

    // A model and full-text search together.
    let reply = app
        .post(
            "/pipelines",
            &app.pipeline_body(json!({"has_full_text_search": true}))
                .await,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert!(reply.body["default_vector_embedding_id"].is_string());
    assert_eq!(reply.body["has_full_text_search"], true);

    // No model and no full-text search.
    for extra in [
        json!({"embedding_model_id": null}),
        json!({"embedding_model_id": null, "has_full_text_search": false}),
    ] {
        let reply = app
            .post("/pipelines", &app.pipeline_body(extra).await)
            .await;
        assert_invalid_parameter(
            &reply,
            "A pipeline without embedding model requires full-text search",
        );
    }
    assert_eq!(pipeline_count(&app).await, 3);
}

#[tokio::test]
async fn invalid_names_and_classifications_are_400_invalid_parameter() {
    let app = spawn_app().await;
    let long_name = "n".repeat(256);
    let long_classification = "c".repeat(256);
    let cases = [
        (json!({"name": ""}), "Invalid name".to_owned()),
        (json!({"name": long_name}), "Invalid name".to_owned()),
        (
            json!({"classifications": [], "hierarchy": []}),
            "At least one classification is required".to_owned(),
        ),
        (
            json!({"classifications": ["*"], "hierarchy": []}),
            "Invalid classification: *".to_owned(),
        ),
        (
            json!({"classifications": ["public", ""], "hierarchy": []}),
            "Invalid classification: ".to_owned(),
        ),
        (
            json!({"classifications": [long_classification], "hierarchy": []}),
            format!("Invalid classification: {long_classification}"),
        ),
        (
            json!({"classifications": ["a", "b", "a"], "hierarchy": []}),
            "Invalid classification: a".to_owned(),
        ),
        (
            json!({"classifications": ["a"], "hierarchy": [["a", "x"]]}),
            "Unknown classification in hierarchy: x".to_owned(),
        ),
        (
            json!({"classifications": ["a"], "hierarchy": [["y", "a"]]}),
            "Unknown classification in hierarchy: y".to_owned(),
        ),
        (
            json!({"classifications": ["a", "b"], "hierarchy": [["a", "a"]]}),
            "Classification hierarchy contains a cycle".to_owned(),
        ),
        (
            json!({"classifications": ["a", "b", "c"], "hierarchy": [["a", "b"], ["b", "c"], ["c", "a"]]}),
            "Classification hierarchy contains a cycle".to_owned(),
        ),
        (
            json!({"classifications": ["a", "b"], "hierarchy": [["a", "b"], ["b", "a"]]}),
            "Classification hierarchy contains a cycle".to_owned(),
        ),
    ];
    for (extra, error) in cases {
        let reply = app
            .post("/pipelines", &app.pipeline_body(extra.clone()).await)
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{extra}: {}",
            reply.text
        );
        assert_invalid_parameter(&reply, &error);
    }
    assert_eq!(pipeline_count(&app).await, 0, "nothing was created");

    // Edge values that are valid: 255 characters, a diamond (no cycle).
    let reply = app
        .post(
            "/pipelines",
            &app.pipeline_body(json!({
                "name": "n".repeat(255),
                "classifications": ["a", "b", "c", "d", "e".repeat(255)],
                "hierarchy": [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]],
            }))
            .await,
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn invalid_metadata_schemas_are_schema_errors() {
    let app = spawn_app().await;
    let bad = [
        // array types, at any depth
        json!({"type": "object", "properties": {"tags": {"type": "array"}}}),
        json!({"type": "object", "properties": {"tags": {"type": ["array", "null"]}}}),
        json!({"type": "object", "properties": {"o": {"type": "object", "properties": {"tags": {"type": "array"}}}}}),
        // array keywords
        json!({"type": "object", "properties": {"a": {"type": "string", "items": {"type": "string"}}}}),
        json!({"type": "object", "properties": {"a": {"type": "object", "prefixItems": []}}}),
        json!({"type": "object", "properties": {"a": {"type": "object", "contains": {}}}}),
        // a type other than object
        json!({"type": "string"}),
        json!({"type": "array", "items": {}}),
        // not an object at all
        json!("schema"),
        // property names that are not identifiers
        json!({"type": "object", "properties": {"1year": {"type": "integer"}}}),
        json!({"type": "object", "properties": {"team-name": {"type": "string"}}}),
        json!({"type": "object", "properties": {"a.b": {"type": "string"}}}),
        // property types outside the allowed set
        json!({"type": "object", "properties": {"a": {}}}),
        json!({"type": "object", "properties": {"a": {"type": "date"}}}),
        json!({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}),
        // a schema that does not compile
        json!({"type": "object", "properties": {"a": {"type": "string", "minLength": "x"}}}),
    ];
    for schema in bad {
        let reply = app
            .post(
                "/pipelines",
                &app.pipeline_body(json!({"metadata_schema": schema.clone()}))
                    .await,
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{schema}: {}",
            reply.text
        );
        assert_schema_error(&reply);
    }
    assert_eq!(pipeline_count(&app).await, 0);

    // Accepted: nullable pairs, objects with inner properties, other keywords, no `type`.
    for schema in [
        json!({"type": "object", "properties": {"a": {"type": ["integer", "null"]}, "b": {"type": "number", "minimum": 0}, "c": {"type": "boolean"}}}),
        json!({"type": "object", "properties": {"author": {"type": "object", "properties": {"name": {"type": "string"}}}}, "required": ["author"], "additionalProperties": false}),
        json!({"properties": {"lang": {"type": "string", "enum": ["en", "fr"]}, "_x1": {"type": "string", "format": "date"}}}),
    ] {
        let reply = app
            .post(
                "/pipelines",
                &app.pipeline_body(json!({"metadata_schema": schema.clone()}))
                    .await,
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{schema}: {}",
            reply.text
        );
        assert_eq!(reply.body["metadata_schema"], schema);
    }
}

#[tokio::test]
async fn referenced_model_and_splitter_must_exist_and_be_readable() {
    let app = spawn_app().await;
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .post(
            "/pipelines",
            &app.pipeline_body(json!({"embedding_model_id": missing}))
                .await,
        )
        .await;
    assert_not_found_with_id(&reply, "Embedding model not found", &missing);
    let reply = app
        .post(
            "/pipelines",
            &app.pipeline_body(json!({"default_text_splitter_id": missing}))
                .await,
        )
        .await;
    assert_not_found_with_id(&reply, "Text Splitter not found", &missing);

    // Existing but unreadable references are reported the same way.
    let model = app.seeded("/embedding-models", "default").await;
    let splitter = app.seeded("/text-splitters", "recursive-character").await;
    let body = app.pipeline_body(json!({})).await;
    let no_model_read = app
        .create_key(json!({"pipelines": 6, "text-splitters": 4}), json!(["*"]))
        .await;
    let reply = app.as_key(&no_model_read).post("/pipelines", &body).await;
    assert_not_found_with_id(&reply, "Embedding model not found", &model);
    let no_splitter_read = app
        .create_key(json!({"pipelines": 6, "embedding-models": 4}), json!(["*"]))
        .await;
    let reply = app
        .as_key(&no_splitter_read)
        .post("/pipelines", &body)
        .await;
    assert_not_found_with_id(&reply, "Text Splitter not found", &splitter);
    let both = app
        .create_key(
            json!({"pipelines": 6, "embedding-models": 4, "text-splitters": 4}),
            json!(["*"]),
        )
        .await;
    let reply = app.as_key(&both).post("/pipelines", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(pipeline_count(&app).await, 1);
}

#[tokio::test]
async fn duplicate_names_conflict_and_creation_needs_write_on_the_type() {
    let app = spawn_app().await;
    let body = app.pipeline_body(json!({"name": "unique"})).await;
    let reply = app.post("/pipelines", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app.post("/pipelines", &body).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");

    let reader = app
        .create_key(
            json!({"pipelines": 5, "embedding-models": 4, "text-splitters": 4}),
            json!(["*"]),
        )
        .await;
    let other = app.pipeline_body(json!({})).await;
    let reply = app.as_key(&reader).post("/pipelines", &other).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(WRITE) required for pipelines with id None",
    );
    assert_eq!(pipeline_count(&app).await, 1);
}

#[tokio::test]
async fn list_filters_pagination_and_visibility() {
    let app = spawn_app().await;
    let one = app
        .new_pipeline(json!({"name": "alpha-one", "description": "first"}))
        .await;
    let two = app
        .new_pipeline(
            json!({"name": "alpha-two", "embedding_model_id": null, "has_full_text_search": true}),
        )
        .await;
    let three = app.new_pipeline(json!({"name": "beta-three"})).await;
    let names = |reply: &crate::helpers::Reply| -> Vec<String> {
        data_of(reply)
            .iter()
            .map(|p| str_of(p, "name").to_owned())
            .collect()
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };

    let reply = app.get("/pipelines").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        sorted(names(&reply)),
        ["alpha-one", "alpha-two", "beta-three"]
    );
    assert_eq!(data_of(&reply)[0].as_object().unwrap().len(), 10);

    let reply = app.get("/pipelines?name$startswith=alpha").await;
    assert_eq!(sorted(names(&reply)), ["alpha-one", "alpha-two"]);
    assert_eq!(
        reply.body["query_info"]["name$startswith"], "alpha",
        "{}",
        reply.text
    );
    let reply = app.get("/pipelines?name$contains=two").await;
    assert_eq!(names(&reply), ["alpha-two"]);
    let reply = app
        .get("/pipelines?name$contains=a&name$contains=three")
        .await;
    assert_eq!(names(&reply), ["beta-three"]);
    let reply = app.get("/pipelines?has_full_text_search=true").await;
    assert_eq!(names(&reply), ["alpha-two"]);
    let reply = app.get("/pipelines?has_full_text_search=false").await;
    assert_eq!(sorted(names(&reply)), ["alpha-one", "beta-three"]);
    let reply = app.get("/pipelines?name=beta-three").await;
    assert_eq!(names(&reply), ["beta-three"]);
    let reply = app.get("/pipelines?description$contains=irs").await;
    assert_eq!(names(&reply), ["alpha-one"]);
    let id = str_of(&three, "id");
    let reply = app.get(&format!("/pipelines?id={id}")).await;
    assert_eq!(names(&reply), ["beta-three"]);

    // Ordering and both pagination modes.
    let reply = app.get("/pipelines?order_by=-name").await;
    assert_eq!(names(&reply), ["beta-three", "alpha-two", "alpha-one"]);
    let reply = app.get("/pipelines?order_by=name&first=2").await;
    assert_eq!(names(&reply), ["alpha-one", "alpha-two"]);
    assert_eq!(reply.body["page_info"]["has_next"], true, "{}", reply.text);
    let after = str_of(&reply.body["page_info"], "after").to_owned();
    let reply = app
        .get(&format!("/pipelines?order_by=name&first=2&after={after}"))
        .await;
    assert_eq!(names(&reply), ["beta-three"]);
    assert_eq!(reply.body["page_info"]["has_next"], false);
    let reply = app
        .get("/pipelines?order_by=name&limit=1&offset=1&count=true")
        .await;
    assert_eq!(names(&reply), ["alpha-two"]);
    assert_eq!(reply.body["page_info"]["count"], 3, "{}", reply.text);
    let reply = app.get("/pipelines?order_by=has_full_text_search").await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );

    // A key sees only what it can read.
    let key = app.create_key(json!({}), json!([])).await;
    let reply = app.as_key(&key).get("/pipelines").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(data_of(&reply).is_empty(), "{}", reply.text);
    app.grant(
        &key.0,
        json!([{"object_type": "pipelines", "object_id": str_of(&two, "id"), "permission": 4}]),
    )
    .await;
    let reply = app.as_key(&key).get("/pipelines").await;
    assert_eq!(names(&reply), ["alpha-two"]);
    let _ = one;
}

#[tokio::test]
async fn get_of_unknown_or_unreadable_pipeline_is_404_with_id() {
    let app = spawn_app().await;
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app.get(&format!("/pipelines/{missing}")).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);

    let id = app.new_pipeline_id(json!({})).await;
    for permissions in [json!({}), json!({"pipelines": 3}), json!({"agents": 7})] {
        let key = app.create_key(permissions.clone(), json!(["*"])).await;
        let reply = app.as_key(&key).get(&format!("/pipelines/{id}")).await;
        assert_not_found_with_id(&reply, "Pipeline not found", &id);
    }
    // Read on the object alone is enough, including the nested embedding model.
    let key = app.create_key(json!({}), json!([])).await;
    app.grant(
        &key.0,
        json!([{"object_type": "pipelines", "object_id": id, "permission": 4}]),
    )
    .await;
    let reply = app.as_key(&key).get(&format!("/pipelines/{id}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["embedding_models"].as_object().map(|m| m.len()),
        Some(1)
    );
}

#[tokio::test]
async fn patch_changes_name_description_splitter_and_compatible_schema() {
    let app = spawn_app().await;
    let created = app
        .new_pipeline(json!({"name": "before", "description": "old"}))
        .await;
    let id = str_of(&created, "id").to_owned();
    let path = format!("/pipelines/{id}");
    let created_updated = assert_utc_timestamp(&created["updated_at"]);

    let reply = app
        .patch(&path, &json!({"name": "after", "description": "new"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), PIPELINE_FIELDS);
    assert_eq!(reply.body["name"], "after");
    assert_eq!(reply.body["description"], "new");
    assert_eq!(reply.body["created_at"], created["created_at"]);
    assert!(assert_utc_timestamp(&reply.body["updated_at"]) > created_updated);

    // `{}` changes nothing; description null clears it.
    let reply = app.patch(&path, &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "after");
    let reply = app.patch(&path, &json!({"description": null})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["name"], "after");

    let character = app.seeded("/text-splitters", "character").await;
    let reply = app
        .patch(&path, &json!({"default_text_splitter_id": character}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["default_text_splitter_id"], json!(character));

    // Compatible: a property added, the others kept with their types.
    let wider = json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}, "lang": {"type": "string"}}});
    let reply = app.patch(&path, &json!({"metadata_schema": wider})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["metadata_schema"], wider);

    // Incompatible or invalid schemas.
    for schema in [
        json!({"type": "object", "properties": {"year": {"type": "string"}, "team": {"type": "string"}, "lang": {"type": "string"}}}),
        json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}}}),
        json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}, "lang": {"type": "string"}}, "required": ["year"]}),
        json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}, "lang": {"type": "string"}, "tags": {"type": "array"}}}),
    ] {
        let reply = app
            .patch(&path, &json!({"metadata_schema": schema.clone()}))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{schema}: {}",
            reply.text
        );
        assert_schema_error(&reply);
    }
    let reply = app.get(&path).await;
    assert_eq!(
        reply.body["metadata_schema"], wider,
        "refused schemas are not stored"
    );

    // Embedding model, full-text search and classifications are not changed here.
    let other = app.create_hash_model("other-model", 16).await;
    let before = app.get(&path).await.body;
    let reply = app
        .patch(
            &path,
            &json!({
                "embedding_model_id": other["id"],
                "default_vector_embedding_id": uuid::Uuid::new_v4(),
                "has_full_text_search": true,
                "classifications": ["x"],
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    for field in [
        "default_vector_embedding_id",
        "embedding_models",
        "has_full_text_search",
        "name",
        "metadata_schema",
    ] {
        assert_eq!(reply.body[field], before[field], "{field} changed");
    }
    let classes = app.get(&format!("{path}/classifications")).await;
    assert_eq!(
        classes.body["classifications"],
        json!(["internal", "public"])
    );

    // Errors.
    let reply = app.patch(&path, &json!({"name": ""})).await;
    assert_invalid_parameter(&reply, "Invalid name");
    app.new_pipeline(json!({"name": "taken"})).await;
    let reply = app.patch(&path, &json!({"name": "taken"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .patch(&path, &json!({"default_text_splitter_id": missing}))
        .await;
    assert_not_found_with_id(&reply, "Text Splitter not found", &missing);
    let reply = app
        .patch(&format!("/pipelines/{missing}"), &json!({"name": "x"}))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    let reader = app.create_key(json!({"pipelines": 5}), json!(["*"])).await;
    let reply = app
        .as_key(&reader)
        .patch(&path, &json!({"name": "mine"}))
        .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &id);
    assert_eq!(app.get(&path).await.body["name"], "after");
}

#[tokio::test]
async fn delete_removes_the_pipeline_and_everything_in_it() {
    let app = spawn_app_without_worker().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let id = str_of(&pipeline, "id").to_owned();
    let ve = uuid_of(&pipeline, "default_vector_embedding_id");
    let keep = app.new_pipeline_id(json!({})).await;
    app.submit_text(&id, "a", &"alpha text. ".repeat(200)).await;
    app.submit_text(&id, "b", "beta text").await;
    app.submit_text(&keep, "c", "kept text").await;
    let index = app
        .post(
            &format!("/pipelines/{id}/indexes"),
            &json!({"field": "year"}),
        )
        .await;
    assert_eq!(index.status, StatusCode::CREATED, "{}", index.text);
    let index_name = format!("pidx_{}", uuid_of(&index.body, "id").simple());
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 3, "{outcome:?}");
    let key = app.create_key(json!({}), json!([])).await;
    app.grant(
        &key.0,
        json!([{"object_type": "pipelines", "object_id": id, "permission": 4}]),
    )
    .await;

    let vector_table = format!("vectors_{}", ve.simple());
    let table_exists = |name: String| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
                .bind(name)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert!(
        app.count("SELECT count(*) FROM fragments WHERE pipeline_id = $1", &id)
            .await
            > 0
    );
    assert!(table_exists(vector_table.clone()).await);
    assert!(table_exists(index_name.clone()).await);

    // Without write: as if missing.
    let reply = app.as_key(&key).delete(&format!("/pipelines/{id}")).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &id);

    let reply = app.delete(&format!("/pipelines/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    let reply = app.get(&format!("/pipelines/{id}")).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &id);
    let reply = app.delete(&format!("/pipelines/{id}")).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &id);

    for sql in [
        "SELECT count(*) FROM documents WHERE pipeline_id = $1",
        "SELECT count(*) FROM fragments WHERE pipeline_id = $1",
        "SELECT count(*) FROM classifications WHERE pipeline_id = $1",
        "SELECT count(*) FROM pipeline_indexes WHERE pipeline_id = $1",
        "SELECT count(*) FROM vector_embeddings WHERE pipeline_id = $1",
        "SELECT count(*) FROM permissions WHERE object_id = $1",
    ] {
        assert_eq!(app.count(sql, &id).await, 0, "{sql}");
    }
    assert!(!table_exists(vector_table).await, "vector table dropped");
    assert!(!table_exists(index_name).await, "metadata index dropped");
    let texts: i64 = sqlx::query_scalar("SELECT count(*) FROM document_texts")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(texts, 0);

    // The other pipeline is untouched.
    assert_eq!(
        app.count(
            "SELECT count(*) FROM documents WHERE pipeline_id = $1",
            &keep
        )
        .await,
        1
    );
    assert!(
        app.count(
            "SELECT count(*) FROM fragments WHERE pipeline_id = $1",
            &keep
        )
        .await
            > 0
    );
    let reply = app.get("/pipelines").await;
    assert_eq!(data_of(&reply).len(), 1);
}

#[tokio::test]
async fn classifications_are_read_and_replaced_with_allow_list_star() {
    let app = spawn_app().await;
    let id = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{id}/classifications");
    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), ["classifications", "hierarchy"]);
    let mut names: Vec<String> =
        serde_json::from_value(reply.body["classifications"].clone()).unwrap();
    names.sort();
    assert_eq!(names, ["internal", "public"]);
    assert_eq!(reply.body["hierarchy"], json!([["internal", "public"]]));

    let reply = app
        .post(
            &path,
            &json!({"classifications": ["public", "internal", "secret"], "hierarchy": [["secret", "internal"], ["internal", "public"]]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(reply.text.is_empty(), "empty body: {:?}", reply.text);
    let reply = app.get(&path).await;
    let mut names: Vec<String> =
        serde_json::from_value(reply.body["classifications"].clone()).unwrap();
    names.sort();
    assert_eq!(names, ["internal", "public", "secret"]);
    let mut pairs: Vec<(String, String)> =
        serde_json::from_value(reply.body["hierarchy"].clone()).unwrap();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            ("internal".to_owned(), "public".to_owned()),
            ("secret".to_owned(), "internal".to_owned())
        ]
    );

    // Hierarchy defaults to [] and the whole set is replaced.
    let reply = app
        .post(&path, &json!({"classifications": ["public", "internal"]}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.get(&path).await;
    assert_eq!(reply.body["hierarchy"], json!([]));
    assert_eq!(reply.body["classifications"].as_array().unwrap().len(), 2);

    // Validated as at create; nothing changes on error.
    for (body, error) in [
        (
            json!({"classifications": []}),
            "At least one classification is required",
        ),
        (
            json!({"classifications": ["*"]}),
            "Invalid classification: *",
        ),
        (
            json!({"classifications": ["public", "public"]}),
            "Invalid classification: public",
        ),
        (
            json!({"classifications": ["public"], "hierarchy": [["public", "x"]]}),
            "Unknown classification in hierarchy: x",
        ),
        (
            json!({"classifications": ["public", "internal"], "hierarchy": [["public", "internal"], ["internal", "public"]]}),
            "Classification hierarchy contains a cycle",
        ),
    ] {
        let reply = app.post(&path, &body).await;
        assert_invalid_parameter(&reply, error);
    }
    assert_eq!(
        app.get(&path).await.body["classifications"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Unknown pipeline.
    let missing = uuid::Uuid::new_v4().to_string();
    let reply = app
        .get(&format!("/pipelines/{missing}/classifications"))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reply = app
        .post(
            &format!("/pipelines/{missing}/classifications"),
            &json!({"classifications": ["a"]}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
}

#[tokio::test]
async fn classification_management_needs_allow_list_star() {
    let app = spawn_app().await;
    let id = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{id}/classifications");
    let body = json!({"classifications": ["public", "internal", "extra"]});

    let limited = app
        .create_key(json!({"pipelines": 7}), json!(["public"]))
        .await;
    let reply = app.as_key(&limited).get(&path).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &format!(
            "Unauthorized: access level AccessLevel(READ) required for pipelines with id Some({id})"
        ),
    );
    let reply = app.as_key(&limited).post(&path, &body).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &format!(
            "Unauthorized: access level AccessLevel(WRITE) required for pipelines with id Some({id})"
        ),
    );

    // Without read (GET) or write (POST) the pipeline is "not found", even with `*`.
    let none = app.create_key(json!({}), json!(["*"])).await;
    let reply = app.as_key(&none).get(&path).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reader = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let reply = app.as_key(&reader).get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.as_key(&reader).post(&path, &body).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");

    let writer = app.create_key(json!({"pipelines": 6}), json!(["*"])).await;
    let reply = app.as_key(&writer).post(&path, &body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        app.get(&path).await.body["classifications"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn removing_a_classification_carried_by_a_stored_version_conflicts() {
    let app = spawn_app_without_worker().await;
    let id = app.new_pipeline_id(json!({})).await;
    let path = format!("/pipelines/{id}/classifications");
    let doc = app
        .submit(
            &id,
            &json!({"external_identifier": "secret-plan", "classification": "internal", "text": "plan"}),
        )
        .await;
    assert_eq!(doc.status, StatusCode::CREATED, "{}", doc.text);
    let doc_id = str_of(&doc.body, "id").to_owned();

    let only_public = json!({"classifications": ["public"]});
    let reply = app.post(&path, &only_public).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");

    // Still a conflict once the version is processed and then expired.
    app.step().await;
    let reply = app
        .delete(&format!("/pipelines/{id}/documents/{doc_id}?expire=true"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.post(&path, &only_public).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    let reply = app.get(&path).await;
    assert_eq!(reply.body["classifications"].as_array().unwrap().len(), 2);

    // Unused classifications can go; after a permanent delete the used one can too.
    let reply = app
        .post(
            &path,
            &json!({"classifications": ["public", "internal", "spare"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app
        .post(&path, &json!({"classifications": ["public", "internal"]}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app
        .delete(&format!("/pipelines/{id}/documents/{doc_id}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = app.post(&path, &only_public).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        app.get(&path).await.body["classifications"],
        json!(["public"])
    );
}

/// A schema declaring `year`, `team`, `score`, `draft` and the object `author`.
fn four_fields_and_an_object() -> Value {
    json!({"type": "object", "properties": {
        "year": {"type": "integer"},
        "team": {"type": "string"},
        "score": {"type": ["number", "null"]},
        "draft": {"type": "boolean"},
        "author": {"type": "object", "properties": {"name": {"type": "string"}}},
    }})
}

/// The definitions of Trove's indexes on declared fields (`mfidx_…` on `fragments`), sorted.
async fn declared_index_definitions(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes
         WHERE tablename = 'fragments' AND starts_with(indexname, 'mfidx_') ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The fields that Trove's indexes on declared fields cover, read from the indexes'
/// definitions, sorted; each index is partial, over the pipeline id and the field's typed
/// expression.
async fn declared_field_indexes(app: &TestApp) -> Vec<String> {
    let definitions = declared_index_definitions(&app.pool).await;
    let mut fields: Vec<String> = definitions
        .iter()
        .map(|definition| {
            assert!(
                definition.contains("(pipeline_id, ") && definition.contains("IS NOT NULL"),
                "{definition}"
            );
            let field = definition
                .split(['\'', '"'])
                .find(|part| {
                    !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
                .unwrap_or_else(|| panic!("{definition}"));
            field.to_owned()
        })
        .collect();
    fields.sort();
    fields
}

/// Trove indexes every declared top-level field that is not an object, one index per field
/// and type shared by the pipelines declaring it so, unless the schema says
/// `"x-trove-index": false` (on the property, else at the top); schema changes and deletes keep
/// the indexes in step, and an annotation that is not a boolean is a schema error.
#[tokio::test]
async fn declared_fields_are_indexed_unless_the_schema_says_otherwise() {
    let app = spawn_app().await;
    let schema = four_fields_and_an_object();
    let first = app
        .new_pipeline_id(json!({"metadata_schema": schema}))
        .await;
    assert_eq!(
        declared_field_indexes(&app).await,
        ["draft", "score", "team", "year"]
    );
    // `team` again (shared), `rank` not indexed by its property's word, `level` by the schema's.
    let second = app
        .new_pipeline_id(
            json!({"metadata_schema": {"type": "object", "x-trove-index": false,
            "properties": {
                "team": {"type": "string", "x-trove-index": true},
                "rank": {"type": "integer", "x-trove-index": false},
                "level": {"type": "integer"},
            }}}),
        )
        .await;
    assert_eq!(
        declared_field_indexes(&app).await,
        ["draft", "score", "team", "year"]
    );

    // The first pipeline's fields unindexed, but `year`: `team` stays for the second.
    let mut changed = schema.clone();
    changed["x-trove-index"] = json!(false);
    changed["properties"]["year"]["x-trove-index"] = json!(true);
    let reply = app
        .patch(
            &format!("/pipelines/{first}"),
            &json!({"metadata_schema": changed}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["metadata_schema"], changed);
    assert_eq!(declared_field_indexes(&app).await, ["team", "year"]);

    for bad in [json!("no"), json!(1), json!(null), json!({})] {
        let mut refused = changed.clone();
        refused["x-trove-index"] = bad.clone();
        let reply = app
            .patch(
                &format!("/pipelines/{first}"),
                &json!({"metadata_schema": refused}),
            )
            .await;
        assert_schema_error(&reply);
        let mut refused = schema.clone();
        refused["properties"]["team"]["x-trove-index"] = bad;
        let body = app
            .pipeline_body(json!({"name": "refused", "metadata_schema": refused}))
            .await;
        assert_schema_error(&app.post("/pipelines", &body).await);
    }
    assert_eq!(declared_field_indexes(&app).await, ["team", "year"]);

    let reply = app.delete(&format!("/pipelines/{second}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(declared_field_indexes(&app).await, ["year"]);
    let reply = app.delete(&format!("/pipelines/{first}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(declared_field_indexes(&app).await.is_empty());
}

#[tokio::test]
async fn metadata_indexes_are_created_listed_and_deleted() {
    let app = spawn_app().await;
    let schema = four_fields_and_an_object();
    let id = app
        .new_pipeline_id(json!({"metadata_schema": schema}))
        .await;
    let path = format!("/pipelines/{id}/indexes");

    let reply = app.post(&path, &json!({"field": "year"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(
        keys_of(&reply.body),
        ["created_at", "field", "id", "pipeline_id"]
    );
    assert!(is_uuid(str_of(&reply.body, "id")));
    assert_eq!(reply.body["pipeline_id"], json!(id));
    assert_eq!(reply.body["field"], "year");
    assert_utc_timestamp(&reply.body["created_at"]);
    let year = reply.body.clone();
    let mut created = vec![year.clone()];
    for field in ["team", "score", "draft"] {
        let reply = app.post(&path, &json!({"field": field})).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{field}: {}", reply.text);
        created.push(reply.body);
    }

    for field in ["undeclared", "author", "author.name", ""] {
        let reply = app.post(&path, &json!({"field": field})).await;
        assert_invalid_parameter(&reply, field);
    }
    let reply = app.post(&path, &json!({"field": "year"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");

    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(data_of(&reply).len(), 4);
    assert!(reply.body.get("page_info").is_some() && reply.body.get("query_info").is_some());
    let reply = app.get(&format!("{path}?field=team")).await;
    assert_eq!(data_of(&reply).len(), 1);
    assert_eq!(data_of(&reply)[0], created[1]);
    let year_id = str_of(&year, "id").to_owned();
    let reply = app.get(&format!("{path}?id={year_id}")).await;
    assert_eq!(data_of(&reply).len(), 1);
    assert_eq!(data_of(&reply)[0], year);
    let reply = app.get(&format!("{path}?order_by=field")).await;
    let fields: Vec<&str> = data_of(&reply).iter().map(|i| str_of(i, "field")).collect();
    assert_eq!(fields, ["draft", "score", "team", "year"]);

    // The database index exists until the delete.
    let index_exists = |name: String| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = $1)",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let name = format!("pidx_{}", uuid_of(&year, "id").simple());
    assert!(index_exists(name.clone()).await);
    let reply = app.delete(&format!("{path}/{year_id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(!index_exists(name).await);
    let reply = app.delete(&format!("{path}/{year_id}")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline Index not found");
    let reply = app
        .delete(&format!("{path}/{}", uuid::Uuid::new_v4()))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline Index not found");
    assert_eq!(data_of(&app.get(&path).await).len(), 3);
    // Deleted, it can be created again.
    let reply = app.post(&path, &json!({"field": "year"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);

    // Unknown pipeline; a key without write.
    let missing = uuid::Uuid::new_v4();
    let reply = app
        .post(
            &format!("/pipelines/{missing}/indexes"),
            &json!({"field": "year"}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reply = app.get(&format!("/pipelines/{missing}/indexes")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reader = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let reply = app
        .as_key(&reader)
        .post(&path, &json!({"field": "team"}))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
    let reply = app.as_key(&reader).get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn a_metadata_index_is_used_by_the_planner() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let index_name = create_index(&app, &pid, "year").await;

    const DOCUMENTS: usize = 200;
    for chunk in (0..DOCUMENTS).collect::<Vec<_>>().chunks(20) {
        let requests = chunk.iter().map(|i| {
            let app = &app;
            let pid = &pid;
            async move {
                app.submit(
                    pid,
                    &json!({
                        "external_identifier": format!("doc-{i}"),
                        "classification": "public",
                        "metadata": {"year": 2000 + (i % 25), "team": "t"},
                        "text": format!("document number {i}"),
                    }),
                )
                .await
            }
        });
        for reply in futures_util::future::join_all(requests).await {
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        }
    }
    let worker = app.worker().await;
    let mut stored = 0;
    for _ in 0..10 {
        let outcome = worker
            .step(std::time::Duration::from_millis(300))
            .await
            .unwrap();
        stored += outcome.stored;
        if stored >= DOCUMENTS {
            break;
        }
    }
    assert_eq!(stored, DOCUMENTS);

    // The statement the service runs binds the pipeline id and the value: the index must
    // serve it under a custom plan (values known) and under a generic plan (values unknown,
    // as for a prepared statement after its fifth execution).
    let sql = filtered_fragment_ids(&pid, json!({"year": {"$eq": 2020}}));
    let mut conn = app.pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    for explain in [
        "EXPLAIN (FORMAT JSON)",
        "EXPLAIN (GENERIC_PLAN, FORMAT JSON)",
    ] {
        let statement = if explain.contains("GENERIC_PLAN") {
            sql.generic.clone()
        } else {
            sql.custom.clone()
        };
        // The simple protocol: a generic plan's placeholders stay unbound.
        let row = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{explain} {statement}")))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let plan: Value = sqlx::Row::get(&row, 0);
        let plan = plan.to_string();
        assert!(
            plan.contains(&index_name),
            "{explain}: the plan does not use {index_name}: {plan}"
        );
    }
    sqlx::query("RESET enable_seqscan")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// `SELECT id FROM fragments` of a pipeline under a metadata filter compiled as the service
/// compiles it: with `$n` placeholders (`generic`) and with the values in line (`custom`).
struct FilteredStatement {
    generic: String,
    custom: String,
}

fn filtered_fragment_ids(pid: &str, filter: Value) -> FilteredStatement {
    use sea_query::{Alias, Expr, ExprTrait, PostgresQueryBuilder, Query};
    let schema = json!({"type": "object", "properties": {"year": {"type": "integer"}, "team": {"type": "string"}}});
    let filter: trove_query::filter::Filter = serde_json::from_value(filter).unwrap();
    let typed = trove_query::filter::validate(&filter, &schema).unwrap();
    let condition = trove_query::filter::compile(
        &typed,
        "fragments",
        &trove_query::filter::TeqExpansions::new(),
    );
    let fragments = Alias::new("fragments");
    let mut select = Query::select();
    select
        .column((fragments.clone(), Alias::new("id")))
        .from(fragments.clone())
        .and_where(
            Expr::col((fragments, Alias::new("pipeline_id")))
                .eq(uuid::Uuid::parse_str(pid).unwrap()),
        )
        .cond_where(condition);
    FilteredStatement {
        generic: select.build(PostgresQueryBuilder).0,
        custom: select.to_string(PostgresQueryBuilder),
    }
}

/// Migration 5 rebuilds partial metadata indexes whose predicate is the pipeline id on
/// (pipeline_id, expression).
#[tokio::test]
async fn migration_5_rebuilds_partial_metadata_indexes_with_the_pipeline_id_as_a_key() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let legacy = "pidx_00000000000000000000000000000005";
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE INDEX {legacy} ON fragments (((metadata ->> 'year')::bigint)) WHERE pipeline_id = '{pid}'"
    )))
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM _trove_migrations WHERE version = 5")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    assert_eq!(
        index_definition(&app.pool, legacy).await,
        format!(
            "CREATE INDEX {legacy} ON public.fragments USING btree (pipeline_id, (((metadata ->> 'year'::text))::bigint))"
        )
    );
}

/// A metadata index belongs to its pipeline: other pipelines may store anything under the same
/// field name (here a string where the indexed pipeline declares an integer), before and after
/// the index is made, and their documents are still processed.
#[tokio::test]
async fn a_metadata_index_never_reads_other_pipelines_metadata() {
    let app = spawn_app_without_worker().await;
    let indexed = app.new_pipeline_id(json!({})).await;
    let other = app
        .new_pipeline_id(json!({
            "metadata_schema": {"type": "object", "properties": {"year": {"type": "string"}}}
        }))
        .await;
    let submit = |pid: String, name: &'static str, year: Value| {
        let app = &app;
        async move {
            let reply = app
                .submit(
                    &pid,
                    &json!({"external_identifier": name, "classification": "public",
                            "metadata": {"year": year}, "text": format!("text of {name}")}),
                )
                .await;
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
            str_of(&reply.body, "id").to_owned()
        }
    };
    let before = submit(other.clone(), "before", json!("nineteen eighty-four")).await;
    assert_eq!(app.step().await.stored, 1);

    create_index(&app, &indexed, "year").await;

    let after = submit(other.clone(), "after", json!("two thousand")).await;
    let own = submit(indexed.clone(), "own", json!(2001)).await;
    let outcome = app.step().await;
    assert_eq!((outcome.stored, outcome.failed), (2, 0), "{outcome:?}");
    for (pid, id) in [(&other, &before), (&other, &after), (&indexed, &own)] {
        let reply = app.get(&format!("/pipelines/{pid}/documents/{id}")).await;
        assert_eq!(reply.body[0]["status"], "success", "{}", reply.text);
    }
}

/// Rule 6: JSON Schema counts `2001.0` as an integer, so such a value is accepted and
/// processed (an index on the field included), but the database cannot read it as a 64-bit
/// integer: every filter on the field fails with the database's error while the version is
/// stored, in searches and in the document list; filters on other fields are unaffected, and
/// once the version is deleted the field filters again.
#[tokio::test]
async fn a_stored_integer_written_with_a_fraction_fails_filters_on_its_field_only() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    create_index(&app, &pid, "year").await;
    let mut ids = Vec::new();
    for (name, year) in [("float", json!(2001.0)), ("integer", json!(2002))] {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": name, "classification": "public",
                        "metadata": {"year": year, "team": name}, "text": format!("the {name} year")}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        ids.push(str_of(&reply.body, "id").to_owned());
    }
    let outcome = app.step().await;
    assert_eq!((outcome.stored, outcome.failed), (2, 0), "{outcome:?}");

    let encoded =
        |filter: &str| -> String { filter.bytes().map(|b| format!("%{b:02X}")).collect() };
    let list = |filter: &str| {
        let path = format!("/pipelines/{pid}/documents?metadata={}", encoded(filter));
        let app = &app;
        async move { app.get(&path).await }
    };
    let search = |filters: Value| {
        let app = &app;
        let pid = &pid;
        async move {
            app.post(
                &format!("/pipelines/{pid}/search"),
                &json!({"query": "year", "type": "similarity", "classification": "public",
                        "filters": filters}),
            )
            .await
        }
    };
    let refusal = r#"invalid input syntax for type bigint: "2001.0""#;
    for reply in [
        list(r#"{"year":{"$lt":2002}}"#).await,
        list(r#"{"$or":[{"team":{"$eq":"x"}},{"year":{"$in":[1]}}]}"#).await,
        search(json!({"year": {"$eq": 2002}})).await,
        search(json!({"$not": {"year": {"$gt": 0}}})).await,
    ] {
        assert_eq!(
            (reply.status, reply.message()),
            (StatusCode::INTERNAL_SERVER_ERROR, refusal),
            "{}",
            reply.text
        );
    }
    // Another field filters normally, in both.
    let by_team = list(r#"{"team":{"$eq":"float"}}"#).await;
    assert_eq!(by_team.status, StatusCode::OK, "{}", by_team.text);
    assert_eq!(by_team.body["data"].as_array().unwrap().len(), 1);
    let by_team = search(json!({"team": {"$eq": "integer"}})).await;
    assert_eq!(by_team.status, StatusCode::OK, "{}", by_team.text);
    assert_eq!(by_team.body.as_array().unwrap().len(), 1);

    // Once the version holding the value is gone, the field filters again.
    let deleted = app
        .delete(&format!("/pipelines/{pid}/documents/{}", ids[0]))
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    let reply = search(json!({"year": {"$eq": 2002}})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().unwrap().len(), 1);
    assert_eq!(reply.body[0]["metadata"]["year"], json!(2002));
    let reply = list(r#"{"year":{"$lt":2003}}"#).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"].as_array().unwrap().len(), 1);
}

/// Rule 6 holds for a filtered search remembered before such a value was stored: its next
/// run fails with the database's error, as a fresh one does.
#[tokio::test]
async fn a_remembered_filtered_search_fails_once_an_unconvertible_integer_is_stored() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let submit = |name: &'static str, year: Value| {
        let (app, pid) = (&app, &pid);
        async move {
            let reply = app
                .submit(
                    pid,
                    &json!({"external_identifier": name, "classification": "public",
                            "metadata": {"year": year, "team": name}, "text": format!("the {name} year")}),
                )
                .await;
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
            let outcome = app.step().await;
            assert_eq!((outcome.stored, outcome.failed), (1, 0), "{outcome:?}");
        }
    };
    let search = || {
        let (app, pid) = (&app, &pid);
        async move {
            app.post(
                &format!("/pipelines/{pid}/search"),
                &json!({"query": "year", "type": "similarity", "classification": "public",
                        "filters": {"year": {"$eq": 2002}}}),
            )
            .await
        }
    };
    submit("integer", json!(2002)).await;
    for _ in 0..2 {
        let reply = search().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body.as_array().unwrap().len(), 1);
    }
    let remembered = app.state.metrics.searches_remembered.get();
    assert_eq!(remembered, 1.0);
    // A record of the field alone (the vector count unchanged) closes the remembered search's
    // gate: the search is made afresh, and the stored value, which converts, passes.
    sqlx::query(
        "INSERT INTO metadata_unconvertible (pipeline_id, field, document_id, version)
         SELECT pipeline_id, 'year', id, version FROM documents WHERE pipeline_id = $1::uuid",
    )
    .bind(&pid)
    .execute(&app.pool)
    .await
    .unwrap();
    let reply = search().await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().unwrap().len(), 1);
    assert_eq!(app.state.metrics.searches_remembered.get(), remembered);
    sqlx::query("DELETE FROM metadata_unconvertible WHERE pipeline_id = $1::uuid")
        .bind(&pid)
        .execute(&app.pool)
        .await
        .unwrap();
    submit("float", json!(2001.0)).await;
    let reply = search().await;
    assert_eq!(
        (reply.status, reply.message()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"invalid input syntax for type bigint: "2001.0""#
        ),
        "{}",
        reply.text
    );
    assert_eq!(app.state.metrics.searches_remembered.get(), remembered);
}

/// Migration 7 rebuilds metadata indexes with the expressions the filter compiles to, and
/// records the stored integers written with a fraction.
#[tokio::test]
async fn migration_7_rebuilds_metadata_indexes_and_records_unconvertible_integers() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let name = create_index(&app, &pid, "year").await;
    let current = index_definition(&app.pool, &name).await;
    let submitted = app
        .submit(
            &pid,
            &json!({"external_identifier": "d", "classification": "public",
                    "metadata": {"year": 5.0}, "text": "t"}),
        )
        .await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);

    // The schema migration 7 starts from: indexes on the plain cast, nothing recorded.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP INDEX {name}; CREATE INDEX {name} ON fragments (pipeline_id, (((metadata ->> 'year'))::bigint)) WHERE pipeline_id IS NULL;
         DROP TABLE metadata_unconvertible; DELETE FROM _trove_migrations WHERE version = 7"
    )))
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    assert_eq!(index_definition(&app.pool, &name).await, current);
    let recorded: Vec<(String, uuid::Uuid)> =
        sqlx::query_as("SELECT field, document_id FROM metadata_unconvertible")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        recorded,
        [("year".to_owned(), uuid_of(&submitted.body, "id"))]
    );
}

/// Migration 12 creates, for existing pipelines, the indexes on declared fields that the service
/// keeps: the same names and definitions, the same fields left out.
#[tokio::test]
async fn migration_12_indexes_the_declared_fields_of_existing_pipelines() {
    let app = spawn_app_without_worker().await;
    app.new_pipeline_id(json!({"metadata_schema": {"type": "object", "properties": {
        "year": {"type": "integer"}, "team": {"type": ["string", "null"]},
        "draft": {"type": "boolean"}, "score": {"type": "number", "x-trove-index": false},
        "author": {"type": "object", "properties": {"name": {"type": "string"}}}}}}))
        .await;
    app.new_pipeline_id(json!({"metadata_schema": {"type": "object", "x-trove-index": false,
        "properties": {"rank": {"type": "integer"}, "level": {"type": "integer", "x-trove-index": true}}}}))
        .await;
    let kept = declared_index_definitions(&app.pool).await;
    assert_eq!(
        declared_field_indexes(&app).await,
        ["draft", "level", "team", "year"]
    );

    // The schema migration 12 starts from: no such index.
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE starts_with(indexname, 'mfidx_')",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    for name in names {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX {name}")))
            .execute(&app.pool)
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM _trove_migrations WHERE version = 12")
        .execute(&app.pool)
        .await
        .unwrap();
    assert!(declared_index_definitions(&app.pool).await.is_empty());
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    assert_eq!(declared_index_definitions(&app.pool).await, kept);
}

/// Every declared top-level field gets planner statistics on its typed expression (one object
/// per field and type, shared by pipelines): after ANALYZE, a filter on a field without a
/// metadata index is estimated from the data. Migration 8 creates the same objects for
/// pipelines made before it.
#[tokio::test]
async fn declared_fields_get_planner_statistics_also_through_migration_8() {
    let app = spawn_app_without_worker().await;
    let schema = json!({"type": "object", "properties": {
        "year": {"type": "integer"}, "team": {"type": ["string", "null"]},
        "draft": {"type": "boolean"}, "score": {"type": "number"},
        "author": {"type": "object", "properties": {"name": {"type": "string"}}}}});
    let pid = app
        .new_pipeline_id(json!({"metadata_schema": schema.clone()}))
        .await;
    // A second pipeline declaring the same fields shares the objects.
    app.new_pipeline_id(json!({"metadata_schema": schema}))
        .await;
    let objects = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT pg_get_statisticsobjdef_expressions(oid)::text FROM pg_statistic_ext
             WHERE stxname LIKE 'mstat\\_%' ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let created = objects(app.pool.clone()).await;
    // The seeded pipeline of the helpers declares year and team too; object fields have none.
    assert_eq!(created.len(), 4, "{created:?}");
    assert!(
        created.iter().any(|e| e.contains("JSON_VALUE(metadata")
            && e.contains("year")
            && e.contains("RETURNING numeric")),
        "{created:?}"
    );

    // 200 versions, 90 % of them with draft = true: an unindexed filter estimated from them.
    for i in 0..200 {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": format!("d{i}"), "classification": "public",
                        "metadata": {"draft": i % 10 != 0, "year": i}, "text": "t"}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let worker = app.worker().await;
    let mut stored = 0;
    while stored < 200 {
        let outcome = worker
            .step(std::time::Duration::from_millis(300))
            .await
            .unwrap();
        assert!(outcome.jobs > 0, "{outcome:?}");
        stored += outcome.stored;
    }
    sqlx::query("ANALYZE fragments")
        .execute(&app.pool)
        .await
        .unwrap();
    let filter: trove_query::filter::Filter =
        serde_json::from_value(json!({"draft": {"$eq": true}})).unwrap();
    let typed = trove_query::filter::validate(
        &filter,
        &json!({"type": "object", "properties": {"draft": {"type": "boolean"}}}),
    )
    .unwrap();
    let statement = sea_query::Query::select()
        .expr(sea_query::Expr::val(1))
        .from(sea_query::Alias::new("fragments"))
        .cond_where(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        ))
        .to_string(sea_query::PostgresQueryBuilder);
    let (plan,): (sqlx::types::Json<Value>,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) {statement}"
    )))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // Without the statistics the planner guesses 0.5 % of the rows (one).
    let estimated = plan.0[0]["Plan"]["Plan Rows"].as_f64().unwrap();
    assert!(
        (150.0..=200.0).contains(&estimated),
        "90 % of 200 fragments, estimated {estimated}"
    );

    // Dropped, then created again by migration 8 with the same names and expressions.
    let names = statistics_names(&app.pool).await;
    for name in &names {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP STATISTICS {name}")))
            .execute(&app.pool)
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM _trove_migrations WHERE version = 8")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        trove::store::migrations::migrate(&app.pool).await.unwrap(),
        1
    );
    assert_eq!(statistics_names(&app.pool).await, names);
    assert_eq!(objects(app.pool.clone()).await, created);
}

/// Creates a metadata index on `field` of pipeline `pid`; returns the database index's name.
async fn create_index(app: &TestApp, pid: &str, field: &str) -> String {
    let reply = app
        .post(
            &format!("/pipelines/{pid}/indexes"),
            &json!({"field": field}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    format!("pidx_{}", uuid_of(&reply.body, "id").simple())
}

/// A database index's definition (`pg_get_indexdef`).
async fn index_definition(pool: &sqlx::PgPool, name: &str) -> String {
    sqlx::query_scalar("SELECT pg_get_indexdef(c.oid) FROM pg_class AS c WHERE c.relname = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The names of the metadata field statistics objects, sorted.
async fn statistics_names(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT stxname::text FROM pg_statistic_ext WHERE stxname LIKE 'mstat\\_%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}
