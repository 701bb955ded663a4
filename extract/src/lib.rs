//! Text extraction for files submitted as documents: the format of a file, detected from its
//! content first and its name second ([`detect`]), and its text ([`extract`]), shaped for
//! splitting and search: the title first, headings and paragraphs separated by blank lines,
//! list items and table rows one per line (cells joined by ` | `).
//!
//! Pure: bytes in, text or a typed failure out. No IO, no async; callers run [`extract`] on a
//! blocking thread and bound its time.

mod blocks;
mod detect;
mod html;
mod markdown;
mod office;
mod pdf;
mod text;

pub use detect::{SUPPORTED, Unsupported, detect};

/// A format Trove reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pdf,
    Docx,
    Odt,
    Html,
    Markdown,
    Text,
}

impl Format {
    /// The name stored with a file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pdf => "pdf",
            Self::Docx => "docx",
            Self::Odt => "odt",
            Self::Html => "html",
            Self::Markdown => "markdown",
            Self::Text => "text",
        }
    }

    /// The format of a stored name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "pdf" => Self::Pdf,
            "docx" => Self::Docx,
            "odt" => Self::Odt,
            "html" => Self::Html,
            "markdown" => Self::Markdown,
            "text" => Self::Text,
            _ => return None,
        })
    }

    /// The media type of the format.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Pdf => "application/pdf",
            Self::Docx => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            Self::Odt => "application/vnd.oasis.opendocument.text",
            Self::Html => "text/html",
            Self::Markdown => "text/markdown",
            Self::Text => "text/plain",
        }
    }
}

/// Bounds of one extraction.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most bytes the parts of an archive (DOCX, ODT) or the compressed streams of a PDF
    /// may expand to, all together.
    pub max_expanded_bytes: u64,
    /// The most characters the extracted text may hold.
    pub max_output_chars: usize,
}

impl Default for Limits {
    /// 256 MiB expanded, 16 Mi characters of text.
    fn default() -> Self {
        Self {
            max_expanded_bytes: 256 * 1024 * 1024,
            max_output_chars: 16 * 1024 * 1024,
        }
    }
}

/// Why a file could not be read. Its `Display` is the reason shown to clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    #[error("the PDF is encrypted")]
    Encrypted,
    #[error("the PDF has no text layer (scanned or image-only pages)")]
    NoTextLayer,
    #[error("the {format} file is damaged: {detail}")]
    Damaged {
        format: &'static str,
        detail: String,
    },
    #[error("the {format} file expands beyond {limit} bytes")]
    TooLarge { format: &'static str, limit: u64 },
    #[error("the extracted text exceeds {limit} characters")]
    TooLong { limit: usize },
}

impl ExtractError {
    pub(crate) fn damaged(format: Format, detail: impl std::fmt::Display) -> Self {
        Self::Damaged {
            format: format.label(),
            detail: detail.to_string(),
        }
    }
}

impl Format {
    /// The name of the format in reasons.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Pdf => "PDF",
            Self::Docx => "DOCX",
            Self::Odt => "ODT",
            Self::Html => "HTML",
            Self::Markdown => "Markdown",
            Self::Text => "text",
        }
    }
}

/// The text of a file of a known format.
pub fn extract(bytes: &[u8], format: Format, limits: Limits) -> Result<String, ExtractError> {
    let text = match format {
        Format::Pdf => pdf::extract(bytes, limits)?,
        Format::Docx => office::docx(bytes, limits)?,
        Format::Odt => office::odt(bytes, limits)?,
        Format::Html => html::extract(&text::decode(bytes)),
        Format::Markdown => markdown::extract(&text::decode(bytes)),
        Format::Text => text::plain(bytes),
    };
    // U+0000 is no character of a text (and the database refuses it in text).
    let text = if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text
    };
    if text.chars().count() > limits.max_output_chars {
        return Err(ExtractError::TooLong {
            limit: limits.max_output_chars,
        });
    }
    Ok(text)
}
