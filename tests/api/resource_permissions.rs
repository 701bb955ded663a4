//! The permission matrix every resource follows, one table row a resource: an unknown id is a
//! 404 with that id; a key without read on an object gets 404 on every operation on it and an
//! empty list; without write, 403 on changes and on creation (before validation); an object
//! entry reaches that object only; deleting an object removes the entries on it.
//!
//! A new resource is one more row of [`RESOURCES`]. What is particular to one resource (its
//! providers, executing it, its entries' contents) is tested in its own module.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    Reply, TestApp, assert_error, assert_not_found_with_id, assert_plain, create_denied, ids,
    key_of, names, spawn_app_without_worker, write_denied,
};

/// A change of a sub-resource: method, path suffix, body, status when allowed.
type Change = (Method, &'static str, Value, StatusCode);

/// One resource: where it lives, how to create one, and what it answers.
struct Resource {
    /// The object type of permissions, also the collection's path (`/{object_type}`).
    object_type: &'static str,
    /// The path parameter of its id, named in the 400 of an id that is not a UUID.
    id_parameter: &'static str,
    /// The message of its 404.
    not_found: &'static str,
    /// Its display name in the long-form 404 of a permission entry on an unknown object.
    display_name: &'static str,
    /// A valid create body for the name.
    body: fn(&str) -> Value,
    /// A secret of the create body, never to be seen in a reply.
    secret: Option<&'static str>,
    /// A create body that fails validation.
    invalid_body: fn() -> Value,
    /// Permissions that creating one needs besides write on the type (on its provider), given
    /// along with every type-level permission tried.
    also_needs: fn() -> Value,
    /// Sub-resources read with GET (`/prompt`).
    reads: &'static [&'static str],
    /// Changes of sub-resources.
    writes: fn() -> Vec<Change>,
    /// Executions (POST): path suffix, body. Not found like the rest without read.
    executes: fn() -> Vec<(&'static str, Value)>,
}

fn no_permissions() -> Value {
    json!({})
}

fn no_writes() -> Vec<Change> {
    Vec::new()
}

fn no_executes() -> Vec<(&'static str, Value)> {
    Vec::new()
}

fn taxonomy_entries() -> Value {
    json!({"entries": [{
        "parent_field": "region",
        "parent_value": "europe",
        "child_field": "country",
        "child_value": "france",
    }]})
}

const RESOURCES: [Resource; 5] = [
    Resource {
        object_type: "agents",
        id_parameter: "agent_id",
        not_found: "Agent not found",
        display_name: "Agent",
        body: crate::agents::minimal_body,
        secret: None,
        invalid_body: || crate::agents::minimal_body(""),
        also_needs: no_permissions,
        reads: &["/prompt"],
        writes: no_writes,
        executes: no_executes,
    },
    Resource {
        object_type: "llms",
        id_parameter: "llm_id",
        not_found: "LLM not found",
        display_name: "LLM",
        body: |name| json!({"name": name, "provider": "openai", "endpoint": "http://h.example/v1", "api_key": crate::llms::KEY}),
        secret: Some(crate::llms::KEY),
        invalid_body: || json!({"name": "", "provider": "openai", "endpoint": "ftp://x"}),
        also_needs: no_permissions,
        reads: &[],
        writes: no_writes,
        executes: || vec![("/query", json!({"prompt": "hi"}))],
    },
    Resource {
        object_type: "embedding-models",
        id_parameter: "embedding_model_id",
        not_found: "Embedding model not found",
        display_name: "Embedding Model",
        body: |name| json!({"name": name, "provider": "hash", "model_name": "h"}),
        secret: None,
        invalid_body: || json!({"name": "", "provider": "hash", "model_name": "h"}),
        also_needs: || json!({"embedding-providers": 7}),
        reads: &[],
        writes: no_writes,
        executes: || vec![("/query", json!({"text": "hello"}))],
    },
    Resource {
        object_type: "text-splitters",
        id_parameter: "text_splitter_id",
        not_found: "Text Splitter not found",
        display_name: "Text Splitter",
        body: |name| json!({"name": name, "provider": "token"}),
        secret: None,
        invalid_body: || json!({"name": "", "provider": "token"}),
        also_needs: || json!({"text-splitter-providers": 7}),
        reads: &[],
        writes: no_writes,
        executes: no_executes,
    },
    Resource {
        object_type: "taxonomies",
        id_parameter: "taxonomy_id",
        not_found: "Taxonomy not found",
        display_name: "Taxonomy",
        body: |name| json!({"name": name}),
        secret: None,
        invalid_body: || json!({"name": ""}),
        also_needs: no_permissions,
        reads: &["/entries"],
        writes: || {
            vec![
                (Method::POST, "/entries", taxonomy_entries(), StatusCode::OK),
                (
                    Method::DELETE,
                    "/entries",
                    taxonomy_entries(),
                    StatusCode::NO_CONTENT,
                ),
            ]
        },
        executes: no_executes,
    },
];

impl Resource {
    fn collection(&self) -> String {
        format!("/{}", self.object_type)
    }

    /// Every operation on the object at `path`: method, path, body (reads, changes,
    /// executions).
    fn operations(&self, path: &str) -> Vec<(Method, String, Option<Value>)> {
        let mut operations = vec![
            (Method::GET, path.to_owned(), None),
            (Method::PATCH, path.to_owned(), Some(json!({}))),
            (Method::PATCH, path.to_owned(), Some(json!({"name": "x"}))),
            (Method::DELETE, path.to_owned(), None),
        ];
        for read in self.reads {
            operations.push((Method::GET, format!("{path}{read}"), None));
        }
        for (method, suffix, body, _) in (self.writes)() {
            operations.push((method, format!("{path}{suffix}"), Some(body)));
        }
        for (suffix, body) in (self.executes)() {
            operations.push((Method::POST, format!("{path}{suffix}"), Some(body)));
        }
        operations
    }

    /// The changes of the sub-resources of the object at `path`: method, path, body, status
    /// when allowed.
    fn changes(&self, path: &str) -> Vec<(Method, String, Value, StatusCode)> {
        (self.writes)()
            .into_iter()
            .map(|(method, suffix, body, status)| (method, format!("{path}{suffix}"), body, status))
            .collect()
    }

    /// Creates one with the master key; returns the 201 body.
    async fn create(&self, app: &TestApp, name: &str) -> Value {
        let reply = app.post(&self.collection(), &(self.body)(name)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        if let Some(secret) = self.secret {
            assert!(!reply.text.contains(secret), "{}", reply.text);
        }
        reply.body
    }

    /// A key with `bits` on the type, what creating one also needs, and `others`.
    async fn key_with(&self, app: &TestApp, bits: u8, others: Value) -> (String, String) {
        let mut permissions = (self.also_needs)();
        if let (Some(permissions), Some(others)) = (permissions.as_object_mut(), others.as_object())
        {
            permissions.extend(others.clone());
        }
        permissions[self.object_type] = json!(bits);
        key_of(
            &app.create_key_with(json!({"name": format!("{bits}"), "permissions": permissions}))
                .await,
        )
    }

    /// Asserts the creation attempts of `key` are refused: 403 with id None, before validation.
    async fn assert_cannot_create(&self, app: &TestApp, key: &(String, String)) {
        for body in [(self.body)("new"), (self.invalid_body)()] {
            let reply = app.as_key(key).post(&self.collection(), &body).await;
            assert_error(
                &reply,
                StatusCode::FORBIDDEN,
                &create_denied(self.object_type),
            );
        }
    }

    /// Asserts `key` may read the object at `path` (whose create body was `created`) but not
    /// change it: 403 on each change, before validation.
    async fn assert_read_only(
        &self,
        app: &TestApp,
        key: &(String, String),
        path: &str,
        created: &Value,
        id: &str,
    ) {
        let t = self.object_type;
        let reply = app.as_key(key).get(path).await;
        assert_eq!(reply.status, StatusCode::OK, "{t}: {}", reply.text);
        assert_eq!(&reply.body, created, "{t}");
        for read in self.reads {
            let reply = app.as_key(key).get(&format!("{path}{read}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{t}{read}: {}", reply.text);
        }
        let mut changes: Vec<(Method, String, Value)> = vec![
            (Method::PATCH, path.to_owned(), json!({"name": "x"})),
            (Method::PATCH, path.to_owned(), json!({"name": ""})),
            (Method::DELETE, path.to_owned(), Value::Null),
        ];
        for (method, target, body, _) in self.changes(path) {
            changes.push((method, target, body));
        }
        for (method, target, body) in changes {
            let reply = app
                .req(method.clone(), &target)
                .as_key(key)
                .json_opt((!body.is_null()).then_some(&body))
                .send()
                .await;
            assert_error(&reply, StatusCode::FORBIDDEN, &write_denied(t, id));
        }
    }
}

fn assert_not_found(resource: &Resource, reply: &Reply, id: &str) {
    assert_not_found_with_id(reply, resource.not_found, id);
}

#[tokio::test]
async fn an_unknown_id_is_404_with_that_id_and_an_id_not_a_uuid_is_400() {
    let app = spawn_app_without_worker().await;
    for resource in &RESOURCES {
        let id = Uuid::new_v4().to_string();
        let path = format!("{}/{id}", resource.collection());
        for (method, target, body) in resource.operations(&path) {
            let reply = app
                .req(method, &target)
                .as_master()
                .json_opt(body.as_ref())
                .send()
                .await;
            assert_not_found(resource, &reply, &id);
        }
        let path = format!("{}/not-a-uuid", resource.collection());
        for read in std::iter::once(&"").chain(resource.reads) {
            let reply = app.get(&format!("{path}{read}")).await;
            assert_plain(
                &reply,
                StatusCode::BAD_REQUEST,
                &format!(
                    "Invalid URL: Cannot parse `{}` with value `not-a-uuid`",
                    resource.id_parameter
                ),
            );
        }
    }
}

#[tokio::test]
async fn each_resource_follows_the_permission_matrix() {
    let app = spawn_app_without_worker().await;
    for resource in &RESOURCES {
        permission_matrix(&app, resource).await;
    }
}

async fn permission_matrix(app: &TestApp, resource: &Resource) {
    let t = resource.object_type;
    let collection = resource.collection();
    let guarded = resource.create(app, "guarded").await;
    let id = guarded["id"].as_str().expect("id").to_owned();
    let other = resource.create(app, "other").await;
    let other_id = other["id"].as_str().expect("id").to_owned();
    let path = format!("{collection}/{id}");

    // No permission: every operation on it is "not found", the list is empty, no creation.
    let nothing = key_of(&app.create_key_with(json!({"name": "nothing"})).await);
    for (method, target, body) in resource.operations(&path) {
        let reply = app
            .req(method, &target)
            .as_key(&nothing)
            .json_opt(body.as_ref())
            .send()
            .await;
        assert_not_found(resource, &reply, &id);
    }
    let reply = app.as_key(&nothing).get(&collection).await;
    assert_eq!(reply.status, StatusCode::OK, "{t}: {}", reply.text);
    assert_eq!(reply.body["data"], json!([]), "{t}");
    resource.assert_cannot_create(app, &nothing).await;

    // Any type-level permission without write, whatever the key holds on other types: no
    // creation, before validation.
    for bits in [0, 1, 4, 5] {
        let key = resource.key_with(app, bits, json!({"pipelines": 7})).await;
        resource.assert_cannot_create(app, &key).await;
    }

    // Write without read: still "not found" on the object, but creates.
    let write_only = key_of(
        &app.create_key_with(json!({"name": "w", "permissions": {t: 2}}))
            .await,
    );
    let reply = app.as_key(&write_only).delete(&path).await;
    assert_not_found(resource, &reply, &id);
    for (method, target, body, _) in resource.changes(&path) {
        let reply = app
            .req(method, &target)
            .as_key(&write_only)
            .json(&body)
            .send()
            .await;
        assert_not_found(resource, &reply, &id);
    }
    let writer = resource.key_with(app, 2, json!({})).await;
    let reply = app
        .as_key(&writer)
        .post(&collection, &(resource.body)("by writer"))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{t}: {}", reply.text);

    // Read on the type: reads everything, lists what the master key lists, changes nothing.
    let reader = key_of(
        &app.create_key_with(json!({"name": "r", "permissions": {t: 4}}))
            .await,
    );
    resource
        .assert_read_only(app, &reader, &path, &guarded, &id)
        .await;
    resource.assert_cannot_create(app, &reader).await;
    let listed = app.as_key(&reader).get(&collection).await;
    let mut listed = names(&listed.body);
    listed.sort();
    let mut all = names(&app.get(&collection).await.body);
    all.sort();
    assert_eq!(listed, all, "{t}");
    for name in ["by writer", "guarded", "other"] {
        assert!(
            listed.iter().any(|n| n == name),
            "{t}: {name} in {listed:?}"
        );
    }

    // Read through an object entry: that object only, no change.
    let object_key = app.create_key_with(json!({"name": "object"})).await;
    let object_key_id = object_key["id"].as_str().expect("id").to_owned();
    let object_key = key_of(&object_key);
    app.grant(
        &object_key_id,
        json!([{"object_type": t, "object_id": id, "permission": 4}]),
    )
    .await;
    resource
        .assert_read_only(app, &object_key, &path, &guarded, &id)
        .await;
    let reply = app
        .as_key(&object_key)
        .get(&format!("{collection}/{other_id}"))
        .await;
    assert_not_found(resource, &reply, &other_id);
    resource.assert_cannot_create(app, &object_key).await;

    // Read and write through the entry: that object only is listed, and changes.
    app.grant(
        &object_key_id,
        json!([{"object_type": t, "object_id": id, "permission": 6}]),
    )
    .await;
    let reply = app.as_key(&object_key).get(&collection).await;
    assert_eq!(names(&reply.body), ["guarded"], "{t}");
    assert_eq!(ids(&reply.body), std::slice::from_ref(&id), "{t}");
    let reply = app
        .as_key(&object_key)
        .get(&format!("{collection}/{other_id}"))
        .await;
    assert_not_found(resource, &reply, &other_id);
    for (method, target, body, status) in resource.changes(&path) {
        let reply = app
            .req(method, &target)
            .as_key(&object_key)
            .json(&body)
            .send()
            .await;
        assert_eq!(reply.status, status, "{t}: {target}: {}", reply.text);
    }
    let reply = app
        .as_key(&object_key)
        .patch(&path, &json!({"description": "by object entry"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{t}: {}", reply.text);
    assert_eq!(reply.body["description"], "by object entry", "{t}");
    // Creating still needs write on the type.
    resource.assert_cannot_create(app, &object_key).await;

    // An entry on an unknown object: the long-form 404, without details.
    let unknown = Uuid::new_v4();
    let entries_path = format!("/api-keys/{object_key_id}/permissions");
    let reply = app
        .post(
            &entries_path,
            &json!([{"object_type": t, "object_id": unknown, "permission": 4}]),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        &format!("{} with id {unknown} not found", resource.display_name),
    );
    assert!(
        reply.body["error"].get("details").is_none(),
        "{t}: unexpected details: {}",
        reply.text
    );

    // Deleting the object removes the entries on it.
    let reply = app.get(&entries_path).await;
    assert_eq!(reply.status, StatusCode::OK, "{t}: {}", reply.text);
    assert_eq!(
        reply.body,
        json!([{"object_type": t, "object_id": id, "permission": 6, "classifications": []}]),
        "{t}"
    );
    let reply = app.as_key(&object_key).delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{t}: {}", reply.text);
    let reply = app.get(&entries_path).await;
    assert_eq!(reply.status, StatusCode::OK, "{t}: {}", reply.text);
    assert_eq!(reply.body, json!([]), "{t}");
    assert_eq!(
        app.count("SELECT count(*) FROM permissions WHERE object_id = $1", &id)
            .await,
        0,
        "{t}"
    );
}
