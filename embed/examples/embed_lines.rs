//! Embeds the lines of standard input with a local model and writes the vectors to
//! standard output as little-endian f32, one vector after the other (used by
//! `benches/compare.py` to measure the deviation from sentence-transformers).
//!
//! `cargo run --release -p trove-embed --example embed_lines -- MODELS_DIR [MODEL] [THREADS] < lines.txt > out.f32`

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        eprintln!("usage: embed_lines MODELS_DIR [MODEL] [THREADS] < lines.txt > out.f32");
        return ExitCode::from(2);
    };
    let name = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("all-MiniLM-L6-v2");
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(0);
    let model = match trove_embed::LocalModel::load(&dir, name, threads) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("loading {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("reading stdin: {e}");
        return ExitCode::FAILURE;
    }
    let lines: Vec<&str> = input.lines().collect();
    let mut out = Vec::with_capacity(lines.len() * model.dimensions() * 4);
    for chunk in lines.chunks(32) {
        match model.embed(chunk) {
            Ok(vs) => {
                for v in vs {
                    for x in v {
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
            Err(e) => {
                eprintln!("embedding: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = std::io::stdout().write_all(&out) {
        eprintln!("writing stdout: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
