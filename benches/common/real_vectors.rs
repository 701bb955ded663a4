//! Real embedding vectors for the benches (`--vectors=minilm`): texts embedded with the local
//! all-MiniLM-L6-v2 (`trove_embed`, from `TROVE_MODELS_DIR`, the model the service seeds as
//! its local default), a cache of them under `.data/bench-vectors/`, and a fake
//! OpenAI-compatible embeddings server on loopback that answers with them, so that the
//! service's searches get the cached query vectors without a forward pass in the timed path.
//!
//! Cache files: one per (corpus kind, size, seed, model), e.g.
//! `.data/bench-vectors/minilm-search-100000-seed42.f32`. Little-endian throughout: the magic
//! `TROVEVEC`, a version (u32, 1), the dimension (u32), the fragment count (u64), the query
//! count (u64), then hashes (FNV-1a, u64) of the first [`CHECKED`] fragment texts and of the
//! first [`CHECKED`] query texts (0 where there are fewer), then the fragment vectors and the
//! query vectors as f32s. Written to a temporary file, then renamed; while the fragments are
//! being embedded, each batch's vectors are appended to `<file>.partial`, from which a run
//! stopped midway resumes. A file whose fragment count
//! or checked texts differ from the corpus asked for is recomputed; queries are a stream from a
//! seed, so a file holding at least the queries asked for serves their prefix, and one holding
//! fewer gets the missing ones computed and appended.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use poem::listener::TcpAcceptor;
use poem::{Request, Response, Route, Server, post};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use trove_embed::LocalModel;

/// The seeded local model's name (`trove::providers::local_embedding::DEFAULT_MODEL`).
pub const MODEL: &str = trove::providers::local_embedding::DEFAULT_MODEL;
/// The cache files' model tag.
const TAG: &str = "minilm";
/// Texts per call of the model.
const BATCH: usize = 64;
/// Seconds between progress lines.
const PROGRESS: Duration = Duration::from_secs(5);
/// Texts of each list whose hashes a cache file holds.
pub const CHECKED: usize = 8;
const MAGIC: &[u8; 8] = b"TROVEVEC";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 4 + 8 + 8 + 8 * CHECKED * 2;

/// Where a bench's vectors come from (`--vectors=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorSource {
    /// The service's `hash` embedder (the default).
    Hash,
    /// all-MiniLM-L6-v2, through the cache.
    MiniLm,
}

impl VectorSource {
    pub fn parse(value: &str) -> Self {
        match value {
            "hash" => Self::Hash,
            "minilm" => Self::MiniLm,
            other => panic!("--vectors={other}: `hash` or `minilm`"),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Hash => "hash",
            Self::MiniLm => TAG,
        }
    }
}

/// all-MiniLM-L6-v2 from `TROVE_MODELS_DIR`, on one thread per core.
pub fn load_model() -> Arc<LocalModel> {
    let dir = std::env::var("TROVE_MODELS_DIR")
        .expect("--vectors=minilm needs TROVE_MODELS_DIR (the folder holding all-MiniLM-L6-v2)");
    let name = trove_embed::canonical_model_name(MODEL).expect("a FastEmbed model");
    let model = LocalModel::load(std::path::Path::new(&dir), name, 0).expect("model loads");
    assert_eq!(
        model.dimensions(),
        384,
        "all-MiniLM-L6-v2 has 384 dimensions"
    );
    Arc::new(model)
}

/// How long a computation took, for the report.
#[derive(Debug, Clone, Copy)]
pub struct Computed {
    pub texts: usize,
    pub elapsed: Duration,
}

impl Computed {
    pub fn rate(&self) -> f64 {
        self.texts as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Embeds `texts` in batches of [`BATCH`], with a progress line on stderr every few seconds.
pub fn embed_all(model: &LocalModel, texts: &[&str], what: &str) -> (Vec<Vec<f32>>, Computed) {
    embed_batches(model, texts, what, |_| {})
}

/// [`embed_all`], handing each batch's vectors to `on_batch` as they come.
fn embed_batches(
    model: &LocalModel,
    texts: &[&str],
    what: &str,
    mut on_batch: impl FnMut(&[Vec<f32>]),
) -> (Vec<Vec<f32>>, Computed) {
    let started = Instant::now();
    let mut last = started;
    let mut out = Vec::with_capacity(texts.len());
    for batch in texts.chunks(BATCH) {
        let vectors = model.embed(batch).expect("embeds");
        on_batch(&vectors);
        out.extend(vectors);
        if last.elapsed() >= PROGRESS {
            last = Instant::now();
            eprintln!(
                "{TAG}: {what} {}/{} embedded ({:.0} texts/s)",
                out.len(),
                texts.len(),
                out.len() as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    let computed = Computed {
        texts: texts.len(),
        elapsed: started.elapsed(),
    };
    (out, computed)
}

/// A corpus's vectors: fragments and queries, each in the order of its texts.
pub struct CorpusVectors {
    pub dim: usize,
    pub fragments: Vec<Vec<f32>>,
    pub queries: Vec<Vec<f32>>,
}

/// Which corpus a cache file holds.
pub struct CacheKey {
    /// `search`, `service`, `service-queries-…`
    pub kind: String,
    /// The bench's size (fragments or documents); none for a file of queries alone.
    pub size: Option<usize>,
    /// The corpus's seed.
    pub seed: u64,
}

impl CacheKey {
    /// `.data/bench-vectors/minilm-<kind>[-<size>]-seed<seed>.f32`.
    pub fn path(&self) -> PathBuf {
        let size = self.size.map(|n| format!("-{n}")).unwrap_or_default();
        cache_dir().join(format!("{TAG}-{}{size}-seed{}.f32", self.kind, self.seed))
    }
}

/// `.data/bench-vectors/` of the repository.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".data/bench-vectors")
}

fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn checked_hashes(texts: &[&str]) -> [u64; CHECKED] {
    let mut hashes = [0; CHECKED];
    for (h, t) in hashes.iter_mut().zip(texts) {
        *h = fnv1a(t);
    }
    hashes
}

/// The partial file of a cache file being computed: `TROVEPRT`, the dimension (u32), the
/// hashes of the first [`CHECKED`] fragment texts, then the vectors computed so far, appended
/// batch by batch; a run stopped midway resumes from it.
fn partial_path(path: &std::path::Path) -> PathBuf {
    path.with_extension("f32.partial")
}

const PARTIAL_MAGIC: &[u8; 8] = b"TROVEPRT";
const PARTIAL_HEADER: usize = 8 + 4 + 8 * CHECKED;

/// Embeds `texts` as [`embed_all`] does, keeping each batch's vectors in the partial file of
/// `path` and starting after the vectors a stopped run left there (for the same texts and
/// dimension); the partial file is removed once the cache file is written.
fn embed_resumable(
    model: &LocalModel,
    texts: &[&str],
    path: &std::path::Path,
) -> (Vec<Vec<f32>>, Computed) {
    let partial = partial_path(path);
    let dim = model.dimensions();
    let hashes = checked_hashes(texts);
    let mut header = Vec::with_capacity(PARTIAL_HEADER);
    header.extend_from_slice(PARTIAL_MAGIC);
    header.extend_from_slice(&u32::try_from(dim).expect("dim").to_le_bytes());
    for h in hashes {
        header.extend_from_slice(&h.to_le_bytes());
    }
    let mut done: Vec<Vec<f32>> = Vec::new();
    if let Ok(bytes) = std::fs::read(&partial)
        && bytes.len() >= PARTIAL_HEADER
        && bytes[..PARTIAL_HEADER] == header[..]
    {
        done = bytes[PARTIAL_HEADER..]
            .chunks_exact(dim * 4)
            .take(texts.len())
            .map(|v| {
                v.chunks_exact(4)
                    .map(|x| f32::from_le_bytes(x.try_into().expect("4 bytes")))
                    .collect()
            })
            .collect();
        println!(
            "{TAG} vectors: resuming from {} ({} of {} fragments embedded)",
            partial.display(),
            done.len(),
            texts.len()
        );
    }
    std::fs::create_dir_all(cache_dir()).expect("cache folder");
    // Rewritten with the whole vectors read (a stopped run may have left half of one).
    let mut file = std::fs::File::create(&partial).expect("partial file");
    file.write_all(&header).expect("partial header");
    file.write_all(&le_bytes(&done)).expect("partial vectors");
    let (more, computed) = embed_batches(model, &texts[done.len()..], "fragments", |vectors| {
        file.write_all(&le_bytes(vectors)).expect("partial vectors");
        file.flush().expect("partial flushed");
    });
    done.extend(more);
    (done, computed)
}

/// Vectors as little-endian f32s, back to back.
fn le_bytes(vectors: &[Vec<f32>]) -> Vec<u8> {
    vectors
        .iter()
        .flatten()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

/// What a cache file holds.
struct CacheFile {
    dim: usize,
    fragment_hashes: [u64; CHECKED],
    query_hashes: [u64; CHECKED],
    fragments: Vec<Vec<f32>>,
    queries: Vec<Vec<f32>>,
}

fn read_u32(bytes: &[u8], at: &mut usize) -> u32 {
    let v = u32::from_le_bytes(bytes[*at..*at + 4].try_into().expect("4 bytes"));
    *at += 4;
    v
}

fn read_u64(bytes: &[u8], at: &mut usize) -> u64 {
    let v = u64::from_le_bytes(bytes[*at..*at + 8].try_into().expect("8 bytes"));
    *at += 8;
    v
}

impl CacheFile {
    /// The file, or `None` when it is missing or not a whole cache file of this version.
    fn read(path: &std::path::Path) -> Option<Self> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .ok()?
            .read_to_end(&mut bytes)
            .ok()?;
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return None;
        }
        let mut at = 8;
        if read_u32(&bytes, &mut at) != VERSION {
            return None;
        }
        let dim = read_u32(&bytes, &mut at) as usize;
        let fragment_count = read_u64(&bytes, &mut at) as usize;
        let query_count = read_u64(&bytes, &mut at) as usize;
        let mut fragment_hashes = [0; CHECKED];
        let mut query_hashes = [0; CHECKED];
        for h in fragment_hashes.iter_mut().chain(query_hashes.iter_mut()) {
            *h = read_u64(&bytes, &mut at);
        }
        if bytes.len() != HEADER + (fragment_count + query_count) * dim * 4 {
            return None;
        }
        let mut vectors = bytes[HEADER..]
            .chunks_exact(dim * 4)
            .map(|v| {
                v.chunks_exact(4)
                    .map(|x| f32::from_le_bytes(x.try_into().expect("4 bytes")))
                    .collect::<Vec<f32>>()
            })
            .collect::<Vec<_>>();
        let queries = vectors.split_off(fragment_count);
        Some(Self {
            dim,
            fragment_hashes,
            query_hashes,
            fragments: vectors,
            queries,
        })
    }

    /// Writes the file to a temporary name beside `path`, then renames it.
    fn write(&self, path: &std::path::Path) {
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("cache folder");
        let temporary = path.with_extension(format!("f32.tmp-{}", std::process::id()));
        let mut bytes =
            Vec::with_capacity(HEADER + (self.fragments.len() + self.queries.len()) * self.dim * 4);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&u32::try_from(self.dim).expect("dim").to_le_bytes());
        bytes.extend_from_slice(&(self.fragments.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&(self.queries.len() as u64).to_le_bytes());
        for h in self.fragment_hashes.iter().chain(&self.query_hashes) {
            bytes.extend_from_slice(&h.to_le_bytes());
        }
        for v in self.fragments.iter().chain(&self.queries) {
            assert_eq!(v.len(), self.dim, "vectors of one dimension");
            for x in v {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        let mut file = std::fs::File::create(&temporary).expect("cache file");
        file.write_all(&bytes).expect("cache written");
        file.sync_all().expect("cache synced");
        drop(file);
        std::fs::rename(&temporary, path).expect("cache renamed");
    }
}

/// The vectors of `fragments` and `queries` from the cache file of `key`, computed (and the
/// file written) where it lacks them. Says on stdout what it did.
pub fn cached_vectors(
    model: &LocalModel,
    key: &CacheKey,
    fragments: &[&str],
    queries: &[&str],
) -> CorpusVectors {
    let path = key.path();
    let started = Instant::now();
    let fragment_hashes = checked_hashes(fragments);
    let cached = CacheFile::read(&path).filter(|file| {
        let shown = queries.len().min(file.queries.len()).min(CHECKED);
        file.dim == model.dimensions()
            && file.fragments.len() == fragments.len()
            && file.fragment_hashes == fragment_hashes
            && file.query_hashes[..shown] == checked_hashes(queries)[..shown]
    });
    let (mut file, mut computed) = match cached {
        Some(file) => {
            println!(
                "{TAG} vectors: loaded from the cache {} ({} fragments, {} queries) in {:.1} s",
                path.display(),
                file.fragments.len(),
                file.queries.len(),
                started.elapsed().as_secs_f64()
            );
            (file, None)
        }
        None => {
            println!(
                "{TAG} vectors: no usable cache at {}; embedding {} fragment texts and {} query texts",
                path.display(),
                fragments.len(),
                queries.len()
            );
            let (vectors, computed) = embed_resumable(model, fragments, &path);
            (
                CacheFile {
                    dim: model.dimensions(),
                    fragment_hashes,
                    query_hashes: [0; CHECKED],
                    fragments: vectors,
                    queries: Vec::new(),
                },
                Some(computed),
            )
        }
    };
    if file.queries.len() < queries.len() {
        let (more, done) = embed_all(model, &queries[file.queries.len()..], "queries");
        file.queries.extend(more);
        let texts = computed.map_or(0, |c| c.texts) + done.texts;
        let elapsed = computed.map_or(Duration::ZERO, |c| c.elapsed) + done.elapsed;
        computed = Some(Computed { texts, elapsed });
        let stored = file.queries.len().min(CHECKED);
        file.query_hashes = checked_hashes(&queries[..stored]);
    }
    if let Some(computed) = computed {
        file.write(&path);
        std::fs::remove_file(partial_path(&path)).ok();
        println!(
            "{TAG} vectors: {} texts embedded in {:.1} s ({:.0} texts/s); cache written to {}",
            computed.texts,
            computed.elapsed.as_secs_f64(),
            computed.rate(),
            path.display()
        );
    }
    let mut queries_out = file.queries;
    queries_out.truncate(queries.len());
    CorpusVectors {
        dim: file.dim,
        fragments: file.fragments,
        queries: queries_out,
    }
}

// ---- The fake embeddings server ------------------------------------------------------------

/// An OpenAI-compatible `POST /v1/embeddings` on a free loopback port, answering each input
/// with the vector its map holds for the text, or computing it with the model (and keeping
/// it) when the map has none.
pub struct FakeEmbeddings {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

struct Shared {
    vectors: RwLock<HashMap<String, Arc<Vec<f32>>>>,
    model: Arc<LocalModel>,
    /// Inputs answered from the map, and computed.
    known: AtomicUsize,
    computed: AtomicUsize,
}

impl FakeEmbeddings {
    /// Starts the server with `vectors` (text → vector) known.
    pub async fn start(
        model: Arc<LocalModel>,
        vectors: impl IntoIterator<Item = (String, Vec<f32>)>,
    ) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            vectors: RwLock::new(
                vectors
                    .into_iter()
                    .map(|(text, vector)| (text, Arc::new(vector)))
                    .collect(),
            ),
            model,
            known: AtomicUsize::new(0),
            computed: AtomicUsize::new(0),
        });
        let endpoint = {
            let shared = Arc::clone(&shared);
            poem::endpoint::make(move |request| answer(Arc::clone(&shared), request))
        };
        let app = Route::new().at("/v1/embeddings", post(endpoint));
        let acceptor = TcpAcceptor::from_std(listener).expect("tokio listener");
        let server = tokio::spawn(async move {
            Server::new_with_acceptor(acceptor)
                .run(app)
                .await
                .expect("fake embeddings server");
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Inputs answered from the map, and computed, so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.shared.known.load(Ordering::Relaxed),
            self.shared.computed.load(Ordering::Relaxed),
        )
    }

    /// The vector held for `text`, if any.
    pub fn vector(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        self.shared
            .vectors
            .read()
            .expect("vectors lock")
            .get(text)
            .cloned()
    }

    /// Registers an `openai` embedding model on this server through Trove's interface;
    /// returns its id.
    pub async fn register(&self, http: &crate::common::app::Http, name: &str) -> Value {
        let model = http
            .json(
                reqwest::Method::POST,
                "/embedding-models",
                Some(json!({
                    "name": name,
                    "provider": "openai",
                    "model_name": MODEL,
                    "parameters": {"base_url": self.base_url(), "api_key": "bench"},
                    "dimensions": 384,
                })),
            )
            .await;
        assert_eq!(model["dimensions"], 384);
        model["id"].clone()
    }
}

impl Drop for FakeEmbeddings {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(shared: Arc<Shared>, request: Request) -> poem::Result<Response> {
    let body = request.into_body().into_bytes().await?;
    let body: Value = serde_json::from_slice(&body).map_err(|e| {
        poem::Error::from_string(e.to_string(), poem::http::StatusCode::BAD_REQUEST)
    })?;
    let inputs: Vec<String> = match &body["input"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => {
            return Err(poem::Error::from_string(
                "input: a string or an array of strings",
                poem::http::StatusCode::BAD_REQUEST,
            ));
        }
    };
    let mut found: Vec<Option<Arc<Vec<f32>>>> = {
        let vectors = shared.vectors.read().expect("vectors lock");
        inputs.iter().map(|t| vectors.get(t).cloned()).collect()
    };
    let missing: Vec<usize> = (0..inputs.len()).filter(|&i| found[i].is_none()).collect();
    shared
        .known
        .fetch_add(inputs.len() - missing.len(), Ordering::Relaxed);
    if !missing.is_empty() {
        let texts: Vec<String> = missing.iter().map(|&i| inputs[i].clone()).collect();
        let model = Arc::clone(&shared.model);
        let computed = tokio::task::spawn_blocking(move || {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            model.embed(&texts)
        })
        .await
        .expect("embedding task")
        .map_err(|e| {
            poem::Error::from_string(e.to_string(), poem::http::StatusCode::INTERNAL_SERVER_ERROR)
        })?;
        shared.computed.fetch_add(missing.len(), Ordering::Relaxed);
        let mut vectors = shared.vectors.write().expect("vectors lock");
        for (&i, vector) in missing.iter().zip(computed) {
            let vector = Arc::new(vector);
            vectors.insert(inputs[i].clone(), Arc::clone(&vector));
            found[i] = Some(vector);
        }
    }
    let data: Vec<Value> = found
        .into_iter()
        .enumerate()
        .map(|(index, vector)| {
            json!({"object": "embedding", "index": index, "embedding": vector.expect("a vector").as_slice()})
        })
        .collect();
    let answer = json!({
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    });
    Ok(Response::builder()
        .content_type("application/json")
        .body(serde_json::to_vec(&answer).expect("json")))
}
