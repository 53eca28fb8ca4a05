//! Deposed, the agent says it stepped down only once it has acted on its new role: its files
//! written and its `--on-change` command run. The operator labels the successor only then, so
//! whatever in the pod reads the files or runs from the command has stopped first.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use leadergroup_client::wire::{
    ACKNOWLEDGED_BY_ANNOTATION, PREDECESSOR_ANNOTATION, PREDECESSOR_EPOCH_ANNOTATION,
    PREDECESSOR_MEMBERS_ANNOTATION, STEPPED_DOWN_BY_EPOCH_ANNOTATION, lease_name_for,
};
use leadergroup_testenv::wait_until;
use serde_json::json;

use crate::common::{Agent, WAIT, scratch, world_of_two_members};

/// Seconds since the epoch, as `date +%s.%N` writes them.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_deposed_agent_steps_down_after_its_command_has_run() {
    let (w, kubeconfig) = world_of_two_members("agent-step-down").await;
    // Leaving `leader` takes the command 2 s; it then notes when it finished.
    let finished = scratch(&format!("{}-finished", w.ns.name));
    let command = format!(
        "[ \"$LEADERGROUP_ROLE\" = leader ] || {{ sleep 2; date +%s.%N > '{}'; }}",
        finished.display()
    );
    let agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &["--on-change", &command]).await;
    w.put_lease("g", Some("app-0"), 1).await.unwrap();
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 1).await.unwrap();
    agent.wait_role("leader", Some(1)).await;

    // Deposed at once, as the operator does: the Lease to app-1 at 2, naming app-0 (and the
    // member that acknowledged) as the predecessor to wait for.
    let name = lease_name_for("g");
    let acknowledged = w.leases.get(&name).await.unwrap();
    let members = acknowledged
        .metadata
        .annotations
        .unwrap_or_default()
        .get(ACKNOWLEDGED_BY_ANNOTATION)
        .cloned()
        .expect("the agent acknowledged under its name");
    w.put_lease("g", Some("app-1"), 2).await.unwrap();
    let deposed = now_secs();
    w.leases
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                PREDECESSOR_ANNOTATION: "app-0",
                PREDECESSOR_EPOCH_ANNOTATION: "1",
                PREDECESSOR_MEMBERS_ANNOTATION: members,
            }}})),
        )
        .await
        .unwrap();
    let leases = w.leases.clone();
    let stepped_down = wait_until(
        "the agent's step-down",
        WAIT + Duration::from_secs(5),
        || {
            let (leases, name) = (leases.clone(), name.clone());
            async move {
                let lease: Lease = leases.get(&name).await?;
                let said = lease
                    .metadata
                    .annotations
                    .and_then(|a| a.get(STEPPED_DOWN_BY_EPOCH_ANNOTATION).cloned());
                Ok::<_, kube::Error>((said.as_deref() == Some("1")).then(now_secs))
            }
        },
    )
    .await
    .unwrap();
    // Not there yet: the step-down came before the command had finished.
    let ran: f64 = std::fs::read_to_string(&finished)
        .unwrap_or_else(|e| panic!("the step-down was written before the command had run: {e}"))
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "agent step-down: command finished {:.3} s after the handover, step-down seen {:.3} s after it",
        ran - deposed,
        stepped_down - deposed
    );
    assert!(
        ran <= stepped_down,
        "the step-down was written {:.3} s before the command had run",
        ran - stepped_down
    );
    assert_eq!(agent.file("role"), "follower");
}
