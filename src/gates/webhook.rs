//! Webhook gates, the I/O half: POST the rollout's state to the gate's URL,
//! retrying as the core's [`WebhookSpec`] says; a 2xx answer passes.

pub use releaseplan_core::gates::webhook::*;

use std::time::Duration;

use super::GateResult;
use super::access::Resolved;
use super::http::{read_limited, redirect_reason};
use super::outbound::{GateHttp, describe};
use releaseplan_core::gates::text::sanitize;

/// Bytes of an error answer read for the message.
const MAX_ERROR_BODY: usize = 4096;
/// Characters of an inconclusive answer's `reason` kept for the message.
const MAX_REASON_CHARS: usize = 256;

/// Calls a webhook gate: POSTs `body` as JSON with the gate's timeout. A 2xx
/// answer is a pass (value: the status code), unless its body is the JSON
/// `{"verdict": "Inconclusive", "reason": "..."}`: then it is `Inconclusive`
/// (not retried). Any other answer, a timeout or
/// a connection error is retried up to `retries` times (default 2) after
/// pauses doubling from 200ms, with jitter, each under 5s; the last attempt decides: a non-2xx answer
/// gives `Fail` with its status code (and the start of its body only when
/// the operator allows it, see [`GateHttp::body_excerpt`]); a 3xx is not
/// followed; a transport problem gives `Error`; an address the operator
/// refuses gives `Refused` (not retried: it would be refused again).
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
    use backon::BackoffBuilder;
    let (timeout, retries) = (gate.timeout, gate.retries);
    let mut pauses = crate::ops::backoff::gate_call().build();
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
        tokio::time::sleep(pauses.next().unwrap_or(MAX_BACKOFF)).await;
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
            // The operator's own rules refused the address: configuration,
            // not an answer of the gate (and asking again changes nothing).
            if e.is_refusal() {
                return (GateResult::Refused { reason }, false);
            }
            return (GateResult::Error { reason }, true);
        }
    };
    let status = response.status();
    if status.is_success() {
        let value = f64::from(status.as_u16());
        // A body cut short or unreadable is no explicit verdict: a 2xx passes.
        let body = read_limited(response, MAX_VERDICT_BODY.min(http.max_answer_bytes()))
            .await
            .map(|(b, _)| b)
            .unwrap_or_default();
        if let Some(why) = inconclusive_answer(&body) {
            let reason = match why.map(|w| sanitize(w.as_bytes(), MAX_REASON_CHARS)) {
                Some(w) if !w.is_empty() => format!("webhook answered Inconclusive: {w}"),
                _ => "webhook answered Inconclusive".to_string(),
            };
            return (GateResult::Inconclusive { reason }, false);
        }
        return (GateResult::Pass { value }, false);
    }
    let reason = if status.is_redirection() {
        redirect_reason("webhook", &response)
    } else {
        let text = match read_limited(response, MAX_ERROR_BODY.min(http.max_answer_bytes())).await {
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
