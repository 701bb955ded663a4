//! The sidecar's gRPC server (`trove sidecar`): text splitting and local embedding. Its client,
//! used when `TROVE_SIDECAR_URL` is set, is `providers::sidecar_client`.

use std::net::SocketAddr;
use std::path::PathBuf;

use tonic::{Request, Response, Status};

use crate::providers::local_embedding::LocalModels;

use crate::providers::sidecar_client::proto;
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
