//! When step 4 may skip its fresh list (`unchecked_version`): only when every label the group's
//! pods may carry was put by this replica's own passes and is taken off by the writes it plans.

use super::*;

/// Safety round five, finding 3: the Lease names `x`, which has left the selector and which the
/// cache shows carrying another group's marks. Its barrier is an annotation only (no release,
/// no follower marks: the marks look like another group's), so if the cache lags and `x` still
/// carries this group's leader label, only a fresh list shows it. The promotion must check.
#[test]
fn a_deposed_pod_the_cache_shows_in_another_group_is_checked_afresh() {
    let pods = vec![
        PodFixture::new("x", 0)
            .label("app", "other")
            .label(ROLE_LABEL, ROLE_LEADER)
            .annotate(EPOCH_ANNOTATION, "2")
            .annotate(GROUP_ANNOTATION, "other"),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ];
    let g = with_status(group(), Some("x"), 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("x"), 4, 999, ME))));
    let promotion = p.pods.promote.as_ref().expect("a promotion");
    assert_eq!((promotion.pod.as_str(), promotion.epoch), ("b", 5));
    assert!(
        p.commit
            .as_ref()
            .is_some_and(|c| promotion.is_recorded_in(c)),
        "committed in this pass: {p:?}"
    );
    let x = p
        .pods
        .deposed
        .iter()
        .find(|d| d.pod == "x")
        .expect("x is barred");
    assert!(!x.with_follower_marks && !x.clears_marks, "{x:?}");
    assert_eq!(
        p.pods.unchecked_version, None,
        "the promotion skips the list while x's marks are only known from the cache"
    );
}

/// The same handover with `x` still in the selector: its barrier carries the follower marks,
/// which fail on a lagging cache's version, so the check may be skipped.
#[test]
fn a_deposed_member_is_demoted_by_its_barrier_so_the_check_may_be_skipped() {
    let pods = vec![
        PodFixture::new("x", 0)
            .label(ROLE_LABEL, ROLE_LEADER)
            .annotate(EPOCH_ANNOTATION, "4")
            .annotate(GROUP_ANNOTATION, "pay")
            .not_ready(),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ];
    let g = with_status(group(), Some("x"), 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("x"), 4, 999, ME))));
    assert_eq!(p.pods.promote.as_ref().map(|p| p.pod.as_str()), Some("b"));
    assert_eq!(p.pods.unchecked_version.as_deref(), Some("rv-b"), "{p:?}");
}
