//! Health gates: the pure half from the core (`releaseplan_core::gates`,
//! re-exported here: specs, verdicts, Job and template gates) and the I/O
//! half, here: the calls to Prometheus and webhooks, the reads of their
//! credentials, and the outbound policy every call goes through. Only the
//! gate runner (`controller::gates`) calls [`evaluate`], never a reconcile.

pub use releaseplan_core::gates::*;

pub mod access;
pub(crate) mod http;
pub mod outbound;
pub mod prometheus;
pub mod webhook;

/// Evaluates the gate once: reads its credentials through `secrets`
/// (a failure to read them is an `Error` naming the object and key),
/// then calls it. Does I/O; never called by the pure core.
pub async fn evaluate(
    gate: &GateSpec,
    http: &outbound::GateHttp,
    secrets: &access::CredentialReader,
    ctx: &GateContext,
) -> GateResult {
    let resolve = secrets.resolve(http, gate.access(), &ctx.vars.namespace);
    let resolved = match tokio::time::timeout(access::READ_TIMEOUT, resolve).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return GateResult::Error {
                reason: format!("{} gate credentials: {e}", gate.kind()),
            };
        }
        Err(_) => {
            return GateResult::Error {
                reason: format!(
                    "{} gate credentials: not read within {}s",
                    gate.kind(),
                    access::READ_TIMEOUT.as_secs()
                ),
            };
        }
    };
    match gate {
        GateSpec::Prometheus(p) => prometheus::evaluate_with(http, &resolved, p, &ctx.vars).await,
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
            webhook::call_with(http, &resolved, w, &body).await
        }
    }
}
