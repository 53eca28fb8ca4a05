//! What each candidate process believed, and when, read from the files its pod writes on the
//! node: ours from the agent's `role` file (its mtime: the moment the agent wrote the new role),
//! a peer from the lines it appends to its events file (`<unix ns> started|stopped <lease>
//! <identity>`, stamped by the candidate when its library called back). All nodes of the real
//! cluster run on this machine, so the node files and the harness share one clock. The peers'
//! candidate processes on the light cluster print the same lines ([`crate::peers`]), judged by the
//! same rules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use leadergroup_testenv::pods::node_of;
use leadergroup_testenv::{FileHistory, RealCluster};

/// The label naming a candidate pod's system (`ours`, `cgd`, ...).
pub const SYSTEM_LABEL: &str = "bench.leadergroup.io/system";

/// One change of belief of one candidate process.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// When the candidate learned it (see the module doc for whose clock).
    pub at: SystemTime,
    /// The process: ours, the pod's name (its agent); a peer, `<pod>_<8 hex>` (one per process
    /// start, as controller-runtime makes its identity, so a restarted container is a new one).
    pub identity: String,
    /// It believes it leads from here on.
    pub leading: bool,
}

/// Every change of belief seen so far, per key (a system's, or a Lease's), and the identities
/// excluded from believing (see [`Exclusion`]), shared by the task that reads them and the
/// harness that judges them. Identities are unique across keys, so one list of exclusions serves
/// every key.
#[derive(Clone, Default)]
pub struct Beliefs(Arc<Mutex<Believed>>);

#[derive(Default)]
struct Believed {
    events: BTreeMap<String, Vec<Event>>,
    excluded: Vec<Exclusion>,
}

impl Beliefs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Believed> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `event` under `key`.
    pub fn push(&self, key: &str, event: Event) {
        self.lock()
            .events
            .entry(key.to_owned())
            .or_default()
            .push(event);
    }

    /// Every event of `key` so far, by time.
    pub fn of(&self, key: &str) -> Vec<Event> {
        let mut list = self.lock().events.get(key).cloned().unwrap_or_default();
        list.sort_by_key(|e| e.at);
        list
    }

    /// From `from` on, `identity` does not count as believing it leads.
    pub fn exclude(&self, identity: &str, from: SystemTime) {
        let (identity, until) = (identity.to_owned(), None);
        self.lock().excluded.push(Exclusion {
            identity,
            from,
            until,
        });
    }

    /// From `until` on, `identity` counts again (a frozen process thawed).
    pub fn end_exclusion(&self, identity: &str, until: SystemTime) {
        for e in self
            .lock()
            .excluded
            .iter_mut()
            .filter(|e| e.identity == identity)
        {
            e.until.get_or_insert(until);
        }
    }

    /// [`believers_at`] `t` among `events`.
    pub fn believers(&self, events: &[Event], t: SystemTime) -> Vec<String> {
        believers_at(events, t, &self.lock().excluded)
    }

    /// [`split_brains`] within `[from, to]` among `events`.
    pub fn split_brains(&self, events: &[Event], from: SystemTime, to: SystemTime) -> u64 {
        split_brains(events, from, to, &self.lock().excluded)
    }
}

/// The pod an identity runs in.
pub fn pod_of(identity: &str) -> &str {
    identity.split('_').next().unwrap_or(identity)
}

/// From `from` on, `identity` does not count as believing it leads (it was killed, deleted or
/// frozen), until its next event or `until` (a frozen process thawed).
#[derive(Clone, Debug)]
pub struct Exclusion {
    pub identity: String,
    pub from: SystemTime,
    pub until: Option<SystemTime>,
}

/// Identities that believe they lead at `t` (their last event at or before `t` says so), less
/// the excluded ones.
pub fn believers_at(events: &[Event], t: SystemTime, exclusions: &[Exclusion]) -> Vec<String> {
    let mut last: BTreeMap<&str, &Event> = BTreeMap::new();
    for e in events.iter().filter(|e| e.at <= t) {
        match last.get(e.identity.as_str()) {
            Some(prev) if prev.at > e.at => {}
            _ => {
                last.insert(&e.identity, e);
            }
        }
    }
    last.into_iter()
        .filter(|(_, e)| e.leading)
        .filter(|(id, e)| {
            !exclusions.iter().any(|x| {
                x.identity == *id && x.from <= t && x.until.is_none_or(|u| t < u) && e.at <= x.from
            })
        })
        .map(|(id, _)| id.to_owned())
        .collect()
}

/// How often, within `[from, to]`, a candidate started leading while another (not excluded)
/// still believed it led: a split brain.
pub fn split_brains(
    events: &[Event],
    from: SystemTime,
    to: SystemTime,
    exclusions: &[Exclusion],
) -> u64 {
    let mut count = 0;
    for e in events
        .iter()
        .filter(|e| e.leading && e.at >= from && e.at <= to)
    {
        let others: Vec<String> = believers_at(events, e.at, exclusions)
            .into_iter()
            .filter(|id| *id != e.identity)
            .collect();
        if !others.is_empty() {
            count += 1;
        }
    }
    count
}

/// The first candidate other than `old` that started leading at or after `t0`.
pub fn first_new_leader(events: &[Event], old: &str, t0: SystemTime) -> Option<Event> {
    events
        .iter()
        .filter(|e| e.leading && e.identity != old && e.at >= t0)
        .min_by_key(|e| e.at)
        .cloned()
}

/// A peer candidate's line, `<unix nanoseconds> started|stopped <lease> <identity>`: the Lease
/// and the event.
pub fn parse_peer_line(line: &str) -> Option<(String, Event)> {
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
    let event = Event {
        at: UNIX_EPOCH + Duration::from_nanos(nanos),
        identity: (*identity).to_owned(),
        leading,
    };
    Some(((*lease).to_owned(), event))
}

/// Follows the files of every candidate pod of a namespace (the pods listed every second, the
/// files polled by [`FileHistory`], under their pod's UID); the events of a system are read from
/// them when asked.
pub struct Tracker {
    pub beliefs: Beliefs,
    files: Arc<FileHistory>,
    pods: Arc<Mutex<Vec<Followed>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A candidate pod whose file is followed.
struct Followed {
    uid: String,
    system: String,
    pod: String,
    /// It publishes through the agent's `role` file (else: a peer's events file).
    ours: bool,
}

/// The agent's volume in our pods, and the peers' events volume (bench/manifests/e2e-*-pod.yaml).
const AGENT_VOLUME: &str = "leadergroup";
const EVENTS_VOLUME: &str = "events";

impl Tracker {
    /// Starts following; `ours` tells which systems publish through the agent.
    pub fn start(pods: Api<Pod>, cluster: PathBuf, ours: fn(&str) -> bool) -> Tracker {
        let files = Arc::new(FileHistory::start(Vec::new()));
        let followed: Arc<Mutex<Vec<Followed>>> = Arc::default();
        let (add, found) = (Arc::clone(&files), Arc::clone(&followed));
        let task = tokio::spawn(async move {
            let params = ListParams::default().labels(SYSTEM_LABEL);
            loop {
                let listed = pods.list(&params).await.map(|l| l.items);
                for p in listed.unwrap_or_default() {
                    let (Some(uid), Some(node), Some(system)) =
                        (p.uid(), node_of(&p), p.labels().get(SYSTEM_LABEL))
                    else {
                        continue;
                    };
                    let mut found = found.lock().unwrap_or_else(PoisonError::into_inner);
                    let (system, ours) = (system.clone(), ours(system));
                    let (volume, file) = match ours {
                        true => (AGENT_VOLUME, "role"),
                        false => (EVENTS_VOLUME, "events.log"),
                    };
                    let dir = RealCluster::empty_dir(&cluster, node, &uid, volume);
                    if let (Ok(dir), false) = (dir, found.iter().any(|f| f.uid == uid)) {
                        add.add(&uid, dir.join(file));
                        let pod = p.name_any();
                        found.push(Followed {
                            uid,
                            system,
                            pod,
                            ours,
                        });
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let (beliefs, pods) = (Beliefs::default(), followed);
        Tracker {
            beliefs,
            files,
            pods,
            task,
        }
    }

    /// Every change of belief of `system`'s candidates so far, by time: ours from each version
    /// of the `role` file that changed whether it reads `leader`; a peer from every complete
    /// line of its events file.
    pub fn of(&self, system: &str) -> Vec<Event> {
        let pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        let mut events = Vec::new();
        for Followed { uid, pod, ours, .. } in pods.iter().filter(|f| f.system == system) {
            let history = self.files.history(uid);
            if *ours {
                let mut last = None;
                for (at, role) in history {
                    let leading = role.trim() == "leader";
                    if last.replace(leading) != Some(leading) {
                        let identity = pod.clone();
                        events.push(Event {
                            at,
                            identity,
                            leading,
                        });
                    }
                }
            } else if let Some((_, text)) = history.last() {
                let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
                events.extend(complete.lines().filter_map(|l| Some(parse_peer_line(l)?.1)));
            }
        }
        events.sort_by_key(|e| e.at);
        events
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn ev(ms: u64, id: &str, leading: bool) -> Event {
        Event {
            at: at(ms),
            identity: id.into(),
            leading,
        }
    }

    /// One list of exclusions serves every key: a stopped process is excluded wherever its
    /// events are, until a thaw ends its exclusion.
    #[test]
    fn beliefs_judge_each_key_with_the_shared_exclusions() {
        let beliefs = Beliefs::default();
        for (key, e) in [("x", ev(0, "a", true)), ("x", ev(200, "b", true))] {
            beliefs.push(key, e);
        }
        beliefs.push("y", ev(0, "c", true));
        let (x, y) = (beliefs.of("x"), beliefs.of("y"));
        assert_eq!(beliefs.split_brains(&x, at(0), at(300)), 1);
        beliefs.exclude("a", at(100));
        assert_eq!(beliefs.split_brains(&x, at(0), at(300)), 0);
        assert_eq!(beliefs.believers(&x, at(210)), vec!["b"]);
        assert_eq!(beliefs.believers(&y, at(210)), vec!["c"]);
        beliefs.end_exclusion("a", at(250));
        assert_eq!(beliefs.believers(&x, at(260)), vec!["a", "b"]);
        assert_eq!(x.len(), 2);
    }

    #[test]
    fn a_peer_line_is_parsed() {
        let (lease, e) =
            parse_peer_line("1700000000000000000 started cgd-0 cgd-1_ab12cd34").unwrap();
        assert_eq!(lease, "cgd-0");
        assert!(e.leading);
        assert_eq!(pod_of(&e.identity), "cgd-1");
        assert!(parse_peer_line("garbage").is_none());
    }

    #[test]
    fn split_brains_skip_excluded_processes_and_count_live_ones() {
        // a leads; a is killed at 100 (excluded); b starts at 200: no split brain.
        let events = vec![ev(0, "a", true), ev(200, "b", true)];
        let killed = [Exclusion {
            identity: "a".into(),
            from: at(100),
            until: None,
        }];
        assert_eq!(split_brains(&events, at(0), at(300), &killed), 0);
        // Cut off, not excluded: a still believes when b starts.
        assert_eq!(split_brains(&events, at(0), at(300), &[]), 1);
        // a stopped before b started.
        let events = vec![ev(0, "a", true), ev(150, "a", false), ev(200, "b", true)];
        assert_eq!(split_brains(&events, at(0), at(300), &[]), 0);
        // A frozen a, thawed at 250: excluded until then, so b's start at 200 is no split brain,
        // and a counts again after the thaw.
        let events = vec![ev(0, "a", true), ev(200, "b", true)];
        let frozen = [Exclusion {
            identity: "a".into(),
            from: at(100),
            until: Some(at(250)),
        }];
        assert_eq!(split_brains(&events, at(0), at(300), &frozen), 0);
        assert_eq!(believers_at(&events, at(260), &frozen), vec!["a", "b"]);
        // An excluded process that speaks again counts again.
        let events = vec![ev(0, "a", true), ev(120, "a", true), ev(200, "b", true)];
        assert_eq!(split_brains(&events, at(0), at(300), &killed), 1);
        assert_eq!(
            first_new_leader(&events, "a", at(100)).map(|e| e.identity),
            Some("b".into())
        );
    }
}
