//! Provider names and parameters: parsing, validation, defaults.

use serde_json::{Map, Value, json};

/// The text splitter provider names, in seeding order (ADDENDUM §2.3).
pub const PROVIDERS: [&str; 3] = ["recursive-character", "character", "token"];

/// Default `separators` of `recursive-character`.
pub const DEFAULT_SEPARATORS: [&str; 4] = ["\n\n", "\n", " ", ""];
/// Default `separator` of `character`.
pub const DEFAULT_SEPARATOR: &str = "\n\n";
/// Default `chunk_size` of `recursive-character` and `character` (characters).
pub const DEFAULT_CHUNK_SIZE: usize = 1000;
/// Default `chunk_overlap` of `recursive-character` and `character` (characters).
pub const DEFAULT_CHUNK_OVERLAP: usize = 200;
/// Default `chunk_size` of `token` (tokens).
pub const DEFAULT_TOKEN_CHUNK_SIZE: usize = 256;
/// Default `chunk_overlap` of `token` (tokens).
pub const DEFAULT_TOKEN_CHUNK_OVERLAP: usize = 32;

/// A text splitter provider with all of its parameters (defaults filled, validated).
///
/// Build it with [`SplitterConfig::from_parameters`] (which validates); a value built by hand
/// should respect the same rules (`chunk_size ≥ 1`, `chunk_overlap < chunk_size`, at least one
/// separator): the splitters never panic on one that does not, but their output is then
/// unspecified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitterConfig {
    /// `recursive-character`: LangChain's `RecursiveCharacterTextSplitter`; sizes in chars.
    RecursiveCharacter {
        separators: Vec<String>,
        chunk_size: usize,
        chunk_overlap: usize,
    },
    /// `character`: LangChain's `CharacterTextSplitter`; sizes in chars.
    Character {
        separator: String,
        chunk_size: usize,
        chunk_overlap: usize,
    },
    /// `token`: windows of `chunk_size` tokens stepping `chunk_size − chunk_overlap`.
    Token {
        chunk_size: usize,
        chunk_overlap: usize,
        tokenizer: TokenizerKind,
    },
}

/// The `tokenizer` parameter of the `token` provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TokenizerKind {
    /// `whitespace`: a token is a maximal run of grapheme clusters that are not whitespace.
    #[default]
    Whitespace,
    /// `embedding-model`: the tokenizer of the pipeline's `local` embedding model, given by the
    /// caller to [`split_with_tokenizer`](super::split_with_tokenizer); whitespace otherwise.
    EmbeddingModel,
}

impl TokenizerKind {
    /// The parameter value: `whitespace` or `embedding-model`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenizerKind::Whitespace => "whitespace",
            TokenizerKind::EmbeddingModel => "embedding-model",
        }
    }

    /// Parses a parameter value (exact, case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "whitespace" => Some(TokenizerKind::Whitespace),
            "embedding-model" => Some(TokenizerKind::EmbeddingModel),
            _ => None,
        }
    }
}

/// Why a provider name and parameters were refused. `Display` gives the service's
/// `details.error` text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitterConfigError {
    /// Unknown provider name (the name as given).
    #[error("Text splitter provider not found: {0}")]
    ProviderNotFound(String),
    /// A bad parameter value; the reason is short and lowercase.
    #[error("Invalid text splitter parameters: {0}")]
    InvalidParameters(String),
}

fn invalid(reason: &str) -> SplitterConfigError {
    SplitterConfigError::InvalidParameters(reason.to_owned())
}

/// A parameter's value; JSON `null` counts as absent (the default applies).
fn param<'a>(parameters: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    parameters.get(key).filter(|value| !value.is_null())
}

fn integer(value: &Value) -> Option<usize> {
    value.as_u64().and_then(|n| usize::try_from(n).ok())
}

/// `chunk_size` and `chunk_overlap` with their defaults, validated.
fn sizes(
    parameters: &Map<String, Value>,
    default_size: usize,
    default_overlap: usize,
) -> Result<(usize, usize), SplitterConfigError> {
    let chunk_size = match param(parameters, "chunk_size") {
        None => default_size,
        Some(value) => integer(value)
            .filter(|&n| n >= 1)
            .ok_or_else(|| invalid("chunk_size must be a positive integer"))?,
    };
    let chunk_overlap = match param(parameters, "chunk_overlap") {
        None => default_overlap,
        Some(value) => {
            integer(value).ok_or_else(|| invalid("chunk_overlap must be a non-negative integer"))?
        }
    };
    if chunk_overlap >= chunk_size {
        return Err(invalid("chunk_overlap must be smaller than chunk_size"));
    }
    Ok((chunk_size, chunk_overlap))
}

impl SplitterConfig {
    /// Parses a provider name and its `parameters` object.
    ///
    /// Unknown keys are ignored, absent keys (and keys set to `null`) take their default,
    /// `parameters` itself may be `null` (same as `{}`). Sizes must be JSON integers (`10.0` is
    /// refused). Validation happens after defaults are filled, so `{"chunk_size": 100}` alone
    /// is refused by `recursive-character` and `character` (default overlap 200 ≥ 100), as in
    /// LangChain.
    ///
    /// Errors: [`SplitterConfigError::ProviderNotFound`] for a name not in [`PROVIDERS`];
    /// [`SplitterConfigError::InvalidParameters`] for a non-object `parameters` or a bad value.
    pub fn from_parameters(
        provider: &str,
        parameters: &Value,
    ) -> Result<Self, SplitterConfigError> {
        if !PROVIDERS.contains(&provider) {
            return Err(SplitterConfigError::ProviderNotFound(provider.to_owned()));
        }
        let empty = Map::new();
        let parameters = match parameters {
            Value::Null => &empty,
            Value::Object(map) => map,
            _ => return Err(invalid("parameters must be an object")),
        };
        match provider {
            "recursive-character" => {
                let separators = match param(parameters, "separators") {
                    None => DEFAULT_SEPARATORS.iter().map(|s| (*s).to_owned()).collect(),
                    Some(Value::Array(items)) if !items.is_empty() => items
                        .iter()
                        .map(|item| item.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| invalid("separators must be a non-empty list of strings"))?,
                    Some(_) => {
                        return Err(invalid("separators must be a non-empty list of strings"));
                    }
                };
                let (chunk_size, chunk_overlap) =
                    sizes(parameters, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)?;
                Ok(SplitterConfig::RecursiveCharacter {
                    separators,
                    chunk_size,
                    chunk_overlap,
                })
            }
            "character" => {
                let separator = match param(parameters, "separator") {
                    None => DEFAULT_SEPARATOR.to_owned(),
                    Some(Value::String(separator)) => separator.clone(),
                    Some(_) => return Err(invalid("separator must be a string")),
                };
                let (chunk_size, chunk_overlap) =
                    sizes(parameters, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)?;
                Ok(SplitterConfig::Character {
                    separator,
                    chunk_size,
                    chunk_overlap,
                })
            }
            _ => {
                let tokenizer = match param(parameters, "tokenizer") {
                    None => TokenizerKind::Whitespace,
                    Some(value) => value
                        .as_str()
                        .and_then(TokenizerKind::from_name)
                        .ok_or_else(|| {
                            invalid("tokenizer must be one of whitespace, embedding-model")
                        })?,
                };
                let (chunk_size, chunk_overlap) = sizes(
                    parameters,
                    DEFAULT_TOKEN_CHUNK_SIZE,
                    DEFAULT_TOKEN_CHUNK_OVERLAP,
                )?;
                Ok(SplitterConfig::Token {
                    chunk_size,
                    chunk_overlap,
                    tokenizer,
                })
            }
        }
    }

    /// The parameters with defaults filled, as stored and returned by the API: exactly the
    /// provider's keys (`separators`/`separator`/`tokenizer`, `chunk_size`, `chunk_overlap`).
    /// `from_parameters(provider(), &to_parameters())` gives back the same configuration.
    pub fn to_parameters(&self) -> Value {
        match self {
            SplitterConfig::RecursiveCharacter {
                separators,
                chunk_size,
                chunk_overlap,
            } => json!({
                "separators": separators,
                "chunk_size": chunk_size,
                "chunk_overlap": chunk_overlap,
            }),
            SplitterConfig::Character {
                separator,
                chunk_size,
                chunk_overlap,
            } => json!({
                "separator": separator,
                "chunk_size": chunk_size,
                "chunk_overlap": chunk_overlap,
            }),
            SplitterConfig::Token {
                chunk_size,
                chunk_overlap,
                tokenizer,
            } => json!({
                "chunk_size": chunk_size,
                "chunk_overlap": chunk_overlap,
                "tokenizer": tokenizer.as_str(),
            }),
        }
    }

    /// The provider name: `recursive-character`, `character` or `token`.
    pub fn provider(&self) -> &'static str {
        match self {
            SplitterConfig::RecursiveCharacter { .. } => "recursive-character",
            SplitterConfig::Character { .. } => "character",
            SplitterConfig::Token { .. } => "token",
        }
    }

    /// The provider's configuration with every parameter at its default (the seeded text
    /// splitters of ADDENDUM §2.3); `None` for an unknown provider.
    pub fn default_for(provider: &str) -> Option<Self> {
        SplitterConfig::from_parameters(provider, &Value::Null).ok()
    }

    pub(crate) fn chunk_sizes(&self) -> (usize, usize) {
        match self {
            SplitterConfig::RecursiveCharacter {
                chunk_size,
                chunk_overlap,
                ..
            }
            | SplitterConfig::Character {
                chunk_size,
                chunk_overlap,
                ..
            }
            | SplitterConfig::Token {
                chunk_size,
                chunk_overlap,
                ..
            } => (*chunk_size, *chunk_overlap),
        }
    }
}
