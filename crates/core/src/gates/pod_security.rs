//! The baseline Pod Security Standard, for the pods of Job gates a tenant
//! writes (in a plan or a namespaced GateTemplate). The operator creates
//! those Jobs with its own identity, so without this a plan author who may
//! not create a privileged or host-network pod would get one through it.
//! ClusterGateTemplates are written by cluster administrators and are not
//! held to it. The rules are Kubernetes' own baseline level
//! (kubernetes.io/docs/concepts/security/pod-security-standards), checked on
//! the pod spec as written; the namespace's PodSecurity admission still
//! applies on top.

use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};

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
    let lists: [(&str, &[Container]); 2] = [
        ("containers", &pod.containers),
        (
            "initContainers",
            pod.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, containers) in lists {
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

/// The message of a refused Job gate pod.
pub fn refusal(why: &str) -> String {
    format!(
        "{why} in a Job gate's pod: plans' and GateTemplates' Job gates run at the baseline Pod Security Standard; a ClusterGateTemplate, which cluster administrators write, may run such a pod"
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
}
