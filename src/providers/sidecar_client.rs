//! The client of a sidecar (`trove sidecar`, `TROVE_SIDECAR_URL`): splitting and local
//! embedding over gRPC, for the worker and the API.

use tonic::Status;
use tonic::transport::{Channel, Endpoint};

/// Generated gRPC code of `proto/sidecar.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod proto {
    tonic::include_proto!("trove.sidecar.v1");
}

use proto::{EmbedRequest, SplitRequest};

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
