//! Webhook gates, the pure half: the gate's settings and the body POSTed to
//! it. The operator crate makes the call (`releaseplan::gates::webhook`); a
//! 2xx answer passes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::access::Access;
use super::timeout_of;
use crate::api::{Phase, WebhookGate};

/// `retries` of a webhook gate when unset.
pub const DEFAULT_RETRIES: i32 = 2;
/// Webhook gates have no interval of their own: they are asked this often.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Webhook gates fail the rollout on the first failed call (after its retries).
pub const FAILURE_LIMIT: i32 = 0;
/// `inconclusiveLimit` of a webhook gate when unset: an explicit inconclusive
/// answer asks a human at once.
pub const DEFAULT_INCONCLUSIVE_LIMIT: i32 = 0;
/// Bytes of a 2xx answer read for an explicit verdict.
pub const MAX_VERDICT_BODY: usize = 4096;

/// Pause before the first retry; doubled before each further one, each
/// pause lengthened by a random jitter of up to as much again.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest pause between two calls before the jitter.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Most retries honoured whatever the gate says (the CRD allows up to 10).
const MAX_RETRIES: i32 = 10;

/// A webhook gate, parsed, with its defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSpec {
    /// Name of the gate.
    pub name: String,
    /// URL the body is POSTed to.
    pub url: String,
    /// Timeout of one call (default 10s, at least 1s).
    pub timeout: Duration,
    /// Calls retried after a failure (default 2, at most 10).
    pub retries: i32,
    /// Credentials, headers and CA bundle, read at each evaluation.
    pub access: Access,
    /// Inconclusive answers tolerated in a step (default 0).
    pub inconclusive_limit: i32,
}

/// What a 2xx answer's body says, when it says `{"verdict": "Inconclusive"}`:
/// `Some(reason)` (its `reason` string, when there is one). Any other body,
/// JSON or not, leaves the 2xx a pass, as it always was.
pub fn inconclusive_answer(body: &[u8]) -> Option<Option<String>> {
    #[derive(Deserialize)]
    struct Answer {
        verdict: Option<String>,
        reason: Option<String>,
    }
    let a: Answer = serde_json::from_slice(body).ok()?;
    (a.verdict.as_deref() == Some("Inconclusive")).then_some(a.reason)
}

impl WebhookSpec {
    /// Reads a gate, applying the defaults; every value is usable.
    pub fn parse(gate: &WebhookGate) -> WebhookSpec {
        WebhookSpec {
            name: gate.name.clone(),
            url: gate.check.url.clone(),
            timeout: timeout_of(gate.check.timeout_seconds),
            retries: gate
                .check
                .retries
                .unwrap_or(DEFAULT_RETRIES)
                .clamp(0, MAX_RETRIES),
            access: Access::of(gate.auth.as_ref(), &gate.headers, gate.tls.as_ref()),
            inconclusive_limit: gate
                .check
                .inconclusive_limit
                .unwrap_or(DEFAULT_INCONCLUSIVE_LIMIT)
                .max(0),
        }
    }

    /// The longest a call of the gate can take: every attempt timing out,
    /// plus the pauses at their longest (twice the plain ones, the jitter).
    pub fn worst_case(&self) -> Duration {
        let attempts = u32::try_from(self.retries).unwrap_or(0) + 1;
        let pauses = (0..attempts.saturating_sub(1))
            .map(|i| (FIRST_BACKOFF * 2u32.saturating_pow(i)).min(MAX_BACKOFF) * 2)
            .sum::<Duration>();
        self.timeout * attempts + pauses
    }
}

/// The JSON body POSTed to a webhook gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookBody {
    /// Name of the ReleasePlan.
    pub plan: String,
    /// Namespace of the ReleasePlan.
    pub namespace: String,
    /// Revision being rolled out.
    pub revision: String,
    /// Index of the current step in `spec.strategy.steps`.
    pub step: i32,
    /// Phase of the ReleasePlan, e.g. `RollingOut`.
    pub phase: Phase,
    /// The component the gate judges: its own `component`, else the first
    /// component that changes in the rollout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub component: String,
    /// That component's template hash being rolled out (the
    /// `releaseplan.io/revision` label of its new pods).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub component_revision: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_answer_is_inconclusive() {
        assert_eq!(
            inconclusive_answer(br#"{"verdict":"Inconclusive","reason":"no traffic yet"}"#),
            Some(Some("no traffic yet".into()))
        );
        assert_eq!(
            inconclusive_answer(br#"{"verdict":"Inconclusive"}"#),
            Some(None)
        );
        for body in [
            &b""[..],
            b"ok",
            br#"{"verdict":"Passed"}"#,
            br#"{"verdict":"inconclusive"}"#,
            br#"{"status":"Inconclusive"}"#,
            b"[1,2]",
        ] {
            assert_eq!(inconclusive_answer(body), None, "{body:?}");
        }
    }

    #[test]
    fn body_is_camel_case_json() {
        let body = WebhookBody {
            plan: "shop".into(),
            namespace: "prod".into(),
            revision: "7f3c".into(),
            step: 2,
            phase: Phase::RollingOut,
            component: String::new(),
            component_revision: String::new(),
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({
                "plan": "shop", "namespace": "prod", "revision": "7f3c",
                "step": 2, "phase": "RollingOut"
            })
        );
    }
}
