//! Response payloads serialized with serde (so field formats such as timestamps are the
//! service's own) while still documenting their schema in the OpenAPI document.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use poem::error::ResponseError;
use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{
    MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry,
};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

use crate::service::Envelope;

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::builder()
            .status(status)
            .content_type("application/json")
            .body(body),
        Err(e) => error_response(&ApiError::Internal(e.to_string())),
    }
}

/// The response of an error: its status with the JSON error body, or plain text for the
/// interface's responses without one. Server errors are logged.
pub fn error_response(error: &ApiError) -> Response {
    let status = error.status();
    if status.is_server_error() {
        tracing::error!(%error, "request failed");
    }
    match error.json_body() {
        Some(body) => Response::builder()
            .status(status)
            .content_type("application/json")
            .body(body.to_string()),
        None => Response::builder()
            .status(status)
            .content_type("text/plain; charset=utf-8")
            .body(error.message()),
    }
}

impl ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }

    fn as_response(&self) -> Response {
        error_response(self)
    }
}

fn meta_json<T: Type>(status: u16, description: &'static str) -> MetaResponses {
    MetaResponses {
        responses: vec![MetaResponse {
            description,
            status: Some(status),
            status_range: None,
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: T::schema_ref(),
            }],
            headers: vec![],
        }],
    }
}

fn meta_empty(status: u16, description: &'static str) -> MetaResponses {
    MetaResponses {
        responses: vec![MetaResponse {
            description,
            status: Some(status),
            status_range: None,
            content: vec![],
            headers: vec![],
        }],
    }
}

/// 200 with a JSON body.
pub struct Json<T>(pub T);

impl<T: Serialize + Send> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, &self.0)
    }
}

impl<T: Serialize + Type + Send> ApiResponse for Json<T> {
    fn meta() -> MetaResponses {
        meta_json::<T>(200, "Success")
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

/// 201 with the created object.
pub struct Created<T>(pub T);

impl<T: Serialize + Send> IntoResponse for Created<T> {
    fn into_response(self) -> Response {
        json_response(StatusCode::CREATED, &self.0)
    }
}

impl<T: Serialize + Type + Send> ApiResponse for Created<T> {
    fn meta() -> MetaResponses {
        meta_json::<T>(201, "Created")
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

/// 204 without a body.
pub struct NoContent;

impl IntoResponse for NoContent {
    fn into_response(self) -> Response {
        Response::builder().status(StatusCode::NO_CONTENT).finish()
    }
}

impl ApiResponse for NoContent {
    fn meta() -> MetaResponses {
        meta_empty(204, "Deleted")
    }

    fn register(_registry: &mut Registry) {}
}

/// 200 with an empty body (actions whose result is only their status).
pub struct EmptyOk;

impl IntoResponse for EmptyOk {
    fn into_response(self) -> Response {
        Response::builder().status(StatusCode::OK).finish()
    }
}

impl ApiResponse for EmptyOk {
    fn meta() -> MetaResponses {
        meta_empty(200, "Applied")
    }

    fn register(_registry: &mut Registry) {}
}

/// 200 with a JSON body, or 204 without one (document delete with or without `expire`).
pub enum OkOrNoContent<T> {
    Ok(T),
    NoContent,
}

impl<T: Serialize + Send> IntoResponse for OkOrNoContent<T> {
    fn into_response(self) -> Response {
        match self {
            Self::Ok(value) => json_response(StatusCode::OK, &value),
            Self::NoContent => NoContent.into_response(),
        }
    }
}

impl<T: Serialize + Type + Send> ApiResponse for OkOrNoContent<T> {
    fn meta() -> MetaResponses {
        let mut meta = meta_json::<T>(200, "Expired");
        meta.responses.extend(meta_empty(204, "Deleted").responses);
        meta
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

/// Cursors (cursor mode) or `limit` and `offset` (offset mode) of a page, its `order_by`, and
/// `count` when requested.
// Schema only: the service builds `page_info` as a JSON object.
#[derive(Debug, poem_openapi::Object)]
pub struct PageInfo {
    /// Cursor mode: the opaque cursor of the page's first object; absent on an empty page.
    before: Option<String>,
    /// Cursor mode: the opaque cursor of the page's last object; absent on an empty page.
    after: Option<String>,
    /// Cursor mode: whether objects follow the page.
    has_next: Option<bool>,
    /// Cursor mode: whether objects precede the page.
    has_prev: Option<bool>,
    /// Offset mode: the page size.
    limit: Option<u64>,
    /// Offset mode: the objects skipped.
    offset: Option<u64>,
    /// The order, `-` marking descending fields; null for the default order.
    #[oai(nullable)]
    order_by: Option<Vec<String>>,
    /// The objects matching the filters, only when `count` was requested.
    count: Option<i64>,
}

/// The list envelope of objects `T`: `data` (the page's objects), `page_info`, `query_info`.
/// It is written as the service built it; its schema, `<T>List`, gives `data` the items `T`.
pub struct List<T> {
    envelope: Envelope,
    item: PhantomData<fn() -> T>,
}

impl<T> From<Envelope> for List<T> {
    fn from(envelope: Envelope) -> Self {
        Self {
            envelope,
            item: PhantomData,
        }
    }
}

impl<T> Serialize for List<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.envelope.serialize(s)
    }
}

impl<T: Type> Type for List<T> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        format!("{}List", T::name()).into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Reference(Self::name().into_owned())
    }

    fn register(registry: &mut Registry) {
        registry.create_schema::<Self, _>(Self::name().into_owned(), |registry| {
            T::register(registry);
            PageInfo::register(registry);
            let described = |schema: MetaSchemaRef, description| {
                schema.merge(MetaSchema {
                    description: Some(description),
                    ..MetaSchema::ANY
                })
            };
            MetaSchema {
                title: Some(Self::name().into_owned()),
                description: Some(
                    "The list envelope: `data` (the page's objects), `page_info`, `query_info`.",
                ),
                required: vec!["data", "page_info", "query_info"],
                properties: vec![
                    (
                        "data",
                        described(Vec::<T>::schema_ref(), "The objects of the page."),
                    ),
                    ("page_info", PageInfo::schema_ref()),
                    (
                        "query_info",
                        described(
                            BTreeMap::<String, serde_json::Value>::schema_ref(),
                            "The filters the server recognized and applied.",
                        ),
                    ),
                ],
                ..MetaSchema::new("object")
            }
        });
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

/// An optional field that serde writes as `null` when empty, documented as nullable at the top
/// of its schema. `#[oai(nullable)]` is enough for fields of inline schemas (strings, numbers);
/// for a field whose schema is a reference it would mark only the reference's siblings, so such
/// a field is `Nullable<T>`: `{"allOf": [<T>], "nullable": true}`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Nullable<T>(pub Option<T>);

impl<T> Default for Nullable<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<T: Type> Type for Nullable<T> {
    const IS_REQUIRED: bool = false;
    type RawValueType = T::RawValueType;
    type RawElementValueType = T::RawElementValueType;

    fn name() -> Cow<'static, str> {
        format!("nullable_{}", T::name()).into()
    }

    fn schema_ref() -> MetaSchemaRef {
        match T::schema_ref() {
            MetaSchemaRef::Inline(schema) => MetaSchemaRef::Inline(Box::new(MetaSchema {
                nullable: true,
                ..*schema
            })),
            reference @ MetaSchemaRef::Reference(_) => {
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    all_of: vec![reference],
                    nullable: true,
                    ..MetaSchema::ANY
                }))
            }
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        self.0.as_raw_value()
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        self.0.raw_element_iter()
    }

    fn is_none(&self) -> bool {
        self.0.is_none()
    }
}

impl<T: ParseFromJSON> ParseFromJSON for Nullable<T> {
    fn parse_from_json(value: Option<serde_json::Value>) -> ParseResult<Self> {
        Option::<T>::parse_from_json(value)
            .map(Self)
            .map_err(ParseError::propagate)
    }
}

impl<T: ToJSON> ToJSON for Nullable<T> {
    fn to_json(&self) -> Option<serde_json::Value> {
        self.0.to_json()
    }
}

/// A value the service builds as JSON (objects assembled field by field, stored definitions),
/// written as it is and documented with the schema of `S`, a type that describes it.
pub struct Described<S, T = serde_json::Value> {
    value: T,
    schema: PhantomData<fn() -> S>,
}

impl<S, T: std::fmt::Debug> std::fmt::Debug for Described<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value.fmt(f)
    }
}

impl<S, T> Described<S, T> {
    pub fn new(value: T) -> Self {
        Self {
            value,
            schema: PhantomData,
        }
    }
}

impl<S, T: Serialize> Serialize for Described<S, T> {
    fn serialize<Ser: serde::Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        self.value.serialize(s)
    }
}

impl<'de, S, T: Deserialize<'de>> Deserialize<'de> for Described<S, T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Self::new)
    }
}

impl<S: Type, T: Send + Sync> Type for Described<S, T> {
    const IS_REQUIRED: bool = S::IS_REQUIRED;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        S::name()
    }

    fn schema_ref() -> MetaSchemaRef {
        S::schema_ref()
    }

    fn register(registry: &mut Registry) {
        S::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

impl<S: Type, T: Serialize + Send + Sync> ToJSON for Described<S, T> {
    fn to_json(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.value).ok()
    }
}

impl<S: Type, T: serde::de::DeserializeOwned + Send + Sync> ParseFromJSON for Described<S, T> {
    fn parse_from_json(value: Option<serde_json::Value>) -> ParseResult<Self> {
        serde_json::from_value(value.unwrap_or_default())
            .map(Self::new)
            .map_err(|e| ParseError::custom(e.to_string()))
    }
}
