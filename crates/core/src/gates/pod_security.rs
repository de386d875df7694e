//! Pod Security Standards for the pods of Job gates a tenant writes (in a
//! plan or a namespaced GateTemplate). The operator creates those Jobs with
//! its own identity, so without this a plan author who may not create a
//! privileged or host-network pod would get one through it. ClusterGateTemplates
//! are written by cluster administrators and are not held to it. The rules are
//! Kubernetes' own levels (kubernetes.io/docs/concepts/security/pod-security-standards),
//! checked on the pod spec as written; the namespace's PodSecurity admission
//! still applies on top.
//!
//! At the restricted level (the default), a field the author left unset gets
//! the restricted value ([`fill_restricted`]: no privilege escalation, every
//! capability dropped, the runtime's seccomp profile, not root), and only a
//! value the author set against the level is refused: Job gates written for
//! the baseline level keep running unless they asked for more.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// How much a tenant's Job gate pod may ask for: a Pod Security Standard level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    /// Kubernetes' restricted level: the default.
    #[default]
    Restricted,
    /// Kubernetes' baseline level: no host namespaces, privileged containers
    /// or added capabilities past the default set.
    Baseline,
    /// No check: for clusters whose plan authors are trusted as much as the operator.
    Privileged,
}

impl Level {
    /// The level's name, as the operator's flag takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Restricted => "restricted",
            Level::Baseline => "baseline",
            Level::Privileged => "privileged",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "restricted" => Ok(Level::Restricted),
            "baseline" => Ok(Level::Baseline),
            "privileged" => Ok(Level::Privileged),
            other => Err(format!(
                "{other:?} is not a Pod Security Standard level: restricted, baseline or privileged"
            )),
        }
    }
}

/// Volume types the restricted level allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Checks a tenant's Job gate pod at `level` and, at the restricted level,
/// fills the restricted values of the fields left unset. The error names the
/// path below the pod spec and why it is refused.
pub fn secure(pod: &mut PodSpec, level: Level) -> Result<(), (String, String)> {
    let refused = match level {
        Level::Privileged => None,
        Level::Baseline => baseline(pod),
        Level::Restricted => baseline(pod).or_else(|| restricted(pod)),
    };
    if let Some(r) = refused {
        return Err(r);
    }
    if level == Level::Restricted {
        fill_restricted(pod);
    }
    Ok(())
}

/// What the restricted level refuses beyond the baseline among the values the
/// author set (unset fields are filled by [`fill_restricted`]).
pub fn restricted(pod: &PodSpec) -> Option<(String, String)> {
    let refuse = |field: String, what: &str| Some((field, format!("{what} is not allowed")));
    for (i, v) in pod.volumes.iter().flatten().enumerate() {
        let value = serde_json::to_value(v).unwrap_or_default();
        let kind = value
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "name").cloned());
        if let Some(kind) = kind
            && !RESTRICTED_VOLUMES.contains(&kind.as_str())
        {
            return refuse(format!("volumes[{i}].{kind}"), &format!("a {kind} volume"));
        }
    }
    let pod_sc = pod.security_context.as_ref();
    if pod_sc.and_then(|s| s.run_as_user) == Some(0) {
        return refuse(
            "securityContext.runAsUser".into(),
            "running as root (user 0)",
        );
    }
    if let Some(t) = pod_sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.as_str())
        && t != "RuntimeDefault"
        && t != "Localhost"
    {
        return refuse(
            "securityContext.seccompProfile.type".into(),
            &format!("seccomp profile {t}"),
        );
    }
    let pod_non_root = pod_sc.and_then(|s| s.run_as_non_root);
    for (list, containers) in container_lists(pod) {
        for (i, c) in containers.iter().enumerate() {
            let at = |f: &str| format!("{list}[{i}].securityContext.{f}");
            let sc = c.security_context.as_ref();
            if sc.and_then(|s| s.allow_privilege_escalation) == Some(true) {
                return refuse(at("allowPrivilegeEscalation"), "privilege escalation");
            }
            if sc.and_then(|s| s.run_as_user) == Some(0) {
                return refuse(at("runAsUser"), "running as root (user 0)");
            }
            match sc.and_then(|s| s.run_as_non_root) {
                Some(false) => return refuse(at("runAsNonRoot"), "running as root"),
                None if pod_non_root == Some(false) => {
                    return refuse("securityContext.runAsNonRoot".into(), "running as root");
                }
                _ => {}
            }
            if let Some(t) = sc
                .and_then(|s| s.seccomp_profile.as_ref())
                .map(|p| p.type_.as_str())
                && t != "RuntimeDefault"
                && t != "Localhost"
            {
                return refuse(at("seccompProfile.type"), &format!("seccomp profile {t}"));
            }
            let caps = sc.and_then(|s| s.capabilities.as_ref());
            for (k, cap) in caps
                .and_then(|c| c.add.as_ref())
                .into_iter()
                .flatten()
                .enumerate()
            {
                if cap != "NET_BIND_SERVICE" {
                    return refuse(
                        at(&format!("capabilities.add[{k}]")),
                        &format!("capability {cap}"),
                    );
                }
            }
            if let Some(drop) = caps.and_then(|c| c.drop.as_ref())
                && !drop.iter().any(|d| d == "ALL")
            {
                return Some((at("capabilities.drop"), "must include ALL".to_string()));
            }
        }
    }
    None
}

/// Fills the restricted values of the fields the author left unset: the pod
/// runs as non-root with the runtime's default seccomp profile, and each
/// container without privilege escalation and with every capability dropped.
pub fn fill_restricted(pod: &mut PodSpec) {
    let sc = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    sc.run_as_non_root.get_or_insert(true);
    sc.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    });
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for c in containers {
        let sc = c
            .security_context
            .get_or_insert_with(SecurityContext::default);
        sc.allow_privilege_escalation.get_or_insert(false);
        let caps = sc.capabilities.get_or_insert_with(Capabilities::default);
        caps.drop.get_or_insert_with(|| vec!["ALL".into()]);
    }
}

/// A pod's containers and init containers, with their list's name.
fn container_lists(pod: &PodSpec) -> [(&'static str, &[Container]); 2] {
    [
        ("containers", &pod.containers),
        (
            "initContainers",
            pod.init_containers.as_deref().unwrap_or_default(),
        ),
    ]
}

/// Capabilities the baseline level allows a container to add.
const ALLOWED_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls the baseline level allows.
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types the baseline level allows.
const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// What the baseline level refuses in a pod spec: the path below the pod
/// spec (`hostNetwork`, `containers[0].securityContext.privileged`) and why.
/// `None` when the pod meets it.
pub fn baseline(pod: &PodSpec) -> Option<(String, String)> {
    let refuse =
        |field: &str, what: &str| Some((field.to_string(), format!("{what} is not allowed")));
    if pod.host_network == Some(true) {
        return refuse("hostNetwork", "the node's network namespace");
    }
    if pod.host_pid == Some(true) {
        return refuse("hostPID", "the node's process namespace");
    }
    if pod.host_ipc == Some(true) {
        return refuse("hostIPC", "the node's IPC namespace");
    }
    for (i, v) in pod.volumes.iter().flatten().enumerate() {
        if v.host_path.is_some() {
            return refuse(&format!("volumes[{i}].hostPath"), "a hostPath volume");
        }
    }
    if let Some(sc) = &pod.security_context {
        if sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
            return refuse(
                "securityContext.windowsOptions.hostProcess",
                "a host process",
            );
        }
        if let Some(why) = selinux(sc.se_linux_options.as_ref()) {
            return refuse("securityContext.seLinuxOptions", why);
        }
        if sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) == Some("Unconfined") {
            return refuse("securityContext.seccompProfile.type", "Unconfined");
        }
        if sc.app_armor_profile.as_ref().map(|p| p.type_.as_str()) == Some("Unconfined") {
            return refuse("securityContext.appArmorProfile.type", "Unconfined");
        }
        for (i, s) in sc.sysctls.iter().flatten().enumerate() {
            if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
                return Some((
                    format!("securityContext.sysctls[{i}].name"),
                    format!("sysctl {} is not allowed", s.name),
                ));
            }
        }
    }
    for (list, containers) in container_lists(pod) {
        for (i, c) in containers.iter().enumerate() {
            if let Some((field, why)) = container(c) {
                return Some((format!("{list}[{i}].{field}"), why));
            }
        }
    }
    None
}

fn selinux(o: Option<&k8s_openapi::api::core::v1::SELinuxOptions>) -> Option<&'static str> {
    let o = o?;
    if o.user.as_deref().is_some_and(|u| !u.is_empty())
        || o.role.as_deref().is_some_and(|r| !r.is_empty())
    {
        return Some("an SELinux user or role");
    }
    match o.type_.as_deref() {
        Some(t) if !t.is_empty() && !SELINUX_TYPES.contains(&t) => Some("this SELinux type"),
        _ => None,
    }
}

fn container(c: &Container) -> Option<(String, String)> {
    let refuse = |field: &str, what: String| Some((field.to_string(), what));
    for (i, p) in c.ports.iter().flatten().enumerate() {
        if p.host_port.is_some_and(|h| h != 0) {
            return refuse(
                &format!("ports[{i}].hostPort"),
                "a host port is not allowed".into(),
            );
        }
    }
    let sc: &SecurityContext = c.security_context.as_ref()?;
    if sc.privileged == Some(true) {
        return refuse(
            "securityContext.privileged",
            "a privileged container is not allowed".into(),
        );
    }
    for (i, cap) in sc
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !ALLOWED_CAPABILITIES.contains(&cap.as_str()) {
            return refuse(
                &format!("securityContext.capabilities.add[{i}]"),
                format!("capability {cap} is not allowed"),
            );
        }
    }
    if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        return refuse(
            "securityContext.procMount",
            "an unmasked /proc is not allowed".into(),
        );
    }
    if sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
        return refuse(
            "securityContext.windowsOptions.hostProcess",
            "a host process is not allowed".into(),
        );
    }
    if let Some(why) = selinux(sc.se_linux_options.as_ref()) {
        return refuse(
            "securityContext.seLinuxOptions",
            format!("{why} is not allowed"),
        );
    }
    if sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) == Some("Unconfined") {
        return refuse(
            "securityContext.seccompProfile.type",
            "Unconfined is not allowed".into(),
        );
    }
    if sc.app_armor_profile.as_ref().map(|p| p.type_.as_str()) == Some("Unconfined") {
        return refuse(
            "securityContext.appArmorProfile.type",
            "Unconfined is not allowed".into(),
        );
    }
    None
}

/// The prefix of the pod annotations that set a container's AppArmor profile
/// (before the `appArmorProfile` field, and still honoured by the kubelet).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// What the baseline level refuses among a pod template's annotations: an
/// AppArmor profile other than the runtime's default or a local one (the
/// annotation's `unconfined` is the field's `Unconfined`). The field is the
/// path below the pod template.
pub fn baseline_annotations(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Option<(String, String)> {
    annotations.iter().find_map(|(key, value)| {
        let allowed = value == "runtime/default" || value.starts_with("localhost/");
        (key.starts_with(APPARMOR_ANNOTATION) && !allowed).then(|| {
            (
                format!("metadata.annotations[{key:?}]"),
                format!("the AppArmor profile {value:?} is not allowed"),
            )
        })
    })
}

/// The message of a Job gate pod refused at `level`.
pub fn refusal(why: &str, level: Level) -> String {
    format!(
        "{why} in a Job gate's pod: plans' and GateTemplates' Job gates run at the {level} Pod Security Standard (the operator's --gate-job-pod-security, or the namespace's GatePolicy spec.jobs.podSecurity); a ClusterGateTemplate, which cluster administrators write, may run such a pod"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_ordinary_pod_meets_the_baseline() {
        let p = pod(json!({"containers": [{"name": "t", "image": "t:1",
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "ports": [{"containerPort": 80}]}],
            "volumes": [{"name": "x", "emptyDir": {}}],
            "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}));
        assert_eq!(baseline(&p), None);
    }

    #[test]
    fn each_baseline_rule_names_its_field() {
        let c = |sc: serde_json::Value| json!({"containers": [{"name": "t", "image": "t:1", "securityContext": sc}]});
        let cases = [
            (
                json!({"hostNetwork": true, "containers": [{"name": "t"}]}),
                "hostNetwork",
            ),
            (
                json!({"hostPID": true, "containers": [{"name": "t"}]}),
                "hostPID",
            ),
            (
                json!({"hostIPC": true, "containers": [{"name": "t"}]}),
                "hostIPC",
            ),
            (
                json!({"containers": [{"name": "t"}], "volumes": [{"name": "e", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/"}}]}),
                "volumes[1].hostPath",
            ),
            (
                c(json!({"privileged": true})),
                "containers[0].securityContext.privileged",
            ),
            (
                c(json!({"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}})),
                "containers[0].securityContext.capabilities.add[1]",
            ),
            (
                c(json!({"procMount": "Unmasked"})),
                "containers[0].securityContext.procMount",
            ),
            (
                c(json!({"seccompProfile": {"type": "Unconfined"}})),
                "containers[0].securityContext.seccompProfile.type",
            ),
            (
                c(json!({"seLinuxOptions": {"type": "spc_t"}})),
                "containers[0].securityContext.seLinuxOptions",
            ),
            (
                json!({"containers": [{"name": "t", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
                "containers[0].ports[0].hostPort",
            ),
            (
                json!({"containers": [{"name": "t"}], "initContainers": [{"name": "i", "securityContext": {"privileged": true}}]}),
                "initContainers[0].securityContext.privileged",
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
                "securityContext.sysctls[0].name",
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
                "securityContext.seccompProfile.type",
            ),
        ];
        for (spec, field) in cases {
            let got = baseline(&pod(spec.clone()));
            assert_eq!(got.as_ref().map(|(f, _)| f.as_str()), Some(field), "{spec}");
        }
    }

    #[test]
    fn the_restricted_level_fills_what_is_unset_and_refuses_what_is_set_against_it() {
        // A Job gate written for the baseline level: filled, not refused.
        let mut p = pod(json!({"containers": [{"name": "t", "image": "curl"}],
            "initContainers": [{"name": "i", "image": "busybox",
                "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}]}));
        assert_eq!(secure(&mut p, Level::Restricted), Ok(()));
        let sc = p.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        for c in p
            .containers
            .iter()
            .chain(p.init_containers.iter().flatten())
        {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            assert_eq!(
                sc.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_string()][..])
            );
        }
        assert_eq!(baseline(&p), None);
        assert_eq!(restricted(&p), None, "what is filled meets the level");
        // What the author set is kept when it meets the level.
        let mut p = pod(json!({"containers": [{"name": "t", "image": "curl",
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}}],
            "securityContext": {"runAsNonRoot": false}}));
        assert_eq!(secure(&mut p, Level::Restricted), Ok(()));
        assert_eq!(
            p.security_context.as_ref().unwrap().run_as_non_root,
            Some(false)
        );
        let c = |sc: serde_json::Value| json!({"containers": [{"name": "t", "image": "t:1", "securityContext": sc}]});
        let cases = [
            (
                c(json!({"allowPrivilegeEscalation": true})),
                "containers[0].securityContext.allowPrivilegeEscalation",
            ),
            (
                c(json!({"runAsUser": 0})),
                "containers[0].securityContext.runAsUser",
            ),
            (
                c(json!({"runAsNonRoot": false})),
                "containers[0].securityContext.runAsNonRoot",
            ),
            (
                c(json!({"capabilities": {"add": ["CHOWN"]}})),
                "containers[0].securityContext.capabilities.add[0]",
            ),
            (
                c(json!({"capabilities": {"drop": ["NET_RAW"]}})),
                "containers[0].securityContext.capabilities.drop",
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"runAsNonRoot": false}}),
                "securityContext.runAsNonRoot",
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"runAsUser": 0}}),
                "securityContext.runAsUser",
            ),
            (
                json!({"containers": [{"name": "t"}], "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}),
                "volumes[0].nfs",
            ),
            // The baseline's rules hold at the restricted level.
            (
                json!({"hostNetwork": true, "containers": [{"name": "t"}]}),
                "hostNetwork",
            ),
        ];
        for (spec, field) in cases {
            let mut p = pod(spec.clone());
            let got = secure(&mut p, Level::Restricted);
            assert_eq!(
                got.as_ref().map_err(|(f, _)| f.as_str()),
                Err(field),
                "{spec}"
            );
        }
        // Baseline: none of those but the host network; privileged: nothing.
        let mut p = pod(c(json!({"allowPrivilegeEscalation": true, "runAsUser": 0})));
        assert_eq!(secure(&mut p, Level::Baseline), Ok(()));
        assert!(p.security_context.is_none(), "nothing filled at baseline");
        let mut p = pod(
            json!({"hostNetwork": true, "containers": [{"name": "t", "securityContext": {"privileged": true}}]}),
        );
        assert!(secure(&mut p.clone(), Level::Baseline).is_err());
        assert_eq!(secure(&mut p, Level::Privileged), Ok(()));
        assert_eq!("baseline".parse(), Ok(Level::Baseline));
    }

    #[test]
    fn an_unconfined_apparmor_annotation_is_refused_and_the_defaults_are_not() {
        let annotations = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let key = "container.apparmor.security.beta.kubernetes.io/t";
        let refused = baseline_annotations(&annotations(&[("team", "a"), (key, "unconfined")]));
        assert_eq!(
            refused.map(|(f, _)| f),
            Some(format!("metadata.annotations[{key:?}]"))
        );
        for ok in ["runtime/default", "localhost/my-profile"] {
            assert_eq!(
                baseline_annotations(&annotations(&[(key, ok)])),
                None,
                "{ok}"
            );
        }
        assert_eq!(
            baseline_annotations(&annotations(&[("example.com/unconfined", "unconfined")])),
            None
        );
        assert!("strict".parse::<Level>().is_err());
    }
}
