//! Operations of the `Conversations` group (extension `conversations`): `/contexts` and their
//! messages. The route table admits them, and the OpenAPI document describes them, only when
//! the extension is on (`super::app`, `super::extensions`); otherwise their paths are unknown.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi, OpenApiService, Tags};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use trove_query::list::{ListRequest, ListSpec, parse_list_query};
use uuid::Uuid;

use super::agents::RoleName;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, List, NoContent};
use crate::error::ApiError;
use crate::service::contexts::{self as service, ContextChange, ContextRow, NewContext};
use crate::time::rfc3339;

/// The group of the extension's operations (a tag of its own, so that the interface's
/// document, which does not hold these operations, does not list it either).
#[derive(Tags)]
pub enum ConversationTags {
    /// Extension `conversations`: contexts of the calling key and their messages.
    Conversations,
}

/// Body of `POST /contexts`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateContextBody {
    /// 1–255 characters, or null (the default).
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    /// A JSON object; null or omitted: `{}`.
    #[serde(default)]
    metadata: Option<BTreeMap<String, Value>>,
}

/// Body of `PATCH /contexts/{context_id}`: omitted fields keep their values; null clears
/// `name` and `description` and resets `metadata` to `{}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateContextBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    #[serde(default)]
    metadata: MaybeUndefined<BTreeMap<String, Value>>,
}

/// Body of `POST /contexts/{context_id}/messages`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateContextMessageBody {
    role: RoleName,
    /// The text, stored encrypted.
    content: String,
}

/// Extension `conversations`: a conversation context, visible to the key that created it
/// only.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "Context")]
pub struct Context {
    pub id: Uuid,
    #[oai(nullable)]
    pub name: Option<String>,
    #[oai(nullable)]
    pub description: Option<String>,
    /// A JSON object (`{}` unless set).
    pub metadata: BTreeMap<String, Value>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    /// Moves with every change of the context and every message added or deleted.
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<ContextRow> for Context {
    fn from(r: ContextRow) -> Self {
        let metadata = match r.metadata {
            Value::Object(map) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            metadata,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Extension `conversations`: one message of a context.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "ContextMessage")]
pub struct ContextMessage {
    pub id: Uuid,
    pub context_id: Uuid,
    pub role: RoleName,
    pub content: String,
    /// The agent execution whose answer the message is; null for messages posted directly.
    #[oai(nullable)]
    pub execution_id: Option<Uuid>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl From<service::Message> for ContextMessage {
    fn from(m: service::Message) -> Self {
        Self {
            id: m.id,
            context_id: m.context_id,
            role: m.role.into(),
            content: m.content,
            execution_id: m.execution_id,
            created_at: m.created_at,
        }
    }
}

/// A JSON object of a body as the service takes it.
fn object(map: BTreeMap<String, Value>) -> Map<String, Value> {
    map.into_iter().collect()
}

/// The list request of `req`'s query string.
fn list_request(spec: &ListSpec, req: &Request) -> Result<ListRequest, ApiError> {
    parse_list_query(spec, req.uri().query(), &[]).map_err(ApiError::from)
}

#[derive(Default)]
pub struct ContextsApi;

#[OpenApi(tag = "ConversationTags::Conversations")]
impl ContextsApi {
    /// List contexts
    ///
    /// Extension `conversations`. The calling key's contexts (permissions have no effect).
    /// Filters: `id`; `name`, `name$contains`, `name$startswith`, `name$gt|ge|lt|le`;
    /// `description`, `description$contains`; `created_at`, `updated_at` with `$gt|ge|lt|le`.
    /// Cursor or offset pagination, `count`, `order_by` (`id`, `name`, `created_at`,
    /// `updated_at`; default `id`).
    #[oai(path = "/contexts", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<Context>>> {
        let state = state(req)?;
        let request = list_request(&service::CONTEXT_LIST, req)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create a context
    ///
    /// Extension `conversations`. Any key may create contexts; a context is visible to the
    /// key that created it only, and is deleted with it.
    #[oai(path = "/contexts", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateContextBody>,
    ) -> poem::Result<Created<Context>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewContext {
            name: body.name,
            description: body.description,
            metadata: body.metadata.map(object),
        };
        let row = service::create(&state.pool, &state.config.license, &auth.0, input).await?;
        Ok(Created(row.into()))
    }

    /// Get a context
    ///
    /// Extension `conversations`. Another key's context is not found.
    #[oai(path = "/contexts/:context_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        context_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Context>> {
        let state = state(req)?;
        let row = service::get(&state.pool, &auth.0, context_id.0).await?;
        Ok(Json(row.into()))
    }

    /// Update a context
    ///
    /// Extension `conversations`. Changes `name`, `description` and `metadata`.
    #[oai(path = "/contexts/:context_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        context_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateContextBody>,
    ) -> poem::Result<Json<Context>> {
        let state = state(req)?;
        let body = body.0;
        let change = ContextChange {
            name: body.name.into(),
            description: body.description.into(),
            metadata: crate::service::Change::from(body.metadata).map(object),
        };
        let license = &state.config.license;
        let row = service::update(&state.pool, license, &auth.0, context_id.0, change).await?;
        Ok(Json(row.into()))
    }

    /// Delete a context
    ///
    /// Extension `conversations`. Deletes its messages with it.
    #[oai(path = "/contexts/:context_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        context_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, context_id.0).await?;
        Ok(NoContent)
    }

    /// List the messages of a context
    ///
    /// Extension `conversations`. Filters: `id`, `role`, `created_at` with `$gt|ge|lt|le`.
    /// Cursor or offset pagination, `count`, `order_by` (`id`, `created_at`; default
    /// `created_at` then `id`: oldest first).
    #[oai(path = "/contexts/:context_id/messages", method = "get")]
    async fn list_messages(
        &self,
        auth: Auth,
        context_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<List<ContextMessage>>> {
        let state = state(req)?;
        let request = list_request(&service::MESSAGE_LIST, req)?;
        let envelope =
            service::list_messages(&state.pool, &state.cipher, &auth.0, context_id.0, &request)
                .await?;
        Ok(Json(envelope.into()))
    }

    /// Add a message to a context
    ///
    /// Extension `conversations`. The content is stored encrypted; the context's
    /// `updated_at` moves.
    #[oai(path = "/contexts/:context_id/messages", method = "post")]
    async fn add_message(
        &self,
        auth: Auth,
        context_id: extract::Path,
        req: &Request,
        body: JsonBody<CreateContextMessageBody>,
    ) -> poem::Result<Created<ContextMessage>> {
        let state = state(req)?;
        let input = service::NewMessage {
            role: body.0.role.into(),
            content: body.0.content,
        };
        let message = service::add_message(
            &state.pool,
            &state.cipher,
            &state.config.license,
            &auth.0,
            context_id.0,
            input,
        )
        .await?;
        Ok(Created(message.into()))
    }

    /// Delete a message of a context
    ///
    /// Extension `conversations`. The context's `updated_at` moves.
    #[oai(path = "/contexts/:context_id/messages/:message_id", method = "delete")]
    async fn delete_message(
        &self,
        auth: Auth,
        context_id: extract::Path,
        message_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete_message(&state.pool, &auth.0, context_id.0, message_id.0).await?;
        Ok(NoContent)
    }
}

/// The OpenAPI document of these operations alone, which the deployment's document takes in
/// when the extension is on (`super::extensions`).
pub fn openapi_document() -> String {
    OpenApiService::new(ContextsApi, "Trove", super::API_VERSION).spec()
}
