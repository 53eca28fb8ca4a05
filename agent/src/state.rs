//! What the agent publishes: the role, until when it holds, and a version that changes with
//! either.

use std::time::{SystemTime, UNIX_EPOCH};

use leadergroup_client::Role;
use serde::Serialize;
use tokio::time::Instant;

/// The role as the files and the endpoint spell it.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader { .. } => "leader",
        Role::Follower => "follower",
        Role::Unknown => "unknown",
    }
}

/// `at` on this node's wall clock, in Unix milliseconds: the clock every container of the pod
/// can read (`date`, `time.time()`, `time.Now()`). Rounded down, so never later than `at`.
pub fn unix_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let wall = SystemTime::now();
    let wall = if at >= now {
        wall.checked_add(at - now)
    } else {
        wall.checked_sub(now - at)
    };
    wall.and_then(|w| w.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The published state: the role, until when it holds, and the version.
///
/// The version is an opaque string, `<incarnation>-<n>`: `n` counts the changes of role or of
/// its validity since this process started, and the incarnation (the start time in
/// milliseconds, hexadecimal) keeps a restarted agent from handing out a version it handed out
/// before. Clients only compare it for equality.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The role now.
    pub role: Role,
    /// While leader: the instant the role lapses unless the member confirms it again.
    pub valid_until: Option<Instant>,
    /// [`Published::valid_until`] in Unix milliseconds ([`unix_ms`]), as published.
    pub valid_until_ms: Option<u64>,
    incarnation: u64,
    changes: u64,
}

impl Published {
    /// The state at start: [`Role::Unknown`], change 0.
    pub fn initial(incarnation: u64) -> Published {
        Published {
            role: Role::Unknown,
            valid_until: None,
            valid_until_ms: None,
            incarnation,
            changes: 0,
        }
    }

    /// Takes `role`, valid until `valid_until` (only a leader's is kept); true (and a new
    /// version) when either differs from the state held.
    pub fn update(&mut self, role: Role, valid_until: Option<Instant>) -> bool {
        let valid_until = valid_until.filter(|_| role.is_leader());
        if role == self.role && valid_until == self.valid_until {
            return false;
        }
        self.role = role;
        self.valid_until = valid_until;
        self.valid_until_ms = valid_until.map(unix_ms);
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
            valid_until: self.valid_until_ms,
            version: self.version(),
        }
    }
}

/// `{"role":"leader","epoch":7,"validUntil":1765123456789,"version":"18f0c2a91b3-2"}`; `epoch`
/// and `validUntil` are null unless leader.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleView {
    /// `leader`, `follower` or `unknown`.
    pub role: &'static str,
    /// The fencing token while leader.
    pub epoch: Option<i64>,
    /// While leader: the Unix time in milliseconds, on this node's clock, from which the role no
    /// longer holds unless a newer answer moved it. A reader stops acting as leader then,
    /// whatever else it has heard (the agent may be paused).
    pub valid_until: Option<u64>,
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
        assert!(!p.update(Role::Unknown, None));
        assert_eq!(p.version(), "abc-0");
        let leader = Role::Leader {
            epoch: Epoch::from(7),
        };
        let t0 = Instant::now();
        assert!(p.update(leader, Some(t0)));
        assert!(!p.update(leader, Some(t0)));
        assert_eq!(p.version(), "abc-1");
        // A new term of the same pod is a change (the epoch moved).
        assert!(p.update(
            Role::Leader {
                epoch: Epoch::from(8)
            },
            Some(t0)
        ));
        assert_eq!(p.version(), "abc-2");
        // So is a confirmation that moves the validity.
        assert!(p.update(
            Role::Leader {
                epoch: Epoch::from(8)
            },
            Some(t0 + std::time::Duration::from_secs(5))
        ));
        assert_eq!(p.version(), "abc-3");
        // Only a leader's validity is published.
        assert!(p.update(Role::Follower, Some(t0)));
        assert_eq!((p.valid_until, p.valid_until_ms), (None, None));
    }

    #[test]
    fn the_json_has_the_epoch_only_while_leader() {
        let mut p = Published::initial(1);
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            r#"{"role":"unknown","epoch":null,"validUntil":null,"version":"1-0"}"#
        );
        let until = Instant::now() + std::time::Duration::from_secs(10);
        p.update(
            Role::Leader {
                epoch: Epoch::from(7),
            },
            Some(until),
        );
        let ms = p.valid_until_ms.unwrap();
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            format!(r#"{{"role":"leader","epoch":7,"validUntil":{ms},"version":"1-1"}}"#)
        );
        p.update(Role::Follower, None);
        assert_eq!(
            serde_json::to_string(&p.view()).unwrap(),
            r#"{"role":"follower","epoch":null,"validUntil":null,"version":"1-2"}"#
        );
    }

    #[test]
    fn the_validity_is_the_instant_on_the_wall_clock() {
        let wall_now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        let before = wall_now();
        let ms = u128::from(unix_ms(Instant::now() + std::time::Duration::from_secs(10)));
        let after = wall_now();
        assert!(
            ms >= before + 10_000 - 1 && ms <= after + 10_000,
            "{before} {ms} {after}"
        );
        let past = u128::from(unix_ms(Instant::now() - std::time::Duration::from_secs(1)));
        assert!(past < wall_now() - 900);
    }
}
