//! Request extractors that reproduce the interface's exact rejections.
//!
//! poem-openapi extracts an operation's arguments in declaration order, so handlers take
//! [`Auth`] first (authentication before path, query and body), then [`PathId`]s, then headers,
//! then the query string, then the body ([`JsonBody`]).

use std::marker::PhantomData;

use poem::http::StatusCode;
use poem::{Request, RequestBody};
use poem_openapi::registry::{
    MetaMediaType, MetaParamIn, MetaRequest, MetaSchemaRef, MetaSecurityScheme, Registry,
};
use poem_openapi::types::Type;
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::auth::AuthContext;
use crate::auth::key_check::authenticate;
use crate::config::Extensions;
use crate::error::ApiError;
use crate::state::AppState;

/// Largest REST request body (interface: 2 megabytes).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The shared state, put in every request by the router.
pub fn state(request: &Request) -> Result<&AppState, ApiError> {
    request
        .data::<AppState>()
        .ok_or_else(|| ApiError::Internal("application state missing".to_owned()))
}

/// The authenticated key of the request.
pub struct Auth(pub AuthContext);

impl<'a> ApiExtractor<'a> for Auth {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        registry.create_security_scheme(
            "ApiKey",
            MetaSecurityScheme {
                ty: "apiKey",
                description: Some("Key id (UUID); sent together with `x-api-key-secret`."),
                name: Some("x-api-key"),
                key_in: Some("header"),
                scheme: None,
                bearer_format: None,
                flows: None,
                openid_connect_url: None,
            },
        );
        registry.create_security_scheme(
            "ApiKeySecret",
            MetaSecurityScheme {
                ty: "apiKey",
                description: Some("The key's 48-character secret."),
                name: Some("x-api-key-secret"),
                key_in: Some("header"),
                scheme: None,
                bearer_format: None,
                flows: None,
                openid_connect_url: None,
            },
        );
    }

    fn security_schemes() -> Vec<&'static str> {
        vec!["ApiKey", "ApiKeySecret"]
    }

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let state = state(request)?;
        Ok(Auth(
            authenticate(
                &state.pool,
                request.headers(),
                &state.metrics.key_check_unavailable,
            )
            .await?,
        ))
    }
}

/// A UUID path parameter. Handlers name its type `extract::Path`: poem-openapi registers
/// routes with positional parameters (`:param0`, …) for argument types named `Path`, and this
/// alias keeps that numbering consistent with its own `Path<T>`.
pub struct PathId(pub Uuid);

/// The name handlers use for [`PathId`] (see there).
pub type Path = PathId;

/// The real names of the matched route's parameters, in order (set by the shell), so that
/// messages can name `api_key_id` rather than the router's positional `param0`.
#[derive(Debug, Clone, Default)]
pub struct RouteParams(pub Vec<String>);

/// The display name of a positional parameter.
fn param_display_name(request: &Request, positional: &str) -> String {
    let index = positional
        .strip_prefix("param")
        .and_then(|n| n.parse::<usize>().ok());
    match (index, request.data::<RouteParams>()) {
        (Some(i), Some(names)) => names
            .0
            .get(i)
            .cloned()
            .unwrap_or_else(|| positional.to_owned()),
        _ => positional.to_owned(),
    }
}

impl<'a> ApiExtractor<'a> for PathId {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::Parameter];
    const PARAM_IS_REQUIRED: bool = true;
    type ParamType = Uuid;
    type ParamRawType = Uuid;

    fn register(registry: &mut Registry) {
        Uuid::register(registry);
    }

    fn param_in() -> Option<MetaParamIn> {
        Some(MetaParamIn::Path)
    }

    fn param_schema_ref() -> Option<MetaSchemaRef> {
        Some(Uuid::schema_ref())
    }

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        opts: ExtractParamOptions<Uuid>,
    ) -> poem::Result<Self> {
        let raw = request.raw_path_param(opts.name).unwrap_or_default();
        let value = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
        match Uuid::parse_str(&value) {
            Ok(id) => Ok(PathId(id)),
            Err(e) => Err(ApiError::Plain {
                status: StatusCode::BAD_REQUEST,
                message: format!(
                    "Invalid URL: Cannot parse `{}` with value `{value}`: UUID parsing failed: {e}",
                    param_display_name(request, opts.name)
                ),
            }
            .into()),
        }
    }
}

/// A JSON request body parsed with serde, so that rejections carry serde's reasons with line
/// and column: 415 without a JSON content type, 413 over 2 MB, 400 for invalid JSON, 422 for a
/// body of the wrong shape. A body whose strings are stored (`K` = [`Stored`], the default)
/// is refused with 400 `Invalid parameter` when a string or key holds U+0000, which Postgres
/// text and JSON columns cannot hold; a body forwarded to a model server
/// ([`ForwardedBody`]) keeps them.
pub struct JsonBody<T, K = Stored>(pub T, PhantomData<K>);

/// Bodies whose strings are stored in text or JSON columns (or used as SQL text values).
pub struct Stored;

/// Bodies forwarded to a model server, where any text is content.
pub struct Forwarded;

/// A body forwarded to a model server (see [`JsonBody`]).
pub type ForwardedBody<T> = JsonBody<T, Forwarded>;

/// Whether a body kind refuses U+0000.
pub trait BodyKind: Send {
    const REFUSES_NUL: bool;
}

impl BodyKind for Stored {
    const REFUSES_NUL: bool = true;
}

impl BodyKind for Forwarded {
    const REFUSES_NUL: bool = false;
}

/// The path of the first string or key of a JSON body that holds U+0000 (`name`,
/// `metadata.title`, `prompt.1.template`), outside a top-level `filters`, which is not stored
/// (the filter language compares such a value as one no document holds). Only bodies that
/// spell the escape are parsed again.
pub(crate) fn nul_field(bytes: &[u8]) -> Option<String> {
    if !bytes.windows(6).any(|w| w == b"\\u0000") {
        return None;
    }
    // A body with a filter nested deeper than a JSON value may be is read again with its
    // top-level `filters` skipped (without recursion), which the walk skips anyway.
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(_) => serde_json::from_slice::<WithoutFilters>(bytes).ok()?.0,
    };
    let mut pending: Vec<(String, &serde_json::Value)> = vec![(String::new(), &value)];
    while let Some((path, value)) = pending.pop() {
        let child = |key: &str| {
            if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            }
        };
        match value {
            serde_json::Value::String(text) if text.contains('\0') => return Some(path),
            serde_json::Value::Object(map) => {
                for (key, item) in map.iter().rev() {
                    if path.is_empty() && key == "filters" {
                        continue;
                    }
                    if key.contains('\0') {
                        return Some(child(key));
                    }
                    pending.push((child(key), item));
                }
            }
            serde_json::Value::Array(items) => {
                for (index, item) in items.iter().enumerate().rev() {
                    pending.push((child(&index.to_string()), item));
                }
            }
            _ => {}
        }
    }
    None
}

/// A JSON object with its `filters` member skipped (kept as null).
struct WithoutFilters(serde_json::Value);

impl<'de> serde::Deserialize<'de> for WithoutFilters {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = WithoutFilters;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<WithoutFilters, A::Error> {
                let mut members = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value = if key == "filters" {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        serde_json::Value::Null
                    } else {
                        map.next_value()?
                    };
                    members.insert(key, value);
                }
                Ok(WithoutFilters(serde_json::Value::Object(members)))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// Whether a content type is JSON (`application/json` or `application/*+json`).
pub fn is_json_content_type(content_type: &str) -> bool {
    content_type.parse::<mime::Mime>().is_ok_and(|m| {
        m.type_() == "application"
            && (m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json"))
    })
}

thread_local! {
    static PARSING_WITH: std::cell::Cell<Extensions> = const {
        std::cell::Cell::new(Extensions::NONE)
    };
}

/// The extensions of the deployment whose request body this thread is parsing (see
/// [`read_json`]): a field whose accepted values an extension widens reads it.
pub fn parsing_extensions() -> Extensions {
    PARSING_WITH.get()
}

/// Runs `parse` (synchronous: a body's deserialization) with [`parsing_extensions`] saying
/// `extensions`.
fn parsing_with<T>(extensions: Extensions, parse: impl FnOnce() -> T) -> T {
    PARSING_WITH.set(extensions);
    let value = parse();
    PARSING_WITH.set(Extensions::NONE);
    value
}

/// Reads a JSON body under the REST limits and parses it, without the JSON reader's
/// recursion limit when `unbounded` (bodies holding filters, see [`FilterBody`]).
pub async fn read_json<T: DeserializeOwned>(
    request: &Request,
    body: &mut RequestBody,
    refuse_nul: bool,
    unbounded: bool,
) -> Result<T, ApiError> {
    if !request.content_type().is_some_and(is_json_content_type) {
        return Err(ApiError::Plain {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "Expected request with Content-Type: application/json".to_owned(),
        });
    }
    let too_large = || ApiError::Plain {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: "Failed to buffer the request body: length limit exceeded".to_owned(),
    };
    let body = body
        .take()
        .map_err(|_| ApiError::Internal("request body already read".to_owned()))?;
    let bytes = body
        .into_bytes_limit(MAX_BODY_BYTES)
        .await
        .map_err(|e| match e {
            poem::error::ReadBodyError::PayloadTooLarge => too_large(),
            other => ApiError::Plain {
                status: StatusCode::BAD_REQUEST,
                message: format!("Failed to buffer the request body: {other}"),
            },
        })?;
    let extensions = state(request).map_or(Extensions::NONE, |s| s.config.extensions);
    let value = parsing_with(extensions, || {
        if unbounded {
            parse_json_unbounded(&bytes)
        } else {
            parse_json(&bytes)
        }
    })?;
    if refuse_nul && let Some(field) = nul_field(&bytes) {
        return Err(ApiError::InvalidParameter(format!(
            "{field} contains the NUL character (U+0000)"
        )));
    }
    Ok(value)
}

/// Parses JSON bytes into `T` with the interface's two rejections.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(body_error)
}

/// [`parse_json`] without the JSON reader's limit of 128 nested arrays and objects, for
/// bodies whose only deeply nested parts are metadata filters: filters nest to any depth
/// (interface: no limit except the body size), their parser grows the stack as it goes down,
/// and a filter is dropped without recursion. Anything else such a body holds is either flat
/// or skipped without recursion (unknown fields, raw values).
pub fn parse_json_unbounded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer).map_err(body_error)?;
    deserializer.end().map_err(body_error)?;
    Ok(value)
}

/// A JSON error as the interface's 422 (wrong shape) or 400 (not JSON).
fn body_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::Plain {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!("Failed to deserialize the JSON body into the target type: {e}"),
        },
        Category::Syntax | Category::Eof | Category::Io => ApiError::Plain {
            status: StatusCode::BAD_REQUEST,
            message: format!("Failed to parse the request body as JSON: {e}"),
        },
    }
}

impl<'a, T: DeserializeOwned + Type + Send, K: BodyKind> ApiExtractor<'a> for JsonBody<T, K> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: None,
            content: vec![MetaMediaType {
                content_type: "application/json",
                schema: T::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let value = read_json(request, body, K::REFUSES_NUL, false).await?;
        Ok(JsonBody(value, PhantomData))
    }
}

/// A JSON body that may hold metadata filters (search, agent dry runs and executions): as
/// [`JsonBody`], parsed with [`parse_json_unbounded`], since filters nest to any depth.
pub struct FilterBody<T, K = Stored>(pub T, PhantomData<K>);

impl<'a, T: DeserializeOwned + Type + Send, K: BodyKind> ApiExtractor<'a> for FilterBody<T, K> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        <JsonBody<T, K> as ApiExtractor<'a>>::request_meta()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let value = read_json(request, body, K::REFUSES_NUL, true).await?;
        Ok(FilterBody(value, PhantomData))
    }
}

/// A body field whose type comes from a crate without OpenAPI support (the filter language,
/// classification forms): deserialized with serde, documented as free-form JSON.
#[derive(Debug, Clone)]
pub struct Opaque<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Opaque<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Opaque)
    }
}

impl<T: Send + Sync> Type for Opaque<T> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> std::borrow::Cow<'static, str> {
        "object".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(poem_openapi::registry::MetaSchema::ANY))
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

impl<T: DeserializeOwned + Send + Sync> poem_openapi::types::ParseFromJSON for Opaque<T> {
    fn parse_from_json(value: Option<serde_json::Value>) -> poem_openapi::types::ParseResult<Self> {
        let value = value.unwrap_or_default();
        serde_json::from_value(value)
            .map(Opaque)
            .map_err(poem_openapi::types::ParseError::custom)
    }
}

impl<T: Send + Sync> poem_openapi::types::ToJSON for Opaque<T> {
    /// Request-only values are never written back.
    fn to_json(&self) -> Option<serde_json::Value> {
        None
    }
}

/// A header the operation requires, as text: missing is 400 ``Header of type `<name>` was
/// missing``, a value with characters other than visible ASCII (and space) 400
/// `invalid HTTP header (<name>)`, both plain text.
pub fn required_header<'r>(request: &'r Request, name: &str) -> Result<&'r str, ApiError> {
    let value = request.headers().get(name).ok_or_else(|| ApiError::Plain {
        status: StatusCode::BAD_REQUEST,
        message: format!("Header of type `{name}` was missing"),
    })?;
    value
        .to_str()
        .ok()
        .filter(|text| text.bytes().all(|b| (0x20..=0x7e).contains(&b)))
        .ok_or_else(|| ApiError::Plain {
            status: StatusCode::BAD_REQUEST,
            message: format!("invalid HTTP header ({name})"),
        })
}

/// The decoded `(name, value)` pairs of a query string, in order
/// (`application/x-www-form-urlencoded`: `+` is a space, invalid UTF-8 replaced).
pub fn form_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

impl<T> From<poem_openapi::types::MaybeUndefined<T>> for crate::service::Change<T> {
    fn from(field: poem_openapi::types::MaybeUndefined<T>) -> Self {
        use poem_openapi::types::MaybeUndefined;
        match field {
            MaybeUndefined::Undefined => Self::Omitted,
            MaybeUndefined::Null => Self::Null,
            MaybeUndefined::Value(value) => Self::Value(value),
        }
    }
}
