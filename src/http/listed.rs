//! The OpenAPI schema of a value chosen from a [`Listing`] (search kinds, placeholder types,
//! distance strategies, providers): a named string enum whose values are the listing's names, in its
//! order. The values are declared once, in `retrieval::kinds`; this module only names the
//! schema and describes it.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::Value;

use crate::providers::rerank::{ChatModelServers, EveryModelServer};
use crate::retrieval::kinds::{
    DistanceStrategies, Listed, Listing, Named, PlaceholderTypes, SearchTypes,
};

/// How a listing appears in the OpenAPI document.
pub trait ListingSchema: Listing {
    /// The schema's name under `components/schemas`.
    const SCHEMA: &'static str;
    /// The schema's description.
    const DESCRIPTION: &'static str;
}

impl ListingSchema for SearchTypes {
    const SCHEMA: &'static str = "SearchKind";
    const DESCRIPTION: &'static str = "Search kinds of the request's `type`.";
}

impl ListingSchema for PlaceholderTypes {
    const SCHEMA: &'static str = "PlaceholderTypeName";
    const DESCRIPTION: &'static str = "Types of placeholders.";
}

impl ListingSchema for ChatModelServers {
    const SCHEMA: &'static str = "LlmProviderName";
    const DESCRIPTION: &'static str = "Kinds of model server.";
}

impl ListingSchema for EveryModelServer {
    const SCHEMA: &'static str = "LlmProviderName";
    const DESCRIPTION: &'static str = "Kinds of model server.";
}

impl ListingSchema for DistanceStrategies {
    const SCHEMA: &'static str = "DistanceStrategy";
    const DESCRIPTION: &'static str = "How vector distances are measured (lower is closer).";
}

impl<L: ListingSchema> Type for Listed<L> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed(L::SCHEMA)
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Reference(L::SCHEMA.to_owned())
    }

    fn register(registry: &mut Registry) {
        registry.create_schema::<Self, _>(L::SCHEMA.to_owned(), |_| MetaSchema {
            description: Some(L::DESCRIPTION),
            enum_items: L::NAMES.iter().map(|name| Value::from(*name)).collect(),
            ..MetaSchema::new("string")
        });
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl<L: ListingSchema> ParseFromJSON for Listed<L> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        let value = value.unwrap_or_default();
        let item = value
            .as_str()
            .and_then(|name| L::ITEMS.iter().copied().find(|item| item.name() == name));
        match item {
            Some(item) => Ok(Self::new(item)),
            None => Err(ParseError::expected_type(value)),
        }
    }
}

impl<L: ListingSchema> ToJSON for Listed<L> {
    fn to_json(&self) -> Option<Value> {
        Some(Value::from(self.0.name()))
    }
}
