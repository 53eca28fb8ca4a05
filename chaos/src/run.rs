//! The run: its control plane, two operator replicas, the groups and their pods' applications,
//! then the plan's faults one after another (each undone on its own, later, so they overlap), with
//! a settled check (I2) every round, while an independent watch checks I1, I3 and the order of the
//! writes on every event and times the gaps (I4), and what the applications act on is checked
//! at every publication handed to them and every validity that lapses (at most one pod of a
//! group acting as leader).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_testenv::wire::{EPOCH_ANNOTATION, ROLE_LABEL, ROLE_LEADER, lease_name_for};
use leadergroup_testenv::{
    ActiveMonitor, HeldRequests, HoldRule, InvariantWatcher, PrivateCluster, namespace_in,
};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::members;
use crate::plan::{Fault, ForgedEpoch, Forger, Replica, SpecEdit, Step, Target, WhileCut};
use crate::replica::{Launch, OperatorReplica};
use crate::report::{Injected, Report, Round};
use crate::world::{POD_LABEL, World};
use crate::{Config, Error};

/// How long the run waits for every group to settle after a round.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);
/// How long an undo (a pod Ready again, a replica started) keeps retrying through API errors
/// (a kube-apiserver restart among them).
const RETRY_FOR: Duration = Duration::from_secs(60);
/// How long after a forged top-of-the-range epoch the run deletes the Lease, as a person who saw
/// the group's condition would, and how often it looks again.
const RECOVER_AFTER: Duration = Duration::from_millis(1500);
const RECOVER_TRIES: usize = 40;
/// A Lease epoch this high was forged: a run hands out a few thousand tokens at most.
const FORGED_NEAR_THE_TOP: i64 = i64::MAX / 2;

/// What the faults' own tasks share.
struct Shared {
    world: World,
    replicas: Mutex<Vec<OperatorReplica>>,
    hold: HeldRequests,
    /// The groups' `leaseDurationSeconds`, which an edit puts back.
    lease_seconds: u32,
    /// What the run itself failed to do after a fault was counted as injected (its undo, a
    /// crashed replica's restart): each makes the run's verdict void.
    harness_errors: std::sync::Mutex<Vec<String>>,
}

impl Shared {
    fn harness_error(&self, what: String) {
        self.harness_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(what);
    }
}

/// Runs `config`'s plan; the report says what was injected and what was seen.
pub async fn run(config: &Config, steps: &[Step]) -> Result<Report, Error> {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let cluster = Arc::new(PrivateCluster::start(&format!("chaos-{}", config.seed)).await?);
    let client = cluster.client().await?;
    let ns = namespace_in(client.clone(), "chaos").await?;
    let namespace = ns.name.clone();
    let world = World::new(ns, &cluster, config.groups).await?;
    let watch =
        InvariantWatcher::start_with_candidates(&client, &namespace, crate::world::APP_LABEL).await;
    let hold = HeldRequests::start(
        &cluster,
        client.clone(),
        &namespace,
        HoldRule {
            pod: None,
            label: ROLE_LABEL.into(),
            value: ROLE_LEADER.into(),
        },
        &format!("{}-0", World::group(0)),
    )
    .await?;
    hold.release();
    std::fs::create_dir_all(&config.work_dir)
        .map_err(|e| Error::Setup(format!("{}: {e}", config.work_dir.display())))?;
    let launch = Launch {
        binary: config.operator.clone(),
        namespace: namespace.clone(),
        lease_seconds: config.operator_lease_seconds,
        log_dir: config.work_dir.clone(),
        rust_log: config.operator_log.clone(),
    };
    let mut replicas = Vec::new();
    for name in ["op-a", "op-b"] {
        replicas.push(
            OperatorReplica::start(
                name,
                &launch,
                cluster.kubeconfig_path(),
                cluster.server_url(),
            )
            .await?,
        );
    }
    let monitor = ActiveMonitor::start(
        replicas
            .iter()
            .map(|r| (r.name.clone(), r.http()))
            .collect(),
    );
    let shared = Arc::new(Shared {
        world,
        replicas: Mutex::new(replicas),
        hold,
        lease_seconds: config.lease_seconds,
        harness_errors: std::sync::Mutex::default(),
    });
    shared.world.create_groups(config.lease_seconds).await?;
    let first = shared.world.wait_all_settled(SETTLE).await;
    if let Err(why) = first {
        return Err(Error::Setup(format!(
            "the groups never settled before the first fault: {why}"
        )));
    }
    let setup = started.elapsed();

    let mut report = Report::new(config, &namespace, setup);
    report.started_at = Some(started_at);
    let mut tasks: JoinSet<()> = JoinSet::new();
    // The replicas' faults strike one at a time (one operator always runs), and so do the holds
    // of promotions.
    let mut replica_fault: Option<tokio::task::JoinHandle<()>> = None;
    let mut promotions_held: Option<tokio::task::JoinHandle<()>> = None;
    let faults_started = Instant::now();
    report.faults_started_at = Some(jiff::Timestamp::now());
    let mut round_start = 0;
    for (i, step) in steps.iter().enumerate() {
        tokio::time::sleep(step.before).await;
        if step.fault.replica().is_some()
            && let Some(previous) = replica_fault.take()
        {
            let _ = previous.await;
        }
        if matches!(step.fault, Fault::HoldPromotions { .. })
            && let Some(previous) = promotions_held.take()
        {
            let _ = previous.await;
        }
        let at = faults_started.elapsed();
        let outcome = inject(&shared, &cluster, &step.fault, i, &mut tasks).await;
        if step.fault == Fault::RestartApiServer {
            // Until the restart returns (cluster.sh waits for /readyz), nothing can reach the API.
            report.api_down(at, faults_started.elapsed());
        }
        match outcome {
            Ok(Launched::Task(task)) => {
                if step.fault.replica().is_some() {
                    replica_fault = Some(task);
                } else {
                    promotions_held = Some(task);
                }
                report.injected(Injected::new(i, at, &step.fault, None));
            }
            Ok(Launched::Done) => report.injected(Injected::new(i, at, &step.fault, None)),
            Ok(Launched::Skipped(why)) => {
                report.injected(Injected::new(i, at, &step.fault, Some(why)));
            }
            Err(e) => report.injected(Injected::new(i, at, &step.fault, Some(e.to_string()))),
        }
        let last = i + 1 == steps.len();
        if (i + 1 - round_start) >= config.round || last {
            if let Some(t) = replica_fault.take() {
                let _ = t.await;
            }
            if let Some(t) = promotions_held.take() {
                let _ = t.await;
            }
            while tasks.join_next().await.is_some() {}
            let round = quiesce(&shared, round_start, i + 1).await;
            eprintln!(
                "chaos: faults {}..{} at {}, settled in {}{}",
                round.faults.start,
                round.faults.end,
                crate::secs(faults_started.elapsed()),
                crate::secs(round.settle),
                round
                    .unsettled
                    .as_ref()
                    .map_or_else(String::new, |why| format!(": NOT SETTLED: {why}"))
            );
            report.round(round);
            round_start = i + 1;
        }
    }
    watch.catch_up().await;
    report.finish(
        &watch,
        &monitor,
        shared.world.members.claims(),
        faults_started,
        started.elapsed(),
        &mut shared.replicas.lock().await,
    );
    shared.world.members.stop_all().await;
    let mut replicas = shared.replicas.lock().await;
    for r in replicas.iter_mut() {
        // The end of the run: a replica already stopped is what this wants.
        if let Err(e) = r.signal("-CONT") {
            eprintln!("chaos: resuming {} at the end: {e}", r.name);
        }
        if let Err(e) = r.kill().await {
            eprintln!("chaos: stopping {} at the end: {e}", r.name);
        }
    }
    report.finished_at = Some(jiff::Timestamp::now());
    report.harness_errors = std::mem::take(
        &mut shared
            .harness_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(report)
}

/// What injecting a fault started.
enum Launched {
    /// Done at once.
    Done,
    /// The fault's undoing runs in this task.
    Task(tokio::task::JoinHandle<()>),
    /// Not injected, and why (no such pod now, say).
    Skipped(String),
}

async fn inject(
    shared: &Arc<Shared>,
    cluster: &PrivateCluster,
    fault: &Fault,
    index: usize,
    tasks: &mut JoinSet<()>,
) -> Result<Launched, Error> {
    let world = &shared.world;
    match fault {
        Fault::FlapPod {
            group,
            target,
            not_ready,
        } => {
            let Some(pod) = world.wait_target(*group, *target == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {target:?} in g{group}")));
            };
            if world.members.is_cut(&pod).await {
                return Ok(Launched::Skipped(members::CUT_OFF.into()));
            }
            world.kubelet.set_ready(&pod, false).await?;
            let (shared, not_ready) = (Arc::clone(shared), *not_ready);
            tasks.spawn(async move {
                tokio::time::sleep(not_ready).await;
                retry(|| shared.world.kubelet.set_ready(&pod, true)).await;
            });
            Ok(Launched::Done)
        }
        Fault::DeletePod { group, target } => {
            let Some(pod) = world.wait_target(*group, *target == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {target:?} in g{group}")));
            };
            if world.members.is_cut(&pod).await {
                return Ok(Launched::Skipped(members::CUT_OFF.into()));
            }
            world.kubelet.begin_termination(&pod).await?;
            let (shared, group) = (Arc::clone(shared), *group);
            tasks.spawn(async move {
                // What a kubelet does: the container stops (its application with it, then
                // NotReady), then the pod goes.
                shared.world.members.leave(&pod).await;
                retry(|| shared.world.kubelet.set_ready(&pod, false)).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                retry(|| shared.world.kubelet.finish_termination(&pod)).await;
                retry(|| shared.world.add_pod(group)).await;
            });
            Ok(Launched::Done)
        }
        Fault::DeleteLease { group } => {
            let name = lease_name_for(&World::group(*group));
            match world.leases.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(Launched::Done),
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    Ok(Launched::Skipped("no Lease".into()))
                }
                Err(e) => Err(Error::kube(format!("deleting Lease {name}"))(e)),
            }
        }
        Fault::ForgeLease { group, epoch, by } => {
            forge_lease(world, *group, *epoch, *by, index).await
        }
        Fault::HoldPromotions { held } => {
            shared.hold.hold();
            let (shared, held) = (Arc::clone(shared), *held);
            Ok(Launched::Task(tokio::spawn(async move {
                tokio::time::sleep(held).await;
                shared.hold.release();
            })))
        }
        Fault::RestartApiServer => {
            // Killed, not stopped: a loaded kube-apiserver drains for 15 s on SIGTERM (the graceful
            // restart is tests/it/restarts.rs's). A start that fails (it happens on a loaded
            // machine) is tried again: the run needs its API server back.
            let mut last = None;
            for _ in 0..3 {
                match cluster.crash("kube-apiserver").await {
                    Ok(()) => return Ok(Launched::Done),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.map_or_else(|| Error::Setup("no restart attempted".into()), Error::from))
        }
        Fault::EditSpec {
            group,
            edit,
            undo_after,
        } => edit_spec(shared, *group, *edit, *undo_after, tasks).await,
        Fault::RestartMember {
            group,
            target,
            down,
        } => {
            let Some(pod) = world.wait_target(*group, *target == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {target:?} in g{group}")));
            };
            if let Err(why) = world.members.stop_for_restart(&pod).await {
                return Ok(Launched::Skipped(why.into()));
            }
            let (shared, down) = (Arc::clone(shared), *down);
            tasks.spawn(async move {
                tokio::time::sleep(down).await;
                retry(|| shared.world.members.start_again(&pod)).await;
            });
            Ok(Launched::Done)
        }
        Fault::CutMember { group, target, cut } => {
            let Some(pod) = world.wait_target(*group, *target == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {target:?} in g{group}")));
            };
            if let Err(why) = world.members.cut(&pod).await {
                return Ok(Launched::Skipped(why.into()));
            }
            let (shared, cut) = (Arc::clone(shared), *cut);
            tasks.spawn(async move {
                tokio::time::sleep(cut).await;
                shared.world.members.heal(&pod).await;
            });
            Ok(Launched::Done)
        }
        Fault::CutLeaderThen { group, cut, then } => {
            cut_leader_then(shared, *group, *cut, *then, tasks).await
        }
        Fault::PauseAgent {
            group,
            target,
            paused,
            hand_over,
        } => pause_agent(shared, *group, *target, *paused, *hand_over, tasks).await,
        Fault::StallMember { group, target } => {
            let Some(pod) = world.wait_target(*group, *target == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {target:?} in g{group}")));
            };
            if world.members.stall(&pod).await {
                Ok(Launched::Done)
            } else {
                Ok(Launched::Skipped(members::GONE.into()))
            }
        }
        Fault::StallReplica { replica } => {
            let Some(r) = resolve(shared, *replica).await else {
                return Ok(Launched::Skipped("no replica reported active".into()));
            };
            if let Some(replica) = shared.replicas.lock().await.get(r) {
                replica.proxy.stall();
            }
            Ok(Launched::Done)
        }
        Fault::KillReplica { replica, .. }
        | Fault::PauseReplica { replica, .. }
        | Fault::RollReplica { replica }
        | Fault::HoldReplica { replica, .. }
        | Fault::CutReplica { replica, .. } => {
            let Some(r) = resolve(shared, *replica).await else {
                return Ok(Launched::Skipped("no replica reported active".into()));
            };
            strike_replica(shared, r, fault).await.map(Launched::Task)
        }
    }
}

/// Cuts group `g`'s leader's `Membership` off, then does `then`; a task heals the cut `cut`
/// later and puts back what `then` changed.
async fn cut_leader_then(
    shared: &Arc<Shared>,
    g: usize,
    cut: Duration,
    then: WhileCut,
    tasks: &mut JoinSet<()>,
) -> Result<Launched, Error> {
    let world = &shared.world;
    let Some(leader) = world.wait_target(g, true).await? else {
        return Ok(Launched::Skipped(format!("no Leader in g{g}")));
    };
    let Some(follower) = world.wait_target(g, false).await? else {
        return Ok(Launched::Skipped(format!("no Follower in g{g}")));
    };
    let cut_off = if then == WhileCut::OneMemberThenHandOver {
        world.members.cut_one(&leader).await
    } else {
        world.members.cut(&leader).await
    };
    if let Err(why) = cut_off {
        return Ok(Launched::Skipped(why.into()));
    }
    let undo = match then {
        WhileCut::OneMemberThenHandOver => {
            world
                .edit_spec(g, serde_json::json!({ "preferredLeader": follower }))
                .await?;
            Some(serde_json::json!({ "preferredLeader": null }))
        }
        WhileCut::ShortenThenHandOver => {
            world
                .edit_spec(g, serde_json::json!({ "leaseDurationSeconds": 1 }))
                .await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            world
                .edit_spec(g, serde_json::json!({ "preferredLeader": follower }))
                .await?;
            Some(serde_json::json!({
                "leaseDurationSeconds": shared.lease_seconds,
                "preferredLeader": null,
            }))
        }
        WhileCut::DeleteLease => {
            let name = lease_name_for(&World::group(g));
            match world.leases.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::kube(format!("deleting Lease {name}"))(e)),
            }
            None
        }
        WhileCut::PatchStatus => {
            world
                .patch_status(g, serde_json::json!({ "leader": follower }))
                .await?;
            None
        }
    };
    let shared = Arc::clone(shared);
    tasks.spawn(async move {
        tokio::time::sleep(cut).await;
        shared.world.members.heal(&leader).await;
        if let Some(undo) = undo {
            retry(|| shared.world.edit_spec(g, undo.clone())).await;
        }
    });
    Ok(Launched::Done)
}

/// Freezes group `g`'s `target`'s agent for `paused` ([`crate::members::Members::pause_agent`]);
/// with `hand_over`, `preferredLeader` then names a follower. A task resumes the agent and puts
/// `preferredLeader` back.
async fn pause_agent(
    shared: &Arc<Shared>,
    g: usize,
    target: Target,
    paused: Duration,
    hand_over: bool,
    tasks: &mut JoinSet<()>,
) -> Result<Launched, Error> {
    let world = &shared.world;
    let Some(pod) = world.wait_target(g, target == Target::Leader).await? else {
        return Ok(Launched::Skipped(format!("no {target:?} in g{g}")));
    };
    let successor = if hand_over {
        let Some(follower) = world.wait_target(g, false).await? else {
            return Ok(Launched::Skipped(format!("no Follower in g{g}")));
        };
        Some(follower)
    } else {
        None
    };
    if let Err(why) = world.members.pause_agent(&pod).await {
        return Ok(Launched::Skipped(why.into()));
    }
    let edited = match &successor {
        Some(follower) => world
            .edit_spec(g, serde_json::json!({ "preferredLeader": follower }))
            .await
            .map(|()| true),
        None => Ok(false),
    };
    // The agent resumes whatever the edit did: a failed edit must not leave it frozen.
    let put_back = matches!(edited, Ok(true));
    let shared = Arc::clone(shared);
    tasks.spawn(async move {
        tokio::time::sleep(paused).await;
        shared.world.members.resume_agent(&pod).await;
        if put_back {
            retry(|| {
                shared
                    .world
                    .edit_spec(g, serde_json::json!({ "preferredLeader": null }))
            })
            .await;
        }
    });
    edited.map(|_| Launched::Done)
}

/// A user's edit of group `g`'s spec; the returned task puts the field back `undo_after` later.
async fn edit_spec(
    shared: &Arc<Shared>,
    g: usize,
    edit: SpecEdit,
    undo_after: Duration,
    tasks: &mut JoinSet<()>,
) -> Result<Launched, Error> {
    let world = &shared.world;
    let (apply, undo) = match edit {
        SpecEdit::Selector { exclude } => {
            let Some(pod) = world.wait_target(g, exclude == Target::Leader).await? else {
                return Ok(Launched::Skipped(format!("no {exclude:?} in g{g}")));
            };
            let selector = serde_json::json!({
                "matchExpressions": [{"key": POD_LABEL, "operator": "NotIn", "values": [pod]}],
            });
            (
                serde_json::json!({ "selector": selector }),
                serde_json::json!({ "selector": { "matchExpressions": null } }),
            )
        }
        SpecEdit::PreferredLeader => {
            let Some(pod) = world.wait_target(g, false).await? else {
                return Ok(Launched::Skipped(format!("no Follower in g{g}")));
            };
            (
                serde_json::json!({ "preferredLeader": pod }),
                serde_json::json!({ "preferredLeader": null }),
            )
        }
        SpecEdit::LeaseDuration(seconds) => (
            serde_json::json!({ "leaseDurationSeconds": seconds }),
            serde_json::json!({ "leaseDurationSeconds": shared.lease_seconds }),
        ),
        SpecEdit::Paused => (
            serde_json::json!({ "paused": true }),
            serde_json::json!({ "paused": false }),
        ),
        SpecEdit::Liveness => {
            let other = if crate::plan::heartbeat(g) {
                "Readiness"
            } else {
                "Heartbeat"
            };
            (
                serde_json::json!({ "liveness": other }),
                serde_json::json!({ "liveness": World::liveness(g) }),
            )
        }
    };
    world.edit_spec(g, apply).await?;
    let shared = Arc::clone(shared);
    tasks.spawn(async move {
        tokio::time::sleep(undo_after).await;
        retry(|| shared.world.edit_spec(g, undo.clone())).await;
    });
    Ok(Launched::Done)
}

/// The index of the replica `which` is now: the one whose /readyz says active (waiting up to 20 s
/// for one to, after a kill or a rollout), or the other one.
async fn resolve(shared: &Shared, which: Replica) -> Option<usize> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        {
            let mut replicas = shared.replicas.lock().await;
            for replica in replicas.iter_mut() {
                if let Err(e) = replica.restart_if_exited().await {
                    shared.harness_error(format!("restarting {}: {e}", replica.name));
                }
            }
            for (i, r) in replicas.iter().enumerate() {
                if r.role().await.as_deref() == Some("active") {
                    return Some(match which {
                        Replica::Active => i,
                        Replica::Standby => 1 - i,
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Strikes replica `r`; the returned task undoes it.
async fn strike_replica(
    shared: &Arc<Shared>,
    r: usize,
    fault: &Fault,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let shared = Arc::clone(shared);
    let fault = fault.clone();
    {
        let mut replicas = shared.replicas.lock().await;
        let Some(replica) = replicas.get_mut(r) else {
            return Err(Error::Setup(format!("no replica {r}")));
        };
        match &fault {
            Fault::KillReplica { .. } => replica.kill().await?,
            Fault::PauseReplica { .. } => replica.signal("-STOP")?,
            Fault::HoldReplica { .. } | Fault::CutReplica { .. } => replica.proxy.cut(),
            // The rollout's SIGTERM and wait run in the task: a clean stop takes a while.
            _ => {}
        }
    }
    Ok(tokio::spawn(async move {
        let pause = match &fault {
            Fault::KillReplica { down, .. } => *down,
            Fault::PauseReplica { paused, .. } => *paused,
            Fault::HoldReplica { held, .. } => *held,
            Fault::CutReplica { cut, .. } => *cut,
            _ => Duration::ZERO,
        };
        tokio::time::sleep(pause).await;
        let mut replicas = shared.replicas.lock().await;
        let Some(replica) = replicas.get_mut(r) else {
            return;
        };
        let undone = match &fault {
            Fault::KillReplica { .. } => replica.spawn().await,
            Fault::PauseReplica { .. } => replica.signal("-CONT"),
            Fault::HoldReplica { .. } => {
                replica.proxy.release();
                Ok(())
            }
            Fault::CutReplica { .. } => {
                replica.proxy.heal();
                Ok(())
            }
            Fault::RollReplica { .. } => match replica.terminate().await {
                Ok(()) => replica.spawn().await,
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        if let Err(e) = undone {
            let name = replica.name.clone();
            drop(replicas);
            shared.harness_error(format!("undoing {fault:?} of {name}: {e}"));
        }
    }))
}

/// One write of the group's Lease by someone else, with its own compare-and-swap: another holder,
/// the epoch annotation moved by `offset`.
async fn forge_lease(
    world: &World,
    group: usize,
    forged: ForgedEpoch,
    by: Forger,
    index: usize,
) -> Result<Launched, Error> {
    let name = lease_name_for(&World::group(group));
    let writer = match by {
        Forger::Admin => &world.leases,
        Forger::Member => world.member_leases(group)?,
    };
    let Some(mut lease) = writer
        .get_opt(&name)
        .await
        .map_err(Error::kube(format!("reading Lease {name}")))?
    else {
        return Ok(Launched::Skipped("no Lease".into()));
    };
    let epoch: i64 = lease
        .annotations()
        .get(EPOCH_ANNOTATION)
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    let value = forged.value(epoch);
    lease
        .annotations_mut()
        .insert(EPOCH_ANNOTATION.into(), value);
    lease
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some(format!("intruder-{index}"));
    match writer.replace(&name, &PostParams::default(), &lease).await {
        Ok(_) if forged == ForgedEpoch::Top => {
            let leases = world.leases.clone();
            Ok(Launched::Task(tokio::spawn(recover_from_forgery(
                leases, name,
            ))))
        }
        Ok(_) => Ok(Launched::Done),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Launched::Skipped(
            "the operator wrote the Lease in between (409)".into(),
        )),
        Err(e) => Err(Error::kube(format!("forging Lease {name}"))(e)),
    }
}

/// What docs/protocol.md tells a user to do about a forged epoch the group refuses to adopt:
/// delete the Lease (the operator writes it again from its records). Done a moment later, as a
/// person would, and again while the Lease still carries an epoch near the top (a later foreign
/// write may move the forgery by a few before it is deleted, and a deletion may miss a Lease the
/// operator is writing again).
async fn recover_from_forgery(leases: Api<Lease>, name: String) {
    for _ in 0..RECOVER_TRIES {
        tokio::time::sleep(RECOVER_AFTER).await;
        let forged = match leases.get_opt(&name).await {
            Ok(Some(lease)) => lease
                .annotations()
                .get(EPOCH_ANNOTATION)
                .and_then(|e| e.parse::<i64>().ok())
                .is_some_and(|e| e >= FORGED_NEAR_THE_TOP),
            Ok(None) => false,
            // The API server restarting: look again.
            Err(_) => true,
        };
        if !forged {
            return;
        }
        let _ = leases.delete(&name, &DeleteParams::default()).await;
    }
}

/// Retries `op` through API errors (a kube-apiserver restart) for up to [`RETRY_FOR`]; a 404 (the
/// pod is gone) ends it.
async fn retry<T, E, F, Fut>(mut op: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Into<Error>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match op().await.map_err(Into::into) {
            Ok(_) => return,
            Err(e) if gone(&e) || Instant::now() > deadline => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn gone(e: &Error) -> bool {
    match e {
        Error::Testenv(t) => t.api_code() == Some(404),
        Error::Kube {
            source: kube::Error::Api(s),
            ..
        } => s.code == 404,
        _ => false,
    }
}

/// The end of a round: everything undone, the pods repaired, then every group must settle (I2).
async fn quiesce(shared: &Shared, from: usize, to: usize) -> Round {
    let started = Instant::now();
    for replica in shared.replicas.lock().await.iter_mut() {
        if let Err(e) = replica.restart_if_exited().await {
            shared.harness_error(format!("restarting {}: {e}", replica.name));
        }
    }
    for g in 0..shared.world.groups {
        retry(|| shared.world.repair(g)).await;
    }
    let settled = shared.world.wait_all_settled(SETTLE).await;
    Round {
        faults: from..to,
        settle: started.elapsed(),
        unsettled: settled.err(),
    }
}
