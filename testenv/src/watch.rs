//! Watches whose every delivery is handed, under a lock, to a state the caller reads
//! ([`Watched`]): the invariant watcher's record, the end-to-end tests' logs of what a watch
//! showed and the benchmark's leader watch are each such a state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// How long [`Watched::caught_up`] gives the watches to show what a fresh list shows: longer than
/// a watch's longest backoff after an error (30 s).
const CATCH_UP: Duration = Duration::from_secs(40);

/// What a watch delivered, with a list (the first one, or a relist after the watch broke or
/// expired) gathered into one state of the API server.
pub enum Seen<K> {
    /// A list starts.
    Relisting,
    /// A list, whole.
    Listed(Vec<K>),
    /// An object created or changed.
    Applied(K),
    /// An object deleted (its last state).
    Deleted(K),
    /// An error instead of an event.
    Failed,
}

/// A state fed by watches; the watches stop when it drops.
pub struct Watched<S> {
    state: Arc<Mutex<S>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    synced: Vec<tokio::sync::oneshot::Receiver<()>>,
    /// Per watch: what it has shown and how to list what the API server holds now.
    progress: Vec<Progress>,
}

/// An object's namespace and name, and a version of it.
type Versions = HashMap<(Option<String>, String), u64>;

/// How far one watch has come: the newest version of each object it showed (created, changed
/// or deleted), and a quorum list of its resource.
struct Progress {
    shown: Arc<Mutex<Versions>>,
    list: Box<dyn Fn() -> BoxFuture<'static, kube::Result<Versions>> + Send + Sync>,
}

impl<S: Send + 'static> Watched<S> {
    /// `state`, watched by nothing yet.
    pub fn new(state: S) -> Watched<S> {
        Watched {
            state: Arc::new(Mutex::new(state)),
            tasks: Vec::new(),
            synced: Vec::new(),
            progress: Vec::new(),
        }
    }

    /// Adds a watch of `api` (with a backoff: through an API server restart, errors come back at
    /// once) that hands every delivery to `on` under the lock.
    pub fn watch<K>(
        mut self,
        api: Api<K>,
        config: watcher::Config,
        on: impl Fn(&mut S, Seen<K>) + Send + 'static,
    ) -> Watched<S>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Clone + Eq + std::hash::Hash,
    {
        use futures::StreamExt;
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let state = Arc::clone(&self.state);
        let shown = Arc::new(Mutex::new(Versions::new()));
        let list_api = api.clone();
        // What the watch selects, no more: an object it never shows must not be waited for.
        let params = ListParams {
            label_selector: config.label_selector.clone(),
            field_selector: config.field_selector.clone(),
            ..ListParams::default()
        };
        self.progress.push(Progress {
            shown: Arc::clone(&shown),
            list: Box::new(move || {
                let (api, params) = (list_api.clone(), params.clone());
                Box::pin(async move {
                    let list = api.list(&params).await?;
                    Ok(list.items.iter().filter_map(versioned).collect())
                })
            }),
        });
        self.tasks.push(tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = watcher(api, config).default_backoff().boxed();
            let mut listing: Option<Vec<K>> = None;
            while let Some(event) = stream.next().await {
                if let Ok(
                    watcher::Event::Apply(o)
                    | watcher::Event::Delete(o)
                    | watcher::Event::InitApply(o),
                ) = &event
                    && let Some((key, version)) = versioned(o)
                {
                    let mut shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
                    let newest = shown.entry(key).or_default();
                    *newest = (*newest).max(version);
                }
                let seen = match event {
                    Err(_) => Seen::Failed,
                    Ok(watcher::Event::Apply(o)) => Seen::Applied(o),
                    Ok(watcher::Event::Delete(o)) => Seen::Deleted(o),
                    Ok(watcher::Event::Init) => {
                        listing = Some(Vec::new());
                        Seen::Relisting
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        listing.get_or_insert_default().push(o);
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        Seen::Listed(listing.take().unwrap_or_default())
                    }
                };
                let listed = matches!(seen, Seen::Listed(_));
                on(
                    &mut state.lock().unwrap_or_else(PoisonError::into_inner),
                    seen,
                );
                if listed && let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
        }));
        self.synced.push(synced_rx);
        self
    }

    /// Waits up to `timeout` for every watch's first list; whether they all came.
    pub async fn synced(mut self, timeout: Duration) -> (Watched<S>, bool) {
        let all = futures::future::join_all(std::mem::take(&mut self.synced));
        let came = tokio::time::timeout(timeout, all)
            .await
            .is_ok_and(|r| r.iter().all(Result::is_ok));
        (self, came)
    }

    /// Waits up to 40 s until every watch has shown each object of a fresh (quorum) list of its
    /// resource at the listed version or a newer one; what is still missing otherwise. A test
    /// that saw a write by a read must not judge a watch that has not delivered it yet.
    pub async fn caught_up(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        for progress in &self.progress {
            let wanted = loop {
                match tokio::time::timeout_at(deadline, (progress.list)()).await {
                    Ok(Ok(listed)) => break listed,
                    Ok(Err(_)) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Ok(Err(e)) => return Err(format!("the list to catch up with failed: {e}")),
                    Err(_) => return Err(format!("no list to catch up with in {CATCH_UP:?}")),
                }
            };
            loop {
                let missing: Vec<String> = {
                    let shown = progress
                        .shown
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    wanted
                        .iter()
                        .filter_map(|(key, version)| {
                            let seen = shown.get(key).copied();
                            seen.is_none_or(|s| s < *version).then(|| {
                                format!("{} at version {version} (shown: {seen:?})", key.1)
                            })
                        })
                        .collect()
                };
                if missing.is_empty() {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "a watch did not catch up with the API server in {CATCH_UP:?}: {}",
                        missing.join(", ")
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// The state, locked.
    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `object`'s namespace and name, and its version (a number on every API server backed by etcd).
fn versioned<K: Resource>(object: &K) -> Option<((Option<String>, String), u64)> {
    let version = object.resource_version()?.parse().ok()?;
    Some(((object.namespace(), object.meta().name.clone()?), version))
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
