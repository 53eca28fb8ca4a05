//! Cut off from the API server, a leading agent publishes `unknown` within two thirds of the
//! Lease duration (the crate's rule); reconnected, `leader` again; stopped, `unknown`.

use std::time::{Duration, Instant};

use crate::common::{Agent, DURATION_SECS, WAIT, leader_behind_proxy};

#[tokio::test]
async fn a_cut_off_leader_publishes_unknown_in_time_and_unknown_when_stopped() {
    let (w, proxy, kubeconfig) = leader_behind_proxy("agent-cut").await;
    let mut agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &["--group", "g"]).await;
    let leading = agent.wait_role("leader", Some(5)).await;
    // A few confirming GETs go through (a third of the duration apart).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let version = leading["version"].as_str().unwrap().to_owned();
    let addr = agent.addr;
    let poll = tokio::spawn(crate::common::poll_past_leader(addr, version));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cut = Instant::now();
    proxy.cut();
    let (returned, (_, _, body)) = tokio::time::timeout(WAIT, poll).await.unwrap().unwrap();
    let after = returned - cut;
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["role"], "unknown", "{body}\n{}", agent.logs());
    let validity = Duration::from_secs(DURATION_SECS as u64) * 2 / 3;
    eprintln!("cut: the agent published unknown {after:?} after the cut (validity {validity:?})");
    // The last confirmation was at most a third of the duration before the cut: the role lapses
    // two thirds after it. The slack covers a slow GET and the scheduling on 2 shared cores.
    assert!(
        after <= validity + Duration::from_millis(600),
        "unknown only {after:?} after the cut\n{}",
        agent.logs()
    );
    assert_eq!(
        (agent.file("role"), agent.file("epoch")),
        ("unknown".to_owned(), String::new())
    );

    proxy.heal();
    agent.wait_role("leader", Some(5)).await;

    // Stopped (SIGTERM, as the kubelet stops a sidecar): it leaves `unknown` behind and exits 0.
    assert!(agent.terminate().await, "{}", agent.logs());
    assert_eq!(
        (agent.file("role"), agent.file("epoch")),
        ("unknown".to_owned(), String::new())
    );
}
