use std::{fmt::Display, future::Future, time::Duration};

use kube::{Api, Resource, runtime::wait::await_condition};
use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// How often [`wait_until`] polls: often enough that tests don't sleep for nothing, rarely enough
/// that tens of parallel waiters don't load a 2-core API server.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Polls `poll` until it returns `Ok(Some(value))`, and returns that value.
///
/// `Ok(None)` means "not yet"; `Err(e)` is remembered and retried (an object that does not exist
/// yet is the usual case). On timeout the error names `what` and the last error seen.
pub async fn wait_until<T, E, F, Fut>(what: &str, timeout: Duration, poll: F) -> Result<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<Option<T>, E>>,
{
    wait_until_every(what, timeout, POLL_INTERVAL, poll).await
}

/// [`wait_until`], polling every `interval`.
pub async fn wait_until_every<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut poll: F,
) -> Result<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<Option<T>, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match poll().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last = format!("; last error: {e}"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// Watches object `name` until `cond` holds and returns the object as seen then (`None` when the
/// condition held for a missing object). Event-driven, so it sees a state that lasts only briefly
/// when polling could miss it... as long as the watch delivers it: a watch may coalesce
/// changes after a reconnect, so wait for states, not for transitions.
///
/// On timeout the error names `what` and the last state of the object seen (as JSON).
pub async fn wait_for_object<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    cond: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let last = std::sync::Mutex::new(None::<String>);
    let checked = |obj: Option<&K>| {
        if let Ok(mut last) = last.lock() {
            *last = Some(obj.map_or_else(
                || "absent".to_owned(),
                |o| serde_json::to_string(o).unwrap_or_else(|e| e.to_string()),
            ));
        }
        cond(obj)
    };
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, checked)).await {
        Ok(Ok(obj)) => Ok(obj),
        Ok(Err(source)) => Err(Error::Watch {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            what: what.to_owned(),
            timeout,
            last: last
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .map(|l| format!("; last seen: {l}"))
                .unwrap_or_default(),
        }),
    }
}
