//! DOCX (Office Open XML) and ODT (OpenDocument Text): a zip archive (`zip`) whose XML parts
//! (`quick-xml`) hold the text. Every part is read within the expansion bound, whatever size
//! the archive declares for it.

use std::io::{Cursor, Read};

use quick_xml::events::{BytesStart, Event};

use crate::blocks::{Blocks, Table, collapse};
use crate::{ExtractError, Format, Limits};

type Archive<'a> = zip::ZipArchive<Cursor<&'a [u8]>>;

/// Opens an archive; one that cannot be read is damaged.
fn open(bytes: &[u8], format: Format) -> Result<Archive<'_>, ExtractError> {
    zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| ExtractError::damaged(format, e))
}

/// Reads a part as UTF-8 within what is left of the expansion bound (`budget`); `None` when
/// the archive has no such part.
fn read_part(
    archive: &mut Archive<'_>,
    name: &str,
    format: Format,
    limits: Limits,
    budget: &mut u64,
) -> Result<Option<String>, ExtractError> {
    let too_large = || ExtractError::TooLarge {
        format: format.label(),
        limit: limits.max_expanded_bytes,
    };
    let mut part = match archive.by_name(name) {
        Ok(part) => part,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(ExtractError::damaged(format, e)),
    };
    if part.size() > *budget {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    (&mut part)
        .take(budget.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ExtractError::damaged(format, format!("{name}: {e}")))?;
    let read = bytes.len() as u64;
    if read > *budget {
        return Err(too_large());
    }
    *budget -= read;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ExtractError::damaged(format, format!("{name} is not UTF-8")))
}

/// The local name of an element (`w:p` → `p`).
fn local(e: &BytesStart<'_>) -> Vec<u8> {
    e.local_name().as_ref().to_vec()
}

/// The value of an attribute by local name.
fn attribute(e: &BytesStart<'_>, name: &[u8]) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == name)
            .then(|| a.unescape_value().ok().map(|v| v.into_owned()))
            .flatten()
    })
}

/// The `dc:title` of a metadata part (`docProps/core.xml`, `meta.xml`).
fn title(xml: &str) -> Option<String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut inside = false;
    let mut title = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.local_name().as_ref() == b"title" => inside = true,
            Ok(Event::End(e)) if e.local_name().as_ref() == b"title" => break,
            Ok(Event::Text(t)) if inside => title.push_str(&t.unescape().ok()?),
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    let title = collapse(&title);
    (!title.is_empty()).then_some(title)
}

/// Where a paragraph sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Cell,
    ListItem,
}

/// A paragraph being read.
#[derive(Debug, Default)]
struct Paragraph {
    text: String,
    list: bool,
}

/// The document's structure as its XML is read: paragraphs (nested ones, such as text boxes,
/// come out before the paragraph holding them), tables and lists.
#[derive(Debug, Default)]
struct Walker {
    out: Blocks,
    paragraphs: Vec<Paragraph>,
    tables: Vec<Table>,
    contexts: Vec<Context>,
}

impl Walker {
    fn start_paragraph(&mut self) {
        let list = self.contexts.last() == Some(&Context::ListItem);
        self.paragraphs.push(Paragraph {
            text: String::new(),
            list,
        });
    }

    fn push_text(&mut self, text: &str) {
        if let Some(p) = self.paragraphs.last_mut() {
            p.text.push_str(text);
        }
    }

    fn end_paragraph(&mut self) {
        let Some(p) = self.paragraphs.pop() else {
            return;
        };
        match self.contexts.contains(&Context::Cell) {
            true => {
                if let Some(table) = self.tables.last_mut() {
                    table.cell.push(p.text);
                }
            }
            _ if p.list => self.out.line(&collapse(&p.text).replace('\n', " ")),
            _ => {
                self.out.end_lines();
                self.out.paragraph(&collapse(&p.text));
            }
        }
    }

    fn start_table(&mut self) {
        self.out.end_lines();
        self.tables.push(Table::default());
    }

    fn end_table(&mut self) {
        self.tables.pop();
        if self.tables.is_empty() {
            self.out.end_lines();
        }
    }

    fn start_cell(&mut self) {
        self.contexts.push(Context::Cell);
    }

    fn end_cell(&mut self) {
        self.contexts.pop();
        if let Some(table) = self.tables.last_mut() {
            table.end_cell();
        }
    }

    fn end_row(&mut self) {
        let Some(line) = self.tables.last_mut().and_then(Table::end_row) else {
            return;
        };
        let depth = self.tables.len();
        match depth {
            0 => {}
            1 => self.out.line(&line),
            _ => {
                // A table inside a cell: its rows are part of the cell's text.
                if let Some(parent) = self.tables.get_mut(depth - 2) {
                    parent.cell.push(line);
                }
            }
        }
    }
}

/// Reads XML events until the end, calling `on` for each; a malformed part is damaged.
fn each_event(
    xml: &str,
    format: Format,
    mut on: impl FnMut(Event<'_>) -> Result<(), ExtractError>,
) -> Result<(), ExtractError> {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().expand_empty_elements = true;
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => return Ok(()),
            Ok(event) => on(event)?,
            Err(e) => return Err(ExtractError::damaged(format, e)),
        }
    }
}

fn text_of(t: &quick_xml::events::BytesText<'_>, format: Format) -> Result<String, ExtractError> {
    t.unescape()
        .map(|t| t.into_owned())
        .map_err(|e| ExtractError::damaged(format, e))
}

/// The text of a DOCX file: `word/document.xml`, with the title of `docProps/core.xml` first.
pub fn docx(bytes: &[u8], limits: Limits) -> Result<String, ExtractError> {
    let format = Format::Docx;
    let mut archive = open(bytes, format)?;
    let mut budget = limits.max_expanded_bytes;
    let document = read_part(
        &mut archive,
        "word/document.xml",
        format,
        limits,
        &mut budget,
    )?
    .ok_or_else(|| ExtractError::damaged(format, "word/document.xml is missing"))?;
    let core = read_part(
        &mut archive,
        "docProps/core.xml",
        format,
        limits,
        &mut budget,
    )?;
    let mut w = Walker::default();
    // Inside a run (`w:r`), where `w:tab` and `w:br` are text; inside `w:t`.
    let mut in_run = 0usize;
    let mut in_text = false;
    each_event(&document, format, |event| {
        match event {
            Event::Start(e) => match local(&e).as_slice() {
                b"p" => w.start_paragraph(),
                b"numPr" => {
                    if let Some(p) = w.paragraphs.last_mut() {
                        p.list = true;
                    }
                }
                // A list paragraph by its style (`List Bullet`, `List Number`, …).
                b"pStyle" => {
                    if attribute(&e, b"val").is_some_and(|v| v.starts_with("List"))
                        && let Some(p) = w.paragraphs.last_mut()
                    {
                        p.list = true;
                    }
                }
                b"r" => in_run += 1,
                b"t" if in_run > 0 => in_text = true,
                b"tab" if in_run > 0 => w.push_text("\t"),
                b"br" | b"cr" if in_run > 0 => w.push_text("\u{2028}"),
                b"tbl" => w.start_table(),
                b"tc" => w.start_cell(),
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                b"p" => w.end_paragraph(),
                b"r" => in_run = in_run.saturating_sub(1),
                b"t" => in_text = false,
                b"tc" => w.end_cell(),
                b"tr" => w.end_row(),
                b"tbl" => w.end_table(),
                _ => {}
            },
            Event::Text(t) if in_text => w.push_text(&text_of(&t, format)?),
            _ => {}
        }
        Ok(())
    })?;
    let title = core.as_deref().and_then(title);
    Ok(w.out.render(title.as_deref()))
}

/// The text of an ODT file: `content.xml`, with the title of `meta.xml` first.
pub fn odt(bytes: &[u8], limits: Limits) -> Result<String, ExtractError> {
    let format = Format::Odt;
    let mut archive = open(bytes, format)?;
    let mut budget = limits.max_expanded_bytes;
    let content = read_part(&mut archive, "content.xml", format, limits, &mut budget)?
        .ok_or_else(|| ExtractError::damaged(format, "content.xml is missing"))?;
    let meta = read_part(&mut archive, "meta.xml", format, limits, &mut budget)?;
    let mut w = Walker::default();
    // Notes and annotations are left out (their paragraphs sit inside the text's).
    let mut skipped = 0usize;
    each_event(&content, format, |event| {
        match event {
            Event::Start(e) => {
                let name = local(&e);
                if skipped > 0
                    || matches!(
                        name.as_slice(),
                        b"note" | b"annotation" | b"tracked-changes"
                    )
                {
                    skipped += 1;
                    return Ok(());
                }
                match name.as_slice() {
                    b"p" | b"h" => w.start_paragraph(),
                    b"s" => {
                        let count = attribute(&e, b"c")
                            .and_then(|c| c.parse::<usize>().ok())
                            .unwrap_or(1)
                            .clamp(1, 1000);
                        w.push_text(&" ".repeat(count));
                    }
                    b"tab" => w.push_text("\t"),
                    b"line-break" => w.push_text("\u{2028}"),
                    b"list-item" | b"list-header" => w.contexts.push(Context::ListItem),
                    b"table" => w.start_table(),
                    b"table-cell" => w.start_cell(),
                    _ => {}
                }
            }
            Event::End(e) => {
                if skipped > 0 {
                    skipped -= 1;
                    return Ok(());
                }
                match e.local_name().as_ref() {
                    b"p" | b"h" => w.end_paragraph(),
                    b"list-item" | b"list-header" => {
                        w.contexts.pop();
                    }
                    b"table-cell" => w.end_cell(),
                    b"table-row" => w.end_row(),
                    b"table" => w.end_table(),
                    _ => {}
                }
            }
            Event::Text(t) if skipped == 0 => w.push_text(&text_of(&t, format)?),
            _ => {}
        }
        Ok(())
    })?;
    let title = meta.as_deref().and_then(title);
    Ok(w.out.render(title.as_deref()))
}
