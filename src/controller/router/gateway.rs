//! Gateway API `HTTPRoute` (`traffic.gatewayAPI`): the header route first
//! (when set), then the weighted split, both under one path prefix.

use super::Router;
use crate::api::Traffic;
use crate::api::gateway::{
    BackendRef, HTTPRoute, HTTPRouteSpec, HeaderMatch, PathMatch, RouteMatch, RouteRule,
};
use crate::plan::traffic::{Names, RouteObs};

impl Router for HTTPRoute {
    const KIND: &'static str = "HTTPRoute";

    /// Weights of the backends of rules without header matches; the headers
    /// of a rule with header matches that sends to the canary Service.
    fn observe(&self, names: &Names) -> RouteObs {
        let mut out = RouteObs::default();
        for rule in &self.spec.rules {
            let headers: Vec<(String, String)> = rule
                .matches
                .iter()
                .flat_map(|m| m.headers.iter().map(|h| (h.name.clone(), h.value.clone())))
                .collect();
            if headers.is_empty() {
                for b in &rule.backend_refs {
                    let w = b.weight.unwrap_or(1);
                    if b.name == names.stable {
                        out.stable_weight += w;
                    } else if b.name == names.canary {
                        out.canary_weight += w;
                    } else if names.baseline.as_deref() == Some(b.name.as_str()) {
                        out.baseline_weight += w;
                    }
                }
            } else if rule.backend_refs.iter().any(|b| b.name == names.canary) {
                out.headers = headers;
            }
        }
        out
    }

    /// Gateway API prefers the rule with more header matches, so the order
    /// of the rules only helps readers.
    fn desired(names: &Names, want: &RouteObs, spec: &Traffic) -> Option<HTTPRoute> {
        let gw = spec.gateway_api.as_ref()?;
        let path = Some(PathMatch {
            type_: Some("PathPrefix".into()),
            value: Some(gw.path_prefix.clone().unwrap_or_else(|| "/".into())),
        });
        // Through InferencePools (named as the Services), which take no
        // port: the pool's own targetPorts say where its pods serve.
        let pools = gw.inference_pool.is_some();
        let backend = |service: &str, weight: i32| BackendRef {
            group: pools.then(|| crate::api::inference::GROUP.to_string()),
            kind: pools.then(|| crate::api::inference::KIND.to_string()),
            name: service.to_string(),
            port: (!pools).then_some(spec.port),
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
                backend_refs: vec![backend(&names.canary, 1)],
            });
        }
        rules.push(RouteRule {
            matches: vec![RouteMatch {
                path,
                headers: Vec::new(),
            }],
            backend_refs: std::iter::once(backend(&names.stable, want.stable_weight))
                .chain(std::iter::once(backend(&names.canary, want.canary_weight)))
                .chain(
                    names
                        .baseline
                        .as_deref()
                        .map(|b| backend(b, want.baseline_weight)),
                )
                .collect(),
        });
        Some(HTTPRoute::new(
            names.route.as_deref().unwrap_or_default(),
            HTTPRouteSpec {
                parent_refs: gw.parent_refs.clone(),
                hostnames: gw.hostnames.clone(),
                rules,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_route_reads_back_what_it_was_built_from() {
        let names = Names {
            stable: "web-stable".into(),
            canary: "web-canary".into(),
            route: Some("shop-web".into()),
            baseline: None,
        };
        let spec = Traffic {
            port: 8080,
            gateway_api: Some(crate::api::GatewayRoute {
                parent_refs: vec![crate::api::ParentRef {
                    name: "gw".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let want = RouteObs {
            stable_weight: 90,
            canary_weight: 10,
            headers: vec![("x-canary".into(), "1".into())],
            baseline_weight: 0,
        };
        let r = HTTPRoute::desired(&names, &want, &spec).unwrap();
        assert_eq!(r.observe(&names), want);
        assert_eq!(r.spec.rules.len(), 2);
        assert_eq!(
            r.spec.rules[1].backend_refs.len(),
            2,
            "no baseline: two backends"
        );
        // A baseline: a third backend, as heavy as the canary's.
        let names = Names {
            baseline: Some("web-baseline".into()),
            ..names
        };
        let want = RouteObs {
            stable_weight: 80,
            baseline_weight: 10,
            ..want
        };
        let r = HTTPRoute::desired(&names, &want, &spec).unwrap();
        assert_eq!(r.observe(&names), want);
        let split: Vec<(&str, Option<i32>)> = r.spec.rules[1]
            .backend_refs
            .iter()
            .map(|b| (b.name.as_str(), b.weight))
            .collect();
        assert_eq!(
            split,
            [
                ("web-stable", Some(80)),
                ("web-canary", Some(10)),
                ("web-baseline", Some(10))
            ]
        );
        let traefik_only = Traffic {
            port: 8080,
            traefik: Some(crate::api::TraefikRoute::default()),
            ..Default::default()
        };
        assert!(HTTPRoute::desired(&names, &want, &traefik_only).is_none());
    }
}
