//! A watch's relists, followed for the indexes kept beside its cache: between `Init` and
//! `InitDone` the list shows every object that exists, so at its end an index drops the others
//! (deleted while the watch was down: no event ever comes for them).

use std::collections::HashSet;

use kube::Resource;
use kube::runtime::watcher::Event;

/// An object's namespace and name.
pub type Key = (String, String);

/// `object`'s key, if it has a namespace and a name.
pub fn key<K: Resource>(object: &K) -> Option<Key> {
    let meta = object.meta();
    Some((meta.namespace.clone()?, meta.name.clone()?))
}

/// What an index does with one event.
pub enum Change<'a, K> {
    /// Files the object as it now is.
    File(&'a K),
    /// Forgets the object.
    Remove(&'a K),
    /// A relist ended: keeps only these objects.
    Retain(HashSet<Key>),
    /// Nothing (a relist began).
    Nothing,
}

/// The objects a relist in progress has shown so far.
#[derive(Default)]
pub struct Relist(Option<HashSet<Key>>);

impl Relist {
    /// Notes `event` and says what the index does with it.
    pub fn follow<'a, K: Resource>(&mut self, event: &'a Event<K>) -> Change<'a, K> {
        match event {
            Event::Apply(object) => Change::File(object),
            Event::Delete(object) => Change::Remove(object),
            Event::Init => {
                self.0 = Some(HashSet::new());
                Change::Nothing
            }
            Event::InitApply(object) => {
                if let (Some(key), Some(listed)) = (key(object), self.0.as_mut()) {
                    listed.insert(key);
                }
                Change::File(object)
            }
            Event::InitDone => self.0.take().map_or(Change::Nothing, Change::Retain),
        }
    }
}
