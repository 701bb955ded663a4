//! `trove upload`: files sent to `POST /pipelines/{pipeline_id}/files` of a running Trove, one
//! request per file, each body streamed with a progress bar on standard error.

use std::io::{IsTerminal, Write};
use std::path::Path;

use bytes::Bytes;
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
    /// For a single file; by default each file's name.
    pub external_identifier: Option<String>,
    /// A JSON object as text.
    pub metadata: Option<String>,
    pub expire_older_versions: bool,
}

/// Bytes of the file sent per chunk (and per progress update).
const CHUNK: usize = 64 * 1024;

/// A part's name or file name inside a quoted header value.
fn quoted(value: &str) -> String {
    value
        .chars()
        .filter(|c| *c != '\r' && *c != '\n')
        .collect::<String>()
        .replace('"', "%22")
}

/// The multipart body around the file: what comes before its bytes and after them.
fn envelope(target: &UploadTarget, boundary: &str, file_name: &str) -> (Vec<u8>, Vec<u8>) {
    let mut head = String::new();
    let mut text = |name: &str, value: &str| {
        head.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    };
    text("classification", &target.classification);
    if let Some(identifier) = &target.external_identifier {
        text("external_identifier", identifier);
    }
    if let Some(metadata) = &target.metadata {
        text("metadata", metadata);
    }
    text(
        "expire_older_versions",
        if target.expire_older_versions {
            "true"
        } else {
            "false"
        },
    );
    head.push_str(&format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n",
        quoted(file_name)
    ));
    (
        head.into_bytes(),
        format!("\r\n--{boundary}--\r\n").into_bytes(),
    )
}

/// A progress bar on standard error, drawn in place on a terminal and once at the end
/// otherwise.
struct Progress {
    name: String,
    total: u64,
    terminal: bool,
}

impl Progress {
    fn draw(&self, sent: u64) {
        if !self.terminal && sent < self.total {
            return;
        }
        let share = if self.total == 0 {
            1.0
        } else {
            sent as f64 / self.total as f64
        };
        let filled = (share * 30.0).round() as usize;
        let bar: String = "#".repeat(filled) + &".".repeat(30usize.saturating_sub(filled));
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{} [{bar}] {:>3}% {:.1}/{:.1} MiB",
            self.name,
            (share * 100.0).round() as u64,
            sent as f64 / 1_048_576.0,
            self.total as f64 / 1_048_576.0
        );
        if sent >= self.total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    }
}

/// Uploads one file; returns the version Trove answered (201), or the status and body of any
/// other answer.
pub async fn upload_file(
    client: &reqwest::Client,
    target: &UploadTarget,
    path: &Path,
    show_progress: bool,
) -> Result<serde_json::Value, String> {
    let content = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let boundary = format!("trove-{}", Uuid::new_v4().simple());
    let (head, tail) = envelope(target, &boundary, &file_name);
    let total = (head.len() + content.len() + tail.len()) as u64;
    let progress = Progress {
        name: file_name,
        total,
        terminal: show_progress && std::io::stderr().is_terminal(),
    };
    let content = Bytes::from(content);
    let mut chunks: Vec<Bytes> = vec![Bytes::from(head)];
    let mut start = 0;
    while start < content.len() {
        let end = Ord::min(start + CHUNK, content.len());
        chunks.push(content.slice(start..end));
        start = end;
    }
    chunks.push(Bytes::from(tail));
    let mut sent = 0u64;
    let stream = futures_util::stream::iter(chunks.into_iter().map(move |chunk| {
        sent += chunk.len() as u64;
        if show_progress {
            progress.draw(sent);
        }
        Ok::<Bytes, std::io::Error>(chunk)
    }));
    let url = format!(
        "{}/pipelines/{}/files",
        target.url.trim_end_matches('/'),
        target.pipeline_id
    );
    let response = client
        .post(url)
        .header("x-api-key", &target.key_id)
        .header("x-api-key-secret", &target.key_secret)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header("content-length", total)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if status == reqwest::StatusCode::CREATED {
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    } else {
        Err(format!("{}: {status} {text}", path.display()))
    }
}

/// Uploads every file in turn, printing each version Trove answered as one line of JSON on
/// standard output; fails after the last file if any failed.
pub async fn run(target: UploadTarget, files: &[std::path::PathBuf]) -> Result<(), String> {
    if target.external_identifier.is_some() && files.len() > 1 {
        return Err("--external-identifier names one file; give one file".to_owned());
    }
    let client = reqwest::Client::new();
    let mut failed = 0;
    for path in files {
        match upload_file(&client, &target, path, true).await {
            Ok(version) => println!("{version}"),
            Err(error) => {
                eprintln!("trove upload: {error}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {} files not uploaded", files.len()));
    }
    Ok(())
}
