//! Where the service path spends its time: each step of a search timed alone (sequential, p50
//! of 300 calls each).

use std::time::{Duration, Instant};

use serde_json::Value;
use trove::providers::hash_embedding::hash_embedding;
use trove::retrieval::estimates::ScopeEstimates;
use trove::retrieval::search::{self, NearestPlan, Scope};

use crate::common::floor::floor;
use crate::common::measure::{load_average, pct, time_n, wait_quiet};
use crate::target::{SET_CONFIG, Target};
use crate::{Bench, DIM, K};

const ROUNDS: usize = 300;

type Samples = Vec<Duration>;

pub async fn run(bench: &Bench<'_>) {
    wait_quiet(bench.options.wait_quiet).await;
    println!(
        "\n--- N = {}: service path breakdown (p50 of 300 sequential calls each; load average {}) ---",
        bench.n,
        load_average()
    );
    let ([key_check, context_read, estimate, embed, respond], embed_label) = reads(bench).await;
    let [unauthenticated, empty_search] = requests_before(bench).await;
    let [
        statement_alone,
        building,
        library_call,
        library_on_raw,
        in_transaction,
    ] = statements(bench).await;
    let [
        full_http,
        filtered_http,
        filtered_statement,
        filtered_statement_service_pool,
    ] = filtered(bench).await;
    let rows = [
        (
            "HTTP search, k 5, no filter (same query each time)",
            &full_http,
        ),
        (
            "HTTP search, k 0 (key check ‖ search context; returns before embedding)",
            &empty_search,
        ),
        (
            "  HTTP round trip without a key (401 before any read)",
            &unauthenticated,
        ),
        ("  key check: key and permissions (1 read)", &key_check),
        (
            "  under a filter or some classifications: the planner's estimate of the fragments passing (EXPLAIN), beside embedding",
            &estimate,
        ),
        (
            "  search context: pipeline, model, classifications, vector count (1 read)",
            &context_read,
        ),
        (embed_label, &embed),
        (
            "search statement alone (session settings; what the service runs)",
            &statement_alone,
        ),
        (
            "  building it (nearest_plan: SQL text and bound values)",
            &building,
        ),
        (
            "  same in a transaction with set_config (BEGIN, set_config, SELECT, COMMIT)",
            &in_transaction,
        ),
        (
            "library call: retrieval::search::similarity on the service's pool (builds, runs, decodes)",
            &library_call,
        ),
        ("  same on the raw statement's pool", &library_on_raw),
        ("decrypt 5 hits + result JSON", &respond),
        (
            "HTTP search, k 5, tenant filter with its metadata index (same query each time)",
            &filtered_http,
        ),
        (
            "  its statement alone, on the raw statement's pool",
            &filtered_statement,
        ),
        (
            "  its statement alone, on the service's pool",
            &filtered_statement_service_pool,
        ),
    ];
    for (name, samples) in rows {
        println!("    {:<90} {:>8.3} ms", name, pct(samples, 50.0));
    }
}

/// The reads of a search, the embedding (the hash embedder, or with `--vectors=minilm` a
/// request to the fake embeddings server), and the answer's decryption and JSON; the
/// embedding's label.
async fn reads(bench: &Bench<'_>) -> ([Samples; 5], &'static str) {
    let (pool, target, master) = (&bench.trove.state.pool, &bench.target, bench.trove.master);
    let pipeline_id = target.pipeline_id;
    let probe = &bench.measured[0];
    let key_check = time_n(ROUNDS, |_| async move {
        let mut connection = pool.acquire_warm().await.expect("connection");
        let key = trove::store::api_keys::key_for_auth(&mut connection, master)
            .await
            .expect("key")
            .expect("master key");
        connection.park();
        key
    })
    .await;
    let context_read = time_n(ROUNDS, |_| async move {
        trove::store::pipelines::search_context(pool.pg_pool(), pipeline_id)
            .await
            .expect("search context")
    })
    .await;
    let scope = Scope {
        pipeline_id,
        classifications: &target.classifications,
        filter: target.condition(probe, true),
    };
    let scope = &scope;
    let estimate = time_n(ROUNDS, |_| async move {
        let every = target.classifications.len() >= target.pipeline_classifications;
        search::estimate_scope(pool, scope, every)
            .await
            .expect("estimate")
    })
    .await;
    let embed = match &bench.fake {
        None => {
            time_n(ROUNDS, |i| {
                let text = &bench.measured[i % bench.measured.len()].text;
                async move { hash_embedding(text, DIM) }
            })
            .await
        }
        Some(fake) => {
            // What the service's `openai` embedder sends for a query: one input.
            let client = reqwest::Client::new();
            let url = format!("{}/embeddings", fake.base_url());
            time_n(ROUNDS, |i| {
                let text = &bench.measured[i % bench.measured.len()].text;
                let request = client
                    .post(&url)
                    .bearer_auth("bench")
                    .json(&serde_json::json!({"model": "all-MiniLM-L6-v2", "input": [text]}));
                async move {
                    let answer = request.send().await.expect("fake embeddings");
                    answer.bytes().await.expect("embedding body")
                }
            })
            .await
        }
    };
    let embed_label = if bench.fake.is_some() {
        "query embedding: POST /v1/embeddings of the fake server (cached MiniLM vector)"
    } else {
        "hash embedding of the query text"
    };
    let respond = respond(bench).await;
    (
        [key_check, context_read, estimate, embed, respond],
        embed_label,
    )
}

/// Decrypting the hits of a search and writing the answer's JSON.
async fn respond(bench: &Bench<'_>) -> Samples {
    let (state, target) = (&bench.trove.state, &bench.target);
    let probe = &bench.measured[0];
    let scope = Scope {
        pipeline_id: target.pipeline_id,
        classifications: &target.classifications,
        filter: None,
    };
    let query = target.vector_query(probe, false);
    let mut conn = state.pool.acquire_warm().await.expect("connection");
    let hits = search::similarity(&mut conn, &scope, &query, K as u64, None)
        .await
        .expect("hits");
    conn.park();
    time_n(ROUNDS, |_| {
        let hits = hits.clone();
        async move {
            let objects: Vec<Value> = hits
                .into_iter()
                .map(|h| trove::service::search::hit_object(state, h).expect("hit"))
                .collect();
            serde_json::to_vec(&objects).expect("json")
        }
    })
    .await
}

/// A request without a key, and a search with k 0.
async fn requests_before(bench: &Bench<'_>) -> [Samples; 2] {
    let (http, target) = (&bench.trove.http, &bench.target);
    let probe = &bench.measured[0];
    let mut unauthenticated = Vec::new();
    for _ in 0..ROUNDS {
        let request = http
            .client
            .post(format!("{}{}", http.base, target.path))
            .json(&Target::body(probe, false, K as u16))
            .build()
            .expect("request");
        let started = Instant::now();
        let response = http.client.execute(request).await.expect("http");
        let status = response.status();
        std::hint::black_box(response.bytes().await.expect("body"));
        unauthenticated.push(started.elapsed());
        assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    }
    let empty_body = Target::body(probe, false, 0);
    let mut empty_search = Vec::new();
    for _ in 0..ROUNDS {
        empty_search.push(http.search(&target.path, &empty_body).await.0);
    }
    [unauthenticated, empty_search]
}

/// The statement alone (the floor), building it, the library call, and the statement in a
/// transaction that sets its candidate list.
async fn statements(bench: &Bench<'_>) -> [Samples; 5] {
    let (target, raw, pool) = (&bench.target, &bench.raw, &bench.trove.state.pool);
    let probe = &bench.measured[0];
    let statement_alone = floor_n(bench, raw, false).await;
    let building = time_n(ROUNDS, |_| {
        let plan = target.statement(probe, false);
        async move { plan }
    })
    .await;
    let library_call = time_n(ROUNDS, |_| target.library(pool, probe, false)).await;
    let library_on_raw = time_n(ROUNDS, |_| target.library(raw, probe, false)).await;
    let in_transaction = time_n(ROUNDS, |_| {
        let NearestPlan {
            sql,
            arguments,
            ef_search,
            ..
        } = target.statement(probe, false);
        let ef_search = ef_search.unwrap_or(trove::store::SESSION_EF_SEARCH);
        async move {
            let mut tx = raw.begin().await.expect("begin");
            sqlx::query(SET_CONFIG)
                .bind(ef_search.to_string())
                .execute(&mut *tx)
                .await
                .expect("set_config");
            let rows = sqlx::query_with(sqlx::AssertSqlSafe(sql), arguments)
                .fetch_all(&mut *tx)
                .await
                .expect("select");
            tx.commit().await.expect("commit");
            rows
        }
    })
    .await;
    [
        statement_alone,
        building,
        library_call,
        library_on_raw,
        in_transaction,
    ]
}

/// The same query through HTTP without and with the tenant filter (the metadata index exists
/// by now), and the filtered statement alone on either pool.
async fn filtered(bench: &Bench<'_>) -> [Samples; 4] {
    let (http, target) = (&bench.trove.http, &bench.target);
    let probe = &bench.measured[0];
    let mut full_http = Vec::new();
    let body = Target::body(probe, false, K as u16);
    for _ in 0..ROUNDS {
        full_http.push(http.search(&target.path, &body).await.0);
    }
    let mut filtered_http = Vec::new();
    let body = Target::body(probe, true, K as u16);
    for _ in 0..ROUNDS {
        filtered_http.push(http.search(&target.path, &body).await.0);
    }
    let filtered_statement = floor_n(bench, &bench.raw, true).await;
    let service_pool = floor_n(bench, &bench.trove.state.pool, true).await;
    [full_http, filtered_http, filtered_statement, service_pool]
}

/// The first query's statement alone, `ROUNDS` times on `pool`.
async fn floor_n(bench: &Bench<'_>, pool: &trove::store::Pool, filtered: bool) -> Samples {
    let estimates = ScopeEstimates::new();
    let probe = &bench.measured[0];
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let search = bench.target.floor_search(probe, filtered);
        samples.push(floor(pool, &estimates, search).await.elapsed);
    }
    samples
}
