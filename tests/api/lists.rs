//! List machinery on `GET /api-keys`: pagination, counting, ordering, filters, `query_info`.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_error, assert_invalid_order_by, assert_plain, assert_utc_timestamp, ids, names,
    ok, spawn_app,
};

/// Names of the keys created by [`seeded_app`], in creation order.
const NAMES: [&str; 7] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
];

/// An app with seven keys besides the master key; returns the created keys in order.
async fn seeded_app() -> (TestApp, Vec<Value>) {
    let app = spawn_app().await;
    let mut created = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let description = if i % 2 == 0 {
            json!(format!("even key {name}"))
        } else {
            Value::Null
        };
        created.push(
            app.create_key_with(json!({"name": name, "description": description}))
                .await,
        );
    }
    (app, created)
}

/// Every id, in the default order (id ascending).
async fn all_ids(app: &TestApp) -> Vec<String> {
    let reply = app.get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    ids(&reply.body)
}

fn cursor(body: &Value, which: &str) -> String {
    body["page_info"][which]
        .as_str()
        .unwrap_or_else(|| panic!("no {which} cursor: {body}"))
        .to_owned()
}

// ---- Cursor mode -------------------------------------------------------------------------

#[tokio::test]
async fn default_page_is_cursor_mode_in_id_order() {
    let (app, created) = seeded_app().await;
    let body = ok(&app, "/api-keys").await;
    let page_ids = ids(&body);
    assert_eq!(page_ids.len(), 8);
    let mut sorted = page_ids.clone();
    sorted.sort();
    assert_eq!(page_ids, sorted, "default order is id ascending");
    let expected: BTreeSet<String> = created
        .iter()
        .map(|k| k["id"].as_str().expect("id").to_owned())
        .chain([app.master_id.to_string()])
        .collect();
    assert_eq!(page_ids.iter().cloned().collect::<BTreeSet<_>>(), expected);

    let page_info = body["page_info"].as_object().expect("page_info");
    assert_eq!(page_info["has_next"], false);
    assert_eq!(page_info["has_prev"], false);
    assert_eq!(page_info["order_by"], Value::Null);
    assert!(page_info["before"].is_string());
    assert!(page_info["after"].is_string());
    assert!(!page_info.contains_key("count"));
    assert!(!page_info.contains_key("limit"));
    assert!(!page_info.contains_key("offset"));
    assert_eq!(body["query_info"], json!({}));
}

#[tokio::test]
async fn default_page_size_is_25() {
    let app = spawn_app().await;
    for i in 0..25 {
        app.create_key_with(json!({"name": format!("k{i:02}")}))
            .await;
    }
    let body = ok(&app, "/api-keys").await;
    assert_eq!(ids(&body).len(), 25);
    assert_eq!(body["page_info"]["has_next"], true);
    let rest = ok(&app, &format!("/api-keys?after={}", cursor(&body, "after"))).await;
    assert_eq!(ids(&rest).len(), 1);
    assert_eq!(rest["page_info"]["has_next"], false);
    let body = ok(&app, "/api-keys?limit=100&offset=0").await;
    assert_eq!(ids(&body).len(), 26);
    let body = ok(&app, "/api-keys?offset=1").await;
    assert_eq!(ids(&body).len(), 25);
    assert_eq!(body["page_info"]["limit"], 25);
}

#[tokio::test]
async fn forward_paging_visits_every_key_once() {
    let (app, _) = seeded_app().await;
    let expected = all_ids(&app).await;
    let mut seen = Vec::new();
    let mut path = "/api-keys?first=2".to_owned();
    let mut pages = 0;
    loop {
        let body = ok(&app, &path).await;
        pages += 1;
        let page = ids(&body);
        assert!(page.len() <= 2);
        assert_eq!(body["page_info"]["has_prev"], pages > 1, "page {pages}");
        seen.extend(page);
        if body["page_info"]["has_next"] == false {
            break;
        }
        assert_eq!(body["page_info"]["has_next"], true);
        assert!(pages < 10, "paging does not end");
        path = format!("/api-keys?first=2&after={}", cursor(&body, "after"));
    }
    assert_eq!(pages, 4);
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn backward_paging_with_last_and_before() {
    let (app, _) = seeded_app().await;
    let expected = all_ids(&app).await;
    // The last two keys.
    let body = ok(&app, "/api-keys?last=2").await;
    assert_eq!(ids(&body), expected[6..8].to_vec());
    // The two before them, in ascending order.
    let body = ok(
        &app,
        &format!("/api-keys?last=2&before={}", cursor(&body, "before")),
    )
    .await;
    assert_eq!(ids(&body), expected[4..6].to_vec());
    assert_eq!(body["page_info"]["has_next"], true);
    assert_eq!(body["page_info"]["has_prev"], true);
    // Collect everything backwards.
    let mut seen = ids(&body);
    let mut before = cursor(&body, "before");
    loop {
        let body = ok(&app, &format!("/api-keys?last=3&before={before}")).await;
        let mut page = ids(&body);
        page.extend(seen);
        seen = page;
        if body["page_info"]["has_prev"] == false {
            break;
        }
        before = cursor(&body, "before");
    }
    assert_eq!(seen, expected[..6].to_vec());
}

#[tokio::test]
async fn after_cursor_of_a_middle_page_continues_there() {
    let (app, _) = seeded_app().await;
    let expected = all_ids(&app).await;
    let body = ok(&app, "/api-keys?first=3").await;
    assert_eq!(ids(&body), expected[..3].to_vec());
    assert_eq!(body["page_info"]["has_prev"], false);
    let body = ok(
        &app,
        &format!("/api-keys?first=3&after={}", cursor(&body, "after")),
    )
    .await;
    assert_eq!(ids(&body), expected[3..6].to_vec());
    assert_eq!(body["page_info"]["has_prev"], true);
    assert_eq!(body["page_info"]["has_next"], true);
    // `after` alone uses the default page size.
    let body = ok(
        &app,
        &format!("/api-keys?after={}", cursor(&body, "before")),
    )
    .await;
    assert_eq!(ids(&body), expected[4..].to_vec());
    assert_eq!(body["page_info"]["has_next"], false);
}

#[tokio::test]
async fn first_zero_is_an_empty_page_with_more_to_come() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?first=0").await;
    assert_eq!(body["data"], json!([]));
    let page_info = body["page_info"].as_object().expect("page_info");
    assert_eq!(page_info["has_next"], true);
    assert!(!page_info.contains_key("before"), "{body}");
    assert!(!page_info.contains_key("after"), "{body}");
}

#[tokio::test]
async fn empty_page_after_the_last_key_has_no_cursors() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?last=1").await;
    let body = ok(&app, &format!("/api-keys?after={}", cursor(&body, "after"))).await;
    assert_eq!(body["data"], json!([]));
    assert_eq!(body["page_info"]["has_next"], false);
    assert!(body["page_info"].get("before").is_none(), "{body}");
    assert!(body["page_info"].get("after").is_none(), "{body}");
}

#[tokio::test]
async fn count_is_added_on_request() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?first=2&count=true").await;
    assert_eq!(body["page_info"]["count"], 8);
    assert_eq!(ids(&body).len(), 2);
    let body = ok(&app, "/api-keys?count=false").await;
    assert!(body["page_info"].get("count").is_none());
    let body = ok(&app, "/api-keys?count=true&name$startswith=a").await;
    assert_eq!(body["page_info"]["count"], 1);
    let body = ok(&app, "/api-keys?count=true&limit=1&offset=3").await;
    assert_eq!(body["page_info"]["count"], 8);
}

// ---- Offset mode -------------------------------------------------------------------------

#[tokio::test]
async fn offset_mode_pages_by_limit_and_offset() {
    let (app, _) = seeded_app().await;
    let expected = all_ids(&app).await;
    let body = ok(&app, "/api-keys?limit=2&offset=2").await;
    assert_eq!(ids(&body), expected[2..4].to_vec());
    let page_info = body["page_info"].as_object().expect("page_info");
    assert_eq!(page_info["limit"], 2);
    assert_eq!(page_info["offset"], 2);
    assert_eq!(page_info["order_by"], Value::Null);
    for absent in ["has_next", "has_prev", "before", "after", "count"] {
        assert!(!page_info.contains_key(absent), "{absent} in {body}");
    }
    let body = ok(&app, "/api-keys?limit=5&offset=6").await;
    assert_eq!(ids(&body), expected[6..].to_vec());
    let body = ok(&app, "/api-keys?limit=5&offset=20").await;
    assert_eq!(body["data"], json!([]));
    let body = ok(&app, "/api-keys?limit=0").await;
    assert_eq!(body["data"], json!([]));
    assert_eq!(body["page_info"]["offset"], 0);
}

// ---- Pagination errors -------------------------------------------------------------------

#[tokio::test]
async fn conflicting_pagination_parameters_are_refused() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?first=2").await;
    let after = cursor(&body, "after");
    for query in [
        "first=2&limit=2".to_owned(),
        "first=1&last=1".to_owned(),
        "last=2&offset=1".to_owned(),
        format!("after={after}&limit=2"),
        format!("after={after}&before={after}"),
        "after=zzz".to_owned(),
        "before=%25%25%25".to_owned(),
        "after=W10".to_owned(),
    ] {
        let reply = app.get(&format!("/api-keys?{query}")).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
        assert!(reply.body["error"].get("details").is_none(), "{query}");
    }
}

#[tokio::test]
async fn cursor_must_match_the_order_fields() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?order_by=name&order_by=id&first=2").await;
    let two_fields = cursor(&body, "after");
    let reply = app
        .get(&format!("/api-keys?first=2&after={two_fields}"))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
    let body = ok(&app, "/api-keys?first=2").await;
    let one_field = cursor(&body, "after");
    let reply = app
        .get(&format!(
            "/api-keys?order_by=name&order_by=id&first=2&after={one_field}"
        ))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
    // With the same order it continues.
    let body = ok(
        &app,
        &format!("/api-keys?order_by=name&order_by=id&first=2&after={two_fields}"),
    )
    .await;
    assert_eq!(names(&body), vec!["charlie", "delta"]);
}

// ---- Ordering ----------------------------------------------------------------------------

#[tokio::test]
async fn order_by_name_ascending_and_descending() {
    let (app, _) = seeded_app().await;
    let mut ascending: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
    ascending.push("master".to_owned());
    ascending.sort();

    let body = ok(&app, "/api-keys?order_by=name").await;
    assert_eq!(names(&body), ascending);
    assert_eq!(body["page_info"]["order_by"], json!(["name"]));

    let body = ok(&app, "/api-keys?order_by=%2Bname").await;
    assert_eq!(names(&body), ascending);
    assert_eq!(body["page_info"]["order_by"], json!(["name"]));

    let body = ok(&app, "/api-keys?order_by=-name").await;
    let mut descending = ascending.clone();
    descending.reverse();
    assert_eq!(names(&body), descending);
    assert_eq!(body["page_info"]["order_by"], json!(["-name"]));

    let body = ok(&app, "/api-keys?order_by=-created_at&limit=3").await;
    assert_eq!(names(&body), vec!["golf", "foxtrot", "echo"]);
    assert_eq!(body["page_info"]["order_by"], json!(["-created_at"]));
}

#[tokio::test]
async fn paging_in_name_order_visits_every_key_once() {
    let (app, _) = seeded_app().await;
    let mut expected: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
    expected.push("master".to_owned());
    expected.sort();
    let mut seen = Vec::new();
    let mut path = "/api-keys?order_by=name&order_by=id&first=3".to_owned();
    loop {
        let body = ok(&app, &path).await;
        seen.extend(names(&body));
        if body["page_info"]["has_next"] == false {
            break;
        }
        assert!(seen.len() < 20, "paging does not end");
        path = format!(
            "/api-keys?order_by=name&order_by=id&first=3&after={}",
            cursor(&body, "after")
        );
    }
    assert_eq!(seen, expected);

    // Descending, backwards from the end.
    let body = ok(&app, "/api-keys?order_by=-name&order_by=id&last=2").await;
    assert_eq!(names(&body), vec!["bravo", "alpha"]);
}

#[tokio::test]
async fn unencoded_plus_in_order_by_is_refused() {
    let (app, _) = seeded_app().await;
    let reply = app.get("/api-keys?order_by=+name").await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );
    let details = reply.body["error"]["details"].clone();
    // "As sent": either the raw `+name` or its form-decoded ` name`.
    assert!(
        details == json!(["+name"]) || details == json!([" name"]),
        "{details}"
    );
}

#[tokio::test]
async fn unsortable_fields_are_listed_in_details() {
    let (app, _) = seeded_app().await;
    let reply = app.get("/api-keys?order_by=secret").await;
    assert_invalid_order_by(&reply, json!(["secret"]));

    let reply = app
        .get("/api-keys?order_by=name&order_by=-description&order_by=active&order_by=id")
        .await;
    assert_invalid_order_by(&reply, json!(["-description", "active"]));
}

// ---- Filters -----------------------------------------------------------------------------

#[tokio::test]
async fn name_filters() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?name=charlie").await;
    assert_eq!(names(&body), vec!["charlie"]);
    assert_eq!(body["query_info"], json!({"name": "charlie"}));

    let body = ok(&app, "/api-keys?name=Charlie").await;
    assert_eq!(body["data"], json!([]));

    let body = ok(
        &app,
        "/api-keys?name$contains=a&name$contains=l&order_by=name",
    )
    .await;
    assert_eq!(names(&body), vec!["alpha", "charlie", "delta"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["a", "l"]}));

    let body = ok(&app, "/api-keys?name$contains=o&order_by=name").await;
    assert_eq!(names(&body), vec!["bravo", "echo", "foxtrot", "golf"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["o"]}));

    let body = ok(&app, "/api-keys?name$startswith=ch").await;
    assert_eq!(names(&body), vec!["charlie"]);
    assert_eq!(body["query_info"], json!({"name$startswith": "ch"}));

    let body = ok(&app, "/api-keys?name$gt=echo&order_by=name").await;
    assert_eq!(names(&body), vec!["foxtrot", "golf", "master"]);
    assert_eq!(body["query_info"], json!({"name$gt": "echo"}));

    let body = ok(&app, "/api-keys?name$ge=echo&name$lt=golf&order_by=name").await;
    assert_eq!(names(&body), vec!["echo", "foxtrot"]);
    assert_eq!(
        body["query_info"],
        json!({"name$ge": "echo", "name$lt": "golf"})
    );

    let body = ok(&app, "/api-keys?name$le=bravo&order_by=name").await;
    assert_eq!(names(&body), vec!["alpha", "bravo"]);
}

#[tokio::test]
async fn contains_treats_underscore_and_percent_as_wildcards() {
    let (app, _) = seeded_app().await;
    let body = ok(&app, "/api-keys?name$contains=_lph").await;
    assert_eq!(names(&body), vec!["alpha"]);
    let body = ok(&app, "/api-keys?name$startswith=f%25t").await;
    assert_eq!(names(&body), vec!["foxtrot"]);
}

#[tokio::test]
async fn description_and_active_filters() {
    let (app, created) = seeded_app().await;
    let body = ok(&app, "/api-keys?description$contains=even&order_by=name").await;
    assert_eq!(names(&body), vec!["alpha", "charlie", "echo", "golf"]);
    assert_eq!(
        body["query_info"],
        json!({"description$contains": ["even"]})
    );

    let body = ok(&app, "/api-keys?description=even%20key%20echo").await;
    assert_eq!(names(&body), vec!["echo"]);
    assert_eq!(body["query_info"], json!({"description": "even key echo"}));

    let body = ok(&app, "/api-keys?description=even+key+golf").await;
    assert_eq!(names(&body), vec!["golf"]);

    let delta = created[3]["id"].as_str().expect("id");
    let reply = app
        .patch(&format!("/api-keys/{delta}"), &json!({"active": false}))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = ok(&app, "/api-keys?active=false").await;
    assert_eq!(names(&body), vec!["delta"]);
    assert_eq!(body["query_info"], json!({"active": false}));
    let body = ok(&app, "/api-keys?active=true&count=true").await;
    assert_eq!(body["page_info"]["count"], 7);
    assert_eq!(body["query_info"], json!({"active": true}));
}

#[tokio::test]
async fn id_filter() {
    let (app, created) = seeded_app().await;
    let id = created[2]["id"].as_str().expect("id");
    let body = ok(&app, &format!("/api-keys?id={id}")).await;
    assert_eq!(names(&body), vec!["charlie"]);
    assert_eq!(body["query_info"], json!({"id": id}));
    let body = ok(&app, &format!("/api-keys?id={}", uuid::Uuid::new_v4())).await;
    assert_eq!(body["data"], json!([]));
}

#[tokio::test]
async fn timestamp_filters_take_z_or_an_encoded_offset() {
    let (app, created) = seeded_app().await;
    let pivot = created[3]["created_at"].as_str().expect("created_at");
    let pivot_at = assert_utc_timestamp(&created[3]["created_at"]);

    let body = ok(
        &app,
        &format!("/api-keys?created_at$gt={pivot}&order_by=name"),
    )
    .await;
    assert_eq!(names(&body), vec!["echo", "foxtrot", "golf"]);
    let echoed = assert_utc_timestamp(&body["query_info"]["created_at$gt"]);
    assert_eq!(echoed, pivot_at);
    assert_eq!(
        body["query_info"].as_object().map(|o| o.len()),
        Some(1),
        "{}",
        body["query_info"]
    );

    // The same instant written with an explicit zero offset and with +02:00.
    let zero = pivot.replace('Z', "%2B00:00");
    let body = ok(
        &app,
        &format!("/api-keys?created_at$gt={zero}&order_by=name"),
    )
    .await;
    assert_eq!(names(&body), vec!["echo", "foxtrot", "golf"]);
    assert_eq!(
        assert_utc_timestamp(&body["query_info"]["created_at$gt"]),
        pivot_at
    );
    let shifted = pivot_at
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).expect("offset"))
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
        .replace('+', "%2B");
    let body = ok(
        &app,
        &format!("/api-keys?created_at$le={shifted}&order_by=name"),
    )
    .await;
    assert_eq!(
        names(&body),
        vec!["alpha", "bravo", "charlie", "delta", "master"]
    );
    assert_eq!(
        assert_utc_timestamp(&body["query_info"]["created_at$le"]),
        pivot_at
    );

    let body = ok(&app, &format!("/api-keys?created_at={pivot}")).await;
    assert_eq!(names(&body), vec!["delta"]);

    let body = ok(&app, "/api-keys?updated_at$lt=2000-01-01T00:00:00Z").await;
    assert_eq!(body["data"], json!([]));
    let body = ok(
        &app,
        "/api-keys?updated_at$ge=2000-01-01T00:00:00Z&count=true",
    )
    .await;
    assert_eq!(body["page_info"]["count"], 8);
}

#[tokio::test]
async fn expiration_filter() {
    let (app, created) = seeded_app().await;
    let bravo = created[1]["id"].as_str().expect("id");
    let reply = app
        .patch(
            &format!("/api-keys/{bravo}"),
            &json!({"expiration": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = ok(&app, "/api-keys?expiration$gt=2100-01-01T00:00:00Z").await;
    assert_eq!(names(&body), vec!["bravo"]);
    let body = ok(&app, "/api-keys?expiration$lt=2100-01-01T00:00:00Z").await;
    assert_eq!(body["data"], json!([]));
}

#[tokio::test]
async fn several_filters_must_all_match() {
    let (app, _) = seeded_app().await;
    let body = ok(
        &app,
        "/api-keys?name$contains=o&description$contains=even&order_by=name",
    )
    .await;
    assert_eq!(names(&body), vec!["echo", "golf"]);
    assert_eq!(
        body["query_info"],
        json!({"name$contains": ["o"], "description$contains": ["even"]})
    );
}

#[tokio::test]
async fn unknown_query_parameters_are_ignored() {
    let (app, _) = seeded_app().await;
    let body = ok(
        &app,
        "/api-keys?colour=blue&name=golf&secret=x&name$regex=g&expiration$contains=1",
    )
    .await;
    assert_eq!(names(&body), vec!["golf"]);
    assert_eq!(body["query_info"], json!({"name": "golf"}));
}

#[tokio::test]
async fn filter_value_errors_are_plain_text() {
    let (app, _) = seeded_app().await;
    for query in [
        "active=yes",
        "id=123",
        "created_at$gt=2024-01-01",
        "created_at$gt=2024-01-01T00:00:00+01:00",
        "name$startswith=a&name$startswith=b",
    ] {
        let reply = app.get(&format!("/api-keys?{query}")).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
    }
}
