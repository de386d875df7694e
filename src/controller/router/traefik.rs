//! Traefik `IngressRoute` (`traffic.traefik`), for Traefik's Kubernetes CRD
//! provider: the header route (its rule with one `Header` matcher per
//! header, to the canary Service), then the weighted route to both
//! Services. Traefik orders routes by the length of their rule, so the
//! header route, which adds to the other's rule, is tried first. A Service
//! of weight 0 is left out of Traefik's weighted round robin.

use super::Router;
use crate::api::Traffic;
use crate::api::traefik::{IngressRoute, IngressRouteRule, IngressRouteService, IngressRouteSpec};
use crate::plan::traffic::{Names, RouteObs};

impl Router for IngressRoute {
    const KIND: &'static str = "IngressRoute";

    /// Weights of the Services of routes without `Header` matchers; the
    /// headers of a route with them that sends to the canary Service.
    fn observe(&self, names: &Names) -> RouteObs {
        let mut out = RouteObs::default();
        for route in &self.spec.routes {
            let headers = header_matchers(&route.match_);
            if headers.is_empty() {
                for s in &route.services {
                    let w = s.weight.unwrap_or(1);
                    if s.name == names.stable {
                        out.stable_weight += w;
                    } else if s.name == names.canary {
                        out.canary_weight += w;
                    } else if names.baseline.as_deref() == Some(s.name.as_str()) {
                        out.baseline_weight += w;
                    }
                }
            } else if route.services.iter().any(|s| s.name == names.canary) {
                out.headers = headers;
            }
        }
        out
    }

    fn desired(names: &Names, want: &RouteObs, spec: &Traffic) -> Option<IngressRoute> {
        let t = spec.traefik.as_ref()?;
        let mut rule = format!("PathPrefix(`{}`)", t.path_prefix.as_deref().unwrap_or("/"));
        if !t.hostnames.is_empty() {
            let hosts: Vec<String> = t.hostnames.iter().map(|h| host_matcher(h)).collect();
            rule = format!("({}) && {rule}", hosts.join(" || "));
        }
        let service = |name: &str, weight: i32| IngressRouteService {
            name: name.to_string(),
            port: Some(spec.port),
            weight: Some(weight),
        };
        let mut routes = Vec::new();
        if !want.headers.is_empty() {
            let headers: Vec<String> = want
                .headers
                .iter()
                .map(|(n, v)| format!("Header(`{}`, `{}`)", quoted(n), quoted(v)))
                .collect();
            routes.push(IngressRouteRule {
                match_: format!("{rule} && {}", headers.join(" && ")),
                kind: Some("Rule".into()),
                services: vec![service(&names.canary, 1)],
            });
        }
        routes.push(IngressRouteRule {
            match_: rule,
            kind: Some("Rule".into()),
            services: std::iter::once(service(&names.stable, want.stable_weight))
                .chain(std::iter::once(service(&names.canary, want.canary_weight)))
                .chain(
                    names
                        .baseline
                        .as_deref()
                        .map(|b| service(b, want.baseline_weight)),
                )
                .collect(),
        });
        Some(IngressRoute::new(
            names.route.as_deref().unwrap_or_default(),
            IngressRouteSpec {
                entry_points: t.entry_points.clone(),
                routes,
            },
        ))
    }
}

/// A host name as a matcher: `HostRegexp` for a wildcard (`*.example.com`).
fn host_matcher(host: &str) -> String {
    match host.strip_prefix("*.") {
        Some(rest) => format!("HostRegexp(`^[^.]+\\.{}$`)", rest.replace('.', "\\.")),
        None => format!("Host(`{host}`)"),
    }
}

/// A value between backquotes: Traefik's rule syntax has no escape, so a
/// backquote (which the CRD's header names and values cannot have, but
/// cheaper to be sure) is dropped.
fn quoted(v: &str) -> String {
    v.replace('`', "")
}

/// The `Header(`name`, `value`)` matchers of a rule, in order.
fn header_matchers(rule: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = rule;
    while let Some(at) = rest.find("Header(`") {
        rest = &rest[at + "Header(`".len()..];
        let Some((name, after)) = rest.split_once('`') else {
            break;
        };
        let Some(after) = after.trim_start().strip_prefix(',') else {
            continue;
        };
        let Some(after) = after.trim_start().strip_prefix('`') else {
            continue;
        };
        let Some((value, after)) = after.split_once('`') else {
            break;
        };
        out.push((name.to_string(), value.to_string()));
        rest = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            stable: "web-stable".into(),
            canary: "web-canary".into(),
            route: Some("shop-web".into()),
            baseline: None,
        }
    }

    fn spec() -> Traffic {
        Traffic {
            port: 8080,
            traefik: Some(crate::api::TraefikRoute {
                entry_points: vec!["web".into()],
                hostnames: vec!["shop.example".into(), "*.shop.example".into()],
                path_prefix: Some("/api".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_ingress_route_reads_back_what_it_was_built_from() {
        let want = RouteObs {
            stable_weight: 70,
            canary_weight: 30,
            headers: vec![
                ("x-canary".into(), "1".into()),
                ("x-user".into(), "qa".into()),
            ],
            baseline_weight: 0,
        };
        let r = IngressRoute::desired(&names(), &want, &spec()).unwrap();
        assert_eq!(r.observe(&names()), want);
        assert_eq!(
            r.spec.routes[1].match_,
            "(Host(`shop.example`) || HostRegexp(`^[^.]+\\.shop\\.example$`)) && PathPrefix(`/api`)"
        );
        assert_eq!(
            r.spec.routes[0].match_,
            format!(
                "{} && Header(`x-canary`, `1`) && Header(`x-user`, `qa`)",
                r.spec.routes[1].match_
            )
        );
        assert_eq!(r.spec.entry_points, ["web"]);
        let plain = RouteObs {
            stable_weight: 100,
            canary_weight: 0,
            headers: Vec::new(),
            baseline_weight: 0,
        };
        let r = IngressRoute::desired(&names(), &plain, &spec()).unwrap();
        assert_eq!(r.spec.routes.len(), 1);
        assert_eq!(r.observe(&names()), plain);
        // A baseline: a third Service, as heavy as the canary.
        let names = Names {
            baseline: Some("web-baseline".into()),
            ..names()
        };
        let split = RouteObs {
            stable_weight: 60,
            canary_weight: 20,
            headers: Vec::new(),
            baseline_weight: 20,
        };
        let r = IngressRoute::desired(&names, &split, &spec()).unwrap();
        assert_eq!(r.observe(&names), split);
        let services: Vec<&str> = r.spec.routes[0]
            .services
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(services, ["web-stable", "web-canary", "web-baseline"]);
    }

    #[test]
    fn other_routers_settings_build_no_ingress_route() {
        let spec = Traffic {
            port: 8080,
            ..Default::default()
        };
        assert!(IngressRoute::desired(&names(), &RouteObs::default(), &spec).is_none());
    }
}
