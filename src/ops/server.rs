//! The HTTP server for `/metrics`, `/healthz` and `/readyz`.

use super::liveness::Liveness;
use super::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What the server reports on.
#[derive(Clone)]
pub struct Health {
    /// Metrics to render.
    pub metrics: Arc<Metrics>,
    /// Set once the process can do its work (caches synced, or following a leader).
    pub ready: Arc<AtomicBool>,
    /// Whether the controller makes progress.
    pub liveness: Arc<Liveness>,
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.render(),
    )
}

/// 200 while the controller makes progress, 503 with the reason when stuck.
async fn healthz(State(h): State<Health>) -> (StatusCode, String) {
    match h.liveness.check(Instant::now()) {
        Ok(()) => (StatusCode::OK, "ok".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("stuck: {why}")),
    }
}

/// Ready once started; the body says whether this replica leads or stands by.
async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if !h.ready.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    } else if h.metrics.leader.get() == 1 {
        (StatusCode::OK, "ok: leader")
    } else {
        (
            StatusCode::OK,
            "ok: follower (standing by; another replica holds the lease)",
        )
    }
}

/// The router, apart from the listener so tests can drive it.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Binds the address and serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(health))
        .with_graceful_shutdown(shutdown)
        .await
}
