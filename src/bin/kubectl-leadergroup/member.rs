//! `member-rbac GROUP --service-account SA`: the rights a member of GROUP needs, as manifests to
//! pipe into `kubectl apply -f -`: the ServiceAccount its pods run as, the member's Role (exactly
//! docs/reference/member-role.yaml's rules, with the group's Lease named) and the RoleBinding.
//! Printed, not applied: the user reads what is granted, and applies it with their own rights.

use leadergroup_client::wire::lease_name_for;

use crate::error::PluginError;

/// The manifests of GROUP's member rights for ServiceAccount `account` in `namespace`; the
/// ServiceAccount itself unless `with_account` is false (one managed elsewhere).
pub fn member_rbac(
    group: &str,
    namespace: &str,
    account: &str,
    with_account: bool,
) -> Result<String, PluginError> {
    for (what, name) in [
        ("group", group),
        ("namespace", namespace),
        ("service account", account),
    ] {
        if !is_dns_subdomain(name) {
            return Err(PluginError::Usage(format!(
                "the {what} {name:?} is not a Kubernetes name (lowercase letters, digits, '-' and '.')"
            )));
        }
    }
    let role = format!("{group}-leadergroup-member");
    if role.len() > 253 {
        return Err(PluginError::Usage(format!(
            "the Role's name {role} is too long"
        )));
    }
    let lease = lease_name_for(group);
    let mut out = format!(
        "# The rights of LeaderGroup {group}'s members (the agent, the client crate's Membership) for the\n\
         # pods that run as ServiceAccount {account} in namespace {namespace}: exactly\n\
         # docs/reference/member-role.yaml's. `kubectl leadergroup member-rbac` printed it.\n"
    );
    if with_account {
        out.push_str(&format!(
            "apiVersion: v1\n\
             kind: ServiceAccount\n\
             metadata: {{name: {account}, namespace: {namespace}}}\n\
             ---\n"
        ));
    }
    out.push_str(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: Role\n\
         metadata: {{name: {role}, namespace: {namespace}}}\n\
         rules:\n\
         \x20 # Its own pod. RBAC cannot name a pod whose name is not known in advance (a Deployment's\n\
         \x20 # pods), so this covers the namespace's pods; reads only.\n\
         \x20 - apiGroups: [\"\"]\n\
         \x20   resources: [pods]\n\
         \x20   verbs: [get, watch]\n\
         \x20 # The group's Lease, and only it; update acknowledges leadership, steps down, and renews\n\
         \x20 # it in Heartbeat mode.\n\
         \x20 - apiGroups: [coordination.k8s.io]\n\
         \x20   resources: [leases]\n\
         \x20   resourceNames: [{lease}]\n\
         \x20   verbs: [get, watch, update]\n\
         ---\n\
         apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: RoleBinding\n\
         metadata: {{name: {role}, namespace: {namespace}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {role}}}\n\
         subjects:\n\
         \x20 - {{kind: ServiceAccount, name: {account}, namespace: {namespace}}}\n"
    ));
    Ok(out)
}

/// A DNS subdomain (RFC 1123), as Kubernetes names most objects: lowercase letters, digits, '-'
/// and '.', starting and ending with a letter or digit, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The YAML documents of `text`, as JSON values.
    fn documents(text: &str) -> Vec<serde_json::Value> {
        serde_yaml_ng::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect()
    }

    /// The rules with the Lease's name left out (the group's differs from the canonical file's).
    fn rules_without_names(role: &serde_json::Value) -> serde_json::Value {
        let mut rules = role["rules"].clone();
        for rule in rules.as_array_mut().unwrap() {
            if let Some(names) = rule.as_object_mut().unwrap().remove("resourceNames") {
                assert_eq!(names.as_array().map(Vec::len), Some(1), "{names}");
            }
        }
        rules
    }

    #[test]
    fn the_printed_role_is_the_documented_member_role_for_the_group() {
        let text = member_rbac("web", "demo", "web", true).unwrap();
        let docs = documents(&text);
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
        let canonical = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs/reference/member-role.yaml"),
        )
        .unwrap();
        let canonical = &documents(&canonical)[0];
        assert_eq!(
            rules_without_names(&docs[1]),
            rules_without_names(canonical)
        );
        let leases = docs[1]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resources"][0] == "leases")
            .unwrap();
        assert_eq!(
            leases["resourceNames"],
            serde_json::json!(["leadergroup-web"])
        );
        assert_eq!(docs[1]["metadata"]["namespace"], "demo");
        assert_eq!(
            docs[2]["roleRef"],
            serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "web-leadergroup-member"})
        );
        assert_eq!(
            docs[2]["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "web", "namespace": "demo"}])
        );
    }

    #[test]
    fn without_the_account_and_refusing_what_is_no_name() {
        let docs = documents(&member_rbac("pay", "prod", "app", false).unwrap());
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Role", "RoleBinding"]);
        for (group, ns, account) in [
            ("Web", "demo", "web"),
            ("web", "de mo", "web"),
            ("web", "demo", "-x"),
        ] {
            assert!(
                member_rbac(group, ns, account, true).is_err(),
                "{group} {ns} {account}"
            );
        }
    }
}
