//! Metadata filters against a pipeline: schema validation, `$teq` expansion read from the
//! taxonomy links at search time, then compilation to a condition over a table's `metadata`;
//! and rule 6, checked just before the statement that applies the filter runs.

use sea_query::Condition;
use trove_query::filter::{
    Filter, TeqExpansions, compile, teq_expansion_query, validate, validate_teq,
};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::pipelines::PipelineRow;

/// A filter compiled for a pipeline.
pub struct CompiledFilter {
    /// The condition over the table's `metadata`.
    pub condition: Condition,
    /// The integer fields it compares: the fields rule 6 concerns.
    integer_fields: Vec<String>,
}

/// Compiles `filter` for `pipeline`; a filter that does not fit the schema is `Schema error`.
pub async fn compile_for_pipeline(
    state: &AppState,
    pipeline: &PipelineRow,
    filter: &Filter,
    table: &str,
) -> ApiResult<CompiledFilter> {
    let typed = validate(filter, &pipeline.metadata_schema).map_err(|_| ApiError::Schema)?;
    let expansions = match teq_expansion_query(&typed.teq_starts()) {
        Some(query) => TeqExpansions::from_rows(
            crate::store::taxonomies::expansion_rows(&state.pool, query).await?,
        ),
        None => TeqExpansions::new(),
    };
    validate_teq(&typed, &expansions).map_err(|_| ApiError::Schema)?;
    Ok(CompiledFilter {
        condition: compile(&typed, table, &expansions),
        integer_fields: typed.integer_fields(),
    })
}

impl CompiledFilter {
    /// The integer fields it compares that are not among `recorded`, the fields rule 6
    /// concerns as the caller read them.
    pub fn unrecorded_integer_fields(&self, recorded: &[String]) -> Vec<String> {
        self.integer_fields
            .iter()
            .filter(|field| !recorded.contains(field))
            .cloned()
            .collect()
    }
}

/// Rule 6: a filter comparing an integer field on which a stored version of the pipeline
/// holds a value the database cannot read as a 64-bit integer (such as `5.0`) fails with the
/// database's own error (500). Versions holding one are recorded at submission
/// (`store::documents::record_unconvertible`); `recorded` is the pipeline's list of such fields
/// when the caller has read it already (the search context), `None` to let this check read it.
/// Call it just before the statement that applies the filter.
pub async fn refuse_unconvertible(
    state: &AppState,
    pipeline_id: uuid::Uuid,
    filter: &CompiledFilter,
    recorded: Option<&[String]>,
) -> ApiResult<()> {
    let fields: Vec<String> = filter
        .integer_fields
        .iter()
        .filter(|field| recorded.is_none_or(|recorded| recorded.contains(field)))
        .cloned()
        .collect();
    if fields.is_empty() {
        return Ok(());
    }
    crate::store::documents::refuse_unconvertible(&state.pool, pipeline_id, &fields).await?;
    Ok(())
}
