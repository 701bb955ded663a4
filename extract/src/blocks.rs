//! The shape of extracted text: paragraphs (headings included) separated by blank lines, and
//! runs of lines (list items, table rows) one per line.

/// Extracted text as it is built.
#[derive(Debug, Default)]
pub struct Blocks {
    blocks: Vec<Block>,
    /// The last block is a run of lines that the next line may extend.
    lines_open: bool,
}

#[derive(Debug)]
enum Block {
    Paragraph(String),
    Lines(Vec<String>),
}

/// Collapses every run of whitespace into one space and trims both ends; `\u{2028}` (a line
/// break the source asked for) becomes a line break.
pub fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c == '\u{2028}' {
            while out.ends_with(' ') {
                out.pop();
            }
            out.push('\n');
            space = false;
        } else if c.is_whitespace() {
            space = true;
        } else {
            if space && !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
    }
    out.trim_matches(|c: char| c == '\n' || c == ' ').to_owned()
}

impl Blocks {
    /// A paragraph or heading of its own; empty text adds nothing.
    pub fn paragraph(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        self.blocks.push(Block::Paragraph(text.to_owned()));
        self.lines_open = false;
    }

    /// A list item or table row: one line, grouped with the lines just before it.
    pub fn line(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        if self.lines_open
            && let Some(Block::Lines(lines)) = self.blocks.last_mut()
        {
            lines.push(text.to_owned());
            return;
        }
        self.blocks.push(Block::Lines(vec![text.to_owned()]));
        self.lines_open = true;
    }

    /// Ends the current run of lines (the end of a list or table).
    pub fn end_lines(&mut self) {
        self.lines_open = false;
    }

    /// The text, with `title` first unless the text already starts with it.
    pub fn render(self, title: Option<&str>) -> String {
        let mut parts: Vec<String> = self
            .blocks
            .into_iter()
            .map(|block| match block {
                Block::Paragraph(text) => text,
                Block::Lines(lines) => lines.join("\n"),
            })
            .collect();
        if let Some(title) = title.map(collapse).filter(|t| !t.is_empty())
            && parts.first() != Some(&title)
        {
            parts.insert(0, title);
        }
        parts.join("\n\n")
    }
}

/// Table rows: the cells of each row joined by ` | `.
#[derive(Debug, Default)]
pub struct Table {
    pub row: Vec<String>,
    pub cell: Vec<String>,
}

impl Table {
    /// Ends a cell: its paragraphs on one line.
    pub fn end_cell(&mut self) {
        let text = collapse(&self.cell.join(" "));
        self.row.push(text.replace('\n', " "));
        self.cell.clear();
    }

    /// Ends a row and gives its line (`None` when every cell is empty).
    pub fn end_row(&mut self) -> Option<String> {
        let row = std::mem::take(&mut self.row);
        if row.iter().all(String::is_empty) {
            return None;
        }
        Some(row.join(" | "))
    }
}

/// Where inline text goes when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Cell,
    ListItem,
}

/// Text that flows in as a tree is walked (HTML, Markdown): inline text gathers until a block
/// boundary, then becomes a paragraph, a list line or a table cell.
#[derive(Debug, Default)]
pub struct Flow {
    pub out: Blocks,
    pub inline: String,
    contexts: Vec<Context>,
    tables: Vec<Table>,
    /// Inside preformatted text, line breaks are kept.
    pub preformatted: usize,
}

impl Flow {
    /// Adds inline text.
    pub fn text(&mut self, text: &str) {
        if self.preformatted > 0 {
            self.inline.push_str(&text.replace('\n', "\u{2028}"));
        } else {
            self.inline.push_str(text);
        }
    }

    /// A line break within a paragraph.
    pub fn line_break(&mut self) {
        self.inline.push('\u{2028}');
    }

    /// A block boundary: the inline text so far ends.
    pub fn flush(&mut self) {
        let text = collapse(&std::mem::take(&mut self.inline));
        if text.is_empty() {
            return;
        }
        if self.contexts.contains(&Context::Cell) {
            if let Some(table) = self.tables.last_mut() {
                table.cell.push(text);
            }
        } else if self.contexts.last() == Some(&Context::ListItem) {
            self.out.line(&text.replace('\n', " "));
        } else {
            self.out.end_lines();
            self.out.paragraph(&text);
        }
    }

    pub fn start_item(&mut self) {
        self.flush();
        self.contexts.push(Context::ListItem);
    }

    pub fn end_item(&mut self) {
        self.flush();
        self.contexts.pop();
    }

    /// The end of a list: the next lines start a new block.
    pub fn end_list(&mut self) {
        self.flush();
        if !self.contexts.contains(&Context::ListItem) {
            self.out.end_lines();
        }
    }

    pub fn start_table(&mut self) {
        self.flush();
        if self.tables.is_empty() {
            self.out.end_lines();
        }
        self.tables.push(Table::default());
    }

    pub fn end_table(&mut self) {
        self.flush();
        self.tables.pop();
        if self.tables.is_empty() {
            self.out.end_lines();
        }
    }

    pub fn start_cell(&mut self) {
        self.flush();
        self.contexts.push(Context::Cell);
    }

    pub fn end_cell(&mut self) {
        self.flush();
        self.contexts.pop();
        if let Some(table) = self.tables.last_mut() {
            table.end_cell();
        }
    }

    pub fn end_row(&mut self) {
        self.flush();
        let Some(line) = self.tables.last_mut().and_then(Table::end_row) else {
            return;
        };
        let depth = self.tables.len();
        if depth == 1 {
            self.out.line(&line);
        } else if let Some(parent) = self.tables.get_mut(depth.saturating_sub(2)) {
            // A table inside a cell: its rows are part of the cell's text.
            parent.cell.push(line);
        }
    }

    /// The text, `title` first.
    pub fn render(mut self, title: Option<&str>) -> String {
        self.flush();
        self.out.render(title)
    }
}
