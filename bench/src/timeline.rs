//! What each candidate's application believed, and when, as testenv's history checker
//! ([`leadergroup_testenv::histories`]) reads it. On the real cluster, from the files each pod
//! writes on its node: ours from the agent's `role`, `epoch` and `valid-until` files (their
//! mtimes: when the agent wrote them; a leader belief ends at its `validUntil`), a peer from the
//! lines it appends to its events file (`<unix ns> started|stopped <lease> <identity>`, stamped by
//! the candidate when its library called back). All nodes run on this machine, so the node files
//! and the harness share one clock. The peers' candidate processes on the light cluster print the
//! same lines (module `peers`, which imports this one), judged by the same code.
//!
//! Every member counts, the struck one too, except while its process verifiably does not run:
//! [`NotRunning`] holds those stretches (from a kill or a confirmed freeze, until the thaw or the
//! restart; a pod gone from the API runs nothing).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use leadergroup_testenv::histories::{Change, Group, Histories, Member, Span, unix_ms};
use leadergroup_testenv::pods::node_of;
use leadergroup_testenv::{FileHistory, RealCluster, Version};

/// The label naming a candidate pod's system (`ours`, `cgd`, ...).
pub const SYSTEM_LABEL: &str = "bench.leadergroup.io/system";

/// The pod an identity runs in: ours, the pod's name; a peer, `<pod>_<8 hex>` (one per process
/// start, as controller-runtime makes its identity, so a restarted container is a new one).
pub fn pod_of(identity: &str) -> &str {
    identity.split('_').next().unwrap_or(identity)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per identity, the stretches in which its process verifiably did not run.
#[derive(Clone, Default)]
pub struct NotRunning(Arc<Mutex<BTreeMap<String, Vec<Span>>>>);

impl NotRunning {
    /// From `from` on, `identity`'s process does not run (killed, or its freeze confirmed).
    pub fn stopped(&self, identity: &str, from: SystemTime) {
        let span = Span {
            from_ms: unix_ms(from),
            to_ms: None,
        };
        lock(&self.0)
            .entry(identity.to_owned())
            .or_default()
            .push(span);
    }

    /// From `at` on, `identity`'s process may run again (thawed, or restarted).
    pub fn running(&self, identity: &str, at: SystemTime) {
        let at = unix_ms(at);
        if let Some(spans) = lock(&self.0).get_mut(identity) {
            for s in spans.iter_mut().filter(|s| s.to_ms.is_none()) {
                s.to_ms = Some(at.max(s.from_ms));
            }
        }
    }

    fn of(&self, identity: &str) -> Vec<Span> {
        lock(&self.0).get(identity).cloned().unwrap_or_default()
    }
}

/// A peer candidate's line, `<unix nanoseconds> started|stopped <lease> <identity>`: its Lease,
/// its identity and the change.
pub fn parse_peer_line(line: &str) -> Option<(String, String, Change)> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    let [ts, event, lease, identity] = parts.as_slice() else {
        return None;
    };
    let nanos = ts.parse::<u64>().ok()?;
    let leading = match *event {
        "started" => true,
        "stopped" => false,
        _ => return None,
    };
    let at = unix_ms(UNIX_EPOCH + Duration::from_nanos(nanos));
    let change = Change::to(at, leading, None);
    Some(((*lease).to_owned(), (*identity).to_owned(), change))
}

/// Each identity's changes of belief.
type ByIdentity = BTreeMap<String, Vec<Change>>;

/// The changes the peers' processes printed, per Lease and identity, and the stretches in which
/// a process did not run: the light cluster's peers, which print to the harness.
#[derive(Clone, Default)]
pub struct Beliefs {
    changes: Arc<Mutex<BTreeMap<String, ByIdentity>>>,
    pub not_running: NotRunning,
}

impl Beliefs {
    /// Records a line of a peer's output, if it is a change of belief.
    pub fn push_line(&self, line: &str) {
        if let Some((lease, identity, change)) = parse_peer_line(line) {
            let mut changes = lock(&self.changes);
            let of_lease = changes.entry(lease).or_default();
            of_lease.entry(identity).or_default().push(change);
        }
    }

    /// The members of `lease`'s group so far.
    pub fn members(&self, lease: &str) -> Vec<Member> {
        let changes = lock(&self.changes).get(lease).cloned().unwrap_or_default();
        let to_member = |(name, changes): (String, Vec<Change>)| Member {
            not_running: self.not_running.of(&name),
            name,
            changes,
        };
        changes.into_iter().map(to_member).collect()
    }
}

/// The members of one group as a run's histories, without a fence.
pub fn one_group(name: &str, members: Vec<Member>) -> Histories {
    let group = Group {
        name: name.to_owned(),
        members,
    };
    Histories {
        groups: vec![group],
        fence: Vec::new(),
    }
}

/// Follows the files of every candidate pod of a namespace (the pods listed every second, the
/// files polled by [`FileHistory`] under their pod's UID, and when each pod is gone); the members
/// of a system are read from them when asked.
pub struct Tracker {
    pub not_running: NotRunning,
    files: Arc<FileHistory>,
    pods: Arc<Mutex<Vec<Followed>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A candidate pod whose files are followed.
struct Followed {
    uid: String,
    system: String,
    pod: String,
    /// It publishes through the agent's files (else: a peer's events file).
    ours: bool,
    /// The first listing that no longer had it: its processes had ended by then (the kubelet
    /// lets a pod go only once none of its containers runs).
    gone: Option<SystemTime>,
}

/// The agent's volume in our pods, and the peers' events volume (bench/manifests/e2e-*-pod.yaml).
const AGENT_VOLUME: &str = "leadergroup";
const EVENTS_VOLUME: &str = "events";

/// The agent's files a member's belief is read from (agent/README.md).
const AGENT_FILES: [&str; 3] = ["role", "epoch", "valid-until"];

impl Tracker {
    /// Starts following; `ours` tells which systems publish through the agent.
    pub fn start(pods: Api<Pod>, cluster: PathBuf, ours: fn(&str) -> bool) -> Tracker {
        let files = Arc::new(FileHistory::start(Vec::new()));
        let followed: Arc<Mutex<Vec<Followed>>> = Arc::default();
        let (add, found) = (Arc::clone(&files), Arc::clone(&followed));
        let task = tokio::spawn(async move {
            let params = ListParams::default().labels(SYSTEM_LABEL);
            loop {
                // A failed listing says nothing about which pods are gone.
                if let Ok(listed) = pods.list(&params).await {
                    follow(
                        &listed.items,
                        &cluster,
                        ours,
                        &add,
                        &found,
                        SystemTime::now(),
                    );
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Tracker {
            not_running: NotRunning::default(),
            files,
            pods: followed,
            task,
        }
    }

    /// Every member of `system` so far: ours, one per pod, from each version of its agent's
    /// files; a peer, one per process, from every complete line of its pod's events file. Each
    /// with the stretches in which it did not run.
    pub fn members(&self, system: &str) -> Vec<Member> {
        let pods = lock(&self.pods);
        let mut members: Vec<Member> = Vec::new();
        for f in pods.iter().filter(|f| f.system == system) {
            let gone = f.gone.map(|at| Span {
                from_ms: unix_ms(at),
                to_ms: None,
            });
            let mut of_pod = if f.ours {
                let [role, epoch, until] =
                    AGENT_FILES.map(|file| self.files.history(&format!("{}/{file}", f.uid)));
                vec![Member {
                    name: f.pod.clone(),
                    changes: agent_changes(&role, &epoch, &until),
                    not_running: Vec::new(),
                }]
            } else {
                let text = self.files.last(&f.uid).unwrap_or_default();
                peer_members(&text)
            };
            for m in &mut of_pod {
                m.not_running = self.not_running.of(&m.name);
                m.not_running.extend(gone);
            }
            members.extend(of_pod);
        }
        members
    }
}

/// Follows the pods of `listed` not followed yet, and marks those followed but no longer listed
/// as gone `now`.
fn follow(
    listed: &[Pod],
    cluster: &std::path::Path,
    ours: fn(&str) -> bool,
    files: &FileHistory,
    followed: &Mutex<Vec<Followed>>,
    now: SystemTime,
) {
    let mut followed = lock(followed);
    for f in followed.iter_mut().filter(|f| f.gone.is_none()) {
        if !listed
            .iter()
            .any(|p| p.uid().as_deref() == Some(f.uid.as_str()))
        {
            f.gone = Some(now);
        }
    }
    for p in listed {
        let (Some(uid), Some(node), Some(system)) =
            (p.uid(), node_of(p), p.labels().get(SYSTEM_LABEL))
        else {
            continue;
        };
        if followed.iter().any(|f| f.uid == uid) {
            continue;
        }
        let ours = ours(system);
        let volume = if ours { AGENT_VOLUME } else { EVENTS_VOLUME };
        let Ok(dir) = RealCluster::empty_dir(cluster, node, &uid, volume) else {
            continue;
        };
        if ours {
            for file in AGENT_FILES {
                files.add(&format!("{uid}/{file}"), dir.join(file));
            }
        } else {
            files.add(&uid, dir.join("events.log"));
        }
        followed.push(Followed {
            uid,
            system: system.clone(),
            pod: p.name_any(),
            ours,
            gone: None,
        });
    }
}

/// The members of a peer pod's events file: one per identity, from its complete lines.
fn peer_members(text: &str) -> Vec<Member> {
    let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
    let mut members: Vec<Member> = Vec::new();
    for (_, identity, change) in complete.lines().filter_map(parse_peer_line) {
        match members.iter_mut().find(|m| m.name == identity) {
            Some(m) => m.changes.push(change),
            None => members.push(Member {
                name: identity,
                changes: vec![change],
                not_running: Vec::new(),
            }),
        }
    }
    members
}

/// The beliefs an application reading the agent's files holds: at every instant a file changed,
/// the latest version of each file written by then. The agent writes `valid-until` and `epoch`
/// before `role` when it gains leadership and after it when it loses it, so a version of one
/// instant pairs `leader` with its own epoch and validity. A state like the one before it (the
/// same file written again) is no change.
fn agent_changes(role: &[Version], epoch: &[Version], until: &[Version]) -> Vec<Change> {
    let mut instants: Vec<SystemTime> = [role, epoch, until]
        .iter()
        .flat_map(|h| h.iter().map(|(t, _)| *t))
        .collect();
    instants.sort();
    instants.dedup();
    let at = |history: &[Version], t: SystemTime| {
        let mut written = history.iter().filter(|(w, _)| *w <= t);
        written.next_back().map(|(_, c)| c.trim().to_owned())
    };
    let mut changes: Vec<Change> = Vec::new();
    for t in instants {
        let leader = at(role, t).as_deref() == Some("leader");
        let number = |history| at(history, t).and_then(|c| c.parse::<u64>().ok());
        let change = Change {
            at_ms: unix_ms(t),
            leader,
            epoch: number(epoch).filter(|_| leader),
            valid_until_ms: number(until).filter(|_| leader).map(|ms| ms as f64),
        };
        let same = |c: &Change| {
            (c.leader, c.epoch, c.valid_until_ms)
                == (change.leader, change.epoch, change.valid_until_ms)
        };
        if !changes.last().is_some_and(same) {
            changes.push(change);
        }
    }
    changes
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use leadergroup_testenv::histories::{believers, first_start};

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn v(ms: u64, contents: &str) -> Version {
        (at(ms), contents.to_owned())
    }

    #[test]
    fn a_peer_line_is_parsed() {
        let (lease, identity, change) =
            parse_peer_line("1700000000000000000 started cgd-0 cgd-1_ab12cd34").unwrap();
        assert_eq!(lease, "cgd-0");
        assert!(change.leader);
        assert_eq!(change.at_ms, 1_700_000_000_000.0);
        assert_eq!(pod_of(&identity), "cgd-1");
        assert!(parse_peer_line("garbage").is_none());
    }

    /// The agent's files as the application reads them: the validity written with the role, a
    /// renewal moving it, the role lost before the files are emptied.
    #[test]
    fn agent_files_give_the_beliefs_with_their_validity() {
        let role = [v(0, "unknown"), v(100, "leader"), v(900, "follower")];
        let epoch = [v(0, ""), v(100, "7"), v(900, "")];
        let until = [v(0, ""), v(99, "1100"), v(500, "1500"), v(901, "")];
        let changes = agent_changes(&role, &epoch, &until);
        let seen: Vec<(f64, bool, Option<u64>, Option<f64>)> = changes
            .iter()
            .map(|c| (c.at_ms, c.leader, c.epoch, c.valid_until_ms))
            .collect();
        assert_eq!(
            seen,
            [
                (0.0, false, None, None),
                (100.0, true, Some(7), Some(1100.0)),
                (500.0, true, Some(7), Some(1500.0)),
                (900.0, false, None, None),
            ]
        );
        let m = Member {
            name: "ours-1".into(),
            changes,
            not_running: Vec::new(),
        };
        assert!(m.believes_at(899.0) && !m.believes_at(900.0));
        // A frozen agent renews nothing: the belief ends at the last validity.
        let stuck = agent_changes(&role[..2], &epoch[..2], &until[..3]);
        let m = Member {
            changes: stuck,
            ..m
        };
        assert!(m.believes_at(1499.0) && !m.believes_at(1500.0));
    }

    /// Peers' lines: one member per process identity; the light cluster's beliefs carry the
    /// stretches in which a process did not run.
    #[test]
    fn peers_are_members_per_process() {
        let text = "1000000 started cgd-0 cgd-1_aa\n3000000 started cgd-0 cgd-2_bb\n4000000 stop";
        let members = peer_members(text);
        assert_eq!(members.len(), 2);
        assert_eq!(believers(&members, 3.5), ["cgd-1_aa", "cgd-2_bb"]);
        let beliefs = Beliefs::default();
        for line in text.lines() {
            beliefs.push_line(line);
        }
        beliefs.not_running.stopped("cgd-1_aa", at(2));
        let members = beliefs.members("cgd-0");
        assert_eq!(believers(&members, 3.5), ["cgd-2_bb"]);
        assert_eq!(
            first_start(&members, "cgd-1_aa", 2.0),
            Some(("cgd-2_bb", 3.0))
        );
        // Thawed at 5: a counts again, an overlap from 5.
        beliefs.not_running.running("cgd-1_aa", at(5));
        let r = one_group("cgd-0", beliefs.members("cgd-0")).check(Span {
            from_ms: 0.0,
            to_ms: Some(10.0),
        });
        assert_eq!(r.app_overlap_ms, 5.0);
    }
}
