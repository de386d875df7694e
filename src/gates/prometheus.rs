//! Prometheus query gates, the I/O half: ask Prometheus's instant-query API
//! and hand the answer to the core's [`interpret`].

pub use releaseplan_core::gates::prometheus::*;

use serde_json::Value;

use super::GateResult;
use super::access::Resolved;
use super::http::{read_limited, redirect_reason};
use super::outbound::{CallError, GateHttp, describe};

/// Evaluates a gate once: renders its query, asks Prometheus with the gate's
/// timeout, and interprets the answer. Transport problems, refused
/// addresses, redirects, HTTP errors and unreadable answers give
/// [`GateResult::Error`], never a pass. Messages carry Prometheus's
/// `errorType` and, only when the operator allows answer bodies
/// (`--gate-error-body-chars`), the start of its error text.
pub async fn evaluate(http: &GateHttp, gate: &PrometheusSpec, vars: &TemplateVars) -> GateResult {
    evaluate_with(http, &Resolved::none(), gate, vars).await
}

/// [`evaluate`] with the gate's credentials, headers and CA bundle, read
/// beforehand (see [`super::access`]).
pub async fn evaluate_with(
    http: &GateHttp,
    access: &Resolved,
    gate: &PrometheusSpec,
    vars: &TemplateVars,
) -> GateResult {
    // No stable revision serving (a first release, or the last step once
    // its pods are all replaced): such a query would only find no data.
    if vars.stable_revision.is_empty() && compares_with_stable(&gate.query) {
        return GateResult::NotApplicable {
            reason: "the query compares with the stable revision, which serves no pod (a first release, or all its pods are replaced)".into(),
        };
    }
    let timeout = gate.timeout;
    let query = render_query(&gate.query, vars);
    let url = match query_url(&gate.address, &query, timeout) {
        Ok(u) => u,
        Err(reason) => return GateResult::Error { reason },
    };
    match ask(http, access, &gate.address, url, timeout).await {
        Ok((json, detail)) => interpret(&json, &gate.threshold, detail),
        Err(result) => result,
    }
}

/// Sends one GET to Prometheus (`url`, built from `address`) with the gate's
/// access and `timeout`, and reads its JSON answer: the answer and how many
/// characters of error text may be repeated, or the gate's result for a
/// call that went wrong (refused, transport, redirect, too large, not JSON,
/// an HTTP error).
pub(super) async fn ask(
    http: &GateHttp,
    access: &Resolved,
    address: &str,
    url: reqwest::Url,
    timeout: std::time::Duration,
) -> Result<(Value, usize), GateResult> {
    let client = access.client(http);
    let sent = match access
        .apply(
            client
                .get(url)
                .header(reqwest::header::ACCEPT, "application/json")
                .timeout(timeout),
        )
        .build()
    {
        Ok(request) => http.send_on(client, request).await,
        Err(e) => Err(CallError::from(e)),
    };
    // An address the operator's own rules refuse is configuration, not an
    // answer of Prometheus: `Refused`, which holds the step.
    let error = |e: CallError| {
        let reason = describe("prometheus", address, timeout, &e);
        if e.is_refusal() {
            GateResult::Refused { reason }
        } else {
            GateResult::Error { reason }
        }
    };
    let response = match sent {
        Ok(r) => r,
        Err(e) => return Err(error(e)),
    };
    let status = response.status();
    if status.is_redirection() {
        return Err(GateResult::Error {
            reason: redirect_reason("prometheus", &response),
        });
    }
    // A gate query returns one number, not thousands of series: a bigger
    // answer is an error, and never held whole (`--gate-max-answer-bytes`).
    let max = http.max_answer_bytes();
    let (body, complete) = match read_limited(response, max).await {
        Ok(b) => b,
        Err(e) => return Err(error(e.into())),
    };
    if !complete {
        return Err(GateResult::Error {
            reason: format!(
                "prometheus answer is larger than {max} bytes (the operator's --gate-max-answer-bytes): make the query return one series"
            ),
        });
    }
    let detail = usize::from(http.policy().error_body_chars);
    let Ok(json) = serde_json::from_slice::<Value>(&body) else {
        return Err(GateResult::Error {
            reason: with_detail(
                format!(
                    "prometheus answered HTTP {} with a body that is not JSON",
                    status.as_u16()
                ),
                &http.body_excerpt(&body),
            ),
        });
    };
    if !status.is_success() {
        // Prometheus classifies its errors (bad query, timeout) in the JSON body.
        return Err(GateResult::Error {
            reason: with_detail(
                format!("prometheus answered HTTP {}", status.as_u16()),
                &error_of(&json, detail),
            ),
        });
    }
    Ok((json, detail))
}
