//! `trove upload`: files and folders sent to `POST /pipelines/{pipeline_id}/files` of a running
//! Trove, one request per file, a few at a time, with a progress bar on standard error; with
//! `wait`, it then follows every version created until it is processed.
//!
//! Every regular file is sent: whether Trove reads a file is the server's decision (its 415
//! answer counts as a failure with its message), so the client never disagrees with the server
//! it talks to.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use uuid::Uuid;

/// What every upload of one command shares.
#[derive(Debug, Clone)]
pub struct UploadTarget {
    /// Trove's base address (`http://127.0.0.1:8080`).
    pub url: String,
    pub pipeline_id: Uuid,
    pub key_id: String,
    pub key_secret: String,
    pub classification: String,
    /// For a single file; by default the path relative to the argument.
    pub external_identifier: Option<String>,
    /// A JSON object as text.
    pub metadata: Option<String>,
    pub expire_older_versions: bool,
}

/// How one command runs.
#[derive(Debug, Clone)]
pub struct UploadOptions {
    /// Files sent at the same time (at least 1).
    pub concurrency: usize,
    /// Follow the versions created until each is `success` or `failed`, for at most this long.
    pub wait: Option<Duration>,
    /// Time between two reads of a version still being processed.
    pub poll_interval: Duration,
    /// Draw a progress bar on standard error (only when it is a terminal).
    pub progress: bool,
    /// Print each version created as a line of JSON on standard output.
    pub print_versions: bool,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            wait: None,
            poll_interval: Duration::from_millis(500),
            progress: true,
            print_versions: true,
        }
    }
}

/// A file found under the arguments.
#[derive(Debug, Clone)]
struct Entry {
    path: PathBuf,
    external_identifier: String,
    size: u64,
}

/// A version Trove created for a file.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub path: PathBuf,
    pub external_identifier: String,
    /// The version as the submission answered it; with `wait`, as last read.
    pub version: Value,
}

/// A file not sent, refused, or (with `wait`) whose version failed or was not processed in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub path: PathBuf,
    pub reason: String,
}

/// The outcome of one command.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Files found.
    pub files: usize,
    /// Bytes of the files sent.
    pub bytes: u64,
    /// The versions created, in the order of the files.
    pub uploaded: Vec<Uploaded>,
    /// The failures: what could not be walked, then the files in order, then (with `wait`)
    /// the versions not processed.
    pub failed: Vec<Failure>,
}

impl Summary {
    pub fn is_success(&self) -> bool {
        self.failed.is_empty()
    }

    /// The summary printed at the end: the counts, then one line per failure.
    pub fn report(&self, waited: bool) -> String {
        let mut out = format!(
            "{} files, {} sent ({}), {} failed",
            self.files,
            self.uploaded.len(),
            indicatif::HumanBytes(self.bytes),
            self.failed.len()
        );
        if waited {
            let processed = self
                .uploaded
                .iter()
                .filter(|u| u.version["status"] == "success")
                .count();
            out.push_str(&format!(", {processed} processed"));
        }
        for failure in &self.failed {
            out.push_str(&format!(
                "\n  {}: {}",
                failure.path.display(),
                failure.reason
            ));
        }
        out
    }
}

/// The external identifier of a path under a folder: its relative path, `/`-separated.
fn relative_identifier(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Every regular file under the arguments (folders walked in name order, symbolic links
/// followed, loops reported), and what could not be walked.
fn walk(arguments: &[PathBuf]) -> (Vec<Entry>, Vec<Failure>) {
    let mut entries = Vec::new();
    let mut failures = Vec::new();
    for argument in arguments {
        let metadata = match std::fs::metadata(argument) {
            Ok(metadata) => metadata,
            Err(error) => {
                failures.push(Failure {
                    path: argument.clone(),
                    reason: error.to_string(),
                });
                continue;
            }
        };
        if !metadata.is_dir() {
            entries.push(Entry {
                path: argument.clone(),
                external_identifier: argument
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| argument.to_string_lossy().into_owned()),
                size: metadata.len(),
            });
            continue;
        }
        for item in walkdir::WalkDir::new(argument)
            .follow_links(true)
            .sort_by_file_name()
        {
            match item {
                Ok(item) if item.file_type().is_file() => {
                    let size = item.metadata().map(|m| m.len()).unwrap_or(0);
                    entries.push(Entry {
                        external_identifier: relative_identifier(argument, item.path()),
                        path: item.into_path(),
                        size,
                    });
                }
                Ok(_) => {}
                Err(error) => failures.push(Failure {
                    path: error
                        .path()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| argument.clone()),
                    reason: error.to_string(),
                }),
            }
        }
    }
    (entries, failures)
}

/// Bytes of the file read per chunk of the request body.
const CHUNK: usize = 64 * 1024;

/// The file as a request body read chunk by chunk; `sent` is told the size of each chunk.
fn file_body(file: tokio::fs::File, sent: impl Fn(u64) + Send + Sync + 'static) -> reqwest::Body {
    let sent: Box<dyn Fn(u64) + Send + Sync> = Box::new(sent);
    let stream = futures_util::stream::unfold(Some((file, sent)), |state| async move {
        let (mut file, sent) = state?;
        let mut buffer = vec![0u8; CHUNK];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(n) => {
                buffer.truncate(n);
                sent(n as u64);
                Some((Ok(bytes::Bytes::from(buffer)), Some((file, sent))))
            }
            Err(error) => Some((Err(error), None)),
        }
    });
    reqwest::Body::wrap_stream(stream)
}

/// Uploads one file under an external identifier; returns the version Trove answered (201),
/// or the status and body of any other answer.
async fn send(
    client: &reqwest::Client,
    target: &UploadTarget,
    path: &Path,
    external_identifier: Option<&str>,
    sent: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Value, String> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| e.to_string())?;
    let length = file.metadata().await.map_err(|e| e.to_string())?.len();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let part = reqwest::multipart::Part::stream_with_length(file_body(file, sent), length)
        .file_name(file_name)
        .mime_str("application/octet-stream")
        .map_err(|e| e.to_string())?;
    let mut form =
        reqwest::multipart::Form::new().text("classification", target.classification.clone());
    if let Some(identifier) = external_identifier {
        form = form.text("external_identifier", identifier.to_owned());
    }
    if let Some(metadata) = &target.metadata {
        form = form.text("metadata", metadata.clone());
    }
    form = form
        .text(
            "expire_older_versions",
            if target.expire_older_versions {
                "true"
            } else {
                "false"
            },
        )
        .part("file", part);
    let request = pipeline_request(client, target, reqwest::Method::POST, "files").multipart(form);
    answer(request, reqwest::StatusCode::CREATED).await
}

/// A request with the target's key to `{url}/pipelines/{pipeline_id}/{path}`.
fn pipeline_request(
    client: &reqwest::Client,
    target: &UploadTarget,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let url = format!(
        "{}/pipelines/{}/{path}",
        target.url.trim_end_matches('/'),
        target.pipeline_id
    );
    client
        .request(method, url)
        .header("x-api-key", &target.key_id)
        .header("x-api-key-secret", &target.key_secret)
}

/// Sends `request`; its JSON body when it answers `expected`, else `status message`.
async fn answer(
    request: reqwest::RequestBuilder,
    expected: reqwest::StatusCode,
) -> Result<Value, String> {
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if status == expected {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        Err(format!("{status} {}", error_message(&text)))
    }
}

/// The message of Trove's error body (`{"error": {"message": ...}}`), or the body itself.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned())
}

/// Uploads one file (external identifier: the target's, else the file's name); returns the
/// version Trove answered (201), or `path: status body` of any other answer.
pub async fn upload_file(
    client: &reqwest::Client,
    target: &UploadTarget,
    path: &Path,
) -> Result<Value, String> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let identifier = target.external_identifier.clone().unwrap_or(file_name);
    send(client, target, path, Some(&identifier), |_| {})
        .await
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The version `number` of a document as `GET /pipelines/{pipeline_id}/documents/{id}` reads.
async fn read_version(
    client: &reqwest::Client,
    target: &UploadTarget,
    id: &str,
    number: &Value,
) -> Result<Value, String> {
    let request = pipeline_request(
        client,
        target,
        reqwest::Method::GET,
        &format!("documents/{id}"),
    );
    let versions = answer(request, reqwest::StatusCode::OK).await?;
    versions
        .as_array()
        .and_then(|all| all.iter().find(|v| &v["version"] == number))
        .cloned()
        .ok_or_else(|| format!("version {number} of document {id} not found"))
}

fn bar(length: u64, show: bool, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    // Standard error's draw target draws nothing when it is not a terminal.
    let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Uploads every file under `arguments` (external identifier: the path relative to the
/// argument; a file argument's own name), `options.concurrency` at a time, then with
/// `options.wait` follows the versions created until each is processed. Errors only on a
/// command that cannot run; every file's failure is in the summary.
pub async fn run(
    target: UploadTarget,
    arguments: &[PathBuf],
    options: &UploadOptions,
) -> Result<Summary, String> {
    if target.external_identifier.is_some() && (arguments.len() != 1 || arguments[0].is_dir()) {
        return Err("--external-identifier names one file; give one file".to_owned());
    }
    let client = reqwest::Client::new();
    let (entries, mut walk_failures) = walk(arguments);
    let total_bytes: u64 = entries.iter().map(|e| e.size).sum();
    let files = entries.len() + walk_failures.len();
    let progress = bar(
        total_bytes,
        options.progress,
        "{spinner} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} ({binary_bytes_per_sec}) {msg}",
    );
    let walked_failed = walk_failures.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicUsize::new(walk_failures.len());
    let message = |done: usize, failed: usize| format!("files {done}/{files}, {failed} failed");
    progress.set_message(message(0, walk_failures.len()));
    for failure in &walk_failures {
        progress.suspend(|| {
            eprintln!(
                "trove upload: {}: {}",
                failure.path.display(),
                failure.reason
            )
        });
    }

    let results: Vec<(Entry, Result<Value, String>)> =
        futures_util::stream::iter(entries.into_iter().map(|entry| {
            let client = &client;
            let target = &target;
            let progress = &progress;
            let done = &done;
            let failed = &failed;
            let message = &message;
            async move {
                let counter = progress.clone();
                let identifier = target
                    .external_identifier
                    .clone()
                    .unwrap_or_else(|| entry.external_identifier.clone());
                let result = send(client, target, &entry.path, Some(&identifier), move |n| {
                    counter.inc(n)
                })
                .await;
                let done = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let failed = match &result {
                    Ok(version) => {
                        if options.print_versions {
                            progress.suspend(|| println!("{version}"));
                        }
                        failed.load(std::sync::atomic::Ordering::Relaxed)
                    }
                    Err(error) => {
                        progress.suspend(|| {
                            eprintln!("trove upload: {}: {error}", entry.path.display())
                        });
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
                    }
                };
                progress.set_message(message(done + walked_failed, failed));
                (entry, result)
            }
        }))
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    progress.finish_and_clear();

    let mut summary = Summary {
        files,
        ..Summary::default()
    };
    summary.failed.append(&mut walk_failures);
    for (entry, result) in results {
        match result {
            Ok(version) => {
                summary.bytes += entry.size;
                summary.uploaded.push(Uploaded {
                    path: entry.path,
                    external_identifier: entry.external_identifier,
                    version,
                });
            }
            Err(reason) => summary.failed.push(Failure {
                path: entry.path,
                reason,
            }),
        }
    }
    if let Some(timeout) = options.wait {
        wait(&client, &target, &mut summary, timeout, options).await;
    }
    Ok(summary)
}

/// Reads every version created until it is `success` or `failed`, or the time is up; adds the
/// failed (with their `status_reason`) and the unfinished to the failures.
async fn wait(
    client: &reqwest::Client,
    target: &UploadTarget,
    summary: &mut Summary,
    timeout: Duration,
    options: &UploadOptions,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let progress = bar(
        summary.uploaded.len() as u64,
        options.progress,
        "{spinner} [{elapsed_precise}] [{wide_bar}] {pos}/{len} processed {msg}",
    );
    let mut pending: Vec<usize> = (0..summary.uploaded.len()).collect();
    let mut processing_failed = 0;
    while !pending.is_empty() {
        let reads: Vec<(usize, Result<Value, String>)> =
            futures_util::stream::iter(pending.iter().map(|&i| {
                let uploaded = &summary.uploaded[i];
                async move {
                    let id = uploaded.version["id"].as_str().unwrap_or_default();
                    (
                        i,
                        read_version(client, target, id, &uploaded.version["version"]).await,
                    )
                }
            }))
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        for (i, read) in reads {
            // A read that fails (a restart, a timeout) is tried again on the next round.
            let Ok(version) = read else { continue };
            let status = version["status"].as_str().unwrap_or_default().to_owned();
            summary.uploaded[i].version = version;
            if status == "success" || status == "failed" {
                pending.retain(|&p| p != i);
                progress.inc(1);
                if status == "failed" {
                    processing_failed += 1;
                    progress.set_message(format!("{processing_failed} failed"));
                }
            }
        }
        if pending.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(options.poll_interval).await;
    }
    progress.finish_and_clear();
    for (i, uploaded) in summary.uploaded.iter().enumerate() {
        let reason = if pending.contains(&i) {
            format!(
                "not processed after {} s (status {})",
                timeout.as_secs(),
                uploaded.version["status"].as_str().unwrap_or("unknown")
            )
        } else if uploaded.version["status"] == "failed" {
            format!(
                "failed: {}",
                uploaded.version["status_reason"]
                    .as_str()
                    .unwrap_or("no reason given")
            )
        } else {
            continue;
        };
        summary.failed.push(Failure {
            path: uploaded.path.clone(),
            reason,
        });
    }
}
