//! The text of files submitted as documents, extracted by the worker before splitting
//! (`trove-extract`): on the blocking pool, one file at a time per step loop, within bounds.
//!
//! Bounds per file: the upload itself is at most `TROVE_MAX_FILE_BYTES` (64 MiB); the parts of
//! a DOCX or ODT archive and the compressed streams of a PDF may expand to at most 256 MiB
//! together; the text may hold at most 16 Mi characters; and the worker waits at most
//! [`EXTRACTION_TIMEOUT`] for it. Past any bound the version fails with the reason.

use std::time::Duration;

use trove_extract::{Format, Limits};

/// How long the worker waits for the text of one file.
pub const EXTRACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The bounds of one extraction.
pub fn limits() -> Limits {
    Limits::default()
}

/// The text of a file of the stored format, or the reason it cannot be read (shown as the
/// version's `status_reason`). A timed-out extraction's thread runs on until the library
/// returns; its memory is bounded by the limits above.
pub async fn extract_file(bytes: Vec<u8>, format: &str) -> Result<String, String> {
    let Some(format) = Format::from_name(format) else {
        return Err(format!("unknown file format {format:?}"));
    };
    let limits = limits();
    let task = tokio::task::spawn_blocking(move || trove_extract::extract(&bytes, format, limits));
    match tokio::time::timeout(EXTRACTION_TIMEOUT, task).await {
        Ok(Ok(Ok(text))) => Ok(text),
        Ok(Ok(Err(error))) => Err(error.to_string()),
        Ok(Err(_)) => Err(format!(
            "the {} file could not be read (the extraction stopped)",
            format.as_str()
        )),
        Err(_) => Err(format!(
            "the text extraction took longer than {} seconds",
            EXTRACTION_TIMEOUT.as_secs()
        )),
    }
}
