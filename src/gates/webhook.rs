//! Webhook gates: POST the rollout's state to a URL; a 2xx answer passes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::access::{Access, Resolved};
use super::http::{read_limited, redirect_reason, timeout_of};
use super::outbound::{GateHttp, describe};
use super::{GateResult, Limits};
use crate::api::{Phase, WebhookGate};

/// `retries` of a webhook gate when unset.
pub const DEFAULT_RETRIES: i32 = 2;
/// Webhook gates have no interval of their own: they are asked this often.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Webhook gates fail the rollout on the first failed call (after its retries).
pub const LIMITS: Limits = Limits {
    failures: 0,
    inconclusive: 0,
};

/// Pause before the first retry; doubled before each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest pause between two calls.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Bytes of an error answer read for the message.
const MAX_ERROR_BODY: usize = 4096;
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
}

impl WebhookSpec {
    /// Reads a gate, applying the defaults; every value is usable.
    pub fn parse(gate: &WebhookGate) -> WebhookSpec {
        WebhookSpec {
            name: gate.name.clone(),
            url: gate.url.clone(),
            timeout: timeout_of(gate.timeout_seconds),
            retries: gate
                .retries
                .unwrap_or(DEFAULT_RETRIES)
                .clamp(0, MAX_RETRIES),
            access: Access::of(gate.auth.as_ref(), &gate.headers, gate.tls.as_ref()),
        }
    }

    /// The longest a [`call`] can take: every attempt timing out, plus the pauses.
    pub fn worst_case(&self) -> Duration {
        let attempts = u32::try_from(self.retries).unwrap_or(0) + 1;
        let pauses = (0..attempts.saturating_sub(1))
            .map(|i| (FIRST_BACKOFF * 2u32.saturating_pow(i)).min(MAX_BACKOFF))
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

/// Calls a webhook gate: POSTs `body` as JSON with the gate's timeout. A 2xx
/// answer is a pass (value: the status code). Any other answer, a timeout or
/// a connection error is retried up to `retries` times (default 2) after
/// 200ms, 400ms, ... (at most 5s); the last attempt decides: a non-2xx answer
/// gives `Fail` with its status code (and the start of its body only when
/// the operator allows it, see [`GateHttp::body_excerpt`]); a 3xx is not
/// followed; a transport problem or an address the operator refuses gives
/// `Error` (a refusal is not retried: it would be refused again).
///
/// Worst case the call takes `(retries + 1) * timeout` plus the pauses.
pub async fn call(http: &GateHttp, gate: &WebhookSpec, body: &WebhookBody) -> GateResult {
    call_with(http, &Resolved::none(), gate, body).await
}

/// [`call`] with the gate's credentials, headers and CA bundle, read
/// beforehand (see [`super::access`]).
pub async fn call_with(
    http: &GateHttp,
    access: &Resolved,
    gate: &WebhookSpec,
    body: &WebhookBody,
) -> GateResult {
    let (timeout, retries) = (gate.timeout, gate.retries);
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0;
    loop {
        let (result, retry) = call_once(http, access, gate, body, timeout).await;
        if result.is_pass() || !retry || attempt >= retries {
            return match result {
                GateResult::Fail { value, reason } if attempt > 0 => GateResult::Fail {
                    value,
                    reason: format!("{reason} (after {} attempts)", attempt + 1),
                },
                GateResult::Error { reason } if attempt > 0 => GateResult::Error {
                    reason: format!("{reason} (after {} attempts)", attempt + 1),
                },
                other => other,
            };
        }
        tracing::debug!(gate = %gate.name, attempt, ?result, "webhook gate call failed, retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        attempt += 1;
    }
}

/// One call, and whether another attempt could answer differently (not
/// after a refusal of the operator's policy).
async fn call_once(
    http: &GateHttp,
    access: &Resolved,
    gate: &WebhookSpec,
    body: &WebhookBody,
    timeout: Duration,
) -> (GateResult, bool) {
    let client = access.client(http);
    let sent = match access
        .apply(client.post(&gate.url).json(body).timeout(timeout))
        .build()
    {
        Ok(request) => http.send_on(client, request).await,
        Err(e) => Err(e.into()),
    };
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            let reason = describe("webhook", &gate.url, timeout, &e);
            return (GateResult::Error { reason }, !e.is_refusal());
        }
    };
    let status = response.status();
    if status.is_success() {
        let value = f64::from(status.as_u16());
        return (GateResult::Pass { value }, false);
    }
    let reason = if status.is_redirection() {
        redirect_reason("webhook", &response)
    } else {
        let text = match read_limited(response, MAX_ERROR_BODY).await {
            Ok((b, _)) => http.body_excerpt(&b),
            // A body cut short still tells the status code.
            Err(_) => String::new(),
        };
        if text.is_empty() {
            format!("webhook answered HTTP {}", status.as_u16())
        } else {
            format!("webhook answered HTTP {}: {text}", status.as_u16())
        }
    };
    let value = Some(f64::from(status.as_u16()));
    (GateResult::Fail { value, reason }, true)
}

#[cfg(test)]
mod tests {
    use super::*;

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
