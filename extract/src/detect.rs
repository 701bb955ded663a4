//! The format of a file: its content first (`infer`'s signatures, the parts of a zip
//! archive), its name second.

use std::io::Cursor;

use crate::Format;

/// The media types Trove reads.
pub const SUPPORTED: &[&str] = &[
    "application/pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.oasis.opendocument.text",
    "text/html",
    "text/markdown",
    "text/plain",
];

/// A file Trove cannot read, with the media type detected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unsupported file type: {detected}")]
pub struct Unsupported {
    pub detected: String,
}

fn unsupported(detected: &str) -> Unsupported {
    Unsupported {
        detected: detected.to_owned(),
    }
}

/// The extension of a file name, lower-cased.
fn extension(file_name: &str) -> Option<String> {
    let (stem, ext) = file_name.rsplit_once('.')?;
    (!stem.is_empty()).then(|| ext.to_ascii_lowercase())
}

/// The format a file's name gives to text content.
fn text_format_by_name(file_name: &str) -> Format {
    match extension(file_name).as_deref() {
        Some("md" | "markdown" | "mkd" | "mdown") => Format::Markdown,
        Some("html" | "htm" | "xhtml") => Format::Html,
        _ => Format::Text,
    }
}

/// The format of a file, from its content first and its name second.
///
/// - `%PDF-` → PDF; a zip archive → DOCX (it holds `word/document.xml`) or ODT (its
///   `mimetype` part says `application/vnd.oasis.opendocument.text`); an archive that cannot be
///   opened is taken at its name's word (`.docx`, `.odt`), so a damaged document fails
///   extraction with its reason rather than here.
/// - HTML by its leading markup; other text by its name: `.md`/`.markdown` → Markdown,
///   `.html`/`.htm` → HTML, anything else → plain text.
/// - Any other recognised signature (images, audio, other archives) and binary content (a NUL
///   byte in the first 8 KiB without a UTF-16 byte order mark) are unsupported.
pub fn detect(bytes: &[u8], file_name: &str) -> Result<Format, Unsupported> {
    if bytes.starts_with(b"%PDF-") {
        return Ok(Format::Pdf);
    }
    if infer::archive::is_zip(bytes) {
        return zip_format(bytes, file_name);
    }
    let text = strip_utf8_bom(bytes);
    if infer::text::is_html(text) {
        return Ok(Format::Html);
    }
    if infer::text::is_xml(text) {
        return match text_format_by_name(file_name) {
            Format::Html => Ok(Format::Html),
            _ => Err(unsupported("text/xml")),
        };
    }
    if let Some(kind) = infer::get(bytes)
        && !kind.mime_type().starts_with("text/")
    {
        return Err(unsupported(kind.mime_type()));
    }
    if !crate::text::looks_textual(bytes) {
        return Err(unsupported("application/octet-stream"));
    }
    Ok(text_format_by_name(file_name))
}

fn strip_utf8_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// DOCX or ODT from a zip archive's parts.
fn zip_format(bytes: &[u8], file_name: &str) -> Result<Format, Unsupported> {
    let Ok(mut archive) = zip::ZipArchive::new(Cursor::new(bytes)) else {
        return match extension(file_name).as_deref() {
            Some("docx") => Ok(Format::Docx),
            Some("odt") => Ok(Format::Odt),
            _ => Err(unsupported("application/zip")),
        };
    };
    if archive.index_for_name("word/document.xml").is_some() {
        return Ok(Format::Docx);
    }
    let mimetype = archive.by_name("mimetype").ok().and_then(|mut part| {
        let mut value = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(&mut part, 200), &mut value).ok()?;
        Some(value.trim().to_owned())
    });
    match mimetype.as_deref() {
        Some("application/vnd.oasis.opendocument.text") => Ok(Format::Odt),
        Some(other) if !other.is_empty() => Err(unsupported(other)),
        _ if archive.index_for_name("xl/workbook.xml").is_some() => Err(unsupported(
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        )),
        _ if archive.index_for_name("ppt/presentation.xml").is_some() => Err(unsupported(
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        )),
        _ => Err(unsupported("application/zip")),
    }
}
