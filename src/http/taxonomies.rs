//! Operations of the `Taxonomies` group: `/taxonomies` and their entries.

use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use trove_query::list::parse_list_query;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, List, NoContent};
use super::schemas::{self, AddedEntries, Taxonomy, TaxonomyEntry};
use crate::error::ApiError;
use crate::service::taxonomies::{self as service, NewTaxonomy, TaxonomyChange};

/// Body of `POST /taxonomies`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateTaxonomyBody {
    /// Unique name, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
}

/// Body of `PATCH /taxonomies/{taxonomy_id}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateTaxonomyBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
}

/// Body of `POST` and `DELETE /taxonomies/{taxonomy_id}/entries`.
#[derive(Debug, Object, Deserialize)]
pub struct TaxonomyEntriesBody {
    /// Links: parent field and value → child field and value.
    entries: Vec<schemas::Link>,
}

#[derive(Default)]
pub struct TaxonomiesApi;

#[OpenApi(tag = "ApiTags::Taxonomies")]
impl TaxonomiesApi {
    /// List taxonomies
    ///
    /// Taxonomies the caller can read. Filters: `id`; `name`, `name$contains`,
    /// `name$startswith`, `name$gt|ge|lt|le`; `description`, `description$contains`;
    /// `created_at`, `updated_at` with `$gt|ge|lt|le`. Cursor or offset pagination, `count`,
    /// `order_by` (`id`, `name`, `created_at`, `updated_at`).
    #[oai(path = "/taxonomies", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<Taxonomy>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::TAXONOMY_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create a taxonomy
    ///
    /// Needs write on `taxonomies`.
    #[oai(path = "/taxonomies", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateTaxonomyBody>,
    ) -> poem::Result<Created<Taxonomy>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewTaxonomy {
            name: body.name,
            description: body.description,
        };
        Ok(Created(
            service::create(&state.pool, &state.config.license, &auth.0, input)
                .await?
                .into(),
        ))
    }

    /// Get a taxonomy
    #[oai(path = "/taxonomies/:taxonomy_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Taxonomy>> {
        let state = state(req)?;
        Ok(Json(
            service::get_readable(&state.pool, &auth.0, taxonomy_id.0)
                .await?
                .into(),
        ))
    }

    /// Update a taxonomy
    ///
    /// Changes `name` and `description`.
    #[oai(path = "/taxonomies/:taxonomy_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateTaxonomyBody>,
    ) -> poem::Result<Json<Taxonomy>> {
        let state = state(req)?;
        let body = body.0;
        let change = TaxonomyChange {
            name: body.name.into(),
            description: body.description.into(),
        };
        Ok(Json(
            service::update(
                &state.pool,
                &state.config.license,
                &auth.0,
                taxonomy_id.0,
                change,
            )
            .await?
            .into(),
        ))
    }

    /// Delete a taxonomy
    ///
    /// Removes its entries and the permission entries on it.
    #[oai(path = "/taxonomies/:taxonomy_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, taxonomy_id.0).await?;
        Ok(NoContent)
    }

    /// List the entries of a taxonomy
    ///
    /// Needs read on the taxonomy. Filters (equality): `parent_field`, `parent_value`,
    /// `child_field`, `child_value`. Cursor or offset pagination, `count`, `order_by` (those
    /// four, `id`, `created_at`; default `id`).
    #[oai(path = "/taxonomies/:taxonomy_id/entries", method = "get")]
    async fn list_entries(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<List<TaxonomyEntry>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::ENTRY_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list_entries(&state.pool, &auth.0, taxonomy_id.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Add entries to a taxonomy
    ///
    /// Needs write on the taxonomy. Every link is validated before any is stored (field
    /// names are identifiers, values non-empty, parent different from child). A link is
    /// stored once across all taxonomies: `added` lists the links stored now, `skipped` the
    /// others with the taxonomy holding them (this one for a repeat or a duplicate in the
    /// request).
    #[oai(path = "/taxonomies/:taxonomy_id/entries", method = "post")]
    async fn add_entries(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
        body: JsonBody<TaxonomyEntriesBody>,
    ) -> poem::Result<Json<AddedEntries>> {
        let state = state(req)?;
        Ok(Json(
            service::add_entries(
                &state.pool,
                &state.config.license,
                &auth.0,
                taxonomy_id.0,
                schemas::all(body.0.entries),
            )
            .await?
            .into(),
        ))
    }

    /// Remove entries from a taxonomy
    ///
    /// Needs write on the taxonomy. Removes the listed links this taxonomy holds; links it
    /// does not hold are ignored.
    #[oai(path = "/taxonomies/:taxonomy_id/entries", method = "delete")]
    async fn remove_entries(
        &self,
        auth: Auth,
        taxonomy_id: extract::Path,
        req: &Request,
        body: JsonBody<TaxonomyEntriesBody>,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        let links = schemas::all(body.0.entries);
        service::remove_entries(&state.pool, &auth.0, taxonomy_id.0, links).await?;
        Ok(NoContent)
    }
}
