//! The HTTP interface: one file per resource; handlers extract, authorize, call the service
//! layer and shape the response.

pub mod agents;
pub mod api_keys;
pub mod completions;
pub mod connections;
pub mod contexts;
pub mod core;
pub mod documents;
pub mod embedding;
pub mod extensions;
pub mod extract;
pub mod files;
pub mod listed;
pub mod llms;
pub mod pipelines;
pub mod relay;
pub mod respond;
pub mod routes;
pub mod schemas;
pub mod search;
pub mod shell;
pub mod statistics;
pub mod streaming;
pub mod taxonomies;
pub mod text_splitters;
pub mod traces;
pub mod worker_metrics;

use std::sync::Arc;

use poem::http::Method;
use poem::{Endpoint, EndpointExt, Route};
use poem_openapi::{OpenApiService, Tags};

use crate::config::Extension;
use crate::state::AppState;
use routes::{RouteKind, RouteTable};
use shell::Shell;

/// Groups of operations in the reference.
#[derive(Tags)]
pub enum ApiTags {
    /// Service statistics.
    Service,
    /// API keys, key check and permissions.
    ApiKeys,
    /// Embedding providers and embedding models.
    Embeddings,
    /// Text splitter providers and text splitters.
    TextSplitters,
    /// Pipelines, classifications and metadata indexes.
    Pipelines,
    /// Documents, versions and fragments.
    Documents,
    /// Search: similarity, MMR and full-text.
    Search,
    /// Taxonomies of metadata values.
    Taxonomies,
    /// LLMs: registrations of model servers, direct queries and the chat-completions relay.
    Llms,
    /// Agents: prompt templates filled by retrieval, dry runs and executions.
    Agents,
    /// Traces of agent executions.
    Tracing,
}

/// Every operation group, in the order of the reference.
pub type Apis = (
    core::CoreApi,
    api_keys::ApiKeysApi,
    embedding::EmbeddingApi,
    text_splitters::TextSplittersApi,
    pipelines::PipelinesApi,
    documents::DocumentsApi,
    search::SearchApi,
    taxonomies::TaxonomiesApi,
    llms::LlmsApi,
    relay::RelayApi,
    agents::AgentsApi,
    traces::TracesApi,
);

/// Every operation the application can serve: the interface's and the extensions'. The route
/// table admits an extension's operations only when it is on; until then their paths are
/// unknown paths.
type ServedApis = (Apis, contexts::ContextsApi);

/// The release string of the OpenAPI document (`<year>-<month>`).
pub const API_VERSION: &str = "2026-11";

/// The OpenAPI service of every operation.
pub fn openapi_service() -> OpenApiService<Apis, ()> {
    OpenApiService::new(Apis::default(), "Trove", API_VERSION)
        .description("Knowledge retrieval and agent service.")
}

/// The OpenAPI document as served at `/openapi.json`.
pub fn openapi_document() -> String {
    openapi_service().spec()
}

/// The routes outside the OpenAPI document's operations.
const OTHER_ROUTES: [(&str, &[Method], RouteKind, bool); 9] = [
    ("/", &[Method::GET], RouteKind::Reference, false),
    ("/healthz", &[Method::GET], RouteKind::Reference, false),
    ("/metrics", &[Method::GET], RouteKind::Reference, false),
    ("/openapi.json", &[Method::GET], RouteKind::Reference, false),
    ("/docs", &[Method::GET], RouteKind::Reference, true),
    ("/_docs", &[Method::GET], RouteKind::Reference, true),
    ("/_docs-alt", &[Method::GET], RouteKind::Reference, true),
    // In the document, but not an authenticated operation.
    ("/statistics", &[Method::GET], RouteKind::Statistics, false),
    (
        "/mcp",
        &[Method::GET, Method::POST, Method::DELETE],
        RouteKind::Mcp,
        false,
    ),
];

/// Builds the whole application endpoint around the MCP endpoint `mcp`; `connections` are
/// those of the acceptor it serves (see [`connections`]).
pub fn app(
    state: AppState,
    connections: connections::Connections,
    mcp: impl Endpoint,
) -> impl Endpoint {
    let service = openapi_service();
    let mut routes = RouteTable::default();
    for (template, methods, kind, prefix) in OTHER_ROUTES {
        routes.add(template, methods.to_vec(), kind, prefix);
    }
    let mut operations = RouteTable::default();
    operations.add_operations::<Apis>();
    if state.config.extensions.has(Extension::Conversations) {
        operations.add_operations::<contexts::ContextsApi>();
    }
    let routes = routes.merged(operations);

    let interface = service.spec();
    let document = extensions::document(&interface, state.config.extensions);
    let swagger_ui = service.swagger_ui_html().replace(&interface, &document);
    let redoc = service.redoc_html().replace(&interface, &document);
    let reference = Route::new()
        .at("/", core::root)
        .at("/healthz", core::healthz)
        .at("/metrics", core::metrics)
        .at("/openapi.json", core::Document(document))
        .nest(
            "/docs",
            core::Page::new(swagger_ui.clone(), service.swagger_ui()),
        )
        .nest("/_docs", core::Page::new(swagger_ui, service.swagger_ui()))
        .nest("/_docs-alt", core::Page::new(redoc, service.redoc()))
        .data(state.clone());
    let metrics = state.metrics.clone();
    let api = OpenApiService::new(ServedApis::default(), "Trove", API_VERSION).data(state);
    Shell {
        api,
        reference,
        mcp,
        routes: Arc::new(routes),
        metrics,
        connections,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    /// The OpenAPI document is an artifact: a change to it must be reviewed and accepted.
    #[test]
    fn openapi_document_is_stable() {
        let document: serde_json::Value = serde_json::from_str(&super::openapi_document()).unwrap();
        assert_eq!(document["info"]["title"], "Trove");
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
            prepend_module_to_snapshot => false,
        }, {
            insta::assert_json_snapshot!("openapi", document);
        });
    }
}
