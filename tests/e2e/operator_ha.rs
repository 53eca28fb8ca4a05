//! The active operator replica killed (SIGKILL: no release of its Lease) and its pod deleted so
//! the kubelet does not bring it back under the same identity: the standby takes over once the
//! operator Lease runs out, and the groups keep handing over.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use crate::cluster::{CONVERGE, PODS, RELEASE_NS, Scene};

#[tokio::test]
async fn the_active_operator_killed_the_standby_takes_over_and_groups_keep_handing_over() {
    let w = Scene::start("e2e-operator", 0).await;
    let active = w.c.wait_operator_active(None).await;
    let operator_pods: Api<Pod> = Api::namespaced(w.c.client.clone(), RELEASE_NS);
    let active_pod = operator_pods.get(&active).await.unwrap();

    let killed = Instant::now();
    w.c.kill_container(&active_pod).await;
    operator_pods
        .delete(&active, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // While no operator acts: delete the app's leader. The group is handed over once the standby
    // has taken over (and the group's Lease, written by the dead replica, has run out).
    w.app
        .pods
        .delete(&w.first.leader, &DeleteParams::default())
        .await
        .unwrap();
    let standby = w.c.wait_operator_active(Some(&active)).await;
    let takeover = killed.elapsed();
    // Deleted by then, or still terminating when the new active replica looked.
    let moved = ["LeaderDeleted", "LeaderTerminating"];
    let second = w.app.wait_handover(&w.first, &moved, PODS).await;
    let regrouped = killed.elapsed();

    // And it keeps handing over.
    w.app.wait_pods_ready(3).await;
    let again = Instant::now();
    w.app
        .pods
        .delete(&second.leader, &DeleteParams::default())
        .await
        .unwrap();
    w.app
        .wait_handover(&second, &["LeaderTerminating"], CONVERGE)
        .await;
    assert_eq!(
        w.c.operator_lease_holder().await.as_deref(),
        Some(standby.as_str())
    );
    println!(
        "active operator {active} killed: standby {standby} active after {:.1} s, the group's pending handover done after {:.1} s; next handover {:.0} ms",
        takeover.as_secs_f64(),
        regrouped.as_secs_f64(),
        again.elapsed().as_secs_f64() * 1e3
    );
    w.finish().await;
}
