//! The fence on a Kubernetes object: the annotation [`FENCED_OBJECT_EPOCH_ANNOTATION`] holds the highest epoch
//! accepted, and every fenced write is a GET, a check, the caller's change and a REPLACE with the
//! resourceVersion that was read. Two writers never both succeed on the same version: the second
//! gets 409 Conflict and starts over from a fresh GET, where it sees the first one's epoch.

use std::{fmt::Debug, future::Future, time::Duration};

use kube::{Api, Resource, ResourceExt, api::PostParams};
use serde::{Serialize, de::DeserializeOwned};
use tokio::time::Instant;

use super::StaleEpoch;
use crate::{Epoch, ParseEpochError};

pub use crate::wire::FENCED_OBJECT_EPOCH_ANNOTATION;

/// How many 409 Conflicts in a row [`replace_fenced`] takes before it gives up.
pub const MAX_ATTEMPTS: u32 = 32;

/// Why [`replace_fenced`] did not write.
#[derive(Debug, thiserror::Error)]
pub enum ObjectFenceError {
    /// The epoch is lower than the one the object has accepted.
    #[error("{name}: {stale}")]
    Stale {
        /// The object.
        name: String,
        /// Both epochs.
        #[source]
        stale: StaleEpoch,
    },

    /// The fence annotation holds something that is not an epoch: nothing is written until a
    /// person repairs it (guessing a value could lower the fence).
    #[error("{name}: annotation {FENCED_OBJECT_EPOCH_ANNOTATION} is not an epoch: {source}")]
    BadAnnotation {
        /// The object.
        name: String,
        /// The parse error, with the value.
        #[source]
        source: ParseEpochError,
    },

    /// A request failed (the object does not exist, no permission, API server unreachable...).
    #[error("{name}: {verb} failed: {source}")]
    Kube {
        /// The object.
        name: String,
        /// `get` or `replace`.
        verb: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },

    /// A request got no answer before the write's deadline. Whether a `replace` landed is
    /// unknown; if it lands later, it still carries the epoch and the version it read, so the
    /// fence and the compare-and-swap judge it as any other write.
    #[error(
        "{name}: no answer to {verb} within {after:?} (the fenced write's deadline, two thirds of \
         the Lease duration); whether it landed is unknown: check the role before writing again"
    )]
    Deadline {
        /// The object.
        name: String,
        /// `get` or `replace`.
        verb: &'static str,
        /// The deadline, from the start of the write.
        after: Duration,
    },

    /// Other writers won every one of [`MAX_ATTEMPTS`] compare-and-swaps in a row.
    #[error("{name}: {attempts} conflicting writes in a row; gave up")]
    Contended {
        /// The object.
        name: String,
        /// How many tries.
        attempts: u32,
    },
}

impl ObjectFenceError {
    /// Both epochs, when the write was refused as stale.
    pub fn stale(&self) -> Option<StaleEpoch> {
        match self {
            ObjectFenceError::Stale { stale, .. } => Some(*stale),
            _ => None,
        }
    }
}

/// The highest epoch `obj` has accepted (`None`: never fenced).
pub fn fence_epoch<K: Resource>(obj: &K) -> Result<Option<Epoch>, ParseEpochError> {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(FENCED_OBJECT_EPOCH_ANNOTATION))
        .map(|v| v.parse())
        .transpose()
}

/// Writes object `name` as the leader at `epoch`: GET it, refuse if `epoch` is lower than its
/// [`FENCED_OBJECT_EPOCH_ANNOTATION`], apply `mutate`, set the annotation to `epoch` (the new highest), and
/// REPLACE it with the resourceVersion read. On 409 Conflict it starts over from a fresh GET
/// (`mutate` runs again on the fresh object, so make it a function of the object, not a
/// one-shot). An equal epoch is accepted: a leader writes many times in its term.
///
/// Returns the object as written. It never creates the object: a missing one is an error.
///
/// The whole write, every attempt included, ends within `deadline` (pass
/// [`crate::Membership::write_deadline`], or [`super::write_deadline`] of the group's Lease
/// duration): a request still unanswered then ends it with [`ObjectFenceError::Deadline`]. Without
/// one, a request caught in a connection that went silent would hold the caller for as long as the
/// client's own read timeout (about five minutes with kube's default).
///
/// ```no_run
/// # async fn example(client: kube::Client, epoch: leadergroup_client::Epoch) -> Result<(), leadergroup_client::fence::ObjectFenceError> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let config_maps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "prod");
/// let deadline = leadergroup_client::fence::write_deadline(std::time::Duration::from_secs(15));
/// leadergroup_client::fence::replace_fenced(&config_maps, "schedule", epoch, deadline, |cm| {
///     cm.data.get_or_insert_default().insert("next-run".into(), "12:00".into());
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn replace_fenced<K, F>(
    api: &Api<K>,
    name: &str,
    epoch: Epoch,
    deadline: Duration,
    mut mutate: F,
) -> Result<K, ObjectFenceError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    F: FnMut(&mut K),
{
    let kube_err = |verb| {
        move |source| ObjectFenceError::Kube {
            name: name.to_owned(),
            verb,
            source,
        }
    };
    let give_up = Instant::now() + deadline;
    let answer = Answer {
        name,
        give_up,
        deadline,
    };
    for _ in 0..MAX_ATTEMPTS {
        let mut obj = answer
            .of("get", api.get(name))
            .await?
            .map_err(kube_err("get"))?;
        let highest = fence_epoch(&obj).map_err(|source| ObjectFenceError::BadAnnotation {
            name: name.to_owned(),
            source,
        })?;
        if let Some(highest) = highest.filter(|h| epoch < *h) {
            return Err(ObjectFenceError::Stale {
                name: name.to_owned(),
                stale: StaleEpoch {
                    presented: epoch,
                    highest,
                },
            });
        }
        let version = obj.resource_version();
        mutate(&mut obj);
        // Whatever the mutation did to the metadata, the write is conditional on the version
        // read, and it carries the new highest epoch.
        let meta = obj.meta_mut();
        meta.resource_version = version;
        meta.annotations
            .get_or_insert_default()
            .insert(FENCED_OBJECT_EPOCH_ANNOTATION.to_owned(), epoch.to_string());
        match answer
            .of("replace", api.replace(name, &PostParams::default(), &obj))
            .await?
        {
            Ok(written) => return Ok(written),
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(e) => return Err(kube_err("replace")(e)),
        }
    }
    Err(ObjectFenceError::Contended {
        name: name.to_owned(),
        attempts: MAX_ATTEMPTS,
    })
}

/// The requests of one fenced write, all answered by the same instant.
struct Answer<'a> {
    name: &'a str,
    give_up: Instant,
    deadline: Duration,
}

impl Answer<'_> {
    /// `request`'s answer, or [`ObjectFenceError::Deadline`] if it does not come in time.
    async fn of<T>(
        &self,
        verb: &'static str,
        request: impl Future<Output = T>,
    ) -> Result<T, ObjectFenceError> {
        tokio::time::timeout_at(self.give_up, request)
            .await
            .map_err(|_| ObjectFenceError::Deadline {
                name: self.name.to_owned(),
                verb,
                after: self.deadline,
            })
    }
}
