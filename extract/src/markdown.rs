//! Markdown (CommonMark with tables), parsed by `pulldown-cmark`.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::blocks::Flow;

/// The text of a Markdown document: headings and paragraphs, list items and table rows one per
/// line, code blocks as they are; markup and raw HTML left out.
pub fn extract(source: &str) -> String {
    let mut flow = Flow::default();
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(source, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph | Tag::Heading { .. } | Tag::BlockQuote(_) => flow.flush(),
                Tag::CodeBlock(_) => {
                    flow.flush();
                    flow.preformatted += 1;
                }
                Tag::List(_) => flow.flush(),
                Tag::Item => flow.start_item(),
                Tag::Table(_) => flow.start_table(),
                Tag::TableHead | Tag::TableRow => flow.flush(),
                Tag::TableCell => flow.start_cell(),
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::BlockQuote(_) => flow.flush(),
                TagEnd::CodeBlock => {
                    flow.flush();
                    flow.preformatted = flow.preformatted.saturating_sub(1);
                }
                TagEnd::List(_) => flow.end_list(),
                TagEnd::Item => flow.end_item(),
                TagEnd::Table => flow.end_table(),
                TagEnd::TableHead | TagEnd::TableRow => flow.end_row(),
                TagEnd::TableCell => flow.end_cell(),
                _ => {}
            },
            Event::Text(text) | Event::Code(text) => flow.text(&text),
            Event::SoftBreak => flow.text(" "),
            Event::HardBreak => flow.line_break(),
            Event::Rule => flow.flush(),
            _ => {}
        }
    }
    flow.render(None)
}
