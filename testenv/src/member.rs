//! A group member's identity: the ServiceAccount bound to the Role the client and agent document
//! (pods get/watch; the group's Lease `leadergroup-<group>` get/watch/update by name), and a test world
//! for the client's and the agent's tests.
//!
//! Those tests, and the application-latency measurement, authenticate as a member pod would, so
//! that a missing permission fails them as it would fail a deployment. The client and the agent
//! must not depend on the operator crate, so the operator's marks are written by hand ([`Marks`]).

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::Pod,
    rbac::v1::{PolicyRule, Role},
};
use kube::Api;

use crate::{Error, Kubelet, Marks, Result, TestNamespace, namespace};

/// Which of the member Role's two rules to grant (the permission tests leave some out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberRules {
    /// Pods: get, watch.
    pub pods: bool,
    /// The group's Lease, by name: get, watch.
    pub lease: bool,
    /// With `lease`: update too (renewals in Heartbeat mode).
    pub renew: bool,
}

impl MemberRules {
    /// Both rules: exactly the Role the documentation gives.
    pub const DOCUMENTED: MemberRules = MemberRules {
        pods: true,
        lease: true,
        renew: true,
    };
    /// Both rules, but the Lease may not be updated: the member reads, and cannot renew.
    pub const NO_RENEWAL: MemberRules = MemberRules {
        pods: true,
        lease: true,
        renew: false,
    };
    /// The pods rule only: the group's Lease cannot be read.
    pub const PODS_ONLY: MemberRules = MemberRules {
        pods: true,
        lease: false,
        renew: false,
    };
    /// No rule at all.
    pub const NONE: MemberRules = MemberRules {
        pods: false,
        lease: false,
        renew: false,
    };

    /// The documented rules ([`member_rules`]) less what `self` leaves out.
    fn policy(self, group: &str) -> Result<Vec<PolicyRule>> {
        let rules = member_rules(group)?
            .into_iter()
            .filter_map(|mut rule| {
                let resources = rule.resources.as_deref().unwrap_or_default();
                if resources.iter().any(|r| r == "pods") {
                    return self.pods.then_some(rule);
                }
                if !self.lease {
                    return None;
                }
                if !self.renew {
                    rule.verbs.retain(|v| v != "update");
                }
                Some(rule)
            })
            .collect();
        Ok(rules)
    }
}

/// The Role a member needs, as the documentation gives it (`docs/reference/member-role.yaml`,
/// which `make docs-check` checks every page against), for `group`: its rules, the Lease's name
/// made `group`'s.
pub fn member_rules(group: &str) -> Result<Vec<PolicyRule>> {
    const DOCUMENTED: &str = include_str!("../../docs/reference/member-role.yaml");
    let role: Role = serde_yaml_ng::from_str(DOCUMENTED)
        .map_err(|e| Error::Unexpected(format!("docs/reference/member-role.yaml: {e}")))?;
    let lease = leadergroup_client::wire::lease_name_for(group);
    Ok(role
        .rules
        .unwrap_or_default()
        .into_iter()
        .map(|mut rule| {
            if rule.resource_names.is_some() {
                rule.resource_names = Some(vec![lease.clone()]);
            }
            rule
        })
        .collect())
}

/// Creates ServiceAccount `name` in `ns`, a Role `name` with `rules` for `group`, and a
/// RoleBinding `name` between them; returns a token for the ServiceAccount.
pub async fn member_account(
    ns: &TestNamespace,
    name: &str,
    group: &str,
    rules: MemberRules,
) -> Result<String> {
    ns.create_account_with_role(name, rules.policy(group)?)
        .await
}

/// What the client's and the agent's tests work in: a fresh namespace, its simulated kubelet,
/// and the operator's marks written by hand.
pub struct MemberWorld {
    /// The test's namespace.
    pub ns: TestNamespace,
    /// Its simulated kubelet.
    pub kubelet: Kubelet,
    /// Its pods.
    pub pods: Api<Pod>,
    /// Its Leases.
    pub leases: Api<Lease>,
    marks: Marks,
}

impl MemberWorld {
    /// A fresh namespace named after `prefix`; Leases are applied as `field_manager`, with
    /// duration `lease_duration_secs`.
    pub async fn new(
        prefix: &str,
        field_manager: &str,
        lease_duration_secs: i32,
    ) -> Result<MemberWorld> {
        let ns = namespace(prefix).await?;
        Ok(MemberWorld {
            kubelet: Kubelet::new(ns.client.clone(), &ns.name),
            pods: ns.api(),
            leases: ns.api(),
            marks: Marks::in_namespace(&ns, field_manager, lease_duration_secs),
            ns,
        })
    }

    /// See [`Marks::mark_leader`].
    pub async fn mark_leader(&self, pod: &str, group: &str, epoch: i64) -> Result<()> {
        self.marks.mark_leader(pod, group, epoch).await
    }

    /// See [`Marks::mark_follower`].
    pub async fn mark_follower(&self, pod: &str, group: &str) -> Result<()> {
        self.marks.mark_follower(pod, group).await
    }

    /// See [`Marks::put_lease`].
    pub async fn put_lease(&self, group: &str, holder: Option<&str>, epoch: i64) -> Result<()> {
        self.marks.put_lease(group, holder, epoch).await
    }

    /// A Ready pod `pod` labelled `labels` that the operator has made the leader of `group` at
    /// `epoch`: the group's Lease held by it, then its leader marks (steps 1 and 5).
    pub async fn ready_leader(
        &self,
        pod: &str,
        labels: &[(&str, &str)],
        group: &str,
        epoch: i64,
    ) -> Result<()> {
        self.kubelet.create_ready_pod(pod, labels).await?;
        self.put_lease(group, Some(pod), epoch).await?;
        self.mark_leader(pod, group, epoch).await
    }

    /// See [`member_account`]: a member ServiceAccount in this world's namespace; its token.
    pub async fn member_token(
        &self,
        name: &str,
        group: &str,
        rules: MemberRules,
    ) -> Result<String> {
        member_account(&self.ns, name, group, rules).await
    }
}
