//! Routers: the objects that split a component's requests between its
//! stable and canary Services by weight (`traffic.gatewayAPI`: a Gateway API
//! HTTPRoute; `traffic.traefik`: a Traefik IngressRoute).
//!
//! The core decides a provider-neutral [`RouteObs`] (weights and header
//! route) and reads one back; a router only translates. Each implements
//! [`Router`]: how its object shows a [`RouteObs`] (observe), the object
//! that says one (desired), and what its cache keeps (trim); its API group
//! and resource are its RBAC. Everything else is shared: the start-up check
//! that the kind is served, the watch into a cache by plan, the writes (create,
//! then server-side apply, never taking over someone else's object), the
//! cache gauges.
//!
//! Adding a router: a module here implementing [`Router`] (its object type
//! beside it, or in `api`), its settings in `api::Traffic` with a
//! [`RouterKind`] variant and its arm in `Traffic::router`, its arm in
//! [`Dispatch::visit`], and its RBAC rule in the chart.

pub mod gateway;
pub mod traefik;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::index::PlanCache;
use super::outcome::Acted;
use super::owned::{labels, meta, write};
use super::watches::Watched;
use crate::api::cached::Labelled;
use crate::api::{ReleasePlan, RouterKind, Traffic};
use crate::plan::traffic::{Names, RouteObs, TrafficIntent};

/// Verbs every router's RBAC rule grants: cached (list, watch), created
/// (create), then written with server-side apply (patch); read one by one
/// (get) only when a create finds the name taken.
pub const VERBS: [&str; 5] = ["get", "list", "watch", "create", "patch"];

/// One kind of route object the operator generates and owns.
pub trait Router:
    Watched
    + Labelled
    + super::index::Wakes
    + Resource<Scope = NamespaceResourceScope>
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    /// The kind, in logs and refusals.
    const KIND: &'static str;

    /// The weights of the stable and canary Services and the header route
    /// this object shows.
    fn observe(&self, names: &Names) -> RouteObs;

    /// The object (spec only: the caller sets its metadata) that sends
    /// requests as `want` says, from the component's traffic settings;
    /// `None` when they do not choose this router.
    fn desired(names: &Names, want: &RouteObs, spec: &Traffic) -> Option<Self>;

    /// What its cache keeps: by default metadata and spec, without
    /// managedFields and annotations.
    fn trim(&mut self) {
        self.managed_fields_mut().clear();
        self.annotations_mut().clear();
    }
}

/// Something done with a router's type, whichever it is: what
/// [`Dispatch::visit`] dispatches.
pub trait Visit {
    /// The result.
    type Out;
    /// Does it with router `R`.
    fn visit<R: Router>(self) -> Self::Out;
}

/// From a router kind (an enum of the API, in the pure core) to its type
/// here: the one place that maps a kind to its type.
pub trait Dispatch: Copy {
    /// Does `v` with this kind's router type.
    fn visit<V: Visit>(self, v: V) -> V::Out;
    /// The kind's name (`HTTPRoute`, `IngressRoute`).
    fn kind(self) -> &'static str;
    /// The RBAC the operator needs for this router: API group and resource
    /// (granted [`VERBS`]).
    fn rbac(self) -> (String, String);
}

impl Dispatch for RouterKind {
    fn visit<V: Visit>(self, v: V) -> V::Out {
        match self {
            RouterKind::GatewayApi => v.visit::<crate::api::gateway::HTTPRoute>(),
            RouterKind::Traefik => v.visit::<crate::api::traefik::IngressRoute>(),
        }
    }

    fn kind(self) -> &'static str {
        struct Kind;
        impl Visit for Kind {
            type Out = &'static str;
            fn visit<R: Router>(self) -> &'static str {
                R::KIND
            }
        }
        self.visit(Kind)
    }

    fn rbac(self) -> (String, String) {
        struct Rbac;
        impl Visit for Rbac {
            type Out = (String, String);
            fn visit<R: Router>(self) -> (String, String) {
                (R::group(&()).into_owned(), R::plural(&()).into_owned())
            }
        }
        self.visit(Rbac)
    }
}

/// The routers the cluster serves: those whose objects can be listed (CRD
/// installed, RBAC allows them); only these are watched. An API blip is
/// asked again, not taken for a missing CRD.
pub async fn served(client: &kube::Client, namespace: Option<&str>) -> Vec<RouterKind> {
    struct Check<'a>(&'a kube::Client, Option<&'a str>);
    impl<'a> Visit for Check<'a> {
        type Out = BoxFuture<'a, bool>;
        fn visit<R: Router>(self) -> BoxFuture<'a, bool> {
            Box::pin(async move {
                let api: Api<R> = super::watches::scoped(self.0, self.1);
                super::watches::optional_kind_served(&api, R::KIND).await
            })
        }
    }
    let mut out = Vec::new();
    for kind in RouterKind::ALL {
        if kind.visit(Check(client, namespace)).await {
            out.push(kind);
        }
    }
    out
}

/// A router's cache, whichever its type.
pub(crate) trait RouteCache: Send + Sync {
    /// The kind is watched (it could be listed at start-up).
    fn served(&self) -> bool;
    /// The first list is in (or nothing is watched).
    fn synced(&self) -> bool;
    /// Objects cached.
    fn len(&self) -> usize;
    /// The resource's plural, for the cache gauge.
    fn plural(&self) -> String;
    /// The route `names.route` of a plan as cached (ours or orphaned).
    fn observe(&self, ns: &str, plan: &str, uid: &str, names: &Names) -> Option<RouteObs>;
    /// Writes the intent's route when it differs from the cached one:
    /// `Ok(true)` when written.
    fn write<'a>(
        &'a self,
        client: &'a kube::Client,
        plan: &'a ReleasePlan,
        intent: &'a TrafficIntent,
        spec: &'a Traffic,
    ) -> BoxFuture<'a, Result<bool, Acted>>;
}

struct Cached<R> {
    cache: PlanCache<R>,
    served: bool,
}

impl<R> Cached<R> {
    fn find(&self, ns: &str, plan: &str, uid: &str, name: &str) -> Option<Arc<R>>
    where
        R: Router,
    {
        super::index::plan_objects(&self.cache, ns, plan, uid)
            .into_iter()
            .find(|r| r.name_any() == name)
    }
}

impl<R: Router> RouteCache for Cached<R> {
    fn served(&self) -> bool {
        self.served
    }

    fn synced(&self) -> bool {
        self.cache.synced()
    }

    fn len(&self) -> usize {
        self.cache.len()
    }

    fn plural(&self) -> String {
        R::plural(&()).into_owned()
    }

    fn observe(&self, ns: &str, plan: &str, uid: &str, names: &Names) -> Option<RouteObs> {
        let name = names.route.as_deref()?;
        Some(self.find(ns, plan, uid, name)?.observe(names))
    }

    fn write<'a>(
        &'a self,
        client: &'a kube::Client,
        plan: &'a ReleasePlan,
        intent: &'a TrafficIntent,
        spec: &'a Traffic,
    ) -> BoxFuture<'a, Result<bool, Acted>> {
        Box::pin(async move {
            let (Some(name), Some(want)) = (&intent.names.route, &intent.route) else {
                return Ok(false);
            };
            if !self.served {
                // Unwatched, a route written now would never be seen: the step
                // would wait for it forever without a word.
                return Err(Acted::Refused(crate::plan::Refusal {
                    kind: R::KIND,
                    name: name.clone(),
                    code: 0,
                    message: format!(
                        "the operator could not list {}s when it started (their CRD is not installed, or RBAC forbids them): install it, then restart the operator",
                        R::KIND
                    ),
                }));
            }
            let Some(mut desired) = R::desired(&intent.names, want, spec) else {
                return Ok(false);
            };
            let plan_name = plan.name_any();
            *desired.meta_mut() = meta(plan, name, labels(&plan_name, &intent.component));
            let ns = plan.namespace().unwrap_or_default();
            let uid = plan.uid().unwrap_or_default();
            let cached = self.find(&ns, &plan_name, &uid, name);
            if plan.metadata.deletion_timestamp.is_some() && cached.is_none() {
                // Nothing is created while the plan is deleted.
                return Ok(false);
            }
            let api: Api<R> = Api::namespaced(client.clone(), &ns);
            write(&api, R::KIND, &desired, cached.as_ref(), &uid).await
        })
    }
}

/// The caches of every router, by kind.
pub struct Routes(BTreeMap<RouterKind, Box<dyn RouteCache>>);

impl Routes {
    /// Caches with nothing to watch: every router unserved.
    pub fn empty() -> Routes {
        struct Empty;
        impl Visit for Empty {
            type Out = Box<dyn RouteCache>;
            fn visit<R: Router>(self) -> Box<dyn RouteCache> {
                Box::new(Cached::<R> {
                    cache: PlanCache::empty(),
                    served: false,
                })
            }
        }
        Routes(RouterKind::ALL.map(|k| (k, k.visit(Empty))).into())
    }

    /// The cache of `kind`.
    pub(crate) fn get(&self, kind: RouterKind) -> Option<&dyn RouteCache> {
        self.0.get(&kind).map(AsRef::as_ref)
    }

    /// Whether every watched cache has its first list.
    pub(crate) fn synced(&self) -> bool {
        self.0.values().all(|c| c.synced())
    }

    /// The watched caches.
    pub(crate) fn served(&self) -> impl Iterator<Item = &dyn RouteCache> {
        self.0.values().filter(|c| c.served()).map(AsRef::as_ref)
    }
}

/// Watches the routers of `served` into their caches: the caches, and one
/// stream of the plans their changes wake.
pub(crate) fn watch(
    owned: &super::watches::OwnedWatches<'_>,
    served: &[RouterKind],
) -> (Routes, BoxStream<'static, ObjectRef<ReleasePlan>>) {
    struct Watch<'a, 'b>(&'a super::watches::OwnedWatches<'b>, bool);
    impl Visit for Watch<'_, '_> {
        type Out = (
            Box<dyn RouteCache>,
            Option<BoxStream<'static, ObjectRef<ReleasePlan>>>,
        );
        fn visit<R: Router>(self) -> Self::Out {
            if !self.1 {
                // A watch of a missing resource would fail forever (and
                // fail the liveness check).
                let cache = Box::new(Cached::<R> {
                    cache: PlanCache::empty(),
                    served: false,
                });
                return (cache, None);
            }
            let (cache, stream) = self.0.watch(R::trim);
            let wakes = futures::StreamExt::filter_map(stream, |r: Result<R, _>| {
                std::future::ready(r.ok().and_then(|o| super::watches::plan_of(&o)))
            });
            (
                Box::new(Cached::<R> {
                    cache,
                    served: true,
                }),
                Some(Box::pin(wakes)),
            )
        }
    }
    let mut caches = BTreeMap::new();
    let mut streams = Vec::new();
    for kind in RouterKind::ALL {
        let (cache, stream) = kind.visit(Watch(owned, served.contains(&kind)));
        caches.insert(kind, cache);
        streams.extend(stream);
    }
    (
        Routes(caches),
        Box::pin(futures::stream::select_all(streams)),
    )
}
