//! The operator's marks on a pod, read side: the role label, the fencing token and the group
//! that marked it, as the client crate's `wire::pod` reads them for every reader. They are
//! written by [`crate::actions::pods`].

use k8s_openapi::api::core::v1::Pod;
use leadergroup_client::wire;

use crate::crd::ROLE_LEADER;

/// The pod's role label: `leader`, `follower`, or none.
pub fn role(pod: &Pod) -> Option<&str> {
    wire::pod::role(&pod.metadata)
}

/// The fencing token the pod carries, if any (one that is not an epoch counts as none).
pub fn epoch(pod: &Pod) -> Option<i64> {
    wire::pod::epoch(&pod.metadata).map(i64::from)
}

/// The group whose marks the pod carries, if any (an empty annotation names none).
pub fn marked_group(pod: &Pod) -> Option<&str> {
    wire::pod::group(&pod.metadata)
}

/// Whether the pod carries `group`'s marks. The role label alone does not say which group
/// marked a pod: the group annotation does.
pub fn is_marked_for(pod: &Pod, group: &str) -> bool {
    marked_group(pod) == Some(group)
}

/// Whether the pod carries `group`'s leader marks: the label `role=leader` and the group's
/// annotation.
pub fn leads_for(pod: &Pod, group: &str) -> bool {
    role(pod) == Some(ROLE_LEADER) && is_marked_for(pod, group)
}

/// Whether the pod carries all of `group`'s leader marks at `epoch`: the label, the group's
/// annotation and that fencing token.
pub fn leads_for_at(pod: &Pod, group: &str, epoch: i64) -> bool {
    leads_for(pod, group) && self::epoch(pod) == Some(epoch)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::crd::{EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_LABEL};

    fn pod(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        let map = |kv: &[(&str, &str)]| {
            let m: BTreeMap<String, String> = kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Some(m)
        };
        Pod {
            metadata: ObjectMeta {
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_leaders_marks_read_back() {
        let leader = pod(
            &[(ROLE_LABEL, ROLE_LEADER)],
            &[(EPOCH_ANNOTATION, "12"), (GROUP_ANNOTATION, "pay")],
        );
        assert_eq!(role(&leader), Some(ROLE_LEADER));
        assert_eq!(epoch(&leader), Some(12));
        assert_eq!(marked_group(&leader), Some("pay"));
        assert!(is_marked_for(&leader, "pay"));
        assert!(!is_marked_for(&leader, "shop"));
        assert!(leads_for(&leader, "pay"));
        assert!(!leads_for(&leader, "shop"));
        let follower = pod(&[(ROLE_LABEL, "follower")], &[(GROUP_ANNOTATION, "pay")]);
        assert!(!leads_for(&follower, "pay"));
        let foreign_label = pod(&[(ROLE_LABEL, ROLE_LEADER)], &[]);
        assert!(!leads_for(&foreign_label, "pay"));
    }

    #[test]
    fn an_unmarked_pod_has_no_marks() {
        let plain = pod(&[("app", "pay")], &[]);
        assert_eq!(
            (role(&plain), epoch(&plain), marked_group(&plain)),
            (None, None, None)
        );
        assert!(!is_marked_for(&plain, "pay"));
        assert!(!is_marked_for(&Pod::default(), ""));
    }

    #[test]
    fn an_epoch_that_does_not_parse_is_no_token() {
        assert_eq!(epoch(&pod(&[], &[(EPOCH_ANNOTATION, "twelve")])), None);
        assert_eq!(epoch(&pod(&[], &[(EPOCH_ANNOTATION, "+12")])), None);
    }

    #[test]
    fn an_empty_group_annotation_marks_no_group() {
        // As a member reads it: a pod carrying it is no other group's, and its marks may go.
        assert_eq!(marked_group(&pod(&[], &[(GROUP_ANNOTATION, "")])), None);
    }
}
