//! Files as documents: extraction throughput per format, the peak memory of extracting a large
//! PDF, and `trove upload` of a folder end to end.
//!
//! Run: `TROVE_TEST_DATABASE_URL=… TROVE_TEST_NATS_URL=… cargo bench --bench extract -- 200`
//! (200 files uploaded, the default).
//!
//! 1. Extraction: each fixture of `tests/fixtures/files` that Trove reads, detected and
//!    extracted again and again for about 1.5 s (default limits); MB/s of the file's bytes,
//!    and pages/s for PDFs. The large PDF of step 2 is extracted once more in this process.
//! 2. Peak memory: a PDF of tens of MB (400 pages, each with 60 lines of text and an
//!    incompressible 96 KiB image in its resources, not drawn) is written with lopdf
//!    to a temporary file; a child process of this bench reads it, notes its peak resident set
//!    (`VmHWM`), extracts it and notes the peak again: the difference is extraction's.
//! 3. Upload: Trove in this process with its worker (`hash` embedder), a temporary folder of
//!    N files (the readable fixtures in turn, in 10 subfolders), `trove upload --wait` as the
//!    command runs it (`trove::upload::run`, concurrency 4): files/s sent, and files/s until
//!    every version is `success`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measuring tool: failures abort the run"
)]

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "each bench uses part of the shared code")]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::report::{Column, print_table};
use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};
use serde_json::{Value, json};

/// The fixtures Trove reads.
const READABLE: [&str; 7] = [
    "report.pdf",
    "two-columns.pdf",
    "notes.docx",
    "notes.odt",
    "page.html",
    "guide.md",
    "notes.txt",
];

const LARGE_PAGES: usize = 400;
const IMAGE_BYTES: usize = 96 * 1024;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/files")
}

fn pages(bytes: &[u8]) -> Option<usize> {
    Document::load_mem(bytes).ok().map(|d| d.get_pages().len())
}

/// One detection and extraction with the default limits; the characters of text.
fn extract(bytes: &[u8], name: &str) -> usize {
    let format = trove_extract::detect(bytes, name).expect("a format Trove reads");
    trove_extract::extract(bytes, format, trove_extract::Limits::default())
        .expect("extracted")
        .len()
}

/// The peak resident set of this process (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A PDF of `LARGE_PAGES` pages, each with 60 lines of text and an incompressible image.
fn large_pdf() -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
    });
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut kids = Vec::with_capacity(LARGE_PAGES);
    for page in 0..LARGE_PAGES {
        let mut pixels = Vec::with_capacity(IMAGE_BYTES);
        while pixels.len() < IMAGE_BYTES {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            pixels.extend_from_slice(&state.to_le_bytes());
        }
        pixels.truncate(IMAGE_BYTES);
        // 128 × 256 pixels of 3 bytes.
        let image_id = doc.add_object(Stream::new(
            dictionary! {
                "Type" => "XObject", "Subtype" => "Image", "Width" => 128, "Height" => 256,
                "ColorSpace" => "DeviceRGB", "BitsPerComponent" => 8,
            },
            pixels,
        ));
        let mut operations = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 9.into()]),
            Operation::new("TL", vec![12.into()]),
            Operation::new("Td", vec![40.into(), 800.into()]),
        ];
        for line in 0..60 {
            operations.push(Operation::new(
                "Tj",
                vec![Object::string_literal(format!(
                    "Page {page} line {line}: the inspection of the harbour cranes follows the \
                     schedule agreed in spring."
                ))],
            ));
            operations.push(Operation::new("T*", vec![]));
        }
        operations.push(Operation::new("ET", vec![]));
        let content = Content { operations };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
            "Resources" => dictionary! {
                "Font" => dictionary! { "F1" => font_id },
                "XObject" => dictionary! { "Im1" => image_id },
            },
        });
        kids.push(Object::from(page_id));
    }
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => LARGE_PAGES as i64,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

/// The child process of step 2: reads the file, extracts it, prints
/// `peak_before_kib peak_after_kib seconds characters`.
fn peak_child(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let before = peak_kib();
    let started = Instant::now();
    let characters = extract(&bytes, "large.pdf");
    let seconds = started.elapsed().as_secs_f64();
    println!("{before} {} {seconds} {characters}", peak_kib());
}

fn mb_per_s(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds
}

fn throughput(large: &[u8]) {
    println!("\n## Extraction throughput (detect + extract, default limits)\n");
    let mut rows = Vec::new();
    let mut measure = |name: &str, bytes: &[u8], at_least: Duration| {
        let pages = name.ends_with(".pdf").then(|| pages(bytes)).flatten();
        let started = Instant::now();
        let mut runs = 0usize;
        let mut characters = 0;
        while runs == 0 || started.elapsed() < at_least {
            characters = std::hint::black_box(extract(bytes, name));
            runs += 1;
        }
        let seconds = started.elapsed().as_secs_f64();
        rows.push(vec![
            name.to_owned(),
            format!("{:.1}", bytes.len() as f64 / 1024.0),
            characters.to_string(),
            runs.to_string(),
            format!("{:.3}", seconds * 1000.0 / runs as f64),
            format!("{:.2}", mb_per_s(bytes.len() * runs, seconds)),
            pages.map_or_else(
                || "–".to_owned(),
                |p| format!("{:.0}", (p * runs) as f64 / seconds),
            ),
        ]);
    };
    for name in READABLE {
        let bytes = std::fs::read(fixtures().join(name)).unwrap();
        measure(name, &bytes, Duration::from_millis(1500));
    }
    measure("large.pdf", large, Duration::ZERO);
    print_table(
        &[
            Column::left("file", 16, 0),
            Column::right("KiB", 9, 1),
            Column::right("chars", 8, 1),
            Column::right("runs", 6, 1),
            Column::right("ms/run", 9, 1),
            Column::right("MB/s", 7, 1),
            Column::right("pages/s", 8, 1),
        ],
        &rows,
    );
}

fn peak(path: &Path, size: usize) {
    println!("\n## Peak memory of extracting the large PDF (child process)\n");
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--peak")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let values: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let (before, after, seconds, characters) = (values[0], values[1], values[2], values[3]);
    println!(
        "file {:.1} MB, {LARGE_PAGES} pages, {characters} characters extracted in {seconds:.2} s \
         ({:.1} MB/s, {:.0} pages/s)",
        size as f64 / 1e6,
        mb_per_s(size, seconds),
        LARGE_PAGES as f64 / seconds,
    );
    println!(
        "peak RSS: {:.1} MiB with the file read, {:.1} MiB after extraction: +{:.1} MiB \
         ({:.1} × the file)",
        before / 1024.0,
        after / 1024.0,
        (after - before) / 1024.0,
        (after - before) * 1024.0 / size as f64,
    );
}

async fn upload(count: usize) {
    println!("\n## trove upload --wait of a folder of {count} files\n");
    let (admin, nats) = common::app::servers();
    let running = common::app::start(&admin, &nats, true).await;
    let http = running.http.clone();
    let model = http
        .json(
            reqwest::Method::POST,
            "/embedding-models",
            Some(json!({"name": "hash", "provider": "hash", "model_name": "feature-hash", "parameters": {"dimensions": 384}})),
        )
        .await;
    let splitters = http
        .json(
            reqwest::Method::GET,
            "/text-splitters?name=recursive-character",
            None,
        )
        .await;
    let pipeline: Value = http
        .json(
            reqwest::Method::POST,
            "/pipelines",
            Some(json!({"name": "bench", "embedding_model_id": model["id"],
                        "default_text_splitter_id": splitters["data"][0]["id"],
                        "classifications": ["public"], "has_full_text_search": true})),
        )
        .await;
    let root = std::env::temp_dir().join(format!("trove-bench-upload-{}", uuid::Uuid::new_v4()));
    let mut bytes = 0;
    for i in 0..count {
        let name = READABLE[i % READABLE.len()];
        let (stem, extension) = name.rsplit_once('.').unwrap();
        let path = root.join(format!("part-{}/{stem}-{i:03}.{extension}", i % 10));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let content = std::fs::read(fixtures().join(name)).unwrap();
        bytes += content.len();
        std::fs::write(path, content).unwrap();
    }
    let target = trove::upload::UploadTarget {
        url: http.base.clone(),
        pipeline_id: uuid::Uuid::parse_str(pipeline["id"].as_str().unwrap()).unwrap(),
        key_id: http.key.clone(),
        key_secret: common::app::SECRET.to_owned(),
        classification: "public".to_owned(),
        external_identifier: None,
        metadata: None,
        expire_older_versions: true,
    };
    let options = trove::upload::UploadOptions {
        concurrency: 4,
        wait: None,
        poll_interval: Duration::from_millis(100),
        progress: false,
        print_versions: false,
    };
    let started = Instant::now();
    let summary = trove::upload::run(target.clone(), std::slice::from_ref(&root), &options)
        .await
        .unwrap();
    let sent = started.elapsed().as_secs_f64();
    assert!(summary.is_success(), "{}", summary.report(false));
    // The same folder again, waiting: new versions of the same documents.
    let waiting = trove::upload::UploadOptions {
        wait: Some(Duration::from_secs(600)),
        ..options
    };
    let started = Instant::now();
    let summary = trove::upload::run(target, std::slice::from_ref(&root), &waiting)
        .await
        .unwrap();
    let processed = started.elapsed().as_secs_f64();
    assert!(summary.is_success(), "{}", summary.report(true));
    std::fs::remove_dir_all(&root).unwrap();
    println!(
        "{count} files, {:.2} MB: sent in {sent:.2} s ({:.1} files/s; first run, without \
         --wait); sent and every version `success` in {processed:.2} s ({:.1} files/s; second \
         run of the same folder, --wait)",
        bytes as f64 / 1e6,
        count as f64 / sent,
        count as f64 / processed,
    );
    running.stop(false).await;
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--peak") {
        peak_child(Path::new(&args[i + 1]));
        return;
    }
    let count: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(200);
    println!(
        "extract bench, {} UTC, load average {}",
        chrono::Utc::now().format("%Y-%m-%d %H:%M"),
        common::measure::load_average()
    );
    let large = large_pdf();
    let path = std::env::temp_dir().join(format!("trove-bench-{}.pdf", uuid::Uuid::new_v4()));
    std::fs::write(&path, &large).unwrap();
    throughput(&large);
    peak(&path, large.len());
    std::fs::remove_file(&path).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(upload(count));
    println!(
        "\nload average at the end {}",
        common::measure::load_average()
    );
}
