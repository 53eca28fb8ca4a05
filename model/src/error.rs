//! What can go wrong inside the model itself: the operator's decision named something the model
//! does not know, or a status did not round-trip. Each is a bug of the model, never of the
//! operator: a state where one happened fails the property `model consistent`.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("the decision named pod {0:?}, which the model does not have")]
    UnknownPod(String),
    #[error("resourceVersion {0:?} is not one the model issued")]
    ResourceVersion(String),
    #[error("status does not round-trip through JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the decision was {0}, which the model never sets up")]
    UnexpectedDecision(&'static str),
}
