//! Event and condition reasons: one home for the strings tools and people
//! match on (Events' `reason`, conditions' `reason`, the plugin's exit codes).

/// Event: a rollout of a new revision started.
pub const ROLLOUT_STARTED: &str = "RolloutStarted";
/// Event: an unfinished rollout was replaced by a newer spec.
pub const ROLLOUT_SUPERSEDED: &str = "RolloutSuperseded";
/// Event: the rollout moved to another step.
pub const STEP_ADVANCED: &str = "StepAdvanced";
/// Event: a halted rollout is retried.
pub const RETRY_REQUESTED: &str = "RetryRequested";
/// Event: the new revision is stable.
pub const PROMOTED: &str = "Promoted";
/// Event and condition: a failure holds the rollout (automatic rollback off).
pub const ROLLOUT_HALTED: &str = "RolloutHalted";
/// Event: every component returns to the stable revision.
pub const ROLLBACK_STARTED: &str = "RollbackStarted";
/// Event and condition: the rollback finished.
pub const ROLLED_BACK: &str = "RolledBack";
/// Event: a pause or resume request was applied.
pub const REQUEST_APPLIED: &str = "RequestApplied";
/// Event: a request that does not apply in the current phase.
pub const REQUEST_IGNORED: &str = "RequestIgnored";
/// Event: a request annotation that is not a request.
pub const INVALID_REQUEST: &str = "InvalidRequest";
/// Event and condition: the spec passed admission but cannot be acted on.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Event and condition: the API server refused a Deployment write.
pub const DEPLOYMENT_REFUSED: &str = "DeploymentRefused";
/// Condition: a Deployment write failed and is retried.
pub const DEPLOYMENT_WRITE_FAILED: &str = "DeploymentWriteFailed";
/// Event: a reconcile failed (rate-limited).
pub const RECONCILE_ERROR: &str = "ReconcileError";
/// Event: a gate's verdict became Passed.
pub const GATE_PASSED: &str = "GatePassed";
/// Event: a gate's verdict became Failed.
pub const GATE_FAILED: &str = "GateFailed";
/// Event: a gate's verdict became Inconclusive.
pub const GATE_INCONCLUSIVE: &str = "GateInconclusive";
/// Condition: the stable revision is not ready long after the rollback began.
pub const ROLLBACK_SLOW: &str = "RollbackSlow";
