//! Prompt templates: text with named placeholders in braces.
//!
//! The grammar, read left to right:
//!
//! ```text
//! template    = { escape | reference | text }
//! escape      = "{{"                      (a literal "{")
//!             | "}}"                      (a literal "}")
//! reference   = "{" identifier "}"        (a placeholder, by name)
//! identifier  = [A-Za-z_] [A-Za-z0-9_]*
//! text        = any other character, including a brace that starts
//!               neither an escape nor a reference
//! ```
//!
//! So `{ x }`, `{1a}`, an unclosed `{name` and a lone `}` are plain text: a template never fails
//! to parse, and only a well-formed `{identifier}` is ever treated as a reference. Escapes are
//! recognised before references, which makes `{{name}}` the literal text `{name}` and
//! `{{{name}}}` a reference wrapped in literal braces.
//!
//! Rendering replaces each reference exactly once and never scans the inserted values again: a
//! value that itself contains `{other}` or `{{` reaches the output unchanged, so text retrieved
//! from documents cannot inject placeholders into a prompt.

/// A parsed prompt template: literal text interleaved with placeholder references.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Template {
    /// Adjacent literal pieces are merged while parsing, so two `Text` segments never follow
    /// each other.
    segments: Vec<Segment>,
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Literal output, with escapes already reduced to single braces.
    Text(String),
    /// A placeholder reference, by name (without the braces).
    Reference(String),
}

/// The placeholders a template references but the renderer had no value for.
///
/// Its `Display` is the interface's `details.error` text for this case, reproduced exactly:
/// `Prompts contain unfilled placeholders: <names>`, the names joined with `, `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Prompts contain unfilled placeholders: {}", .names.join(", "))]
pub struct Unfilled {
    /// The unfilled names, in order of first appearance, each listed once.
    pub names: Vec<String>,
}

impl Template {
    /// Parses a template string. Never fails: whatever is not an escape or a well-formed
    /// reference is kept as literal text.
    pub fn parse(source: &str) -> Self {
        let bytes = source.as_bytes();
        let mut segments = Vec::new();
        let mut text = String::new();
        // Every byte this loop inspects is ASCII (a brace or an identifier character), and an
        // ASCII byte never occurs inside a multi-byte UTF-8 sequence, so `position` always
        // stays on a character boundary and the string slices below cannot panic.
        let mut position = 0;
        while position < bytes.len() {
            let rest = &source[position..];
            if rest.starts_with("{{") {
                text.push('{');
                position += 2;
            } else if rest.starts_with("}}") {
                text.push('}');
                position += 2;
            } else if let Some(name) = reference_at(rest) {
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Reference(name.to_owned()));
                position += name.len() + 2;
            } else if rest.starts_with(['{', '}']) {
                // A brace that starts neither an escape nor a reference is plain text.
                text.push_str(&rest[..1]);
                position += 1;
            } else {
                // Copy everything up to the next brace at once; only braces need a decision.
                let run = rest.find(['{', '}']).unwrap_or(rest.len());
                text.push_str(&rest[..run]);
                position += run;
            }
        }
        if !text.is_empty() {
            segments.push(Segment::Text(text));
        }
        Self { segments }
    }

    /// The placeholder references of the template, in order of appearance. A name referenced
    /// several times is yielded each time.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Reference(name) => Some(name.as_str()),
            Segment::Text(_) => None,
        })
    }

    /// Renders the template, replacing every reference with `value_of(name)`.
    ///
    /// Values are inserted verbatim and never re-scanned. When some references have no value,
    /// returns [`Unfilled`] listing all of them (first appearance order, each once) rather
    /// than only the first, so one error names everything the caller must supply.
    pub fn render<'value>(
        &self,
        value_of: impl Fn(&str) -> Option<&'value str>,
    ) -> Result<String, Unfilled> {
        let mut output = String::new();
        let mut unfilled: Vec<String> = Vec::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => output.push_str(text),
                Segment::Reference(name) => match value_of(name) {
                    Some(value) => output.push_str(value),
                    None => {
                        if !unfilled.iter().any(|listed| listed == name) {
                            unfilled.push(name.clone());
                        }
                    }
                },
            }
        }
        if unfilled.is_empty() {
            Ok(output)
        } else {
            Err(Unfilled { names: unfilled })
        }
    }
}

/// The name of the reference `{identifier}` that starts `text`, if `text` starts with one.
fn reference_at(text: &str) -> Option<&str> {
    let after_brace = text.strip_prefix('{')?;
    let name_length = identifier_prefix_length(after_brace);
    if name_length == 0 || !after_brace[name_length..].starts_with('}') {
        return None;
    }
    Some(&after_brace[..name_length])
}

/// The length in bytes of the longest identifier (`[A-Za-z_][A-Za-z0-9_]*`) that starts
/// `text`; 0 when `text` does not start with one.
fn identifier_prefix_length(text: &str) -> usize {
    let bytes = text.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_alphabetic() || *first == b'_' => bytes
            .iter()
            .position(|byte| !(byte.is_ascii_alphanumeric() || *byte == b'_'))
            .unwrap_or(bytes.len()),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::metadata_schema::is_identifier;

    /// Renders with a fixed set of values.
    fn render_with(template: &str, values: &[(&str, &str)]) -> Result<String, Unfilled> {
        let values: HashMap<&str, &str> = values.iter().copied().collect();
        Template::parse(template).render(|name| values.get(name).copied())
    }

    fn names_of(template: &str) -> Vec<String> {
        Template::parse(template)
            .names()
            .map(str::to_owned)
            .collect()
    }

    /// The template whose rendering is exactly `text`: every brace doubled.
    fn escape(text: &str) -> String {
        text.replace('{', "{{").replace('}', "}}")
    }

    #[test]
    fn text_without_braces_is_one_literal() {
        assert_eq!(
            render_with("hello world", &[]),
            Ok("hello world".to_owned())
        );
        assert!(names_of("hello world").is_empty());
    }

    #[test]
    fn empty_template_renders_empty() {
        assert_eq!(Template::parse(""), Template::default());
        assert_eq!(render_with("", &[]), Ok(String::new()));
    }

    #[test]
    fn reference_is_replaced_by_its_value() {
        assert_eq!(
            render_with(
                "Answer {question} using {context}.",
                &[("question", "why?"), ("context", "because")]
            ),
            Ok("Answer why? using because.".to_owned())
        );
        assert_eq!(
            names_of("Answer {question} using {context}."),
            ["question", "context"]
        );
    }

    #[test]
    fn identifiers_may_contain_underscores_and_digits() {
        assert_eq!(
            names_of("{_a} {a_1} {A9_z} {_}"),
            ["_a", "a_1", "A9_z", "_"]
        );
    }

    #[test]
    fn names_keep_duplicates_in_order() {
        assert_eq!(names_of("{a}{b}{a}"), ["a", "b", "a"]);
    }

    #[test]
    fn repeated_reference_is_replaced_each_time() {
        assert_eq!(render_with("{a}-{a}", &[("a", "x")]), Ok("x-x".to_owned()));
    }

    #[test]
    fn double_braces_are_literal_braces() {
        assert_eq!(render_with("{{ and }}", &[]), Ok("{ and }".to_owned()));
        assert_eq!(render_with("{{{{", &[]), Ok("{{".to_owned()));
    }

    #[test]
    fn escaped_reference_is_literal_text() {
        assert_eq!(render_with("{{name}}", &[]), Ok("{name}".to_owned()));
        assert!(names_of("{{name}}").is_empty());
    }

    #[test]
    fn escapes_are_recognised_before_references() {
        // `{{` at 0, `{name}` at 2, `}}` at 8.
        assert_eq!(names_of("{{{name}}}"), ["name"]);
        assert_eq!(
            render_with("{{{name}}}", &[("name", "v")]),
            Ok("{v}".to_owned())
        );
        // `{{` first, then `name}` is text and `}` lone.
        assert_eq!(render_with("{{name}", &[]), Ok("{name}".to_owned()));
    }

    #[test]
    fn malformed_braces_are_plain_text() {
        for template in [
            "{ x }", "{1a}", "{name", "}", "{", "{}", "{a-b}", "{a b}", "x } y", "{é}", "a{",
        ] {
            assert!(names_of(template).is_empty(), "{template}");
            assert_eq!(
                render_with(template, &[]),
                Ok(template.to_owned()),
                "{template}"
            );
        }
    }

    #[test]
    fn reference_can_follow_a_lone_brace() {
        assert_eq!(names_of("{{a}"), Vec::<String>::new());
        assert_eq!(names_of("{ {a}"), ["a"]);
        assert_eq!(
            render_with("} {a} {", &[("a", "1")]),
            Ok("} 1 {".to_owned())
        );
    }

    #[test]
    fn multibyte_text_is_kept() {
        assert_eq!(
            render_with("Ünïcødé {x} 日本語 {{🙂}}", &[("x", "→")]),
            Ok("Ünïcødé → 日本語 {🙂}".to_owned())
        );
    }

    #[test]
    fn values_are_not_rescanned() {
        assert_eq!(
            render_with("{a} {b}", &[("a", "{b} {{"), ("b", "B")]),
            Ok("{b} {{ B".to_owned())
        );
    }

    #[test]
    fn empty_value_fills_the_reference() {
        assert_eq!(render_with("[{a}]", &[("a", "")]), Ok("[]".to_owned()));
    }

    #[test]
    fn unfilled_lists_missing_names_once_in_order() {
        assert_eq!(
            render_with("{c} {a} {b} {c} {a}", &[("b", "1")]),
            Err(Unfilled {
                names: vec!["c".to_owned(), "a".to_owned()]
            })
        );
    }

    #[test]
    fn unfilled_message_is_the_interface_detail() {
        let unfilled = Unfilled {
            names: vec!["a".to_owned(), "b".to_owned()],
        };
        assert_eq!(
            unfilled.to_string(),
            "Prompts contain unfilled placeholders: a, b"
        );
    }

    #[test]
    fn identifier_rule() {
        for name in ["a", "_", "_a1", "Abc_9", "query"] {
            assert!(is_identifier(name), "{name}");
        }
        for name in ["", "1a", "a-b", "a b", " a", "a ", "é", "{a}"] {
            assert!(!is_identifier(name), "{name}");
        }
    }

    proptest! {
        #[test]
        fn text_without_braces_renders_to_itself(text in "[^{}]*") {
            prop_assert_eq!(render_with(&text, &[]), Ok(text.clone()));
        }

        #[test]
        fn values_are_inserted_verbatim(
            before in "[^{}]*",
            after in "[^{}]*",
            first in r"(\{|\}|[a-z]|\{[a-z]+\}|é)*",
            second in r"(\{|\}|[a-z]|\{[a-z]+\}|é)*",
        ) {
            let template = format!("{before}{{first}}{after}{{second}}");
            let rendered = render_with(&template, &[("first", &first), ("second", &second)]);
            prop_assert_eq!(rendered, Ok(format!("{before}{first}{after}{second}")));
        }

        #[test]
        fn doubled_braces_render_to_the_original_text(text in r"(\PC|\{|\}|[a-z_]|\{[a-z_]+\})*") {
            let template = Template::parse(&escape(&text));
            prop_assert_eq!(template.names().count(), 0);
            prop_assert_eq!(template.render(|_| None), Ok(text.clone()));
        }

        #[test]
        fn parse_never_panics(text in any::<String>()) {
            let template = Template::parse(&text);
            // Whatever was parsed renders when every reference gets a value.
            prop_assert!(template.render(|_| Some("")).is_ok());
        }

        #[test]
        fn parse_never_panics_on_brace_heavy_text(text in r"[{}a_1é日 ]*") {
            let template = Template::parse(&text);
            let names: Vec<&str> = template.names().collect();
            prop_assert!(names.iter().all(|name| is_identifier(name)));
            prop_assert!(template.render(|_| Some("")).is_ok());
        }
    }
}
