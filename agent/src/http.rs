//! The localhost endpoint: `GET /role` (now, or a long poll that returns on change) and
//! `/healthz`.

use std::time::Duration;

use axum::{
    Router,
    extract::{RawQuery, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::{net::TcpListener, sync::watch};

use crate::state::Published;

/// A long poll waits at most this long when `timeoutSeconds` is not given.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The longest `timeoutSeconds` accepted.
pub const MAX_WAIT_SECONDS: u64 = 600;

/// What `GET /role` was asked.
#[derive(Debug, PartialEq, Eq)]
pub struct RoleQuery {
    /// `wait`: the version the caller last saw; `None` answers at once.
    pub wait: Option<String>,
    /// `timeoutSeconds`, or [`DEFAULT_WAIT`].
    pub timeout: Duration,
}

impl RoleQuery {
    /// Parses the query string of `GET /role`; the error is the message of a 400.
    pub fn parse(query: Option<&str>) -> Result<RoleQuery, String> {
        let mut parsed = RoleQuery {
            wait: None,
            timeout: DEFAULT_WAIT,
        };
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*key {
                "wait" => parsed.wait = Some(value.into_owned()),
                "timeoutSeconds" => {
                    let seconds: u64 = value
                        .parse()
                        .ok()
                        .filter(|s| *s <= MAX_WAIT_SECONDS)
                        .ok_or_else(|| {
                            format!(
                                "timeoutSeconds={value:?}: expected whole seconds from 0 to \
                                 {MAX_WAIT_SECONDS}"
                            )
                        })?;
                    parsed.timeout = Duration::from_secs(seconds);
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}: GET /role takes wait=<version> and \
                         timeoutSeconds=<n>"
                    ));
                }
            }
        }
        Ok(parsed)
    }
}

/// The long poll: the state now if its version differs from `seen`; otherwise the state as soon
/// as it changes, or the unchanged state once `timeout` has passed.
pub async fn wait_change(
    mut states: watch::Receiver<Published>,
    seen: &str,
    timeout: Duration,
) -> Published {
    let changed =
        match tokio::time::timeout(timeout, states.wait_for(|p| p.version() != seen)).await {
            Ok(Ok(state)) => Some(state.clone()),
            // Timed out, or the publisher stopped: the state as it stands.
            Ok(Err(_)) | Err(_) => None,
        };
    changed.unwrap_or_else(|| states.borrow().clone())
}

/// The endpoint's routes, serving the states `states` receives.
pub fn router(states: watch::Receiver<Published>) -> Router {
    Router::new()
        .route("/role", get(role))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(states)
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn role(State(states): State<watch::Receiver<Published>>, RawQuery(q): RawQuery) -> Response {
    let query = match RoleQuery::parse(q.as_deref()) {
        Ok(query) => query,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
    };
    let state = match &query.wait {
        None => states.borrow().clone(),
        Some(seen) => wait_change(states, seen, query.timeout).await,
    };
    let view = state.view();
    let body = match serde_json::to_string(&view) {
        Ok(body) => body,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", view.version)) {
        headers.insert(header::ETAG, etag);
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use leadergroup_client::{Epoch, Role};
    use tokio::time::Instant;

    use super::*;

    fn leader(epoch: u32) -> Role {
        Role::Leader {
            epoch: Epoch::from(epoch),
        }
    }

    #[test]
    fn the_query_is_parsed_and_checked() {
        assert_eq!(
            RoleQuery::parse(None).unwrap(),
            RoleQuery {
                wait: None,
                timeout: DEFAULT_WAIT
            }
        );
        assert_eq!(
            RoleQuery::parse(Some("wait=1a-3&timeoutSeconds=5")).unwrap(),
            RoleQuery {
                wait: Some("1a-3".to_owned()),
                timeout: Duration::from_secs(5)
            }
        );
        assert!(
            RoleQuery::parse(Some("timeoutSeconds=-1"))
                .unwrap_err()
                .contains("timeoutSeconds")
        );
        assert!(RoleQuery::parse(Some("timeoutSeconds=601")).is_err());
        assert!(
            RoleQuery::parse(Some("whait=1"))
                .unwrap_err()
                .contains("\"whait\"")
        );
    }

    #[tokio::test]
    async fn a_poll_with_an_old_version_returns_at_once() {
        let mut state = Published::initial(1);
        let seen = state.version();
        state.update(leader(3), None);
        let (_tx, rx) = watch::channel(state.clone());
        let started = Instant::now();
        let got = wait_change(rx, &seen, Duration::from_secs(30)).await;
        assert_eq!(got, state);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_poll_with_the_current_version_returns_on_the_change() {
        let mut state = Published::initial(1);
        let (tx, rx) = watch::channel(state.clone());
        let seen = state.version();
        let poll =
            tokio::spawn(async move { wait_change(rx, &seen, Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!poll.is_finished(), "returned before any change");
        state.update(leader(4), None);
        let changed = Instant::now();
        tx.send_replace(state.clone());
        let got = poll.await.unwrap();
        assert_eq!(got.role, leader(4));
        assert!(changed.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_poll_without_change_returns_the_same_state_at_the_timeout() {
        let state = Published::initial(1);
        let (_tx, rx) = watch::channel(state.clone());
        let started = Instant::now();
        let got = wait_change(rx, &state.version(), Duration::from_millis(200)).await;
        assert_eq!(got, state);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_poll_returns_the_state_as_it_stands_when_the_publisher_stops() {
        let state = Published::initial(1);
        let (tx, rx) = watch::channel(state.clone());
        let seen = state.version();
        let poll =
            tokio::spawn(async move { wait_change(rx, &seen, Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(tx);
        let got = tokio::time::timeout(Duration::from_secs(1), poll)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, state);
    }
}
