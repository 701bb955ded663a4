//! API keys, key check and permissions.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    OBJECT_TYPES, TYPE_ENTRY, TestApp, assert_error, assert_plain, assert_utc_timestamp, is_uuid,
    key_of, spawn_app, write_denied,
};

async fn entries_of(app: &TestApp, id: &str) -> Value {
    let reply = app.get(&format!("/api-keys/{id}/permissions")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body
}

fn data_ids(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .expect("data array")
        .iter()
        .map(|k| k["id"].as_str().expect("id").to_owned())
        .collect()
}

// ---- Key check ---------------------------------------------------------------------------

#[tokio::test]
async fn login_with_the_master_key() {
    let app = spawn_app().await;
    let reply = app.post("/login", &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["message"], "OK");
    assert_eq!(reply.body["key"], "master");
    let permissions = reply.body["permissions"].as_object().expect("object");
    assert_eq!(permissions.len(), 13);
    for object_type in OBJECT_TYPES {
        let expected = if object_type == "pipelines" {
            json!({"access_level": 7, "classifications": ["*"]})
        } else {
            json!({"access_level": 7, "classifications": []})
        };
        assert_eq!(permissions[object_type], expected, "{object_type}");
    }
    assert!(reply.header("x-request-id").is_some());
}

#[tokio::test]
async fn login_needs_no_body_and_no_permission() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "plain", "description": "nothing granted"}))
        .await;
    let key = key_of(&created);
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["message"], "OK");
    assert_eq!(reply.body["key"], "plain");
    assert_eq!(reply.body["description"], "nothing granted");
    for object_type in OBJECT_TYPES {
        assert_eq!(
            reply.body["permissions"][object_type],
            json!({"access_level": 0, "classifications": []}),
            "{object_type}"
        );
    }
}

#[tokio::test]
async fn missing_key_is_401() {
    let app = spawn_app().await;
    let reply = app.req(Method::POST, "/login").send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
}

// ---- Create ------------------------------------------------------------------------------

#[tokio::test]
async fn create_returns_the_key_with_its_secret_once() {
    let app = spawn_app().await;
    let reply = app
        .post(
            "/api-keys",
            &json!({"name": "reporting", "permissions": {"pipelines": 5}, "classifications": ["public"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let body = &reply.body;
    let keys: BTreeSet<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "id",
            "name",
            "description",
            "secret",
            "active",
            "expiration",
            "created_at",
            "updated_at"
        ])
    );
    assert!(is_uuid(body["id"].as_str().expect("id")));
    assert_eq!(body["name"], "reporting");
    assert_eq!(body["description"], Value::Null);
    assert_eq!(body["active"], true);
    assert_eq!(body["expiration"], Value::Null);
    let secret = body["secret"].as_str().expect("secret");
    assert_eq!(secret.len(), 48, "{secret}");
    assert!(
        secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/'),
        "{secret}"
    );
    let created_at = assert_utc_timestamp(&body["created_at"]);
    let updated_at = assert_utc_timestamp(&body["updated_at"]);
    assert!(updated_at >= created_at);

    // Two keys never share a secret.
    let other = app.create_key_with(json!({"name": "reporting"})).await;
    assert_ne!(other["secret"], body["secret"]);
    assert_ne!(other["id"], body["id"]);
}

#[tokio::test]
async fn created_key_can_log_in_with_its_permissions() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({
            "name": "ingest",
            "description": "ingestion robot",
            "permissions": {"pipelines": 5, "agents": 4, "documents": 2},
            "classifications": ["public", "internal"],
        }))
        .await;
    assert_eq!(created["description"], "ingestion robot");
    let reply = app
        .req(Method::POST, "/login")
        .as_key(key_of(&created))
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["message"], "OK");
    assert_eq!(reply.body["key"], "ingest");
    assert_eq!(reply.body["description"], "ingestion robot");
    let permissions = reply.body["permissions"].as_object().expect("object");
    let types: BTreeSet<&str> = permissions.keys().map(String::as_str).collect();
    assert_eq!(types, BTreeSet::from(OBJECT_TYPES));
    for object_type in OBJECT_TYPES {
        let entry = &permissions[object_type];
        let (level, classifications) = match object_type {
            "pipelines" => (5, json!(["internal", "public"])),
            "agents" => (4, json!([])),
            "documents" => (2, json!([])),
            _ => (0, json!([])),
        };
        assert_eq!(entry["access_level"], level, "{object_type}");
        let mut held: Vec<String> =
            serde_json::from_value(entry["classifications"].clone()).expect("array");
        held.sort();
        assert_eq!(json!(held), classifications, "{object_type}");
    }
}

#[tokio::test]
async fn name_must_have_1_to_255_characters() {
    let app = spawn_app().await;
    for name in [String::new(), "n".repeat(256)] {
        let reply = app.post("/api-keys", &json!({"name": name})).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
        assert_eq!(reply.body["error"]["details"]["error"], "Invalid name");
    }
    let longest = "n".repeat(255);
    let created = app.create_key_with(json!({"name": longest})).await;
    assert_eq!(created["name"], longest.as_str());
    // Names are not unique.
    let again = app.create_key_with(json!({"name": longest})).await;
    assert_ne!(again["id"], created["id"]);
    // The same rule applies on update.
    let id = created["id"].as_str().expect("id");
    let reply = app
        .patch(&format!("/api-keys/{id}"), &json!({"name": ""}))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(reply.body["error"]["details"]["error"], "Invalid name");
}

#[tokio::test]
async fn create_ignores_unknown_fields() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "extra", "colour": "blue", "active": false}))
        .await;
    assert_eq!(created["name"], "extra");
    assert_eq!(created["active"], true);
}

#[tokio::test]
async fn create_without_write_on_api_keys_is_403() {
    let app = spawn_app().await;
    let reader = app.create_key(json!({"api-keys": 5}), json!([])).await;
    let reply = app
        .as_key(&reader)
        .post("/api-keys", &json!({"name": "x"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(WRITE) required for api-keys with id None",
    );
}

#[tokio::test]
async fn create_with_unknown_object_type_is_400() {
    let app = spawn_app().await;
    let reply = app
        .post(
            "/api-keys",
            &json!({"name": "x", "permissions": {"agents": 4, "widgets": 4}}),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid object type");
    // Nothing was created.
    let list = app.get("/api-keys?name=x").await;
    assert_eq!(list.body["data"], json!([]));
}

#[tokio::test]
async fn create_cannot_grant_bits_not_held() {
    let app = spawn_app().await;
    let granter = app
        .create_key(json!({"api-keys": 6, "pipelines": 4}), json!(["*"]))
        .await;
    let reply = app
        .as_key(&granter)
        .post(
            "/api-keys",
            &json!({"name": "more", "permissions": {"pipelines": 6}}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(READ | WRITE) required for pipelines with id None",
    );
    let reply = app
        .as_key(&granter)
        .post(
            "/api-keys",
            &json!({"name": "more", "permissions": {"agents": 1}}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(EXECUTE) required for agents with id None",
    );
    // Nothing was created; what it holds it can grant.
    let list = app.get("/api-keys?name=more").await;
    assert_eq!(list.body["data"], json!([]));
    let reply = app
        .as_key(&granter)
        .post(
            "/api-keys",
            &json!({"name": "same", "permissions": {"pipelines": 4, "api-keys": 2}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn create_cannot_grant_classifications_not_held() {
    let app = spawn_app().await;
    let granter = app
        .create_key(json!({"api-keys": 6, "pipelines": 4}), json!(["a"]))
        .await;
    let reply = app
        .as_key(&granter).post("/api-keys", &json!({"name": "wider", "permissions": {"pipelines": 4}, "classifications": ["a", "b"]}))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
    let message = reply.message();
    assert!(
        message.starts_with("Unauthorized: access level AccessLevel(")
            && message.ends_with(" required for pipelines with id None"),
        "{message}"
    );
    let reply = app
        .as_key(&granter)
        .post(
            "/api-keys",
            &json!({"name": "wider", "permissions": {"pipelines": 4}, "classifications": ["*"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
    let reply = app
        .as_key(&granter)
        .post(
            "/api-keys",
            &json!({"name": "same", "permissions": {"pipelines": 4}, "classifications": ["a"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

// ---- Read --------------------------------------------------------------------------------

#[tokio::test]
async fn get_returns_the_key_without_secret() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "reader", "description": "reads"}))
        .await;
    let id = created["id"].as_str().expect("id");
    let reply = app.get(&format!("/api-keys/{id}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut expected = created.clone();
    expected.as_object_mut().expect("object").remove("secret");
    assert_eq!(reply.body, expected);
    assert!(reply.body.get("secret").is_none());

    let master = app.get(&format!("/api-keys/{}", app.master_id)).await;
    assert_eq!(master.status, StatusCode::OK);
    assert_eq!(master.body["name"], "master");
    assert_eq!(master.body["active"], true);
    assert_eq!(master.body["expiration"], Value::Null);
    assert!(master.body.get("secret").is_none());
}

#[tokio::test]
async fn list_shows_keys_without_secrets() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "listed"})).await;
    let reply = app.get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let data = reply.body["data"].as_array().expect("data");
    assert_eq!(data.len(), 2);
    for key in data {
        assert!(key.get("secret").is_none(), "{key}");
        assert!(key.get("secret_hash").is_none(), "{key}");
    }
    let ids = data_ids(&reply.body);
    assert!(ids.contains(&app.master_id.to_string()));
    assert!(ids.contains(&created["id"].as_str().expect("id").to_owned()));
}

#[tokio::test]
async fn unknown_key_id_is_404_everywhere() {
    let app = spawn_app().await;
    let id = Uuid::new_v4().to_string();
    let path = format!("/api-keys/{id}");
    let perms = format!("/api-keys/{id}/permissions");
    for reply in [
        app.get(&path).await,
        app.patch(&path, &json!({"name": "x"})).await,
        app.delete(&path).await,
        app.get(&perms).await,
        app.post(&perms, &json!([{"object_type": "agents", "permission": 4}]))
            .await,
    ] {
        assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
        assert_eq!(reply.body["error"]["details"]["id"], id.as_str());
    }
}

#[tokio::test]
async fn key_without_read_on_api_keys_sees_nothing() {
    let app = spawn_app().await;
    let other = app.create_key_with(json!({"name": "other"})).await;
    let other_id = other["id"].as_str().expect("id");
    let blind = app.create_key(json!({"agents": 7}), json!([])).await;

    let reply = app
        .as_key(&blind)
        .get(&format!("/api-keys/{other_id}"))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
    assert_eq!(reply.body["error"]["details"]["id"], other_id);
    let reply = app
        .as_key(&blind)
        .get(&format!("/api-keys/{other_id}/permissions"))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");

    let reply = app.as_key(&blind).get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"], json!([]));

    // Without read, changes are answered as for a missing key too.
    let reply = app
        .as_key(&blind)
        .patch(
            &format!("/api-keys/{other_id}"),
            &json!({"name": "renamed"}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
    let reply = app
        .as_key(&blind)
        .delete(&format!("/api-keys/{other_id}"))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
}

#[tokio::test]
async fn reader_without_write_gets_403_on_changes() {
    let app = spawn_app().await;
    let other = app.create_key_with(json!({"name": "other"})).await;
    let other_id = other["id"].as_str().expect("id");
    let reader = app.create_key(json!({"api-keys": 4}), json!([])).await;
    let reply = app
        .as_key(&reader)
        .patch(
            &format!("/api-keys/{other_id}"),
            &json!({"name": "renamed"}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("api-keys", other_id),
    );
    let reply = app
        .as_key(&reader)
        .delete(&format!("/api-keys/{other_id}"))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("api-keys", other_id),
    );
    let reply = app.get(&format!("/api-keys/{other_id}")).await;
    assert_eq!(reply.body["name"], "other");
}

// ---- Update ------------------------------------------------------------------------------

#[tokio::test]
async fn deactivation_refuses_the_very_next_request() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "worker"})).await;
    let key = key_of(&created);
    let reply = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": false}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["active"], false);
    assert!(reply.body.get("secret").is_none());
    let reply = app.as_key(&key).get("/permissions").await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    // Reactivation restores it.
    let reply = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": true}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.as_key(&key).get("/permissions").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn expiration_in_the_past_refuses_the_key() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "temp"})).await;
    let key = key_of(&created);
    let reply = app
        .patch(
            &format!("/api-keys/{}", key.0),
            &json!({"expiration": "2020-06-01T14:00:00+02:00"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let expiration = assert_utc_timestamp(&reply.body["expiration"]);
    assert_eq!(expiration.to_rfc3339(), "2020-06-01T12:00:00+00:00");
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
}

#[tokio::test]
async fn null_clears_description_and_expiration() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "clear me", "description": "to clear"}))
        .await;
    let id = created["id"].as_str().expect("id");
    let reply = app
        .patch(
            &format!("/api-keys/{id}"),
            &json!({"expiration": "2999-12-31T23:59:59Z"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        assert_utc_timestamp(&reply.body["expiration"]).to_rfc3339(),
        "2999-12-31T23:59:59+00:00"
    );
    assert_eq!(reply.body["description"], "to clear");

    let reply = app
        .patch(
            &format!("/api-keys/{id}"),
            &json!({"description": null, "expiration": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["expiration"], Value::Null);
    assert_eq!(reply.body["name"], "clear me");
    assert_eq!(reply.body["active"], true);
    let reply = app.get(&format!("/api-keys/{id}")).await;
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["expiration"], Value::Null);
}

#[tokio::test]
async fn omitted_fields_keep_their_values_and_updated_at_moves() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "stable", "description": "kept"}))
        .await;
    let id = created["id"].as_str().expect("id");
    let created_at = assert_utc_timestamp(&created["created_at"]);
    let first_update = assert_utc_timestamp(&created["updated_at"]);

    let reply = app
        .patch(&format!("/api-keys/{id}"), &json!({"name": "renamed"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["description"], "kept");
    assert_eq!(reply.body["active"], true);
    assert_eq!(reply.body["expiration"], Value::Null);
    assert_eq!(reply.body["id"], created["id"]);
    assert_eq!(assert_utc_timestamp(&reply.body["created_at"]), created_at);
    let second_update = assert_utc_timestamp(&reply.body["updated_at"]);
    assert!(second_update > first_update, "updated_at did not change");

    // `{}` is valid and changes nothing but `updated_at`.
    let reply = app.patch(&format!("/api-keys/{id}"), &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["description"], "kept");
    assert_eq!(reply.body["active"], true);
    let third_update = assert_utc_timestamp(&reply.body["updated_at"]);
    assert!(third_update > second_update, "updated_at did not change");

    // `null` for a non-nullable field counts as omitted.
    let reply = app
        .patch(
            &format!("/api-keys/{id}"),
            &json!({"name": null, "active": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["active"], true);
    let reply = app.get(&format!("/api-keys/{id}")).await;
    assert_eq!(reply.body["name"], "renamed");
}

// ---- Delete ------------------------------------------------------------------------------

#[tokio::test]
async fn delete_removes_the_key() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({"name": "doomed", "permissions": {"agents": 4}}))
        .await;
    let key = key_of(&created);
    assert_eq!(
        app.req(Method::POST, "/login")
            .as_key(&key)
            .send()
            .await
            .status,
        StatusCode::CREATED
    );
    let reply = app.delete(&format!("/api-keys/{}", key.0)).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(reply.text, "");
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    let reply = app.get(&format!("/api-keys/{}", key.0)).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
    assert_eq!(reply.body["error"]["details"]["id"], key.0.as_str());
    let reply = app.delete(&format!("/api-keys/{}", key.0)).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
}

#[tokio::test]
async fn a_key_cannot_delete_itself() {
    let app = spawn_app().await;
    let admin = app.create_key(json!({"api-keys": 7}), json!([])).await;
    let reply = app
        .as_key(&admin)
        .delete(&format!("/api-keys/{}", admin.0))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("api-keys", &admin.0),
    );
    let reply = app.req(Method::POST, "/login").as_key(&admin).send().await;
    assert_eq!(reply.status, StatusCode::CREATED);
}

#[tokio::test]
async fn the_master_key_cannot_be_deleted_deactivated_or_expired() {
    let app = spawn_app().await;
    let master = app.master_id.to_string();
    let denied = write_denied("api-keys", &master);
    let admin = app.create_key(json!({"api-keys": 7}), json!([])).await;
    let path = format!("/api-keys/{master}");

    let reply = app.delete(&path).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &denied);
    let reply = app.as_key(&admin).delete(&path).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &denied);
    for body in [
        json!({"active": false}),
        json!({"expiration": "2999-01-01T00:00:00Z"}),
        json!({"expiration": "2000-01-01T00:00:00Z"}),
    ] {
        let reply = app.patch(&path, &body).await;
        assert_error(&reply, StatusCode::FORBIDDEN, &denied);
        let reply = app.as_key(&admin).patch(&path, &body).await;
        assert_error(&reply, StatusCode::FORBIDDEN, &denied);
    }
    // Still intact and usable.
    let reply = app.get(&path).await;
    assert_eq!(reply.body["active"], true);
    assert_eq!(reply.body["expiration"], Value::Null);
    assert_eq!(
        app.post("/login", &json!({})).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn the_master_key_can_be_renamed_and_described() {
    let app = spawn_app().await;
    let path = format!("/api-keys/{}", app.master_id);
    let reply = app
        .patch(
            &path,
            &json!({"name": "root", "description": "administration", "active": true}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "root");
    assert_eq!(reply.body["description"], "administration");
    let reply = app.post("/login", &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.body["key"], "root");
    assert_eq!(reply.body["description"], "administration");
}

// ---- Permission entries ------------------------------------------------------------------

#[tokio::test]
async fn permission_entries_of_a_key() {
    let app = spawn_app().await;
    let created = app
        .create_key_with(json!({
            "name": "entries",
            "permissions": {"pipelines": 5, "agents": 4},
            "classifications": ["x"],
        }))
        .await;
    let id = created["id"].as_str().expect("id");
    let reply = app.get(&format!("/api-keys/{id}/permissions")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body,
        json!([
            {"object_type": "agents", "object_id": TYPE_ENTRY, "permission": 4, "classifications": []},
            {"object_type": "pipelines", "object_id": TYPE_ENTRY, "permission": 5, "classifications": ["x"]},
        ])
    );

    let master = entries_of(&app, &app.master_id.to_string()).await;
    let master = master.as_array().expect("array");
    assert_eq!(master.len(), 13);
    for (entry, object_type) in master.iter().zip(OBJECT_TYPES) {
        assert_eq!(entry["object_type"], object_type);
        assert_eq!(entry["object_id"], TYPE_ENTRY);
        assert_eq!(entry["permission"], 7);
        let classifications = if object_type == "pipelines" {
            json!(["*"])
        } else {
            json!([])
        };
        assert_eq!(entry["classifications"], classifications, "{object_type}");
    }
}

#[tokio::test]
async fn post_permissions_adds_replaces_and_removes_entries() {
    let app = spawn_app().await;
    let target = app
        .create_key_with(json!({"name": "target", "permissions": {"agents": 4, "llms": 5}}))
        .await;
    let target_id = target["id"].as_str().expect("id");
    let other = app.create_key_with(json!({"name": "other"})).await;
    let other_id = other["id"].as_str().expect("id");
    let path = format!("/api-keys/{target_id}/permissions");

    let reply = app
        .post(
            &path,
            &json!([
                {"object_type": "agents", "permission": 6},
                {"object_type": "llms", "permission": 0},
                {"object_type": "api-keys", "object_id": other_id, "permission": 4},
                {"object_type": "pipelines", "object_id": TYPE_ENTRY, "permission": 4, "classifications": ["c"]},
                {"object_type": "taxonomies", "permission": 4, "classifications": ["ignored"]},
            ]),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.text, "");

    let mut expected = vec![
        json!({"object_type": "agents", "object_id": TYPE_ENTRY, "permission": 6, "classifications": []}),
        json!({"object_type": "api-keys", "object_id": other_id, "permission": 4, "classifications": []}),
        json!({"object_type": "pipelines", "object_id": TYPE_ENTRY, "permission": 4, "classifications": ["c"]}),
        json!({"object_type": "taxonomies", "object_id": TYPE_ENTRY, "permission": 4, "classifications": []}),
    ];
    assert_eq!(entries_of(&app, target_id).await, json!(expected));

    // An empty batch changes nothing; removing an absent entry is harmless.
    app.grant(target_id, json!([])).await;
    app.grant(
        target_id,
        json!([{"object_type": "contexts", "permission": 0}]),
    )
    .await;
    assert_eq!(entries_of(&app, target_id).await, json!(expected));

    // The key uses its new permissions from the next request.
    let reply = app
        .req(Method::POST, "/login")
        .as_key(key_of(&target))
        .send()
        .await;
    assert_eq!(reply.body["permissions"]["agents"]["access_level"], 6);
    assert_eq!(reply.body["permissions"]["llms"]["access_level"], 0);
    assert_eq!(
        reply.body["permissions"]["pipelines"],
        json!({"access_level": 4, "classifications": ["c"]})
    );

    app.grant(
        target_id,
        json!([{"object_type": "api-keys", "object_id": other_id, "permission": 0}]),
    )
    .await;
    expected.remove(1);
    assert_eq!(entries_of(&app, target_id).await, json!(expected));
}

#[tokio::test]
async fn permission_batches_are_all_or_nothing() {
    let app = spawn_app().await;
    let target = app
        .create_key_with(json!({"name": "target", "permissions": {"agents": 4}}))
        .await;
    let target_id = target["id"].as_str().expect("id");
    let path = format!("/api-keys/{target_id}/permissions");
    let before = entries_of(&app, target_id).await;

    let reply = app
        .post(
            &path,
            &json!([
                {"object_type": "agents", "permission": 7},
                {"object_type": "widgets", "permission": 4},
            ]),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid object type");
    assert_eq!(entries_of(&app, target_id).await, before);

    let granter = app
        .create_key(json!({"api-keys": 6, "agents": 7}), json!([]))
        .await;
    let reply = app
        .as_key(&granter)
        .post(
            &path,
            &json!([
                {"object_type": "agents", "permission": 7},
                {"object_type": "llms", "permission": 4},
            ]),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(READ) required for llms with id None",
    );
    assert_eq!(entries_of(&app, target_id).await, before);

    let missing = Uuid::new_v4();
    let reply = app
        .post(
            &path,
            &json!([
                {"object_type": "agents", "permission": 7},
                {"object_type": "api-keys", "object_id": missing, "permission": 4},
            ]),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        &format!("Api Key with id {missing} not found"),
    );
    assert_eq!(entries_of(&app, target_id).await, before);
}

#[tokio::test]
async fn a_key_cannot_grant_or_revoke_what_it_does_not_hold() {
    let app = spawn_app().await;
    let granter = app
        .create_key(json!({"api-keys": 6, "pipelines": 4}), json!(["a"]))
        .await;
    let target = app
        .create_key_with(json!({"name": "target", "permissions": {"llms": 4}}))
        .await;
    let target_id = target["id"].as_str().expect("id");
    let path = format!("/api-keys/{target_id}/permissions");
    let before = entries_of(&app, target_id).await;

    let attempt = |body: Value| {
        let granter = granter.clone();
        let path = path.clone();
        let app = &app;
        async move { app.as_key(&granter).post(&path, &body).await }
    };
    let reply = attempt(json!([{"object_type": "pipelines", "permission": 6}])).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(READ | WRITE) required for pipelines with id None",
    );
    // Revoking a permission not held is refused too.
    let reply = attempt(json!([{"object_type": "llms", "permission": 0}])).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(READ) required for llms with id None",
    );
    let reply = attempt(json!([
        {"object_type": "pipelines", "permission": 4, "classifications": ["a", "b"]}
    ]))
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
    assert!(
        reply
            .message()
            .ends_with("required for pipelines with id None"),
        "{}",
        reply.message()
    );
    assert_eq!(entries_of(&app, target_id).await, before);

    // What it holds it can grant.
    let reply = attempt(json!([
        {"object_type": "pipelines", "permission": 4, "classifications": ["a"]}
    ]))
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn object_entry_on_a_missing_api_key_is_404_long_form() {
    let app = spawn_app().await;
    let target = app.create_key_with(json!({"name": "target"})).await;
    let target_id = target["id"].as_str().expect("id");
    let missing = Uuid::new_v4();
    let reply = app
        .post(
            &format!("/api-keys/{target_id}/permissions"),
            &json!([{"object_type": "api-keys", "object_id": missing, "permission": 4}]),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        &format!("Api Key with id {missing} not found"),
    );
}

#[tokio::test]
async fn the_master_keys_entries_cannot_change() {
    let app = spawn_app().await;
    let master = app.master_id.to_string();
    let before = entries_of(&app, &master).await;
    let path = format!("/api-keys/{master}/permissions");
    for body in [
        json!([{"object_type": "agents", "permission": 0}]),
        json!([{"object_type": "agents", "permission": 4}]),
        json!([{"object_type": "agents", "permission": 7}]),
    ] {
        let reply = app.post(&path, &body).await;
        assert_error(
            &reply,
            StatusCode::FORBIDDEN,
            &write_denied("api-keys", &master),
        );
    }
    let admin = app.create_key(json!({"api-keys": 7}), json!([])).await;
    let reply = app
        .as_key(&admin)
        .post(
            &path,
            &json!([{"object_type": "api-keys", "permission": 0}]),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("api-keys", &master),
    );
    assert_eq!(entries_of(&app, &master).await, before);
}

#[tokio::test]
async fn object_level_read_shows_only_that_key() {
    let app = spawn_app().await;
    let b = app.create_key_with(json!({"name": "b"})).await;
    let b_id = b["id"].as_str().expect("id");
    let c = app.create_key_with(json!({"name": "c"})).await;
    let c_id = c["id"].as_str().expect("id");
    let a = app.create_key_with(json!({"name": "a"})).await;
    let a_key = key_of(&a);
    app.grant(
        &a_key.0,
        json!([{"object_type": "api-keys", "object_id": b_id, "permission": 4}]),
    )
    .await;

    let reply = app.as_key(&a_key).get(&format!("/api-keys/{b_id}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "b");
    let reply = app.as_key(&a_key).get(&format!("/api-keys/{c_id}")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
    let reply = app.as_key(&a_key).get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(data_ids(&reply.body), vec![b_id.to_owned()]);
    // Read alone does not allow a change.
    let reply = app
        .as_key(&a_key)
        .patch(&format!("/api-keys/{b_id}"), &json!({"name": "bb"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &write_denied("api-keys", b_id),
    );
}

#[tokio::test]
async fn my_permissions_cover_all_types() {
    let app = spawn_app().await;
    let key = app
        .create_key(json!({"pipelines": 4, "llms": 1}), json!(["p"]))
        .await;
    let reply = app.as_key(&key).get("/permissions").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let map = reply.body.as_object().expect("object");
    assert_eq!(map.len(), 13);
    for object_type in OBJECT_TYPES {
        let expected = match object_type {
            "pipelines" => json!({"access_level": 4, "classifications": ["p"]}),
            "llms" => json!({"access_level": 1, "classifications": []}),
            _ => json!({"access_level": 0, "classifications": []}),
        };
        assert_eq!(map[object_type], expected, "{object_type}");
    }
}

#[tokio::test]
async fn permissions_on_several_objects_combine_type_and_object_levels() {
    let app = spawn_app().await;
    let key = app.create_key(json!({"api-keys": 4}), json!([])).await;
    let a = Uuid::new_v4().to_string();
    let b = app.create_key_with(json!({"name": "b"})).await;
    let b = b["id"].as_str().expect("id").to_owned();
    app.grant(
        &key.0,
        json!([{"object_type": "api-keys", "object_id": b, "permission": 2}]),
    )
    .await;

    let reply = app
        .as_key(&key)
        .get(&format!(
            "/permissions/api-keys?object_id={a}&object_id={b}"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!({a.clone(): 4, b.clone(): 6}));

    let reply = app
        .as_key(&key)
        .get(&format!("/permissions/agents?object_id={a}"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!({a.clone(): 0}));

    let reply = app.as_key(&key).get("/permissions/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!({}));

    // Unknown query parameters are ignored.
    let reply = app
        .as_key(&key)
        .get(&format!("/permissions/api-keys?other=1&object_id={b}"))
        .await;
    assert_eq!(reply.body, json!({b.clone(): 6}));
}

#[tokio::test]
async fn permission_on_one_object_is_an_integer() {
    let app = spawn_app().await;
    let key = app.create_key(json!({"api-keys": 1}), json!([])).await;
    let b = app.create_key_with(json!({"name": "b"})).await;
    let b = b["id"].as_str().expect("id").to_owned();
    app.grant(
        &key.0,
        json!([{"object_type": "api-keys", "object_id": b, "permission": 4}]),
    )
    .await;
    let reply = app
        .as_key(&key)
        .get(&format!("/permissions/api-keys/{b}"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.text.trim(), "5");
    assert_eq!(reply.body, json!(5));
    let other = Uuid::new_v4();
    let reply = app
        .as_key(&key)
        .get(&format!("/permissions/api-keys/{other}"))
        .await;
    assert_eq!(reply.body, json!(1));
    let reply = app
        .as_key(&key)
        .get(&format!("/permissions/llms/{other}"))
        .await;
    assert_eq!(reply.body, json!(0));
    let reply = app.get(&format!("/permissions/pipelines/{other}")).await;
    assert_eq!(reply.body, json!(7));
}

#[tokio::test]
async fn permission_queries_reject_unknown_types_and_bad_ids() {
    let app = spawn_app().await;
    let id = Uuid::new_v4();
    let reply = app
        .get(&format!("/permissions/widgets?object_id={id}"))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid object type");
    let reply = app.get("/permissions/widgets").await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid object type");
    let reply = app.get(&format!("/permissions/widgets/{id}")).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid object type");

    let reply = app
        .get(&format!(
            "/permissions/api-keys?object_id={id}&object_id=nope"
        ))
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to deserialize query string",
    );
}
