//! Following one object with the `get` and `watch` verbs only (never `list`): GET it, watch it
//! by `metadata.name` from that resourceVersion, and GET again whenever the watch breaks, answers
//! 410 Gone, or stays quiet for a third of the Lease duration (the GET then confirms the state).

use std::{fmt::Debug, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    api::{WatchEvent, WatchParams},
};
use serde::de::DeserializeOwned;
use tokio::{
    sync::{mpsc, watch},
    time::{Instant, timeout},
};

use crate::error::{MembershipError, Request};

/// What a follower reports.
#[derive(Debug)]
pub(crate) enum Report<K> {
    /// The API server showed this state (`None`: absent) at `at`.
    Seen { state: Option<Box<K>>, at: Instant },
    /// A request failed.
    Failed(Arc<MembershipError>),
}

/// The shortest and longest pause between failed attempts. A 403 waits the longest: only an
/// RBAC change helps, and the error is already reported.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Follows object `name` until `reports` closes. `period` is a third of the Lease duration: how
/// often a GET confirms the state (watch events only tell what changed since), and the longest
/// wait for an answer before giving up on a request that hangs.
pub(crate) async fn follow<K>(
    api: Api<K>,
    name: String,
    namespace: String,
    resource: &'static str,
    mut period: watch::Receiver<Duration>,
    reports: mpsc::Sender<Report<K>>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let request = |verb| Request {
        verb,
        resource,
        name: name.clone(),
        namespace: namespace.clone(),
    };
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut backoff = BACKOFF_MIN;
    'get: loop {
        if reports.is_closed() {
            return;
        }
        let third = *period.borrow();
        // A GET confirms the state as of its sending, not its answer: the earlier instant.
        let sent = Instant::now();
        let state = match bounded(third, request("get"), api.get_opt(&name)).await {
            Ok(state) => state,
            Err(error) => {
                if !failed(&reports, error, &mut backoff).await {
                    return;
                }
                continue 'get;
            }
        };
        // An absent object is watched from "now" (resourceVersion unset): its creation arrives
        // as ADDED.
        let mut version = state
            .as_ref()
            .and_then(|o| o.resource_version())
            .unwrap_or_default();
        if !seen(&reports, state, sent).await {
            return;
        }

        let stream = match bounded(third, request("watch"), api.watch(&params, &version)).await {
            Ok(stream) => stream,
            Err(error) => {
                if !failed(&reports, error, &mut backoff).await {
                    return;
                }
                continue 'get;
            }
        };
        backoff = BACKOFF_MIN;
        let mut stream = std::pin::pin!(stream);
        // A watch event may arrive any time after the API server wrote it (a watch falling
        // behind, a slow link): it confirms its state only as of the last GET the stream is known
        // to be newer than, never as of its arrival.
        let mut confirmed_at = sent;
        loop {
            // A third of the duration since the last GET: confirm by GET, events or not. The
            // period shrinks once the Lease's duration is known, so a change restarts the wait.
            let third = *period.borrow_and_update();
            let next = tokio::select! {
                next = stream.next() => Some(next),
                () = tokio::time::sleep_until(confirmed_at + third) => None,
                changed = period.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let event = match next {
                Some(Some(Ok(event))) => event,
                // The server ended the watch (its timeout) or the connection broke: GET again.
                Some(None) => continue 'get,
                Some(Some(Err(e))) => {
                    let error = MembershipError::from_kube(request("watch"), e);
                    if reports.send(Report::Failed(Arc::new(error))).await.is_err() {
                        return;
                    }
                    continue 'get;
                }
                None => {
                    // A newer state than the watch delivered means the watch misses events:
                    // start over from it.
                    let sent = Instant::now();
                    match timeout(third, api.get_opt(&name)).await {
                        Ok(Ok(state)) => {
                            let current = state
                                .as_ref()
                                .and_then(|o| o.resource_version())
                                .unwrap_or_default();
                            let moved = current != version;
                            confirmed_at = sent;
                            if !seen(&reports, state, sent).await {
                                return;
                            }
                            if moved {
                                continue 'get;
                            }
                            continue;
                        }
                        Ok(Err(e)) => {
                            let error = MembershipError::from_kube(request("get"), e);
                            if reports.send(Report::Failed(Arc::new(error))).await.is_err() {
                                return;
                            }
                            continue 'get;
                        }
                        Err(_) => {
                            let error = MembershipError::Timeout {
                                request: request("get"),
                                after: third,
                            };
                            if reports.send(Report::Failed(Arc::new(error))).await.is_err() {
                                return;
                            }
                            continue 'get;
                        }
                    }
                }
            };
            let at = confirmed_at;
            let state = match event {
                WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                    version = obj.resource_version().unwrap_or_default();
                    Some(obj)
                }
                WatchEvent::Deleted(obj) => {
                    version = String::new();
                    let _ = obj;
                    None
                }
                WatchEvent::Bookmark(bookmark) => {
                    version = bookmark.metadata.resource_version;
                    continue;
                }
                // 410 Gone (the resourceVersion is too old) or any other error: GET again.
                WatchEvent::Error(status) => {
                    if status.code != 410 {
                        let error =
                            MembershipError::from_kube(request("watch"), kube::Error::Api(status));
                        if reports.send(Report::Failed(Arc::new(error))).await.is_err() {
                            return;
                        }
                    }
                    continue 'get;
                }
            };
            if !seen(&reports, state, at).await {
                return;
            }
        }
    }
}

/// Reports the state the API server showed at `at`. False once nobody listens.
async fn seen<K>(reports: &mpsc::Sender<Report<K>>, state: Option<K>, at: Instant) -> bool {
    reports
        .send(Report::Seen {
            state: state.map(Box::new),
            at,
        })
        .await
        .is_ok()
}

/// `call`, bounded by `limit`: its answer, or what failed as the membership's error (no answer
/// in time included: the connection may be stuck).
async fn bounded<T>(
    limit: Duration,
    request: Request,
    call: impl Future<Output = kube::Result<T>>,
) -> Result<T, MembershipError> {
    match timeout(limit, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(MembershipError::from_kube(request, e)),
        Err(_) => Err(MembershipError::Timeout {
            request,
            after: limit,
        }),
    }
}

/// Reports `error`, then waits before the next attempt: an API error backs off (a 403 the
/// longest), a timeout has waited its bound already. False once nobody listens.
async fn failed<K>(
    reports: &mpsc::Sender<Report<K>>,
    error: MembershipError,
    backoff: &mut Duration,
) -> bool {
    let pause = match &error {
        MembershipError::Timeout { .. } => None,
        e if e.is_forbidden() => Some(BACKOFF_MAX),
        _ => Some(*backoff),
    };
    if reports.send(Report::Failed(Arc::new(error))).await.is_err() {
        return false;
    }
    if let Some(pause) = pause {
        tokio::time::sleep(pause).await;
        *backoff = (*backoff * 2).min(BACKOFF_MAX);
    }
    true
}
