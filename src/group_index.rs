//! The names of the LeaderGroups of each namespace, so that a pod event and a decision look at
//! the groups of their own namespace instead of every group watched. With 10,000 groups in ten
//! namespaces, copying the whole group cache on every pod event (to map it to its groups) and on
//! every reconcile (to settle overlapping selectors) was the operator's largest cost.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::crd::LeaderGroup;
use crate::relist::{Change, Relist, key};

/// Group names by namespace; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct GroupIndex {
    inner: Arc<RwLock<Index>>,
}

#[derive(Default)]
struct Index {
    namespaces: HashMap<String, BTreeSet<String>>,
    /// The watch's relist in progress.
    relist: Relist,
}

impl GroupIndex {
    /// Applies one event of the group watch, as the reflector applies it to the store.
    pub fn apply(&self, event: &watcher::Event<LeaderGroup>) {
        let Ok(mut index) = self.inner.write() else {
            return;
        };
        match index.relist.follow(event) {
            Change::File(g) => index.file(g),
            Change::Remove(g) => {
                if let Some((ns, name)) = key(g) {
                    index.remove(&ns, &name);
                }
            }
            Change::Retain(listed) => index.retain(&listed),
            Change::Nothing => {}
        }
    }

    /// The groups of `ns`, from `store`.
    pub fn groups_in(&self, store: &Store<LeaderGroup>, ns: &str) -> Vec<Arc<LeaderGroup>> {
        let Ok(index) = self.inner.read() else {
            return Vec::new();
        };
        index
            .namespaces
            .get(ns)
            .into_iter()
            .flatten()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(ns)))
            .collect()
    }
}

impl Index {
    fn file(&mut self, group: &LeaderGroup) {
        if let Some((ns, name)) = key(group) {
            self.namespaces.entry(ns).or_default().insert(name);
        }
    }

    fn remove(&mut self, ns: &str, name: &str) {
        if let Some(names) = self.namespaces.get_mut(ns) {
            names.remove(name);
            if names.is_empty() {
                self.namespaces.remove(ns);
            }
        }
    }

    /// Keeps only the groups in `seen`.
    fn retain(&mut self, seen: &HashSet<(String, String)>) {
        for (ns, names) in &mut self.namespaces {
            names.retain(|name| seen.contains(&(ns.clone(), name.clone())));
        }
        self.namespaces.retain(|_, names| !names.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use serde_json::json;

    fn group(ns: &str, name: &str) -> LeaderGroup {
        serde_json::from_value(json!({
            "apiVersion": "leadergroup.io/v1alpha1",
            "kind": "LeaderGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": name}}},
        }))
        .unwrap()
    }

    fn names(groups: Vec<Arc<LeaderGroup>>) -> Vec<String> {
        let mut names: Vec<String> = groups
            .iter()
            .filter_map(|g| g.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn groups_are_found_in_their_own_namespace_and_a_relist_forgets_the_gone() {
        let (store, mut writer) = reflector::store::<LeaderGroup>();
        let index = GroupIndex::default();
        let mut apply = |event: watcher::Event<LeaderGroup>| {
            writer.apply_watcher_event(&event);
            index.apply(&event);
        };
        apply(watcher::Event::Init);
        for (ns, name) in [("a", "g1"), ("a", "g2"), ("b", "g3")] {
            apply(watcher::Event::InitApply(group(ns, name)));
        }
        apply(watcher::Event::InitDone);
        assert_eq!(names(index.groups_in(&store, "a")), ["g1", "g2"]);
        assert_eq!(names(index.groups_in(&store, "b")), ["g3"]);
        assert!(index.groups_in(&store, "c").is_empty());

        apply(watcher::Event::Delete(group("a", "g1")));
        assert_eq!(names(index.groups_in(&store, "a")), ["g2"]);

        // A relist without g2: it went away while the watch was down.
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(group("b", "g3")));
        apply(watcher::Event::InitApply(group("b", "g4")));
        apply(watcher::Event::InitDone);
        assert!(index.groups_in(&store, "a").is_empty());
        assert_eq!(names(index.groups_in(&store, "b")), ["g3", "g4"]);
    }
}
