//! Extraction of each format from the fixtures in `tests/fixtures/files/` (how each was made:
//! the README there), with the exact text expected, and each way a file fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use trove_extract::{ExtractError, Format, Limits, Unsupported, detect, extract};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/files")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Detects the fixture's format (which must be `expected`) and extracts its text.
fn text_of(name: &str, expected: Format) -> Result<String, ExtractError> {
    let bytes = fixture(name);
    assert_eq!(detect(&bytes, name), Ok(expected), "{name}");
    extract(&bytes, expected, Limits::default())
}

#[test]
fn pdf_title_text_hyphenation_non_ascii_and_table() {
    assert_eq!(
        text_of("report.pdf", Format::Pdf).unwrap(),
        "Quarterly Pigment Report\n\nFindings\n\nThe Café in Zürich kept its naïve façade.\n\n\
         The committee reviewed the international budget for paint.\n\nPigment | Origin\n\
         ultramarine blue | Afghanistan\nochre | France"
    );
}

#[test]
fn pdf_two_columns_in_reading_order_whatever_the_order_written() {
    // The right column is written first; the text runs on (`be-` / `fore`) from the foot of
    // the left column to the top of the right one.
    assert_eq!(
        text_of("two-columns.pdf", Format::Pdf).unwrap(),
        "Harbour Survey\n\nThe northern quay was inspected\n\
         in March by the harbour engineers and the port authority.\n\n\
         Its cranes need new cables before the autumn storms. The\n\
         southern quay remains closed.\n\nRepairs are planned for the\nspring of next year.\n\n\
         Prepared for the harbour board of the city of Kiel."
    );
}

#[test]
fn pdf_heading_paragraph_table_and_list() {
    assert_eq!(
        text_of("table.pdf", Format::Pdf).unwrap(),
        "Tide Table\n\nTides at the Harbour Mouth\n\n\
         High and low water for the first days\nof May, in local time.\n\n\
         Day | High water | Low water\nMonday | 06:12 | 12:30\nTuesday | 06:58 | 13:15\n\
         Wednesday | 07:41 | 14:02\n\n\
         - Check the gauge every morning\n- Report storm surges at once"
    );
}

#[test]
fn pdf_text_around_a_drawn_image() {
    // The image's pixels, were they read as a content stream, would stop pdf-extract.
    assert_eq!(
        text_of("text-image.pdf", Format::Pdf).unwrap(),
        "The eastern breakwater after the storm.\n\nPhotograph taken from the lighthouse."
    );
}

#[test]
fn docx_title_heading_list_table() {
    assert_eq!(
        text_of("notes.docx", Format::Docx).unwrap(),
        "Field Notes\n\nHarbour Inspection Schedule\n\n\
         Ångström readings from São Paulo and 東京 were compared.\n\n\
         Check the crane\nMeasure the pier\n\nResults\n\nDock | Depth\nNorth quay | 12 m\n\n\
         Closing remarks."
    );
}

#[test]
fn odt_title_heading_list_table() {
    assert_eq!(
        text_of("notes.odt", Format::Odt).unwrap(),
        "Survey Notes\n\nCoastal Survey\n\nCrème brûlée at the Straße café.\n\n\
         Count the gulls\nMap the dunes\n\nBird | Count\nGull | 42\n\nEnd of survey."
    );
}

#[test]
fn html_without_scripts_styles_and_navigation() {
    assert_eq!(
        text_of("page.html", Format::Html).unwrap(),
        "Garden Almanac\n\nSpring Planting\n\n\
         Sow the seeds after the last frost, in well-drained soil.\n\nChecklist\n\n\
         Prune the lavender hedges\nTurn the compost heap\n\nPlant | Month\nTomato | März\n\n\
         Line one\nLine two"
    );
}

#[test]
fn markdown_headings_lists_table_code() {
    assert_eq!(
        text_of("guide.md", Format::Markdown).unwrap(),
        "Beekeeping Guide\n\nKeep the hive dry and sheltered from wind.\n\nTasks\n\n\
         Inspect the frames\nFeed the colony\nsugar syrup\nfondant\n\n\
         Month | Task\nMay | Add a super\nAoût | Harvest\n\nsmoker fuel: pine needles"
    );
}

#[test]
fn plain_text_utf8_utf16_and_detected_encoding() {
    assert_eq!(
        text_of("notes.txt", Format::Text).unwrap(),
        "Plain notes\nsecond line\n\nthird paragraph"
    );
    assert_eq!(
        text_of("utf16.txt", Format::Text).unwrap(),
        "Grüße aus Köln\nzweite Zeile"
    );
    let sentence = "Le garçon a mangé une crème brûlée près de la forêt, à côté du château.";
    assert_eq!(
        text_of("latin1.txt", Format::Text).unwrap(),
        [sentence; 3].join(" ")
    );
}

#[test]
fn encrypted_pdf_fails() {
    let error = text_of("encrypted.pdf", Format::Pdf).unwrap_err();
    assert_eq!(error, ExtractError::Encrypted);
    assert_eq!(error.to_string(), "the PDF is encrypted");
}

#[test]
fn image_only_pdf_fails() {
    let error = text_of("image-only.pdf", Format::Pdf).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the PDF has no text layer (scanned or image-only pages)"
    );
}

#[test]
fn truncated_files_fail_as_damaged() {
    assert_eq!(
        text_of("truncated.pdf", Format::Pdf)
            .unwrap_err()
            .to_string(),
        "the PDF file is damaged: failed parsing cross reference table: invalid start value"
    );
    assert_eq!(
        text_of("truncated.docx", Format::Docx)
            .unwrap_err()
            .to_string(),
        "the DOCX file is damaged: invalid Zip archive: Could not find EOCD"
    );
}

#[test]
fn zip_bomb_fails_at_the_expansion_bound() {
    let bytes = fixture("bomb.docx");
    assert_eq!(detect(&bytes, "bomb.docx"), Ok(Format::Docx));
    let limits = Limits {
        max_expanded_bytes: 8 * 1024 * 1024,
        ..Limits::default()
    };
    let error = extract(&bytes, Format::Docx, limits).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the DOCX file expands beyond 8388608 bytes"
    );
    // Within a larger bound it is an ordinary document.
    assert_eq!(
        extract(&bytes, Format::Docx, Limits::default()).unwrap(),
        "boom"
    );
}

#[test]
fn text_longer_than_the_bound_fails() {
    let limits = Limits {
        max_output_chars: 10,
        ..Limits::default()
    };
    assert_eq!(
        extract(b"eleven char", Format::Text, limits),
        Err(ExtractError::TooLong { limit: 10 })
    );
}

#[test]
fn detection_by_content_first_and_name_second() {
    let unsupported = |detected: &str| {
        Err(Unsupported {
            detected: detected.to_owned(),
        })
    };
    // Content wins over the name.
    assert_eq!(
        detect(&fixture("report.pdf"), "report.txt"),
        Ok(Format::Pdf)
    );
    assert_eq!(
        detect(&fixture("notes.docx"), "notes.bin"),
        Ok(Format::Docx)
    );
    assert_eq!(detect(&fixture("notes.odt"), "notes"), Ok(Format::Odt));
    assert_eq!(detect(&fixture("page.html"), "page.txt"), Ok(Format::Html));
    assert_eq!(
        detect(&fixture("image.png"), "image.txt"),
        unsupported("image/png")
    );
    // Text: by name.
    assert_eq!(detect(b"# Title", "a.md"), Ok(Format::Markdown));
    assert_eq!(detect(b"# Title", "a.MARKDOWN"), Ok(Format::Markdown));
    assert_eq!(detect(b"hello <b>", "a.htm"), Ok(Format::Html));
    assert_eq!(detect(b"# Title", "notes"), Ok(Format::Text));
    assert_eq!(detect(b"", "empty.txt"), Ok(Format::Text));
    // Binary content and archives of other kinds.
    assert_eq!(
        detect(b"\x00\x01\x02binary", "data.txt"),
        unsupported("application/octet-stream")
    );
    assert_eq!(
        detect(b"PK\x03\x04 not really", "archive.zip"),
        unsupported("application/zip")
    );
    assert_eq!(detect(b"PK\x03\x04 not really", "a.docx"), Ok(Format::Docx));
    assert_eq!(
        detect(b"<?xml version=\"1.0\"?><a/>", "a.xml"),
        unsupported("text/xml")
    );
}

#[test]
fn empty_text_is_empty() {
    assert_eq!(extract(b"", Format::Text, Limits::default()).unwrap(), "");
    assert_eq!(
        extract(b"", Format::Markdown, Limits::default()).unwrap(),
        ""
    );
    assert_eq!(extract(b"", Format::Html, Limits::default()).unwrap(), "");
}

#[test]
fn garbage_never_panics() {
    let inputs: [&[u8]; 5] = [
        b"%PDF-1.4\n%%EOF",
        b"%PDF-",
        b"PK\x03\x04",
        b"PK\x05\x06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\xff\xfe\x00",
    ];
    for bytes in inputs {
        for format in [
            Format::Pdf,
            Format::Docx,
            Format::Odt,
            Format::Html,
            Format::Text,
        ] {
            let _ = extract(bytes, format, Limits::default());
        }
    }
}
