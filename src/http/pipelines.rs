//! Operations of the `Pipelines` group.

use poem_openapi::OpenApi;

use super::ApiTags;

pub struct PipelinesApi;

#[OpenApi(tag = "ApiTags::Pipelines")]
impl PipelinesApi {}
