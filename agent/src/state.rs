//! What the agent publishes: the role, and a version that changes with it.

use leadergroup_client::Role;
use serde::Serialize;

/// The role as the files and the endpoint spell it.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader { .. } => "leader",
        Role::Follower => "follower",
        Role::Unknown => "unknown",
    }
}

/// The published state: the role and its version.
///
/// The version is an opaque string, `<incarnation>-<n>`: `n` counts the changes of role since
/// this process started, and the incarnation (the start time in milliseconds, hexadecimal) keeps
/// a restarted agent from handing out a version it handed out before. Clients only compare it for
/// equality.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The role now.
    pub role: Role,
    incarnation: u64,
    changes: u64,
}

impl Published {
    /// The state at start: [`Role::Unknown`], change 0.
    pub fn initial(incarnation: u64) -> Published {
        Published {
            role: Role::Unknown,
            incarnation,
            changes: 0,
        }
    }

    /// Takes `role`; true (and a new version) when it differs from the role held.
    pub fn update(&mut self, role: Role) -> bool {
        if role == self.role {
            return false;
        }
        self.role = role;
        self.changes += 1;
        true
    }

    /// The version, as `GET /role` returns it and `?wait=` takes it.
    pub fn version(&self) -> String {
        format!("{:x}-{}", self.incarnation, self.changes)
    }

    /// The JSON body of `GET /role`.
    pub fn view(&self) -> RoleView {
        RoleView {
            role: role_name(self.role),
            epoch: self.role.leader_epoch().map(|e| e.get()),
            version: self.version(),
        }
    }
}

/// `{"role":"leader","epoch":7,"version":"18f0c2a91b3-2"}`; `epoch` is null unless leader.
#[derive(Debug, Serialize)]
pub struct RoleView {
    /// `leader`, `follower` or `unknown`.
    pub role: &'static str,
    /// The fencing token while leader.
    pub epoch: Option<i64>,
    /// Changes with every change of role; see [`Published`].
    pub version: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use leadergroup_client::Epoch;

    use super::*;

    #[test]
    fn the_version_moves_only_when_the_role_changes() {
        let mut p = Published::initial(0xabc);
        assert_eq!(p.version(), "abc-0");
        assert!(!p.update(Role::Unknown));
        assert_eq!(p.version(), "abc-0");
        let leader = Role::Leader {
            epoch: Epoch::from(7),
        };
        assert!(p.update(leader));
        assert!(!p.update(leader));
        assert_eq!(p.version(), "abc-1");
        // A new term of the same pod is a change (the epoch moved).
        assert!(p.update(Role::Leader {
            epoch: Epoch::from(8)
        }));
        assert_eq!(p.version(), "abc-2");
    }

    #[test]
    fn the_json_has_the_epoch_only_while_leader() {
        let mut p = Published::initial(1);
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            r#"{"role":"unknown","epoch":null,"version":"1-0"}"#
        );
        p.update(Role::Leader {
            epoch: Epoch::from(7),
        });
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            r#"{"role":"leader","epoch":7,"version":"1-1"}"#
        );
        p.update(Role::Follower);
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            r#"{"role":"follower","epoch":null,"version":"1-2"}"#
        );
    }
}
