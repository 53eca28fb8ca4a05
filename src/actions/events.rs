//! Events on a LeaderGroup: published on a change of leader and on a refusal, never on every pass.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::crd::LeaderGroup;

/// Publishes an Event on the group. `related` names the pod that now leads: the recorder folds
/// events with the same key into one series that keeps the first note, so without it every
/// handover of one reason would show the first handover's message.
///
/// A failure is logged, not returned: an Event is a report, and losing one must not undo or
/// retry the transition it reports.
pub async fn publish(
    recorder: &Recorder,
    group: &LeaderGroup,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<&str>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Elect".into(),
        secondary: related.map(|pod| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.to_string()),
            namespace: group.namespace(),
            ..ObjectReference::default()
        }),
    };
    let reference = group.object_ref(&());
    if let Err(e) = recorder.publish(&event, &reference).await {
        warn!(error = %e, "publishing an Event failed");
    }
}
