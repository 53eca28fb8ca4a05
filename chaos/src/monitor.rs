//! Watches the two replicas' /readyz: the moments both said `active` (the operator's HA promises
//! one active replica at a time).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::replica::role_at;

/// Polls every 50 ms; an overlap counts once both said active in two polls in a row (one poll
/// could catch a clean handover between its two answers).
pub struct ActiveMonitor {
    overlaps: Arc<Mutex<Vec<(Instant, Duration)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ActiveMonitor {
    pub fn start(replicas: Vec<Arc<Mutex<SocketAddr>>>) -> ActiveMonitor {
        let overlaps = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&overlaps);
        let task = tokio::spawn(async move {
            let mut both_since: Option<(Instant, u32)> = None;
            loop {
                let roles = futures::future::join_all(replicas.iter().map(|r| role_at(r))).await;
                let active = roles
                    .iter()
                    .filter(|r| r.as_deref() == Some("active"))
                    .count();
                let now = Instant::now();
                both_since = match (both_since, active > 1) {
                    (None, true) => Some((now, 1)),
                    (Some((since, n)), true) => Some((since, n + 1)),
                    (Some((since, n)), false) => {
                        if n > 1 {
                            record
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push((since, now - since));
                        }
                        None
                    }
                    (None, false) => None,
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        ActiveMonitor { overlaps, task }
    }

    /// Each time both replicas said active: since when, for how long.
    pub fn overlaps(&self) -> Vec<(Instant, Duration)> {
        self.overlaps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for ActiveMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}
