//! Event, condition and failure reasons: one home for the names tools and
//! people match on (Events' `reason`, conditions' `reason`, the plugin's exit
//! codes). Each set is an enum, so a reason the core writes and one the
//! plugin matches on are the same value, checked by the compiler; the text
//! appears only here.

/// An enum of reasons whose variant names are the reasons' text.
macro_rules! reasons {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every reason of the set.
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The reason as written to the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reasons! {
    /// `reason` of an Event the operator records on a plan.
    EventReason {
        /// A rollout of a new revision started.
        RolloutStarted,
        /// An unfinished rollout was replaced by a newer spec.
        RolloutSuperseded,
        /// The rollout moved to another step.
        StepAdvanced,
        /// A halted rollout is retried.
        RetryRequested,
        /// The new revision is stable.
        Promoted,
        /// A failure holds the rollout (automatic rollback off).
        RolloutHalted,
        /// Every component returns to the stable revision.
        RollbackStarted,
        /// The rollback finished.
        RolledBack,
        /// A pause or resume request was applied.
        RequestApplied,
        /// A request that does not apply in the current phase.
        RequestIgnored,
        /// A request annotation that is not a request.
        InvalidRequest,
        /// The spec passed admission but cannot be acted on.
        InvalidSpec,
        /// The API server refused a Deployment write (a 4xx answer).
        DeploymentRefused,
        /// A write of a Deployment, Service or route got no answer
        /// (connection reset, timeout) or a 5xx one: retried with backoff.
        ApiUnavailable,
        /// The API server refused a write of a Service or HTTPRoute (or one
        /// of that name belongs to someone else).
        TrafficRefused,
        /// The API server refused a write of a ComponentScale or an owned
        /// HPA (or one of that name belongs to someone else).
        AutoscalerRefused,
        /// A reconcile failed (rate-limited).
        ReconcileError,
        /// A gate's verdict became Passed.
        GatePassed,
        /// A gate's verdict became Failed.
        GateFailed,
        /// A gate's verdict became Inconclusive.
        GateInconclusive,
        /// A gate went past its `inconclusiveLimit`: the rollout is paused
        /// until a human promotes, retries or aborts it.
        RolloutAwaitingDecision,
        /// A template gate's GateTemplate or ClusterGateTemplate does not exist.
        GateTemplateNotFound,
        /// A template gate's template and arguments do not make a usable gate.
        GateTemplateInvalid,
        /// A ConfigMap or Secret the template references does not exist: the
        /// plan holds until it does.
        ConfigMissing,
        /// The API server refused (or did not take) the write of a copy of a
        /// ConfigMap or Secret: the revision that reads it waits.
        ConfigRefused,
        /// Config a plan references is read live, not versioned with each
        /// revision: the operator may not read ConfigMaps and Secrets in the
        /// plan's namespace (`ConfigVersioned` False says what grants it).
        ConfigNotVersioned,
        /// A component adopted a running Deployment (`adopt`): it is scaled down as
        /// the first revision's pods become ready.
        AdoptionStarted,
        /// An adopted Deployment runs no pod: the component's own revision is stable.
        HandedOver,
        /// The Deployment a component adopts does not exist.
        AdoptionTargetNotFound,
        /// The Deployment a component adopts cannot be adopted (owned by a
        /// controller, a plan's revision, or marked by another plan).
        AdoptionRefused,
        /// A `promote --override-window` started or advanced a rollout
        /// through a closed release window or a freeze (Warning, audited).
        WindowOverridden,
        /// A release window or freeze holds the rollout (Normal; the
        /// `Progressing` condition says until when).
        RolloutHeld,
        /// A notification receiver keeps failing, or the plan's notification
        /// settings cannot be used (docs/notifications.md).
        NotificationFailed,
        /// The administrator's GatePolicy (or the operator's own address
        /// rules) refuses a gate or route of the plan: the release does not
        /// start, or holds, until the policy allows it; never a rollback.
        GatePolicyRefused,
    }
}

impl EventReason {
    /// The Event's `action`: what the operator did (or tried to do), a verb
    /// in the style of Kubernetes' own (`Scheduling`, `Binding`): tools
    /// group Events by reason and action.
    pub fn action(self) -> &'static str {
        match self {
            EventReason::RolloutStarted => "StartRollout",
            EventReason::RolloutSuperseded => "SupersedeRollout",
            EventReason::StepAdvanced => "AdvanceStep",
            EventReason::RetryRequested => "RetryRollout",
            EventReason::Promoted => "Promote",
            EventReason::RolloutHalted => "HaltRollout",
            EventReason::RollbackStarted => "StartRollback",
            EventReason::RolledBack => "FinishRollback",
            EventReason::RequestApplied => "ApplyRequest",
            EventReason::RequestIgnored => "IgnoreRequest",
            EventReason::InvalidRequest => "ReadRequest",
            EventReason::InvalidSpec => "ReadSpec",
            EventReason::DeploymentRefused => "WriteDeployment",
            EventReason::ApiUnavailable => "WriteObject",
            EventReason::TrafficRefused => "WriteTraffic",
            EventReason::AutoscalerRefused => "WriteAutoscaler",
            EventReason::ReconcileError => "Reconcile",
            EventReason::GatePassed | EventReason::GateFailed | EventReason::GateInconclusive => {
                "EvaluateGate"
            }
            EventReason::RolloutAwaitingDecision => "AwaitDecision",
            EventReason::GateTemplateNotFound | EventReason::GateTemplateInvalid => {
                "ResolveGateTemplate"
            }
            EventReason::ConfigMissing | EventReason::ConfigNotVersioned => "ReadConfig",
            EventReason::ConfigRefused => "CopyConfig",
            EventReason::AdoptionStarted
            | EventReason::HandedOver
            | EventReason::AdoptionTargetNotFound
            | EventReason::AdoptionRefused => "AdoptDeployment",
            EventReason::WindowOverridden => "OverrideWindow",
            EventReason::RolloutHeld => "HoldRollout",
            EventReason::NotificationFailed => "Notify",
            EventReason::GatePolicyRefused => "ApplyGatePolicy",
        }
    }
}

reasons! {
    /// `reason` of a condition the operator sets (see `conditions`).
    ConditionReason {
        /// Phase `Pending`: never reconciled.
        Pending,
        /// Phase `RollingOut`.
        RollingOut,
        /// Phase `RollbackInProgress`.
        RollbackInProgress,
        /// Phase `RolledBack`: a failed revision was rolled back.
        RolledBack,
        /// Phase `Stable`.
        Stable,
        /// A new spec generation is not acted on yet.
        NewGeneration,
        /// Components return to the stable revision.
        RollingBack,
        /// A failure holds the rollout (automatic rollback off).
        RolloutHalted,
        /// The rollout is held (`Progressing`).
        Paused,
        /// Held by a pause request.
        PauseRequested,
        /// Held by `spec.paused`.
        SpecPaused,
        /// Held at a pause step until promoted.
        PauseStep,
        /// Paused on a gate past its `inconclusiveLimit` until promoted,
        /// retried or aborted.
        GateInconclusive,
        /// Not held.
        NotPaused,
        /// The spec passed admission but cannot be acted on.
        InvalidSpec,
        /// The API server refused a Deployment write for good.
        DeploymentRefused,
        /// A Deployment write failed and is retried.
        DeploymentWriteFailed,
        /// A write got no answer or a 5xx one, and is retried.
        ApiUnavailable,
        /// The API server refused a Service or HTTPRoute write for good.
        TrafficRefused,
        /// The API server refused a ComponentScale or HPA write for good.
        AutoscalerRefused,
        /// A Service or HTTPRoute write failed and is retried.
        TrafficWriteFailed,
        /// The stable revision is not ready long after the rollback began.
        RollbackSlow,
        /// A template gate's GateTemplate or ClusterGateTemplate does not exist.
        GateTemplateNotFound,
        /// A template gate's template and arguments do not make a usable gate.
        GateTemplateInvalid,
        /// A ConfigMap or Secret the template references does not exist.
        ConfigMissing,
        /// `ConfigVersioned`: config the plan references is read live because
        /// the operator may not read ConfigMaps and Secrets in its namespace.
        ConfigAccessDenied,
        /// The API server refused a copy of a ConfigMap or Secret for good.
        ConfigRefused,
        /// A copy of a ConfigMap or Secret could not be written, and is retried.
        ConfigWriteFailed,
        /// `Adopted`: the adopted Deployment is scaled down as the first revision's
        /// pods become ready (or held at 0 until it runs no pod).
        HandingOver,
        /// `Adopted`: every adopted Deployment runs no pod; delete them.
        HandedOver,
        /// `Adopted`: the Deployment a component adopts does not exist.
        AdoptionTargetNotFound,
        /// `Adopted`: the Deployment a component adopts cannot be adopted.
        AdoptionRefused,
        /// No release window of the plan is open (`Progressing`, True).
        OutsideReleaseWindow,
        /// A ReleaseFreeze holds the plan (`Progressing`, True).
        ReleaseFrozen,
        /// The administrator's GatePolicy refuses a gate or route of the
        /// plan: the release does not start, or a running one holds, until
        /// the policy allows it (`Stalled`, True).
        GatePolicyRefused,
    }
}

impl From<crate::api::Phase> for ConditionReason {
    fn from(p: crate::api::Phase) -> Self {
        use crate::api::Phase;
        match p {
            Phase::Pending => ConditionReason::Pending,
            Phase::RollingOut => ConditionReason::RollingOut,
            Phase::RollbackInProgress => ConditionReason::RollbackInProgress,
            Phase::RolledBack => ConditionReason::RolledBack,
            Phase::Stable => ConditionReason::Stable,
        }
    }
}

reasons! {
    /// `status.failure.reason` of a failure the operator itself declares (pod
    /// failures carry the kubelet's reason instead, e.g. `CrashLoopBackOff`).
    FailureReason {
        /// A health gate failed.
        GateFailed,
        /// A step's pods were not ready within the progress deadline.
        ProgressDeadlineExceeded,
        /// An `abort` request.
        Aborted,
        /// The plan is being deleted.
        DeletionRequested,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Phase;

    #[test]
    fn phase_reasons_are_the_phase_names() {
        for p in Phase::ALL {
            assert_eq!(ConditionReason::from(p).as_str(), p.as_str());
        }
    }

    #[test]
    fn reasons_are_camel_case_and_unique() {
        let all: Vec<&str> = EventReason::ALL.iter().map(|r| r.as_str()).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
        assert!(all.iter().all(|r| r.starts_with(char::is_uppercase)));
    }
}
