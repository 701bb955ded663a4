//! The text of a page from the positions of its glyphs, in reading order.
//!
//! Glyphs on one baseline make a line; within a line a gap wider than a space separates words
//! and a gap wider than [`CELL_GAP`] separates runs (table cells, or the lines of columns side
//! by side). Runs whose vertical extents overlap make a strip; consecutive strips that leave a
//! common vertical gutter make a section, and a section whose two sides both read as prose (a
//! few words per run) is split there into columns, read left before right, each ordered in the
//! same way. Strips not split are read top to bottom, their runs left to right joined by ` | `.
//! Lines follow each other with a newline, or a blank line where the vertical gap is clearly
//! larger than the page's line spacing or the font size changes (a heading).
//!
//! The heuristics judge geometry only: they know nothing of the fonts' names, of tagged
//! structure, or of drawn rules and boxes.

/// Baselines closer than this (× font size) are one line.
const LINE_TOLERANCE: f64 = 0.35;
/// A horizontal gap wider than this (× font size) between glyphs separates words.
const WORD_GAP: f64 = 0.15;
/// A horizontal gap at least this wide (× font size) separates runs: table cells, or columns.
const CELL_GAP: f64 = 0.9;
/// Word gaps all alike (within 25 %) and narrower than this (× font size) are the stretched
/// spaces of a justified line, however wide.
const JUSTIFIED_MAX: f64 = 3.0;
/// The height of a run above its baseline (× font size).
const ASCENT: f64 = 0.8;
/// The depth of a run below its baseline (× font size).
const DESCENT: f64 = 0.25;
/// Strips at most this far apart vertically (× font size) follow each other as lines of one
/// block, so a strip with text on one side of a gutter only still belongs to the columns.
const CLOSE: f64 = 0.5;
/// The mean number of words per run on each side of a gutter for the sides to be columns of
/// prose rather than the cells of a table.
const PROSE_WORDS: f64 = 3.0;
/// Columns within columns are split this deep at most (the recursion stays shallow whatever
/// the page holds).
const MAX_DEPTH: usize = 16;
/// A baseline gap larger than this multiple of the line spacing separates paragraphs.
const PARAGRAPH: f64 = 1.3;
/// Font sizes differing by more than this fraction separate paragraphs (a heading).
const SIZE_CHANGE: f64 = 0.15;

/// A glyph as placed on the page: the origin of its baseline (`y` grows downwards), its
/// advance width and font size in the same units, and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Glyph {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub size: f64,
    pub text: String,
}

impl Glyph {
    fn is_space(&self) -> bool {
        self.text.trim().is_empty()
    }
}

/// A run of glyphs on one line, without a cell gap inside.
#[derive(Debug)]
struct Run {
    x0: f64,
    x1: f64,
    baseline: f64,
    size: f64,
    line: usize,
    words: usize,
    text: String,
}

impl Run {
    fn top(&self) -> f64 {
        self.baseline - ASCENT * self.size
    }

    fn bottom(&self) -> f64 {
        self.baseline + DESCENT * self.size
    }
}

/// A line of output: its runs' text joined, where it sits, and how many cells it has.
#[derive(Debug)]
struct Line {
    text: String,
    baseline: f64,
    size: f64,
    cells: usize,
}

/// The text of a page: lines in reading order separated by newlines, paragraphs by blank
/// lines, table cells by ` | `.
pub fn page_text(glyphs: &[Glyph]) -> String {
    let runs = runs(glyphs);
    if runs.is_empty() {
        return String::new();
    }
    let mut order = Vec::new();
    read(&runs, (0..runs.len()).collect(), 0, &mut order);
    let lines: Vec<Line> = order.iter().map(|line| render(&runs, line)).collect();
    join(&lines)
}

/// The runs of the page, line after line from the top, left to right within a line.
fn runs(glyphs: &[Glyph]) -> Vec<Run> {
    let mut by_y: Vec<usize> = (0..glyphs.len())
        .filter(|&i| {
            let g = &glyphs[i];
            g.x.is_finite() && g.y.is_finite() && g.width.is_finite() && g.size > 0.0
        })
        .collect();
    by_y.sort_by(|&a, &b| glyphs[a].y.total_cmp(&glyphs[b].y).then(a.cmp(&b)));
    let mut runs = Vec::new();
    let mut start = 0;
    let mut line = 0;
    while start < by_y.len() {
        let first = &glyphs[by_y[start]];
        let mut end = start + 1;
        while end < by_y.len() && glyphs[by_y[end]].y - first.y <= LINE_TOLERANCE * first.size {
            end += 1;
        }
        let mut members = by_y[start..end].to_vec();
        members.sort_by(|&a, &b| glyphs[a].x.total_cmp(&glyphs[b].x).then(a.cmp(&b)));
        split_line(glyphs, &members, line, &mut runs);
        line += 1;
        start = end;
    }
    runs
}

/// Splits one line's glyphs (sorted by x) into runs at cell gaps, with spaces at word gaps.
fn split_line(glyphs: &[Glyph], members: &[usize], line: usize, runs: &mut Vec<Run>) {
    // The glyphs that print, each with the gap before it and whether a space glyph precedes it.
    let mut kept: Vec<(&Glyph, f64, bool)> = Vec::with_capacity(members.len());
    let mut reach = f64::NEG_INFINITY;
    let mut pending_space = false;
    for &i in members {
        let g = &glyphs[i];
        if g.is_space() {
            pending_space = !kept.is_empty();
            continue;
        }
        if let Some(&(p, _, _)) = kept.last() {
            // The same glyph printed again almost in place: an overprint for a bold effect.
            let overprint = p.text == g.text
                && (g.x - p.x).abs() < 0.2 * g.size
                && (g.y - p.y).abs() < 0.2 * g.size;
            if overprint {
                continue;
            }
        }
        kept.push((g, g.x - reach, pending_space));
        reach = reach.max(g.x + g.width);
        pending_space = false;
    }
    // A justified line stretched wide spaces all its words alike: its wide gaps are not cells.
    let spaces: Vec<f64> = kept
        .iter()
        .skip(1)
        .map(|&(g, gap, _)| gap / g.size)
        .filter(|&gap| gap > WORD_GAP)
        .collect();
    let widest = spaces.iter().copied().fold(0.0, f64::max);
    let narrowest = spaces.iter().copied().fold(f64::INFINITY, f64::min);
    let justified = spaces.len() >= 3 && widest <= 1.25 * narrowest && widest < JUSTIFIED_MAX;
    let mut current: Option<Run> = None;
    let mut previous_size = 0.0_f64;
    for (g, gap, space_before) in kept {
        match current.as_mut() {
            Some(run) if justified || gap < CELL_GAP * previous_size.max(g.size) => {
                let word_gap = gap > WORD_GAP * previous_size.min(g.size);
                if (word_gap || space_before) && !run.text.ends_with(' ') {
                    run.text.push(' ');
                    run.words += 1;
                }
                run.text.push_str(&g.text);
                run.x1 = run.x1.max(g.x + g.width);
                run.size = run.size.max(g.size);
            }
            _ => {
                if let Some(run) = current.take() {
                    runs.push(run);
                }
                current = Some(Run {
                    x0: g.x,
                    x1: g.x + g.width,
                    baseline: g.y,
                    size: g.size,
                    line,
                    words: 1,
                    text: g.text.clone(),
                });
            }
        }
        previous_size = g.size;
    }
    if let Some(run) = current {
        runs.push(run);
    }
}

/// A band of runs whose vertical extents overlap.
struct Strip {
    runs: Vec<usize>,
    top: f64,
    bottom: f64,
    size: f64,
}

/// Appends the lines of `region` (indices into `runs`) in reading order, each line the indices
/// of its runs from left to right.
fn read(runs: &[Run], mut region: Vec<usize>, depth: usize, order: &mut Vec<Vec<usize>>) {
    region.sort_by(|&a, &b| runs[a].top().total_cmp(&runs[b].top()).then(a.cmp(&b)));
    let mut strips: Vec<Strip> = Vec::new();
    for &r in &region {
        let run = &runs[r];
        match strips.last_mut() {
            Some(strip) if run.top() < strip.bottom => {
                strip.runs.push(r);
                strip.bottom = strip.bottom.max(run.bottom());
                strip.size = strip.size.max(run.size);
            }
            _ => strips.push(Strip {
                runs: vec![r],
                top: run.top(),
                bottom: run.bottom(),
                size: run.size,
            }),
        }
    }
    let left = region
        .iter()
        .map(|&r| runs[r].x0)
        .fold(f64::INFINITY, f64::min);
    let right = region
        .iter()
        .map(|&r| runs[r].x1)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut i = 0;
    while i < strips.len() {
        let mut gutters = free_spans(runs, &strips[i], left, right);
        let mut j = i;
        while j + 1 < strips.len() && !gutters.is_empty() {
            let next = &strips[j + 1];
            let common = intersect(&gutters, &free_spans(runs, next, left, right));
            let min_width = CELL_GAP * next.size.min(strips[j].size);
            let common: Vec<(f64, f64)> = common
                .into_iter()
                .filter(|(lo, hi)| hi - lo >= min_width)
                .collect();
            if common.is_empty() {
                break;
            }
            let close = next.top - strips[j].bottom <= CLOSE * next.size.max(strips[j].size);
            let sided = |strip: &Strip| common.iter().any(|&g| two_sided(runs, &strip.runs, g));
            // A strip joins the columns when it follows closely, or when it and the one
            // before both have text on each side of the gutter.
            let joins = close || (sided(&strips[j]) && sided(next));
            if !joins {
                break;
            }
            gutters = common;
            j += 1;
        }
        let section: Vec<usize> = strips[i..=j]
            .iter()
            .flat_map(|s| s.runs.iter().copied())
            .collect();
        let split = (depth < MAX_DEPTH)
            .then_some(&gutters)
            .into_iter()
            .flatten()
            .find(|&&g| two_sided(runs, &section, g) && prose_sides(runs, &section, g));
        if let Some(&(lo, _)) = split {
            let (left_side, right_side): (Vec<usize>, Vec<usize>) =
                section.iter().partition(|&&r| runs[r].x1 <= lo);
            read(runs, left_side, depth + 1, order);
            read(runs, right_side, depth + 1, order);
            i = j + 1;
        } else {
            lines_of(runs, &strips[i].runs, order);
            i += 1;
        }
    }
}

/// The horizontal gaps of a strip within `left..right`: between its runs and beside them.
fn free_spans(runs: &[Run], strip: &Strip, left: f64, right: f64) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = strip
        .runs
        .iter()
        .map(|&r| (runs[r].x0, runs[r].x1))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut gaps = Vec::new();
    let mut reach = left;
    for (x0, x1) in spans {
        if x0 > reach {
            gaps.push((reach, x0));
        }
        reach = reach.max(x1);
    }
    if right > reach {
        gaps.push((reach, right));
    }
    gaps
}

/// The parts common to two sets of disjoint intervals.
fn intersect(a: &[(f64, f64)], b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let (lo, hi) = (a0.max(b0), a1.min(b1));
            if hi > lo {
                out.push((lo, hi));
            }
        }
    }
    out
}

/// Whether the runs have text on both sides of the gutter.
fn two_sided(runs: &[Run], members: &[usize], (lo, hi): (f64, f64)) -> bool {
    members.iter().any(|&r| runs[r].x1 <= lo) && members.iter().any(|&r| runs[r].x0 >= hi)
}

/// Whether both sides of the gutter read as prose: runs of several words on average.
fn prose_sides(runs: &[Run], members: &[usize], (lo, hi): (f64, f64)) -> bool {
    let prose = |side: Vec<&Run>| {
        let words: usize = side.iter().map(|r| r.words).sum();
        !side.is_empty() && words as f64 >= PROSE_WORDS * side.len() as f64
    };
    prose(
        members
            .iter()
            .map(|&r| &runs[r])
            .filter(|r| r.x1 <= lo)
            .collect(),
    ) && prose(
        members
            .iter()
            .map(|&r| &runs[r])
            .filter(|r| r.x0 >= hi)
            .collect(),
    )
}

/// Appends the lines of one strip, top to bottom, runs left to right.
fn lines_of(runs: &[Run], members: &[usize], order: &mut Vec<Vec<usize>>) {
    let mut members = members.to_vec();
    members.sort_by(|&a, &b| {
        (runs[a].line.cmp(&runs[b].line)).then(runs[a].x0.total_cmp(&runs[b].x0))
    });
    let mut line: Vec<usize> = Vec::new();
    for r in members {
        if line.first().is_some_and(|&f| runs[f].line != runs[r].line) {
            order.push(std::mem::take(&mut line));
        }
        line.push(r);
    }
    if !line.is_empty() {
        order.push(line);
    }
}

/// The text of one line: its runs joined by ` | `, or by a space after a list marker.
fn render(runs: &[Run], members: &[usize]) -> Line {
    let mut text = String::new();
    let mut cells = 0;
    for (k, &r) in members.iter().enumerate() {
        let run = &runs[r];
        if k == 0 {
            cells = 1;
        } else if k == 1 && members.len() == 2 && is_marker(&runs[members[0]].text) {
            text.push(' ');
        } else {
            text.push_str(" | ");
            cells += 1;
        }
        text.push_str(run.text.trim());
    }
    let first = &runs[members[0]];
    Line {
        text,
        baseline: first.baseline,
        size: members.iter().map(|&r| runs[r].size).fold(0.0, f64::max),
        cells,
    }
}

/// A list item's bullet or number (`•`, `-`, `3.`, `b)`, `iv.`), or a heading's number (`2.1`).
fn is_marker(text: &str) -> bool {
    let text = text.trim();
    if matches!(text, "•" | "◦" | "▪" | "‣" | "·" | "-" | "–" | "—" | "*") {
        return true;
    }
    if text.contains('.') && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return true;
    }
    let Some(body) = text.strip_suffix(['.', ')']) else {
        return false;
    };
    let body = body.strip_prefix('(').unwrap_or(body);
    !body.is_empty() && body.chars().count() <= 3 && body.chars().all(char::is_alphanumeric)
}

/// The lines joined: a blank line between paragraphs, a newline otherwise.
fn join(lines: &[Line]) -> String {
    // The line spacing of each font size: the smallest gap between consecutive lines of that
    // size, within bounds, so that a page of single-line paragraphs keeps its blank lines.
    let mut spacing: Vec<(f64, f64)> = Vec::new();
    for pair in lines.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let gap = b.baseline - a.baseline;
        if same_size(a.size, b.size) && gap >= 0.9 * a.size {
            match spacing
                .iter_mut()
                .find(|(size, _)| same_size(*size, a.size))
            {
                Some((_, min)) => *min = min.min(gap),
                None => spacing.push((a.size, gap)),
            }
        }
    }
    let spacing_of = |size: f64| {
        spacing
            .iter()
            .find(|(s, _)| same_size(*s, size))
            .map_or(1.2 * size, |&(_, gap)| gap.clamp(size, 1.5 * size))
    };
    let mut out = String::new();
    for (k, line) in lines.iter().enumerate() {
        if k > 0 {
            let previous = &lines[k - 1];
            let gap = line.baseline - previous.baseline;
            let paragraph = if gap <= 0.1 * line.size {
                // Back up the page: the next column, read on as the same paragraph.
                false
            } else if previous.cells > 1 && line.cells > 1 {
                false
            } else if !same_size(previous.size, line.size) {
                true
            } else {
                gap > PARAGRAPH * spacing_of(line.size)
            };
            out.push_str(if paragraph { "\n\n" } else { "\n" });
        }
        out.push_str(&line.text);
    }
    out
}

fn same_size(a: f64, b: f64) -> bool {
    (a - b).abs() <= SIZE_CHANGE * a.max(b)
}

#[cfg(test)]
mod tests {
    use super::{Glyph, page_text};

    /// Glyphs for `text` from `x` on baseline `y`, each character 0.5 × `size` wide.
    fn word(glyphs: &mut Vec<Glyph>, x: f64, y: f64, size: f64, text: &str) {
        for (i, c) in text.chars().enumerate() {
            glyphs.push(Glyph {
                x: x + i as f64 * 0.5 * size,
                y,
                width: 0.5 * size,
                size,
                text: c.to_string(),
            });
        }
    }

    fn page(lines: &[(f64, f64, f64, &str)]) -> String {
        let mut glyphs = Vec::new();
        for &(x, y, size, text) in lines {
            word(&mut glyphs, x, y, size, text);
        }
        page_text(&glyphs)
    }

    #[test]
    fn lines_words_and_paragraphs() {
        assert_eq!(
            page(&[
                (50.0, 60.0, 10.0, "one two"),
                (50.0, 72.0, 10.0, "three"),
                (50.0, 96.0, 10.0, "four"),
                (50.0, 108.0, 10.0, "five"),
            ]),
            "one two\nthree\n\nfour\nfive"
        );
    }

    #[test]
    fn a_heading_is_its_own_paragraph() {
        assert_eq!(
            page(&[
                (50.0, 40.0, 16.0, "Heading"),
                (50.0, 58.0, 10.0, "Body text")
            ]),
            "Heading\n\nBody text"
        );
    }

    #[test]
    fn glyphs_are_ordered_by_position_not_by_stream() {
        let mut glyphs = Vec::new();
        word(&mut glyphs, 50.0, 60.0, 10.0, "world");
        word(&mut glyphs, 50.0, 72.0, 10.0, "second");
        word(&mut glyphs, 20.0, 60.0, 10.0, "hello");
        assert_eq!(page_text(&glyphs), "hello world\nsecond");
    }

    #[test]
    fn explicit_spaces_separate_words_and_overprints_are_dropped() {
        let mut glyphs = Vec::new();
        word(&mut glyphs, 50.0, 60.0, 10.0, "ab");
        word(&mut glyphs, 50.5, 60.2, 10.0, "ab");
        // A space of no width, the next word right after it.
        glyphs.push(Glyph {
            x: 60.0,
            y: 60.0,
            width: 0.0,
            size: 10.0,
            text: " ".to_owned(),
        });
        word(&mut glyphs, 60.5, 60.0, 10.0, "cd");
        assert_eq!(page_text(&glyphs), "ab cd");
    }

    #[test]
    fn table_rows_keep_their_cells() {
        assert_eq!(
            page(&[
                (50.0, 40.0, 10.0, "A table follows."),
                (50.0, 70.0, 10.0, "Name"),
                (120.0, 70.0, 10.0, "Depth"),
                (190.0, 70.0, 10.0, "Notes"),
                (50.0, 90.0, 10.0, "North quay"),
                (120.0, 90.0, 10.0, "12 m"),
                (190.0, 90.0, 10.0, "dredged"),
                (50.0, 110.0, 10.0, "South"),
                (120.0, 110.0, 10.0, "9 m"),
                (190.0, 110.0, 10.0, "closed"),
            ]),
            "A table follows.\n\nName | Depth | Notes\nNorth quay | 12 m | dredged\n\
             South | 9 m | closed"
        );
    }

    #[test]
    fn a_stretched_justified_line_has_no_cells() {
        assert_eq!(
            page(&[
                (50.0, 40.0, 10.0, "stretched"),
                (110.0, 40.0, 10.0, "words"),
                (150.0, 40.0, 10.0, "in"),
                (175.0, 40.0, 10.0, "a"),
                (195.0, 40.0, 10.0, "line"),
            ]),
            "stretched words in a line"
        );
    }

    #[test]
    fn list_markers_join_their_item() {
        assert_eq!(
            page(&[
                (50.0, 40.0, 10.0, "-"),
                (65.0, 40.0, 10.0, "first item"),
                (50.0, 52.0, 10.0, "2."),
                (65.0, 52.0, 10.0, "second item"),
            ]),
            "- first item\n2. second item"
        );
    }

    #[test]
    fn two_columns_read_left_then_right_under_a_title_and_above_a_footer() {
        let mut lines = vec![(40.0, 30.0, 16.0, "Title")];
        // Written right column first.
        for (k, text) in ["right one two three", "right four five six"]
            .iter()
            .enumerate()
        {
            lines.push((300.0, 60.0 + 12.0 * k as f64, 10.0, text));
        }
        for (k, text) in [
            "left one two three",
            "left four five six",
            "left seven eight",
        ]
        .iter()
        .enumerate()
        {
            lines.push((40.0, 60.0 + 12.0 * k as f64, 10.0, text));
        }
        lines.push((40.0, 130.0, 10.0, "A footer under both columns"));
        assert_eq!(
            page(&lines),
            "Title\n\nleft one two three\nleft four five six\nleft seven eight\n\
             right one two three\nright four five six\n\nA footer under both columns"
        );
    }

    #[test]
    fn two_columns_with_misaligned_baselines() {
        let mut lines = Vec::new();
        for k in 0..4 {
            lines.push((40.0, 60.0 + 12.0 * k as f64, 10.0, "left words in a column"));
            lines.push((
                300.0,
                65.0 + 13.0 * k as f64,
                10.0,
                "right words in a column",
            ));
        }
        let text = page(&lines);
        assert_eq!(
            text,
            [
                ["left words in a column"; 4].join("\n"),
                ["right words in a column"; 4].join("\n")
            ]
            .join("\n")
        );
    }

    #[test]
    fn columns_of_one_line_each_stay_apart() {
        assert_eq!(
            page(&[
                (300.0, 60.0, 10.0, "right one two three"),
                (40.0, 60.0, 10.0, "left one two three"),
            ]),
            "left one two three\nright one two three"
        );
    }

    #[test]
    fn many_columns_keep_all_their_text() {
        let mut lines = Vec::new();
        for column in 0..40 {
            for line in 0..2 {
                let x = 10.0 + 60.0 * column as f64;
                lines.push((x, 60.0 + 12.0 * line as f64, 10.0, "aa bb cc"));
            }
        }
        let text = page(&lines);
        assert_eq!(text.matches("aa bb cc").count(), 80, "{text}");
        assert!(text.starts_with("aa bb cc\naa bb cc\naa bb cc"), "{text}");
    }

    #[test]
    fn an_empty_page_has_no_text() {
        assert_eq!(page_text(&[]), "");
        assert_eq!(page(&[(10.0, 10.0, 10.0, "   ")]), "");
    }
}
