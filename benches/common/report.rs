//! Tables printed to stdout: fixed-width columns, cells formatted by the caller.

/// A column: its header, width, alignment and the spaces before it.
pub struct Column {
    pub header: &'static str,
    pub width: usize,
    pub left: bool,
    pub gap: usize,
}

impl Column {
    /// A right-aligned column.
    pub const fn right(header: &'static str, width: usize, gap: usize) -> Self {
        Self {
            header,
            width,
            left: false,
            gap,
        }
    }

    /// A left-aligned column.
    pub const fn left(header: &'static str, width: usize, gap: usize) -> Self {
        Self {
            header,
            width,
            left: true,
            gap,
        }
    }
}

fn line<'a>(columns: &[Column], cells: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (column, cell) in columns.iter().zip(cells) {
        out.push_str(&" ".repeat(column.gap));
        let width = column.width;
        if column.left {
            out.push_str(&format!("{cell:<width$}"));
        } else {
            out.push_str(&format!("{cell:>width$}"));
        }
    }
    out.trim_end().to_owned()
}

/// The header line, then one line per row.
pub fn print_table(columns: &[Column], rows: &[Vec<String>]) {
    println!("{}", line(columns, columns.iter().map(|c| c.header)));
    for row in rows {
        println!("{}", line(columns, row.iter().map(String::as_str)));
    }
}
