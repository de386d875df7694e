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

/// Evaluates the gate once: checks its destination and headers against the
/// administrator's `policy` (a refusal is an `Error` naming the policy and
/// rule, and nothing is sent), reads its credentials through `secrets` (a
/// failure to read them, or a Secret not bound to the destination, is an
/// `Error` naming the object), then calls it with the pinned headers.
/// Does I/O; never called by the pure core.
pub async fn evaluate(
    gate: &GateSpec,
    http: &outbound::GateHttp,
    secrets: &access::CredentialReader,
    policy: &policy::NamespacePolicy,
    ctx: &GateContext,
) -> GateResult {
    let (what, url) = match gate {
        GateSpec::Prometheus(p) => ("prometheus", p.address.as_str()),
        GateSpec::Webhook(w) => ("webhook", w.url.as_str()),
    };
    let refused = |r: policy::PolicyRefusal| GateResult::Error {
        reason: format!("{what} at {} not called: {r}", outbound::redact(url)),
    };
    // A URL that does not parse fails in the call itself, with its own message.
    let destination = reqwest::Url::parse(url.trim())
        .ok()
        .and_then(|u| policy::Destination::of(&u));
    if let Some(d) = &destination
        && let Err(r) = policy.admit_destination(d)
    {
        return refused(r);
    }
    let settings = gate.access();
    if let Some(h) = settings
        .headers
        .iter()
        .map(|h| h.name.as_str())
        .chain(settings.auth.as_ref().map(|_| "Authorization"))
        .find_map(|name| policy.admit_header(name).err())
    {
        return refused(h);
    }
    let pinned = match policy.pinned_headers() {
        Ok(p) => p,
        Err(r) => return refused(r),
    };
    if destination.is_none() && policy.governed {
        return GateResult::Error {
            reason: format!(
                "{what} at {} not called: the URL has no host and port the GatePolicy can admit",
                outbound::redact(url)
            ),
        };
    }
    let bound = access::Binding {
        policy,
        destination: destination.as_ref(),
        pinned: &pinned,
    };
    let resolve = secrets.resolve(http, settings, &ctx.vars.namespace, &bound);
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
