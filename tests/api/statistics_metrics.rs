//! `GET /statistics` and `GET /metrics`.

use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{TestApp, assert_error, assert_plain, spawn_app};

const STATISTICS_FIELDS: [&str; 9] = [
    "documents_added",
    "documents_processed",
    "documents_processed_latency",
    "documents_failed",
    "agent_executions",
    "agent_execution_latency",
    "agent_execution_latencies",
    "document_queue",
    "document_queue_processed_latencies",
];

#[tokio::test]
async fn statistics_of_a_fresh_app() {
    let app = spawn_app().await;
    let reply = app.req(Method::GET, "/statistics?interval=1h").send().await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let body = reply.body.as_object().expect("object");
    for field in STATISTICS_FIELDS {
        assert!(body.contains_key(field), "{field} missing: {}", reply.text);
    }
    assert_eq!(body["document_queue"], json!(0));
    for field in [
        "documents_added",
        "documents_processed",
        "documents_processed_latency",
        "documents_failed",
        "agent_executions",
        "agent_execution_latency",
    ] {
        assert_eq!(body[field].as_f64(), Some(0.0), "{field}");
    }
    assert_eq!(body["agent_execution_latencies"], json!([]));
    assert_eq!(body["document_queue_processed_latencies"], json!([]));
}

#[tokio::test]
async fn statistics_accept_prometheus_durations() {
    let app = spawn_app().await;
    for interval in ["1h30m", "0", "15m", "24h", "1d", "500ms", "1y2w3d4h5m6s7ms"] {
        let reply = app
            .req(Method::GET, &format!("/statistics?interval={interval}"))
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{interval}: {}", reply.text);
        assert_eq!(reply.body["document_queue"], json!(0), "{interval}");
    }
    // An API key is accepted but not needed.
    let reply = app.get("/statistics?interval=5m").await;
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn statistics_reject_an_invalid_interval() {
    let app = spawn_app().await;
    for interval in ["abc", "1h1h", "1m1h", "-1h", "1", "1.5h"] {
        let reply = app
            .req(Method::GET, &format!("/statistics?interval={interval}"))
            .send()
            .await;
        assert_error(
            &reply,
            StatusCode::BAD_REQUEST,
            &format!(
                "Invalid interval format: {interval}. Must be a valid Prometheus duration (e.g., 15m, 1h, 24h)."
            ),
        );
    }
}

#[tokio::test]
async fn statistics_need_an_interval() {
    let app = spawn_app().await;
    for path in ["/statistics", "/statistics?other=1h"] {
        let reply = app.req(Method::GET, path).send().await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
    }
}

async fn scrape(app: &TestApp) -> String {
    let reply = app.req(Method::GET, "/metrics").send().await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("x-request-id").is_none());
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("text/plain"),
        "{:?}",
        reply.header("content-type")
    );
    reply.text
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[tokio::test]
async fn metrics_exposition_has_type_lines_only() {
    let app = spawn_app().await;
    app.get("/api-keys").await;
    let text = scrape(&app).await;
    for line in [
        "# TYPE axum_http_requests_total counter",
        "# TYPE axum_http_requests_duration_seconds histogram",
        "# TYPE axum_http_requests_pending gauge",
        "# TYPE service_document_queue_added counter",
    ] {
        assert!(has_line(&text, line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("# HELP"), "{text}");
    assert!(has_line(&text, "service_document_queue_added 0"), "{text}");
}

#[tokio::test]
async fn metrics_count_requests_by_route_template() {
    let app = spawn_app().await;
    let missing = Uuid::new_v4();
    let reply = app.get(&format!("/api-keys/{missing}")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let reply = app.req(Method::GET, "/api-keys").send().await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    for _ in 0..2 {
        assert_eq!(app.get("/api-keys").await.status, StatusCode::OK);
    }
    let created = app.create_key_with(json!({"name": "m"})).await;
    let id = created["id"].as_str().expect("id");
    assert_eq!(
        app.get(&format!("/api-keys/{id}/permissions")).await.status,
        StatusCode::OK
    );

    let first = scrape(&app).await;
    for line in [
        r#"axum_http_requests_total{endpoint="/api-keys/{api_key_id}",method="GET",status="404"} 1"#,
        r#"axum_http_requests_total{endpoint="/api-keys",method="GET",status="401"} 1"#,
        r#"axum_http_requests_total{endpoint="/api-keys",method="GET",status="200"} 2"#,
        r#"axum_http_requests_total{endpoint="/api-keys",method="POST",status="201"} 1"#,
        r#"axum_http_requests_total{endpoint="/api-keys/{api_key_id}/permissions",method="GET",status="200"} 1"#,
    ] {
        assert!(has_line(&first, line), "missing {line:?} in\n{first}");
    }
    assert!(!first.contains(&missing.to_string()), "raw path in labels");

    // `/metrics` counts itself, visible from the next scrape.
    let second = scrape(&app).await;
    assert!(
        has_line(
            &second,
            r#"axum_http_requests_total{endpoint="/metrics",method="GET",status="200"} 1"#
        ),
        "{second}"
    );
}

#[tokio::test]
async fn metrics_count_reference_routes_and_rejections() {
    let app = spawn_app().await;
    app.req(Method::GET, "/").send().await;
    app.req(Method::GET, "/healthz").send().await;
    app.req(Method::GET, "/statistics?interval=abc")
        .send()
        .await;
    app.req(Method::PUT, "/api-keys").send().await;
    let text = scrape(&app).await;
    for line in [
        r#"axum_http_requests_total{endpoint="/",method="GET",status="200"} 1"#,
        r#"axum_http_requests_total{endpoint="/healthz",method="GET",status="200"} 1"#,
        r#"axum_http_requests_total{endpoint="/statistics",method="GET",status="400"} 1"#,
        r#"axum_http_requests_total{endpoint="/api-keys",method="PUT",status="405"} 1"#,
    ] {
        assert!(has_line(&text, line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn metrics_duration_histogram_has_the_interface_buckets() {
    let app = spawn_app().await;
    app.get("/api-keys").await;
    let text = scrape(&app).await;
    let prefix = r#"axum_http_requests_duration_seconds_bucket{endpoint="/api-keys",method="GET",status="200",le=""#;
    let bounds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| rest.split_once('"').map(|(le, _)| le))
        .collect();
    assert_eq!(
        bounds,
        vec![
            "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"
        ],
        "{text}"
    );
    assert!(has_line(&text, &format!("{prefix}+Inf\"}} 1")), "{text}");
    assert!(
        has_line(
            &text,
            r#"axum_http_requests_duration_seconds_count{endpoint="/api-keys",method="GET",status="200"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn metrics_pending_gauge_returns_to_zero() {
    let app = spawn_app().await;
    app.get("/api-keys").await;
    let text = scrape(&app).await;
    assert!(
        has_line(
            &text,
            r#"axum_http_requests_pending{endpoint="/api-keys",method="GET"} 0"#
        ),
        "{text}"
    );
    // The scrape in progress counts itself.
    assert!(
        has_line(
            &text,
            r#"axum_http_requests_pending{endpoint="/metrics",method="GET"} 1"#
        ),
        "{text}"
    );
}

/// `document_queue` counts the jobs waiting or being processed, not the stream's history.
#[tokio::test]
async fn document_queue_counts_jobs_not_yet_done() {
    let app = crate::helpers::spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let queue = || async {
        let reply = app.req(Method::GET, "/statistics?interval=1h").send().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.body["document_queue"].clone()
    };
    app.submit_text(&pid, "one", "The first document.").await;
    app.submit_text(&pid, "two", "The second document.").await;
    assert_eq!(queue().await, json!(2));

    let outcome = app.step().await;
    assert_eq!(outcome.stored, 2, "{outcome:?}");
    assert_eq!(queue().await, json!(0), "done jobs are no longer queued");
}

/// A key check that cannot read the database answers the interface's 401, and is counted in
/// `trove_key_check_unavailable_total` so that an outage is told apart from bad credentials.
#[tokio::test]
async fn key_checks_without_a_database_are_counted() {
    let app = spawn_app().await;
    let (key, secret) = app.master_key();
    // Bad credentials are not outages.
    let reply = app.as_key((&key, "wrong")).get("/api-keys").await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    let unavailable = "trove_key_check_unavailable_total";
    assert_eq!(app.api_metric(unavailable).await, 0.0);

    app.state.pool.close().await;
    for _ in 0..3 {
        let reply = app.as_key((&key, &secret)).get("/api-keys").await;
        assert_error(
            &reply,
            StatusCode::UNAUTHORIZED,
            "Invalid API Key or Secret",
        );
    }
    assert_eq!(app.api_metric(unavailable).await, 3.0);
}
