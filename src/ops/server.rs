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

/// Binds `addr`. The IPv6 wildcard `[::]` (the default) is bound dual-stack,
/// whatever the host's `bindv6only`, so probes and scrapes reach the pod
/// over IPv4 and IPv6 alike (an IPv6-only cluster cannot reach `0.0.0.0`);
/// on a host without IPv6 it falls back to `0.0.0.0` on the same port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    if addr.ip() != std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED) {
        return tokio::net::TcpListener::bind(addr).await;
    }
    match dual_stack(addr) {
        Ok(listener) => Ok(listener),
        Err(e) => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            tracing::info!(error = %e, %v4, "no IPv6 socket: listening on IPv4 only");
            tokio::net::TcpListener::bind(v4).await
        }
    }
}

/// A listener on `[::]:port` that also accepts IPv4 (mapped) connections.
fn dual_stack(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// Binds the address and serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = bind(addr).await?;
    let addr = listener.local_addr().unwrap_or(addr);
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(health))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_ipv6_wildcard_serves_ipv4_and_ipv6() {
        let listener = super::bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listener.local_addr().unwrap().is_ipv6());
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                listener.accept().await.unwrap();
            }
        });
        for host in ["127.0.0.1", "[::1]"] {
            tokio::net::TcpStream::connect(format!("{host}:{port}"))
                .await
                .unwrap_or_else(|e| panic!("{host}:{port}: {e}"));
        }
        accept.await.unwrap();
    }
}
