//! Taxonomies and their entries.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid, assert_invalid_order_by,
    assert_plain, assert_utc_timestamp, is_uuid, key_of, key_set, names, spawn_app,
    spawn_app_with_license, write_denied,
};

fn assert_not_found(reply: &Reply, id: &str) {
    crate::helpers::assert_not_found(reply, "Taxonomy not found", id);
}

/// Creates a taxonomy with the master key; returns the 201 body.
async fn create(app: &TestApp, body: Value) -> Value {
    let reply = app.post("/taxonomies", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

/// Creates a taxonomy named `name`; returns its id.
async fn create_named(app: &TestApp, name: &str) -> String {
    create(app, json!({"name": name})).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// A link `{parent_field, parent_value, child_field, child_value}`.
fn link(parent_field: &str, parent_value: &str, child_field: &str, child_value: &str) -> Value {
    json!({
        "parent_field": parent_field,
        "parent_value": parent_value,
        "child_field": child_field,
        "child_value": child_value,
    })
}

/// The four link fields of an entry object.
fn link_of(entry: &Value) -> Value {
    link(
        entry["parent_field"].as_str().expect("parent_field"),
        entry["parent_value"].as_str().expect("parent_value"),
        entry["child_field"].as_str().expect("child_field"),
        entry["child_value"].as_str().expect("child_value"),
    )
}

/// A skipped entry: the link and its holder.
fn skipped(link: &Value, holder: &str) -> Value {
    let mut object = link.clone();
    object["taxonomy_id"] = json!(holder);
    object
}

/// `POST /taxonomies/{id}/entries` with the master key, expecting 200.
async fn add(app: &TestApp, id: &str, entries: Value) -> Value {
    let reply = app
        .post(
            &format!("/taxonomies/{id}/entries"),
            &json!({"entries": entries}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body
}

/// `DELETE /taxonomies/{id}/entries` with a JSON body and the master key.
async fn remove(app: &TestApp, id: &str, entries: Value) -> Reply {
    app.req(Method::DELETE, &format!("/taxonomies/{id}/entries"))
        .as_master()
        .json(&json!({"entries": entries}))
        .send()
        .await
}

/// The links a taxonomy lists (default order).
async fn listed_links(app: &TestApp, id: &str) -> Vec<Value> {
    let reply = app
        .get(&format!("/taxonomies/{id}/entries?first=100"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(link_of)
        .collect()
}

/// Rows of `taxonomy_entries` held by a taxonomy.
async fn stored_count(app: &TestApp, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM taxonomy_entries WHERE taxonomy_id = $1")
        .bind(Uuid::parse_str(id).expect("uuid"))
        .fetch_one(&app.pool)
        .await
        .expect("count entries")
}

// ---- Taxonomies --------------------------------------------------------------------------

#[tokio::test]
async fn create_get_update_delete() {
    let app = spawn_app().await;
    let created = create(&app, json!({"name": "regions"})).await;
    assert_eq!(
        key_set(&created),
        BTreeSet::from(["id", "name", "description", "created_at", "updated_at"])
    );
    assert!(is_uuid(created["id"].as_str().expect("id")));
    assert_eq!(created["name"], "regions");
    assert_eq!(created["description"], Value::Null);
    let created_at = assert_utc_timestamp(&created["created_at"]);
    assert_eq!(assert_utc_timestamp(&created["updated_at"]), created_at);
    let id = created["id"].as_str().expect("id").to_owned();
    let path = format!("/taxonomies/{id}");

    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, created);

    // Unknown body fields are ignored; an explicit null description is null.
    let other = create(
        &app,
        json!({"name": "products", "description": null, "id": Uuid::new_v4(), "extra": 1}),
    )
    .await;
    assert_eq!(other["description"], Value::Null);
    assert!(other.get("extra").is_none());
    let with_description = create(&app, json!({"name": "teams", "description": "org chart"})).await;
    assert_eq!(with_description["description"], "org chart");

    // PATCH: listed fields only, omitted ones kept.
    let reply = app.patch(&path, &json!({"description": "geography"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "regions");
    assert_eq!(reply.body["description"], "geography");
    assert_eq!(reply.body["created_at"], created["created_at"]);
    assert!(assert_utc_timestamp(&reply.body["updated_at"]) > created_at);
    let reply = app.patch(&path, &json!({"name": "areas"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "areas");
    assert_eq!(reply.body["description"], "geography");
    // `{}` is valid; null name counts as omitted; null description clears it.
    let reply = app.patch(&path, &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "areas");
    let reply = app
        .patch(&path, &json!({"name": null, "description": null}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "areas");
    assert_eq!(reply.body["description"], Value::Null);
    let updated = reply.body;
    let reply = app.get(&path).await;
    assert_eq!(reply.body, updated);
    // Renaming to its own name is fine.
    let reply = app.patch(&path, &json!({"name": "areas"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);

    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    assert_not_found(&app.get(&path).await, &id);
    assert_not_found(&app.delete(&path).await, &id);
}

#[tokio::test]
async fn create_and_update_errors() {
    let app = spawn_app().await;
    for name in [String::new(), "x".repeat(256)] {
        let reply = app.post("/taxonomies", &json!({"name": name})).await;
        assert_invalid(&reply, "Invalid name");
    }
    // 255 characters (not bytes) is fine.
    create(&app, json!({"name": "é".repeat(255)})).await;

    let id = create_named(&app, "first").await;
    create_named(&app, "second").await;
    let reply = app.post("/taxonomies", &json!({"name": "first"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");

    let path = format!("/taxonomies/{id}");
    let reply = app.patch(&path, &json!({"name": "second"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app.patch(&path, &json!({"name": ""})).await;
    assert_invalid(&reply, "Invalid name");
    let reply = app.get(&path).await;
    assert_eq!(reply.body["name"], "first");

    // Body types: 422.
    for body in [
        json!({}),
        json!({"name": 1}),
        json!({"name": "a", "description": 3}),
        json!([]),
    ] {
        let reply = app.post("/taxonomies", &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type: ",
        );
    }
    let reply = app.patch(&path, &json!({"description": false})).await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type: ",
    );
    // Content type and JSON syntax.
    let reply = app
        .req(Method::POST, "/taxonomies")
        .as_master()
        .body("{}")
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Expected request with Content-Type: application/json",
    );
    let reply = app
        .req(Method::POST, "/taxonomies")
        .as_master()
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON: ",
    );

    let reply = app.get("/taxonomies?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 3, "{}", reply.text);
}

#[tokio::test]
async fn taxonomy_list_filters_and_ordering() {
    let app = spawn_app().await;
    let empty = app.get("/taxonomies").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(empty.body["data"], json!([]));
    assert_eq!(empty.body["page_info"]["has_next"], false);

    let alpha = create(&app, json!({"name": "alpha", "description": "for places"})).await;
    let alphabet = create(
        &app,
        json!({"name": "alphabet", "description": "for letters"}),
    )
    .await;
    let beta = create(&app, json!({"name": "beta"})).await;
    let query = |q: &'static str| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/taxonomies?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.text);
            reply.body
        }
    };

    let body = query("name=alpha").await;
    assert_eq!(names(&body), ["alpha"]);
    assert_eq!(body["query_info"], json!({"name": "alpha"}));
    assert_eq!(body["data"][0], alpha);
    assert_eq!(
        names(&query("name$startswith=alpha&order_by=name").await),
        ["alpha", "alphabet"]
    );
    let body = query("name$contains=ph&name$contains=bet").await;
    assert_eq!(names(&body), ["alphabet"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["ph", "bet"]}));
    assert_eq!(names(&query("name$gt=alphabet").await), ["beta"]);
    assert_eq!(
        names(&query("name$le=alphabet&order_by=-name").await),
        ["alphabet", "alpha"]
    );
    assert_eq!(names(&query("description=for%20places").await), ["alpha"]);
    assert_eq!(
        names(&query("description$contains=letters").await),
        ["alphabet"]
    );
    let beta_id = beta["id"].as_str().expect("id");
    let reply = app.get(&format!("/taxonomies?id={beta_id}")).await;
    assert_eq!(names(&reply.body), ["beta"]);
    let created_at = beta["created_at"].as_str().expect("created_at");
    let reply = app
        .get(&format!(
            "/taxonomies?created_at$ge={created_at}&updated_at$ge={created_at}"
        ))
        .await;
    assert_eq!(names(&reply.body), ["beta"]);
    let reply = app
        .get(&format!(
            "/taxonomies?created_at$lt={created_at}&order_by=created_at"
        ))
        .await;
    assert_eq!(names(&reply.body), ["alpha", "alphabet"]);
    // Unknown parameters are ignored.
    assert_eq!(names(&query("name=beta&colour=red").await), ["beta"]);

    let body = query("order_by=-name").await;
    assert_eq!(names(&body), ["beta", "alphabet", "alpha"]);
    assert_eq!(body["page_info"]["order_by"], json!(["-name"]));
    let body = query("order_by=-updated_at&order_by=id").await;
    assert_eq!(names(&body), ["beta", "alphabet", "alpha"]);
    let reply = app
        .get("/taxonomies?order_by=description&order_by=entries")
        .await;
    assert_invalid_order_by(&reply, json!(["description", "entries"]));

    // Cursor pagination.
    let first = query("first=2&order_by=name&count=true").await;
    assert_eq!(names(&first), ["alpha", "alphabet"]);
    assert_eq!(first["page_info"]["has_next"], true);
    assert_eq!(first["page_info"]["count"], 3);
    let after = first["page_info"]["after"].as_str().expect("after");
    let reply = app
        .get(&format!("/taxonomies?first=2&order_by=name&after={after}"))
        .await;
    assert_eq!(names(&reply.body), ["beta"]);
    assert_eq!(reply.body["page_info"]["has_next"], false);
    assert_eq!(reply.body["page_info"]["has_prev"], true);
    // Offset pagination.
    let body = query("limit=1&offset=1&order_by=name").await;
    assert_eq!(names(&body), ["alphabet"]);
    assert_eq!(body["data"][0], alphabet);
    let reply = app.get("/taxonomies?first=1&offset=1").await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
}

// ---- Entries -----------------------------------------------------------------------------

#[tokio::test]
async fn entries_are_added_and_listed() {
    let app = spawn_app().await;
    let id = create_named(&app, "geo").await;
    let europe_france = link("region", "europe", "country", "france");
    let france_paris = link("country", "france", "city", "paris");
    let france_lyon = link("country", "france", "city", "lyon");
    let body = add(&app, &id, json!([europe_france, france_paris, france_lyon])).await;
    assert_eq!(key_set(&body), BTreeSet::from(["added", "skipped"]));
    assert_eq!(body["skipped"], json!([]));
    let added = body["added"].as_array().expect("added");
    assert_eq!(added.len(), 3);
    for (entry, expected) in added
        .iter()
        .zip([&europe_france, &france_paris, &france_lyon])
    {
        assert_eq!(
            key_set(entry),
            BTreeSet::from([
                "id",
                "parent_field",
                "parent_value",
                "child_field",
                "child_value",
                "created_at"
            ])
        );
        assert!(is_uuid(entry["id"].as_str().expect("id")));
        assert_utc_timestamp(&entry["created_at"]);
        assert_eq!(&link_of(entry), expected);
    }
    assert_eq!(stored_count(&app, &id).await, 3);

    // The list shows the same objects; default order `id`.
    let reply = app.get(&format!("/taxonomies/{id}/entries")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut by_id = added.clone();
    by_id.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    assert_eq!(reply.body["data"], json!(by_id));
    assert_eq!(reply.body["page_info"]["has_next"], false);
    assert_eq!(reply.body["query_info"], json!({}));

    // An empty batch changes nothing.
    let body = add(&app, &id, json!([])).await;
    assert_eq!(body, json!({"added": [], "skipped": []}));

    // Cycles are allowed.
    let body = add(
        &app,
        &id,
        json!([link("city", "paris", "region", "europe")]),
    )
    .await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
    // The reverse of a stored link is another link.
    let body = add(
        &app,
        &id,
        json!([link("country", "france", "region", "europe")]),
    )
    .await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
    // Values are case-sensitive: another link.
    let body = add(
        &app,
        &id,
        json!([link("region", "Europe", "country", "france")]),
    )
    .await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
    assert_eq!(stored_count(&app, &id).await, 6);
}

#[tokio::test]
async fn repeats_duplicates_and_links_of_other_taxonomies_are_skipped() {
    let app = spawn_app().await;
    let first = create_named(&app, "first").await;
    let second = create_named(&app, "second").await;
    let a = link("region", "europe", "country", "france");
    let b = link("country", "france", "city", "paris");
    let c = link("country", "italy", "city", "rome");
    let d = link("category", "fruit", "category", "apple");

    let body = add(&app, &first, json!([a, b])).await;
    assert_eq!(body["added"].as_array().expect("added").len(), 2);
    let stored_a = body["added"][0].clone();

    // A repeat in the same taxonomy: skipped with this taxonomy's id.
    let body = add(&app, &first, json!([a])).await;
    assert_eq!(body, json!({"added": [], "skipped": [skipped(&a, &first)]}));

    // A duplicate inside one request: the first is added, the second skipped with this id.
    let body = add(&app, &first, json!([c, c])).await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
    assert_eq!(link_of(&body["added"][0]), c);
    assert_eq!(body["skipped"], json!([skipped(&c, &first)]));

    // A link held by another taxonomy: skipped with the holder's id, not stored twice. Both
    // lists keep the request order.
    let body = add(&app, &second, json!([b, d, a, d, a])).await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
    assert_eq!(link_of(&body["added"][0]), d);
    assert_eq!(
        body["skipped"],
        json!([
            skipped(&b, &first),
            skipped(&a, &first),
            skipped(&d, &second),
            skipped(&a, &first)
        ])
    );
    assert_eq!(stored_count(&app, &first).await, 3);
    assert_eq!(stored_count(&app, &second).await, 1);
    assert_eq!(listed_links(&app, &second).await, std::slice::from_ref(&d));

    // The stored entry did not change.
    let reply = app
        .get(&format!(
            "/taxonomies/{first}/entries?parent_field=region&parent_value=europe"
        ))
        .await;
    assert_eq!(reply.body["data"], json!([stored_a]));

    // Once the holder drops a link, another taxonomy can take it.
    let reply = remove(&app, &first, json!([a])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let body = add(&app, &second, json!([a])).await;
    assert_eq!(link_of(&body["added"][0]), a);
    assert_eq!(body["skipped"], json!([]));
    let body = add(&app, &first, json!([a])).await;
    assert_eq!(body["skipped"], json!([skipped(&a, &second)]));
}

#[tokio::test]
async fn invalid_entries_reject_the_whole_batch() {
    let app = spawn_app().await;
    let id = create_named(&app, "strict").await;
    let valid = link("region", "europe", "country", "france");
    let cases = [
        (
            link("1region", "europe", "country", "france"),
            "Invalid taxonomy entry: parent_field \"1region\" is not an identifier",
        ),
        (
            link("region", "europe", "country-code", "fr"),
            "Invalid taxonomy entry: child_field \"country-code\" is not an identifier",
        ),
        (
            link("", "europe", "country", "france"),
            "Invalid taxonomy entry: parent_field \"\" is not an identifier",
        ),
        (
            link("region", "", "country", "france"),
            "Invalid taxonomy entry: parent_value is empty",
        ),
        (
            link("region", "europe", "country", ""),
            "Invalid taxonomy entry: child_value is empty",
        ),
        (
            link("region", "europe", "region", "europe"),
            "Invalid taxonomy entry: parent and child are the same (region = \"europe\")",
        ),
    ];
    for (bad, reason) in cases {
        // The valid link first: nothing is written when a later one is invalid.
        let reply = app
            .post(
                &format!("/taxonomies/{id}/entries"),
                &json!({"entries": [valid, bad]}),
            )
            .await;
        assert_invalid(&reply, reason);
    }
    assert_eq!(stored_count(&app, &id).await, 0);

    // Same field with different values, or same value in different fields, are fine.
    let body = add(
        &app,
        &id,
        json!([
            link("region", "europe", "region", "west"),
            link("name", "x", "alias", "x"),
            link("_a1", "v", "B_2", "w")
        ]),
    )
    .await;
    assert_eq!(body["added"].as_array().expect("added").len(), 3);

    // Body shape: 422.
    for body in [
        json!({}),
        json!({"entries": null}),
        json!({"entries": {}}),
        json!({"entries": [{"parent_field": "a", "parent_value": "b", "child_field": "c"}]}),
        json!({"entries": [{"parent_field": "a", "parent_value": 1, "child_field": "c", "child_value": "d"}]}),
    ] {
        let reply = app.post(&format!("/taxonomies/{id}/entries"), &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type: ",
        );
    }
}

#[tokio::test]
async fn removal_ignores_links_of_other_taxonomies() {
    let app = spawn_app().await;
    let mine = create_named(&app, "mine").await;
    let theirs = create_named(&app, "theirs").await;
    let a = link("region", "europe", "country", "france");
    let b = link("country", "france", "city", "paris");
    let c = link("country", "italy", "city", "rome");
    add(&app, &mine, json!([a, b])).await;
    add(&app, &theirs, json!([c])).await;

    // `c` is held by the other taxonomy, `d` by nobody, `b` twice: only `b` goes.
    let d = link("x", "1", "y", "2");
    let reply = remove(&app, &mine, json!([b, c, d, b])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    assert_eq!(listed_links(&app, &mine).await, std::slice::from_ref(&a));
    assert_eq!(listed_links(&app, &theirs).await, std::slice::from_ref(&c));
    // Removing what is not held (again) is still 204; an empty list too.
    let reply = remove(&app, &mine, json!([b])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = remove(&app, &mine, json!([])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    // Invalid links are simply not held.
    let reply = remove(&app, &mine, json!([link("1", "", "1", "")])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(stored_count(&app, &mine).await, 1);

    // The body is required.
    let path = format!("/taxonomies/{mine}/entries");
    let reply = app.delete(&path).await;
    assert_plain(
        &reply,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Expected request with Content-Type: application/json",
    );
    let reply = app
        .req(Method::DELETE, &path)
        .as_master()
        .json(&json!({}))
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type: ",
    );
    assert_eq!(stored_count(&app, &mine).await, 1);
}

#[tokio::test]
async fn entry_list_filters_ordering_and_pagination() {
    let app = spawn_app().await;
    let id = create_named(&app, "catalog").await;
    let other = create_named(&app, "other").await;
    add(
        &app,
        &id,
        json!([
            link("category", "fruit", "product", "banana"),
            link("category", "fruit", "product", "apple"),
            link("category", "vegetable", "product", "carrot"),
            link("aisle", "a1", "category", "fruit"),
        ]),
    )
    .await;
    add(
        &app,
        &other,
        json!([link("aisle", "a2", "category", "vegetable")]),
    )
    .await;

    let query = |q: &'static str| {
        let app = &app;
        let id = id.clone();
        async move {
            let reply = app.get(&format!("/taxonomies/{id}/entries?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.text);
            reply.body
        }
    };
    let children = |body: &Value| -> Vec<String> {
        body["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|e| e["child_value"].as_str().expect("child_value").to_owned())
            .collect()
    };

    // Only this taxonomy's entries.
    let body = query("count=true").await;
    assert_eq!(body["page_info"]["count"], 4);
    let body = query("parent_value=fruit&order_by=child_value").await;
    assert_eq!(children(&body), ["apple", "banana"]);
    assert_eq!(body["query_info"], json!({"parent_value": "fruit"}));
    let body = query("parent_field=category&child_value=carrot").await;
    assert_eq!(children(&body), ["carrot"]);
    assert_eq!(
        body["query_info"],
        json!({"parent_field": "category", "child_value": "carrot"})
    );
    assert_eq!(children(&query("child_field=category").await), ["fruit"]);
    assert_eq!(children(&query("parent_value=veg").await).len(), 0);
    // Equality only: other operators and unknown fields are not recognized.
    let body = query("parent_value$contains=fru&id=00000000-0000-0000-0000-000000000000").await;
    assert_eq!(body["query_info"], json!({}));
    assert_eq!(body["data"].as_array().expect("data").len(), 4);

    // Ordering by each sortable field.
    assert_eq!(
        children(&query("order_by=-child_value").await),
        ["fruit", "carrot", "banana", "apple"]
    );
    assert_eq!(
        children(&query("order_by=parent_field&order_by=-parent_value&order_by=child_value").await),
        ["fruit", "carrot", "apple", "banana"]
    );
    assert_eq!(
        children(&query("order_by=child_field&order_by=child_value").await),
        ["fruit", "apple", "banana", "carrot"]
    );
    let body = query("order_by=created_at&order_by=id").await;
    assert_eq!(body["data"].as_array().expect("data").len(), 4);
    let body = query("order_by=-id").await;
    let listed: Vec<&str> = body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(listed, sorted);
    let reply = app
        .get(&format!(
            "/taxonomies/{id}/entries?order_by=taxonomy_id&order_by=name"
        ))
        .await;
    assert_invalid_order_by(&reply, json!(["taxonomy_id", "name"]));

    // Cursor and offset pagination.
    let page = query("first=3&order_by=child_value").await;
    assert_eq!(children(&page), ["apple", "banana", "carrot"]);
    assert_eq!(page["page_info"]["has_next"], true);
    let after = page["page_info"]["after"].as_str().expect("after");
    let reply = app
        .get(&format!(
            "/taxonomies/{id}/entries?first=3&order_by=child_value&after={after}"
        ))
        .await;
    assert_eq!(children(&reply.body), ["fruit"]);
    assert_eq!(reply.body["page_info"]["has_next"], false);
    let body = query("limit=2&offset=2&order_by=child_value&count=true").await;
    assert_eq!(children(&body), ["carrot", "fruit"]);
    assert_eq!(
        body["page_info"],
        json!({"limit": 2, "offset": 2, "order_by": ["child_value"], "count": 4})
    );
    let reply = app
        .get(&format!("/taxonomies/{id}/entries?last=1&first=1"))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
}

// ---- Permissions -------------------------------------------------------------------------

/// What the permission matrix of `resource_permissions` does not cover: the entries a key
/// reads and writes follow its permission on their taxonomy.
#[tokio::test]
async fn entries_follow_the_permissions_on_their_taxonomy() {
    let app = spawn_app().await;
    let created = create(&app, json!({"name": "guarded"})).await;
    let id = created["id"].as_str().expect("id").to_owned();
    let entries_path = format!("/taxonomies/{id}/entries");
    let entries = json!({"entries": [link("region", "europe", "country", "france")]});
    add(&app, &id, json!([link("a", "1", "b", "2")])).await;

    // Read without write: the entries are listed; adding them is 403 before validation.
    let reader = key_of(
        &app.create_key_with(json!({"name": "r", "permissions": {"taxonomies": 4}}))
            .await,
    );
    let reply = app.as_key(&reader).get(&entries_path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"].as_array().expect("data").len(), 1);
    let reply = app
        .as_key(&reader)
        .post(&entries_path, &json!({"entries": [link("1", "", "1", "")]}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("taxonomies", &id),
    );
    assert_eq!(stored_count(&app, &id).await, 1);

    // An object entry with write: entries are added and removed.
    let object_key = app.create_key_with(json!({"name": "object"})).await;
    app.grant(
        object_key["id"].as_str().expect("id"),
        json!([{"object_type": "taxonomies", "object_id": id, "permission": 6}]),
    )
    .await;
    let object_key = key_of(&object_key);
    let reply = app.as_key(&object_key).post(&entries_path, &entries).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["added"].as_array().expect("added").len(), 1);
    let reply = app
        .req(Method::DELETE, &entries_path)
        .as_key(&object_key)
        .json(&entries)
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(stored_count(&app, &id).await, 1);
}

#[tokio::test]
async fn delete_removes_entries_and_permission_entries() {
    let app = spawn_app().await;
    let doomed = create_named(&app, "doomed").await;
    let kept = create_named(&app, "kept").await;
    add(
        &app,
        &doomed,
        json!([link("a", "1", "b", "2"), link("b", "2", "c", "3")]),
    )
    .await;
    add(&app, &kept, json!([link("c", "3", "d", "4")])).await;
    let key = app.create_key_with(json!({"name": "reader"})).await;
    let key_id = key["id"].as_str().expect("id");
    app.grant(
        key_id,
        json!([{"object_type": "taxonomies", "object_id": doomed, "permission": 4}]),
    )
    .await;
    assert_eq!(stored_count(&app, &doomed).await, 2);

    let reply = app.delete(&format!("/taxonomies/{doomed}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(stored_count(&app, &doomed).await, 0);
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM taxonomy_entries")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(total, 1);
    assert_eq!(listed_links(&app, &kept).await, [link("c", "3", "d", "4")]);
    let reply = app.get(&format!("/api-keys/{key_id}/permissions")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!([]));

    // Its links are free again.
    let body = add(&app, &kept, json!([link("a", "1", "b", "2")])).await;
    assert_eq!(body["added"].as_array().expect("added").len(), 1);
}

// ---- License -----------------------------------------------------------------------------

#[tokio::test]
async fn license_limits_taxonomies() {
    let (app, _file) =
        spawn_app_with_license(r#"{"limits":{"taxonomies":1}}"#, AppOptions::default()).await;
    let id = create_named(&app, "only").await;
    let reply = app.post("/taxonomies", &json!({"name": "second"})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Taxonomy",
    );
    // The license comes before validation.
    let reply = app.post("/taxonomies", &json!({"name": ""})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Taxonomy",
    );
    // At the limit, changes and entries are allowed.
    let path = format!("/taxonomies/{id}");
    let reply = app.patch(&path, &json!({"description": "edited"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    add(&app, &id, json!([link("a", "1", "b", "2")])).await;

    // Over the limit (a row the license did not see created): every change is refused,
    // reads and deletes are not.
    sqlx::query("INSERT INTO taxonomies (id, name) VALUES ($1, 'smuggled')")
        .bind(Uuid::new_v4())
        .execute(&app.pool)
        .await
        .expect("insert taxonomy");
    const EXCEEDED: &str = "Invalid license: Exceeded(\"taxonomies\")";
    let reply = app.patch(&path, &json!({"description": "again"})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, EXCEEDED);
    let reply = app
        .post(
            &format!("{path}/entries"),
            &json!({"entries": [link("b", "2", "c", "3")]}),
        )
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, EXCEEDED);
    let reply = app.post("/taxonomies", &json!({"name": "third"})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, EXCEEDED);
    let reply = app.get(&format!("{path}/entries")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = remove(&app, &id, json!([link("a", "1", "b", "2")])).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    // Back at the limit.
    let reply = app.post("/taxonomies", &json!({"name": "third"})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Taxonomy",
    );
}

#[tokio::test]
async fn concurrent_adds_store_each_link_once() {
    let app = spawn_app().await;
    let first = create_named(&app, "first").await;
    let second = create_named(&app, "second").await;
    let links: Vec<Value> = (0..300)
        .map(|i| link("parent", &format!("p{i}"), "child", &format!("c{i}")))
        .collect();
    let mut requests = Vec::new();
    for n in 0..8 {
        let taxonomy = if n % 2 == 0 { &first } else { &second };
        let mut batch = links.clone();
        if n % 4 < 2 {
            batch.reverse();
        }
        batch.rotate_left(n * 37);
        let path = format!("/taxonomies/{taxonomy}/entries");
        let body = json!({"entries": batch});
        let app = &app;
        requests.push(async move { (taxonomy.clone(), app.post(&path, &body).await) });
    }
    let replies = futures_util::future::join_all(requests).await;

    let holders: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT taxonomy_id, parent_value FROM taxonomy_entries")
            .fetch_all(&app.pool)
            .await
            .expect("entries");
    assert_eq!(holders.len(), 300);
    let holder_of = |value: &str| {
        holders
            .iter()
            .find(|(_, v)| v == value)
            .map(|(t, _)| t.to_string())
            .expect("stored")
    };
    let mut added = 0;
    for (taxonomy, reply) in replies {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        for entry in reply.body["added"].as_array().expect("added") {
            added += 1;
            assert_eq!(
                holder_of(entry["parent_value"].as_str().expect("value")),
                taxonomy
            );
        }
        for entry in reply.body["skipped"].as_array().expect("skipped") {
            assert_eq!(
                entry["taxonomy_id"],
                holder_of(entry["parent_value"].as_str().expect("value")).as_str()
            );
        }
        let total = reply.body["added"].as_array().expect("added").len()
            + reply.body["skipped"].as_array().expect("skipped").len();
        assert_eq!(total, 300);
    }
    assert_eq!(added, 300);
}
