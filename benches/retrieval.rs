//! Pure retrieval costs: compiling a 30-condition nested metadata filter to SQL, and MMR
//! selection over 100 and 1,000 candidates of 384 dimensions.
//!
//! Run: `cargo bench --bench retrieval`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sea_query::{PostgresQueryBuilder, Query};
use serde_json::{Value, json};
use trove::retrieval::mmr::{Similarity, select};
use trove_query::filter::{Filter, TeqExpansions, compile, validate};

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "team": {"type": "string"}, "year": {"type": "integer"}, "score": {"type": "number"},
        "public": {"type": "boolean"}, "title": {"type": "string"}
    }})
}

/// 30 conditions over five fields, nested three levels deep with every logical operator.
fn filter_30() -> Value {
    let leaf = |i: usize| match i % 6 {
        0 => json!({"team": {"$eq": format!("team-{i}")}}),
        1 => json!({"year": {"$gt": 2000 + i}}),
        2 => json!({"score": {"$le": i as f64 / 3.0}}),
        3 => json!({"public": {"$eq": i.is_multiple_of(2)}}),
        4 => json!({"title": {"$like": format!("%part {i}%")}}),
        _ => json!({"team": {"$in": [format!("a{i}"), format!("b{i}"), format!("c{i}")]}}),
    };
    let groups: Vec<Value> = (0..6)
        .map(|g| {
            let leaves: Vec<Value> = (0..5).map(|j| leaf(g * 5 + j)).collect();
            match g % 3 {
                0 => json!({"$and": leaves}),
                1 => json!({"$or": leaves}),
                _ => json!({"$not": {"$and": leaves}}),
            }
        })
        .collect();
    json!({"$and": [{"$or": groups[0..3]}, {"$and": groups[3..6]}]})
}

fn filter_compilation(c: &mut Criterion) {
    let schema = schema();
    let text = filter_30().to_string();
    c.bench_function("filter_parse_validate_compile_30_conditions", |b| {
        b.iter(|| {
            let filter: Filter =
                serde_json::from_str(black_box(&text)).unwrap_or_else(|_| unreachable!());
            let typed = validate(&filter, &schema).unwrap_or_else(|_| unreachable!());
            let condition = compile(&typed, "fragments", &TeqExpansions::new());
            let mut select = Query::select();
            select
                .column(sea_query::Asterisk)
                .from(sea_query::Alias::new("fragments"))
                .cond_where(condition);
            black_box(select.build(PostgresQueryBuilder))
        })
    });
}

/// Deterministic pseudo-random unit vectors.
fn vectors(count: usize, dimensions: usize) -> Vec<Vec<f32>> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|_| {
            let v: Vec<f32> = (0..dimensions)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 2000) as f32 / 1000.0 - 1.0
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn mmr_selection(c: &mut Criterion) {
    let query = vectors(1, 384).remove(0);
    for fetch_k in [100usize, 1000] {
        let candidates = vectors(fetch_k, 384);
        let refs: Vec<&[f32]> = candidates.iter().map(Vec::as_slice).collect();
        c.bench_function(&format!("mmr_select_k10_fetch_k{fetch_k}_384d"), |b| {
            b.iter(|| {
                black_box(select(
                    black_box(&query),
                    &refs,
                    10,
                    0.5,
                    Similarity::Cosine,
                ))
            })
        });
    }
}

criterion_group!(benches, filter_compilation, mmr_selection);
criterion_main!(benches);
