//! A leader cut off from the API server turns Unknown within two thirds of the Lease duration,
//! and not before two thirds have passed since its last confirmation.

use std::time::Duration;

use leadergroup_client::Role;
use tokio::time::Instant;

use crate::common::{ProxiedLeader, VALIDITY, world};

#[tokio::test]
async fn a_cut_off_leader_turns_unknown_within_two_thirds_of_the_duration() {
    let w = world("client-cut").await;
    let ProxiedLeader {
        proxy,
        membership,
        roles,
        leader,
    } = ProxiedLeader::start(&w).await;
    // Let a few confirming GETs go through (a third of the duration apart).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(membership.role(), leader);

    let lost = membership.leader_context();
    let cut_at = Instant::now();
    proxy.cut();
    let role = tokio::time::timeout(VALIDITY * 2, lost)
        .await
        .expect("still leader long after the cut");
    let unknown_after = cut_at.elapsed();
    assert_eq!(role, Role::Unknown);
    eprintln!("cut: leader turned Unknown {unknown_after:?} after the cut (validity {VALIDITY:?})");
    // The last confirmation was at most a third of the duration (1 s) before the cut, plus the
    // time a GET takes: the role lapses 2 s after it, so between 1 s and 2 s after the cut.
    // The slack covers the scheduling of this test's task and a slow GET on 2 shared cores.
    let slack = Duration::from_millis(400);
    assert!(
        unknown_after <= VALIDITY + slack,
        "Unknown only {unknown_after:?} after the cut"
    );
    assert!(
        unknown_after >= VALIDITY / 2 - slack - Duration::from_millis(100),
        "Unknown already {unknown_after:?} after the cut: before 2/3 of the duration since the last confirmation"
    );
    // The reason is reported too: requests that hang (reported when their timeout, a third of
    // the duration, runs out, which can be just after the lapse).
    let mut errors = membership.errors();
    let error = tokio::time::timeout(VALIDITY, errors.wait_for(Option::is_some))
        .await
        .expect("no error reported while cut off")
        .unwrap()
        .clone()
        .unwrap();
    let text = error.to_string();
    assert!(text.contains("no answer within"), "{text}");
    // While cut, it stays Unknown.
    tokio::time::sleep(VALIDITY).await;
    assert_eq!(membership.role(), Role::Unknown);

    // Reconnected: confirmed again.
    proxy.heal();
    roles.wait_for(leader, Duration::from_secs(10)).await;
    assert!(
        membership.last_error().is_none(),
        "{:?}",
        membership.last_error()
    );
}
