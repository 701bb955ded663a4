//! Local embedding throughput and latency with the real all-MiniLM-L6-v2 model.
//!
//! `cargo bench -p trove-embed --bench local_embedding`; the model folder comes from
//! `$TROVE_MODELS_DIR` (default: the workspace's `.data/models`), the thread count from
//! `$TROVE_EMBED_THREADS` (default 2). `benches/compare.py` runs this bench and
//! sentence-transformers side by side. The sentences (`benches/sentences.txt`, 256 of
//! 42–46 tokens each) are fixed.
//!
//! - `batch32`: sentences/s embedding the 256 sentences in calls of 32;
//! - `batch1`: sentences/s embedding 32 of them one call each;
//! - `query`: latency of one short query.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use trove_embed::LocalModel;

fn load() -> (LocalModel, Vec<String>) {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("TROVE_MODELS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../.data/models"));
    let threads = std::env::var("TROVE_EMBED_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let model = LocalModel::load(&dir, "all-MiniLM-L6-v2", threads)
        .unwrap_or_else(|e| panic!("loading all-MiniLM-L6-v2 from {}: {e}", dir.display()));
    let path = manifest.join("benches/sentences.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (model, text.lines().map(str::to_owned).collect())
}

fn bench(c: &mut Criterion) {
    let (model, sentences) = load();
    let all: Vec<&str> = sentences.iter().map(String::as_str).collect();

    let mut g = c.benchmark_group("local_embedding");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(12));
    g.throughput(Throughput::Elements(all.len() as u64));
    g.bench_function("batch32", |b| {
        b.iter(|| {
            for chunk in all.chunks(32) {
                let e = model.embed(chunk).unwrap_or_else(|e| panic!("{e}"));
                std::hint::black_box(e);
            }
        })
    });
    let few = &all[..32];
    g.throughput(Throughput::Elements(few.len() as u64));
    g.bench_function("batch1", |b| {
        b.iter(|| {
            for s in few {
                let e = model.embed(&[*s]).unwrap_or_else(|e| panic!("{e}"));
                std::hint::black_box(e);
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("local_embedding_latency");
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.bench_function("query", |b| {
        b.iter(|| {
            model
                .embed(&["how do I reset my password"])
                .unwrap_or_else(|e| panic!("{e}"))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
