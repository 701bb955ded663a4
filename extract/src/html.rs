//! HTML, parsed by `scraper` (html5ever's tree builder): the title first, then the body's
//! text without scripts, styles, navigation or hidden parts.

use ego_tree::iter::Edge;
use scraper::{Html, Node};

use crate::blocks::{Flow, collapse};

/// Elements whose content is left out.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "nav", "head", "iframe", "object", "embed", "svg",
    "math", "canvas", "select", "button", "datalist",
];

/// Elements that end the inline text before and after them.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "dd",
    "details",
    "dialog",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "main",
    "p",
    "pre",
    "section",
    "summary",
];

fn skipped(element: &scraper::node::Element) -> bool {
    SKIPPED.contains(&element.name())
        || element.attr("role") == Some("navigation")
        || element.attr("hidden").is_some()
        || element.attr("aria-hidden") == Some("true")
}

/// The text of an HTML document.
pub fn extract(source: &str) -> String {
    let html = Html::parse_document(source);
    let title = html.tree.nodes().find_map(|node| match node.value() {
        Node::Element(e) if e.name() == "title" => Some(collapse(
            &node
                .children()
                .filter_map(|c| c.value().as_text().map(|t| t.to_string()))
                .collect::<String>(),
        )),
        _ => None,
    });
    let mut flow = Flow::default();
    // Depth inside a left-out element.
    let mut skipping = 0usize;
    for edge in html.tree.root().traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                Node::Element(e) => {
                    if skipping > 0 || skipped(e) {
                        skipping += 1;
                        continue;
                    }
                    match e.name() {
                        "br" => flow.line_break(),
                        "li" => flow.start_item(),
                        "table" => flow.start_table(),
                        "td" | "th" => flow.start_cell(),
                        "tr" | "ul" | "ol" | "menu" => flow.flush(),
                        "pre" => {
                            flow.flush();
                            flow.preformatted += 1;
                        }
                        name if BLOCKS.contains(&name) => flow.flush(),
                        _ => {}
                    }
                }
                Node::Text(text) if skipping == 0 => flow.text(text),
                _ => {}
            },
            Edge::Close(node) => {
                let Node::Element(e) = node.value() else {
                    continue;
                };
                if skipping > 0 {
                    skipping -= 1;
                    continue;
                }
                match e.name() {
                    "li" => flow.end_item(),
                    "table" => flow.end_table(),
                    "td" | "th" => flow.end_cell(),
                    "tr" => flow.end_row(),
                    "ul" | "ol" | "menu" => flow.end_list(),
                    "pre" => {
                        flow.flush();
                        flow.preformatted = flow.preformatted.saturating_sub(1);
                    }
                    name if BLOCKS.contains(&name) => flow.flush(),
                    _ => {}
                }
            }
        }
    }
    flow.render(title.as_deref())
}
