//! Services and HTTPRoutes of components with traffic settings: read from
//! the caches for the core, built from the core's intents, and written when
//! they differ (look before you write).
//!
//! The operator owns these objects (see docs/decisions.md, "Who owns the
//! route"): it creates them with the plan as controller owner and refuses to
//! take over an object of the same name that someone else made.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::deployment::{MANAGED_BY, is_subset, revision_labels};
use super::{Acted, Context, FIELD_MANAGER, failed};
use crate::api::gateway::{
    BackendRef, HTTPRoute, HTTPRouteSpec, HeaderMatch, PathMatch, RouteMatch, RouteRule,
};
use crate::api::{LABEL_COMPONENT, LABEL_PLAN, LABEL_REVISION, LABEL_ROLE, ReleasePlan, Traffic};
use crate::plan::Target;
use crate::plan::traffic::{RouteObs, TrafficIntent, TrafficObs};

/// The two Services of a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Selects the stable revision.
    Stable,
    /// Selects the revision being rolled out.
    Canary,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Stable => "stable",
            Role::Canary => "canary",
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

/// Reads a route's weights and header route, by the Service names.
pub fn route_obs(route: &HTTPRoute, stable: &str, canary: &str) -> RouteObs {
    let mut out = RouteObs::default();
    for rule in &route.spec.rules {
        let headers: Vec<(String, String)> = rule
            .matches
            .iter()
            .flat_map(|m| m.headers.iter().map(|h| (h.name.clone(), h.value.clone())))
            .collect();
        if headers.is_empty() {
            for b in &rule.backend_refs {
                let w = b.weight.unwrap_or(1);
                if b.name == stable {
                    out.stable_weight += w;
                } else if b.name == canary {
                    out.canary_weight += w;
                }
            }
        } else if rule.backend_refs.iter().any(|b| b.name == canary) {
            out.headers = headers;
        }
    }
    out
}

/// The traffic objects of a plan's components, as cached.
pub fn observe(
    plan: &str,
    target: &Target,
    services: &[Arc<Service>],
    routes: &[Arc<HTTPRoute>],
) -> Vec<TrafficObs> {
    target
        .components
        .iter()
        .filter_map(|c| {
            let names = c.traffic.as_ref()?.names(plan, &c.name);
            let route = names.route.as_ref().and_then(|n| {
                let r = routes.iter().find(|r| r.name_any() == *n)?;
                Some(route_obs(r, &names.stable, &names.canary))
            });
            Some(TrafficObs {
                component: c.name.clone(),
                stable: selected(services, &names.stable),
                canary: selected(services, &names.canary),
                route,
            })
        })
        .collect()
}

fn labels(plan: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PLAN.to_string(), plan.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
        (MANAGED_BY.to_string(), "releaseplan".to_string()),
    ])
}

fn meta(plan: &ReleasePlan, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: plan.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: plan.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The Service of `role` for an intent.
pub fn build_service(
    plan: &ReleasePlan,
    intent: &TrafficIntent,
    role: Role,
    spec: &Traffic,
) -> Service {
    let plan_name = plan.name_any();
    let (name, hash) = match role {
        Role::Stable => (&intent.names.stable, &intent.stable),
        Role::Canary => (&intent.names.canary, &intent.canary),
    };
    let mut labels = labels(&plan_name, &intent.component);
    labels.insert(LABEL_ROLE.into(), role.as_str().into());
    let target_port = match &spec.target_port {
        Some(p) => p
            .parse::<i32>()
            .map_or_else(|_| IntOrString::String(p.clone()), IntOrString::Int),
        None => IntOrString::Int(spec.port),
    };
    Service {
        metadata: meta(plan, name, labels),
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
    }
}

/// The HTTPRoute for an intent: the header route first (when set), then the
/// weighted split. Gateway API prefers the rule with more header matches, so
/// order only helps readers.
pub fn build_route(
    plan: &ReleasePlan,
    intent: &TrafficIntent,
    spec: &Traffic,
) -> Option<HTTPRoute> {
    let name = intent.names.route.as_ref()?;
    let want = intent.route.as_ref()?;
    let gw = spec.gateway_api.as_ref()?;
    let path = Some(PathMatch {
        type_: Some("PathPrefix".into()),
        value: Some(gw.path_prefix.clone().unwrap_or_else(|| "/".into())),
    });
    let backend = |service: &str, weight: i32| BackendRef {
        name: service.to_string(),
        port: Some(spec.port),
        weight: Some(weight),
    };
    let mut rules = Vec::new();
    if !want.headers.is_empty() {
        rules.push(RouteRule {
            matches: vec![RouteMatch {
                path: path.clone(),
                headers: want
                    .headers
                    .iter()
                    .map(|(n, v)| HeaderMatch {
                        type_: Some("Exact".into()),
                        name: n.clone(),
                        value: v.clone(),
                    })
                    .collect(),
            }],
            backend_refs: vec![backend(&intent.names.canary, 1)],
        });
    }
    rules.push(RouteRule {
        matches: vec![RouteMatch {
            path,
            headers: Vec::new(),
        }],
        backend_refs: vec![
            backend(&intent.names.stable, want.stable_weight),
            backend(&intent.names.canary, want.canary_weight),
        ],
    });
    let mut route = HTTPRoute::new(
        name,
        HTTPRouteSpec {
            parent_refs: gw.parent_refs.clone(),
            hostnames: gw.hostnames.clone(),
            rules,
        },
    );
    route.metadata = meta(plan, name, labels(&plan.name_any(), &intent.component));
    Some(route)
}

/// Whether an observed object already has every field of the desired one.
fn up_to_date<K: serde::Serialize>(desired: &K, observed: &K) -> bool {
    match (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) {
        (Ok(d), Ok(o)) => is_subset(&d, &o),
        _ => false,
    }
}

/// Writes one object: applied when cached (ours), created when not, so an
/// object of the same name made by someone else is refused, never taken over.
async fn write<K>(
    api: &Api<K>,
    kind: &'static str,
    desired: &K,
    cached: Option<&Arc<K>>,
    uid: &str,
) -> Result<bool, Acted>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    if let Some(o) = cached {
        if up_to_date(desired, o.as_ref()) {
            return Ok(false);
        }
        info!(kind, name = %name, "applying");
        return api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map(|_| true)
            .map_err(|e| failed(kind, &name, &e));
    }
    info!(kind, name = %name, "creating");
    match api.create(&PostParams::default(), desired).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Ours but not cached yet, or someone else's.
            let existing = api.get(&name).await.map_err(|e| failed(kind, &name, &e))?;
            if existing.owner_references().iter().any(|r| r.uid == uid) {
                Ok(false)
            } else {
                Err(Acted::Refused(crate::plan::Refusal {
                    kind,
                    name: name.clone(),
                    code: 409,
                    message: format!(
                        "a {kind} of that name exists and is not owned by this ReleasePlan; rename or delete it, or name another in spec.components[].traffic"
                    ),
                }))
            }
        }
        Err(e) => Err(failed(kind, &name, &e)),
    }
}

/// Writes the Services and routes that differ from the intents; the first
/// failure ends the pass.
pub(super) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    services: &[Arc<Service>],
    routes: &[Arc<HTTPRoute>],
    intents: &[TrafficIntent],
) -> Acted {
    // While the plan is deleted its rollback still moves requests first, but
    // nothing is created (the namespace may be terminating).
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let uid = plan.uid().unwrap_or_default();
    let service_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let route_api: Api<HTTPRoute> = Api::namespaced(ctx.client.clone(), ns);
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
        for role in [Role::Stable, Role::Canary] {
            let desired = build_service(plan, intent, role, spec);
            let name = desired.metadata.name.clone().unwrap_or_default();
            let cached = services.iter().find(|s| s.name_any() == name);
            if deleting && cached.is_none() {
                continue;
            }
            match write(&service_api, "Service", &desired, cached, &uid).await {
                Ok(true) => ctx.metrics.write("apply"),
                Ok(false) => {}
                Err(a) => {
                    warn!(service = %name, "Service write failed");
                    return a;
                }
            }
        }
        if intent.route.is_some() && !ctx.gateway_api {
            // Unwatched, a route written now would never be seen: the step
            // would wait for it forever without a word.
            return Acted::Refused(crate::plan::Refusal {
                kind: "HTTPRoute",
                name: intent.names.route.clone().unwrap_or_default(),
                code: 0,
                message: "the operator could not list HTTPRoutes when it started (Gateway API CRDs not installed, or RBAC forbids them): install them, then restart the operator".into(),
            });
        }
        if let Some(desired) = build_route(plan, intent, spec) {
            let name = desired.metadata.name.clone().unwrap_or_default();
            let cached = routes.iter().find(|r| r.name_any() == name);
            if deleting && cached.is_none() {
                continue;
            }
            match write(&route_api, "HTTPRoute", &desired, cached, &uid).await {
                Ok(true) => ctx.metrics.write("apply"),
                Ok(false) => {}
                Err(a) => {
                    warn!(route = %name, "HTTPRoute write failed");
                    return a;
                }
            }
        }
    }
    Acted::Done
}

/// Whether HTTPRoutes can be listed (the Gateway API CRDs are installed and
/// RBAC allows them): only then are they watched.
pub async fn serves_http_routes(client: &kube::Client, namespace: Option<&str>) -> bool {
    let api: Api<HTTPRoute> = super::scoped(client, namespace);
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            warn!(error = %e, "HTTPRoutes cannot be listed");
            false
        }
    }
}
