//! The administrator's `GatePolicy`, evaluated: which policies govern a
//! namespace, and whether they admit a gate's destination, a shared
//! credential sent to that destination, a plan's header, a route's Gateway
//! or entry point. Pure: the controller passes in the policies and the
//! namespace's labels from its caches; every refusal names the policies
//! and the rule (`spec.destinations`, `spec.credentials`...), so the plan's
//! author knows whom to ask.
//!
//! A namespace selected by some policy, or any namespace when the operator
//! runs with `--gate-policy=required`, is governed: what none of its
//! policies allows is refused (policies add up, like RBAC roles). Other
//! namespaces keep the operator-wide rules of earlier versions, except
//! that a Secret annotated `releaseplan.io/gate-hosts` goes only there.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::ParentRef;
use crate::api::policy::{ANNOTATION_GATE_HOSTS, GatePolicySpec, PodSecurityLevel};
use crate::gates::pod_security::Level;

/// Whether a namespace that no policy selects is governed. Closed by
/// default, as the chart and the binary are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Not governed: the operator-wide rules (`--gate-allow-hosts`...) only.
    Optional,
    /// Governed by nothing, so nothing is allowed (`--gate-policy=required`).
    #[default]
    Required,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "optional" => Ok(Mode::Optional),
            "required" => Ok(Mode::Required),
            _ => Err(format!("{s:?}: expected optional or required")),
        }
    }
}

/// A GatePolicy by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Named {
    /// The policy's name.
    pub name: String,
    /// Its spec.
    pub spec: GatePolicySpec,
}

/// The policies that govern one namespace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamespacePolicy {
    /// The namespace.
    pub namespace: String,
    /// Whether anything not allowed below is refused.
    pub governed: bool,
    /// The policies selecting the namespace, by name.
    pub policies: Vec<Named>,
    /// Policies whose `namespaceSelector` cannot be evaluated: they govern
    /// every namespace and allow nothing (closed, not open).
    pub invalid: Vec<String>,
}

/// Why the policy refuses something; each message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyRefusal {
    /// Governed by `--gate-policy=required` and selected by no policy.
    #[error(
        "namespace {namespace} is selected by no GatePolicy and the operator requires one (--gate-policy=required){invalid}: {what} is refused"
    )]
    NotSelected {
        /// The plan's namespace.
        namespace: String,
        /// What was refused.
        what: String,
        /// A note on policies with an invalid selector, or empty.
        invalid: String,
    },
    /// No `spec.destinations` admits the host.
    #[error(
        "host {host} is not allowed for namespace {namespace}: no spec.destinations of GatePolicy {policies} admits it"
    )]
    Destination {
        /// Host and port as called.
        host: String,
        /// The plan's namespace.
        namespace: String,
        /// The policies that govern it.
        policies: String,
    },
    /// The Secret is bound to other hosts.
    #[error(
        "Secret {secret} may not be sent to {host}: {annotation} and no spec.credentials of GatePolicy {policies} binds it to that host"
    )]
    Credential {
        /// The Secret's name.
        secret: String,
        /// Host and port as called.
        host: String,
        /// What its annotation says.
        annotation: String,
        /// The policies that govern the namespace (or `(none)`).
        policies: String,
    },
    /// A plan sets a header a policy pins.
    #[error(
        "header {header} is pinned by GatePolicy {policy} (spec.pinnedHeaders) for namespace {namespace}: a plan may not set it"
    )]
    Pinned {
        /// The header as the plan wrote it.
        header: String,
        /// The policy that pins it.
        policy: String,
        /// The plan's namespace.
        namespace: String,
    },
    /// Two policies pin one header to different values.
    #[error(
        "header {header} is pinned to different values by GatePolicy {first} and {second} for namespace {namespace}: no value is sent until one pin is removed"
    )]
    PinConflict {
        /// The header.
        header: String,
        /// One policy.
        first: String,
        /// The other.
        second: String,
        /// The plan's namespace.
        namespace: String,
    },
    /// No `spec.routes` admits the route's Gateway or entry point.
    #[error(
        "{what} is not allowed for routes of namespace {namespace}: no spec.routes of GatePolicy {policies} admits it"
    )]
    Route {
        /// The Gateway (`namespace/name`) or entry point.
        what: String,
        /// The plan's namespace.
        namespace: String,
        /// The policies that govern it.
        policies: String,
    },
}

impl PolicyRefusal {
    /// What an administrator changes to allow it: the GatePolicy field, and
    /// the Helm chart's value that fills that field of the chart's own
    /// GatePolicy (for the host, Gateway or entry point refused), so the
    /// message tells a newcomer the one value to set.
    pub fn remedy(&self) -> String {
        match self {
            PolicyRefusal::NotSelected { namespace, .. } => format!(
                "allow it with a GatePolicy whose spec.namespaceSelector selects namespace {namespace} (Helm chart: gatePolicy.namespaceSelector)"
            ),
            PolicyRefusal::Destination { host, .. } => format!(
                "allow it with spec.destinations.hosts of a GatePolicy (Helm chart: list it in gatePolicy.hosts, e.g. --set 'gatePolicy.hosts={{{host}}}')"
            ),
            PolicyRefusal::Credential { secret, host, .. } => format!(
                "bind Secret {secret} to {host} in spec.credentials of a GatePolicy (Helm chart: gatePolicy.credentials), or list {host} in its annotation releaseplan.io/gate-hosts"
            ),
            PolicyRefusal::Pinned { .. } => {
                "remove the header from the gate: the policy sets it (spec.pinnedHeaders)".into()
            }
            PolicyRefusal::PinConflict { .. } => {
                "pin the header to one value in spec.pinnedHeaders of the GatePolicies".into()
            }
            PolicyRefusal::Route { what, .. } if what.starts_with("Gateway ") => format!(
                "allow {what} with spec.routes.parentRefs of a GatePolicy (Helm chart: gatePolicy.parentRefs)"
            ),
            PolicyRefusal::Route { what, .. } if what.contains("(entryPoints is empty)") => {
                "list the route's traefik.entryPoints and allow them with spec.routes.entryPoints of a GatePolicy (Helm chart: gatePolicy.entryPoints)".into()
            }
            PolicyRefusal::Route { what, .. } => format!(
                "allow {what} with spec.routes.entryPoints of a GatePolicy (Helm chart: gatePolicy.entryPoints)"
            ),
        }
    }
}

/// Why a gate may not be called at all (see [`NamespacePolicy::admit_gate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateRefusal {
    /// A rule of the GatePolicy refuses it.
    #[error(transparent)]
    Policy(PolicyRefusal),
    /// The namespace is governed and the URL has no host and port to judge.
    #[error("the URL has no host and port the GatePolicy can admit")]
    NoHost,
}

impl GateRefusal {
    /// What an administrator (or the plan's author) changes to allow it.
    pub fn remedy(&self) -> String {
        match self {
            GateRefusal::Policy(r) => r.remedy(),
            GateRefusal::NoHost => "give the gate a URL with a host".into(),
        }
    }
}

/// One host pattern: `host`, `*.domain`, an address or CIDR, with an
/// optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Name(String),
    Under(String),
    Net(IpAddr, u8),
}

impl std::str::FromStr for HostPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<HostPattern, String> {
        let bad = || {
            format!("{s:?} is not a host pattern (host, *.domain, address or CIDR, optional :port)")
        };
        let s = s.trim();
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(bad)?),
            };
            (inside, port)
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return Err(bad());
        }
        let (addr, prefix) = match host.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (host.as_str(), None),
        };
        if let Ok(ip) = addr.parse::<IpAddr>() {
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => max,
                Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            };
            return Ok(HostPattern {
                host: HostMatch::Net(ip, prefix),
                port,
            });
        }
        if prefix.is_some()
            || host
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '*'))
        {
            return Err(bad());
        }
        let host = match host.strip_prefix("*.") {
            Some(rest) if !rest.is_empty() && !rest.contains('*') => HostMatch::Under(rest.into()),
            _ if !host.contains('*') => HostMatch::Name(host),
            _ => return Err(bad()),
        };
        Ok(HostPattern { host, port })
    }
}

impl HostPattern {
    /// Whether the pattern admits `host` (as [`Destination`] holds it).
    pub fn admits(&self, d: &Destination) -> bool {
        if self.port.is_some_and(|p| p != d.port) {
            return false;
        }
        match (&self.host, &d.host) {
            (HostMatch::Name(n), DestHost::Name(h)) => n == h,
            (HostMatch::Under(suffix), DestHost::Name(h)) => h
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostMatch::Net(net, prefix), DestHost::Ip(ip)) => in_net(*ip, *net, *prefix),
            _ => false,
        }
    }
}

/// Whether `ip` is in `net/prefix` (an IPv4-mapped IPv6 address counts as
/// its IPv4 address).
fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Where a gate request goes: the URL's host (a name as written, lowercase,
/// without a trailing dot, or an address) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    host: DestHost,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DestHost {
    Name(String),
    Ip(IpAddr),
}

impl Destination {
    /// The destination of an http(s) URL; `None` without a host or port.
    pub fn of(url: &url::Url) -> Option<Destination> {
        let host = match url.host()? {
            url::Host::Domain(d) => DestHost::Name(d.trim_end_matches('.').to_ascii_lowercase()),
            url::Host::Ipv4(ip) => DestHost::Ip(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => DestHost::Ip(IpAddr::V6(ip)),
        };
        Some(Destination {
            host,
            port: url.port_or_known_default()?,
        })
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            DestHost::Name(n) => write!(f, "{n}:{}", self.port),
            DestHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            DestHost::Ip(ip) => write!(f, "{ip}:{}", self.port),
        }
    }
}

/// Whether any of `patterns` admits `d` (patterns that do not parse admit nothing).
fn any_admits<'a>(patterns: impl IntoIterator<Item = &'a str>, d: &Destination) -> bool {
    patterns
        .into_iter()
        .filter_map(|p| p.parse::<HostPattern>().ok())
        .any(|p| p.admits(d))
}

/// Whether a label selector selects `labels`; `None` when it cannot be
/// evaluated (an unknown operator, values where none belong).
pub fn selects(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let Some(s) = selector else {
        return Some(true);
    };
    let by_labels = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let mut all = by_labels;
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" if !values.is_empty() => value.is_some_and(|v| values.contains(v)),
            "NotIn" if !values.is_empty() => value.is_none_or(|v| !values.contains(v)),
            "Exists" if values.is_empty() => value.is_some(),
            "DoesNotExist" if values.is_empty() => value.is_none(),
            _ => return None,
        };
        all &= ok;
    }
    Some(all)
}

impl NamespacePolicy {
    /// The policies of `all` that select `namespace` (whose labels are
    /// `labels`), sorted by name, and whether the namespace is governed.
    pub fn select(
        namespace: &str,
        labels: &BTreeMap<String, String>,
        all: &[Named],
        mode: Mode,
    ) -> NamespacePolicy {
        let mut policies = Vec::new();
        let mut invalid = Vec::new();
        for p in all {
            match selects(p.spec.namespace_selector.as_ref(), labels) {
                Some(true) => policies.push(p.clone()),
                Some(false) => {}
                None => invalid.push(p.name.clone()),
            }
        }
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        invalid.sort();
        NamespacePolicy {
            namespace: namespace.to_string(),
            governed: mode == Mode::Required || !policies.is_empty() || !invalid.is_empty(),
            policies,
            invalid,
        }
    }

    /// Nothing governs the namespace (the operator-wide rules only).
    pub fn open(namespace: &str) -> NamespacePolicy {
        NamespacePolicy {
            namespace: namespace.to_string(),
            ..NamespacePolicy::default()
        }
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.policies.iter().map(|p| p.name.as_str()).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join(", ")
        }
    }

    /// The refusal when no policy selects a governed namespace.
    fn unselected(&self, what: String) -> Option<PolicyRefusal> {
        if !self.policies.is_empty() {
            return None;
        }
        let invalid = if self.invalid.is_empty() {
            String::new()
        } else {
            format!(
                " (GatePolicy {} has a namespaceSelector that cannot be evaluated: it governs every namespace and allows nothing)",
                self.invalid.join(", ")
            )
        };
        Some(PolicyRefusal::NotSelected {
            namespace: self.namespace.clone(),
            what,
            invalid,
        })
    }

    /// The Pod Security Standard level tenants' Job gates run at here: the
    /// most permissive that the selecting policies set, else `default` (the
    /// operator's `--gate-job-pod-security`). A policy whose selector cannot
    /// be evaluated raises nothing.
    pub fn job_pod_security(&self, default: Level) -> Level {
        self.policies
            .iter()
            .filter_map(|p| p.spec.jobs.pod_security)
            .map(|l| match l {
                PodSecurityLevel::Restricted => Level::Restricted,
                PodSecurityLevel::Baseline => Level::Baseline,
                PodSecurityLevel::Privileged => Level::Privileged,
            })
            .max()
            .unwrap_or(default)
    }

    /// Whether a gate may call `d`. The addresses a name resolves to are
    /// checked afterwards by the operator's own rules (metadata always refused).
    pub fn admit_destination(&self, d: &Destination) -> Result<(), PolicyRefusal> {
        if !self.governed {
            return Ok(());
        }
        if let Some(r) = self.unselected(format!("a gate call to {d}")) {
            return Err(r);
        }
        let own = [
            format!("*.{}.svc", self.namespace),
            format!("*.{}.svc.cluster.local", self.namespace),
        ];
        let admitted = self.policies.iter().any(|p| {
            let dst = &p.spec.destinations;
            dst.any_but_metadata
                || (dst.own_namespace_services && any_admits(own.iter().map(String::as_str), d))
                || any_admits(dst.hosts.iter().map(String::as_str), d)
        });
        if admitted {
            Ok(())
        } else {
            Err(PolicyRefusal::Destination {
                host: d.to_string(),
                namespace: self.namespace.clone(),
                policies: self.names(),
            })
        }
    }

    /// Whether the values of the shared Secret `secret` (whose annotations
    /// are `annotations`) may be sent to `d`: its annotation
    /// `releaseplan.io/gate-hosts` or a policy's `spec.credentials` must
    /// admit `d`. An unbound Secret goes anywhere in an ungoverned namespace
    /// (as before), nowhere in a governed one.
    pub fn admit_credential(
        &self,
        secret: &str,
        annotations: Option<&BTreeMap<String, String>>,
        d: &Destination,
    ) -> Result<(), PolicyRefusal> {
        let annotation = annotations.and_then(|a| a.get(ANNOTATION_GATE_HOSTS));
        if let Some(a) = annotation
            && any_admits(a.split(','), d)
        {
            return Ok(());
        }
        let bound = self.policies.iter().any(|p| {
            p.spec.credentials.iter().any(|c| {
                c.secret_name == secret && any_admits(c.hosts.iter().map(String::as_str), d)
            })
        });
        if bound || (!self.governed && annotation.is_none()) {
            return Ok(());
        }
        Err(PolicyRefusal::Credential {
            secret: secret.to_string(),
            host: d.to_string(),
            annotation: match annotation {
                Some(a) => {
                    format!("its annotation {ANNOTATION_GATE_HOSTS} ({a}) does not admit it")
                }
                None => format!("it has no annotation {ANNOTATION_GATE_HOSTS}"),
            },
            policies: self.names(),
        })
    }

    /// The headers the policies pin for the namespace, `(name, value)`; a
    /// header pinned to two values is a refusal (sending either could be
    /// the wrong tenant).
    pub fn pinned_headers(&self) -> Result<Vec<(String, String)>, PolicyRefusal> {
        let mut out: Vec<(String, String, &str)> = Vec::new();
        for p in &self.policies {
            for h in &p.spec.pinned_headers {
                match out.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(&h.name)) {
                    Some((_, v, first)) if *v != h.value => {
                        return Err(PolicyRefusal::PinConflict {
                            header: h.name.clone(),
                            first: (*first).to_string(),
                            second: p.name.clone(),
                            namespace: self.namespace.clone(),
                        });
                    }
                    Some(_) => {}
                    None => out.push((h.name.clone(), h.value.clone(), &p.name)),
                }
            }
        }
        Ok(out.into_iter().map(|(n, v, _)| (n, v)).collect())
    }

    /// Whether a plan's gate may set the header `name` (not when a policy pins it).
    pub fn admit_header(&self, name: &str) -> Result<(), PolicyRefusal> {
        for p in &self.policies {
            if p.spec
                .pinned_headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case(name))
            {
                return Err(PolicyRefusal::Pinned {
                    header: name.to_string(),
                    policy: p.name.clone(),
                    namespace: self.namespace.clone(),
                });
            }
        }
        Ok(())
    }

    /// Whether a gate may be called at all: its destination, the headers it
    /// sets (not one a policy pins), the pins themselves (no header pinned
    /// to two values), and, when governed, a URL with a host and port the
    /// policy can judge. What the caller does before any request, and what
    /// the controller checks before a release starts. Credentials bound to
    /// other hosts ([`NamespacePolicy::admit_credential`]) and the
    /// operator's own address rules are checked when the call is made.
    pub fn admit_gate(&self, gate: &super::GateSpec) -> Result<(), GateRefusal> {
        let url = gate.url();
        // A URL that does not parse fails in the call itself, with its own message.
        let destination = url::Url::parse(url.trim())
            .ok()
            .and_then(|u| Destination::of(&u));
        if let Some(d) = &destination {
            self.admit_destination(d).map_err(GateRefusal::Policy)?;
        }
        let settings = gate.access();
        if let Some(r) = settings
            .headers
            .iter()
            .map(|h| h.name.as_str())
            .chain(settings.auth.as_ref().map(|_| "Authorization"))
            .find_map(|name| self.admit_header(name).err())
        {
            return Err(GateRefusal::Policy(r));
        }
        self.pinned_headers().map_err(GateRefusal::Policy)?;
        if destination.is_none() && self.governed {
            return Err(GateRefusal::NoHost);
        }
        Ok(())
    }

    /// Whether a component's route may be written: its Gateways
    /// (`gatewayAPI.parentRefs`) or Traefik entry points (none listed: every
    /// one) must be allowed. The kind of the refused route with the refusal.
    pub fn admit_traffic(
        &self,
        t: &crate::api::Traffic,
    ) -> Result<(), (&'static str, PolicyRefusal)> {
        if let Some(gw) = &t.gateway_api {
            for r in &gw.parent_refs {
                self.admit_parent(r).map_err(|e| ("HTTPRoute", e))?;
            }
        }
        if let Some(tr) = &t.traefik {
            // No entry points: Traefik attaches the route to every one.
            let every = ["every entry point (entryPoints is empty)".to_string()];
            let eps = if tr.entry_points.is_empty() {
                &every[..]
            } else {
                &tr.entry_points[..]
            };
            for ep in eps {
                self.admit_entry_point(ep)
                    .map_err(|e| ("IngressRoute", e))?;
            }
        }
        Ok(())
    }

    /// Whether an HTTPRoute of the namespace may name the Gateway `r`.
    pub fn admit_parent(&self, r: &ParentRef) -> Result<(), PolicyRefusal> {
        if !self.governed {
            return Ok(());
        }
        let gw_ns = r.namespace.as_deref().unwrap_or(&self.namespace);
        let what = format!("Gateway {gw_ns}/{}", r.name);
        if let Some(refusal) = self.unselected(format!("a route to {what}")) {
            return Err(refusal);
        }
        let admitted = self.policies.iter().any(|p| {
            p.spec.routes.any
                || p.spec.routes.parent_refs.iter().any(|a| {
                    a.namespace.as_deref().unwrap_or(&self.namespace) == gw_ns
                        && a.name.as_ref().is_none_or(|n| *n == r.name)
                })
        });
        if admitted {
            Ok(())
        } else {
            Err(PolicyRefusal::Route {
                what,
                namespace: self.namespace.clone(),
                policies: self.names(),
            })
        }
    }

    /// Whether an IngressRoute of the namespace may name the entry point `ep`.
    pub fn admit_entry_point(&self, ep: &str) -> Result<(), PolicyRefusal> {
        if !self.governed {
            return Ok(());
        }
        let what = format!("entry point {ep}");
        if let Some(refusal) = self.unselected(format!("a route on {what}")) {
            return Err(refusal);
        }
        if self
            .policies
            .iter()
            .any(|p| p.spec.routes.any || p.spec.routes.entry_points.iter().any(|e| e == ep))
        {
            Ok(())
        } else {
            Err(PolicyRefusal::Route {
                what,
                namespace: self.namespace.clone(),
                policies: self.names(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::{
        AllowedParent, CredentialBinding, Destinations, PinnedHeader, RoutePolicy,
    };

    fn dest(u: &str) -> Destination {
        Destination::of(&url::Url::parse(u).unwrap()).unwrap()
    }

    fn policy(name: &str, spec: GatePolicySpec) -> Named {
        Named {
            name: name.into(),
            spec,
        }
    }

    fn team(label: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("team".into(), label.into())])),
            ..LabelSelector::default()
        })
    }

    fn labels(team: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("team".into(), team.into())])
    }

    #[test]
    fn a_policy_sets_the_job_pod_security_level_and_the_most_permissive_wins() {
        use crate::api::policy::JobPolicy;
        let level = |l: Option<PodSecurityLevel>| GatePolicySpec {
            namespace_selector: team("a"),
            jobs: JobPolicy { pod_security: l },
            ..GatePolicySpec::default()
        };
        let all = [
            policy("hosts-only", level(None)),
            policy("baseline", level(Some(PodSecurityLevel::Baseline))),
            policy("restricted", level(Some(PodSecurityLevel::Restricted))),
        ];
        let a = NamespacePolicy::select("a", &labels("a"), &all, Mode::Optional);
        assert_eq!(a.job_pod_security(Level::Restricted), Level::Baseline);
        assert_eq!(a.job_pod_security(Level::Privileged), Level::Baseline);
        // Not selected: the operator's level.
        let b = NamespacePolicy::select("b", &labels("b"), &all, Mode::Required);
        assert_eq!(b.job_pod_security(Level::Restricted), Level::Restricted);
        // Selected by a policy that sets no level: the operator's.
        let only = NamespacePolicy::select("a", &labels("a"), &all[..1], Mode::Optional);
        assert_eq!(only.job_pod_security(Level::Baseline), Level::Baseline);
    }

    #[test]
    fn host_patterns_parse_and_match() {
        let p = |s: &str| s.parse::<HostPattern>().unwrap();
        assert!(p("prom.monitoring.svc").admits(&dest("http://Prom.Monitoring.svc./api")));
        assert!(p("prom.monitoring.svc:9090").admits(&dest("http://prom.monitoring.svc:9090/")));
        assert!(!p("prom.monitoring.svc:9090").admits(&dest("http://prom.monitoring.svc/")));
        assert!(p("*.example.com").admits(&dest("https://a.b.example.com/")));
        assert!(!p("*.example.com").admits(&dest("https://example.com/")));
        assert!(!p("*.example.com").admits(&dest("https://evilexample.com/")));
        assert!(p("127.0.0.0/8").admits(&dest("http://127.0.0.9:1/")));
        assert!(p("127.0.0.0/8").admits(&dest("http://[::ffff:127.0.0.9]:1/")));
        assert!(!p("127.0.0.2").admits(&dest("http://127.0.0.3/")));
        assert!(p("[::1]:8080").admits(&dest("http://[::1]:8080/")));
        assert!(p("[fd00::/8]").admits(&dest("http://[fd12::1]/")));
        // A name pattern never admits an address, nor the reverse.
        assert!(!p("localhost").admits(&dest("http://127.0.0.1/")));
        assert!(!p("127.0.0.1").admits(&dest("http://localhost/")));
        for bad in [
            "",
            "a.*.b",
            "*",
            "*.",
            "h:0",
            "h:x",
            "10.0.0.0/33",
            "a b",
            "[::1",
            "x/8",
        ] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn selectors_select_and_fail_closed() {
        let l = labels("a");
        assert_eq!(selects(None, &l), Some(true));
        assert_eq!(selects(team("a").as_ref(), &l), Some(true));
        assert_eq!(selects(team("b").as_ref(), &l), Some(false));
        let expr = |op: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "team".into(),
                    operator: op.into(),
                    values,
                },
            ]),
            ..LabelSelector::default()
        };
        assert_eq!(
            selects(Some(&expr("In", Some(vec!["a".into()]))), &l),
            Some(true)
        );
        assert_eq!(
            selects(Some(&expr("NotIn", Some(vec!["a".into()]))), &l),
            Some(false)
        );
        assert_eq!(selects(Some(&expr("Exists", None)), &l), Some(true));
        assert_eq!(selects(Some(&expr("DoesNotExist", None)), &l), Some(false));
        assert_eq!(selects(Some(&expr("Bogus", None)), &l), None);
        assert_eq!(selects(Some(&expr("In", None)), &l), None);
        let all = [policy(
            "broken",
            GatePolicySpec {
                namespace_selector: Some(expr("Bogus", None)),
                destinations: Destinations {
                    any_but_metadata: true,
                    ..Default::default()
                },
                ..Default::default()
            },
        )];
        let np = NamespacePolicy::select("a", &l, &all, Mode::Optional);
        assert!(np.governed, "an invalid selector governs");
        let e = np.admit_destination(&dest("http://x/")).unwrap_err();
        assert!(
            e.to_string()
                .contains("GatePolicy broken has a namespaceSelector that cannot be evaluated"),
            "{e}"
        );
    }

    /// What the controller judges before a release: a gate is refused for
    /// its destination, a header the policy pins, or no host; a route for
    /// its Gateway or entry points; each refusal says which GatePolicy
    /// field, and which value of the chart, would allow it.
    #[test]
    fn gates_and_routes_are_judged_whole_and_each_refusal_says_what_allows_it() {
        use crate::api::{GatewayRoute, TraefikRoute, Traffic};
        let gate = |url: &str, headers: &[&str]| {
            let mut g = serde_json::json!({"name": "smoke", "url": url});
            g["headers"] = headers
                .iter()
                .map(|h| serde_json::json!({"name": h, "value": "x"}))
                .collect();
            let health: crate::api::Health =
                serde_json::from_value(serde_json::json!({"webhooks": [g]})).unwrap();
            crate::gates::GateSpec::all(&health.entries().unwrap())
                .unwrap()
                .remove(0)
        };
        let chart = policy(
            "releaseplan-default",
            GatePolicySpec {
                destinations: Destinations {
                    hosts: vec!["prometheus.monitoring.svc:9090".into()],
                    ..Default::default()
                },
                pinned_headers: vec![PinnedHeader {
                    name: "X-Scope-OrgID".into(),
                    value: "a".into(),
                }],
                routes: RoutePolicy {
                    parent_refs: vec![AllowedParent {
                        namespace: Some("infra".into()),
                        name: Some("public".into()),
                    }],
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let p = NamespacePolicy::select("shop", &BTreeMap::new(), &[chart], Mode::Required);
        assert_eq!(
            p.admit_gate(&gate("http://prometheus.monitoring.svc:9090/", &[])),
            Ok(())
        );
        let e = p
            .admit_gate(&gate("http://hooks.shop.svc:8080/smoke", &[]))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("host hooks.shop.svc:8080 is not allowed"),
            "{e}"
        );
        assert_eq!(
            e.remedy(),
            "allow it with spec.destinations.hosts of a GatePolicy (Helm chart: list it in gatePolicy.hosts, e.g. --set 'gatePolicy.hosts={hooks.shop.svc:8080}')"
        );
        let e = p
            .admit_gate(&gate(
                "http://prometheus.monitoring.svc:9090/",
                &["x-scope-orgid"],
            ))
            .unwrap_err();
        assert!(e.to_string().contains("spec.pinnedHeaders"), "{e}");
        assert!(e.remedy().contains("remove the header"), "{}", e.remedy());
        let unselected = NamespacePolicy::select("shop", &BTreeMap::new(), &[], Mode::Required);
        let e = unselected
            .admit_gate(&gate("http://prometheus.monitoring.svc:9090/", &[]))
            .unwrap_err();
        assert!(
            e.remedy().contains("gatePolicy.namespaceSelector"),
            "{}",
            e.remedy()
        );
        // Routes: the Gateway, then Traefik's entry points (none: every one).
        let gw = |ns: &str, name: &str| Traffic {
            gateway_api: Some(GatewayRoute {
                parent_refs: vec![ParentRef {
                    namespace: Some(ns.into()),
                    name: name.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(p.admit_traffic(&gw("infra", "public")), Ok(()));
        let (kind, e) = p.admit_traffic(&gw("infra", "internal")).unwrap_err();
        assert_eq!(kind, "HTTPRoute");
        assert!(
            e.remedy().contains("gatePolicy.parentRefs"),
            "{}",
            e.remedy()
        );
        let every = Traffic {
            traefik: Some(TraefikRoute::default()),
            ..Default::default()
        };
        let (kind, e) = p.admit_traffic(&every).unwrap_err();
        assert_eq!(kind, "IngressRoute");
        assert!(e.remedy().contains("traefik.entryPoints"), "{}", e.remedy());
        // Not governed: everything is admitted (the operator's own rules
        // are checked when the call is made).
        let open = NamespacePolicy::open("shop");
        assert_eq!(
            open.admit_gate(&gate("http://anything:1/", &["x-scope-orgid"])),
            Ok(())
        );
        assert_eq!(open.admit_traffic(&every), Ok(()));
    }

    #[test]
    fn destinations_add_up_and_refusals_name_the_policies() {
        let all = [
            policy(
                "base",
                GatePolicySpec {
                    destinations: Destinations {
                        hosts: vec!["prometheus.monitoring.svc:9090".into()],
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ),
            policy(
                "team-a",
                GatePolicySpec {
                    namespace_selector: team("a"),
                    destinations: Destinations {
                        own_namespace_services: true,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ),
        ];
        let a = NamespacePolicy::select("shop-a", &labels("a"), &all, Mode::Optional);
        assert!(a.governed);
        assert_eq!(
            a.admit_destination(&dest("http://prometheus.monitoring.svc:9090/")),
            Ok(())
        );
        assert_eq!(
            a.admit_destination(&dest("http://web.shop-a.svc:8080/")),
            Ok(())
        );
        assert_eq!(
            a.admit_destination(&dest("http://web.shop-a.svc.cluster.local/")),
            Ok(())
        );
        let e = a
            .admit_destination(&dest("http://web.shop-b.svc:8080/"))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "host web.shop-b.svc:8080 is not allowed for namespace shop-a: no spec.destinations of GatePolicy base, team-a admits it"
        );
        let e = a
            .admit_destination(&dest("https://kubernetes.default.svc/"))
            .unwrap_err();
        assert!(matches!(e, PolicyRefusal::Destination { .. }));
        let b = NamespacePolicy::select("shop-b", &labels("b"), &all, Mode::Optional);
        assert!(
            b.admit_destination(&dest("http://web.shop-b.svc/"))
                .is_err()
        );
        // Selected by nothing: open unless required.
        let none = NamespacePolicy::select("x", &labels("b"), &all[1..], Mode::Optional);
        assert!(!none.governed);
        assert_eq!(none.admit_destination(&dest("http://anything/")), Ok(()));
        let req = NamespacePolicy::select("x", &labels("b"), &all[1..], Mode::Required);
        assert_eq!(
            req.admit_destination(&dest("http://anything/"))
                .unwrap_err()
                .to_string(),
            "namespace x is selected by no GatePolicy and the operator requires one (--gate-policy=required): a gate call to anything:80 is refused"
        );
        let single = [policy(
            "single-tenant",
            GatePolicySpec {
                destinations: Destinations {
                    any_but_metadata: true,
                    ..Default::default()
                },
                ..Default::default()
            },
        )];
        let s = NamespacePolicy::select("x", &BTreeMap::new(), &single, Mode::Required);
        assert_eq!(s.admit_destination(&dest("http://10.1.2.3:9/")), Ok(()));
    }

    #[test]
    fn credentials_go_only_where_they_are_bound() {
        let all = [policy(
            "mimir",
            GatePolicySpec {
                credentials: vec![CredentialBinding {
                    secret_name: "mimir-token".into(),
                    hosts: vec!["mimir.monitoring.svc".into()],
                }],
                destinations: Destinations {
                    any_but_metadata: true,
                    ..Default::default()
                },
                ..Default::default()
            },
        )];
        let np = NamespacePolicy::select("a", &BTreeMap::new(), &all, Mode::Optional);
        let mimir = dest("http://mimir.monitoring.svc/");
        let evil = dest("http://evil.a.svc/");
        assert_eq!(np.admit_credential("mimir-token", None, &mimir), Ok(()));
        assert_eq!(
            np.admit_credential("mimir-token", None, &evil)
                .unwrap_err()
                .to_string(),
            "Secret mimir-token may not be sent to evil.a.svc:80: it has no annotation releaseplan.io/gate-hosts and no spec.credentials of GatePolicy mimir binds it to that host"
        );
        let ann = BTreeMap::from([(
            ANNOTATION_GATE_HOSTS.to_string(),
            "hooks.example.com, 127.0.0.1:9".to_string(),
        )]);
        assert_eq!(
            np.admit_credential("hook", Some(&ann), &dest("https://hooks.example.com/")),
            Ok(())
        );
        assert_eq!(
            np.admit_credential("hook", Some(&ann), &dest("http://127.0.0.1:9/")),
            Ok(())
        );
        assert!(
            np.admit_credential("hook", Some(&ann), &dest("http://127.0.0.1:10/"))
                .is_err()
        );
        // Ungoverned: unbound Secrets as before, annotated ones only where they say.
        let open = NamespacePolicy::open("a");
        assert_eq!(open.admit_credential("any", None, &evil), Ok(()));
        let e = open
            .admit_credential("hook", Some(&ann), &evil)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("(hooks.example.com, 127.0.0.1:9) does not admit it"),
            "{e}"
        );
    }

    #[test]
    fn pinned_headers_are_set_and_never_chosen_by_a_plan() {
        let pin = |name: &str, value: &str| PinnedHeader {
            name: name.into(),
            value: value.into(),
        };
        let all = [
            policy(
                "tenant-a",
                GatePolicySpec {
                    pinned_headers: vec![pin("X-Scope-OrgID", "team-a")],
                    ..Default::default()
                },
            ),
            policy(
                "z-same",
                GatePolicySpec {
                    pinned_headers: vec![pin("x-scope-orgid", "team-a")],
                    ..Default::default()
                },
            ),
        ];
        let np = NamespacePolicy::select("a", &BTreeMap::new(), &all, Mode::Optional);
        assert_eq!(
            np.pinned_headers(),
            Ok(vec![("X-Scope-OrgID".into(), "team-a".into())])
        );
        assert_eq!(
            np.admit_header("x-scope-orgid").unwrap_err().to_string(),
            "header x-scope-orgid is pinned by GatePolicy tenant-a (spec.pinnedHeaders) for namespace a: a plan may not set it"
        );
        assert_eq!(np.admit_header("X-Other"), Ok(()));
        let conflict = [
            all[0].clone(),
            policy(
                "b",
                GatePolicySpec {
                    pinned_headers: vec![pin("X-Scope-OrgID", "team-b")],
                    ..Default::default()
                },
            ),
        ];
        let np = NamespacePolicy::select("a", &BTreeMap::new(), &conflict, Mode::Optional);
        assert!(matches!(
            np.pinned_headers(),
            Err(PolicyRefusal::PinConflict { .. })
        ));
    }

    #[test]
    fn routes_attach_only_where_allowed() {
        let all = [policy(
            "routes",
            GatePolicySpec {
                routes: RoutePolicy {
                    parent_refs: vec![
                        AllowedParent {
                            namespace: Some("infra".into()),
                            name: Some("public".into()),
                        },
                        AllowedParent {
                            namespace: None,
                            name: None,
                        },
                    ],
                    entry_points: vec!["web".into()],
                    any: false,
                },
                ..Default::default()
            },
        )];
        let np = NamespacePolicy::select("a", &BTreeMap::new(), &all, Mode::Optional);
        let gw = |ns: Option<&str>, name: &str| ParentRef {
            name: name.into(),
            namespace: ns.map(Into::into),
            ..ParentRef::default()
        };
        assert_eq!(np.admit_parent(&gw(Some("infra"), "public")), Ok(()));
        assert_eq!(np.admit_parent(&gw(None, "own")), Ok(()));
        assert_eq!(np.admit_parent(&gw(Some("a"), "own")), Ok(()));
        assert_eq!(
            np.admit_parent(&gw(Some("infra"), "internal"))
                .unwrap_err()
                .to_string(),
            "Gateway infra/internal is not allowed for routes of namespace a: no spec.routes of GatePolicy routes admits it"
        );
        assert_eq!(np.admit_entry_point("web"), Ok(()));
        assert!(np.admit_entry_point("admin").is_err());
        assert_eq!(
            NamespacePolicy::open("a").admit_parent(&gw(Some("x"), "y")),
            Ok(())
        );
    }
}
