//! What each candidate process believed, and when, read from the files its pod writes on the
//! node: ours from the agent's `role` file (its mtime: the moment the agent wrote the new role),
//! a peer from the lines it appends to its events file (`<unix ns> started|stopped <lease>
//! <identity>`, stamped by the candidate when its library called back). All nodes of the real
//! cluster run on this machine, so the node files and the harness share one clock. The peers'
//! candidate processes on the light cluster print the same lines ([`crate::peers`]), judged by the
//! same rules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use leadergroup_testenv::{RealCluster, read_with_mtime};

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
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    /// [`believers_at`] `t` among the events of `key`.
    pub fn believers(&self, key: &str, t: SystemTime) -> Vec<String> {
        believers_at(&self.of(key), t, &self.lock().excluded)
    }

    /// [`split_brains`] within `[from, to]` among the events of `key`.
    pub fn split_brains(&self, key: &str, from: SystemTime, to: SystemTime) -> u64 {
        split_brains(&self.of(key), from, to, &self.lock().excluded)
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

/// What a source file is, and how far it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The agent's `role` file (`leader`, `follower` or `unknown`), and the leading state last
    /// read.
    RoleFile(Option<bool>),
    /// A peer's appended stdout, and the bytes consumed.
    EventLog(usize),
}

struct Source {
    system: String,
    pod: String,
    path: PathBuf,
    kind: Kind,
}

impl Source {
    fn poll(&mut self) -> Vec<Event> {
        match &mut self.kind {
            Kind::RoleFile(last) => {
                let Ok((at, role)) = read_with_mtime(&self.path) else {
                    return Vec::new();
                };
                let leading = role.trim() == "leader";
                if last.replace(leading) == Some(leading) {
                    return Vec::new();
                }
                let identity = self.pod.clone();
                vec![Event {
                    at,
                    identity,
                    leading,
                }]
            }
            Kind::EventLog(consumed) => {
                let Ok(text) = std::fs::read_to_string(&self.path) else {
                    return Vec::new();
                };
                let Some(end) = text.get(*consumed..).and_then(|fresh| fresh.rfind('\n')) else {
                    return Vec::new();
                };
                let complete = &text[*consumed..=*consumed + end];
                *consumed += complete.len();
                complete
                    .lines()
                    .filter_map(|l| Some(parse_peer_line(l)?.1))
                    .collect()
            }
        }
    }
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

/// Polls the files of every candidate pod of a namespace (the pods listed every second, the
/// files read every 10 ms) and keeps every event, per system.
pub struct Tracker {
    pub beliefs: Beliefs,
    task: tokio::task::JoinHandle<()>,
}

/// The agent's volume in our pods, and the peers' events volume (bench/manifests/e2e-*-pod.yaml).
const AGENT_VOLUME: &str = "leadergroup";
const EVENTS_VOLUME: &str = "events";

impl Tracker {
    /// Starts polling; `ours` tells which systems publish through the agent.
    pub fn start(pods: Api<Pod>, cluster: PathBuf, ours: fn(&str) -> bool) -> Tracker {
        let beliefs = Beliefs::default();
        let record = beliefs.clone();
        let task = tokio::spawn(async move {
            let mut sources: BTreeMap<String, Source> = BTreeMap::new();
            let mut listed: Option<Instant> = None;
            loop {
                if listed.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    listed = Some(Instant::now());
                    discover(&pods, &cluster, ours, &mut sources).await;
                }
                for src in sources.values_mut() {
                    for e in src.poll() {
                        tracing_event(&src.system, &src.pod, &e);
                        record.push(&src.system, e);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Tracker { beliefs, task }
    }
}

/// Adds a source for every candidate pod of `pods` not followed yet (`ours` tells which
/// systems publish through the agent).
async fn discover(
    pods: &Api<Pod>,
    cluster: &Path,
    ours: fn(&str) -> bool,
    sources: &mut BTreeMap<String, Source>,
) {
    let params = ListParams::default().labels(SYSTEM_LABEL);
    let Ok(list) = pods.list(&params).await else {
        return;
    };
    for p in list.items {
        let (Some(uid), Some(node), Some(system)) = (
            p.uid(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            p.labels().get(SYSTEM_LABEL).cloned(),
        ) else {
            continue;
        };
        if sources.contains_key(&uid) {
            continue;
        }
        let (kind, volume, file) = if ours(&system) {
            (Kind::RoleFile(None), AGENT_VOLUME, "role")
        } else {
            (Kind::EventLog(0), EVENTS_VOLUME, "events.log")
        };
        let Ok(dir) = RealCluster::empty_dir(cluster, &node, &uid, volume) else {
            continue;
        };
        let path = dir.join(file);
        let pod = p.name_any();
        let source = Source {
            system,
            pod,
            path,
            kind,
        };
        sources.insert(uid, source);
    }
}

/// Verbose runs (`LEADERGROUP_BENCH_TRACE=1`) print every event as it is read.
fn tracing_event(system: &str, pod: &str, e: &Event) {
    if std::env::var_os("LEADERGROUP_BENCH_TRACE").is_some() {
        let t = jiff::Timestamp::try_from(e.at)
            .map(|t| t.strftime("%H:%M:%S%.3f").to_string())
            .unwrap_or_default();
        tracing::info!(
            "  {system} {pod}: {} {} at {t}",
            e.identity,
            if e.leading { "leads" } else { "does not lead" }
        );
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
        assert_eq!(beliefs.split_brains("x", at(0), at(300)), 1);
        beliefs.exclude("a", at(100));
        assert_eq!(beliefs.split_brains("x", at(0), at(300)), 0);
        assert_eq!(beliefs.believers("x", at(210)), vec!["b"]);
        assert_eq!(beliefs.believers("y", at(210)), vec!["c"]);
        beliefs.end_exclusion("a", at(250));
        assert_eq!(beliefs.believers("x", at(260)), vec!["a", "b"]);
        assert_eq!(beliefs.of("x").len(), 2);
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
