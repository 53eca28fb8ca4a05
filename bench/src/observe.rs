//! What the bench observes from outside the systems under test: the API server's own request
//! counters, a process's RSS and CPU time, and the leader labels on pods through an independent
//! watch.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use leadergroup_operator::crd::ROLE_LABEL;
use leadergroup_testenv::pods::{is_leader, marked_group};
use leadergroup_testenv::{Seen, Watched};

use crate::error::{Error, Result};

/// `apiserver_request_total` summed over codes and scopes, keyed by "VERB resource[/subresource]".
pub type RequestCounts = BTreeMap<String, f64>;

/// Reads the API server's `/metrics` (the admin client may) and sums `apiserver_request_total`.
pub async fn api_requests(client: &Client) -> Result<RequestCounts> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| Error::Other(format!("building GET /metrics: {e}")))?;
    let text = client.request_text(request).await?;
    Ok(parse_request_total(&text))
}

fn parse_request_total(text: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.trim_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
        if resource.is_empty() {
            // Non-resource URLs: /metrics (the bench itself), /healthz, /version.
            continue;
        }
        let key = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        *counts.entry(key).or_default() += value;
    }
    counts
}

/// Per-second rates between two scrapes `seconds` apart, less a `baseline` rate (what the API
/// server does by itself: its own lease, endpoints), never below zero.
pub fn rates(
    before: &RequestCounts,
    after: &RequestCounts,
    seconds: f64,
    baseline: Option<&RequestCounts>,
) -> RequestCounts {
    let mut out = RequestCounts::new();
    for (key, a) in after {
        let b = before.get(key).copied().unwrap_or(0.0);
        let base = baseline.and_then(|r| r.get(key)).copied().unwrap_or(0.0);
        let rate = ((a - b) / seconds - base).max(0.0);
        if rate > 0.0 {
            out.insert(key.clone(), rate);
        }
    }
    out
}

/// A steady-state window of one system.
#[derive(Clone, Debug, Default)]
pub struct Steady {
    pub seconds: f64,
    /// Requests per second by verb and resource, less the baseline.
    pub requests: RequestCounts,
    /// CPU seconds per minute the system used.
    pub cpu_s_per_min: f64,
    /// The system's process sample at the end.
    pub end: ProcSample,
}

/// Measures a steady-state window of `length`: the API server's requests (less `baseline`) and
/// the CPU time of the system `sample` reads.
pub async fn steady_window(
    admin: &Client,
    length: Duration,
    baseline: Option<&RequestCounts>,
    sample: impl Fn() -> ProcSample,
) -> Result<Steady> {
    let before = api_requests(admin).await?;
    let cpu0 = sample().cpu_seconds;
    let t0 = std::time::Instant::now();
    tokio::time::sleep(length).await;
    let end = sample();
    let seconds = t0.elapsed().as_secs_f64();
    let after = api_requests(admin).await?;
    Ok(Steady {
        seconds: length.as_secs_f64(),
        requests: rates(&before, &after, seconds, baseline),
        cpu_s_per_min: (end.cpu_seconds - cpu0) / seconds * 60.0,
        end,
    })
}

/// Verbs that read without watching: what "no polling reads" forbids.
pub fn is_polling_read(key: &str) -> bool {
    key.starts_with("GET ") || key.starts_with("LIST ")
}

/// Verbs that write.
pub fn is_write(key: &str) -> bool {
    ["PUT ", "PATCH ", "POST ", "APPLY ", "DELETE "]
        .iter()
        .any(|v| key.starts_with(v))
}

/// CPU time (user + system) and memory of a process, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// User plus system CPU seconds so far.
    pub cpu_seconds: f64,
    /// Resident set size, MiB.
    pub rss_mib: f64,
    /// Peak resident set size (VmHWM), MiB.
    pub peak_rss_mib: f64,
}

/// Samples process `pid`; None when it is gone.
pub fn proc_sample(pid: u32, ticks_per_second: f64) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields count from after its closing parenthesis.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Some(ProcSample {
        cpu_seconds: (utime + stime) / ticks_per_second,
        rss_mib: kib("VmRSS:") / 1024.0,
        peak_rss_mib: kib("VmHWM:") / 1024.0,
    })
}

/// The kernel's clock ticks per second for /proc times (`getconf CLK_TCK`; 100 on Linux).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The leader of one group as the independent watcher saw it.
#[derive(Clone, Debug)]
pub struct SeenLeader {
    pub pod: String,
    /// When the watch event that showed it arrived.
    pub at: SystemTime,
}

#[derive(Default)]
struct LeaderState {
    /// pod -> (group annotation, labeled leader)
    pods: HashMap<String, (String, bool)>,
    leaders: HashMap<String, SeenLeader>,
    /// Times a group showed two pods labeled leader at once (I1; must stay 0).
    double_leaders: u64,
    /// Times a group's labeled leader changed: another pod, or none (the first leader too).
    leader_changes: u64,
}

/// Watches the pods of one namespace and records, per group, the pod labeled leader and when the
/// label was first seen: the clock the operator's handovers are measured with.
pub struct LeaderWatch(Watched<LeaderState>);

impl LeaderWatch {
    /// Starts watching; returns once the first list is in.
    pub async fn start(client: &Client, namespace: &str) -> Result<LeaderWatch> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().labels(ROLE_LABEL);
        let watched = Watched::new(LeaderState::default()).watch(api, config, |s, seen| {
            let now = SystemTime::now();
            match seen {
                Seen::Listed(pods) => pods.iter().for_each(|p| s.apply(p, now)),
                Seen::Applied(p) => s.apply(&p, now),
                Seen::Deleted(p) => s.remove(&p.name_any()),
                Seen::Relisting | Seen::Failed => {}
            }
        });
        match watched.synced(Duration::from_secs(60)).await {
            (watched, true) => Ok(LeaderWatch(watched)),
            _ => Err(Error::Timeout("the leader watch's first list".into())),
        }
    }

    /// The current leader of `group`.
    pub fn leader(&self, group: &str) -> Option<SeenLeader> {
        self.0.lock().leaders.get(group).cloned()
    }

    /// How often two pods of a group were seen labeled leader at once.
    pub fn double_leaders(&self) -> u64 {
        self.0.lock().double_leaders
    }

    /// How often a group's labeled leader changed (to another pod or to none), the first
    /// leaders included: a restart that flaps no label leaves it where it was.
    pub fn leader_changes(&self) -> u64 {
        self.0.lock().leader_changes
    }

    /// Waits until `group` is led by a pod other than `not`.
    pub async fn wait_new_leader(
        &self,
        group: &str,
        not: Option<&str>,
        timeout: Duration,
    ) -> Result<SeenLeader> {
        recheck(&format!("a new leader of {group}"), timeout, || {
            self.leader(group).filter(|l| Some(l.pod.as_str()) != not)
        })
        .await
    }
}

/// How often a wait on what a watch recorded re-checks it: what the wait returns carries the
/// watch's own time stamps, not the check's.
const RECHECK: Duration = Duration::from_millis(5);

/// Waits until `check` returns something, re-checking it every [`RECHECK`].
pub async fn recheck<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let poll = || std::future::ready(Ok::<_, Error>(check()));
    Ok(leadergroup_testenv::wait_until_every(what, timeout, RECHECK, poll).await?)
}

impl LeaderState {
    fn apply(&mut self, pod: &Pod, now: SystemTime) {
        let name = pod.name_any();
        let group = marked_group(pod).unwrap_or_default().to_owned();
        self.pods.insert(name, (group.clone(), is_leader(pod)));
        self.settle(&group, now);
    }

    fn remove(&mut self, name: &str) {
        if let Some((group, _)) = self.pods.remove(name) {
            self.settle(&group, SystemTime::now());
        }
    }

    fn settle(&mut self, group: &str, now: SystemTime) {
        let leaders: Vec<&String> = self
            .pods
            .iter()
            .filter(|(_, (g, leads))| g == group && *leads)
            .map(|(p, _)| p)
            .collect();
        match leaders.as_slice() {
            [] => {
                if self.leaders.remove(group).is_some() {
                    self.leader_changes += 1;
                }
            }
            [one] => {
                if self.leaders.get(group).map(|l| &l.pod) != Some(*one) {
                    self.leader_changes += 1;
                    let pod = (*one).clone();
                    self.leaders
                        .insert(group.to_owned(), SeenLeader { pod, at: now });
                }
            }
            _ => self.double_leaders += 1,
        }
    }
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
pub fn ms_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_totals_are_summed_by_verb_and_resource() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
"#;
        let counts = parse_request_total(text);
        assert_eq!(counts.get("PUT leases"), Some(&9.0));
        assert_eq!(counts.get("PATCH pods/status"), Some(&3.0));
        assert_eq!(counts.len(), 2);
        let later: RequestCounts = [("PUT leases".to_owned(), 19.0)].into();
        let r = rates(
            &counts,
            &later,
            5.0,
            Some(&[("PUT leases".to_owned(), 1.0)].into()),
        );
        assert_eq!(r.get("PUT leases"), Some(&1.0));
        assert!(is_write("PUT leases") && !is_polling_read("PUT leases"));
        assert!(is_polling_read("LIST pods") && is_polling_read("GET leases"));
    }
}
