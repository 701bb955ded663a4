//! Execution traces: what an execution retrieved, the messages it sent and the answer it got,
//! readable by the key that ran it for [`TRACE_LIFETIME`]. The parts hold fragment text, so
//! they are stored encrypted.
//!
//! A streamed execution writes its trace before the head is sent, with no answer; the
//! [`AnswerRecorder`] wrapped around the answer's events writes the text when generation
//! ends — before the final event is passed on, after a failure, or (from its `Drop`) when the
//! client left early, with the partial text.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::crypto::at_rest::Cipher;
use crate::error::{ApiError, ApiResult};
use crate::providers::llm::{ChatEvent, ChatStream};
use crate::store::Pool;
use crate::store::agents::{self as store, NewTrace};

/// How long a trace stays readable (interface: 60 minutes).
pub const TRACE_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// The ids an execution's trace names.
#[derive(Debug, Clone, Copy)]
pub struct TraceIds {
    pub id: Uuid,
    pub api_key_id: Uuid,
    pub agent_id: Uuid,
    pub pipeline_id: Uuid,
    pub llm_id: Uuid,
}

/// A trace as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub pipeline_id: Uuid,
    pub llm_id: Uuid,
    #[serde(with = "crate::time::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// Retrieval placeholder → its fragments.
    pub retrievals: Value,
    /// `[{role, content}]` as sent.
    pub messages: Value,
    /// Null until generation ended; partial after an early end.
    pub answer: Option<String>,
}

fn encrypt_json(cipher: &Cipher, value: &Value) -> Vec<u8> {
    cipher.encrypt(value.to_string().as_bytes())
}

/// Writes a trace; `answer` is known at once for a plain-mode execution.
pub async fn write(
    pool: &Pool,
    cipher: &Cipher,
    ids: TraceIds,
    retrievals: &Value,
    messages: &Value,
    answer: Option<&str>,
) -> ApiResult<()> {
    let retrievals = encrypt_json(cipher, retrievals);
    let messages = encrypt_json(cipher, messages);
    let answer = answer.map(|text| cipher.encrypt(text.as_bytes()));
    store::insert_trace(
        pool,
        &NewTrace {
            id: ids.id,
            api_key_id: ids.api_key_id,
            agent_id: ids.agent_id,
            pipeline_id: ids.pipeline_id,
            llm_id: ids.llm_id,
            retrievals: &retrievals,
            messages: &messages,
            answer: answer.as_deref(),
        },
    )
    .await?;
    Ok(())
}

/// `Trace with id <id> not found`.
fn not_found(id: Uuid) -> ApiError {
    ApiError::ObjectNotFound {
        type_name: "Trace",
        id,
    }
}

/// Reads a trace of `api_key_id` that has not expired; any other is not found.
pub async fn read(pool: &Pool, cipher: &Cipher, id: Uuid, api_key_id: Uuid) -> ApiResult<Trace> {
    let row = store::get_trace(pool, id, api_key_id, TRACE_LIFETIME.as_secs_f64())
        .await?
        .ok_or_else(|| not_found(id))?;
    let json = |bytes: &[u8]| -> ApiResult<Value> {
        let text = cipher
            .decrypt_text(bytes)
            .map_err(|_| ApiError::Decryption)?;
        serde_json::from_str(&text).map_err(|e| ApiError::Internal(e.to_string()))
    };
    let answer = match &row.answer {
        Some(bytes) => Some(
            cipher
                .decrypt_text(bytes)
                .map_err(|_| ApiError::Decryption)?,
        ),
        None => None,
    };
    Ok(Trace {
        id: row.id,
        agent_id: row.agent_id,
        pipeline_id: row.pipeline_id,
        llm_id: row.llm_id,
        created_at: row.created_at,
        retrievals: json(&row.retrievals)?,
        messages: json(&row.messages)?,
        answer,
    })
}

/// Deletes expired traces; how many.
pub async fn delete_expired(pool: &Pool) -> ApiResult<u64> {
    Ok(store::delete_expired_traces(pool, TRACE_LIFETIME.as_secs_f64()).await?)
}

/// Collects the text of a streamed answer and writes it into the trace once, when the answer
/// ends in any way.
pub struct AnswerRecorder {
    pool: Pool,
    cipher: Cipher,
    trace_id: Uuid,
    text: String,
    written: bool,
}

impl AnswerRecorder {
    pub fn new(pool: Pool, cipher: Cipher, trace_id: Uuid) -> Self {
        Self {
            pool,
            cipher,
            trace_id,
            text: String::new(),
            written: false,
        }
    }

    /// `events`, with the answer written into the trace before the final event (or the
    /// failure that ends them) is passed on.
    pub fn record(self, events: ChatStream) -> ChatStream {
        futures_util::stream::unfold(Some((events, self)), |state| async move {
            let (mut events, mut recorder) = state?;
            match events.next().await {
                Some(Ok(ChatEvent::Delta(text))) => {
                    recorder.text.push_str(&text);
                    Some((Ok(ChatEvent::Delta(text)), Some((events, recorder))))
                }
                Some(Ok(done @ ChatEvent::Done { .. })) => {
                    recorder.finish().await;
                    Some((Ok(done), Some((events, recorder))))
                }
                Some(Err(error)) => {
                    recorder.finish().await;
                    Some((Err(error), None))
                }
                None => {
                    recorder.finish().await;
                    None
                }
            }
        })
        .boxed()
    }

    /// Writes the text gathered so far, once.
    async fn finish(&mut self) {
        if self.written {
            return;
        }
        let answer = self.cipher.encrypt(self.text.as_bytes());
        if let Err(error) = store::set_trace_answer(&self.pool, self.trace_id, &answer).await {
            tracing::warn!(%error, trace_id = %self.trace_id, "could not record the answer in the trace");
        }
        self.written = true;
    }
}

impl Drop for AnswerRecorder {
    /// The client left before the answer ended: the partial text is written in the background.
    fn drop(&mut self) {
        if self.written {
            return;
        }
        self.written = true;
        let pool = self.pool.clone();
        let trace_id = self.trace_id;
        let answer = self.cipher.encrypt(self.text.as_bytes());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = store::set_trace_answer(&pool, trace_id, &answer).await {
                    tracing::warn!(%error, %trace_id, "could not record the partial answer in the trace");
                }
            });
        }
    }
}
