//! The worker's metrics endpoint: any path answers the exposition, `/health` answers `OK`.

use std::net::SocketAddr;

use poem::listener::TcpListener;
use poem::{EndpointExt, Request, Response, Server};

use crate::metrics::WorkerMetrics;

/// Serves until `stop` fires.
pub async fn serve(
    addr: SocketAddr,
    metrics: WorkerMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let endpoint = poem::endpoint::make_sync(move |req: Request| -> Response {
        if req.uri().path() == "/health" {
            Response::builder()
                .content_type("text/plain; charset=utf-8")
                .body("OK")
        } else {
            Response::builder()
                .content_type("text/plain; version=0.0.4")
                .body(metrics.render())
        }
    });
    tracing::info!(%addr, "worker metrics listening");
    Server::new(TcpListener::bind(addr))
        .run_with_graceful_shutdown(
            endpoint.map_to_response(),
            async move {
                let _ = stop.changed().await;
            },
            None,
        )
        .await
}
