//! The agent publishes what the pod's marks and the group's Lease say, at once, in its files, on
//! its endpoint (also as a long poll), and to its on-change command.

use leadergroup_testenv::wait_until;
use std::time::{Duration, Instant};

use crate::common::{Agent, WAIT, scratch, world_of_two_members};

#[tokio::test]
async fn the_files_the_endpoint_and_the_command_follow_leader_then_follower() {
    let (w, kubeconfig) = world_of_two_members("agent-follow").await;
    // The command appends what it was given and then fails: a failure is only logged.
    let changes = scratch(&format!("{}-changes", w.ns.name));
    let command = format!(
        "echo \"$LEADERGROUP_ROLE $LEADERGROUP_EPOCH\" >> '{}'; exit 3",
        changes.display()
    );
    let agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &["--on-change", &command]).await;

    // In no group yet (no annotation, no --group): confirmed, not leading.
    agent.wait_role("follower", None).await;
    let (status, body) = {
        let (status, _, body) = agent.get("/healthz").await;
        (status, body)
    };
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    // The operator elects app-0 at epoch 1: the Lease, then the pod's marks (naming the group).
    w.put_lease("g", Some("app-0"), 1).await.unwrap();
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 1).await.unwrap();
    agent.wait_role("leader", Some(1)).await;
    let (_, etag, body) = agent.get("/role").await;
    let leading: serde_json::Value = serde_json::from_str(&body).unwrap();
    let version = leading["version"].as_str().unwrap().to_owned();
    assert_eq!(etag, Some(format!("\"{version}\"")));

    // A long poll on an older version answers at once.
    let (status, _, body) = agent.get("/role?wait=stale&timeoutSeconds=30").await;
    assert_eq!(status, 200);
    let stale: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&stale["role"], &stale["epoch"]),
        (&leading["role"], &leading["epoch"])
    );
    assert!(
        stale["validUntil"].as_u64() >= leading["validUntil"].as_u64(),
        "the validity only moves forward: {stale} after {leading}"
    );

    // Long polls from the current version on return when the Lease moves to app-1 at epoch 2:
    // app-0 is no longer leader from that moment, before its own label changes. (Until then
    // they return a leader whose validity moved.)
    let addr = agent.addr;
    let poll = tokio::spawn(crate::common::poll_past_leader(addr, version.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the poll returned without a change");
    let update = Instant::now();
    w.put_lease("g", Some("app-1"), 2).await.unwrap();
    let updated = Instant::now();
    let (returned, (status, _, body)) = tokio::time::timeout(WAIT, poll).await.unwrap().unwrap();
    assert_eq!(status, 200);
    let after: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(after["role"], "follower", "{body}");
    assert_eq!(after["epoch"], serde_json::Value::Null);
    assert_ne!(after["version"].as_str(), Some(version.as_str()));
    eprintln!(
        "long-poll latency: {:?} from sending the Lease update to the poll returning ({:?} after \
         the update was acknowledged)",
        returned - update,
        returned.saturating_duration_since(updated)
    );
    // The files were written before the endpoint moved.
    assert_eq!(
        (agent.file("role"), agent.file("epoch")),
        ("follower".to_owned(), String::new())
    );
    w.mark_follower("app-0", "g").await.unwrap();
    w.mark_leader("app-1", "g", 2).await.unwrap();
    let following = agent.wait_role("follower", None).await;
    // On the current version of a follower (no validity to move), at the timeout with the same
    // state (200, same version).
    let started = Instant::now();
    let (status, _, body) = agent
        .get(&format!(
            "/role?wait={}&timeoutSeconds=1",
            following["version"].as_str().unwrap()
        ))
        .await;
    let waited = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        following
    );
    assert!(
        waited >= Duration::from_secs(1),
        "returned after {waited:?}"
    );

    // Every change ran the command once, in order, with the role and the epoch; its failures
    // (exit 3) did not stop the agent, which is still serving. (The crate may report a short
    // `unknown` while it starts following a newly named group's Lease: a change like any other.)
    let published = || {
        agent
            .logs()
            .lines()
            .filter(|l| {
                l.contains(r#""message":"role changed""#)
                    && l.contains(r#""target":"leadergroup_agent""#)
            })
            .count()
    };
    let ran = wait_until(
        "the on-change command ran once per change",
        WAIT,
        || async {
            let ran = std::fs::read_to_string(&changes).unwrap_or_default();
            Ok::<_, String>((ran.lines().count() == published()).then_some(ran))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));
    let known: Vec<&str> = ran.lines().filter(|l| *l != "unknown ").collect();
    assert_eq!(
        known,
        ["follower ", "leader 1", "follower "],
        "ran: {ran:?}"
    );
    assert!(
        agent.logs().contains("on-change command failed"),
        "{}",
        agent.logs()
    );
    assert_eq!(agent.role().await["role"], "follower");
}
