//! Text splitting, in this process or through the sidecar.

use trove_text::SplitterConfig;

use crate::sidecar::SidecarClient;

/// Where texts are split.
#[derive(Clone, Debug)]
pub enum TextSplitting {
    /// In this process, on the blocking pool.
    InProcess,
    /// Through `trove sidecar`.
    Sidecar(SidecarClient),
}

impl TextSplitting {
    /// Splits each text; one fragment list per text, in order.
    pub async fn split_all(
        &self,
        config: &SplitterConfig,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<String>>, String> {
        match self {
            Self::InProcess => {
                let config = config.clone();
                tokio::task::spawn_blocking(move || {
                    texts
                        .iter()
                        .map(|t| trove_text::split(&config, t))
                        .collect()
                })
                .await
                .map_err(|e| e.to_string())
            }
            Self::Sidecar(client) => client
                .split(config.provider(), &config.to_parameters(), texts)
                .await
                .map_err(|status| format!("gRPC error: {status}")),
        }
    }
}
