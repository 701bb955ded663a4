//! Agent definitions: the prompt messages and placeholders of an agent, the checks an agent
//! must pass to be stored, and the checks and rendering of an execution.
//!
//! A definition is validated as a whole (at create, and after a PATCH is merged) by
//! [`AgentDefinition::validate`], which reports the first failing rule in a fixed order so that
//! the same definition always yields the same error:
//!
//! 1. the name has 1–255 characters;
//! 2. no placeholder is of a type that is not implemented (`hybrid` without the extension
//!    `hybrid`, `history` without the extension `conversations`);
//! 3. the prompt has a `system` and a `user` message and ends with a `user` message;
//! 4. placeholder names are unique identifiers of at most 64 characters, every template
//!    reference names a placeholder, and every retrieval placeholder targets a `query`
//!    placeholder;
//! 5. every retrieval placeholder has usable parameters (`k` ≥ 1, `fetch_k` ≥ `k`,
//!    `lambda_mult` within 0..=1), and there is at most one `history` placeholder, whose `k`
//!    is within 1..=1,000.
//!
//! Messages count for rules 3 and 4 whether or not they are `include`d: an excluded message is
//! still stored and may be included by a later update.
//!
//! At execution, [`AgentDefinition::check_execution_variables`] checks the client's variables
//! and [`AgentDefinition::render_messages`] produces what is sent to the model. Nothing here
//! does IO; retrieval results reach rendering as already-joined text.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::template::{Template, Unfilled};
use crate::config::{Extension, Extensions};
use crate::metadata_schema::is_identifier;
use crate::names::MAX_NAME_CHARS;
pub use crate::retrieval::kinds::SearchKind;
use crate::retrieval::kinds::{
    DEFAULT_LAMBDA_MULT, EffectiveParams, FusionParams, Listed, MAX_RERANK_CANDIDATES,
    PlaceholderTypes, SearchParams,
};

/// The most characters a placeholder name may have.
pub const MAX_PLACEHOLDER_NAME_CHARS: usize = 64;

/// How many of a context's most recent messages a `history` placeholder holds when its
/// `params` do not say.
pub const DEFAULT_HISTORY_K: u32 = 10;

/// The most messages a `history` placeholder may hold.
pub const MAX_HISTORY_K: u32 = 1_000;

/// The author of a prompt message, as the chat model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The end user's turn; a prompt always ends with one.
    User,
    /// A previous answer of the model, given as an example or context.
    Assistant,
}

impl Role {
    /// The role's name on the wire: `system`, `user` or `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One message of an agent's prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The message text, with placeholder references (see [`super::template`]).
    pub template: String,
    /// Whether the message is sent to the model (and traced). An excluded message is still
    /// stored, validated and returned. Defaults to true when absent.
    #[serde(default = "include_by_default")]
    pub include: bool,
}

/// Messages are sent unless the client says otherwise.
fn include_by_default() -> bool {
    true
}

/// The search parameters of a retrieval placeholder, with the meaning they have in search.
///
/// Deserializing an object follows the interface's rule for a `params` object that is
/// present: omitted `k` and `fetch_k` are 0 (and so fail validation), `lambda_mult` is 0.5,
/// `threshold` and `embedding` are null. When `params` is absent or null altogether, the
/// defaults of the placeholder's type apply instead ([`RetrievalParams::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetrievalParams {
    /// How many fragments the placeholder receives.
    #[serde(default)]
    pub k: u32,
    /// How many candidates MMR chooses the `k` fragments from.
    #[serde(default)]
    pub fetch_k: u32,
    /// MMR's balance between relevance (1) and diversity (0).
    #[serde(default = "default_lambda_mult")]
    pub lambda_mult: f64,
    /// The least score a fragment needs, if any.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// The vector embedding (or embedding model) to search, when not the pipeline's default.
    #[serde(default)]
    pub embedding: Option<Uuid>,
    /// How a `hybrid` placeholder fuses its lists (`None` for the other types).
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<Fusion>,
    /// The reranker of a `similarity` or `hybrid` placeholder, if any (extension `hybrid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<Uuid>,
    /// How many of the first results its reranker sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_candidates: Option<u16>,
}

/// [`FusionParams`] as stored and shown with a `hybrid` placeholder's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fusion {
    pub rrf_k: f64,
    pub similarity_weight: f64,
    pub full_text_weight: f64,
}

/// `lambda_mult` when a `params` object omits it.
fn default_lambda_mult() -> f64 {
    DEFAULT_LAMBDA_MULT
}

impl Default for RetrievalParams {
    /// The parameters of a similarity, MMR or full-text placeholder created without `params`
    /// (or with null): `k` 5, `fetch_k` 10, `lambda_mult` 0.5, no threshold, the pipeline's
    /// embedding.
    fn default() -> Self {
        Self::of(SearchKind::Similarity, None)
    }
}

impl RetrievalParams {
    /// The parameters of a similarity, MMR or full-text placeholder whose `params` object is
    /// present, from its fields as given (see [`Self::of`]).
    pub fn from_partial(
        k: Option<u16>,
        fetch_k: Option<u16>,
        lambda_mult: Option<f64>,
        threshold: Option<f64>,
        embedding: Option<Uuid>,
    ) -> Self {
        let sent = SearchParams {
            k,
            fetch_k,
            lambda_mult,
            threshold,
            embedding,
            ..SearchParams::default()
        };
        Self::of(SearchKind::Similarity, Some(&sent))
    }

    /// The parameters of a placeholder of `kind` whose `params` is `sent` (`None`: omitted or
    /// null), as a search of that kind takes them: when the object is present, omitted `k` and
    /// `fetch_k` are 0 and an omitted `lambda_mult` is 0.5; a `hybrid` placeholder's omitted
    /// `fetch_k` and fusion parameters take their defaults.
    pub fn of(kind: SearchKind, sent: Option<&SearchParams>) -> Self {
        let effective = EffectiveParams::from_request(kind, sent);
        let fusion = effective.fusion;
        Self {
            k: u32::from(effective.k),
            fetch_k: u32::from(effective.fetch_k),
            lambda_mult: effective.lambda_mult,
            threshold: effective.threshold,
            embedding: effective.embedding,
            fusion: (kind == SearchKind::Hybrid).then_some(Fusion {
                rrf_k: fusion.rrf_k,
                similarity_weight: fusion.similarity_weight,
                full_text_weight: fusion.full_text_weight,
            }),
            rerank: effective.rerank.map(|r| r.llm),
            rerank_candidates: effective.rerank.map(|r| r.candidates),
        }
    }

    /// The parameters as a search request names them.
    pub fn as_request(&self) -> SearchParams {
        let narrow = |value: u32| Some(u16::try_from(value).unwrap_or(u16::MAX));
        SearchParams {
            k: narrow(self.k),
            fetch_k: narrow(self.fetch_k),
            lambda_mult: Some(self.lambda_mult),
            threshold: self.threshold,
            embedding: self.embedding,
            rrf_k: self.fusion.map(|f| f.rrf_k),
            similarity_weight: self.fusion.map(|f| f.similarity_weight),
            full_text_weight: self.fusion.map(|f| f.full_text_weight),
            rerank: self.rerank,
            rerank_candidates: self.rerank_candidates,
        }
    }

    /// Whether the parameters can drive a search: at least one fragment, at least as many
    /// candidates as fragments, `lambda_mult` within 0..=1 (NaN is outside), fusion
    /// parameters, if any, that [`FusionParams::is_valid`] accepts, and 1 to 1,000 rerank
    /// candidates.
    pub fn is_valid(&self) -> bool {
        self.rerank_candidates
            .is_none_or(|c| (1..=MAX_RERANK_CANDIDATES).contains(&c))
            && self.k >= 1
            && self.fetch_k >= self.k
            && (0.0..=1.0).contains(&self.lambda_mult)
            && self.fusion.is_none_or(|f| {
                FusionParams {
                    rrf_k: f.rrf_k,
                    similarity_weight: f.similarity_weight,
                    full_text_weight: f.full_text_weight,
                }
                .is_valid()
            })
    }
}

/// A named placeholder of an agent.
///
/// Built through [`Placeholder::new`] (deserialization uses it too), a placeholder is
/// normalised: a `query` placeholder has neither target nor params, a retrieval placeholder
/// always has params, and a `history` placeholder has no target and params holding only `k`
/// (stored and shown as `{"k": n}`). A `hybrid` placeholder keeps what it was given without
/// its extension, since no valid definition then holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PlaceholderFields", into = "PlaceholderOut")]
pub struct Placeholder {
    /// The name templates refer to it by.
    pub name: String,
    /// Where its value comes from.
    #[serde(rename = "type")]
    pub kind: SearchKind,
    /// For a retrieval placeholder, the name of the `query` placeholder whose value is the
    /// search query.
    pub target: Option<String>,
    /// For a retrieval placeholder, its search parameters.
    pub params: Option<RetrievalParams>,
}

/// A placeholder as written by a client or read from storage, before normalisation.
#[derive(Deserialize)]
struct PlaceholderFields {
    name: String,
    #[serde(rename = "type")]
    kind: Listed<PlaceholderTypes>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    params: Option<RetrievalParams>,
}

/// A placeholder as stored and shown: a `history` placeholder's params hold only `k`.
#[derive(Serialize)]
struct PlaceholderOut {
    name: String,
    #[serde(rename = "type")]
    kind: SearchKind,
    target: Option<String>,
    params: Option<ParamsOut>,
}

/// The params of [`PlaceholderOut`].
#[derive(Serialize)]
#[serde(untagged)]
enum ParamsOut {
    History { k: u32 },
    Retrieval(RetrievalParams),
}

impl From<Placeholder> for PlaceholderOut {
    fn from(placeholder: Placeholder) -> Self {
        let params = placeholder.params.map(|params| {
            if placeholder.kind == SearchKind::History {
                ParamsOut::History { k: params.k }
            } else {
                ParamsOut::Retrieval(params)
            }
        });
        Self {
            name: placeholder.name,
            kind: placeholder.kind,
            target: placeholder.target,
            params,
        }
    }
}

impl From<PlaceholderFields> for Placeholder {
    fn from(fields: PlaceholderFields) -> Self {
        Self::new(fields.name, fields.kind.0, fields.target, fields.params)
    }
}

impl Placeholder {
    /// A normalised placeholder: for `query`, `target` and `params` are dropped; for a
    /// retrieval type, absent `params` become its type's defaults ([`RetrievalParams::of`]),
    /// a `hybrid` placeholder's parameters always say how it fuses, and a `history`
    /// placeholder has no target and params holding its `k` ([`DEFAULT_HISTORY_K`] when
    /// absent).
    pub fn new(
        name: impl Into<String>,
        kind: SearchKind,
        target: Option<String>,
        params: Option<RetrievalParams>,
    ) -> Self {
        let (target, params) = if kind == SearchKind::Query {
            (None, None)
        } else if kind == SearchKind::History {
            (None, Some(Self::history_params(params.map(|p| p.k))))
        } else if kind.is_retrieval() {
            let defaults = RetrievalParams::of(kind, None);
            let params = params.map_or(defaults, |params| RetrievalParams {
                fusion: params.fusion.or(defaults.fusion),
                ..params
            });
            (target, Some(params))
        } else {
            (target, params)
        };
        Self {
            name: name.into(),
            kind,
            target,
            params,
        }
    }

    /// The params of a `history` placeholder holding `k` messages (omitted: the default).
    pub fn history_params(k: Option<u32>) -> RetrievalParams {
        RetrievalParams {
            k: k.unwrap_or(DEFAULT_HISTORY_K),
            ..RetrievalParams::default()
        }
    }

    /// The parameters a search for this placeholder uses: its own, or the defaults when it
    /// has none (only possible for a placeholder not built by [`Placeholder::new`]).
    pub fn effective_params(&self) -> RetrievalParams {
        self.params
            .unwrap_or_else(|| RetrievalParams::of(self.kind, None))
    }
}

/// What an agent is: its name, description, prompt and placeholders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDefinition {
    /// Unique among agents; 1–255 characters.
    pub name: String,
    /// Free text, or none.
    #[serde(default)]
    pub description: Option<String>,
    /// The messages sent to the model, in order.
    pub prompt: Vec<Message>,
    /// The placeholders the templates may reference, in definition order.
    pub placeholders: Vec<Placeholder>,
}

/// Why a definition cannot be stored. Each variant documents the interface response it
/// becomes; the messages of `Display` are for logs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DefinitionError {
    /// 400 `Invalid parameter` with `details.error` `Invalid name`.
    #[error("agent name must have 1 to {MAX_NAME_CHARS} characters")]
    InvalidName,
    /// 501 `Not implemented`: a placeholder of this type (`hybrid` or `history` without its
    /// extension).
    #[error("placeholder type {0} is not implemented")]
    NotImplemented(SearchKind),
    /// 400 `Invalid prompt type`: no system message, no user message, or the last message is
    /// not a user message.
    #[error("prompt needs a system and a user message and must end with a user message")]
    InvalidPromptType,
    /// 400 `Invalid prompt`, without details; the problem is for logs.
    #[error("invalid prompt: {0}")]
    InvalidPrompt(PromptProblem),
    /// 400 `Invalid placeholder of type <type>`, `<type>` being the lowercase type name
    /// ([`SearchKind::wire_name`]): unusable retrieval parameters, a `history` placeholder's
    /// `k` outside 1..=1,000, or a second `history` placeholder.
    #[error("invalid parameters for a placeholder of type {0}")]
    InvalidPlaceholder(SearchKind),
}

/// What makes a prompt invalid (all reported as 400 `Invalid prompt`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptProblem {
    /// A placeholder name is not an identifier (`[A-Za-z_][A-Za-z0-9_]*`).
    #[error("placeholder name {0:?} is not an identifier")]
    NameNotIdentifier(String),
    /// A placeholder name is longer than [`MAX_PLACEHOLDER_NAME_CHARS`].
    #[error("placeholder name {0:?} is longer than {MAX_PLACEHOLDER_NAME_CHARS} characters")]
    NameTooLong(String),
    /// Two placeholders share this name.
    #[error("placeholder name {0:?} is defined twice")]
    DuplicateName(String),
    /// A template references this name, which is no placeholder.
    #[error("template references undefined placeholder {0:?}")]
    UndefinedReference(String),
    /// This retrieval placeholder has no target.
    #[error("retrieval placeholder {0:?} has no target")]
    MissingTarget(String),
    /// A retrieval placeholder targets a name that is not a `query` placeholder.
    #[error(
        "retrieval placeholder {placeholder:?} targets {target:?}, which is not a query placeholder"
    )]
    TargetNotQuery {
        /// The retrieval placeholder.
        placeholder: String,
        /// What it targets.
        target: String,
    },
}

/// Why an execution's variables are not enough to run the agent.
///
/// `Display` gives the interface's `details.error` text of the 400 `Invalid parameter`
/// response, reproduced exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    /// Query placeholders referenced by a template have no value (definition order).
    #[error("Missing prompt variables: {}", .0.join(", "))]
    MissingPromptVariables(Vec<String>),
    /// The target of this retrieval placeholder has no value.
    #[error("Missing target for placeholder: {0}")]
    MissingTarget(String),
}

/// A prompt message after rendering, as sent to the model and kept in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedMessage {
    /// Who speaks.
    pub role: Role,
    /// The message text with every placeholder filled.
    pub content: String,
}

impl AgentDefinition {
    /// Checks every rule a stored agent obeys, in the order listed in the module
    /// documentation, and returns the first failure.
    pub fn validate(&self, extensions: Extensions) -> Result<(), DefinitionError> {
        self.check_name()?;
        self.check_placeholder_types_implemented(extensions)?;
        self.check_prompt_roles()?;
        self.check_prompt_references()
            .map_err(DefinitionError::InvalidPrompt)?;
        self.check_retrieval_params()?;
        self.check_history_params()
    }

    /// The `history` placeholder, if any (a valid definition has at most one).
    pub fn history_placeholder(&self) -> Option<&Placeholder> {
        self.placeholders
            .iter()
            .find(|placeholder| placeholder.kind == SearchKind::History)
    }

    /// How many of a context's most recent messages an execution renders: the `history`
    /// placeholder's `k`, or none without one.
    pub fn history_len(&self) -> u32 {
        self.history_placeholder()
            .map_or(0, |placeholder| placeholder.effective_params().k)
    }

    /// The query placeholders an execution must supply: those referenced in a template (of
    /// any message, included or not) or targeted by a retrieval placeholder, in definition
    /// order.
    pub fn variables(&self) -> Vec<String> {
        let referenced = self.referenced_names();
        let targeted: HashSet<&str> = self
            .retrieval_placeholders()
            .filter_map(|placeholder| placeholder.target.as_deref())
            .collect();
        self.query_placeholders()
            .map(|placeholder| placeholder.name.as_str())
            .filter(|name| referenced.contains(*name) || targeted.contains(name))
            .map(str::to_owned)
            .collect()
    }

    /// The user's turn of an execution as a context keeps it: the value of the one query
    /// placeholder given a value, or one `name: value` line per such placeholder, in
    /// definition order.
    pub fn user_turn(&self, variables: &HashMap<String, String>) -> String {
        let given: Vec<(&str, &str)> = self
            .query_placeholders()
            .filter_map(|placeholder| {
                let name = placeholder.name.as_str();
                variables.get(name).map(|value| (name, value.as_str()))
            })
            .collect();
        match given.as_slice() {
            [(_, value)] => (*value).to_owned(),
            lines => lines
                .iter()
                .map(|(name, value)| format!("{name}: {value}"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The placeholders an execution fills by searching, in definition order. Every one of
    /// them runs, whether a template references it or not.
    pub fn retrieval_placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.placeholders
            .iter()
            .filter(|placeholder| placeholder.kind.is_retrieval())
    }

    /// The query placeholders referenced by a template (of any message, included or not) that
    /// have no value in `variables`, in definition order.
    pub fn missing_template_variables(&self, variables: &HashMap<String, String>) -> Vec<String> {
        let referenced = self.referenced_names();
        self.query_placeholders()
            .map(|placeholder| placeholder.name.as_str())
            .filter(|name| referenced.contains(*name) && !variables.contains_key(*name))
            .map(str::to_owned)
            .collect()
    }

    /// The retrieval placeholders whose target has no value in `variables` (or that have no
    /// target), in definition order.
    pub fn missing_targets(&self, variables: &HashMap<String, String>) -> Vec<String> {
        self.retrieval_placeholders()
            .filter(|placeholder| {
                placeholder
                    .target
                    .as_ref()
                    .is_none_or(|target| !variables.contains_key(target))
            })
            .map(|placeholder| placeholder.name.clone())
            .collect()
    }

    /// The variable checks of an execution, in the interface's order: first every query
    /// placeholder a template needs, then the first retrieval placeholder whose target has no
    /// value (a target no template references is caught only here).
    pub fn check_execution_variables(
        &self,
        variables: &HashMap<String, String>,
    ) -> Result<(), VariableError> {
        let missing = self.missing_template_variables(variables);
        if !missing.is_empty() {
            return Err(VariableError::MissingPromptVariables(missing));
        }
        self.check_retrieval_variables(variables)
    }

    /// The variable check of a retrieval dry run, which renders nothing: only the targets of
    /// retrieval placeholders are needed. Reports the first placeholder lacking one.
    pub fn check_retrieval_variables(
        &self,
        variables: &HashMap<String, String>,
    ) -> Result<(), VariableError> {
        match self.missing_targets(variables).into_iter().next() {
            Some(placeholder) => Err(VariableError::MissingTarget(placeholder)),
            None => Ok(()),
        }
    }

    /// Renders every included message, in order. `values` holds the query variables and,
    /// for each retrieval placeholder, its fragments' text already joined; `history` holds
    /// the messages of the `history` placeholder, oldest first (empty without a context).
    ///
    /// A message whose template is exactly the `history` placeholder's reference (surrounding
    /// whitespace aside) becomes the history's messages, each with its own role (none when
    /// the history is empty); elsewhere the reference becomes a transcript, one
    /// `role: content` line per message.
    ///
    /// Fails with the names left unfilled across all included messages (first appearance,
    /// each once). After [`Self::check_execution_variables`] and with every retrieval result
    /// supplied, this cannot happen; it guards against the two drifting apart.
    pub fn render_messages(
        &self,
        values: &HashMap<String, String>,
        history: &[RenderedMessage],
    ) -> Result<Vec<RenderedMessage>, Unfilled> {
        let history_name = self
            .history_placeholder()
            .map(|placeholder| placeholder.name.as_str());
        let transcript = history
            .iter()
            .map(|message| format!("{}: {}", message.role, message.content))
            .collect::<Vec<_>>()
            .join("\n");
        let lookup = |name: &str| {
            if Some(name) == history_name {
                Some(transcript.as_str())
            } else {
                values.get(name).map(String::as_str)
            }
        };
        let mut rendered = Vec::new();
        let mut unfilled: Vec<String> = Vec::new();
        for message in self.prompt.iter().filter(|message| message.include) {
            if history_name.is_some_and(|name| is_sole_reference(&message.template, name)) {
                rendered.extend_from_slice(history);
                continue;
            }
            let template = Template::parse(&message.template);
            match template.render(lookup) {
                Ok(content) => rendered.push(RenderedMessage {
                    role: message.role,
                    content,
                }),
                Err(Unfilled { names }) => {
                    for name in names {
                        if !unfilled.contains(&name) {
                            unfilled.push(name);
                        }
                    }
                }
            }
        }
        if unfilled.is_empty() {
            Ok(rendered)
        } else {
            Err(Unfilled { names: unfilled })
        }
    }

    /// Rule 1: 1–255 characters (not bytes).
    fn check_name(&self) -> Result<(), DefinitionError> {
        if crate::names::has_valid_length(&self.name) {
            Ok(())
        } else {
            Err(DefinitionError::InvalidName)
        }
    }

    /// Rule 2: the first placeholder of an unimplemented type, in definition order. A
    /// `history` placeholder is implemented by the extension `conversations` (searches of
    /// that type are not).
    fn check_placeholder_types_implemented(
        &self,
        extensions: Extensions,
    ) -> Result<(), DefinitionError> {
        let implemented = |kind: SearchKind| {
            kind.is_implemented(extensions)
                || (kind == SearchKind::History && extensions.has(Extension::Conversations))
        };
        match self
            .placeholders
            .iter()
            .find(|placeholder| !implemented(placeholder.kind))
        {
            Some(placeholder) => Err(DefinitionError::NotImplemented(placeholder.kind)),
            None => Ok(()),
        }
    }

    /// Rule 3 (the interface's prompt rules 1 and 2), over all messages.
    fn check_prompt_roles(&self) -> Result<(), DefinitionError> {
        let has_role = |role| self.prompt.iter().any(|message| message.role == role);
        let ends_with_user = self
            .prompt
            .last()
            .is_some_and(|message| message.role == Role::User);
        if has_role(Role::System) && has_role(Role::User) && ends_with_user {
            Ok(())
        } else {
            Err(DefinitionError::InvalidPromptType)
        }
    }

    /// Rule 4 (the interface's prompt rules 3 and 4 with the addendum's name rules): names
    /// first, in definition order, then template references in message order, then targets.
    fn check_prompt_references(&self) -> Result<(), PromptProblem> {
        let mut kinds_by_name: HashMap<&str, SearchKind> = HashMap::new();
        for placeholder in &self.placeholders {
            let name = placeholder.name.as_str();
            if !is_identifier(name) {
                return Err(PromptProblem::NameNotIdentifier(name.to_owned()));
            }
            // Identifiers are ASCII, so bytes are characters here.
            if name.len() > MAX_PLACEHOLDER_NAME_CHARS {
                return Err(PromptProblem::NameTooLong(name.to_owned()));
            }
            if kinds_by_name.insert(name, placeholder.kind).is_some() {
                return Err(PromptProblem::DuplicateName(name.to_owned()));
            }
        }
        for message in &self.prompt {
            let template = Template::parse(&message.template);
            if let Some(undefined) = template
                .names()
                .find(|name| !kinds_by_name.contains_key(name))
            {
                return Err(PromptProblem::UndefinedReference(undefined.to_owned()));
            }
        }
        for placeholder in self.retrieval_placeholders() {
            let Some(target) = placeholder.target.as_deref() else {
                return Err(PromptProblem::MissingTarget(placeholder.name.clone()));
            };
            if kinds_by_name.get(target) != Some(&SearchKind::Query) {
                return Err(PromptProblem::TargetNotQuery {
                    placeholder: placeholder.name.clone(),
                    target: target.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Rule 5 (the interface's prompt rule 5), for every retrieval placeholder in definition
    /// order, referenced or not.
    fn check_retrieval_params(&self) -> Result<(), DefinitionError> {
        match self
            .retrieval_placeholders()
            .find(|placeholder| !placeholder.effective_params().is_valid())
        {
            Some(placeholder) => Err(DefinitionError::InvalidPlaceholder(placeholder.kind)),
            None => Ok(()),
        }
    }

    /// Rule 5 for `history` placeholders: at most one, with `k` within 1..=1,000.
    fn check_history_params(&self) -> Result<(), DefinitionError> {
        let mut histories = self
            .placeholders
            .iter()
            .filter(|placeholder| placeholder.kind == SearchKind::History);
        let Some(history) = histories.next() else {
            return Ok(());
        };
        let k = history.effective_params().k;
        if histories.next().is_some() || !(1..=MAX_HISTORY_K).contains(&k) {
            return Err(DefinitionError::InvalidPlaceholder(SearchKind::History));
        }
        Ok(())
    }

    /// The query placeholders, in definition order.
    fn query_placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.placeholders
            .iter()
            .filter(|placeholder| placeholder.kind == SearchKind::Query)
    }

    /// Every name referenced by a template of any message, included or not.
    fn referenced_names(&self) -> HashSet<String> {
        self.prompt
            .iter()
            .flat_map(|message| {
                Template::parse(&message.template)
                    .names()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// Whether `template` is exactly a reference to `name`, surrounding whitespace aside.
fn is_sole_reference(template: &str, name: &str) -> bool {
    template
        .trim()
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        == Some(name)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(role: Role, template: &str) -> Message {
        Message {
            role,
            template: template.to_owned(),
            include: true,
        }
    }

    fn excluded(role: Role, template: &str) -> Message {
        Message {
            include: false,
            ..message(role, template)
        }
    }

    fn query(name: &str) -> Placeholder {
        Placeholder::new(name, SearchKind::Query, None, None)
    }

    fn retrieval(name: &str, kind: SearchKind, target: &str) -> Placeholder {
        Placeholder::new(name, kind, Some(target.to_owned()), None)
    }

    fn with_params(mut placeholder: Placeholder, params: RetrievalParams) -> Placeholder {
        placeholder.params = Some(params);
        placeholder
    }

    /// A valid agent: a question, its similarity context, and an unreferenced MMR search.
    fn agent() -> AgentDefinition {
        AgentDefinition {
            name: "support".to_owned(),
            description: None,
            prompt: vec![
                message(Role::System, "Answer from this context:\n{context}"),
                message(Role::User, "{question}"),
            ],
            placeholders: vec![
                query("question"),
                retrieval("context", SearchKind::Similarity, "question"),
            ],
        }
    }

    fn variables(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn prompt_problem(definition: &AgentDefinition) -> Option<PromptProblem> {
        match definition.validate(Extensions::NONE) {
            Err(DefinitionError::InvalidPrompt(problem)) => Some(problem),
            _ => None,
        }
    }

    // Types and serde.

    #[test]
    fn valid_agent_validates() {
        assert_eq!(agent().validate(Extensions::NONE), Ok(()));
    }

    #[test]
    fn placeholder_types_are_lowercase_on_the_wire() {
        for kind in [
            SearchKind::Query,
            SearchKind::Similarity,
            SearchKind::Mmr,
            SearchKind::Search,
            SearchKind::Hybrid,
            SearchKind::History,
        ] {
            assert_eq!(
                serde_json::to_value(kind).ok(),
                Some(json!(kind.wire_name()))
            );
            assert_eq!(kind.to_string(), kind.wire_name());
        }
        assert!(serde_json::from_value::<Listed<PlaceholderTypes>>(json!("Query")).is_err());
    }

    #[test]
    fn retrieval_types_are_similarity_mmr_search_and_hybrid() {
        use SearchKind::*;
        let retrieval: Vec<_> = [Query, Similarity, Mmr, Search, Hybrid, History]
            .into_iter()
            .filter(|kind| kind.is_retrieval())
            .collect();
        assert_eq!(retrieval, [Similarity, Mmr, Search, Hybrid]);
        let off = Extensions::NONE;
        assert!(!Hybrid.is_implemented(off) && !History.is_implemented(off));
        assert!(Query.is_implemented(off) && Search.is_implemented(off));
        let on = off.with(crate::config::Extension::Hybrid);
        assert!(Hybrid.is_implemented(on) && !History.is_implemented(on));
    }

    #[test]
    fn roles_are_lowercase_and_unknown_roles_are_rejected() {
        assert_eq!(
            serde_json::to_value(Role::Assistant).ok(),
            Some(json!("assistant"))
        );
        assert_eq!(Role::System.as_str(), "system");
        assert!(serde_json::from_value::<Role>(json!("tool")).is_err());
    }

    #[test]
    fn message_include_defaults_to_true() {
        let parsed: Result<Message, _> =
            serde_json::from_value(json!({"role": "user", "template": "hi"}));
        assert_eq!(parsed.ok(), Some(message(Role::User, "hi")));
    }

    #[test]
    fn default_params() {
        assert_eq!(
            RetrievalParams::default(),
            RetrievalParams {
                k: 5,
                fetch_k: 10,
                lambda_mult: 0.5,
                threshold: None,
                embedding: None,
                fusion: None,
                rerank: None,
                rerank_candidates: None,
            }
        );
    }

    #[test]
    fn partial_params_default_to_zero_counts() {
        let params = RetrievalParams::from_partial(None, None, None, Some(0.2), None);
        assert_eq!(
            params,
            RetrievalParams {
                k: 0,
                fetch_k: 0,
                lambda_mult: 0.5,
                threshold: Some(0.2),
                embedding: None,
                fusion: None,
                rerank: None,
                rerank_candidates: None,
            }
        );
        let parsed: Result<RetrievalParams, _> = serde_json::from_value(json!({"threshold": 0.2}));
        assert_eq!(parsed.ok(), Some(params));
    }

    #[test]
    fn placeholder_deserialization_normalises() {
        let query: Result<Placeholder, _> = serde_json::from_value(
            json!({"name": "q", "type": "query", "target": "x", "params": {"k": 3}}),
        );
        assert_eq!(
            query.ok(),
            Some(Placeholder {
                name: "q".to_owned(),
                kind: SearchKind::Query,
                target: None,
                params: None,
            })
        );

        let without_params: Result<Placeholder, _> = serde_json::from_value(
            json!({"name": "c", "type": "mmr", "target": "q", "params": null}),
        );
        assert_eq!(
            without_params
                .ok()
                .and_then(|placeholder| placeholder.params),
            Some(RetrievalParams::default())
        );

        let with_partial_params: Result<Placeholder, _> = serde_json::from_value(
            json!({"name": "c", "type": "mmr", "target": "q", "params": {"k": 2}}),
        );
        assert_eq!(
            with_partial_params
                .ok()
                .and_then(|placeholder| placeholder.params),
            Some(RetrievalParams::from_partial(
                Some(2),
                None,
                None,
                None,
                None
            ))
        );
    }

    #[test]
    fn placeholder_serializes_every_field() {
        let embedding = Uuid::nil();
        let placeholder = with_params(
            retrieval("c", SearchKind::Similarity, "q"),
            RetrievalParams {
                embedding: Some(embedding),
                ..RetrievalParams::default()
            },
        );
        assert_eq!(
            serde_json::to_value(&placeholder).ok(),
            Some(json!({
                "name": "c",
                "type": "similarity",
                "target": "q",
                "params": {"k": 5, "fetch_k": 10, "lambda_mult": 0.5, "threshold": null,
                           "embedding": embedding},
            }))
        );
        assert_eq!(
            serde_json::to_value(query("q")).ok(),
            Some(json!({"name": "q", "type": "query", "target": null, "params": null}))
        );
    }

    #[test]
    fn definition_round_trips_through_json() {
        let definition = AgentDefinition {
            description: Some("answers support questions".to_owned()),
            ..agent()
        };
        let stored = serde_json::to_value(&definition).ok();
        let restored = stored.and_then(|value| serde_json::from_value(value).ok());
        assert_eq!(restored, Some(definition));
    }

    // Rule 1: name.

    #[test]
    fn name_must_have_1_to_255_characters() {
        let named = |name: String| AgentDefinition { name, ..agent() };
        assert_eq!(
            named(String::new()).validate(Extensions::NONE),
            Err(DefinitionError::InvalidName)
        );
        assert_eq!(named("a".repeat(255)).validate(Extensions::NONE), Ok(()));
        assert_eq!(
            named("a".repeat(256)).validate(Extensions::NONE),
            Err(DefinitionError::InvalidName)
        );
        // 255 characters of two bytes each: counted as characters.
        assert_eq!(named("é".repeat(255)).validate(Extensions::NONE), Ok(()));
        assert_eq!(
            named("é".repeat(256)).validate(Extensions::NONE),
            Err(DefinitionError::InvalidName)
        );
    }

    // Rule 2: not implemented.

    #[test]
    fn hybrid_and_history_are_not_implemented() {
        for kind in [SearchKind::Hybrid, SearchKind::History] {
            let mut definition = agent();
            definition.placeholders.push(Placeholder::new(
                "extra",
                kind,
                Some("question".to_owned()),
                None,
            ));
            assert_eq!(
                definition.validate(Extensions::NONE),
                Err(DefinitionError::NotImplemented(kind))
            );
        }
    }

    #[test]
    fn unreferenced_hybrid_is_still_not_implemented() {
        let mut definition = agent();
        definition
            .placeholders
            .push(Placeholder::new("h", SearchKind::History, None, None));
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::NotImplemented(SearchKind::History))
        );
    }

    // Rule 3: prompt roles.

    #[test]
    fn prompt_needs_system_and_user_and_ends_with_user() {
        let prompts = [
            vec![],
            vec![message(Role::User, "{question}")],
            vec![message(Role::System, "s")],
            vec![
                message(Role::System, "s"),
                message(Role::Assistant, "{question}"),
            ],
            vec![
                message(Role::System, "s"),
                message(Role::User, "{question}"),
                message(Role::Assistant, "a"),
            ],
            vec![
                message(Role::User, "{question}"),
                message(Role::System, "s"),
            ],
        ];
        for prompt in prompts {
            let definition = AgentDefinition {
                prompt: prompt.clone(),
                ..agent()
            };
            assert_eq!(
                definition.validate(Extensions::NONE),
                Err(DefinitionError::InvalidPromptType),
                "{prompt:?}"
            );
        }
    }

    #[test]
    fn user_may_come_first_and_assistant_in_between() {
        let definition = AgentDefinition {
            prompt: vec![
                message(Role::User, "hello"),
                message(Role::System, "s"),
                message(Role::Assistant, "example {context}"),
                message(Role::User, "{question}"),
            ],
            ..agent()
        };
        assert_eq!(definition.validate(Extensions::NONE), Ok(()));
    }

    #[test]
    fn excluded_messages_count_for_prompt_roles() {
        let only_excluded_system = AgentDefinition {
            prompt: vec![
                excluded(Role::System, "s"),
                message(Role::User, "{question}"),
            ],
            ..agent()
        };
        assert_eq!(only_excluded_system.validate(Extensions::NONE), Ok(()));

        let excluded_user_last = AgentDefinition {
            prompt: vec![
                message(Role::System, "s"),
                message(Role::User, "{question}"),
                excluded(Role::Assistant, "a"),
            ],
            ..agent()
        };
        assert_eq!(
            excluded_user_last.validate(Extensions::NONE),
            Err(DefinitionError::InvalidPromptType)
        );
    }

    // Rule 4: names, references, targets.

    #[test]
    fn placeholder_name_must_be_an_identifier() {
        for bad in ["", "1q", "a-b", "a b", "é"] {
            let mut definition = agent();
            definition.placeholders.push(query(bad));
            assert_eq!(
                prompt_problem(&definition),
                Some(PromptProblem::NameNotIdentifier(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn placeholder_name_has_at_most_64_characters() {
        let mut definition = agent();
        definition.placeholders.push(query(&"a".repeat(64)));
        assert_eq!(definition.validate(Extensions::NONE), Ok(()));
        definition.placeholders.push(query(&"b".repeat(65)));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::NameTooLong("b".repeat(65)))
        );
    }

    #[test]
    fn placeholder_names_are_unique() {
        let mut definition = agent();
        definition
            .placeholders
            .push(retrieval("question", SearchKind::Mmr, "question"));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::DuplicateName("question".to_owned()))
        );
    }

    #[test]
    fn template_references_must_be_placeholders() {
        let mut definition = agent();
        definition
            .prompt
            .insert(0, excluded(Role::Assistant, "{question} {unknown}"));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::UndefinedReference("unknown".to_owned()))
        );
    }

    #[test]
    fn escaped_and_malformed_braces_are_not_references() {
        let mut definition = agent();
        definition.prompt[0].template = "{{unknown}} { x } {1a} {open".to_owned();
        assert_eq!(definition.validate(Extensions::NONE), Ok(()));
    }

    #[test]
    fn retrieval_placeholder_needs_a_target() {
        let mut definition = agent();
        definition
            .placeholders
            .push(Placeholder::new("loose", SearchKind::Search, None, None));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::MissingTarget("loose".to_owned()))
        );
    }

    #[test]
    fn retrieval_target_must_be_a_query_placeholder() {
        for target in ["context", "nothing", "extra", ""] {
            let mut definition = agent();
            definition
                .placeholders
                .push(retrieval("extra", SearchKind::Mmr, target));
            assert_eq!(
                prompt_problem(&definition),
                Some(PromptProblem::TargetNotQuery {
                    placeholder: "extra".to_owned(),
                    target: target.to_owned(),
                }),
                "{target:?}"
            );
        }
    }

    #[test]
    fn prompt_problems_are_checked_names_then_references_then_targets() {
        let mut definition = agent();
        definition.prompt[1].template = "{question} {unknown}".to_owned();
        definition
            .placeholders
            .push(Placeholder::new("loose", SearchKind::Search, None, None));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::UndefinedReference("unknown".to_owned()))
        );
        definition.placeholders.push(query("question"));
        assert_eq!(
            prompt_problem(&definition),
            Some(PromptProblem::DuplicateName("question".to_owned()))
        );
    }

    // Rule 5: retrieval parameters.

    #[test]
    fn retrieval_params_rule() {
        let base = RetrievalParams::default();
        let invalid = [
            RetrievalParams { k: 0, ..base },
            RetrievalParams {
                k: 5,
                fetch_k: 4,
                ..base
            },
            RetrievalParams {
                lambda_mult: -0.01,
                ..base
            },
            RetrievalParams {
                lambda_mult: 1.01,
                ..base
            },
            RetrievalParams {
                lambda_mult: f64::NAN,
                ..base
            },
            RetrievalParams::from_partial(None, None, None, None, None),
            RetrievalParams::from_partial(Some(3), None, None, None, None),
        ];
        for params in invalid {
            assert!(!params.is_valid(), "{params:?}");
        }
        let valid = [
            base,
            RetrievalParams {
                k: 1,
                fetch_k: 1,
                lambda_mult: 0.0,
                ..base
            },
            RetrievalParams {
                lambda_mult: 1.0,
                threshold: Some(-3.0),
                ..base
            },
        ];
        for params in valid {
            assert!(params.is_valid(), "{params:?}");
        }
    }

    #[test]
    fn invalid_params_name_the_placeholder_type() {
        for kind in [SearchKind::Similarity, SearchKind::Mmr, SearchKind::Search] {
            let mut definition = agent();
            definition.placeholders.push(with_params(
                retrieval("unused", kind, "question"),
                RetrievalParams {
                    k: 0,
                    ..RetrievalParams::default()
                },
            ));
            assert_eq!(
                definition.validate(Extensions::NONE),
                Err(DefinitionError::InvalidPlaceholder(kind))
            );
        }
    }

    #[test]
    fn first_invalid_retrieval_placeholder_is_reported() {
        let mut definition = agent();
        definition.placeholders[1].params = Some(RetrievalParams {
            fetch_k: 1,
            ..RetrievalParams::default()
        });
        definition.placeholders.push(with_params(
            retrieval("other", SearchKind::Mmr, "question"),
            RetrievalParams {
                k: 0,
                ..RetrievalParams::default()
            },
        ));
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::InvalidPlaceholder(SearchKind::Similarity))
        );
    }

    #[test]
    fn retrieval_placeholder_without_params_uses_the_defaults() {
        let mut definition = agent();
        definition.placeholders[1].params = None;
        assert_eq!(definition.validate(Extensions::NONE), Ok(()));
    }

    // Order of the rules.

    #[test]
    fn rules_are_checked_in_order() {
        let invalid_params = RetrievalParams {
            k: 0,
            ..RetrievalParams::default()
        };
        let mut definition = agent();
        definition.placeholders[1].params = Some(invalid_params);
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::InvalidPlaceholder(SearchKind::Similarity))
        );

        definition.placeholders.push(query("bad name"));
        assert!(matches!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::InvalidPrompt(_))
        ));

        definition.prompt.reverse();
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::InvalidPromptType)
        );

        definition
            .placeholders
            .push(Placeholder::new("h", SearchKind::Hybrid, None, None));
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::NotImplemented(SearchKind::Hybrid))
        );

        definition.name.clear();
        assert_eq!(
            definition.validate(Extensions::NONE),
            Err(DefinitionError::InvalidName)
        );
    }

    #[test]
    fn error_messages_for_logs_are_lowercase() {
        let errors = [
            DefinitionError::InvalidName,
            DefinitionError::NotImplemented(SearchKind::Hybrid),
            DefinitionError::InvalidPromptType,
            DefinitionError::InvalidPrompt(PromptProblem::MissingTarget("c".to_owned())),
            DefinitionError::InvalidPlaceholder(SearchKind::Mmr),
        ];
        for error in errors {
            let message = error.to_string();
            assert!(message.starts_with(char::is_lowercase), "{message}");
        }
    }

    // Variables.

    #[test]
    fn variables_are_referenced_or_targeted_query_placeholders_in_definition_order() {
        let definition = AgentDefinition {
            name: "a".to_owned(),
            description: None,
            prompt: vec![
                message(Role::System, "{context} {topic}"),
                excluded(Role::User, "{hidden}"),
                message(Role::User, "{question}"),
            ],
            placeholders: vec![
                query("unused"),
                query("question"),
                retrieval("context", SearchKind::Similarity, "search_terms"),
                query("hidden"),
                query("search_terms"),
                query("topic"),
            ],
        };
        assert_eq!(definition.validate(Extensions::NONE), Ok(()));
        assert_eq!(
            definition.variables(),
            names(&["question", "hidden", "search_terms", "topic"])
        );
    }

    #[test]
    fn missing_template_variables_in_definition_order() {
        let mut definition = agent();
        definition.placeholders.insert(0, query("tone"));
        definition
            .prompt
            .insert(0, excluded(Role::System, "{tone}"));
        assert_eq!(
            definition.missing_template_variables(&variables(&[])),
            names(&["tone", "question"])
        );
        assert_eq!(
            definition.missing_template_variables(&variables(&[("question", ""), ("extra", "x")])),
            names(&["tone"])
        );
    }

    #[test]
    fn missing_targets_in_definition_order() {
        let mut definition = agent();
        definition.placeholders.push(query("terms"));
        definition
            .placeholders
            .push(retrieval("more", SearchKind::Mmr, "terms"));
        definition
            .placeholders
            .push(retrieval("again", SearchKind::Search, "question"));
        assert_eq!(
            definition.missing_targets(&variables(&[])),
            names(&["context", "more", "again"])
        );
        assert_eq!(
            definition.missing_targets(&variables(&[("question", "q")])),
            names(&["more"])
        );
    }

    #[test]
    fn execution_checks_template_variables_before_targets() {
        let mut definition = agent();
        definition.placeholders.push(query("terms"));
        definition
            .placeholders
            .push(retrieval("more", SearchKind::Mmr, "terms"));

        let none = definition.check_execution_variables(&variables(&[]));
        assert_eq!(
            none,
            Err(VariableError::MissingPromptVariables(names(&["question"])))
        );
        assert_eq!(
            none.err().map(|error| error.to_string()),
            Some("Missing prompt variables: question".to_owned())
        );

        let without_target = definition.check_execution_variables(&variables(&[("question", "q")]));
        assert_eq!(
            without_target,
            Err(VariableError::MissingTarget("more".to_owned()))
        );
        assert_eq!(
            without_target.err().map(|error| error.to_string()),
            Some("Missing target for placeholder: more".to_owned())
        );

        let all = variables(&[("question", "q"), ("terms", "t")]);
        assert_eq!(definition.check_execution_variables(&all), Ok(()));
    }

    #[test]
    fn dry_run_needs_only_targets() {
        let mut definition = agent();
        definition.placeholders.push(query("tone"));
        definition.prompt[0].template.push_str("{tone}");
        assert_eq!(
            definition.check_retrieval_variables(&variables(&[("question", "q")])),
            Ok(())
        );
        assert_eq!(
            definition.check_retrieval_variables(&variables(&[])),
            Err(VariableError::MissingTarget("context".to_owned()))
        );
    }

    #[test]
    fn missing_prompt_variables_message_joins_names() {
        let error = VariableError::MissingPromptVariables(names(&["a", "b"]));
        assert_eq!(error.to_string(), "Missing prompt variables: a, b");
    }

    // Rendering.

    #[test]
    fn render_messages_skips_excluded_messages() {
        let mut definition = agent();
        definition
            .prompt
            .insert(1, excluded(Role::Assistant, "{never_filled}"));
        let values = variables(&[("question", "Why {context}?"), ("context", "one\n\ntwo")]);
        assert_eq!(
            definition.render_messages(&values, &[]),
            Ok(vec![
                RenderedMessage {
                    role: Role::System,
                    content: "Answer from this context:\none\n\ntwo".to_owned(),
                },
                RenderedMessage {
                    role: Role::User,
                    content: "Why {context}?".to_owned(),
                },
            ])
        );
    }

    #[test]
    fn render_messages_lists_every_unfilled_name_once() {
        let mut definition = agent();
        definition
            .prompt
            .push(message(Role::User, "{question} {context}"));
        assert_eq!(
            definition.render_messages(&variables(&[]), &[]),
            Err(Unfilled {
                names: names(&["context", "question"])
            })
        );
        assert_eq!(
            definition.render_messages(&variables(&[("question", "q")]), &[]),
            Err(Unfilled {
                names: names(&["context"])
            })
        );
    }

    #[test]
    fn rendered_message_serializes_as_role_and_content() {
        let rendered = RenderedMessage {
            role: Role::User,
            content: "hi".to_owned(),
        };
        assert_eq!(
            serde_json::to_value(rendered).ok(),
            Some(json!({"role": "user", "content": "hi"}))
        );
    }

    fn with_history(k: Option<u32>) -> AgentDefinition {
        let mut definition = agent();
        definition.placeholders.push(Placeholder::new(
            "history",
            SearchKind::History,
            Some("question".to_owned()),
            k.map(|k| Placeholder::history_params(Some(k))),
        ));
        definition
    }

    fn said(role: Role, content: &str) -> RenderedMessage {
        RenderedMessage {
            role,
            content: content.to_owned(),
        }
    }

    #[test]
    fn history_is_implemented_with_conversations_only() {
        let on = Extensions::NONE.with(crate::config::Extension::Conversations);
        assert_eq!(
            with_history(None).validate(Extensions::NONE),
            Err(DefinitionError::NotImplemented(SearchKind::History))
        );
        assert_eq!(with_history(None).validate(on), Ok(()));
        assert!(!SearchKind::History.is_implemented(on), "searches stay 501");
    }

    #[test]
    fn history_k_defaults_to_10_and_lies_within_1_and_1000() {
        let on = Extensions::NONE.with(crate::config::Extension::Conversations);
        assert_eq!(with_history(None).history_len(), DEFAULT_HISTORY_K);
        assert_eq!(agent().history_len(), 0);
        for k in [1, 1_000] {
            assert_eq!(with_history(Some(k)).validate(on), Ok(()));
        }
        for k in [0, 1_001] {
            assert_eq!(
                with_history(Some(k)).validate(on),
                Err(DefinitionError::InvalidPlaceholder(SearchKind::History))
            );
        }
        let mut two = with_history(None);
        two.placeholders
            .push(Placeholder::new("older", SearchKind::History, None, None));
        assert_eq!(
            two.validate(on),
            Err(DefinitionError::InvalidPlaceholder(SearchKind::History))
        );
    }

    #[test]
    fn history_placeholder_is_stored_with_k_only_and_no_target() {
        let definition = with_history(Some(3));
        let history = definition.history_placeholder().map(serde_json::to_value);
        let expected =
            json!({"name": "history", "type": "history", "target": null, "params": {"k": 3}});
        assert_eq!(history.and_then(Result::ok), Some(expected.clone()));
        let read = serde_json::from_value::<Placeholder>(expected).ok();
        assert_eq!(read.as_ref(), definition.history_placeholder());
    }

    #[test]
    fn history_renders_as_messages_alone_and_as_a_transcript_within_text() {
        let mut definition = with_history(None);
        definition.prompt = vec![
            message(Role::System, "Earlier:\n{history}"),
            message(Role::Assistant, " {history}\n"),
            message(Role::User, "{question}"),
        ];
        let history = [said(Role::User, "hi"), said(Role::Assistant, "hello")];
        let values = variables(&[("question", "q")]);
        assert_eq!(
            definition.render_messages(&values, &history),
            Ok(vec![
                said(Role::System, "Earlier:\nuser: hi\nassistant: hello"),
                said(Role::User, "hi"),
                said(Role::Assistant, "hello"),
                said(Role::User, "q"),
            ])
        );
        assert_eq!(
            definition.render_messages(&values, &[]),
            Ok(vec![
                said(Role::System, "Earlier:\n"),
                said(Role::User, "q")
            ])
        );
    }

    #[test]
    fn user_turn_is_the_one_value_or_a_line_per_variable_in_definition_order() {
        let mut definition = agent();
        assert_eq!(
            definition.user_turn(&variables(&[("question", "why?")])),
            "why?"
        );
        definition.placeholders.insert(0, query("topic"));
        let both = variables(&[("question", "why?"), ("topic", "leave")]);
        assert_eq!(definition.user_turn(&both), "topic: leave\nquestion: why?");
        assert_eq!(definition.user_turn(&variables(&[("other", "x")])), "");
    }
}
