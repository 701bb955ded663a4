//! Operations of the `Documents` group.

use poem_openapi::OpenApi;

use super::ApiTags;

pub struct DocumentsApi;

#[OpenApi(tag = "ApiTags::Documents")]
impl DocumentsApi {}
