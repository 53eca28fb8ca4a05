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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::http::{Request, Response};
    use kube::Client;
    use kube::ResourceExt;
    use kube::client::Body;
    use serde_json::json;
    use tokio::sync::Semaphore;

    use super::*;

    /// An API server whose lists of pods answer after 50 ms with one leader, the first `failing`
    /// of them with a 500; it counts the lists.
    fn api(lists: Arc<AtomicUsize>, failing: usize) -> Api<Pod> {
        let service = tower::service_fn(move |request: Request<Body>| {
            let lists = lists.clone();
            async move {
                assert!(request.uri().path().ends_with("/pods"), "{}", request.uri());
                let n = lists.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (status, body) = if n < failing {
                    let failure = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 500, "reason": "InternalError", "message": "etcd is slow"});
                    (500, failure)
                } else {
                    (200, leader_list("web-0"))
                };
                answer(status, &body)
            }
        });
        Api::namespaced(Client::new(service, "ns"), "ns")
    }

    /// An API server whose lists of pods answer one per permit of `gate`, the n-th (from 0)
    /// with one leader, `web-<n>`: which list a check got tells when that list started.
    fn gated_api(lists: Arc<AtomicUsize>, gate: Arc<Semaphore>) -> Api<Pod> {
        let service = tower::service_fn(move |request: Request<Body>| {
            let (lists, gate) = (lists.clone(), gate.clone());
            async move {
                assert!(request.uri().path().ends_with("/pods"), "{}", request.uri());
                let n = lists.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await?.forget();
                answer(200, &leader_list(&format!("web-{n}")))
            }
        });
        Api::namespaced(Client::new(service, "ns"), "ns")
    }

    /// A list of pods' metadata holding one pod, `leader`, labeled leader.
    fn leader_list(leader: &str) -> serde_json::Value {
        let leader = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": leader, "namespace": "ns",
                         "labels": {"leadergroup.io/role": "leader"}}});
        json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": {}, "items": [leader]})
    }

    fn answer(
        status: u16,
        body: &serde_json::Value,
    ) -> std::result::Result<Response<Body>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body)?))?)
    }

    fn names(leaders: &[Pod]) -> Vec<String> {
        leaders.iter().map(ResourceExt::name_any).collect()
    }

    #[tokio::test]
    async fn the_checks_that_ask_together_share_one_list_and_nothing_stays_behind() {
        let lists = Arc::new(AtomicUsize::new(0));
        let api = api(lists.clone(), 0);
        let shared = LeaderLists::default();
        let answers =
            futures::future::join_all((0..10).map(|_| shared.every_leader(&api, "ns"))).await;
        assert_eq!(lists.load(Ordering::SeqCst), 1, "one list for ten checks");
        for answer in &answers {
            assert_eq!(names(answer.as_ref().unwrap()), ["web-0"]);
        }
        // A check that asks afterwards gets a list of its own, started after it asked.
        shared.every_leader(&api, "ns").await.unwrap();
        assert_eq!(lists.load(Ordering::SeqCst), 2);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(shared.0.lock().unwrap().is_empty(), "no namespace kept");
    }

    /// A list already in flight may have been read before the commit and the barriers of a check
    /// that asks now: that check gets the next list, started after it asked, and shares it with
    /// the checks that ask meanwhile.
    #[tokio::test]
    async fn a_check_that_asks_while_a_list_is_in_flight_gets_the_next_one() {
        let lists = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let api = gated_api(lists.clone(), gate.clone());
        let shared = LeaderLists::default();
        // Polled once, a check has asked: it waits in line, and the first one starts a list.
        let mut first = std::pin::pin!(shared.every_leader(&api, "ns"));
        assert!(futures::poll!(first.as_mut()).is_pending());
        while lists.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The first list is at the API server, held there by the gate: these two ask meanwhile.
        let mut second = std::pin::pin!(shared.every_leader(&api, "ns"));
        let mut third = std::pin::pin!(shared.every_leader(&api, "ns"));
        assert!(futures::poll!(second.as_mut()).is_pending());
        assert!(futures::poll!(third.as_mut()).is_pending());
        gate.add_permits(10);
        assert_eq!(names(&first.await.unwrap()), ["web-0"]);
        assert_eq!(
            names(&second.await.unwrap()),
            ["web-1"],
            "a check got a list that started before it asked"
        );
        assert_eq!(names(&third.await.unwrap()), ["web-1"], "one list for both");
        assert_eq!(lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn when_the_shared_list_fails_each_check_reads_its_own() {
        let lists = Arc::new(AtomicUsize::new(0));
        let api = api(lists.clone(), 1);
        let shared = LeaderLists::default();
        let answers =
            futures::future::join_all((0..3).map(|_| shared.every_leader(&api, "ns"))).await;
        assert_eq!(
            lists.load(Ordering::SeqCst),
            1 + 3,
            "the failed one, then one each"
        );
        for answer in &answers {
            assert_eq!(names(answer.as_ref().unwrap()), ["web-0"]);
        }
    }
}
