//! History the properties need and the API server does not keep: which epochs the Lease and the
//! status ever named for each pod, and which epochs each pod was handed, in order.

use crate::api::PodId;

/// Epochs as bits of a mask (the bounded configurations stay far below 32 transitions).
fn bit(epoch: i64) -> u32 {
    u32::try_from(epoch)
        .ok()
        .and_then(|e| 1u32.checked_shl(e))
        .unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ghost {
    /// Per pod: the epochs at which the Lease ever named it holder.
    pub lease_named: Vec<u32>,
    /// Per pod: the epochs at which the status ever recorded it leader.
    pub status_named: Vec<u32>,
    /// Per pod: the epochs a promotion of it landed with.
    pub handed: Vec<u32>,
    /// The highest epoch handed so far.
    pub last_handed: i64,
    /// A promotion landed with an epoch lower than one handed before (I3: epochs only grow).
    pub epoch_went_down: bool,
    /// A promotion landed with an epoch another pod was handed (I3: never handed twice).
    pub epoch_handed_twice: bool,
    /// Per pod: how many times it was created again under its name (its incarnation now).
    pub recreated: Vec<u8>,
    /// Per pod, per incarnation: the epochs a promotion of it landed with.
    pub handed_by_incarnation: Vec<Vec<u32>>,
    /// A promotion landed on an incarnation of a pod with an epoch an earlier or later
    /// incarnation of the same name was handed (one token per incarnation).
    pub epoch_shared_by_incarnations: bool,
}

impl Ghost {
    pub fn new(pods: usize) -> Self {
        Ghost {
            lease_named: vec![0; pods],
            status_named: vec![0; pods],
            handed: vec![0; pods],
            recreated: vec![0; pods],
            handed_by_incarnation: vec![vec![0]; pods],
            ..Ghost::default()
        }
    }

    pub fn lease_named(&mut self, holder: Option<PodId>, epoch: i64) {
        if let Some(m) = holder.and_then(|p| self.lease_named.get_mut(usize::from(p))) {
            *m |= bit(epoch);
        }
    }

    pub fn status_named(&mut self, leader: Option<PodId>, epoch: i64) {
        if let Some(m) = leader.and_then(|p| self.status_named.get_mut(usize::from(p))) {
            *m |= bit(epoch);
        }
    }

    /// The pod was created again: the incarnation the new object is.
    pub fn recreate(&mut self, pod: PodId) -> u8 {
        let Some(n) = self.recreated.get_mut(usize::from(pod)) else {
            return 0;
        };
        *n = n.saturating_add(1);
        if let Some(by) = self.handed_by_incarnation.get_mut(usize::from(pod)) {
            by.push(0);
        }
        *n
    }

    pub fn handed(&mut self, pod: PodId, incarnation: u8, epoch: i64) {
        if epoch < self.last_handed {
            self.epoch_went_down = true;
        }
        let b = bit(epoch);
        let elsewhere = self
            .handed
            .iter()
            .enumerate()
            .any(|(q, m)| q != usize::from(pod) && m & b != 0);
        if elsewhere {
            self.epoch_handed_twice = true;
        }
        if let Some(m) = self.handed.get_mut(usize::from(pod)) {
            *m |= b;
        }
        if let Some(by) = self.handed_by_incarnation.get_mut(usize::from(pod)) {
            let other = by
                .iter()
                .enumerate()
                .any(|(i, m)| i != usize::from(incarnation) && m & b != 0);
            if other {
                self.epoch_shared_by_incarnations = true;
            }
            if let Some(m) = by.get_mut(usize::from(incarnation)) {
                *m |= b;
            }
        }
        self.last_handed = self.last_handed.max(epoch);
    }

    /// The Lease named `pod` at `epoch`, and the status recorded it.
    pub fn recorded(&self, pod: PodId, epoch: i64) -> bool {
        let b = bit(epoch);
        let has = |v: &Vec<u32>| v.get(usize::from(pod)).is_some_and(|m| m & b != 0);
        b != 0 && has(&self.lease_named) && has(&self.status_named)
    }
}
