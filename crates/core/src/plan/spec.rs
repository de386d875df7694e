//! From the API's spec to what the core works with: checks that the CRD's CEL
//! rules cannot express, or that must hold even for objects stored before a
//! rule existed, and the parsing of steps and gate settings (done here once;
//! the machine and the gate runner only see typed values). The controller
//! refuses to act on a spec that fails and says why in a `Stalled` condition.

use super::steps::{Step, strategy_steps};
use crate::api::{Component, GateAt, GateEntry, ReleasePlanSpec, Trial};
use crate::gates::GateSpec;
use crate::gates::job::JobGateSpec;
use crate::gates::pod_security::Level as PodSecurity;
use k8s_openapi::api::core::v1::Container;
use std::collections::BTreeMap;

pub use super::spec_error::SpecError;

fn err(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError::new(field, message)
}

/// A spec's steps and gates, parsed: what the state machine and the gate
/// runner work with.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The canary steps.
    pub steps: Vec<Step>,
    /// The health gates, Prometheus gates first, then webhooks.
    pub gates: Vec<GateSpec>,
    /// The Job gates.
    pub jobs: Vec<JobGateSpec>,
    /// The component each gate that names one judges, by gate name.
    pub gate_components: BTreeMap<String, String>,
    /// The trial settings of each gate that changes a default, by gate name.
    pub gate_trials: BTreeMap<String, Trial>,
    /// What each component waits for (`dependsOn`), by component.
    pub depends_on: BTreeMap<String, Vec<super::order::Dep>>,
}

/// Validates what the state machine relies on and parses steps, thresholds
/// and intervals, once; the plan's Job gates at the default Pod Security
/// Standard level (restricted).
pub fn check_spec(spec: &ReleasePlanSpec) -> Result<Checked, SpecError> {
    check_spec_at(spec, PodSecurity::default())
}

/// [`check_spec`] with the plan's Job gates held to `pod_security` (the
/// operator's `--gate-job-pod-security`, later a namespace's policy).
pub fn check_spec_at(
    spec: &ReleasePlanSpec,
    pod_security: PodSecurity,
) -> Result<Checked, SpecError> {
    if spec.components.is_empty() {
        return Err(err("spec.components", "at least one component is required"));
    }
    for (i, c) in spec.components.iter().enumerate() {
        if spec.components[..i].iter().any(|d| d.name == c.name) {
            return Err(err(
                format!("spec.components[{i}].name"),
                format!("duplicate component name {:?}", c.name),
            ));
        }
        let daemon = c.kind == crate::api::workload::WorkloadKind::DaemonSet;
        match (c.replicas, &c.autoscaling) {
            (Some(_), _) if daemon => {
                return Err(err(
                    format!("spec.components[{i}].replicas"),
                    crate::api::workload::NO_DAEMON_REPLICAS_MESSAGE,
                ));
            }
            (None, None) if daemon => {}
            (Some(r), _) if r < 0 => {
                return Err(err(
                    format!("spec.components[{i}].replicas"),
                    "must not be negative",
                ));
            }
            (None, None) => {
                return Err(err(
                    format!("spec.components[{i}].replicas"),
                    "is required unless autoscaling is set",
                ));
            }
            _ => {}
        }
        check_template(i, c)?;
    }
    let entries = spec
        .health
        .entries()
        .map_err(|e| err(e.path.clone(), e.to_string()))?;
    check_gates(spec, &entries)?;
    let gates = GateSpec::all(&entries)?;
    // Blue-green is one implicit step: the preview, held until promoted (or
    // for autoPromotionSeconds).
    let steps = strategy_steps(&spec.strategy)?;
    let depends_on = super::order::check(spec)?;
    if spec.strategy.blue_green.is_some()
        && let Some(i) = spec.components.iter().position(|c| c.traffic.is_none())
    {
        return Err(err(
            format!("spec.components[{i}].traffic"),
            "strategy.blueGreen needs traffic on every component",
        ));
    }
    let mut jobs = Vec::new();
    for at in &entries {
        if let GateEntry::Job(g) = &at.entry {
            let job = JobGateSpec::parse(g)
                .and_then(|j| j.secured(pod_security))
                .map_err(|(field, message)| err(at.field(&field), message))?;
            jobs.push(job);
        }
    }
    Ok(Checked {
        steps,
        gates,
        jobs,
        gate_components: components_of(&entries),
        gate_trials: entries
            .iter()
            .filter(|at| at.trial != Trial::default())
            .map(|at| (at.name().to_string(), at.trial))
            .collect(),
        depends_on,
    })
}

/// The component each gate that names one judges, by gate name.
pub fn gate_components(spec: &ReleasePlanSpec) -> BTreeMap<String, String> {
    components_of(&spec.health.entries().unwrap_or_default())
}

fn components_of(entries: &[GateAt]) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter_map(|at| Some((at.name().to_string(), at.component()?.to_string())))
        .collect()
}

/// Gate names are unique and a gate's component names one of the plan's
/// components (as the CRD's rules ask of new objects).
fn check_gates(spec: &ReleasePlanSpec, entries: &[GateAt]) -> Result<(), SpecError> {
    for (i, at) in entries.iter().enumerate() {
        if entries[..i].iter().any(|o| o.name() == at.name()) {
            return Err(err(
                at.field("name"),
                format!("duplicate gate name {:?}", at.name()),
            ));
        }
        if let Some(c) = at.component()
            && !spec.components.iter().any(|d| d.name == c)
        {
            return Err(err(
                at.field("component"),
                format!("{c:?} is not one of spec.components"),
            ));
        }
    }
    Ok(())
}

/// What Kubernetes would refuse in the Deployment (or its pods) made from a
/// component's template, as the CRD's rules do for new objects: invalid labels,
/// containers without an image, ports out of range, container names that are not
/// DNS labels or not unique in the pod, ephemeral containers. Not the CRD's size
/// bounds: they only serve the CEL cost budget.
fn check_template(i: usize, c: &Component) -> Result<(), SpecError> {
    let template = format!("spec.components[{i}].template");
    let labels = c.template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    for (key, value) in labels.into_iter().flatten() {
        if let Err(m) = check_label_key(key) {
            return Err(err(
                format!("{template}.metadata.labels"),
                format!("invalid label key {key:?}: {m}"),
            ));
        }
        if let Err(m) = check_label_value(value) {
            return Err(err(
                format!("{template}.metadata.labels[{key}]"),
                format!("invalid label value {value:?}: {m}"),
            ));
        }
    }
    let Some(spec) = c.template.spec.as_ref() else {
        return Err(err(
            format!("{template}.spec.containers"),
            "at least one container is required",
        ));
    };
    if spec.containers.is_empty() {
        return Err(err(
            format!("{template}.spec.containers"),
            "at least one container is required",
        ));
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(err(
            format!("{template}.spec.ephemeralContainers"),
            "ephemeral containers are not allowed in a pod template",
        ));
    }
    let lists = [
        ("containers", spec.containers.as_slice()),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
    ];
    let mut seen: Vec<&str> = Vec::new();
    for (list, containers) in lists {
        for (j, container) in containers.iter().enumerate() {
            let field = format!("{template}.spec.{list}[{j}]");
            check_container(&field, container)?;
            if seen.contains(&container.name.as_str()) {
                return Err(err(
                    format!("{field}.name"),
                    format!(
                        "duplicate container name {:?}: names must be unique across containers and initContainers",
                        container.name
                    ),
                ));
            }
            seen.push(&container.name);
        }
    }
    Ok(())
}

/// One container: a DNS-label name, an image, ports in range.
fn check_container(field: &str, container: &Container) -> Result<(), SpecError> {
    if !is_dns_label(&container.name) {
        return Err(err(
            format!("{field}.name"),
            format!(
                "container name {:?} must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with an alphanumeric character",
                container.name
            ),
        ));
    }
    match container.image.as_deref() {
        None | Some("") => {
            return Err(err(
                format!("{field}.image"),
                "a container image is required",
            ));
        }
        Some(image) if image.trim() != image => {
            return Err(err(
                format!("{field}.image"),
                format!("image {image:?} must not have leading or trailing whitespace"),
            ));
        }
        Some(_) => {}
    }
    for (p, port) in container.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&port.container_port) {
            return Err(err(
                format!("{field}.ports[{p}].containerPort"),
                format!(
                    "{} is not a port number: must be between 1 and 65535",
                    port.container_port
                ),
            ));
        }
        if let Some(host) = port.host_port
            && !(0..=65535).contains(&host)
        {
            return Err(err(
                format!("{field}.ports[{p}].hostPort"),
                format!("{host} is not a port number: must be between 1 and 65535, or 0 for none"),
            ));
        }
    }
    Ok(())
}

fn is_alphanumeric(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// Empty, or at most 63 of `[-A-Za-z0-9_.]` starting and ending with an alphanumeric.
fn check_label_value(v: &str) -> Result<(), &'static str> {
    if v.len() > 63 {
        return Err("must be at most 63 characters");
    }
    if v.is_empty() {
        return Ok(());
    }
    let inner_ok = v
        .chars()
        .all(|c| is_alphanumeric(c) || matches!(c, '-' | '_' | '.'));
    let ends_ok = v.starts_with(is_alphanumeric) && v.ends_with(is_alphanumeric);
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err("must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")
    }
}

/// A qualified name: an optional DNS subdomain prefix and `/`, then a non-empty name
/// that is a valid label value.
fn check_label_key(k: &str) -> Result<(), &'static str> {
    let name = match k.split_once('/') {
        Some((prefix, name)) => {
            if prefix.len() > 253 || !is_dns_subdomain(prefix) {
                return Err(
                    "the prefix before '/' must be a DNS subdomain of at most 253 characters",
                );
            }
            name
        }
        None => k,
    };
    if name.is_empty() {
        return Err("the name part must not be empty");
    }
    check_label_value(name)
}

/// A DNS label: at most 63 characters.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_label_chars(s)
}

/// DNS labels joined by dots (Kubernetes bounds only the whole, not each label).
fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(is_dns_label_chars)
}

/// Non-empty `[-a-z0-9]`, starting and ending with a letter or digit.
fn is_dns_label_chars(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid one-component spec, edited as JSON.
    fn spec_with(edit: impl FnOnce(&mut serde_json::Value)) -> ReleasePlanSpec {
        let mut v = serde_json::json!({ "components": [{
            "name": "web",
            "replicas": 1,
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] }
            }
        }]});
        edit(&mut v);
        serde_json::from_value(v).expect("a spec")
    }

    fn field_of(spec: &ReleasePlanSpec) -> Option<String> {
        check_spec(spec).err().map(|e| e.field)
    }

    const TEMPLATE: &str = "spec.components[0].template";

    #[test]
    fn accepts_templates_at_the_limits() {
        let spec = spec_with(|v| {
            let t = &mut v["components"][0]["template"];
            t["metadata"]["labels"] = serde_json::json!({
                "app": "v".repeat(63),
                "empty": "",
                "a.b_c-d": "A.b_c-9",
                format!("{}/{}", "p".repeat(253), "n".repeat(63)): "x",
                "example.com/tier": "web",
            });
            t["spec"]["containers"][0]["name"] = serde_json::json!("w".repeat(63));
            t["spec"]["containers"][0]["ports"] = serde_json::json!([
                { "containerPort": 1 },
                { "containerPort": 65535, "hostPort": 65535 },
                { "containerPort": 80, "hostPort": 0 },
            ]);
            t["spec"]["initContainers"] =
                serde_json::json!([{ "name": "init", "image": "busybox" }]);
        });
        assert_eq!(check_spec(&spec).map(|_| ()), Ok(()));
    }

    #[test]
    fn parses_gates_once_naming_the_field() {
        let gate = |threshold: &str, interval: &str| {
            spec_with(|v| {
                v["health"] = serde_json::json!({
                    "prometheus": [{"name": "errors", "address": "http://p:9090", "query": "up",
                                    "threshold": threshold, "interval": interval}],
                    "webhooks": [{"name": "smoke", "url": "http://h/ok"}]
                });
            })
        };
        let checked = check_spec(&gate("< 0.05", "1m")).unwrap();
        let names: Vec<&str> = checked
            .gates
            .iter()
            .map(crate::gates::GateSpec::name)
            .collect();
        assert_eq!(names, ["errors", "smoke"]);
        assert_eq!(
            checked.gates[0].interval(),
            std::time::Duration::from_secs(60)
        );
        assert_eq!(
            field_of(&gate("0.05", "1m")).as_deref(),
            Some("spec.health.prometheus[0].threshold")
        );
        assert_eq!(
            field_of(&gate("< 0.05", "soon")).as_deref(),
            Some("spec.health.prometheus[0].interval")
        );
    }

    /// The same four gates, written in the deprecated lists and in `gates`.
    fn old_and_new_health() -> (serde_json::Value, serde_json::Value) {
        let job = serde_json::json!({"spec": {"template": {"spec": {
            "containers": [{"name": "smoke", "image": "busybox"}]}}}});
        let auth = serde_json::json!({"bearer": {"secretKeyRef": {"name": "token", "key": "t"}}});
        let old = serde_json::json!({
            "prometheus": [{"name": "errors", "address": "http://p:9090", "query": "up",
                            "threshold": "< 0.05", "interval": "1m", "component": "web",
                            "auth": auth}],
            "webhooks": [{"name": "hook", "url": "http://h/ok", "retries": 1}],
            "jobs": [{"name": "smoke", "template": job, "timeoutSeconds": 60}],
            "templates": [{"name": "shared", "templateRef": {"kind": "ClusterGateTemplate",
                           "name": "latency"}, "args": {"p": "0.99"}, "component": "web"}]
        });
        let new = serde_json::json!({"gates": [
            {"name": "errors", "component": "web", "auth": auth, "prometheus": {
                "address": "http://p:9090", "query": "up", "threshold": "< 0.05",
                "interval": "1m"}},
            {"name": "hook", "webhook": {"url": "http://h/ok", "retries": 1}},
            {"name": "smoke", "job": {"template": job, "timeoutSeconds": 60}},
            {"name": "shared", "component": "web", "template": {
                "kind": "ClusterGateTemplate", "name": "latency", "args": {"p": "0.99"}}}
        ]});
        (old, new)
    }

    #[test]
    fn gates_written_in_the_deprecated_lists_are_read_as_the_same_gates() {
        let (old, new) = old_and_new_health();
        let with = |h: &serde_json::Value| {
            spec_with(|v| {
                v["components"][0]["name"] = "web".into();
                v["health"] = h.clone();
            })
        };
        let (old, new) = (with(&old), with(&new));
        assert!(old.health.gates.is_empty() && new.health.gates.len() == 4);
        let entries = |s: &ReleasePlanSpec| {
            s.health
                .entries()
                .unwrap()
                .into_iter()
                .map(|at| at.entry)
                .collect::<Vec<_>>()
        };
        assert_eq!(entries(&old), entries(&new));
        assert_eq!(entries(&old).len(), 4);
        assert_eq!(check_spec(&old).unwrap(), check_spec(&new).unwrap());
        assert_eq!(gate_components(&old), gate_components(&new));
        assert_eq!(old.health.template_refs(), new.health.template_refs());
        assert_eq!(new.health.template_refs().len(), 1);
        assert_eq!(
            old.health.deprecated_lists(),
            ["prometheus", "webhooks", "jobs", "templates"]
        );
        assert!(new.health.deprecated_lists().is_empty());
    }

    #[test]
    fn a_gate_of_gates_is_named_where_it_was_written() {
        let health = |h: serde_json::Value| spec_with(|v| v["health"] = h);
        let prometheus = |threshold: &str| {
            serde_json::json!({"name": "errors", "prometheus": {
                "address": "http://p:9090", "query": "up", "threshold": threshold}})
        };
        let spec = health(serde_json::json!({"gates": [prometheus("< 1"), prometheus("1")]}));
        // a duplicate name before a bad threshold: gates are checked in order
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.gates[1].name")
        );
        let spec = health(serde_json::json!({"gates": [prometheus("about 1")]}));
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.gates[0].prometheus.threshold")
        );
        let spec = health(serde_json::json!({"gates": [
            {"name": "hook", "webhook": {"url": "http://h"},
             "headers": [{"name": "Host", "value": "x"}]}]}));
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.gates[0].headers[0]")
        );
        let spec = health(serde_json::json!({"gates": [
            {"name": "smoke", "component": "nope", "job": {"template": {}}}]}));
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.gates[0].component")
        );
        let spec = health(serde_json::json!({"gates": [
            {"name": "smoke", "job": {"template": {"spec": {"template": {"spec": {
                "containers": []}}}}}}]}));
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.gates[0].job.template.spec.template.spec.containers")
        );
        // a name used in gates and in a deprecated list
        let spec = health(serde_json::json!({
            "gates": [prometheus("< 1")],
            "webhooks": [{"name": "errors", "url": "http://h"}]}));
        assert_eq!(
            field_of(&spec).as_deref(),
            Some("spec.health.webhooks[0].name")
        );
        // no kind, or two: refused by the CRD, and by the operator for an
        // object stored before the rule
        for gate in [
            serde_json::json!({"name": "none"}),
            serde_json::json!({"name": "two", "webhook": {"url": "http://h"},
                               "job": {"template": {}}}),
        ] {
            let spec = health(serde_json::json!({"gates": [gate]}));
            assert_eq!(field_of(&spec).as_deref(), Some("spec.health.gates[0]"));
        }
    }

    #[test]
    fn refuses_ports_out_of_range() {
        let port = |p: serde_json::Value| {
            spec_with(|v| v["components"][0]["template"]["spec"]["containers"][0]["ports"] = p)
        };
        let f = format!("{TEMPLATE}.spec.containers[0].ports");
        let spec = port(serde_json::json!([{ "containerPort": 80 }, { "containerPort": 70000 }]));
        assert_eq!(field_of(&spec), Some(format!("{f}[1].containerPort")));
        let spec = port(serde_json::json!([{ "containerPort": 0 }]));
        assert_eq!(field_of(&spec), Some(format!("{f}[0].containerPort")));
        let spec = port(serde_json::json!([{ "containerPort": 80, "hostPort": 65536 }]));
        assert_eq!(field_of(&spec), Some(format!("{f}[0].hostPort")));
        let spec = port(serde_json::json!([{ "containerPort": 80, "hostPort": -1 }]));
        assert_eq!(field_of(&spec), Some(format!("{f}[0].hostPort")));
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["initContainers"] = serde_json::json!([
                { "name": "init", "image": "busybox", "ports": [{ "containerPort": 70000 }] }
            ]);
        });
        assert_eq!(
            field_of(&spec),
            Some(format!(
                "{TEMPLATE}.spec.initContainers[0].ports[0].containerPort"
            ))
        );
    }

    #[test]
    fn refuses_invalid_label_values_and_keys() {
        let labels = |l: serde_json::Value| {
            spec_with(|v| v["components"][0]["template"]["metadata"]["labels"] = l)
        };
        for value in ["my shop", "-web", "web.", "ü", &"v".repeat(64)] {
            let e = check_spec(&labels(serde_json::json!({ "app": value }))).unwrap_err();
            assert_eq!(
                e.field,
                format!("{TEMPLATE}.metadata.labels[app]"),
                "{value}"
            );
            assert!(e.message.contains("invalid label value"), "{e}");
        }
        let long_prefix = format!("{}/x", "p".repeat(254));
        let long_name = "n".repeat(64);
        for key in [
            "my app",
            "",
            "/x",
            "example.com/",
            "a/b/c",
            "Example.com/x",
            "-x",
            long_prefix.as_str(),
            long_name.as_str(),
        ] {
            let e = check_spec(&labels(serde_json::json!({ key: "v" }))).unwrap_err();
            assert_eq!(e.field, format!("{TEMPLATE}.metadata.labels"), "{key:?}");
            assert!(e.message.contains("invalid label key"), "{e}");
        }
    }

    #[test]
    fn refuses_containers_without_image_and_bad_names() {
        let c = format!("{TEMPLATE}.spec.containers[0]");
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["containers"][0]
                .as_object_mut()
                .expect("container")
                .remove("image");
        });
        assert_eq!(field_of(&spec), Some(format!("{c}.image")));
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["containers"][0]["image"] = "".into();
        });
        assert_eq!(field_of(&spec), Some(format!("{c}.image")));
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["containers"][0]["image"] = "nginx ".into();
        });
        assert_eq!(field_of(&spec), Some(format!("{c}.image")));
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["ephemeralContainers"] =
                serde_json::json!([{ "name": "debug", "image": "busybox" }]);
        });
        assert_eq!(
            field_of(&spec),
            Some(format!("{TEMPLATE}.spec.ephemeralContainers"))
        );
        for name in ["Web", "web_1", "", &"w".repeat(64)] {
            let spec = spec_with(|v| {
                v["components"][0]["template"]["spec"]["containers"][0]["name"] = name.into();
            });
            assert_eq!(field_of(&spec), Some(format!("{c}.name")), "{name:?}");
        }
    }

    #[test]
    fn refuses_duplicate_container_names() {
        let container = |name: &str| serde_json::json!({ "name": name, "image": "nginx" });
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["containers"] =
                serde_json::json!([container("web"), container("side"), container("web")]);
        });
        let e = check_spec(&spec).unwrap_err();
        assert_eq!(e.field, format!("{TEMPLATE}.spec.containers[2].name"));
        assert!(
            e.message.contains("duplicate container name \"web\""),
            "{e}"
        );
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["initContainers"] =
                serde_json::json!([container("init"), container("web")]);
        });
        assert_eq!(
            field_of(&spec),
            Some(format!("{TEMPLATE}.spec.initContainers[1].name"))
        );
        let spec = spec_with(|v| {
            v["components"][0]["template"]["spec"]["initContainers"] =
                serde_json::json!([container("init"), container("init")]);
        });
        assert_eq!(
            field_of(&spec),
            Some(format!("{TEMPLATE}.spec.initContainers[1].name"))
        );
    }
}
