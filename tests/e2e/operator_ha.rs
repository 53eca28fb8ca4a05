//! The active operator replica killed (SIGKILL: no release of its Lease) and its pod deleted so
//! the kubelet does not bring it back under the same identity: the standby takes over once the
//! operator Lease runs out, and the groups keep handing over.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use crate::cluster::{App, CONVERGE, Cluster, PODS, RELEASE_NS};

#[tokio::test]
async fn the_active_operator_killed_the_standby_takes_over_and_groups_keep_handing_over() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let app = App::start(&c, "e2e-operator", 3, 0).await;
    let first = app.wait_settled("a leader", CONVERGE, |_| true).await;
    let active = c.wait_operator_active(None).await;
    let operator_pods: Api<Pod> = Api::namespaced(c.client.clone(), RELEASE_NS);
    let active_pod = operator_pods.get(&active).await.unwrap();

    let killed = Instant::now();
    c.kill_container(&active_pod).await;
    operator_pods
        .delete(&active, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // While no operator acts: delete the app's leader. The group is handed over once the standby
    // has taken over (and the group's Lease, written by the dead replica, has run out).
    app.pods
        .delete(&first.leader, &DeleteParams::default())
        .await
        .unwrap();
    let standby = c.wait_operator_active(Some(&active)).await;
    let takeover = killed.elapsed();
    let second = app
        .wait_settled(
            "the group handed over by the new active replica",
            PODS,
            |s| s.leader != first.leader,
        )
        .await;
    let regrouped = killed.elapsed();
    assert_eq!(second.epoch, first.epoch + 1);

    // And it keeps handing over.
    app.wait_pods_ready(3).await;
    let again = Instant::now();
    app.pods
        .delete(&second.leader, &DeleteParams::default())
        .await
        .unwrap();
    let third = app
        .wait_settled("another handover", CONVERGE, |s| s.leader != second.leader)
        .await;
    assert_eq!(third.epoch, second.epoch + 1);
    assert_eq!(
        c.operator_lease_holder().await.as_deref(),
        Some(standby.as_str())
    );
    println!(
        "active operator {active} killed: standby {standby} active after {:.1} s, the group's pending handover done after {:.1} s; next handover {:.0} ms",
        takeover.as_secs_f64(),
        regrouped.as_secs_f64(),
        again.elapsed().as_secs_f64() * 1e3
    );
    app.delete().await;
}
