//! The MCP server handler: what `initialize`, `tools/list`, `tools/call` and the other
//! methods answer. Transport, sessions and protocol revisions are rmcp's.

use poem::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    InitializeResult, ListPromptsResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::tools;
use crate::auth::AuthContext;
use crate::state::AppState;

/// The fixed `instructions` of `initialize`.
pub const INSTRUCTIONS: &str = "Trove knowledge retrieval. Tools: `get_pipelines` lists the \
pipelines you can read (filter by name with `query`, page with `limit` and `offset`); \
`get_pipeline_classifications` lists a pipeline's classifications and their inheritance \
hierarchy; `search_knowledge` searches a pipeline's document fragments by similarity, maximal \
marginal relevance (`mmr`) or full text (`search`) for the classifications you name. All tools \
are read-only.";

/// One handler per session (or per stateless request), sharing the application state.
#[derive(Clone)]
pub struct TroveMcp {
    state: AppState,
}

impl TroveMcp {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// The key the transport authenticated for this HTTP request.
fn auth_of(context: &RequestContext<RoleServer>) -> Result<AuthContext, ErrorData> {
    context
        .extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<AuthContext>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("request is not authenticated", None))
}

impl ServerHandler for TroveMcp {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::definitions(
            self.state.config.extensions,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let auth = auth_of(&context)?;
        tools::call(&self.state, &auth, &request.name, request.arguments)
            .await
            .map(CallToolResponse::from)
    }

    /// No resources are declared; the list is empty.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::default())
    }

    /// No prompts are declared; the list is empty.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::default())
    }

    /// No completions are declared; the list of values is empty.
    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Ok(CompleteResult::default())
    }
}
