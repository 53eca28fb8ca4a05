//! Who should lead, by the election rules (docs/concepts.md, "How it elects").

use kube::ResourceExt;

use super::candidates::Candidates;
use crate::crd::LeaderGroupSpec;

/// The pod that should lead, if any: the preferred pod when it is eligible, else the incumbent
/// when it is eligible (sticky: a pod that comes back does not take leadership back), else the
/// first of the succession. Paused: the incumbent, eligible or not, since nothing may change.
pub(super) fn choose(
    spec: &LeaderGroupSpec,
    candidates: &Candidates<'_>,
    incumbent: Option<&str>,
) -> Option<String> {
    if spec.paused {
        return incumbent.map(str::to_string);
    }
    let eligible = |name: &&str| candidates.is_eligible(name);
    let preferred = spec
        .preferred_leader
        .as_deref()
        .filter(|p| !p.is_empty())
        .filter(eligible);
    let sticky = incumbent.filter(eligible);
    preferred
        .or(sticky)
        .map(str::to_string)
        .or_else(|| candidates.succession.first().map(|p| p.name_any()))
}
