//! PDF: the text layer, read by `pdf-extract` (on `lopdf`) in the order of the pages' content
//! streams, which is the reading order of the text as written (two columns come one after the
//! other when the producer wrote them so).

use std::io::Read;

use pdf_extract::{Document, Object};

use crate::{ExtractError, Format, Limits};

/// The text of a PDF: its title (document information) first, then the text of its pages,
/// lines ending in a hyphen joined with the next when it starts with a lower-case letter.
pub fn extract(bytes: &[u8], limits: Limits) -> Result<String, ExtractError> {
    let format = Format::Pdf;
    // The parser and the text extraction may panic on malformed input: a panic is damage.
    let loaded = std::panic::catch_unwind(|| Document::load_mem(bytes));
    let mut doc = match loaded {
        Ok(Ok(doc)) => doc,
        Ok(Err(e)) => return Err(ExtractError::damaged(format, e)),
        Err(_) => return Err(ExtractError::damaged(format, "unreadable structure")),
    };
    // `lopdf` opens a document encrypted with an empty user password by itself; any other
    // password is one Trove does not have.
    if doc.is_encrypted() && doc.authenticate_password("").is_err() {
        return Err(ExtractError::Encrypted);
    }
    check_expansion(&doc, limits)?;
    blank_images(&mut doc);
    let title = title(&doc);
    let extracted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut text = String::new();
        let mut output = pdf_extract::PlainTextOutput::new(&mut text);
        pdf_extract::output_doc(&doc, &mut output).map(|()| text)
    }));
    let raw = match extracted {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => return Err(ExtractError::damaged(format, e)),
        Err(_) => return Err(ExtractError::damaged(format, "unreadable page content")),
    };
    let body = tidy(&raw);
    if body.is_empty() {
        return Err(ExtractError::NoTextLayer);
    }
    Ok(match title {
        Some(title) if !body.starts_with(&title) => format!("{title}\n\n{body}"),
        _ => body,
    })
}

/// Refuses a document whose compressed streams expand beyond the bound, all together, before
/// the text extraction decompresses them.
fn check_expansion(doc: &Document, limits: Limits) -> Result<(), ExtractError> {
    let mut budget = limits.max_expanded_bytes;
    for object in doc.objects.values() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let flate = match stream.dict.get(b"Filter") {
            Ok(Object::Name(name)) => name.as_slice() == b"FlateDecode",
            Ok(Object::Array(filters)) => filters
                .iter()
                .any(|f| matches!(f, Object::Name(n) if n.as_slice() == b"FlateDecode")),
            _ => false,
        };
        let size = if flate {
            let mut decoder =
                flate2::read::ZlibDecoder::new(stream.content.as_slice()).take(budget + 1);
            // A stream that does not decompress is left to the extraction to judge.
            std::io::copy(&mut decoder, &mut std::io::sink()).unwrap_or(0)
        } else {
            stream.content.len() as u64
        };
        if size > budget {
            return Err(ExtractError::TooLarge {
                format: Format::Pdf.label(),
                limit: limits.max_expanded_bytes,
            });
        }
        budget -= size;
    }
    Ok(())
}

/// Empties the document's image streams. `pdf-extract` runs whatever a page draws with `Do` as
/// a content stream, an image's decoded pixels included: bytes that happen to parse as
/// operators without their operands make it panic, and the pixels cost a decompression for
/// nothing. An empty image draws nothing.
fn blank_images(doc: &mut Document) {
    for object in doc.objects.values_mut() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let subtype = stream.dict.get(b"Subtype").and_then(Object::as_name);
        if subtype.is_ok_and(|name| name == b"Image") {
            stream.set_plain_content(Vec::new());
        }
    }
}

/// The document information's title.
fn title(doc: &Document) -> Option<String> {
    let info = match doc.trailer.get(b"Info").ok()? {
        Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        Object::Dictionary(dict) => dict,
        _ => return None,
    };
    let title = pdf_extract::decode_text_string(info.get(b"Title").ok()?).ok()?;
    let title = crate::blocks::collapse(&title);
    (!title.is_empty()).then_some(title)
}

/// Lines trimmed, runs of blank lines made one, a hyphen at a line's end joined with the next
/// line when that starts with a lower-case letter.
fn tidy(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank = 0usize;
    for line in raw.lines() {
        let line = line.trim();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            let hyphenated = out.ends_with('-')
                && out.chars().rev().nth(1).is_some_and(char::is_alphabetic)
                && line.chars().next().is_some_and(char::is_lowercase);
            if hyphenated && blank == 0 {
                out.pop();
            } else if blank > 0 {
                out.push_str("\n\n");
            } else {
                out.push('\n');
            }
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn hyphenated_line_ends_are_joined_and_blank_runs_collapsed() {
        assert_eq!(
            tidy("  A hyphen-\nated exam-\nple\n\n\n\nNext-\nLine  \n"),
            "A hyphenated example\n\nNext-\nLine"
        );
    }
}
