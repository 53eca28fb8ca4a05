//! The GC pause on the real cluster: the ledger of
//! `examples/ledger/manifests/sidecar` (three pods, each the ledger plus the leadergroup-agent
//! sidecar) writing to a private PostgreSQL on the host bridge, reachable from the pod network
//! only. The leader's ledger container is frozen through the cgroup freezer (a stop-the-world GC
//! pause: its readiness probe fails), leadership moves, the new leader writes; the old one is
//! thawed and, with `LEDGER_WRITE_THROUGH_PAUSE`, completes the write it had checked before the
//! pause with its old epoch: PostgreSQL's fence refuses it.
//!
//! Checked over every write attempted: the ledger table in id order (commit order) and every
//! pod's `wrote` / `refused` / `failed` lines, read back through the logs API.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EnvVar, Pod, Secret};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::histories::{Accepted, fence_regressions};
use leadergroup_testenv::{InvariantWatcher, run_ok, wait_until};

use crate::cluster::{CONVERGE, Cluster, PODS, is_ready, repo_root};

/// The cluster's host bridge (`realcluster.sh`): pods reach it, nothing outside the host does.
const HOST_BRIDGE: &str = "10.250.0.1";
/// The pod network (`realcluster.sh`): the only addresses PostgreSQL trusts over TCP.
const POD_CIDR: &str = "10.244.0.0/16";
/// The group and the Deployment of the example's manifests.
const GROUP: &str = "ledger";

/// A private PostgreSQL for one test, as `examples/realdemo.sh` runs the demo's: listening on the
/// host bridge only (on a free port of its own, so the demo's 5432 does not clash), trust for
/// the pod network and the local socket only. Stopped and removed on drop.
struct HostPostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

fn as_postgres(program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(program);
    cmd
}

fn run_checked(mut cmd: Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl HostPostgres {
    fn start() -> HostPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL in /usr/lib/postgresql (controlplane/postgres-deps.sh)")
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .max()
            .map(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")))
            .expect("a PostgreSQL version in /usr/lib/postgresql");
        let port = std::net::TcpListener::bind((HOST_BRIDGE, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port on {HOST_BRIDGE} (the cluster's bridge): {e}"));
        let dir =
            std::env::temp_dir().join(format!("leadergroup-e2e-postgres-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        run_checked({
            let mut c = Command::new("chown");
            c.arg("postgres:postgres").arg(&dir);
            c
        });
        let pg = HostPostgres { bin, dir, port };
        let data = pg.dir.join("data");
        run_checked({
            let mut c = as_postgres(&pg.bin.join("initdb"));
            c.arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=reject",
                "--no-sync",
            ]);
            c
        });
        // A session idle inside a transaction for 3 s is ended: a writer frozen between its fence
        // and its commit would otherwise hold the fence row's lock, and no other writer could
        // write until it is thawed.
        let conf = format!(
            "listen_addresses = '{HOST_BRIDGE}'\nport = {port}\nunix_socket_directories = '{}'\nfsync = off\n\
             idle_in_transaction_session_timeout = '3s'\n",
            pg.dir.display()
        );
        let mut existing = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        existing.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), existing).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            format!("local all postgres trust\nhost  all all {POD_CIDR} trust\n"),
        )
        .unwrap();
        run_checked({
            let mut c = as_postgres(&pg.bin.join("pg_ctl"));
            c.arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(pg.dir.join("server.log"))
                .args(["-w", "start"]);
            c
        });
        pg
    }

    /// What the pods connect to.
    fn url(&self) -> String {
        format!("postgres://postgres@{HOST_BRIDGE}:{}/postgres", self.port)
    }

    /// The ledger table in id order, read through the local socket.
    async fn ledger(&self) -> Vec<(i64, i64, String)> {
        let conn = format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.display(),
            self.port
        );
        let (db, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        db.query("SELECT id, epoch, writer FROM ledger ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
}

impl Drop for HostPostgres {
    fn drop(&mut self) {
        let stopped = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .output();
        if !stopped.is_ok_and(|o| o.status.success()) {
            eprintln!(
                "gc-pause: could not stop PostgreSQL in {}",
                self.dir.display()
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One event line of the ledger (`ledger: ` removed) with the kubelet's timestamp.
#[derive(Clone, Debug)]
struct Line {
    at: SystemTime,
    text: String,
}

/// The value of `key=` in an event line.
fn field<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn num(line: &str, key: &str) -> Option<i64> {
    field(line, key)?.parse().ok()
}

/// The ledger container's event lines of pod `pod`, through the logs API.
async fn events(pods: &Api<Pod>, pod: &str) -> Vec<Line> {
    let params = LogParams {
        container: Some("ledger".into()),
        timestamps: true,
        ..LogParams::default()
    };
    let Ok(log) = pods.logs(pod, &params).await else {
        return Vec::new();
    };
    log.lines()
        .filter_map(|l| {
            let (ts, rest) = l.split_once(' ')?;
            let text = rest.strip_prefix("ledger: ")?;
            let at: jiff::Timestamp = ts.parse().ok()?;
            Some(Line {
                at: SystemTime::from(at),
                text: text.to_owned(),
            })
        })
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn since(a: SystemTime, b: SystemTime) -> Duration {
    b.duration_since(a).unwrap_or_default()
}

/// The group's leader and epoch when its status names a leader that is Ready and not `not`.
async fn leader(
    groups: &Api<LeaderGroup>,
    pods: &Api<Pod>,
    not: Option<&str>,
) -> Option<(String, i64)> {
    let status = groups.get(GROUP).await.ok()?.status?;
    let leader = status.leader?;
    if Some(leader.as_str()) == not {
        return None;
    }
    let pod = pods.get(&leader).await.ok()?;
    is_ready(&pod).then_some((leader, status.epoch))
}

/// Over every write attempted: accepted epochs never decrease in commit order, no older epoch is
/// accepted once a newer one has been, each epoch has one writer, every `wrote` line is a row,
/// every refusal was of a stale epoch, and the thawed leader was refused at its old epoch.
#[tokio::test]
async fn a_thawed_ledger_leader_is_refused_by_postgresql() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let postgres = HostPostgres::start();
    println!(
        "gc-pause: PostgreSQL on {HOST_BRIDGE}:{} (pods only; data in {})",
        postgres.port,
        postgres.dir.display()
    );
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-gc-pause")
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    let pods: Api<Pod> = ns.api();
    let groups: Api<LeaderGroup> = ns.api();
    let watch = InvariantWatcher::start(&c.client, &ns.name).await;

    // The example's manifests as a user applies them, with the Secret they expect, and the
    // Deployment with LEDGER_WRITE_THROUGH_PAUSE added.
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ledger-db"},
        "stringData": {"url": postgres.url()},
    }))
    .unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let manifests = repo_root().join("examples/ledger/manifests/sidecar");
    for file in ["rbac.yaml", "leadergroup.yaml", "service.yaml"] {
        let mut apply = c.cp.kubectl();
        apply
            .args(["--namespace", &ns.name, "apply", "-f"])
            .arg(manifests.join(file));
        run_ok(apply).await;
    }
    let mut deployment: Deployment = serde_yaml_ng::from_str(
        &std::fs::read_to_string(manifests.join("deployment.yaml")).unwrap(),
    )
    .unwrap();
    let spec = &mut deployment.spec;
    assert_eq!(spec.replicas, Some(3));
    let ledger = spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers
        .iter_mut()
        .find(|c| c.name == "ledger")
        .expect("the ledger container");
    ledger.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: "LEDGER_WRITE_THROUGH_PAUSE".into(),
        value: Some("true".into()),
        ..EnvVar::default()
    });
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let summary = || async {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        let status = groups.get(GROUP).await.ok().and_then(|g| g.status);
        format!(
            "status: {status:?}\npods: {:#?}",
            crate::cluster::pod_summary(&list)
        )
    };

    // Three Ready pods, a leader, and its writes.
    let ready = wait_until("three Ready ledger pods", PODS, || async {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        Ok::<_, String>((list.len() == 3 && list.iter().all(is_ready)).then_some(()))
    })
    .await;
    if let Err(e) = ready {
        panic!("{e}\n{}", summary().await);
    }
    let (old, old_epoch) = match wait_until("the leader's third write", CONVERGE, || async {
        let Some((leader, epoch)) = leader(&groups, &pods, None).await else {
            return Ok::<_, String>(None);
        };
        let wrote = events(&pods, &leader)
            .await
            .iter()
            .filter(|l| l.text.starts_with("wrote ") && num(&l.text, "epoch") == Some(epoch))
            .count();
        Ok((wrote >= 3).then_some((leader, epoch)))
    })
    .await
    {
        Ok(l) => l,
        Err(e) => panic!("{e}\n{}", summary().await),
    };
    println!("gc-pause: {old} leads at epoch {old_epoch} and writes");

    // The GC pause.
    let old_pod = pods.get(&old).await.unwrap();
    let frozen_at = SystemTime::now();
    let frozen_instant = Instant::now();
    let frozen = c.freeze_container(&old_pod);
    println!("gc-pause: {old}'s ledger container frozen (cgroup freezer)");
    let (new, new_epoch) = match wait_until("a new leader", CONVERGE, || async {
        Ok::<_, String>(leader(&groups, &pods, Some(&old)).await)
    })
    .await
    {
        Ok(l) => l,
        Err(e) => panic!("{e}\n{}", summary().await),
    };
    let handover = frozen_instant.elapsed();
    let first_new_write = match wait_until("the new leader's write", CONVERGE, || async {
        Ok::<_, String>(
            events(&pods, &new)
                .await
                .into_iter()
                .find(|l| l.text.starts_with("wrote ") && num(&l.text, "epoch") == Some(new_epoch)),
        )
    })
    .await
    {
        Ok(l) => l,
        Err(e) => panic!("{e}\n{}", summary().await),
    };
    println!(
        "gc-pause: {new} leads at epoch {new_epoch} ({} after the freeze) and writes: {}",
        ms(handover),
        first_new_write.text
    );

    // The thaw: the old writer completes the write it checked before the pause. The clock is read
    // before the thaw: the thawed process may log its refusal before `thaw` returns.
    let thawed_at = SystemTime::now();
    frozen.thaw().unwrap();
    let frozen_for = since(frozen_at, thawed_at);
    drop(frozen);
    println!(
        "gc-pause: {old} thawed after {}: it still holds epoch {old_epoch}",
        ms(frozen_for)
    );
    let refusal = match wait_until("the thawed writer's refusal", CONVERGE, || async {
        Ok::<_, String>(
            events(&pods, &old)
                .await
                .into_iter()
                .find(|l| l.at >= thawed_at && l.text.starts_with("refused ")),
        )
    })
    .await
    {
        Ok(l) => l,
        Err(e) => {
            let lines: Vec<String> = events(&pods, &old)
                .await
                .into_iter()
                .filter(|l| l.at >= frozen_at)
                .map(|l| l.text)
                .collect();
            panic!(
                "{e}\n{}\nthe thawed writer's lines since the freeze: {lines:#?}",
                summary().await
            )
        }
    };
    println!("gc-pause: PostgreSQL refused it: {}", refusal.text);
    // A few more writes of the new leader, then the writers stop before the table is read.
    let after = SystemTime::now();
    wait_until("the new leader writing on", CONVERGE, || async {
        let n = events(&pods, &new)
            .await
            .iter()
            .filter(|l| l.at > after && l.text.starts_with("wrote "))
            .count();
        Ok::<_, String>((n >= 2).then_some(()))
    })
    .await
    .unwrap();
    let mut scale = c.cp.kubectl();
    scale.args([
        "--namespace",
        &ns.name,
        "scale",
        "deployment/ledger",
        "--replicas=0",
    ]);
    run_ok(scale).await;
    // The logs first (the pods are still there while they stop), then the table.
    let mut reported = Vec::new();
    let mut refusals = Vec::new();
    let mut failed = 0;
    // The thawed writer's refusals (first to last) and when it learned it no longer leads.
    let old_lines = events(&pods, &old).await;
    let old_refused: Vec<SystemTime> = old_lines
        .iter()
        .filter(|l| l.at >= thawed_at && l.text.starts_with("refused "))
        .map(|l| l.at)
        .collect();
    let old_role_lost = old_lines
        .iter()
        .find(|l| l.at >= thawed_at && l.text.starts_with("role ") && !l.text.contains("leader/"))
        .map(|l| since(thawed_at, l.at));
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let name = pod.name_any();
        for l in events(&pods, &name).await {
            if l.text.starts_with("wrote ")
                && let (Some(id), Some(epoch)) = (num(&l.text, "id"), num(&l.text, "epoch"))
            {
                reported.push((id, epoch, name.clone()));
            } else if l.text.starts_with("refused ")
                && let (Some(presented), Some(fence)) =
                    (num(&l.text, "epoch"), num(&l.text, "fence"))
            {
                refusals.push((name.clone(), presented, fence));
            } else if l.text.starts_with("failed ") {
                failed += 1;
            }
        }
    }
    wait_until("the ledger pods stopped", PODS, || async {
        let n = pods.list(&ListParams::default()).await.unwrap().items.len();
        Ok::<_, String>((n == 0).then_some(()))
    })
    .await
    .unwrap();
    let rows = postgres.ledger().await;

    let mut violations = Vec::new();
    // The ledger's ids are its commit order: the fence's log, as the histories check it.
    let accepted: Vec<Accepted> = rows
        .iter()
        .map(|(id, epoch, _)| Accepted {
            at_ms: *id as f64,
            token: u64::try_from(*epoch).unwrap_or(0),
        })
        .collect();
    for r in fence_regressions(&accepted) {
        violations.push(format!(
            "row {} at epoch {} accepted after row {} at epoch {}",
            r.at_ms, r.token, r.newest_at_ms, r.newest
        ));
    }
    let mut writer_of = std::collections::BTreeMap::new();
    for row in &rows {
        if let Some(other) = writer_of.insert(row.1, &row.2)
            && other != &row.2
        {
            violations.push(format!(
                "epoch {} written by {other} and by {}",
                row.1, row.2
            ));
        }
    }
    for r in &reported {
        if !rows.contains(r) {
            violations.push(format!("reported write {r:?} is not in the ledger"));
        }
    }
    for r in &refusals {
        if r.1 >= r.2 {
            violations.push(format!("refusal {r:?} was not of a stale epoch"));
        }
    }
    if !refusals
        .iter()
        .any(|r| r.0 == old && r.1 == old_epoch && r.2 >= new_epoch)
    {
        violations.push(format!(
            "the thawed writer {old} was never refused at epoch {old_epoch}"
        ));
    }
    if new_epoch <= old_epoch {
        violations.push(format!("new epoch {new_epoch} not above {old_epoch}"));
    }
    assert!(
        violations.is_empty(),
        "{}\nrows: {rows:?}\nrefusals: {refusals:?}",
        violations.join("\n")
    );
    watch.assert_held().await;
    let epochs: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.1).collect();
    println!(
        "gc-pause: {} writes accepted (epochs {epochs:?}), {} stale write(s) refused, {failed} failed; \
         old leader {old} at epoch {old_epoch}, new leader {new} at epoch {new_epoch}; frozen {}, \
         freeze to the new leader seen (polled) {}, freeze to its first write {}, thaw to the \
         first refusal {}; the thawed writer refused {} time(s) until its role was lost {} after \
         the thaw (times of the log lines: the kubelet's timestamps)",
        rows.len(),
        refusals.len(),
        ms(frozen_for),
        ms(handover),
        ms(since(frozen_at, first_new_write.at)),
        ms(since(thawed_at, refusal.at)),
        old_refused.len(),
        old_role_lost.map_or("(not seen)".to_owned(), ms),
    );
}
