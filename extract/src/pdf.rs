//! PDF: the text layer, read by `pdf-extract` (on `lopdf`), which interprets the pages' content
//! streams and reports each glyph with its position; [`layout`] puts each page's glyphs in
//! reading order (columns, table rows, paragraphs).

mod layout;

use std::io::Read;

use pdf_extract::{Document, MediaBox, Object, OutputDev, OutputError, Transform};

use crate::{ExtractError, Format, Limits};

/// The text of a PDF: its title (document information) first, then the text of its pages in
/// reading order (see [`layout`]), pages separated by blank lines, lines ending in a hyphen
/// joined with the next when it starts with a lower-case letter.
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
        let mut output = Pages::default();
        pdf_extract::output_doc(&doc, &mut output).map(|()| output.text)
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

/// Collects the glyphs of each page and, at the page's end, appends its text in reading order.
#[derive(Default)]
struct Pages {
    /// The text of the pages done.
    text: String,
    /// The upright glyphs of the current page.
    glyphs: Vec<layout::Glyph>,
    /// The current page's glyphs set along another direction (rotated text), in the order drawn,
    /// a space where one does not follow on from the previous.
    turned: String,
    /// Where the previous turned glyph ended, and its font size.
    turned_end: Option<(f64, f64, f64)>,
}

impl Pages {
    fn push_paragraph(&mut self, paragraph: &str) {
        if paragraph.trim().is_empty() {
            return;
        }
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        self.text.push_str(paragraph);
    }
}

impl OutputDev for Pages {
    fn begin_page(
        &mut self,
        _page_num: u32,
        _media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.glyphs.clear();
        self.turned.clear();
        self.turned_end = None;
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        let page = layout::page_text(&self.glyphs);
        self.push_paragraph(&page);
        let turned = std::mem::take(&mut self.turned);
        self.push_paragraph(&turned);
        self.glyphs.clear();
        Ok(())
    }

    /// `trm` maps text space to the page: its first row is the direction of the baseline, its
    /// second the glyph's up direction, its third the glyph's origin; `width` is the advance in
    /// text space units per unit of font size.
    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        text: &str,
    ) -> Result<(), OutputError> {
        let (a, b, c, d) = (trm.m11, trm.m12, trm.m21, trm.m22);
        let (x, y) = (trm.m31, trm.m32);
        let size = font_size * c.hypot(d);
        let advance = width * font_size;
        if !(size.is_finite()
            && size > 0.0
            && advance.is_finite()
            && x.is_finite()
            && y.is_finite())
        {
            return Ok(());
        }
        // Upright: a baseline running left to right, glyphs not upside down (a slant is fine).
        if a > 0.0 && d > 0.0 && b.abs() <= 0.05 * a {
            self.glyphs.push(layout::Glyph {
                x,
                y: -y,
                width: advance * a.hypot(b),
                size,
                text: text.to_owned(),
            });
            return Ok(());
        }
        if let Some((end_x, end_y, end_size)) = self.turned_end {
            let jump = (x - end_x).hypot(y - end_y);
            if jump > 0.15 * end_size.min(size) && !self.turned.ends_with(' ') {
                self.turned.push(' ');
            }
        }
        self.turned.push_str(text);
        self.turned_end = Some((x + a * advance, y + b * advance, size));
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
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
    use pdf_extract::{MediaBox, OutputDev, Transform};

    use super::{Pages, tidy};

    #[test]
    fn hyphenated_line_ends_are_joined_and_blank_runs_collapsed() {
        assert_eq!(
            tidy("  A hyphen-\nated exam-\nple\n\n\n\nNext-\nLine  \n"),
            "A hyphenated example\n\nNext-\nLine"
        );
    }

    #[test]
    fn turned_glyphs_follow_the_page_text_and_pages_are_paragraphs() -> Result<(), String> {
        let mut pages = Pages::default();
        let media_box = MediaBox {
            llx: 0.0,
            lly: 0.0,
            urx: 600.0,
            ury: 800.0,
        };
        let upright = |x: f64, y: f64| Transform::row_major(1.0, 0.0, 0.0, 1.0, x, y);
        // Turned a quarter: the baseline runs up the page.
        let turned = |x: f64, y: f64| Transform::row_major(0.0, 1.0, -1.0, 0.0, x, y);
        let draw = |pages: &mut Pages, text: &str, at: &dyn Fn(f64) -> Transform| {
            for (i, c) in text.chars().enumerate() {
                let glyph = at(5.0 * i as f64);
                pages.output_character(&glyph, 0.5, 0.0, 10.0, &c.to_string())?;
            }
            Ok::<(), pdf_extract::OutputError>(())
        };
        let run = |pages: &mut Pages| -> Result<(), pdf_extract::OutputError> {
            pages.begin_page(1, &media_box, None)?;
            draw(pages, "Side note", &|d| turned(30.0, 100.0 + d))?;
            draw(pages, "Body", &|d| upright(100.0 + d, 700.0))?;
            pages.end_page()?;
            pages.begin_page(2, &media_box, None)?;
            draw(pages, "Next page", &|d| upright(100.0 + d, 700.0))?;
            pages.end_page()
        };
        run(&mut pages).map_err(|e| e.to_string())?;
        assert_eq!(pages.text, "Body\n\nSide note\n\nNext page");
        Ok(())
    }
}
