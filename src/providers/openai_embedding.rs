//! The `openai` embedding provider: any OpenAI-compatible `/v1/embeddings` server.
//!
//! `POST <base_url>/embeddings` with `{model, input: [texts], dimensions?}` and a bearer key,
//! in batches of at most [`MAX_BATCH`] inputs. Each request has a timeout; 429, 5xx answers and
//! connection failures are retried with exponential backoff (honouring `Retry-After`). The key
//! never reaches logs or error messages.

use std::fmt;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::embedding::{EmbedFailure, ModelSpec};

/// Most inputs sent in one request.
pub const MAX_BATCH: usize = 256;
/// Timeout of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts per batch (the first one included).
const MAX_ATTEMPTS: u32 = 4;
/// Delay before the first retry; doubled before each further one.
const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Upper bound of a delay asked by `Retry-After`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Characters of an error body quoted in a failure.
const BODY_EXCERPT: usize = 200;

/// An OpenAI-compatible embeddings client for one model.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    /// `<base_url>/embeddings`.
    url: String,
    model: String,
    api_key: String,
    dimensions: Option<u64>,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &"***")
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u64>,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    index: usize,
}

/// Why one attempt failed, and whether another attempt may succeed.
enum Attempt {
    Retry {
        failure: EmbedFailure,
        retry_after: Option<Duration>,
    },
    Fail(EmbedFailure),
}

impl OpenAiEmbedder {
    /// Reads `base_url`, `api_key` and `dimensions` from the model's parameters (secrets
    /// decrypted). The service validates them at create; this only refuses what cannot work.
    pub fn new(client: reqwest::Client, spec: &ModelSpec) -> Result<Self, EmbedFailure> {
        let base_url = spec
            .parameters
            .get("base_url")
            .and_then(Value::as_str)
            .ok_or_else(|| EmbedFailure::Load("missing field `base_url`".to_owned()))?;
        let api_key = spec
            .parameters
            .get("api_key")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                EmbedFailure::Load("API key is required for OpenAI provider".to_owned())
            })?;
        let dimensions = spec.parameters.get("dimensions").and_then(Value::as_u64);
        Ok(Self {
            client,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: spec.model_name.clone(),
            api_key: api_key.to_owned(),
            dimensions,
        })
    }

    /// Embeds texts in order, one vector per text.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(MAX_BATCH) {
            vectors.extend(self.embed_batch(batch).await?);
        }
        Ok(vectors)
    }

    /// One batch, retried on transient failures.
    async fn embed_batch(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        let mut backoff = INITIAL_BACKOFF;
        let mut attempt = 1;
        loop {
            match self.attempt(batch).await {
                Ok(vectors) => return Ok(vectors),
                Err(Attempt::Fail(failure)) => return Err(failure),
                Err(Attempt::Retry {
                    failure,
                    retry_after,
                }) => {
                    if attempt >= MAX_ATTEMPTS {
                        return Err(failure);
                    }
                    let delay = retry_after.unwrap_or(backoff);
                    tracing::warn!(
                        url = %self.url,
                        attempt,
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        error = %failure,
                        "embedding request failed, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    backoff = backoff.saturating_mul(2);
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, Attempt> {
        let body = EmbeddingsRequest {
            model: &self.model,
            input: batch,
            dimensions: self.dimensions,
        };
        let response = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .timeout(REQUEST_TIMEOUT)
            .json(&body)
            .send()
            .await
            .map_err(|e| {
                // Connection failures and timeouts are transient; a request that could not be
                // built is not. The error names the URL, never the headers.
                let transient = e.is_connect() || e.is_timeout() || e.is_request();
                let failure = EmbedFailure::Compute(format!(
                    "request to {} failed: {}",
                    self.url,
                    describe(e)
                ));
                if transient {
                    Attempt::Retry {
                        failure,
                        retry_after: None,
                    }
                } else {
                    Attempt::Fail(failure)
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = response.text().await.unwrap_or_default();
            // Servers quote the key they refused (OpenAI: `Incorrect API key provided: sk-…`).
            let text = crate::providers::llm::redact(&text, &[&self.api_key]);
            let reason = format!(
                "embedding server answered HTTP {}: {}",
                status.as_u16(),
                excerpt(&text)
            );
            return Err(
                if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                    Attempt::Retry {
                        failure: EmbedFailure::Compute(reason),
                        retry_after,
                    }
                } else if status.is_client_error() {
                    Attempt::Fail(EmbedFailure::Refused(reason))
                } else {
                    Attempt::Fail(EmbedFailure::Compute(reason))
                },
            );
        }
        let text = response.text().await.map_err(|e| Attempt::Retry {
            failure: EmbedFailure::Compute(format!("reading the embedding response failed: {e}")),
            retry_after: None,
        })?;
        let parsed: EmbeddingsResponse = serde_json::from_str(&text).map_err(|e| {
            Attempt::Fail(EmbedFailure::Compute(format!(
                "invalid embedding response: {e}"
            )))
        })?;
        order_by_index(parsed.data, batch.len()).map_err(Attempt::Fail)
    }
}

/// Puts the returned items in input order; every index must appear exactly once.
fn order_by_index(
    items: Vec<EmbeddingItem>,
    expected: usize,
) -> Result<Vec<Vec<f32>>, EmbedFailure> {
    if items.len() != expected {
        return Err(EmbedFailure::Compute(format!(
            "expected {expected} embeddings, received {}",
            items.len()
        )));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    for item in items {
        let slot = slots.get_mut(item.index).ok_or_else(|| {
            EmbedFailure::Compute(format!("embedding index {} out of range", item.index))
        })?;
        if slot.replace(item.embedding).is_some() {
            return Err(EmbedFailure::Compute(format!(
                "embedding index {} returned twice",
                item.index
            )));
        }
    }
    // Counts are equal and no index repeats, so every slot is filled.
    Ok(slots.into_iter().flatten().collect())
}

/// A client error with its causes (`error sending request: ... Connection refused`), without
/// the URL (the caller names it) and never with headers.
fn describe(error: reqwest::Error) -> String {
    use std::error::Error as _;
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The delay of a `Retry-After: <seconds>` header (HTTP dates are not honoured), bounded.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds: f64 = value.parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(seconds).min(MAX_RETRY_AFTER))
}

/// The first characters of an error body, on one line.
fn excerpt(body: &str) -> String {
    let one_line: String = body
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let trimmed = one_line.trim();
    if trimmed.chars().count() > BODY_EXCERPT {
        let cut: String = trimmed.chars().take(BODY_EXCERPT).collect();
        format!("{cut}…")
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use crate::providers::embedding::ProviderKind;
    use serde_json::json;

    fn item(index: usize, x: f32) -> EmbeddingItem {
        EmbeddingItem {
            embedding: vec![x],
            index,
        }
    }

    #[test]
    fn results_are_ordered_by_index() {
        let ordered = order_by_index(vec![item(2, 2.0), item(0, 0.0), item(1, 1.0)], 3).unwrap();
        assert_eq!(ordered, vec![vec![0.0], vec![1.0], vec![2.0]]);
        assert!(order_by_index(vec![item(0, 0.0)], 2).is_err());
        assert!(order_by_index(vec![item(0, 0.0), item(0, 1.0)], 2).is_err());
        assert!(order_by_index(vec![item(5, 0.0)], 1).is_err());
    }

    #[test]
    fn retry_after_seconds_are_bounded() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "100000".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn excerpts_are_short_and_single_line() {
        assert_eq!(excerpt(" {\"error\":\n\"x\"} "), "{\"error\": \"x\"}");
        let long = "a".repeat(1000);
        assert_eq!(excerpt(&long).chars().count(), BODY_EXCERPT + 1);
    }

    #[test]
    fn debug_hides_the_key() {
        let spec = ModelSpec {
            provider: ProviderKind::OpenAi,
            model_name: "m".to_owned(),
            parameters: json!({"base_url": "http://x/v1/", "api_key": "sk-secret"}),
            dimensions: None,
        };
        let embedder = OpenAiEmbedder::new(reqwest::Client::new(), &spec).unwrap();
        assert_eq!(embedder.url, "http://x/v1/embeddings");
        assert!(!format!("{embedder:?}").contains("sk-secret"));
    }
}
