//! `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::error::StartupError;
use crate::metrics::Metrics;

/// What the endpoints report.
#[derive(Clone)]
pub struct Health {
    /// The metrics to render.
    pub metrics: Arc<Metrics>,
    /// True once every watch has delivered its first list.
    pub synced: watch::Receiver<bool>,
    /// True while this replica may act; None without leader election.
    pub active: Option<watch::Receiver<bool>>,
}

/// Serves the endpoints on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: &str,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartupError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Http {
            addr: addr.to_string(),
            source,
        })?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| StartupError::Http {
            addr: addr.to_string(),
            source,
        })
}

/// 200 once the caches are synced, naming the replica's role; 503 before.
async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    if !*h.synced.borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: watches have not delivered their first lists\n".to_string(),
        );
    }
    let role = match &h.active {
        None => "active (leader election off)",
        Some(a) if *a.borrow() => "active",
        Some(_) => "standby",
    };
    (StatusCode::OK, format!("ready: {role}\n"))
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
