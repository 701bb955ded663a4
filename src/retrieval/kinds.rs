//! What a search asks for, declared once for every surface that runs one: the search kinds
//! (the REST `type`, agent placeholder types, the MCP tool's `type`), the distance strategies,
//! and the parameters with their defaults.
//!
//! Each surface lists the kinds in the order its own schema and error messages show them
//! (serde's `expected one of ...` follows it): a [`Listing`] is that order, and [`Listed`]
//! parses a name within it. A new kind is a variant here; the compiler then asks for its name
//! and its properties, and each listing decides whether it shows it.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::config::{Extension, Extensions};
pub use crate::names::{Listed, Listing, Named};

/// The names of `kinds`, in order: the `NAMES` of a listing of search kinds.
const fn kind_names<const N: usize>(kinds: [SearchKind; N]) -> [&'static str; N] {
    let mut names = [""; N];
    let mut at = 0;
    while at < N {
        names[at] = kinds[at].wire_name();
        at += 1;
    }
    names
}

/// The kinds of search a request, a placeholder or a tool call can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SearchKind {
    /// Fragments nearest to the query's embedding.
    Similarity,
    /// Maximal marginal relevance among the nearest candidates.
    Mmr,
    /// Full-text search: every word of the query (after stemming and stop words) appears.
    Search,
    /// Both lists fused by reciprocal rank (not implemented by the interface's release).
    Hybrid,
    /// Conversation history (not implemented by the interface's release).
    History,
    /// A value the client supplies: agent placeholders only; refused by search.
    Query,
}

impl Named for SearchKind {
    fn name(self) -> &'static str {
        self.wire_name()
    }
}

impl SearchKind {
    /// The name on the wire (lowercase).
    pub const fn wire_name(self) -> &'static str {
        match self {
            Self::Similarity => "similarity",
            Self::Mmr => "mmr",
            Self::Search => "search",
            Self::Hybrid => "hybrid",
            Self::History => "history",
            Self::Query => "query",
        }
    }

    /// Whether the kind fills an agent placeholder by searching the pipeline (a definition
    /// holding a kind that is not implemented is rejected before any rule about retrieval
    /// placeholders is checked).
    pub const fn is_retrieval(self) -> bool {
        matches!(
            self,
            Self::Similarity | Self::Mmr | Self::Search | Self::Hybrid
        )
    }

    /// Whether a search of this kind needs the query's embedding.
    pub const fn embeds_query(self) -> bool {
        matches!(self, Self::Similarity | Self::Mmr | Self::Hybrid)
    }

    /// Whether searches and agents run the kind with `extensions` on.
    pub fn is_implemented(self, extensions: Extensions) -> bool {
        self.not_implemented(extensions).is_none()
    }

    /// The 501 message of a kind the interface's release lists but does not run: `history`,
    /// and `hybrid` unless its extension is on.
    pub fn not_implemented(self, extensions: Extensions) -> Option<&'static str> {
        match self {
            Self::Hybrid if !extensions.has(Extension::Hybrid) => {
                Some("Hybrid placeholder is not implemented yet")
            }
            Self::History => Some("History placeholder is not implemented yet"),
            Self::Similarity | Self::Mmr | Self::Search | Self::Hybrid | Self::Query => None,
        }
    }
}

impl Serialize for SearchKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.wire_name())
    }
}

impl fmt::Display for SearchKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.wire_name())
    }
}

/// The search kinds in the order of `POST /pipelines/{pipeline_id}/search`'s `type`.
pub struct SearchTypes;

impl Listing for SearchTypes {
    type Item = SearchKind;
    const ITEMS: &'static [SearchKind] = &SEARCH_TYPES;
    const NAMES: &'static [&'static str] = &kind_names(SEARCH_TYPES);
}

const SEARCH_TYPES: [SearchKind; 6] = [
    SearchKind::Similarity,
    SearchKind::Mmr,
    SearchKind::Search,
    SearchKind::Hybrid,
    SearchKind::History,
    SearchKind::Query,
];

/// The search kinds in the order of agent placeholder types (`query` first).
pub struct PlaceholderTypes;

impl Listing for PlaceholderTypes {
    type Item = SearchKind;
    const ITEMS: &'static [SearchKind] = &PLACEHOLDER_TYPES;
    const NAMES: &'static [&'static str] = &kind_names(PLACEHOLDER_TYPES);
}

const PLACEHOLDER_TYPES: [SearchKind; 6] = [
    SearchKind::Query,
    SearchKind::Similarity,
    SearchKind::Mmr,
    SearchKind::Search,
    SearchKind::Hybrid,
    SearchKind::History,
];

/// The search kinds in the order of the MCP tool `search_knowledge`'s `type`.
pub struct ToolSearchTypes;

impl Listing for ToolSearchTypes {
    type Item = SearchKind;
    const ITEMS: &'static [SearchKind] = &TOOL_SEARCH_TYPES;
    const NAMES: &'static [&'static str] = &kind_names(TOOL_SEARCH_TYPES);
}

const TOOL_SEARCH_TYPES: [SearchKind; 6] = [
    SearchKind::Similarity,
    SearchKind::Mmr,
    SearchKind::Search,
    SearchKind::Query,
    SearchKind::Hybrid,
    SearchKind::History,
];

/// How vector distances are measured (lower is closer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistanceStrategy {
    /// 1 − cosine similarity (0..2). The default, and the one the HNSW index serves.
    Cosine,
    /// Euclidean (L2) distance.
    EuclideanDistance,
    /// Negative inner product.
    DotProduct,
    /// Defined by the interface; searches with it fail.
    MaxInnerProduct,
}

impl DistanceStrategy {
    /// The strategy of a search that names none.
    pub const DEFAULT: Self = Self::Cosine;
}

impl DistanceStrategy {
    /// The name on the wire.
    pub const fn wire_name(self) -> &'static str {
        match self {
            Self::Cosine => "cosine",
            Self::EuclideanDistance => "euclidean-distance",
            Self::DotProduct => "dot-product",
            Self::MaxInnerProduct => "max-inner-product",
        }
    }
}

impl Named for DistanceStrategy {
    fn name(self) -> &'static str {
        self.wire_name()
    }
}

/// Every distance strategy, in the interface's order.
pub struct DistanceStrategies;

impl Listing for DistanceStrategies {
    type Item = DistanceStrategy;
    const ITEMS: &'static [DistanceStrategy] = &DISTANCE_STRATEGIES;
    const NAMES: &'static [&'static str] = &[
        DISTANCE_STRATEGIES[0].wire_name(),
        DISTANCE_STRATEGIES[1].wire_name(),
        DISTANCE_STRATEGIES[2].wire_name(),
        DISTANCE_STRATEGIES[3].wire_name(),
    ];
}

const DISTANCE_STRATEGIES: [DistanceStrategy; 4] = [
    DistanceStrategy::Cosine,
    DistanceStrategy::EuclideanDistance,
    DistanceStrategy::DotProduct,
    DistanceStrategy::MaxInnerProduct,
];

/// `k` when `params` is omitted.
pub const DEFAULT_K: u16 = 5;
/// `fetch_k` when `params` is omitted.
pub const DEFAULT_FETCH_K: u16 = 10;
/// `lambda_mult` whenever it is omitted.
pub const DEFAULT_LAMBDA_MULT: f64 = 0.5;
/// A hybrid search's candidates per list (`fetch_k`) whenever it is omitted: the best of 5, 10,
/// 20, 50, 100 and 200 on the quality benchmark (docs/benchmarks.md, *Retrieval quality*), where
/// more candidates bring in more of the lexical list's weaker matches.
pub const DEFAULT_HYBRID_FETCH_K: u16 = 10;
/// Reciprocal rank fusion's constant whenever `rrf_k` is omitted.
pub const DEFAULT_RRF_K: f64 = 60.0;
/// How many of the first results go to the reranker whenever `rerank_candidates` is omitted.
pub const DEFAULT_RERANK_CANDIDATES: u16 = 50;
/// The most results a search sends to its reranker.
pub const MAX_RERANK_CANDIDATES: u16 = 1000;

/// `params` as sent (every field optional), by REST, MCP and agent placeholders alike.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SearchParams {
    /// Fragments to return (0..65535).
    #[serde(default)]
    pub k: Option<u16>,
    /// MMR candidates, or hybrid candidates per list (0..65535).
    #[serde(default)]
    pub fetch_k: Option<u16>,
    /// MMR balance: 1 relevance only, 0 maximum diversity.
    #[serde(default)]
    pub lambda_mult: Option<f64>,
    /// Maximum distance (vector search) or minimum rank (full-text).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// A vector embedding id of the pipeline, or the id of its model.
    #[serde(default)]
    pub embedding: Option<Uuid>,
    /// Hybrid: the constant of reciprocal rank fusion (> 0).
    #[serde(default)]
    pub rrf_k: Option<f64>,
    /// Hybrid: the weight of the vector list (≥ 0).
    #[serde(default)]
    pub similarity_weight: Option<f64>,
    /// Hybrid: the weight of the lexical list (≥ 0).
    #[serde(default)]
    pub full_text_weight: Option<f64>,
    /// Similarity and hybrid: the LLM id of a reranker to reorder the first results.
    #[serde(default)]
    pub rerank: Option<Uuid>,
    /// How many of the first results go to the reranker (1..=1000).
    #[serde(default)]
    pub rerank_candidates: Option<u16>,
}

/// How a hybrid search fuses its lists: score = Σ weight / (`rrf_k` + rank).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    pub rrf_k: f64,
    pub similarity_weight: f64,
    pub full_text_weight: f64,
}

impl Default for FusionParams {
    fn default() -> Self {
        Self {
            rrf_k: DEFAULT_RRF_K,
            similarity_weight: 1.0,
            full_text_weight: 1.0,
        }
    }
}

impl FusionParams {
    /// `rrf_k` above 0, weights at least 0 and not both 0, all finite.
    pub fn is_valid(&self) -> bool {
        let weights = [self.similarity_weight, self.full_text_weight];
        self.rrf_k.is_finite()
            && self.rrf_k > 0.0
            && weights.iter().all(|w| w.is_finite() && *w >= 0.0)
            && weights.iter().any(|w| *w > 0.0)
    }
}

/// The parameters a search runs with: the defaults when `params` is omitted (k 5, fetch_k
/// 10), 0 for omitted `k` and `fetch_k` when it is present, `lambda_mult` 0.5 either way; a
/// hybrid search's `fetch_k` is [`DEFAULT_HYBRID_FETCH_K`] whenever it is omitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EffectiveParams {
    pub k: u16,
    pub fetch_k: u16,
    pub lambda_mult: f64,
    pub threshold: Option<f64>,
    pub embedding: Option<Uuid>,
    /// Hybrid searches only.
    pub fusion: FusionParams,
    /// The reranker and how many of the first results it reorders (similarity and hybrid).
    pub rerank: Option<Rerank>,
}

/// A search's reranking: the reranker (an LLM id) and how many first results it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rerank {
    pub llm: Uuid,
    pub candidates: u16,
}

impl Rerank {
    /// Between 1 and [`MAX_RERANK_CANDIDATES`] candidates.
    pub fn is_valid(&self) -> bool {
        (1..=MAX_RERANK_CANDIDATES).contains(&self.candidates)
    }
}

impl Default for EffectiveParams {
    /// The parameters of a similarity, MMR or full-text search without `params`.
    fn default() -> Self {
        Self {
            k: DEFAULT_K,
            fetch_k: DEFAULT_FETCH_K,
            lambda_mult: DEFAULT_LAMBDA_MULT,
            threshold: None,
            embedding: None,
            fusion: FusionParams::default(),
            rerank: None,
        }
    }
}

impl EffectiveParams {
    /// The parameters of a search of `kind` whose `params` is `params`.
    pub fn from_request(kind: SearchKind, params: Option<&SearchParams>) -> Self {
        let mut effective = match params {
            None => Self::default(),
            Some(p) => Self {
                k: p.k.unwrap_or(0),
                fetch_k: p.fetch_k.unwrap_or(0),
                lambda_mult: p.lambda_mult.unwrap_or(DEFAULT_LAMBDA_MULT),
                threshold: p.threshold,
                embedding: p.embedding,
                fusion: FusionParams {
                    rrf_k: p.rrf_k.unwrap_or(DEFAULT_RRF_K),
                    similarity_weight: p.similarity_weight.unwrap_or(1.0),
                    full_text_weight: p.full_text_weight.unwrap_or(1.0),
                },
                rerank: p.rerank.map(|llm| Rerank {
                    llm,
                    candidates: p.rerank_candidates.unwrap_or(DEFAULT_RERANK_CANDIDATES),
                }),
            },
        };
        if kind == SearchKind::Hybrid && params.and_then(|p| p.fetch_k).is_none() {
            effective.fetch_k = DEFAULT_HYBRID_FETCH_K;
        }
        effective
    }

    /// The same parameters as a request's `params` naming each of them.
    pub fn as_request(&self) -> SearchParams {
        SearchParams {
            k: Some(self.k),
            fetch_k: Some(self.fetch_k),
            lambda_mult: Some(self.lambda_mult),
            threshold: self.threshold,
            embedding: self.embedding,
            rrf_k: Some(self.fusion.rrf_k),
            similarity_weight: Some(self.fusion.similarity_weight),
            full_text_weight: Some(self.fusion.full_text_weight),
            rerank: self.rerank.map(|r| r.llm),
            rerank_candidates: self.rerank.map(|r| r.candidates),
        }
    }

    /// The results a statement returns before reranking: at least `k`, and the reranker's
    /// candidates when the search reranks.
    pub fn before_reranking(&self, rerank: bool) -> u16 {
        match self.rerank {
            Some(r) if rerank => self.k.max(r.candidates),
            _ => self.k,
        }
    }

    /// Rows a vector search's statement selects: `k`, MMR's `fetch_k`, or a hybrid search's
    /// candidates per list (never fewer than `k`).
    pub fn statement_rows(&self, kind: SearchKind) -> u64 {
        u64::from(match kind {
            SearchKind::Mmr => self.fetch_k,
            SearchKind::Hybrid => self.fetch_k.max(self.k),
            _ => self.k,
        })
    }

    /// The parsed parameters as the interface echoes them (`details.params`); a hybrid
    /// search's also name how it fuses.
    pub fn to_json(&self, kind: SearchKind) -> Value {
        let mut echoed = json!({
            "k": self.k,
            "fetch_k": self.fetch_k,
            "lambda_mult": self.lambda_mult,
            "threshold": self.threshold,
            "embedding": self.embedding,
        });
        if kind == SearchKind::Hybrid
            && let Value::Object(map) = &mut echoed
        {
            map.insert("rrf_k".to_owned(), json!(self.fusion.rrf_k));
            map.insert(
                "similarity_weight".to_owned(),
                json!(self.fusion.similarity_weight),
            );
            map.insert(
                "full_text_weight".to_owned(),
                json!(self.fusion.full_text_weight),
            );
        }
        echoed
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    fn all_once<L: Listing>(every: &[L::Item]) {
        assert_eq!(L::ITEMS.len(), every.len());
        for item in every {
            assert_eq!(L::ITEMS.iter().filter(|i| *i == item).count(), 1);
        }
        let names: Vec<&str> = L::ITEMS.iter().map(|i| i.name()).collect();
        assert_eq!(names, L::NAMES);
    }

    #[test]
    fn every_listing_shows_every_value_once_with_its_name() {
        let kinds = SEARCH_TYPES;
        all_once::<SearchTypes>(&kinds);
        all_once::<PlaceholderTypes>(&kinds);
        all_once::<ToolSearchTypes>(&kinds);
        all_once::<DistanceStrategies>(&DISTANCE_STRATEGIES);
    }

    #[test]
    fn a_listed_name_parses_as_serde_derive_would() {
        let kind: Listed<SearchTypes> = serde_json::from_str("\"mmr\"").unwrap();
        assert_eq!(kind.0, SearchKind::Mmr);
        let error = serde_json::from_str::<Listed<ToolSearchTypes>>("\"fuzzy\"")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "unknown variant `fuzzy`, expected one of `similarity`, `mmr`, `search`, `query`, \
             `hybrid`, `history` at line 1 column 7"
        );
        let error = serde_json::from_value::<Listed<PlaceholderTypes>>(json!("Query"))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("unknown variant `Query`, expected one of `query`"));
        let strategy: Listed<DistanceStrategies> =
            serde_json::from_value(json!("dot-product")).unwrap();
        assert_eq!(strategy.0, DistanceStrategy::DotProduct);
        assert_eq!(
            serde_json::to_value(Listed::<SearchTypes>::new(SearchKind::Hybrid)).unwrap(),
            json!("hybrid")
        );
    }

    #[test]
    fn params_take_the_defaults_only_when_omitted() {
        let omitted = EffectiveParams::from_request(SearchKind::Mmr, None);
        assert_eq!(
            (
                omitted.k,
                omitted.fetch_k,
                omitted.lambda_mult,
                omitted.threshold
            ),
            (5, 10, 0.5, None)
        );
        let present =
            EffectiveParams::from_request(SearchKind::Mmr, Some(&SearchParams::default()));
        assert_eq!(
            (present.k, present.fetch_k, present.lambda_mult),
            (0, 0, 0.5)
        );
        let round_trip =
            EffectiveParams::from_request(SearchKind::Mmr, Some(&present.as_request()));
        assert_eq!(round_trip, present);
        assert_eq!(
            present
                .to_json(SearchKind::Mmr)
                .as_object()
                .map(|o| o.len()),
            Some(5)
        );
    }

    #[test]
    fn a_hybrid_search_takes_its_candidates_and_fusion_by_default() {
        let omitted = EffectiveParams::from_request(SearchKind::Hybrid, None);
        assert_eq!((omitted.k, omitted.fetch_k), (5, DEFAULT_HYBRID_FETCH_K));
        assert_eq!(omitted.fusion, FusionParams::default());
        let present =
            EffectiveParams::from_request(SearchKind::Hybrid, Some(&SearchParams::default()));
        assert_eq!((present.k, present.fetch_k), (0, DEFAULT_HYBRID_FETCH_K));
        let few = SearchParams {
            k: Some(20),
            fetch_k: Some(3),
            ..SearchParams::default()
        };
        let few = EffectiveParams::from_request(SearchKind::Hybrid, Some(&few));
        assert_eq!(few.statement_rows(SearchKind::Hybrid), 20);
        assert_eq!(few.to_json(SearchKind::Hybrid)["rrf_k"], json!(60.0));
    }

    #[test]
    fn fusion_needs_a_positive_constant_and_a_positive_weight() {
        let valid = |rrf_k, similarity_weight, full_text_weight| {
            FusionParams {
                rrf_k,
                similarity_weight,
                full_text_weight,
            }
            .is_valid()
        };
        assert!(valid(60.0, 1.0, 1.0));
        assert!(valid(0.5, 0.0, 2.0));
        assert!(!valid(0.0, 1.0, 1.0));
        assert!(!valid(-1.0, 1.0, 1.0));
        assert!(!valid(60.0, 0.0, 0.0));
        assert!(!valid(60.0, -1.0, 1.0));
        assert!(!valid(f64::NAN, 1.0, 1.0));
        assert!(!valid(60.0, f64::INFINITY, 1.0));
    }
}
