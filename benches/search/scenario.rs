//! One filter scenario: HTTP, the statement alone (its floor) and the library call, taking
//! turns query by query; recall; index scan settings; concurrent clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use trove::retrieval::cost;
use trove::retrieval::estimates::ScopeEstimates;
use uuid::Uuid;

use crate::common::floor::{FloorSearch, floor};
use crate::common::measure::{load_average, pct, run_concurrent, wait_quiet};
use crate::common::recall::{ExactQuery, TopK, exact_top, recall};
use crate::target::{Probe, SET_CONFIG, Target, exact_search, session_search};
use crate::{Bench, K, K10, Summary};

/// Results of the sequential run of one scenario.
struct Sequential {
    http: Vec<Duration>,
    sql: Vec<Duration>,
    library: Vec<Duration>,
    http_hits: Vec<Vec<Uuid>>,
    sql_hits: Vec<Vec<Uuid>>,
    differing: usize,
}

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    None,
    /// The tenant filter, with the pipeline's default: Trove's own index on each declared field.
    Declared,
    /// The tenant filter without any index on the field (the schema's `"x-trove-index": false`,
    /// set here through the interface).
    Unindexed,
    /// The tenant filter with a metadata index on the field (added here, through the interface).
    MetadataIndex,
}

impl Filter {
    pub const ALL: [Self; 4] = [
        Self::None,
        Self::Declared,
        Self::Unindexed,
        Self::MetadataIndex,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Declared => "tenant 1%",
            Self::Unindexed => "tenant 1% no idx",
            Self::MetadataIndex => "tenant 1% +idx",
        }
    }
}

/// One scenario (see [`Filter`]).
pub async fn run(bench: &mut Bench<'_>, scenario: Filter) -> Summary {
    let (filtered, label) = (scenario != Filter::None, scenario.label());
    println!("\n--- N = {}, filter: {label} ---", bench.n);
    if filtered {
        println!("filter: {{\"tenant\": {{\"$eq\": <query's tenant>}}}}");
    }
    match scenario {
        Filter::Unindexed => unindex_declared_fields(bench).await,
        Filter::MetadataIndex => add_metadata_index(bench).await,
        Filter::None | Filter::Declared => {}
    }
    print_plan(bench, filtered).await;
    wait_quiet(bench.options.wait_quiet).await;
    // Estimates of the scopes for the floor, kept as the service keeps its own.
    let estimates = ScopeEstimates::new();
    // Warm-up of every path.
    let _ = run_sequential(bench, &estimates, &bench.warmup, filtered).await;
    println!("measuring (load average {})", load_average());
    let seq = run_sequential(bench, &estimates, &bench.measured, filtered).await;
    let hits10 = search_k10(bench, filtered).await;
    let exact10 = exact_tops(bench, filtered);
    let exact: Vec<TopK> = exact10.iter().map(|top| top.first(K)).collect();
    let summary = summarise(bench, &seq, &exact, label, (&exact10, &hits10));
    cross_check(bench, &exact, filtered).await;
    print_sequential(bench, &seq, &summary);
    if !bench.options.sweep.is_empty() {
        sweep(bench, &exact, filtered).await;
    }
    if bench.options.concurrency > 0 {
        concurrent(bench, &estimates, filtered).await;
    }
    summary
}

/// The declared fields' indexes turned off through the interface (the schema again with
/// `"x-trove-index": false`), then fresh statistics and connections.
async fn unindex_declared_fields(bench: &mut Bench<'_>) {
    let mut schema = crate::target::metadata_schema();
    schema["x-trove-index"] = json!(false);
    let started = Instant::now();
    bench
        .trove
        .http
        .json(
            reqwest::Method::PATCH,
            &format!("/pipelines/{}", bench.target.pipeline_id),
            Some(json!({"metadata_schema": schema})),
        )
        .await;
    println!(
        "declared fields' indexes dropped (PATCH /pipelines/{{id}}, \"x-trove-index\": false): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    refresh(bench).await;
}

/// A metadata index on the field, through the interface, then fresh statistics (ANALYZE
/// collects them for the index expression) and fresh connections.
async fn add_metadata_index(bench: &mut Bench<'_>) {
    let started = Instant::now();
    bench
        .trove
        .http
        .json(
            reqwest::Method::POST,
            &format!("/pipelines/{}/indexes", bench.target.pipeline_id),
            Some(json!({"field": "tenant"})),
        )
        .await;
    println!(
        "metadata index on `tenant` (POST /pipelines/{{id}}/indexes): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    refresh(bench).await;
}

/// Fresh statistics and fresh connections after the field's indexes changed.
async fn refresh(bench: &mut Bench<'_>) {
    sqlx::raw_sql("ANALYZE fragments")
        .execute(&mut bench.db)
        .await
        .expect("analyze");
    // Every connection is reopened, as after a restart, so that no statement keeps the
    // plan-cache history of the scenario before (Postgres replans cached plans when an
    // index is added, but the choice between custom and generic plans remembers).
    bench.raw.close().await;
    bench.raw = trove::store::connect_lazy(&bench.trove.url, 16).expect("raw pool");
    let closed: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
             SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'
             OFFSET 0) AS mine",
    )
    .fetch_one(&mut bench.db)
    .await
    .expect("reconnect");
    // The service's pool pings a connection before use only after a second idle
    // (`store::connect_lazy`); past that, the terminated ones are found and replaced.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!(
        "then ANALYZE fragments; {closed} service connections closed so that plans are made afresh"
    );
    bench.target.choose_paths(&bench.raw).await;
}

/// The statement of the first query and its `EXPLAIN (ANALYZE, BUFFERS)`.
async fn print_plan(bench: &Bench<'_>, filtered: bool) {
    let Some(probe) = bench.measured.first() else {
        return;
    };
    let target = &bench.target;
    let plan = target.statement(probe, filtered);
    if !filtered {
        println!(
            "statement: {}; hnsw.ef_search {} (association of ~{} vectors), LIMIT {} cut to k after sorting",
            plan.sql,
            plan.ef_search.unwrap_or(trove::store::SESSION_EF_SEARCH),
            target.estimated_rows,
            plan.fetch
        );
    }
    let mut tx = bench.raw.begin().await.expect("begin");
    if let Some(ef) = plan.ef_search {
        sqlx::query(SET_CONFIG)
            .bind(ef.to_string())
            .execute(&mut *tx)
            .await
            .expect("set_config");
    }
    let plan: Vec<String> = sqlx::query_scalar_with(
        AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {}", plan.sql)),
        plan.arguments,
    )
    .fetch_all(&mut *tx)
    .await
    .expect("explain");
    tx.commit().await.expect("commit");
    println!("plan (EXPLAIN ANALYZE, first query, query vector elided):");
    for line in plan {
        println!("    {}", elide_vectors(&line));
    }
}

/// A plan line with vector literals (`'[…]'`) shortened.
fn elide_vectors(line: &str) -> String {
    let mut out = String::with_capacity(line.len().min(400));
    let mut rest = line;
    while let Some(start) = rest.find("'[") {
        out.push_str(&rest[..start]);
        match rest[start..].find("]'") {
            Some(end) => {
                out.push_str("'[…]'");
                rest = &rest[start + end + 2..];
            }
            None => {
                out.push_str("'[…");
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

async fn run_sequential(
    bench: &Bench<'_>,
    estimates: &ScopeEstimates,
    probes: &[Probe],
    filtered: bool,
) -> Sequential {
    let (http, target) = (&bench.trove.http, &bench.target);
    let n = probes.len();
    let mut out = Sequential {
        http: Vec::with_capacity(n),
        sql: Vec::with_capacity(n),
        library: Vec::with_capacity(n),
        http_hits: vec![Vec::new(); n],
        sql_hits: vec![Vec::new(); n],
        differing: 0,
    };
    // The three paths take turns, each on its own third of the query list at a given step,
    // so every path runs every query once, interleaved in time, and a query's pages are not
    // still in shared buffers from another path's run of it just before; the order rotates
    // so that no path always runs first.
    for i in 0..n {
        for step in 0..3 {
            let path = (i + step) % 3;
            let q = (i + path * n.div_ceil(3)) % n;
            let probe = &probes[q];
            match path {
                0 => {
                    let body = Target::body(probe, filtered, K as u16);
                    let (elapsed, hits) = http.search(&target.path, &body).await;
                    out.http.push(elapsed);
                    out.http_hits[q] = hits.iter().map(|h| h.0).collect();
                }
                1 => {
                    let search = target.floor_search(probe, filtered);
                    let statement = floor(&bench.raw, estimates, search).await;
                    out.sql.push(statement.elapsed);
                    out.sql_hits[q] = statement.hits.iter().map(|h| h.0).collect();
                }
                _ => {
                    let started = Instant::now();
                    let hits = target
                        .library(&bench.trove.state.pool, probe, filtered)
                        .await;
                    out.library.push(started.elapsed());
                    std::hint::black_box(hits);
                }
            }
        }
    }
    out.differing = out
        .http_hits
        .iter()
        .zip(&out.sql_hits)
        .filter(|(a, b)| a != b)
        .count();
    out
}

/// A k-10 search of every measured query through HTTP, untimed, for recall@10: the ids found.
async fn search_k10(bench: &Bench<'_>, filtered: bool) -> Vec<Vec<Uuid>> {
    let mut out = Vec::with_capacity(bench.measured.len());
    for probe in &bench.measured {
        let body = Target::body(probe, filtered, K10 as u16);
        let (_, hits) = bench.trove.http.search(&bench.target.path, &body).await;
        out.push(hits.iter().map(|h| h.0).collect());
    }
    out
}

/// The exact top-10 of every measured query, in process (its first 5 are the exact top-5).
fn exact_tops(bench: &Bench<'_>, filtered: bool) -> Vec<TopK> {
    let corpus = &bench.corpus;
    let started = Instant::now();
    let queries: Vec<ExactQuery<'_>> = bench
        .measured
        .iter()
        .map(|p| {
            let scope = filtered.then(|| corpus.by_tenant[p.tenant as usize].as_slice());
            (p.vector.as_slice(), scope)
        })
        .collect();
    let exact = exact_top(&corpus.vectors, &queries, K10);
    println!(
        "exact top-{K10} in process over {} queries: {:.1} s",
        bench.measured.len(),
        started.elapsed().as_secs_f64()
    );
    exact
}

/// Latencies and recall against the exact top-k; recall@10 of the k-10 searches against the
/// exact top-10.
fn summarise(
    bench: &Bench<'_>,
    seq: &Sequential,
    exact: &[TopK],
    label: &'static str,
    (exact10, hits10): (&[TopK], &[Vec<Uuid>]),
) -> Summary {
    let vectors = &bench.corpus.vectors;
    let mut counts = (0, 0, 0, 0);
    for ((probe, top), (http_hits, sql_hits)) in bench
        .measured
        .iter()
        .zip(exact)
        .zip(seq.http_hits.iter().zip(&seq.sql_hits))
    {
        let (tie, ids, wanted) = recall(vectors, &probe.vector, top, http_hits);
        let (tie_sql, _, _) = recall(vectors, &probe.vector, top, sql_hits);
        counts.0 += tie;
        counts.1 += ids;
        counts.2 += wanted;
        counts.3 += tie_sql;
    }
    let mut counts10 = (0, 0);
    for ((probe, top), hits) in bench.measured.iter().zip(exact10).zip(hits10) {
        let (tie, _, wanted) = recall(vectors, &probe.vector, top, hits);
        counts10.0 += tie;
        counts10.1 += wanted;
    }
    Summary {
        n: bench.n,
        filter: label,
        build_s: bench.build.as_secs_f64(),
        http: (pct(&seq.http, 50.0), pct(&seq.http, 99.0)),
        sql: (pct(&seq.sql, 50.0), pct(&seq.sql, 99.0)),
        library: pct(&seq.library, 50.0),
        recall: counts.0 as f64 / counts.2.max(1) as f64,
        recall_ids: counts.1 as f64 / counts.2.max(1) as f64,
        recall_sql: counts.3 as f64 / counts.2.max(1) as f64,
        recall10: counts10.0 as f64 / counts10.1.max(1) as f64,
    }
}

/// Cross-check of the exact top-k with the statement run without index scans.
async fn cross_check(bench: &Bench<'_>, exact: &[TopK], filtered: bool) {
    let mut agree = 0;
    let mut max_delta = 0f64;
    let mut exact_sql_times = Vec::new();
    for (probe, top) in bench
        .measured
        .iter()
        .zip(exact)
        .take(bench.options.exact_sql)
    {
        let plan = bench.target.statement(probe, filtered);
        let started = Instant::now();
        let hits = exact_search(&bench.raw, plan).await;
        exact_sql_times.push(started.elapsed());
        let delta = hits
            .iter()
            .zip(&top.items)
            .map(|(h, e)| (h.1 - e.0).abs())
            .fold(0f64, f64::max);
        max_delta = max_delta.max(delta);
        if hits.len() == top.items.len() && delta < 1e-5 {
            agree += 1;
        }
    }
    println!(
        "exact scan in SQL (enable_indexscan = off) on {} queries: distances agree with the in-process exact top-{K} on {agree} (max |Δ| {max_delta:.1e}); p50 {:.1} ms",
        exact_sql_times.len(),
        pct(&exact_sql_times, 50.0)
    );
}

fn print_sequential(bench: &Bench<'_>, seq: &Sequential, summary: &Summary) {
    println!(
        "sequential, 1 client, {} queries: HTTP p50 {:.3} ms p99 {:.3} ms | raw SQL p50 {:.3} ms p99 {:.3} ms | library p50 {:.3} ms p99 {:.3} ms | ratio p50 {:.2}",
        bench.measured.len(),
        summary.http.0,
        summary.http.1,
        summary.sql.0,
        summary.sql.1,
        pct(&seq.library, 50.0),
        pct(&seq.library, 99.0),
        summary.http.0 / summary.sql.0
    );
    println!(
        "recall@{K} (tie-aware): HTTP {:.4}, raw SQL {:.4}; exact-id recall HTTP {:.4}; recall@{K10} (tie-aware, a k-{K10} HTTP search of each query) {:.4}; result lists differing between HTTP and raw SQL: {}",
        summary.recall, summary.recall_sql, summary.recall_ids, summary.recall10, seq.differing
    );
}

/// Index scan settings on the raw statement, set for the session of one connection: the
/// service's shape (relaxed order, LIMIT k) at several ef_search values, then a larger LIMIT
/// cut to k after sorting, and strict order.
async fn sweep(bench: &Bench<'_>, exact: &[TopK], filtered: bool) {
    let (options, target) = (bench.options, &bench.target);
    println!(
        "index scan settings (statement alone on one connection, session settings; first {} queries):",
        options.sweep_queries.min(bench.measured.len())
    );
    // (iterative scan mode, ef_search, hnsw.max_scan_tuples, hnsw.scan_mem_multiplier);
    // pgvector's defaults for the last two are 20,000 and 1.
    let mut variants: Vec<(&str, u64, u64, u64)> = options
        .sweep
        .iter()
        .map(|&ef| ("relaxed_order", u64::from(ef), 20_000, 1))
        .collect();
    let service_ef = {
        let query = target.vector_query(&bench.measured[0], filtered);
        cost::walk(query.estimated_rows, query.selectivity, K as u64)
            .map_or(cost::MAX_EF_SEARCH, |walk| walk.ef_search)
    };
    variants.extend([
        ("strict_order", service_ef, 20_000, 1),
        ("relaxed_order", service_ef, 100_000, 1),
        ("relaxed_order", service_ef, 20_000, 8),
        ("relaxed_order", service_ef, 100_000, 8),
    ]);
    println!(
        "    iterative_scan   ef_search   LIMIT   max_scan_tuples   scan_mem_multiplier   p50 ms   p99 ms   recall@{K}"
    );
    let mut conn = PgConnection::connect(&bench.trove.url)
        .await
        .expect("sweep connection");
    for variant in variants {
        sweep_variant(bench, &mut conn, exact, filtered, variant, service_ef).await;
    }
    conn.close().await.ok();
}

async fn sweep_variant(
    bench: &Bench<'_>,
    conn: &mut PgConnection,
    exact: &[TopK],
    filtered: bool,
    (mode, ef, tuples, multiplier): (&str, u64, u64, u64),
    service_ef: u64,
) {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET hnsw.iterative_scan = {mode}; SET hnsw.ef_search = {ef}; SET hnsw.max_scan_tuples = {tuples}; SET hnsw.scan_mem_multiplier = {multiplier}"
    )))
    .execute(&mut *conn)
    .await
    .expect("session settings");
    let mut times = Vec::new();
    let mut hits_total = (0, 0);
    let mut limit = 0;
    for (probe, top) in bench
        .measured
        .iter()
        .zip(exact)
        .take(bench.options.sweep_queries)
    {
        let plan = bench.target.statement(probe, filtered);
        limit = plan.fetch;
        let started = Instant::now();
        let hits = session_search(conn, plan).await;
        times.push(started.elapsed());
        let ids: Vec<Uuid> = hits.iter().map(|h| h.0).collect();
        let (tie, _, wanted) = recall(&bench.corpus.vectors, &probe.vector, top, &ids);
        hits_total.0 += tie;
        hits_total.1 += wanted;
    }
    let marker =
        if ef == service_ef && mode == "relaxed_order" && tuples == 20_000 && multiplier == 1 {
            " (service)"
        } else {
            ""
        };
    println!(
        "    {mode:<14}   {ef:>9}   {limit:>5}   {tuples:>15}   {multiplier:>19}   {:>6.3}   {:>6.3}   {:.4}{marker}",
        pct(&times, 50.0),
        pct(&times, 99.0),
        hits_total.0 as f64 / hits_total.1.max(1) as f64
    );
}

/// The same searches with concurrent clients: through HTTP, then the statements alone.
async fn concurrent(bench: &Bench<'_>, estimates: &ScopeEstimates, filtered: bool) {
    let c = bench.options.concurrency;
    let target = &bench.target;
    let count = bench.measured.len();
    let bodies: Arc<Vec<Value>> = Arc::new(
        bench
            .measured
            .iter()
            .map(|p| Target::body(p, filtered, K as u16))
            .collect(),
    );
    let http = Arc::new(bench.trove.http.clone());
    let path = Arc::new(target.path.clone());
    let (http_times, http_wall) = run_concurrent(c, count, move |i| {
        let http = http.clone();
        let bodies = bodies.clone();
        let path = path.clone();
        async move { http.search(&path, &bodies[i]).await.0 }
    })
    .await;
    let searches: Arc<Vec<FloorSearch>> = Arc::new(
        bench
            .measured
            .iter()
            .map(|p| target.floor_search(p, filtered))
            .collect(),
    );
    let (raw, estimates) = (bench.raw.clone(), estimates.clone());
    let (sql_times, sql_wall) = run_concurrent(c, count, move |i| {
        let searches = searches.clone();
        let raw = raw.clone();
        let estimates = estimates.clone();
        async move { floor(&raw, &estimates, searches[i].clone()).await.elapsed }
    })
    .await;
    println!(
        "{c} concurrent clients: HTTP p50 {:.3} ms p99 {:.3} ms ({:.0} searches/s) | raw SQL p50 {:.3} ms p99 {:.3} ms ({:.0} searches/s)",
        pct(&http_times, 50.0),
        pct(&http_times, 99.0),
        http_times.len() as f64 / http_wall.as_secs_f64(),
        pct(&sql_times, 50.0),
        pct(&sql_times, 99.0),
        sql_times.len() as f64 / sql_wall.as_secs_f64(),
    );
}
