//! Response payloads serialized with serde (so field formats such as timestamps are the
//! service's own) while still documenting their schema in the OpenAPI document.

use std::borrow::Cow;

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{
    MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry,
};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde::Serialize;

fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::builder()
            .status(status)
            .content_type("application/json")
            .body(body),
        Err(e) => crate::error::ApiError::Internal(e.to_string()).to_response(),
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

/// The list envelope: `data` (the page's objects), `page_info`, `query_info`.
#[derive(Debug, poem_openapi::Object, Serialize)]
pub struct ListEnvelope {
    /// The objects of the page.
    pub data: Vec<serde_json::Value>,
    /// Cursors or offsets of the page, `order_by`, and `count` when requested.
    pub page_info: serde_json::Value,
    /// The filters the server recognized and applied.
    pub query_info: serde_json::Value,
}

impl From<crate::service::Envelope> for ListEnvelope {
    fn from(envelope: crate::service::Envelope) -> Self {
        Self {
            data: envelope.data,
            page_info: serde_json::Value::Object(envelope.page_info),
            query_info: serde_json::Value::Object(envelope.query_info),
        }
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
