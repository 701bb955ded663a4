//! Operations of the `Taxonomies` group.

use poem_openapi::OpenApi;

#[allow(unused_imports, reason = "used once operations are added")]
use super::ApiTags;

pub struct TaxonomiesApi;

#[OpenApi(tag = "ApiTags::Taxonomies")]
impl TaxonomiesApi {}
