//! Operations of the `Search` group.

use poem_openapi::OpenApi;

#[allow(unused_imports, reason = "used once operations are added")]
use super::ApiTags;

pub struct SearchApi;

#[OpenApi(tag = "ApiTags::Search")]
impl SearchApi {}
