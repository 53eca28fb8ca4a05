//! Polls the /readyz of several operator replicas run with `--leader-elect` and records every time
//! more than one said "active": the operator's HA promises one active replica at a time.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::http_get;

/// How often the replicas are polled.
const EVERY: Duration = Duration::from_millis(20);
/// How long one answer is waited for: a paused replica answers nothing, and says nothing active.
const ANSWER: Duration = Duration::from_millis(300);

/// Where a replica serves /readyz; shared, because a replica started again serves elsewhere.
pub type ReadyzAddr = Arc<Mutex<SocketAddr>>;

/// Both (or more) replicas said active, in consecutive polls.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// The first poll that saw it.
    pub since: Instant,
    /// Until the first poll that no longer saw it (or the last one that did, while it lasts).
    pub length: Duration,
    /// The replicas that said active in the first poll.
    pub replicas: Vec<String>,
    /// In how many polls in a row.
    pub polls: u32,
}

/// The monitor; stops when dropped.
pub struct ActiveMonitor {
    state: Arc<Mutex<Seen>>,
    polls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    ended: Vec<Overlap>,
    open: Option<Overlap>,
}

impl ActiveMonitor {
    /// Starts polling `replicas` (a name and the address of its /readyz) every 20 ms.
    pub fn start(replicas: Vec<(String, ReadyzAddr)>) -> ActiveMonitor {
        let state = Arc::new(Mutex::new(Seen::default()));
        let polls = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (Arc::clone(&state), Arc::clone(&polls));
        let task = tokio::spawn(async move {
            loop {
                let roles =
                    futures::future::join_all(replicas.iter().map(|(_, a)| role_within(a))).await;
                let active: Vec<String> = replicas
                    .iter()
                    .zip(&roles)
                    .filter(|(_, r)| r.as_deref() == Some("active"))
                    .map(|((name, _), _)| name.clone())
                    .collect();
                {
                    let now = Instant::now();
                    let mut s = seen.lock().unwrap_or_else(PoisonError::into_inner);
                    match (s.open.take(), active.len() > 1) {
                        (None, true) => {
                            s.open = Some(Overlap {
                                since: now,
                                length: Duration::ZERO,
                                replicas: active,
                                polls: 1,
                            });
                        }
                        (Some(mut o), true) => {
                            o.length = now - o.since;
                            o.polls += 1;
                            s.open = Some(o);
                        }
                        (Some(mut o), false) => {
                            o.length = now - o.since;
                            s.ended.push(o);
                        }
                        (None, false) => {}
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(EVERY).await;
            }
        });
        ActiveMonitor { state, polls, task }
    }

    /// Every overlap seen so far (one still lasting included).
    pub fn overlaps(&self) -> Vec<Overlap> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.ended.iter().chain(&s.open).cloned().collect()
    }

    /// How many polls it made.
    pub fn polls(&self) -> usize {
        self.polls.load(Ordering::Relaxed)
    }

    /// Panics if two replicas ever said "active" at once (or if it barely polled).
    #[allow(clippy::panic, reason = "a test assertion: the failing test's message")]
    pub fn assert_never_two_active(&self) {
        if self.polls() <= 10 {
            panic!("the monitor barely polled ({} polls)", self.polls());
        }
        let overlaps = self.overlaps();
        if !overlaps.is_empty() {
            panic!("two operators active at once: {overlaps:?}");
        }
    }
}

impl Drop for ActiveMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the operator's /readyz at `addr` says: `active`, `standby` (or `None`: no answer, not
/// ready).
pub async fn readyz_role(addr: SocketAddr) -> Option<String> {
    let (code, body) = http_get(addr, "/readyz").await?;
    let role = body.trim().strip_prefix("ready: ")?;
    (code == 200).then(|| role.to_owned())
}

async fn role_within(addr: &ReadyzAddr) -> Option<String> {
    let addr = *addr.lock().unwrap_or_else(PoisonError::into_inner);
    tokio::time::timeout(ANSWER, readyz_role(addr))
        .await
        .ok()
        .flatten()
}
