//! One list of a namespace's leader labels for all the checks that want one at once.
//!
//! A check whose group's barrier is down lists every pod of the namespace labeled leader. At
//! start (or after a takeover) every group's first check wants it at once: one list each is
//! quadratic in the groups of a namespace, in bytes read and held. Here a check waits for the
//! next list of its namespace that starts after it asked (so it is as fresh as its own would
//! be: taken after its commit and its barriers), and every check that asked meanwhile shares
//! that one list. Lists of a namespace run one after the other; when one fails, each check that
//! waited for it reads its own, whose error it reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::sync::oneshot;

use crate::actions;
use crate::error::Result;

/// A namespace's leaders, as one list read them (None: that list failed).
type Leaders = Option<Arc<Vec<Pod>>>;

/// The checks waiting for the next list, and whether one is running, by namespace.
#[derive(Default)]
pub struct LeaderLists(Arc<Mutex<HashMap<String, Waiting>>>);

#[derive(Default)]
struct Waiting {
    running: bool,
    next: Vec<oneshot::Sender<Leaders>>,
}

impl LeaderLists {
    /// Every pod of `api`'s namespace `ns` labeled leader, from a list that started after this
    /// call.
    pub async fn every_leader(&self, api: &Api<Pod>, ns: &str) -> Result<Arc<Vec<Pod>>> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut all = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let waiting = all.entry(ns.to_string()).or_default();
            waiting.next.push(tx);
            !std::mem::replace(&mut waiting.running, true)
        };
        if start {
            tokio::spawn(drive(self.0.clone(), api.clone(), ns.to_string()));
        }
        match rx.await.ok().flatten() {
            Some(leaders) => Ok(leaders),
            None => Ok(Arc::new(actions::pods::leaders_of_namespace(api).await?)),
        }
    }
}

/// Lists `ns` for the checks that asked before each list started, until none waits.
async fn drive(all: Arc<Mutex<HashMap<String, Waiting>>>, api: Api<Pod>, ns: String) {
    loop {
        let batch = {
            let mut all = all
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(waiting) = all.get_mut(&ns) else {
                return;
            };
            if waiting.next.is_empty() {
                all.remove(&ns);
                return;
            }
            std::mem::take(&mut waiting.next)
        };
        let leaders = actions::pods::leaders_of_namespace(&api)
            .await
            .ok()
            .map(Arc::new);
        for check in batch {
            let _ = check.send(leaders.clone());
        }
    }
}
