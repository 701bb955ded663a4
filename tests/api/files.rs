//! Files submitted as documents (`POST /pipelines/{pipeline_id}/files`, an extension): the
//! multipart body and its errors, extraction in the worker, failures with their reasons, and
//! the extracted text found by full-text and similarity search.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::documents::VERSION_FIELDS;
use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid_parameter, assert_not_found_with_id,
    assert_plain, eventually, keys_of, spawn_app_with, spawn_app_without_worker, str_of,
    worker_metric,
};

const BOUNDARY: &str = "trove-test-boundary-7d1f";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/files/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One part of a multipart body: a name, a file name for file parts, the bytes.
struct Part<'a> {
    name: &'a str,
    file_name: Option<&'a str>,
    bytes: Vec<u8>,
}

fn text(name: &str, value: impl Into<Vec<u8>>) -> Part<'_> {
    Part {
        name,
        file_name: None,
        bytes: value.into(),
    }
}

fn file<'a>(file_name: &'a str, bytes: Vec<u8>) -> Part<'a> {
    Part {
        name: "file",
        file_name: Some(file_name),
        bytes,
    }
}

/// The `multipart/form-data` body of `parts`.
fn multipart(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for part in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match part.file_name {
            Some(file_name) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"; filename=\"{file_name}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n",
                    part.name
                )
                .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"\r\n\r\n",
                    part.name
                )
                .as_bytes(),
            ),
        }
        body.extend_from_slice(&part.bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn content_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// `POST /pipelines/{pid}/files` of a raw multipart body with the master key.
async fn upload_raw(app: &TestApp, pid: &str, body: Vec<u8>) -> Reply {
    app.req(Method::POST, &format!("/pipelines/{pid}/files"))
        .as_master()
        .header("content-type", content_type())
        .body(body)
        .send()
        .await
}

async fn upload(app: &TestApp, pid: &str, parts: &[Part<'_>]) -> Reply {
    upload_raw(app, pid, multipart(parts)).await
}

/// Uploads a fixture as a `public` document; returns the 201 body.
async fn upload_fixture(app: &TestApp, pid: &str, name: &str) -> Value {
    let reply = upload(
        app,
        pid,
        &[file(name, fixture(name)), text("classification", "public")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{name}: {}", reply.text);
    reply.body
}

/// A pipeline with full-text search (the test app's `default` model, schema `year`, `team`).
async fn pipeline(app: &TestApp) -> String {
    app.new_pipeline_id(json!({"has_full_text_search": true}))
        .await
}

/// The versions of a document as `GET /pipelines/{pid}/documents/{id}` answers them.
async fn read(app: &TestApp, pid: &str, version: &Value) -> Value {
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}",
            str_of(version, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body[0].clone()
}

async fn documents_in(app: &TestApp, pid: &str) -> i64 {
    app.count("SELECT count(*) FROM documents WHERE pipeline_id = $1", pid)
        .await
}

/// The document ids of a search's hits.
async fn hits(app: &TestApp, pid: &str, kind: &str, query: &str) -> Vec<String> {
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": query, "type": kind, "classification": "public", "params": {"k": 1}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| str_of(hit, "document_id").to_owned())
        .collect()
}

#[tokio::test]
async fn files_are_extracted_and_found_by_full_text_and_similarity_search() {
    let app = spawn_app_with(AppOptions::default()).await;
    let pid = pipeline(&app).await;
    let pdf = upload_fixture(&app, &pid, "report.pdf").await;
    assert_eq!(keys_of(&pdf), VERSION_FIELDS, "{pdf}");
    assert_eq!(pdf["status"], "pending");
    assert_eq!(pdf["external_identifier"], "report.pdf");
    assert_eq!(pdf["metadata"], json!({}));
    let docx = upload_fixture(&app, &pid, "notes.docx").await;
    let reply = upload(
        &app,
        &pid,
        &[
            text("classification", "public"),
            file("page.html", fixture("page.html")),
            text("external_identifier", "garden"),
            text("metadata", r#"{"year": 2026, "team": "gardens"}"#),
            text("expire_older_versions", "false"),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let html = reply.body;
    assert_eq!(html["external_identifier"], "garden");
    assert_eq!(html["metadata"], json!({"year": 2026, "team": "gardens"}));

    for version in [&pdf, &docx, &html] {
        eventually(
            "the file's version is processed",
            std::time::Duration::from_secs(60),
            || async {
                let read = read(&app, &pid, version).await;
                assert_ne!(read["status"], "failed", "{read}");
                (read["status"] == "success").then_some(())
            },
        )
        .await;
        let read = read(&app, &pid, version).await;
        assert!(read.get("status_reason").is_none(), "{read}");
    }

    // The HTML page's text, as extracted, is its fragment.
    let reply = app
        .get(&format!(
            "/pipelines/{pid}/documents/{}/fragments",
            str_of(&html, "id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["data"][0]["page_content"],
        "Garden Almanac\n\nSpring Planting\n\n\
         Sow the seeds after the last frost, in well-drained soil.\n\nChecklist\n\n\
         Prune the lavender hedges\nTurn the compost heap\n\nPlant | Month\nTomato | März\n\n\
         Line one\nLine two"
    );

    // A phrase from a PDF table, a DOCX heading and an HTML list.
    for (query, version) in [
        ("ultramarine blue", &pdf),
        ("Harbour Inspection Schedule", &docx),
        ("Prune the lavender hedges", &html),
    ] {
        let id = str_of(version, "id");
        assert_eq!(hits(&app, &pid, "search", query).await, [id], "{query}");
        assert_eq!(hits(&app, &pid, "similarity", query).await, [id], "{query}");
    }
}

#[tokio::test]
async fn a_file_that_cannot_be_read_fails_alone_with_its_reason() {
    let app = spawn_app_without_worker().await;
    let pid = pipeline(&app).await;
    let encrypted = upload_fixture(&app, &pid, "encrypted.pdf").await;
    let image_only = upload_fixture(&app, &pid, "image-only.pdf").await;
    let truncated = upload_fixture(&app, &pid, "truncated.docx").await;
    let readable = upload_fixture(&app, &pid, "notes.odt").await;
    let worker = app.worker().await;
    let outcome = worker
        .step(std::time::Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!((outcome.jobs, outcome.stored, outcome.failed), (4, 1, 3));
    assert_eq!(worker_metric(&worker, "service_document_queue_failed"), 3.0);
    for (version, reason) in [
        (&encrypted, "the PDF is encrypted"),
        (
            &image_only,
            "the PDF has no text layer (scanned or image-only pages)",
        ),
        (
            &truncated,
            "the DOCX file is damaged: invalid Zip archive: Could not find EOCD",
        ),
    ] {
        let read = read(&app, &pid, version).await;
        assert_eq!(read["status"], "failed", "{read}");
        assert_eq!(read["status_reason"], reason, "{read}");
    }
    let read = read(&app, &pid, &readable).await;
    assert_eq!(read["status"], "success", "{read}");
    assert!(read.get("status_reason").is_none(), "{read}");
    // The raw bytes are gone, and nothing comes back.
    assert_eq!(
        app.count(
            "SELECT count(*) FROM document_texts t JOIN documents d ON d.id = t.document_id AND d.version = t.version WHERE d.pipeline_id = $1",
            &pid
        )
        .await,
        0
    );
    let again = worker
        .step(std::time::Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(again.jobs, 0);
    // The reason is the document read's alone: lists show versions as submissions do.
    let reply = app.get(&format!("/pipelines/{pid}/documents")).await;
    for version in reply.body["data"].as_array().unwrap() {
        assert_eq!(keys_of(version), VERSION_FIELDS, "{version}");
    }
}

#[tokio::test]
async fn submission_errors_store_nothing() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: [("TROVE_MAX_FILE_BYTES".to_owned(), "4096".to_owned())].into(),
        ..AppOptions::default()
    })
    .await;
    let pid = pipeline(&app).await;
    let added = || app.api_metric("service_document_queue_added");
    let before = added().await;
    let small = || file("notes.txt", b"Some notes.".to_vec());

    // The multipart body.
    let reply = upload(&app, &pid, &[text("classification", "public")]).await;
    assert_invalid_parameter(&reply, "file is required");
    let reply = upload(&app, &pid, &[small()]).await;
    assert_invalid_parameter(&reply, "classification is required");
    let reply = upload(
        &app,
        &pid,
        &[small(), text("classification", b"pub\xfflic".to_vec())],
    )
    .await;
    assert_invalid_parameter(&reply, "classification is not valid UTF-8");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("external_identifier", b"\xc3".to_vec()),
        ],
    )
    .await;
    assert_invalid_parameter(&reply, "external_identifier is not valid UTF-8");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("expire_older_versions", "maybe"),
        ],
    )
    .await;
    assert_invalid_parameter(&reply, "expire_older_versions must be true or false");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("metadata", "{year: 1}"),
        ],
    )
    .await;
    assert_invalid_parameter(
        &reply,
        "metadata is not valid JSON: key must be a string at line 1 column 2",
    );
    let reply = upload(
        &app,
        &pid,
        &[small(), small(), text("classification", "public")],
    )
    .await;
    assert_invalid_parameter(&reply, "file is given more than once");
    let reply = upload(
        &app,
        &pid,
        &[
            file("a\0b.txt", b"x".to_vec()),
            text("classification", "public"),
        ],
    )
    .await;
    // A NUL in a part's headers is refused by the multipart reader.
    assert_invalid_parameter(&reply, "unreadable multipart body: failed to read headers");
    // A body cut short, and one that is not multipart.
    let mut cut = multipart(&[small(), text("classification", "public")]);
    cut.truncate(cut.len() - 30);
    let reply = upload_raw(&app, &pid, cut).await;
    assert_invalid_parameter(
        &reply,
        "unreadable multipart body: field \"classification\" received with incomplete data",
    );
    let reply = app
        .req(Method::POST, &format!("/pipelines/{pid}/files"))
        .as_master()
        .json(&json!({"classification": "public"}))
        .send()
        .await;
    assert_invalid_parameter(
        &reply,
        "unreadable multipart body: expected Content-Type multipart/form-data with a boundary",
    );

    // Over TROVE_MAX_FILE_BYTES: announced, or streamed without a length.
    let large = || file("large.txt", "word ".repeat(1000).into_bytes());
    let reply = upload(&app, &pid, &[large(), text("classification", "public")]).await;
    assert_plain(
        &reply,
        StatusCode::PAYLOAD_TOO_LARGE,
        "Failed to buffer the request body: length limit exceeded",
    );
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        multipart(&[large(), text("classification", "public")])
            .chunks(512)
            .map(|c| Ok(c.to_vec()))
            .collect();
    let reply = app
        .req(Method::POST, &format!("/pipelines/{pid}/files"))
        .as_master()
        .header("content-type", content_type())
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::PAYLOAD_TOO_LARGE,
        "Failed to buffer the request body: length limit exceeded",
    );

    // A type Trove cannot read.
    let reply = upload(
        &app,
        &pid,
        &[
            file("image.txt", fixture("image.png")),
            text("classification", "public"),
        ],
    )
    .await;
    assert_error(
        &reply,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Unsupported file type: image/png",
    );
    assert_eq!(
        reply.body["error"]["details"],
        json!({"supported": [
            "application/pdf",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/vnd.oasis.opendocument.text",
            "text/html",
            "text/markdown",
            "text/plain",
        ]})
    );
    // None of these was counted.
    assert_eq!(added().await, before);

    // The checks of a JSON submission, in its order and with its messages.
    let good = || vec![small(), text("classification", "public")];
    let reply = app
        .req(Method::POST, &format!("/pipelines/{pid}/files"))
        .header("content-type", content_type())
        .body(multipart(&good()))
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
    let missing = uuid::Uuid::now_v7().to_string();
    let reply = upload(&app, &missing, &good()).await;
    assert_not_found_with_id(&reply, "Pipeline not found", &missing);
    let reader = app.create_key(json!({"pipelines": 5}), json!(["*"])).await;
    let reply = app
        .req(Method::POST, &format!("/pipelines/{pid}/files"))
        .as_key(&reader)
        .header("content-type", content_type())
        .body(multipart(&good()))
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &format!(
            "Unauthorized: access level AccessLevel(WRITE) required for pipelines with id Some({pid})"
        ),
    );
    let reply = upload(&app, &pid, &[small(), text("classification", "secret")]).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Classification not found");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("metadata", r#"{"year": "x"}"#),
        ],
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid metadata");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("metadata", "[1]"),
        ],
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid metadata");
    let reply = upload(
        &app,
        &pid,
        &[
            small(),
            text("classification", "public"),
            text("external_identifier", ""),
        ],
    )
    .await;
    assert_invalid_parameter(&reply, "Invalid external_identifier");
    // Counted past the key check and the body, as JSON submissions are: the unknown
    // pipeline, the 403 and the four after it, not the 401.
    assert_eq!(added().await, before + 6.0);
    assert_eq!(documents_in(&app, &pid).await, 0, "nothing stored");

    // And the same body is accepted.
    let reply = upload(&app, &pid, &good()).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["external_identifier"], "notes.txt");
    assert_eq!(documents_in(&app, &pid).await, 1);
}

#[tokio::test]
async fn trove_upload_sends_files_as_the_route_expects() {
    let app = spawn_app_without_worker().await;
    let pid = pipeline(&app).await;
    let (key_id, key_secret) = app.master_key();
    let target = trove::upload::UploadTarget {
        url: app.address.clone(),
        pipeline_id: uuid::Uuid::parse_str(&pid).unwrap(),
        key_id,
        key_secret,
        classification: "public".to_owned(),
        external_identifier: None,
        metadata: Some(r#"{"team": "docs"}"#.to_owned()),
        expire_older_versions: false,
    };
    let folder = format!("{}/tests/fixtures/files", env!("CARGO_MANIFEST_DIR"));
    let client = reqwest::Client::new();
    let path = std::path::Path::new(&folder).join("notes.docx");
    let version = trove::upload::upload_file(&client, &target, &path)
        .await
        .unwrap();
    assert_eq!(keys_of(&version), VERSION_FIELDS, "{version}");
    assert_eq!(version["external_identifier"], "notes.docx");
    assert_eq!(version["metadata"], json!({"team": "docs"}));
    assert_eq!(version["status"], "pending");
    let error = trove::upload::upload_file(
        &client,
        &target,
        &std::path::Path::new(&folder).join("image.png"),
    )
    .await
    .unwrap_err();
    assert!(
        error.ends_with("image.png: 415 Unsupported Media Type Unsupported file type: image/png"),
        "{error}"
    );
    // One external identifier names one file.
    let several = trove::upload::UploadTarget {
        external_identifier: Some("x".to_owned()),
        ..target
    };
    let options = trove::upload::UploadOptions {
        progress: false,
        print_versions: false,
        ..trove::upload::UploadOptions::default()
    };
    assert_eq!(
        trove::upload::run(several.clone(), &[path.clone(), path], &options)
            .await
            .unwrap_err(),
        "--external-identifier names one file; give one file"
    );
    assert_eq!(
        trove::upload::run(several, &[std::path::PathBuf::from(&folder)], &options)
            .await
            .unwrap_err(),
        "--external-identifier names one file; give one file"
    );
    assert_eq!(documents_in(&app, &pid).await, 1);
}

/// `trove upload --wait` on a folder of mixed files with a worker running: the readable files
/// are processed under their relative paths, the unreadable and the unsupported ones are the
/// failures of the summary, with their reasons, and the run fails.
#[tokio::test]
async fn trove_upload_walks_a_folder_waits_and_reports_the_failures() {
    let app = spawn_app_with(AppOptions::default()).await;
    let pid = pipeline(&app).await;
    let (key_id, key_secret) = app.master_key();
    let root = std::env::temp_dir().join(format!("trove-upload-{}", uuid::Uuid::new_v4()));
    for (name, fixture_name) in [
        ("report.pdf", "report.pdf"),
        ("sub/notes.docx", "notes.docx"),
        ("sub/page.html", "page.html"),
        ("sub/deeper/guide.md", "guide.md"),
        ("scans/encrypted.pdf", "encrypted.pdf"),
        ("image.png", "image.png"),
    ] {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fixture(fixture_name)).unwrap();
    }
    let target = trove::upload::UploadTarget {
        url: app.address.clone(),
        pipeline_id: uuid::Uuid::parse_str(&pid).unwrap(),
        key_id,
        key_secret,
        classification: "public".to_owned(),
        external_identifier: None,
        metadata: None,
        expire_older_versions: true,
    };
    let options = trove::upload::UploadOptions {
        concurrency: 3,
        wait: Some(std::time::Duration::from_secs(120)),
        poll_interval: std::time::Duration::from_millis(200),
        progress: false,
        print_versions: false,
    };
    // A folder and, beside it, one file named on its own.
    let single = root.join("sub/deeper/guide.md");
    let summary = trove::upload::run(target, &[root.join("sub"), root.clone(), single], &options)
        .await
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();

    assert!(!summary.is_success());
    assert_eq!(summary.files, 3 + 6 + 1);
    let mut failures: Vec<(String, String)> = summary
        .failed
        .iter()
        .map(|f| {
            (
                f.path.strip_prefix(&root).unwrap().display().to_string(),
                f.reason.clone(),
            )
        })
        .collect();
    failures.sort();
    assert_eq!(
        failures,
        [
            (
                "image.png".to_owned(),
                "415 Unsupported Media Type Unsupported file type: image/png".to_owned()
            ),
            (
                "scans/encrypted.pdf".to_owned(),
                "failed: the PDF is encrypted".to_owned()
            ),
        ]
    );
    let mut processed: Vec<(String, String)> = summary
        .uploaded
        .iter()
        .map(|u| {
            assert_eq!(
                u.version["external_identifier"], u.external_identifier,
                "{}",
                u.version
            );
            (
                u.external_identifier.clone(),
                str_of(&u.version, "status").to_owned(),
            )
        })
        .collect();
    processed.sort();
    let expected: Vec<(String, String)> = [
        ("deeper/guide.md", "success"),
        ("guide.md", "success"),
        ("notes.docx", "success"),
        ("page.html", "success"),
        ("report.pdf", "success"),
        ("scans/encrypted.pdf", "failed"),
        ("sub/deeper/guide.md", "success"),
        ("sub/notes.docx", "success"),
        ("sub/page.html", "success"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(processed, expected);
    let report = summary.report(true);
    assert!(report.starts_with("10 files, 9 sent ("), "{report}");
    assert!(report.contains("), 2 failed, 8 processed\n"), "{report}");
    assert!(
        report.contains("scans/encrypted.pdf: failed: the PDF is encrypted"),
        "{report}"
    );
}
