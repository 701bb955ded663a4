//! Operations of the `TextSplitters` group.

use poem_openapi::OpenApi;

use super::ApiTags;

pub struct TextSplittersApi;

#[OpenApi(tag = "ApiTags::TextSplitters")]
impl TextSplittersApi {}
