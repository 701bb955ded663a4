//! Rerankers: model servers that score how relevant each of a list of texts is to a query,
//! registered as LLMs with the provider `cohere` or `tei` (extension `hybrid`).
//!
//! - `cohere`: `POST <endpoint>/rerank` with `{model, query, documents, top_n}`, answered with
//!   `{results: [{index, relevance_score}]}` (Cohere, Jina, vLLM, Infinity, LiteLLM).
//! - `tei`: `POST <endpoint>/rerank` with `{query, texts}`, answered with `[{index, score}]`
//!   (text-embeddings-inference).
//!
//! The call goes through the model servers' HTTP client (`LlmClient`: its pool, connect
//! timeout, no redirects, no retries), bounded as a whole by the rerank timeout; every failure
//! is reported with its reason and the key redacted, for the caller to fall back on the order
//! it had.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::llm::{LlmClient, LlmProvider, redact};
use crate::names::{Listing, Named};

/// The kind of reranking server a registration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RerankProvider {
    /// The Cohere rerank API and the servers that speak it.
    Cohere,
    /// text-embeddings-inference.
    Tei,
}

/// What a registration of `/llms` names: a chat model server or a reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelServer {
    Chat(LlmProvider),
    Reranker(RerankProvider),
}

impl Named for ModelServer {
    fn name(self) -> &'static str {
        match self {
            Self::Chat(provider) => provider.as_str(),
            Self::Reranker(RerankProvider::Cohere) => "cohere",
            Self::Reranker(RerankProvider::Tei) => "tei",
        }
    }
}

impl ModelServer {
    /// The server a stored provider name means.
    pub fn parse(name: &str) -> Option<Self> {
        EveryModelServer::ITEMS
            .iter()
            .copied()
            .find(|server| server.name() == name)
    }
}

/// The providers of the interface: chat model servers.
pub struct ChatModelServers;

impl Listing for ChatModelServers {
    type Item = ModelServer;
    const ITEMS: &'static [ModelServer] = &[
        ModelServer::Chat(LlmProvider::OpenAi),
        ModelServer::Chat(LlmProvider::Ollama),
    ];
    const NAMES: &'static [&'static str] = &["openai", "ollama"];
}

/// Every provider, rerankers included (extension `hybrid`).
pub struct EveryModelServer;

impl Listing for EveryModelServer {
    type Item = ModelServer;
    const ITEMS: &'static [ModelServer] = &[
        ModelServer::Chat(LlmProvider::OpenAi),
        ModelServer::Chat(LlmProvider::Ollama),
        ModelServer::Reranker(RerankProvider::Cohere),
        ModelServer::Reranker(RerankProvider::Tei),
    ];
    const NAMES: &'static [&'static str] = &["openai", "ollama", "cohere", "tei"];
}

/// A registered reranker, ready to be called.
pub struct RerankTarget<'a> {
    pub provider: RerankProvider,
    /// Base URL without a trailing `/`.
    pub endpoint: &'a str,
    pub model: Option<&'a str>,
    pub api_key: Option<&'a str>,
}

/// Why a rerank call gave no order; `reason` labels the failure metric.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RerankFailure {
    pub reason: RerankFailureReason,
    /// What happened, with the key redacted.
    pub message: String,
}

/// The kinds of rerank failure (the `reason` label of `trove_rerank_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RerankFailureReason {
    Timeout,
    Connection,
    Status,
    Malformed,
}

impl RerankFailureReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Status => "status",
            Self::Malformed => "malformed",
        }
    }
}

#[derive(Deserialize)]
struct CohereAnswer {
    results: Vec<CohereResult>,
}

#[derive(Deserialize)]
struct CohereResult {
    index: usize,
    relevance_score: f64,
}

#[derive(Deserialize)]
struct TeiResult {
    index: usize,
    score: f64,
}

/// The body of a rerank request.
fn request_body(target: &RerankTarget<'_>, query: &str, documents: &[String]) -> Value {
    match target.provider {
        RerankProvider::Cohere => json!({
            "model": target.model,
            "query": query,
            "documents": documents,
            "top_n": documents.len(),
        }),
        RerankProvider::Tei => json!({"query": query, "texts": documents}),
    }
}

/// The relevance of each document, by its index in the request, from an answer's body.
fn relevances(
    provider: RerankProvider,
    body: &[u8],
    documents: usize,
) -> Option<Vec<(usize, f64)>> {
    let scored: Vec<(usize, f64)> = match provider {
        RerankProvider::Cohere => serde_json::from_slice::<CohereAnswer>(body)
            .ok()?
            .results
            .into_iter()
            .map(|r| (r.index, r.relevance_score))
            .collect(),
        RerankProvider::Tei => serde_json::from_slice::<Vec<TeiResult>>(body)
            .ok()?
            .into_iter()
            .map(|r| (r.index, r.score))
            .collect(),
    };
    let valid = scored
        .iter()
        .all(|(index, score)| *index < documents && score.is_finite());
    valid.then_some(scored)
}

/// The documents' order by descending relevance (ties and documents the server left out keep
/// their order after the scored ones): `(index, relevance)` pairs, each index once.
pub fn reranked_order(scored: &[(usize, f64)], documents: usize) -> Vec<(usize, Option<f64>)> {
    let mut best: Vec<Option<f64>> = vec![None; documents];
    for &(index, score) in scored {
        if let Some(slot) = best.get_mut(index) {
            *slot = Some(slot.map_or(score, |s: f64| s.max(score)));
        }
    }
    let mut order: Vec<(usize, Option<f64>)> = best.into_iter().enumerate().collect();
    order.sort_by(|a, b| match (a.1, b.1) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.0.cmp(&b.0)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    });
    order
}

impl LlmClient {
    /// Asks a reranker how relevant each document is to `query`, within `timeout`: the
    /// documents' `(index, relevance)` in descending relevance (see [`reranked_order`]).
    pub async fn rerank(
        &self,
        target: &RerankTarget<'_>,
        query: &str,
        documents: &[String],
        timeout: Duration,
    ) -> Result<Vec<(usize, Option<f64>)>, RerankFailure> {
        let secrets: Vec<&str> = target.api_key.into_iter().collect();
        let failure = |reason, message: String| RerankFailure {
            reason,
            message: redact(&message, &secrets),
        };
        let url = format!("{}/rerank", target.endpoint);
        let mut request = self
            .http()
            .post(&url)
            .json(&request_body(target, query, documents))
            .timeout(timeout);
        if let Some(key) = target.api_key.filter(|key| !key.is_empty()) {
            request = request.bearer_auth(key);
        }
        let exchange = async {
            let response = request.send().await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        };
        let (status, body) = exchange.await.map_err(|err| {
            let reason = if err.is_timeout() {
                RerankFailureReason::Timeout
            } else {
                RerankFailureReason::Connection
            };
            failure(reason, format!("reranker {url}: {err}"))
        })?;
        if !status.is_success() {
            let excerpt: String = String::from_utf8_lossy(&body).chars().take(200).collect();
            return Err(failure(
                RerankFailureReason::Status,
                format!("reranker {url} answered {status}: {excerpt}"),
            ));
        }
        let scored = relevances(target.provider, &body, documents.len()).ok_or_else(|| {
            failure(
                RerankFailureReason::Malformed,
                format!("reranker {url} sent an answer that is not a list of scored indexes"),
            )
        })?;
        Ok(reranked_order(&scored, documents.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_of_answer_are_read() {
        let cohere = br#"{"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}], "meta": {}}"#;
        assert_eq!(
            relevances(RerankProvider::Cohere, cohere, 2),
            Some(vec![(1, 0.9), (0, 0.2)])
        );
        let tei = br#"[{"index": 0, "score": 0.5}, {"index": 2, "score": 0.7}]"#;
        assert_eq!(
            relevances(RerankProvider::Tei, tei, 3),
            Some(vec![(0, 0.5), (2, 0.7)])
        );
        assert_eq!(
            relevances(RerankProvider::Tei, tei, 2),
            None,
            "index out of range"
        );
        assert_eq!(relevances(RerankProvider::Cohere, tei, 3), None);
        assert_eq!(relevances(RerankProvider::Tei, b"{}", 3), None);
    }

    #[test]
    fn the_order_is_by_relevance_then_the_order_before() {
        let order = reranked_order(&[(2, 0.5), (0, 0.5), (3, 0.9)], 5);
        assert_eq!(
            order,
            vec![
                (3, Some(0.9)),
                (0, Some(0.5)),
                (2, Some(0.5)),
                (1, None),
                (4, None)
            ]
        );
    }

    #[test]
    fn providers_have_their_names() {
        for name in ["openai", "ollama", "cohere", "tei"] {
            assert_eq!(ModelServer::parse(name).map(Named::name), Some(name));
        }
        assert_eq!(ModelServer::parse("other"), None);
        let names: Vec<&str> = EveryModelServer::ITEMS.iter().map(|s| s.name()).collect();
        assert_eq!(names, EveryModelServer::NAMES);
        let names: Vec<&str> = ChatModelServers::ITEMS.iter().map(|s| s.name()).collect();
        assert_eq!(names, ChatModelServers::NAMES);
    }
}
