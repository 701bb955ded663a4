//! The sidecar: text splitting and local embedding over gRPC (`trove sidecar`), and the client
//! the worker and the API use when `TROVE_SIDECAR_URL` is set.

use std::net::SocketAddr;
use std::path::PathBuf;

use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::providers::local_embedding::LocalModels;

/// Generated gRPC code of `proto/sidecar.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod proto {
    tonic::include_proto!("trove.sidecar.v1");
}

use proto::sidecar_server::{Sidecar, SidecarServer};
use proto::{EmbedRequest, EmbedResponse, Fragments, SplitRequest, SplitResponse, Vector};

/// The gRPC service.
pub struct SidecarService {
    models: LocalModels,
}

#[tonic::async_trait]
impl Sidecar for SidecarService {
    async fn split(
        &self,
        request: Request<SplitRequest>,
    ) -> Result<Response<SplitResponse>, Status> {
        let request = request.into_inner();
        let parameters: serde_json::Value = serde_json::from_str(&request.parameters_json)
            .map_err(|e| Status::invalid_argument(format!("parameters_json: {e}")))?;
        let config = trove_text::SplitterConfig::from_parameters(&request.provider, &parameters)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let texts = request.texts;
        let tokenizer = if request.tokenizer_model.is_empty()
            || !crate::providers::splitting::uses_model_tokenizer(&config)
        {
            None
        } else {
            Some(
                self.models
                    .get(&request.tokenizer_model)
                    .await
                    .map_err(|e| Status::failed_precondition(e.to_string()))?,
            )
        };
        // Splitting is CPU work: keep it off the async workers.
        let results = tokio::task::spawn_blocking(move || {
            texts
                .iter()
                .map(|t| Fragments {
                    fragments: match &tokenizer {
                        Some(model) => trove_text::split_with_tokenizer(&config, t, &|t: &str| {
                            model.token_spans(t)
                        }),
                        None => trove_text::split(&config, t),
                    },
                })
                .collect()
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(SplitResponse { results }))
    }

    async fn embed(
        &self,
        request: Request<EmbedRequest>,
    ) -> Result<Response<EmbedResponse>, Status> {
        let request = request.into_inner();
        let model = self
            .models
            .get(&request.model_name)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let vectors = model
            .embed(&request.texts)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(EmbedResponse {
            vectors: vectors
                .into_iter()
                .map(|values| Vector { values })
                .collect(),
        }))
    }
}

/// Serves the sidecar until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    models_dir: Option<PathBuf>,
    embed_threads: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tracing::info!(%addr, "sidecar listening");
    let service = SidecarService {
        models: LocalModels::new(models_dir, embed_threads),
    };
    tonic::transport::Server::builder()
        .add_service(SidecarServer::new(service).max_decoding_message_size(64 * 1024 * 1024))
        .serve_with_shutdown(addr, shutdown)
        .await
}

/// A client of a sidecar; connects lazily, so an unreachable sidecar surfaces per call.
#[derive(Clone)]
pub struct SidecarClient {
    inner: proto::sidecar_client::SidecarClient<Channel>,
}

impl std::fmt::Debug for SidecarClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SidecarClient")
    }
}

impl SidecarClient {
    /// A client of `url` (`http://host:port`).
    pub fn new(url: &str) -> Result<Self, String> {
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| e.to_string())?
            .connect_timeout(std::time::Duration::from_secs(5));
        let channel = endpoint.connect_lazy();
        Ok(Self {
            inner: proto::sidecar_client::SidecarClient::new(channel)
                .max_decoding_message_size(64 * 1024 * 1024),
        })
    }

    /// Splits texts with one splitter configuration (and the tokenizer of the local model
    /// `tokenizer_model` for a token splitter with the `embedding-model` tokenizer).
    pub async fn split(
        &self,
        provider: &str,
        parameters: &serde_json::Value,
        texts: Vec<String>,
        tokenizer_model: Option<&str>,
    ) -> Result<Vec<Vec<String>>, Status> {
        let request = SplitRequest {
            provider: provider.to_owned(),
            parameters_json: parameters.to_string(),
            texts,
            tokenizer_model: tokenizer_model.unwrap_or_default().to_owned(),
        };
        let response = self.inner.clone().split(request).await?.into_inner();
        Ok(response.results.into_iter().map(|r| r.fragments).collect())
    }

    /// Embeds texts with a local model of the sidecar.
    pub async fn embed(
        &self,
        model_name: &str,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, Status> {
        let request = EmbedRequest {
            model_name: model_name.to_owned(),
            texts,
        };
        let response = self.inner.clone().embed(request).await?.into_inner();
        Ok(response.vectors.into_iter().map(|v| v.values).collect())
    }
}
