//! Health gates: the pure half from the core (`releaseplan_core::gates`,
//! re-exported here: specs, verdicts, Job and template gates) and the I/O
//! half, here: the calls to Prometheus and webhooks, the reads of their
//! credentials, and the outbound policy every call goes through. Only the
//! gate runner (`controller::gates`) calls [`evaluate`], never a reconcile.

pub use releaseplan_core::gates::*;

pub mod access;
pub mod analysis;
pub mod budget;
pub(crate) mod http;
pub mod outbound;
pub mod prometheus;
pub mod webhook;

/// Evaluates the gate once: checks its destination and headers against the
/// administrator's `policy` (a refusal is `Refused`, naming the policy and
/// rule, and nothing is sent), reads its credentials through `secrets` (a
/// failure to read them is an `Error` naming the object; a Secret not bound
/// to the destination is `Refused`), then calls it with the pinned headers.
/// Does I/O; never called by the pure core. The gate runner uses
/// [`evaluate_checked`], which tells the API server's absence apart.
pub async fn evaluate(
    gate: &GateSpec,
    http: &outbound::GateHttp,
    secrets: &access::CredentialReader,
    policy: &policy::NamespacePolicy,
    ctx: &GateContext,
) -> GateResult {
    evaluate_checked(gate, http, secrets, policy, ctx)
        .await
        .map_or_else(|n| GateResult::Error { reason: n.reason }, |e| e.result)
}

/// One evaluation: its result, and an analysis gate's judgement for status.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// What the evaluation gave.
    pub result: GateResult,
    /// The judge's judgement (analysis gates).
    pub analysis: Option<releaseplan_core::api::analysis::AnalysisStatus>,
}

impl From<GateResult> for Evaluation {
    fn from(result: GateResult) -> Self {
        Evaluation {
            result,
            analysis: None,
        }
    }
}

/// The gate was not evaluated: the operator could not read its credentials
/// because the API server was away (no answer, a 5xx, a 429). Not the
/// gate's fault, so not held against it: the runner asks again, and an API
/// server restart does not fail (and roll back) a healthy rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotEvaluated {
    /// Why, for the log.
    pub reason: String,
}

/// [`evaluate`], with the API server's absence while reading the
/// credentials as [`NotEvaluated`] rather than an `Error`.
pub async fn evaluate_checked(
    gate: &GateSpec,
    http: &outbound::GateHttp,
    secrets: &access::CredentialReader,
    policy: &policy::NamespacePolicy,
    ctx: &GateContext,
) -> Result<Evaluation, NotEvaluated> {
    let (what, url) = (gate.kind(), gate.url());
    // Configuration, not a health verdict: `Refused`, which holds the step.
    if let Err(r) = policy.admit_gate(gate) {
        return Ok(Evaluation::from(GateResult::Refused {
            reason: format!("{what} at {} not called: {r}", outbound::redact(url)),
        }));
    }
    let destination = reqwest::Url::parse(url.trim())
        .ok()
        .and_then(|u| policy::Destination::of(&u));
    let settings = gate.access();
    let pinned = match policy.pinned_headers() {
        Ok(p) => p,
        // Checked by `admit_gate` just above; kept for the type.
        Err(r) => {
            return Ok(Evaluation::from(GateResult::Refused {
                reason: format!("{what} at {} not called: {r}", outbound::redact(url)),
            }));
        }
    };
    let bound = access::Binding {
        policy,
        destination: destination.as_ref(),
        pinned: &pinned,
    };
    let resolve = secrets.resolve(http, settings, &ctx.vars.namespace, &bound);
    let resolved = match tokio::time::timeout(access::READ_TIMEOUT, resolve).await {
        Ok(Ok(r)) => r,
        Ok(Err(e @ access::AccessError::Unreadable { away: true, .. })) => {
            return Err(NotEvaluated {
                reason: format!("{} gate credentials: {e}", gate.kind()),
            });
        }
        Ok(Err(e @ access::AccessError::Policy(_))) => {
            return Ok(Evaluation::from(GateResult::Refused {
                reason: format!("{} gate credentials: {e}", gate.kind()),
            }));
        }
        Ok(Err(e)) => {
            return Ok(Evaluation::from(GateResult::Error {
                reason: format!("{} gate credentials: {e}", gate.kind()),
            }));
        }
        Err(_) => {
            return Err(NotEvaluated {
                reason: format!(
                    "{} gate credentials: not read within {}s",
                    gate.kind(),
                    access::READ_TIMEOUT.as_secs()
                ),
            });
        }
    };
    Ok(match gate {
        GateSpec::Prometheus(p) => prometheus::evaluate_with(http, &resolved, p, &ctx.vars)
            .await
            .into(),
        GateSpec::Analysis(a) => {
            let (result, analysis) = analysis::evaluate_with(http, &resolved, a, &ctx.vars).await;
            Evaluation { result, analysis }
        }
        GateSpec::Webhook(w) => {
            let body = webhook::WebhookBody {
                plan: ctx.vars.plan.clone(),
                namespace: ctx.vars.namespace.clone(),
                revision: ctx.revision.clone(),
                step: ctx.step,
                phase: crate::api::Phase::RollingOut,
                component: ctx.vars.component.clone(),
                component_revision: ctx.vars.revision.clone(),
            };
            webhook::call_with(http, &resolved, w, &body).await.into()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate whose bearer token the operator cannot read while the API
    /// server is away is not evaluated (the runner asks again, nothing is
    /// held against the gate); a refusal (403) is the gate's error, as
    /// before. Nothing is called: the URL is a closed port of 127.0.0.1.
    #[tokio::test]
    async fn credentials_unread_while_the_api_server_is_away_are_not_the_gates_fault() {
        use crate::canned_api::{answering, status};
        let health: crate::api::Health = serde_json::from_value(serde_json::json!({
            "webhooks": [{"name": "smoke", "url": "http://127.0.0.1:9/hook", "retries": 0,
                "auth": {"bearer": {"secretKeyRef": {"name": "creds", "key": "token"}}}}]
        }))
        .unwrap();
        let gates = GateSpec::all(&health.entries().unwrap()).unwrap();
        let ctx = GateContext {
            vars: prometheus::TemplateVars {
                plan: "shop".into(),
                namespace: "shop".into(),
                ..prometheus::TemplateVars::default()
            },
            revision: "r1".into(),
            step: 0,
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = outbound::GateHttp::new(outbound::OutboundPolicy::default()).unwrap();
        let policy = policy::NamespacePolicy::open("shop");
        for code in [503, 500, 429] {
            let reader =
                access::CredentialReader::new(answering(vec![status(code)]).0, "ops".into());
            let got = evaluate_checked(&gates[0], &http, &reader, &policy, &ctx).await;
            let Err(n) = got else {
                panic!("{code}: evaluated: {got:?}")
            };
            assert!(n.reason.contains(&format!("HTTP {code}")), "{n:?}");
        }
        let reader = access::CredentialReader::new(answering(vec![status(403)]).0, "ops".into());
        let got = evaluate_checked(&gates[0], &http, &reader, &policy, &ctx).await;
        assert!(
            matches!(&got, Ok(Evaluation { result: GateResult::Error { reason }, .. }) if reason.contains("HTTP 403")),
            "{got:?}"
        );
    }
}
