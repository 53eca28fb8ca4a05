//! `/healthz`, `/readyz` and `/metrics`: all three on the plain `--http-addr`, or, with
//! `--metrics-secure-addr`, the probes there and `/metrics` over TLS behind a token ([`secure`]).

pub mod access;
pub mod secure;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::StartupError;
use crate::metrics::Metrics;

pub use secure::SecureMetrics;

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

/// Binds the plain endpoints' address.
pub async fn bind(addr: &str) -> Result<TcpListener, StartupError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Http {
            addr: addr.to_string(),
            source,
        })
}

/// Serves the probes on `plain` (bound to `addr`), and `/metrics` there too unless `secure`
/// serves it, until `shutdown` resolves; fails as soon as either server does.
pub async fn serve(
    plain: TcpListener,
    addr: &str,
    secure: Option<SecureMetrics>,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartupError> {
    let shutdown = shutdown.shared();
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz));
    let secured = match secure {
        Some(secure) => {
            let metrics = health.metrics.clone();
            let shutdown = shutdown.clone();
            Some(async move { secure.serve(metrics, shutdown).await })
        }
        None => {
            app = app.route("/metrics", get(metrics));
            None
        }
    };
    let plain = async {
        axum::serve(plain, app.with_state(health))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| StartupError::Http {
                addr: addr.to_string(),
                source,
            })
    };
    match secured {
        Some(secured) => tokio::try_join!(plain, secured).map(|_| ()),
        None => plain.await,
    }
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
    metrics_response(&h.metrics)
}

/// The metrics, rendered as OpenMetrics text.
fn metrics_response(metrics: &Metrics) -> impl IntoResponse + use<> {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
}
