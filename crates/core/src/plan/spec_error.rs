//! The error of a spec the operator cannot act on, with the path of the
//! field at fault: what spec checking, step parsing and gate parsing return.

use crate::gates::GateSpecError;

/// A spec the operator cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// JSON path of the offending field, e.g. `spec.strategy.steps[1].pause.duration`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl SpecError {
    /// An error of the field at `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> SpecError {
        SpecError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<GateSpecError> for SpecError {
    fn from(e: GateSpecError) -> Self {
        SpecError::new(e.field, e.message)
    }
}
