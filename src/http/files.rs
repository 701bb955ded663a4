//! Files submitted as documents (`POST /pipelines/{pipeline_id}/files`, an extension): the
//! `multipart/form-data` body, read as a stream within `TROVE_MAX_FILE_BYTES` (`multer`), and
//! the file's format, detected from its content first and its name second (`trove-extract`).

use futures_util::TryStreamExt;
use poem::{Request, RequestBody};
use poem_openapi::ApiExtractor;
use poem_openapi::ApiExtractorType;
use poem_openapi::ExtractParamOptions;
use poem_openapi::Multipart;
use poem_openapi::payload::Payload;
use poem_openapi::registry::{MetaMediaType, MetaRequest, Registry};
use poem_openapi::types::multipart::Upload;
use serde_json::Value;

use super::extract::{nul_field, state};
use crate::error::ApiError;
use crate::service::documents::{Content, NewDocument};

/// The parts of a file submission (the OpenAPI schema of the body; it is read by
/// [`FileUpload`]).
#[derive(Debug, Multipart)]
#[expect(
    dead_code,
    reason = "the OpenAPI schema of the body, which `FileUpload` reads"
)]
pub struct FileSubmission {
    /// The file: PDF, DOCX, ODT, HTML, Markdown or plain text (at most `TROVE_MAX_FILE_BYTES`
    /// for the whole body, 64 MiB by default).
    file: Upload,
    /// A declared classification, equal to earlier versions'.
    classification: String,
    /// The client's own id, 1–1024 characters; default: the file's name.
    external_identifier: Option<String>,
    /// A JSON object as text, validated against the pipeline's metadata schema; default `{}`.
    metadata: Option<String>,
    /// `true` or `false`: expire the current versions once this one is processed; default
    /// `true`.
    expire_older_versions: Option<bool>,
}

/// A file submission as read from its body.
pub struct FileUpload(pub NewDocument);

/// 400 `Invalid parameter` naming a problem of the body.
fn invalid(reason: impl Into<String>) -> ApiError {
    ApiError::InvalidParameter(reason.into())
}

fn too_large() -> ApiError {
    ApiError::Plain {
        status: http::StatusCode::PAYLOAD_TOO_LARGE,
        message: "Failed to buffer the request body: length limit exceeded".to_owned(),
    }
}

/// A multipart error: the size limit (413) or an unreadable body (400).
fn multipart_error(error: multer::Error) -> ApiError {
    match error {
        multer::Error::StreamSizeExceeded { .. } | multer::Error::FieldSizeExceeded { .. } => {
            too_large()
        }
        other => invalid(format!("unreadable multipart body: {other}")),
    }
}

/// The parts read, before they are checked.
#[derive(Default)]
struct Parts {
    file: Option<(Vec<u8>, Option<String>)>,
    classification: Option<String>,
    external_identifier: Option<String>,
    metadata: Option<String>,
    expire_older_versions: Option<String>,
}

/// A text part: UTF-8 without U+0000.
fn text_part(name: &str, bytes: &[u8]) -> Result<String, ApiError> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| invalid(format!("{name} is not valid UTF-8")))?;
    if text.contains('\0') {
        return Err(invalid(format!(
            "{name} contains the NUL character (U+0000)"
        )));
    }
    Ok(text.to_owned())
}

/// Reads the body's parts as a stream: at most `limit` bytes are read, whatever the body
/// announces.
async fn read_parts(
    request: &Request,
    body: &mut RequestBody,
    limit: u64,
) -> Result<Parts, ApiError> {
    let content_type = request.content_type().unwrap_or_default();
    let boundary = multer::parse_boundary(content_type).map_err(|_| {
        invalid(
            "unreadable multipart body: expected Content-Type multipart/form-data with a boundary",
        )
    })?;
    let announced = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let stream = body
        .take()
        .map_err(|_| ApiError::Internal("request body already read".to_owned()))?
        .into_bytes_stream()
        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
    let constraints =
        multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(limit));
    let mut multipart = multer::Multipart::with_constraints(stream, boundary, constraints);
    let mut parts = Parts::default();
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let known = matches!(
            name.as_str(),
            "file"
                | "classification"
                | "external_identifier"
                | "metadata"
                | "expire_older_versions"
        );
        let mut bytes = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            // Unknown parts are read through and dropped.
            if known {
                bytes.extend_from_slice(&chunk);
            }
        }
        let twice = || invalid(format!("{name} is given more than once"));
        match name.as_str() {
            "file" => {
                if parts.file.is_some() {
                    return Err(twice());
                }
                parts.file = Some((bytes, file_name));
            }
            "classification" | "external_identifier" | "metadata" | "expire_older_versions" => {
                let text = text_part(&name, &bytes)?;
                let slot = match name.as_str() {
                    "classification" => &mut parts.classification,
                    "external_identifier" => &mut parts.external_identifier,
                    "metadata" => &mut parts.metadata,
                    _ => &mut parts.expire_older_versions,
                };
                if slot.is_some() {
                    return Err(twice());
                }
                *slot = Some(text);
            }
            _ => {}
        }
    }
    Ok(parts)
}

/// Checks the parts and detects the file's format: a missing part or an unreadable value is
/// 400 `Invalid parameter`, a file Trove cannot read 415.
fn submission(parts: Parts) -> Result<NewDocument, ApiError> {
    let (bytes, file_name) = parts.file.ok_or_else(|| invalid("file is required"))?;
    let classification = parts
        .classification
        .ok_or_else(|| invalid("classification is required"))?;
    let expire_older_versions = match parts.expire_older_versions.as_deref().map(str::trim) {
        None => true,
        Some("true") => true,
        Some("false") => false,
        Some(_) => return Err(invalid("expire_older_versions must be true or false")),
    };
    let metadata = match parts.metadata {
        None => Value::Object(serde_json::Map::new()),
        Some(text) => {
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| invalid(format!("metadata is not valid JSON: {e}")))?;
            if let Some(path) = nul_field(text.as_bytes()) {
                return Err(invalid(format!(
                    "metadata.{path} contains the NUL character (U+0000)"
                )));
            }
            value
        }
    };
    let file_name = file_name.unwrap_or_default();
    if parts.external_identifier.is_none() && file_name.contains('\0') {
        return Err(invalid(
            "the file's name contains the NUL character (U+0000)",
        ));
    }
    let format = trove_extract::detect(&bytes, &file_name)
        .map_err(|unsupported| ApiError::UnsupportedFileType(unsupported.detected))?;
    Ok(NewDocument {
        external_identifier: parts.external_identifier.unwrap_or(file_name),
        classification,
        metadata,
        content: Content::File { bytes, format },
        text_splitter_id: None,
        expire_older_versions,
    })
}

impl<'a> ApiExtractor<'a> for FileUpload {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <FileSubmission as Payload>::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: None,
            content: vec![MetaMediaType {
                content_type: "multipart/form-data",
                schema: <FileSubmission as Payload>::schema_ref(),
            }],
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let limit = state(request)?.config.max_file_bytes;
        let parts = read_parts(request, body, limit).await?;
        Ok(FileUpload(submission(parts)?))
    }
}
