//! Watches whose every delivery is handed, under a lock, to a state the caller reads
//! ([`Watched`]): the invariant watcher's record, the end-to-end tests' logs of what a watch
//! showed and the benchmark's leader watch are each such a state.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

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
}

impl<S: Send + 'static> Watched<S> {
    /// `state`, watched by nothing yet.
    pub fn new(state: S) -> Watched<S> {
        let (state, tasks, synced) = (Arc::new(Mutex::new(state)), Vec::new(), Vec::new());
        Watched {
            state,
            tasks,
            synced,
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
        self.tasks.push(tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = watcher(api, config).default_backoff().boxed();
            let mut listing: Option<Vec<K>> = None;
            while let Some(event) = stream.next().await {
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

    /// The state, locked.
    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
