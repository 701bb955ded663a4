//! The corpus: synthetic fragments embedded in process (the `hash` embedder, or MiniLM vectors
//! put in place afterwards by `--vectors=minilm`), loaded with binary COPY straight into
//! `documents`, `fragments` and the association's vector table, then the HNSW index rebuilt
//! with the service's DDL.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sqlx::{AssertSqlSafe, PgConnection};
use trove::providers::hash_embedding::hash_embedding;
use trove::state::AppState;
use uuid::Uuid;

use crate::common::measure::{load_average, wait_quiet};
use crate::common::real_vectors::VectorSource;
use crate::common::recall::Vectors;
use crate::common::text::{Language, TOPICS, VOCABULARY};
use crate::target::Target;
use crate::{DIM, FRAGMENTS_PER_DOCUMENT, Options, TENANTS};

const CHUNK: usize = 4 << 20;
/// Microseconds from the Unix epoch to the Postgres epoch (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

pub struct Corpus {
    /// Per document: id, version (µs since the Unix epoch), tenant.
    pub documents: Vec<(Uuid, i64, i64)>,
    /// Per fragment: id, document index, encrypted content.
    pub fragments: Vec<(Uuid, u32, Vec<u8>)>,
    /// Every fragment's text, by fragment index.
    pub texts: Vec<String>,
    /// Every fragment's vector, by fragment index.
    pub vectors: Vectors,
    /// Fragment indexes of each tenant.
    pub by_tenant: Vec<Vec<u32>>,
}

impl Corpus {
    /// The corpus; its vectors are the `hash` embedder's, or empty for `minilm` (until
    /// [`Corpus::replace_vectors`]).
    fn generate(n: usize, language: &Language, state: &AppState, source: VectorSource) -> Self {
        let mut rng = SmallRng::seed_from_u64(0x5EA2C4);
        let document_count = n.div_ceil(FRAGMENTS_PER_DOCUMENT);
        let start = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
        let mut documents = Vec::with_capacity(document_count);
        let mut fragments = Vec::with_capacity(n);
        let mut texts = Vec::with_capacity(n);
        let mut vectors = Vectors::with_capacity(DIM, n);
        let mut by_tenant = vec![Vec::new(); TENANTS as usize];
        for d in 0..document_count {
            let tenant = rng.random_range(0..TENANTS);
            documents.push((Uuid::now_v7(), start + d as i64, tenant));
            let primary = rng.random_range(0..TOPICS);
            let secondary = rng.random_range(0..TOPICS);
            let here = FRAGMENTS_PER_DOCUMENT.min(n - d * FRAGMENTS_PER_DOCUMENT);
            for _ in 0..here {
                let text = language.fragment(&mut rng, primary, secondary);
                let id = Uuid::now_v7();
                let index = if source == VectorSource::Hash {
                    vectors.push(id, &hash_embedding(&text, DIM))
                } else {
                    fragments.len() as u32
                };
                by_tenant[tenant as usize].push(index);
                fragments.push((id, d as u32, state.cipher.encrypt(text.as_bytes())));
                texts.push(text);
            }
        }
        Self {
            documents,
            fragments,
            texts,
            vectors,
            by_tenant,
        }
    }

    /// Every fragment's vector replaced by `vectors` (by fragment index).
    pub fn replace_vectors(&mut self, vectors: &[Vec<f32>]) {
        assert_eq!(vectors.len(), self.fragments.len(), "a vector per fragment");
        let mut replaced = Vectors::with_capacity(DIM, vectors.len());
        for ((id, _, _), vector) in self.fragments.iter().zip(vectors) {
            replaced.push(*id, vector);
        }
        self.vectors = replaced;
    }
}

/// Generates the corpus of `n` fragments and says what it is.
pub fn generate(n: usize, language: &Language, state: &AppState, source: VectorSource) -> Corpus {
    let started = Instant::now();
    let corpus = Corpus::generate(n, language, state, source);
    let embedder = match source {
        VectorSource::Hash => "the service's hash embedder",
        VectorSource::MiniLm => "all-MiniLM-L6-v2 (vectors below)",
    };
    let generated = started.elapsed();
    let content_bytes: usize = corpus.fragments.iter().map(|f| f.2.len()).sum();
    println!(
        "data: synthetic topic texts ({VOCABULARY} pseudo-words, {TOPICS} topics) embedded with {embedder} ({DIM} d); {} documents × {FRAGMENTS_PER_DOCUMENT} fragments, mean encrypted content {} B; tenant 1 of {TENANTS} per document",
        corpus.documents.len(),
        content_bytes / n.max(1)
    );
    println!(
        "generate (texts, {}AES-GCM): {:.1} s",
        if source == VectorSource::Hash {
            "embeddings, "
        } else {
            ""
        },
        generated.as_secs_f64()
    );
    corpus
}

/// The binary COPY format (header, tuples, trailer), sent in chunks.
struct Binary {
    buf: Vec<u8>,
}

impl Binary {
    fn new() -> Self {
        let mut buf = Vec::with_capacity(CHUNK + (64 << 10));
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        Self { buf }
    }
    fn row(&mut self, fields: i16) {
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }
    fn len(&mut self, n: usize) {
        self.buf
            .extend_from_slice(&i32::try_from(n).expect("field size").to_be_bytes());
    }
    fn uuid(&mut self, id: Uuid) {
        self.len(16);
        self.buf.extend_from_slice(id.as_bytes());
    }
    fn int8(&mut self, v: i64) {
        self.len(8);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn int4(&mut self, v: i32) {
        self.len(4);
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn boolean(&mut self, v: bool) {
        self.len(1);
        self.buf.push(u8::from(v));
    }
    fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.buf.extend_from_slice(v);
    }
    fn jsonb(&mut self, v: &str) {
        self.len(v.len() + 1);
        self.buf.push(1);
        self.buf.extend_from_slice(v.as_bytes());
    }
    fn timestamptz(&mut self, unix_micros: i64) {
        self.int8(unix_micros - PG_EPOCH_MICROS);
    }
    /// pgvector's binary form: dimensions (int16), 0 (int16), then float4 values.
    fn vector(&mut self, v: &[f32]) {
        self.len(4 + 4 * v.len());
        self.buf
            .extend_from_slice(&i16::try_from(v.len()).expect("dims").to_be_bytes());
        self.buf.extend_from_slice(&0i16.to_be_bytes());
        for x in v {
            self.buf.extend_from_slice(&x.to_be_bytes());
        }
    }
}

/// Streams rows into `COPY … FROM STDIN (FORMAT binary)`; returns the rows copied.
async fn copy_binary(
    conn: &mut PgConnection,
    statement: &str,
    rows: usize,
    mut encode: impl FnMut(&mut Binary, usize),
) -> u64 {
    let mut copy = conn.copy_in_raw(statement).await.expect("copy starts");
    let mut binary = Binary::new();
    for i in 0..rows {
        encode(&mut binary, i);
        if binary.buf.len() >= CHUNK {
            copy.send(std::mem::take(&mut binary.buf))
                .await
                .expect("copy data");
            binary.buf.reserve(CHUNK + (64 << 10));
        }
    }
    binary.buf.extend_from_slice(&(-1i16).to_be_bytes());
    copy.send(binary.buf).await.expect("copy data");
    copy.finish().await.expect("copy finishes")
}

/// Documents alternate between the two classifications.
fn classification(document: usize) -> &'static str {
    if document.is_multiple_of(2) {
        "public"
    } else {
        "restricted"
    }
}

fn metadata(tenant: i64, document: usize) -> String {
    json!({"tenant": tenant, "source": format!("bench-{document:07}")}).to_string()
}

/// Copies the corpus's documents, fragments and vectors (with the HNSW index dropped, so the
/// rows go in unindexed), then `VACUUM (ANALYZE)`.
pub async fn copy_corpus(
    db: &mut PgConnection,
    corpus: &Corpus,
    target: &Target,
    splitter_id: Uuid,
) {
    let table = target.vector_table();
    sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX {table}_hnsw")))
        .execute(&mut *db)
        .await
        .expect("drop hnsw");
    let (copied_documents, t_documents) =
        copy_documents(db, corpus, target.pipeline_id, splitter_id).await;
    let (copied_fragments, t_fragments) = copy_fragments(db, corpus, target.pipeline_id).await;
    let started = Instant::now();
    let (documents, fragments) = (&corpus.documents, &corpus.fragments);
    let copied_vectors = copy_binary(
        db,
        &format!(
            "COPY {table} (fragment_id, embedding, classification, metadata, live) FROM STDIN (FORMAT binary)"
        ),
        fragments.len(),
        |b, i| {
            let (id, d, _) = fragments[i];
            let d = d as usize;
            b.row(5);
            b.uuid(id);
            b.vector(corpus.vectors.vector(i as u32));
            b.bytes(classification(d).as_bytes());
            b.jsonb(&metadata(documents[d].2, d));
            b.boolean(true);
        },
    )
    .await;
    let t_vectors = started.elapsed();
    let n = fragments.len();
    assert_eq!(copied_fragments as usize, n);
    assert_eq!(copied_vectors as usize, n);
    println!(
        "COPY (binary): documents {copied_documents} rows in {:.1} s; fragments {copied_fragments} in {:.1} s ({:.0}/s); vectors {copied_vectors} in {:.1} s ({:.0}/s)",
        t_documents.as_secs_f64(),
        t_fragments.as_secs_f64(),
        n as f64 / t_fragments.as_secs_f64(),
        t_vectors.as_secs_f64(),
        n as f64 / t_vectors.as_secs_f64(),
    );
    let started = Instant::now();
    for relation in ["documents", "fragments", table.as_str()] {
        sqlx::raw_sql(AssertSqlSafe(format!("VACUUM (ANALYZE) {relation}")))
            .execute(&mut *db)
            .await
            .expect("vacuum");
    }
    println!("VACUUM (ANALYZE): {:.1} s", started.elapsed().as_secs_f64());
}

async fn copy_documents(
    db: &mut PgConnection,
    corpus: &Corpus,
    pipeline_id: Uuid,
    splitter_id: Uuid,
) -> (u64, Duration) {
    let started = Instant::now();
    let documents = &corpus.documents;
    let copied = copy_binary(
        db,
        "COPY documents (id, version, pipeline_id, external_identifier, classification, metadata, status, text_splitter_id, expire_older_versions, created_at, updated_at) FROM STDIN (FORMAT binary)",
        documents.len(),
        |b, d| {
            let (id, version, tenant) = documents[d];
            b.row(11);
            b.uuid(id);
            b.int8(version);
            b.uuid(pipeline_id);
            b.bytes(format!("doc-{d}").as_bytes());
            b.bytes(classification(d).as_bytes());
            b.jsonb(&metadata(tenant, d));
            b.bytes(b"success");
            b.uuid(splitter_id);
            b.boolean(false);
            b.timestamptz(version);
            b.timestamptz(version);
        },
    )
    .await;
    (copied, started.elapsed())
}

async fn copy_fragments(
    db: &mut PgConnection,
    corpus: &Corpus,
    pipeline_id: Uuid,
) -> (u64, Duration) {
    let started = Instant::now();
    let documents = &corpus.documents;
    let fragments = &corpus.fragments;
    let copied = copy_binary(
        db,
        "COPY fragments (id, pipeline_id, document_id, version, order_id, classification, metadata, content) FROM STDIN (FORMAT binary)",
        fragments.len(),
        |b, i| {
            let (id, d, ref content) = fragments[i];
            let d = d as usize;
            let (document_id, version, tenant) = documents[d];
            b.row(8);
            b.uuid(id);
            b.uuid(pipeline_id);
            b.uuid(document_id);
            b.int8(version);
            b.int4((i % FRAGMENTS_PER_DOCUMENT) as i32);
            b.bytes(classification(d).as_bytes());
            b.jsonb(&metadata(tenant, d));
            b.bytes(content);
        },
    )
    .await;
    (copied, started.elapsed())
}

/// The HNSW build: the service's DDL and parameters (`TROVE_HNSW_M`,
/// `TROVE_HNSW_EF_CONSTRUCTION`), in memory. Returns its time.
pub async fn build_hnsw(
    db: &mut PgConnection,
    n: usize,
    options: &Options,
    state: &AppState,
    table: &str,
) -> Duration {
    let mwm_mb: u64 = options
        .maintenance_work_mem_mb
        .unwrap_or_else(|| Ord::max((n as u64 * 4096) >> 20, 256));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET maintenance_work_mem = '{mwm_mb}MB'; SET max_parallel_maintenance_workers = {}",
        options.parallel_workers
    )))
    .execute(&mut *db)
    .await
    .expect("session settings");
    wait_quiet(options.wait_quiet).await;
    println!(
        "HNSW build: m = {}, ef_construction = {}, maintenance_work_mem = {mwm_mb} MB, max_parallel_maintenance_workers = {} (load average {})",
        state.config.hnsw.m(),
        state.config.hnsw.ef_construction(),
        options.parallel_workers,
        load_average()
    );
    let started = Instant::now();
    sqlx::raw_sql(AssertSqlSafe(trove::store::vectors::hnsw_index_sql(
        table,
        u32::try_from(DIM).expect("dimension"),
        state.config.hnsw,
    )))
    .execute(&mut *db)
    .await
    .expect("hnsw build");
    let build = started.elapsed();
    let sizes: (i64, i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT pg_relation_size('{table}_hnsw'), pg_total_relation_size('{table}'), pg_total_relation_size('fragments')"
    )))
    .fetch_one(&mut *db)
    .await
    .expect("sizes");
    println!(
        "HNSW build: {:.1} s; index {} MB, vector table {} MB, fragments {} MB",
        build.as_secs_f64(),
        sizes.0 >> 20,
        sizes.1 >> 20,
        sizes.2 >> 20
    );
    build
}
