//! Operations of the `TextSplitters` group: `/text-splitter-providers` (read-only) and
//! `/text-splitters`.

use std::collections::BTreeMap;

use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::{Map, Value};
use trove_query::list::parse_list_query;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, List, NoContent};
use super::schemas::{TextSplitter, TextSplitterProvider};
use crate::error::ApiError;
use crate::service::text_splitters::{self as service, NewSplitter, SplitterChange};

/// Body of `POST /text-splitters`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateTextSplitterBody {
    /// Unique name, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// Provider name: `recursive-character`, `character` or `token`.
    provider: String,
    /// The provider's parameters; omitted ones take their defaults, unknown keys are ignored.
    #[serde(default)]
    parameters: Option<BTreeMap<String, Value>>,
}

/// Body of `PATCH /text-splitters/{text_splitter_id}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateTextSplitterBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    /// Replaces the parameters whole (defaults filled again); the provider is fixed.
    #[serde(default)]
    parameters: MaybeUndefined<BTreeMap<String, Value>>,
}

fn to_map(parameters: BTreeMap<String, Value>) -> Map<String, Value> {
    parameters.into_iter().collect()
}

#[derive(Default)]
pub struct TextSplittersApi;

#[OpenApi(tag = "ApiTags::TextSplitters")]
impl TextSplittersApi {
    /// List text splitter providers
    ///
    /// Providers the caller can read. Filters: `id`; `name`, `name$contains`,
    /// `name$startswith`, `name$gt|ge|lt|le`; `created_at`, `updated_at` with `$gt|ge|lt|le`.
    /// Cursor or offset pagination, `count`, `order_by` (`id`, `name`, `created_at`,
    /// `updated_at`).
    #[oai(path = "/text-splitter-providers", method = "get")]
    async fn list_providers(
        &self,
        auth: Auth,
        req: &Request,
    ) -> poem::Result<Json<List<TextSplitterProvider>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::PROVIDER_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list_providers(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Get a text splitter provider
    #[oai(
        path = "/text-splitter-providers/:text_splitter_provider_id",
        method = "get"
    )]
    async fn get_provider(
        &self,
        auth: Auth,
        text_splitter_provider_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<TextSplitterProvider>> {
        let state = state(req)?;
        Ok(Json(
            service::get_provider_readable(&state.pool, &auth.0, text_splitter_provider_id.0)
                .await?
                .into(),
        ))
    }

    /// List text splitters
    ///
    /// Splitters the caller can read. Filters: `id`; `name`, `name$contains`,
    /// `name$startswith`, `name$gt|ge|lt|le`; `description`, `description$contains`;
    /// `provider`; `created_at`, `updated_at` with `$gt|ge|lt|le`. Cursor or offset
    /// pagination, `count`, `order_by` (`id`, `name`, `provider`, `created_at`, `updated_at`).
    #[oai(path = "/text-splitters", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<TextSplitter>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::SPLITTER_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create a text splitter
    ///
    /// Needs write on `text-splitters` and on the provider. The response holds the
    /// parameters with their defaults filled.
    #[oai(path = "/text-splitters", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateTextSplitterBody>,
    ) -> poem::Result<Created<TextSplitter>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewSplitter {
            name: body.name,
            description: body.description,
            provider: body.provider,
            parameters: body.parameters.map(to_map),
        };
        Ok(Created(
            service::create(&state.pool, &state.config.license, &auth.0, input)
                .await?
                .into(),
        ))
    }

    /// Get a text splitter
    #[oai(path = "/text-splitters/:text_splitter_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        text_splitter_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<TextSplitter>> {
        let state = state(req)?;
        Ok(Json(
            service::get_readable(&state.pool, &auth.0, text_splitter_id.0)
                .await?
                .into(),
        ))
    }

    /// Update a text splitter
    ///
    /// Changes `name`, `description` and `parameters` (replaced whole and validated against
    /// the splitter's provider, which is fixed). Applies to jobs processed afterwards.
    #[oai(path = "/text-splitters/:text_splitter_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        text_splitter_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateTextSplitterBody>,
    ) -> poem::Result<Json<TextSplitter>> {
        let state = state(req)?;
        let body = body.0;
        let change = SplitterChange {
            name: body.name.into(),
            description: body.description.into(),
            parameters: body.parameters.map_value(to_map).into(),
        };
        Ok(Json(
            service::update(
                &state.pool,
                &state.config.license,
                &auth.0,
                text_splitter_id.0,
                change,
            )
            .await?
            .into(),
        ))
    }

    /// Delete a text splitter
    ///
    /// Refused (409) while a pipeline's default or a pending document version's override
    /// uses it. Permission entries on it are removed.
    #[oai(path = "/text-splitters/:text_splitter_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        text_splitter_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, text_splitter_id.0).await?;
        Ok(NoContent)
    }
}
