//! The role from a downward API volume: the files `labels` and `annotations` the kubelet writes
//! (`key="value"` lines), read every 200 ms. No RBAC and no code of the crate's watch, but no
//! confirmation either: the files say what the pod's object said when the kubelet last refreshed
//! them, so this source never reports `Unknown` and learns a change as late as that refresh.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use leadergroup_client::{EPOCH_ANNOTATION, Epoch, LEADER, ROLE_LABEL, Role};
use tokio::sync::watch;

/// Follows the files in `dir`; the receiver sees every change of role.
pub fn follow(dir: PathBuf) -> watch::Receiver<Role> {
    let (tx, rx) = watch::channel(Role::Unknown);
    tokio::spawn(async move {
        loop {
            let role = read(&dir).await;
            tx.send_if_modified(|r| std::mem::replace(r, role) != role);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    rx
}

async fn read(dir: &std::path::Path) -> Role {
    let labels = tokio::fs::read_to_string(dir.join("labels")).await;
    let annotations = tokio::fs::read_to_string(dir.join("annotations")).await;
    let (Ok(labels), Ok(annotations)) = (labels, annotations) else {
        return Role::Unknown;
    };
    role(&parse(&labels), &parse(&annotations))
}

fn role(labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> Role {
    let leader = labels.get(ROLE_LABEL).is_some_and(|r| r == LEADER);
    match annotations
        .get(EPOCH_ANNOTATION)
        .map(|e| e.parse::<Epoch>())
    {
        Some(Ok(epoch)) if leader => Role::Leader { epoch },
        _ if labels.contains_key(ROLE_LABEL) => Role::Follower,
        _ => Role::Unknown,
    }
}

/// The downward API's format: one `key="value"` per line, the value a Go-quoted string.
fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.to_owned(), v.replace("\\\"", "\"").replace("\\\\", "\\"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kubelets_files() {
        let labels = parse("app=\"ledger\"\nleadergroup.io/role=\"leader\"\n");
        let annotations = parse("leadergroup.io/epoch=\"7\"\nleadergroup.io/group=\"ledger\"\n");
        assert_eq!(
            role(&labels, &annotations),
            Role::Leader {
                epoch: Epoch::from(7u32)
            }
        );
        let follower = parse("app=\"ledger\"\nleadergroup.io/role=\"follower\"\n");
        assert_eq!(role(&follower, &BTreeMap::new()), Role::Follower);
        // Labeled leader but no epoch yet (step 5 writes both at once; a torn read is follower).
        assert_eq!(role(&labels, &BTreeMap::new()), Role::Follower);
        assert_eq!(
            role(&parse("app=\"ledger\""), &BTreeMap::new()),
            Role::Unknown
        );
    }
}
