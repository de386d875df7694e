//! Services and routes of components with traffic settings: read from
//! the caches for the core, built from the core's intents, and written when
//! they differ (look before you write). The routes go through their router
//! (`super::router`), whichever it is.
//!
//! The operator owns these objects (see docs/decisions.md, "Who owns the
//! route"): it creates them with the plan as controller owner and refuses to
//! take over an object of the same name that someone else made.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::Api;
use tracing::warn;

use super::context::Context;
use super::outcome::Acted;
use super::owned::{labels, meta, write_judged};
use super::router::{Dispatch as _, Routes};
use crate::api::inference::{InferencePool, InferencePoolSpec, PoolPort, PoolSelector};
use crate::api::{LABEL_REVISION, LABEL_ROLE, ReleasePlan, Traffic};
use crate::plan::Target;
use crate::plan::traffic::{TrafficIntent, TrafficObs};
use releaseplan_core::objects::deployment::revision_labels;
use releaseplan_core::objects::has_desired;

/// The two Services of a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Selects the stable revision.
    Stable,
    /// Selects the revision being rolled out.
    Canary,
    /// Selects the component's baseline (`baseline` with a router).
    Baseline,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Stable => "stable",
            Role::Canary => "canary",
            Role::Baseline => "baseline",
        }
    }

    /// The Service's name and the revision it selects for an intent; `None`
    /// for a baseline Service the component does not have.
    fn of(self, intent: &TrafficIntent) -> Option<(&String, &String)> {
        match self {
            Role::Stable => Some((&intent.names.stable, &intent.stable)),
            Role::Canary => Some((&intent.names.canary, &intent.canary)),
            Role::Baseline => intent.names.baseline.as_ref().zip(intent.baseline.as_ref()),
        }
    }
}

/// The revision a cached Service selects.
fn selected(services: &[Arc<Service>], name: &str) -> Option<String> {
    let s = services.iter().find(|s| s.name_any() == name)?;
    s.spec
        .as_ref()?
        .selector
        .as_ref()?
        .get(LABEL_REVISION)
        .cloned()
}

/// The traffic objects of a plan's components, as cached.
pub(crate) fn observe(
    (ns, plan, uid): (&str, &str, &str),
    target: &Target,
    services: &[Arc<Service>],
    routes: &Routes,
) -> Vec<TrafficObs> {
    target
        .components
        .iter()
        .filter_map(|c| {
            let t = c.traffic.as_ref()?;
            let names = t.names(plan, &c.name);
            let route = t
                .router
                .as_ref()
                .and_then(|r| routes.get(r.kind)?.observe(ns, plan, uid, &names));
            Some(TrafficObs {
                component: c.name.clone(),
                stable: selected(services, &names.stable),
                canary: selected(services, &names.canary),
                baseline: names.baseline.as_ref().and_then(|b| selected(services, b)),
                route,
            })
        })
        .collect()
}

/// The Service of `role` for an intent; `None` for a baseline Service the
/// component does not have.
pub fn build_service(
    plan: &ReleasePlan,
    intent: &TrafficIntent,
    role: Role,
    spec: &Traffic,
) -> Option<Service> {
    let plan_name = plan.name_any();
    let (name, hash) = role.of(intent)?;
    let mut labels = labels(&plan_name, &intent.component);
    labels.insert(LABEL_ROLE.into(), role.as_str().into());
    let target_port = match &spec.target_port {
        Some(p) => p
            .parse::<i32>()
            .map_or_else(|_| IntOrString::String(p.clone()), IntOrString::Int),
        None => IntOrString::Int(spec.port),
    };
    let mut metadata = meta(plan, name, labels);
    // The pool's content is recorded on the Service: a change of it is a
    // change of the Service, which writes both ([`act`]).
    if let Some(pool) = build_pool(plan, intent, role, spec) {
        metadata.annotations = Some(std::collections::BTreeMap::from([(
            ANNOTATION_POOL.to_string(),
            pool_digest(&pool),
        )]));
    }
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(revision_labels(&plan_name, &intent.component, hash)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: spec.port,
                target_port: Some(target_port),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// The annotation of a Service that records its InferencePool's content.
pub(crate) const ANNOTATION_POOL: &str = "releaseplan.io/inference-pool";

/// The InferencePool of `role` (`traffic.gatewayAPI.inferencePool`): named
/// and selecting as the Service of that role.
pub fn build_pool(
    plan: &ReleasePlan,
    intent: &TrafficIntent,
    role: Role,
    spec: &Traffic,
) -> Option<InferencePool> {
    let backend = spec.gateway_api.as_ref()?.inference_pool.as_ref()?;
    let plan_name = plan.name_any();
    let (name, hash) = role.of(intent)?;
    let mut labels = labels(&plan_name, &intent.component);
    labels.insert(LABEL_ROLE.into(), role.as_str().into());
    let port = spec
        .target_port
        .as_deref()
        .and_then(|p| p.parse::<i32>().ok())
        .unwrap_or(spec.port);
    let mut pool = InferencePool::new(
        name,
        InferencePoolSpec {
            selector: PoolSelector {
                match_labels: revision_labels(&plan_name, &intent.component, hash),
            },
            target_ports: vec![PoolPort { number: port }],
            endpoint_picker_ref: backend.endpoint_picker_ref.clone(),
        },
    );
    pool.metadata = meta(plan, name, labels);
    Some(pool)
}

/// A short digest of a pool's spec.
fn pool_digest(pool: &InferencePool) -> String {
    use sha2::Digest;
    use std::fmt::Write as _;
    let bytes = serde_json::to_vec(&pool.spec).unwrap_or_default();
    let sum = sha2::Sha256::digest(&bytes);
    sum.iter().take(8).fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Writes the Services and routes that differ from the intents (Services
/// first: a route must never name a Service that is not there); the first
/// failure ends the pass.
pub(super) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    services: &[Arc<Service>],
    intents: &[TrafficIntent],
) -> Acted {
    // While the plan is deleted its rollback still moves requests first, but
    // nothing is created (the namespace may be terminating).
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let uid = plan.uid().unwrap_or_default();
    let service_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    for intent in intents {
        let Some(spec) = plan
            .spec
            .components
            .iter()
            .find(|c| c.name == intent.component)
            .and_then(|c| c.traffic.as_ref())
        else {
            continue;
        };
        // Services first: a route must never name a Service that is not there.
        for role in [Role::Stable, Role::Canary, Role::Baseline] {
            let Some(desired) = build_service(plan, intent, role, spec) else {
                continue;
            };
            let name = desired.metadata.name.clone().unwrap_or_default();
            let cached = services.iter().find(|s| s.name_any() == name);
            if deleting && cached.is_none() {
                continue;
            }
            // Its pool, when the route goes through InferencePools: written
            // before the Service that records it (created with a new one,
            // applied with a changed one), so a pool write that fails is
            // tried again, and before the route that names it.
            let service_fresh = cached.is_some_and(|o| has_desired(&desired, o.as_ref()));
            if !service_fresh && let Some(pool) = build_pool(plan, intent, role, spec) {
                let api: Api<InferencePool> = Api::namespaced(ctx.client.clone(), ns);
                let fresh = cached.map(|_| false);
                match write_judged(&api, "InferencePool", &pool, fresh, &uid).await {
                    Ok(true) => ctx.metrics.write("apply"),
                    Ok(false) => {}
                    Err(a) => {
                        warn!(pool = %name, "InferencePool write failed");
                        return a;
                    }
                }
            }
            match write_judged(
                &service_api,
                "Service",
                &desired,
                cached.map(|_| service_fresh),
                &uid,
            )
            .await
            {
                Ok(true) => ctx.metrics.write("apply"),
                Ok(false) => {}
                Err(a) => {
                    warn!(service = %name, "Service write failed");
                    return a;
                }
            }
        }
        // Then the route, through its router.
        let Some(kind) = spec.router().map(|(k, _)| k) else {
            continue;
        };
        let Some(router) = ctx.routes.get(kind) else {
            continue;
        };
        if let Some(refusal) = route_refusal(ctx, ns, intent, spec)
            && !deleting
        {
            warn!(route = ?intent.names.route, kind = kind.kind(), "route refused by the GatePolicy");
            return Acted::Refused(refusal);
        }
        match router.write(&ctx.client, plan, intent, spec).await {
            Ok(true) => ctx.metrics.write("apply"),
            Ok(false) => {}
            Err(a) => {
                warn!(route = ?intent.names.route, kind = kind.kind(), "route write failed");
                return a;
            }
        }
    }
    Acted::Done
}

/// The administrator's GatePolicy on the intent's route: its Gateways
/// (`parentRefs`) or Traefik entry points must be allowed for the
/// namespace, else the route is not written (checked against the cached
/// policies, before any request).
fn route_refusal(
    ctx: &Context,
    ns: &str,
    intent: &TrafficIntent,
    spec: &crate::api::Traffic,
) -> Option<crate::plan::Refusal> {
    let name = intent.names.route.clone()?;
    intent.route.as_ref()?;
    let refused = |kind: &'static str, message: String| crate::plan::Refusal {
        kind,
        name: name.clone(),
        code: crate::plan::Refusal::BY_POLICY,
        message,
    };
    let Some(policy) = ctx.policy.for_namespace(ns) else {
        // Unreachable while reconciles wait for the caches; refused, not open.
        return Some(refused("HTTPRoute", "gate policies not read yet".into()));
    };
    // The same rule the core judged before the release started.
    if let Err((kind, e)) = policy.admit_traffic(spec) {
        return Some(refused(kind, e.to_string()));
    }
    None
}
