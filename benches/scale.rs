//! Scale benchmark (`make bench-scale N=...`, `make bench-compare N=...`):
//! N plans of one component, 2 replicas, steps setWeight 50 / pause 1s,
//! through one controller on a fresh cluster started by e2e/bench-scale.sh.
//! Prints one markdown table from a single run; asserts nothing about speed.
//!
//! 1. Cold start: N objects created at once; time to the first, p50, p90 and
//!    last object converged, controller CPU seconds, API writes.
//! 2. Idle: writes and CPU over `RP_BENCH_IDLE_SECONDS` (30) with nothing changing.
//! 3. Rollout of 10%: every tenth object patched to a new image; time to all
//!    converged again, CPU, writes.
//!    Also, for each rolled object, the time from its spec patch to the
//!    controller's first write of a Deployment (ours) or ReplicaSet (Argo)
//!    for it, from the audit log: p50 / p90 / p99 / max.
//! 4. Failover (ours, `RP_BENCH_FAILOVER=1`, the default): the operator runs
//!    with leader election; a standby is started, then the leader is stopped
//!    (SIGTERM, which releases the Lease), and later the new leader is killed
//!    (SIGKILL) under a second standby. For each: time until the standby
//!    leads and until it has reconciled every plan (`releaseplan_plans` sums
//!    to N), and its writes other than the Lease (there should be none).
//!    Sharded (`RP_BENCH_SHARDS`), the stopped replica is the first shard's
//!    holder, and the standby takes over that shard's plans only.
//! 5. Floor (`RP_BENCH_FLOOR=1`): the controller stopped, N plain Deployments
//!    of the same pods created at once; time to all ready. What the cluster
//!    itself needs, which no controller can beat.
//!
//! The controller (`RP_BENCH_CONTROLLER`): `releaseplan` (`$RP_OPERATOR_BIN`,
//! ReleasePlans, converged = phase Stable at the current generation) or
//! `argo` (`$RP_ARGO_BIN`, CRDs from `$RP_ARGO_CRDS`, Rollouts with the same
//! canary steps, converged = phase Healthy at the current generation with
//! stableRS = currentPodHash). Each runs with its defaults, watching the
//! bench namespace only, as the user `$RP_AUDIT_USER` (kubeconfig
//! `$RP_AUDIT_KUBECONFIG`): the API server's audit log records that user's
//! writes only, so both are counted by the same means (verb, resource, code).
//! Peak RSS is the process's VmHWM; CPU is user + system time from /proc.
//!
//! `RP_BENCH_JSON=FILE` also writes the figures as JSON; `scale --compare
//! OURS.json ARGO.json` prints the ratios of two such files (no cluster), and
//! `scale --plot OUT.svg RUN.json...` draws per replica peak RSS and CPU
//! against N, a line per number of shards (`RP_BENCH_SHARDS`).
//! `RP_BENCH_RUST_LOG` sets the operator's `RUST_LOG` (default `warn`); its
//! flags are set through the environment variables it reads
//! (`RELEASEPLAN_CONCURRENCY=64`).

// Bench code, like test code, may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::fixtures::{self, web, web_with};
use support::operator::{Operator, free_port};
use support::{cluster, crd, wait_until};

/// How many objects are created or patched at once.
const PARALLEL: usize = 32;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ReleasePlan,
    Rollout,
    Deployment,
}

impl Kind {
    fn resource(self) -> ApiResource {
        let gvk = match self {
            Kind::ReleasePlan => GroupVersionKind::gvk("releaseplan.io", "v1alpha1", "ReleasePlan"),
            Kind::Rollout => GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"),
            Kind::Deployment => GroupVersionKind::gvk("apps", "v1", "Deployment"),
        };
        ApiResource::from_gvk(&gvk)
    }

    /// The object `name` running `image`: 1 component of 2 replicas, steps
    /// setWeight 50 / pause 1s (a plain Deployment has no steps).
    fn object(self, name: &str, image: &str) -> Value {
        let steps = json!([{"setWeight": 50}, {"pause": {"duration": "1s"}}]);
        match self {
            Kind::ReleasePlan => serde_json::to_value(fixtures::plan(
                name,
                json!({"components": [component(name, image)], "strategy": {"steps": steps}}),
            ))
            .unwrap(),
            Kind::Rollout => json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"name": name},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                    "template": pod_template(name, image),
                    "strategy": {"canary": {"steps": steps}}}
            }),
            Kind::Deployment => json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                    "template": pod_template(name, image)}
            }),
        }
    }

    /// The merge patch that moves an object to `image`.
    fn image_patch(self, name: &str, image: &str) -> Value {
        match self {
            Kind::ReleasePlan => json!({"spec": {"components": [component(name, image)]}}),
            _ => json!({"spec": {"template": pod_template(name, image)}}),
        }
    }

    /// The resource the controller writes to run an object's pods: our
    /// Deployments, Argo's ReplicaSets.
    fn workload_resource(self) -> &'static str {
        match self {
            Kind::Rollout => "replicasets",
            Kind::ReleasePlan | Kind::Deployment => "deployments",
        }
    }

    /// The generation an object has converged at, if it has.
    fn converged(self, o: &DynamicObject) -> Option<i64> {
        let generation = o.metadata.generation?;
        let s = o.data.get("status")?;
        let ok = match self {
            Kind::ReleasePlan => {
                s.get("phase")? == "Stable" && s.get("observedGeneration")?.as_i64()? == generation
            }
            // Argo Rollouts writes its observedGeneration as a string.
            Kind::Rollout => {
                s.get("phase")? == "Healthy"
                    && s.get("observedGeneration")?.as_str()? == generation.to_string()
                    && s.get("stableRS")? == s.get("currentPodHash")?
            }
            Kind::Deployment => {
                let replicas = o.data.pointer("/spec/replicas")?.as_i64()?;
                s.get("observedGeneration")?.as_i64()? == generation
                    && s.get("readyReplicas").and_then(Value::as_i64) == Some(replicas)
                    && s.get("updatedReplicas").and_then(Value::as_i64) == Some(replicas)
            }
        };
        ok.then_some(generation)
    }
}

/// The one component of plan `name`, 2 replicas of `image`: the tests'
/// `web` with the small template, the production template otherwise.
fn component(name: &str, image: &str) -> Value {
    match Template::from_env() {
        Template::Small => web(image, 2),
        Template::Production => web_with(production_template(name, image), 2),
    }
}

/// The pod template of every object (`RP_BENCH_TEMPLATE`): `small`, one
/// container and one label (the default, the figures of earlier runs), or
/// `production`, about 6 KB of JSON like a real service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Template {
    Small,
    Production,
}

impl Template {
    fn from_env() -> Template {
        match std::env::var("RP_BENCH_TEMPLATE").as_deref() {
            Err(_) | Ok("" | "small") => Template::Small,
            Ok("production") => Template::Production,
            Ok(other) => panic!("RP_BENCH_TEMPLATE must be small or production, not {other}"),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Template::Small => "small",
            Template::Production => "production",
        }
    }
}

fn pod_template(name: &str, image: &str) -> Value {
    match Template::from_env() {
        Template::Small => json!({"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": image}]}}),
        Template::Production => production_template(name, image),
    }
}

/// The ConfigMap and the Secret the production template reads, created once
/// in the bench namespace before the objects.
const PRODUCTION_CONFIG: &str = "app-config";
const PRODUCTION_SECRET: &str = "app-secrets";

/// With the production template, the ConfigMap and Secret it reads.
async fn production_config(client: &Client, ns: &str) {
    if Template::from_env() != Template::Production {
        return;
    }
    let pp = PostParams::default();
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": PRODUCTION_CONFIG},
        "data": {"config.yaml": "listen: :8080\nlog: info\nfeatures: [a, b, c]\n"}
    }))
    .unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&pp, &cm)
        .await
        .unwrap();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": PRODUCTION_SECRET},
        "stringData": {"db-password": "not-a-real-password"}
    }))
    .unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&pp, &secret)
        .await
        .unwrap();
}

/// A production service's pod template, about 6 KB of JSON: an app container
/// and a sidecar, 26 env vars (one from a fieldRef, one from a secretKeyRef),
/// resources, liveness and readiness probes, three volume mounts,
/// configMap/secret/emptyDir volumes, 8 labels, 6 annotations, security
/// contexts, a pod anti-affinity and a toleration.
fn production_template(name: &str, image: &str) -> Value {
    let mut env: Vec<Value> = (1..=24)
        .map(|i| json!({"name": format!("APP_SETTING_{i:02}"), "value": format!("value-of-setting-{i:02}-for-{name}")}))
        .collect();
    env.push(json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}));
    env.push(json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": PRODUCTION_SECRET, "key": "db-password"}}}));
    let labels = json!({
        "app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/instance": format!("{name}-prod"),
        "app.kubernetes.io/version": "1.0.0", "app.kubernetes.io/component": "api",
        "app.kubernetes.io/part-of": "storefront", "team": "checkout", "tier": "backend"
    });
    let security = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "runAsNonRoot": true, "runAsUser": 10001, "capabilities": {"drop": ["ALL"]}});
    json!({
        "metadata": {
            "labels": labels,
            "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                "prometheus.io/path": "/metrics",
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                "example.com/owner": "checkout-team@example.com",
                "example.com/runbook": format!("https://runbooks.example.com/storefront/{name}")
            }
        },
        "spec": {
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 45,
            "securityContext": {"runAsNonRoot": true, "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                    "args": ["--config=/etc/app/config.yaml", "--listen=:8080", "--metrics=:9090"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                              {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                    "env": env,
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                  "limits": {"cpu": "1", "memory": "512Mi"}},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                        "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"},
                        "periodSeconds": 5, "timeoutSeconds": 2, "successThreshold": 1, "failureThreshold": 3},
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                        {"name": "secrets", "mountPath": "/etc/app/secrets", "readOnly": true},
                        {"name": "tmp", "mountPath": "/tmp"}
                    ],
                    "securityContext": security
                },
                {
                    "name": "proxy", "image": "registry.example/proxy:1.29.1", "imagePullPolicy": "IfNotPresent",
                    "args": ["--upstream=127.0.0.1:8080", "--listen=:8443", "--log-level=info"],
                    "ports": [{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
                    "env": [{"name": "PROXY_MODE", "value": "sidecar"}],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "200m", "memory": "128Mi"}},
                    "readinessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 10},
                    "securityContext": security
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": PRODUCTION_CONFIG}},
                {"name": "secrets", "secret": {"secretName": PRODUCTION_SECRET}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "128Mi"}}
            ],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": name}},
                    "topologyKey": "kubernetes.io/hostname"}}]}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "storefront", "effect": "NoSchedule"}]
        }
    })
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_path(key: &str) -> String {
    std::env::var(key)
        .unwrap_or_else(|_| panic!("{key} is not set (run through e2e/bench-scale.sh)"))
}

// ------------------------------------------------------------ convergence

/// When an object was first seen converged, at each generation it did.
type Convergences = Vec<(i64, Instant)>;

/// For each object, the first time it was seen converged at each generation.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, Convergences>>>);

impl Seen {
    /// Watches `kind` in `ns` and records convergences until aborted.
    fn watch(&self, client: &Client, ns: &str, kind: Kind) -> tokio::task::JoinHandle<()> {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource());
        let seen = self.clone();
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(o) = s.next().await {
                let Ok(o) = o else { continue };
                if let Some(g) = kind.converged(&o) {
                    let now = Instant::now();
                    let mut map = seen.0.lock().unwrap();
                    let v = map.entry(o.name_any()).or_default();
                    if !v.iter().any(|(h, _)| *h == g) {
                        v.push((g, now));
                    }
                }
            }
        })
    }

    /// When `name` was first seen converged at `generation` or later.
    fn at(&self, name: &str, generation: i64) -> Option<Instant> {
        let map = self.0.lock().unwrap();
        map.get(name)?
            .iter()
            .filter(|(g, _)| *g >= generation)
            .map(|(_, t)| *t)
            .min()
    }

    /// Waits until every `(name, generation)` has converged; the times
    /// since `start`, sorted.
    async fn wait_all(
        &self,
        targets: &[(String, i64)],
        start: Instant,
        timeout: Duration,
    ) -> Vec<Duration> {
        let what = format!("{} objects converged", targets.len());
        wait_until(timeout, &what, || async {
            let mut times = Vec::with_capacity(targets.len());
            for (name, g) in targets {
                times.push(self.at(name, *g)?.saturating_duration_since(start));
            }
            times.sort();
            Some(times)
        })
        .await
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64()
}

/// First, p50, p90 and last of sorted durations, in seconds.
#[derive(Serialize, Deserialize, Clone, Default)]
struct Spread {
    first: f64,
    p50: f64,
    p90: f64,
    all: f64,
}

impl Spread {
    fn of(sorted: &[Duration]) -> Spread {
        Spread {
            first: percentile(sorted, 0.0),
            p50: percentile(sorted, 0.5),
            p90: percentile(sorted, 0.9),
            all: percentile(sorted, 1.0),
        }
    }
    fn cell(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1}",
            self.first, self.p50, self.p90, self.all
        )
    }
}

/// Creates (or patches, with `patch`) `names` with at most [`PARALLEL`] at
/// once; returns each object's generation after the write, and when the
/// write was sent.
async fn write_all(
    api: &Api<DynamicObject>,
    kind: Kind,
    names: &[String],
    image: &str,
    patch: bool,
) -> Vec<(String, i64, SystemTime)> {
    futures::stream::iter(names.iter().cloned())
        .map(|name| async move {
            let sent = SystemTime::now();
            let o: DynamicObject = if patch {
                let p = kind.image_patch(&name, image);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                    .await
            } else {
                let o: DynamicObject = serde_json::from_value(kind.object(&name, image)).unwrap();
                api.create(&PostParams::default(), &o).await
            }
            .unwrap_or_else(|e| panic!("cannot write {name}: {e}"));
            Ok::<_, ()>((name, o.metadata.generation.unwrap_or(1), sent))
        })
        .buffer_unordered(PARALLEL)
        .try_collect()
        .await
        .unwrap()
}

/// The names and generations of written objects.
fn generations(written: Vec<(String, i64, SystemTime)>) -> Vec<(String, i64)> {
    written.into_iter().map(|(n, g, _)| (n, g)).collect()
}

/// p50, p90, p99 and max of durations, in seconds, and how many.
#[derive(Serialize, Deserialize, Clone, Default)]
struct Latency {
    n: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Latency {
    fn of(mut d: Vec<Duration>) -> Latency {
        d.sort();
        Latency {
            n: d.len(),
            p50: percentile(&d, 0.5),
            p90: percentile(&d, 0.9),
            p99: percentile(&d, 0.99),
            max: percentile(&d, 1.0),
        }
    }
    fn cell(&self) -> String {
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} (of {})",
            self.p50, self.p90, self.p99, self.max, self.n
        )
    }
}

// ------------------------------------------------------------ process and audit

/// Resident memory now and at its peak (KiB), and CPU seconds, of a process.
#[derive(Clone, Copy, Default)]
struct Usage {
    rss_kib: u64,
    peak_kib: u64,
    cpu: f64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Usage {
        rss_kib: kib("VmRSS:"),
        peak_kib: kib("VmHWM:"),
        cpu: (ticks(11) + ticks(12)) / 100.0,
    }
}

/// Writes of the controller's user, from the audit log: by
/// `resource[/subresource] verb`, and how many were refused with 409.
#[derive(Serialize, Deserialize, Clone, Default)]
struct Writes {
    total: u64,
    conflicts: u64,
    events: u64,
    by_kind: BTreeMap<String, u64>,
}

/// Reads the audit log from line `from`; the writes and the next line.
fn audit(path: &str, from: usize) -> (Writes, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut w = Writes::default();
    let mut n = 0;
    for line in text.lines() {
        n += 1;
        if n <= from {
            continue;
        }
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or("");
        let mut resource = s("/objectRef/resource").to_string();
        if !s("/objectRef/subresource").is_empty() {
            resource = format!("{resource}/{}", s("/objectRef/subresource"));
        }
        w.total += 1;
        // 409 Conflict: a write under a stale resourceVersion (not AlreadyExists).
        if e.pointer("/responseStatus/code").and_then(Value::as_i64) == Some(409)
            && s("/responseStatus/reason") == "Conflict"
        {
            w.conflicts += 1;
        }
        if resource == "events" {
            w.events += 1;
        }
        *w.by_kind
            .entry(format!("{resource} {}", s("/verb")))
            .or_default() += 1;
    }
    (w, n)
}

/// For each written object (name, generation, when its write was sent), the
/// time from that write to the controller's first write of `resource` named
/// after it (`NAME-...`) received by the API server, from the audit log from
/// line `from`. Objects without such a write are left out.
fn first_writes(
    path: &str,
    from: usize,
    resource: &str,
    written: &[(String, i64, SystemTime)],
) -> Vec<Duration> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut first: HashMap<&str, SystemTime> = HashMap::new();
    for line in text.lines().skip(from) {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or("");
        if s("/objectRef/resource") != resource
            || !s("/objectRef/subresource").is_empty()
            || !matches!(s("/verb"), "create" | "update" | "patch")
        {
            continue;
        }
        let Ok(at) = s("/requestReceivedTimestamp").parse::<chrono::DateTime<chrono::Utc>>() else {
            continue;
        };
        let at = SystemTime::from(at);
        let name = s("/objectRef/name");
        // Names are fixed width (app-00042), so the prefix is the object's.
        let Some((object, _, sent)) = written.iter().find(|(n, _, _)| {
            name.strip_prefix(n.as_str())
                .is_some_and(|r| r.starts_with('-'))
        }) else {
            continue;
        };
        if at < *sent {
            continue;
        }
        let slot = first.entry(object.as_str()).or_insert(at);
        *slot = (*slot).min(at);
    }
    written
        .iter()
        .filter_map(|(n, _, sent)| first.get(n.as_str())?.duration_since(*sent).ok())
        .collect()
}

/// Whether the failover phase runs (ours only; `RP_BENCH_FAILOVER=0` skips it).
/// Sharded, a standby takes over the first replica's shard.
fn failover_on(kind: Kind) -> bool {
    kind == Kind::ReleasePlan && env_or("RP_BENCH_FAILOVER", 1) == 1
}

/// Shards of ours (`RP_BENCH_SHARDS`, default 1): that many replicas run
/// with `--shards`, one shard each; CPU and writes are their sums.
fn shards() -> u32 {
    env_or("RP_BENCH_SHARDS", 1)
}

/// One leader change with every plan Stable.
#[derive(Serialize, Deserialize, Clone, Default)]
struct Failover {
    /// How the leader stopped: `SIGTERM` (it releases the Lease) or `SIGKILL`.
    how: String,
    /// Seconds from the signal until the standby leads (`releaseplan_leader 1`).
    leads_after: f64,
    /// Seconds from the signal until it has reconciled every plan (of the
    /// shard it took over, sharded).
    caught_up_after: f64,
    /// The plans it took over: every plan, or the stopped replica's shard's.
    #[serde(default)]
    plans: f64,
    /// The Lease's duration, s: a killed holder's shard is taken over after
    /// it expires.
    #[serde(default)]
    lease_seconds: f64,
    /// CPU seconds of the new leader from the signal to 5 s after catching up.
    cpu: f64,
    /// Writes of the controller's user from the signal to 5 s after catching
    /// up, Lease writes left out.
    writes: Writes,
    /// Lease writes in that time.
    lease_writes: u64,
    /// Resident memory of the new leader after catching up, MiB.
    rss_mib: f64,
    /// Its peak resident memory (VmHWM) by then, MiB: a leader that starts
    /// with every plan already there lists them all at once.
    #[serde(default)]
    peak_rss_mib: f64,
}

/// The Lease duration the bench gives the operator (its default), s.
const LEASE_SECONDS: f64 = 15.0;

/// The operator as the bench runs it, on the audited user's kubeconfig.
async fn start_ours(ns: &str, leader_election: bool) -> Operator {
    let mut l = Operator::launcher(ns)
        .binary(env_path("RP_OPERATOR_BIN"))
        .rust_log(&std::env::var("RP_BENCH_RUST_LOG").unwrap_or_else(|_| "warn".to_string()))
        .env("KUBECONFIG", &env_path("RP_AUDIT_KUBECONFIG"));
    if leader_election || shards() > 1 {
        l = l
            .leader_election(ns)
            .args(["--lease-seconds", &LEASE_SECONDS.to_string()]);
    }
    if shards() > 1 {
        l = l.args(["--shards", &shards().to_string()]);
    }
    l.start().await
}

/// A metric's value in an operator's metrics text (summed over label sets).
async fn metric(op: &Operator, name: &str) -> f64 {
    support::operator::sum_metric(&op.metrics().await, name)
}

/// Starts a standby, stops `leader` (SIGKILL with `kill`, else SIGTERM) and
/// measures the standby's takeover of its plans (every plan, or its shard's);
/// returns the figures and the new leader.
async fn failover(
    ns: &str,
    audit_log: &str,
    mut leader: Operator,
    kill: bool,
) -> (Failover, Operator) {
    let plans = metric(&leader, "releaseplan_plans").await;
    let standby = start_ours(ns, true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        metric(&standby, "releaseplan_leader").await,
        0.0,
        "the standby must not lead while the leader runs"
    );
    let pid = standby.pid().expect("the standby runs");
    let (_, mark) = audit(audit_log, 0);
    let u0 = usage(pid);
    let start = Instant::now();
    if kill {
        leader.kill();
    } else {
        leader.terminate().await;
    }
    let limit = Duration::from_secs(600);
    wait_until(limit, "the standby leads", || async {
        (metric(&standby, "releaseplan_leader").await == 1.0).then_some(())
    })
    .await;
    let leads_after = start.elapsed().as_secs_f64();
    wait_until(limit, "the new leader reconciled every plan", || async {
        (metric(&standby, "releaseplan_plans").await >= plans).then_some(())
    })
    .await;
    let caught_up_after = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let u1 = usage(pid);
    let (mut writes, _) = audit(audit_log, mark);
    let lease_writes: u64 = writes
        .by_kind
        .iter()
        .filter(|(k, _)| k.starts_with("leases "))
        .map(|(_, v)| *v)
        .sum();
    writes.by_kind.retain(|k, _| !k.starts_with("leases "));
    writes.total -= lease_writes;
    let f = Failover {
        how: if kill { "SIGKILL" } else { "SIGTERM" }.into(),
        leads_after,
        caught_up_after,
        plans,
        lease_seconds: LEASE_SECONDS,
        cpu: u1.cpu - u0.cpu,
        writes,
        lease_writes,
        rss_mib: u1.rss_kib as f64 / 1024.0,
        peak_rss_mib: u1.peak_kib as f64 / 1024.0,
    };
    eprintln!(
        "failover ({}): leads after {:.1}s, caught up after {:.1}s, {} writes",
        f.how, f.leads_after, f.caught_up_after, f.writes.total
    );
    (f, standby)
}

/// The controller under test, running as the audited user.
enum Controller {
    Ours(Vec<Operator>),
    Argo(Child),
}

impl Controller {
    async fn start(kind: Kind, ns: &str) -> Controller {
        let kubeconfig = env_path("RP_AUDIT_KUBECONFIG");
        match kind {
            Kind::ReleasePlan => {
                let mut ops = Vec::new();
                for _ in 0..shards() {
                    ops.push(start_ours(ns, failover_on(kind)).await);
                }
                for op in &ops {
                    wait_until(
                        Duration::from_secs(120),
                        "each replica serves a shard",
                        || async { (metric(op, "releaseplan_leader").await == 1.0).then_some(()) },
                    )
                    .await;
                }
                Controller::Ours(ops)
            }
            _ => {
                let log = std::env::temp_dir().join(format!("rollouts-controller-{ns}.log"));
                let out = std::fs::File::create(&log).unwrap();
                let healthz = free_port();
                let child = Command::new(env_path("RP_ARGO_BIN"))
                    // --namespaced: watch the namespace of --namespace only.
                    .args([
                        "--namespaced",
                        "--namespace",
                        ns,
                        "--kubeconfig",
                        &kubeconfig,
                    ])
                    .args(["--leader-elect=false", "--loglevel", "warn"])
                    .args(["--metricsPort", &free_port().to_string()])
                    .args(["--healthzPort", &healthz.to_string()])
                    // Its own namespace (configuration, notifications): the bench's.
                    .env("POD_NAMESPACE", ns)
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out)
                    .spawn()
                    .expect("cannot start rollouts-controller");
                let url = format!("http://127.0.0.1:{healthz}/healthz");
                wait_until(
                    Duration::from_secs(60),
                    "rollouts-controller /healthz",
                    || async {
                        reqwest::get(&url)
                            .await
                            .ok()?
                            .status()
                            .is_success()
                            .then_some(())
                    },
                )
                .await;
                println!("rollouts-controller log: {}", log.display());
                Controller::Argo(child)
            }
        }
    }

    fn pids(&self) -> Vec<u32> {
        match self {
            Controller::Ours(ops) => ops
                .iter()
                .map(|op| op.pid().expect("the operator runs"))
                .collect(),
            Controller::Argo(c) => vec![c.id()],
        }
    }

    /// CPU and memory of all its processes: the sums, and the largest peak
    /// of one process (`max_peak_kib`).
    fn usage(&self) -> (Usage, u64) {
        let each: Vec<Usage> = self.pids().into_iter().map(usage).collect();
        let sum = each.iter().fold(Usage::default(), |a, u| Usage {
            rss_kib: a.rss_kib + u.rss_kib,
            peak_kib: a.peak_kib + u.peak_kib,
            cpu: a.cpu + u.cpu,
        });
        (sum, each.iter().map(|u| u.peak_kib).max().unwrap_or(0))
    }

    /// Of each replica of ours, the plans it last reconciled
    /// (`releaseplan_plans`, summed over phases).
    async fn plans_per_replica(&self) -> Vec<f64> {
        let Controller::Ours(ops) = self else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for op in ops {
            out.push(metric(op, "releaseplan_plans").await);
        }
        out
    }

    /// Our caches by resource: objects and estimated bytes
    /// (`releaseplan_cached_objects`, `releaseplan_cached_bytes`), summed
    /// over replicas.
    async fn cache_sizes(&self) -> BTreeMap<String, (f64, f64)> {
        let Controller::Ours(ops) = self else {
            return BTreeMap::new();
        };
        let mut sizes: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for op in ops {
            for l in op.metrics().await.lines() {
                let (which, rest) = if let Some(r) = l.strip_prefix("releaseplan_cached_objects{") {
                    (0, r)
                } else if let Some(r) = l.strip_prefix("releaseplan_cached_bytes{") {
                    (1, r)
                } else {
                    continue;
                };
                let Some((labels, v)) = rest.rsplit_once(' ') else {
                    continue;
                };
                let (Some(resource), Ok(v)) = (
                    labels
                        .strip_prefix("resource=\"")
                        .and_then(|r| r.split('"').next()),
                    v.parse::<f64>(),
                ) else {
                    continue;
                };
                let e = sizes.entry(resource.to_string()).or_default();
                if which == 0 {
                    e.0 += v;
                } else {
                    e.1 += v;
                }
            }
        }
        sizes.retain(|_, (_, bytes)| *bytes > 0.0);
        sizes
    }

    /// Our own write counters by kind, and failed reconciles by error kind.
    async fn own_counters(&self) -> BTreeMap<String, f64> {
        let Controller::Ours(ops) = self else {
            return BTreeMap::new();
        };
        let mut sums = BTreeMap::new();
        for op in ops {
            for l in op.metrics().await.lines().filter(|l| {
                l.starts_with("releaseplan_api_writes_total")
                    || l.starts_with("releaseplan_reconcile_failures_total")
                    || l.starts_with("releaseplan_reconcile_runs_total")
                    || l.starts_with("releaseplan_wakes_total")
                    || l.starts_with("releaseplan_timed_reconciles_total")
                    // Time in reconciles and waiting for one (sum and count:
                    // their means say where a slow convergence waits).
                    || l.starts_with("releaseplan_reconcile_duration_seconds_sum")
                    || l.starts_with("releaseplan_reconcile_duration_seconds_count")
                    || l.starts_with("releaseplan_reconcile_queue_wait_seconds_sum")
                    || l.starts_with("releaseplan_reconcile_queue_wait_seconds_count")
                    // Lists and watches by resource: a list past the first
                    // is a relist, during which that cache does not move.
                    || (l.starts_with("releaseplan_kube_requests_total")
                        && (l.contains("verb=\"list\"") || l.contains("verb=\"watch\"")))
            }) {
                if let Some((k, v)) = l.rsplit_once(' ')
                    && let Ok(v) = v.parse::<f64>()
                {
                    *sums.entry(k.to_string()).or_insert(0.0) += v;
                }
            }
        }
        sums
    }

    fn stop(self) {
        match self {
            Controller::Ours(ops) => drop(ops),
            Controller::Argo(mut c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

// ------------------------------------------------------------ the run

/// The figures of one run (the JSON of `RP_BENCH_JSON`).
#[derive(Serialize, Deserialize, Default)]
struct Figures {
    controller: String,
    n: usize,
    /// `RP_BENCH_TEMPLATE` of the run (runs before it had the small one).
    #[serde(default = "small")]
    template: String,
    create_seconds: f64,
    cold: Spread,
    cold_cpu: f64,
    cold_writes: Writes,
    cold_counters: BTreeMap<String, f64>,
    rss_idle_mib: f64,
    peak_rss_mib: f64,
    idle_seconds: u64,
    idle_cpu: f64,
    idle_writes: Writes,
    rollout_n: usize,
    rollout: Spread,
    rollout_cpu: f64,
    rollout_writes: Writes,
    rollout_counters: BTreeMap<String, f64>,
    /// Patch of a rolled object → the controller's first write of its
    /// Deployment (ReplicaSet), seconds.
    #[serde(default)]
    rollout_first_write: Option<Latency>,
    #[serde(default)]
    failover: Vec<Failover>,
    /// Our caches after the cold start, by resource: objects, estimated bytes.
    #[serde(default)]
    cache_cold: BTreeMap<String, (f64, f64)>,
    /// The same after the rollout.
    #[serde(default)]
    cache_rollout: BTreeMap<String, (f64, f64)>,
    /// Replicas of ours, one shard each (1: no sharding).
    #[serde(default)]
    shards: u32,
    /// The largest peak RSS of one replica (the whole peak without sharding).
    #[serde(default)]
    peak_rss_replica_mib: f64,
    /// Of each replica, the plans it reconciled by the end of the cold start.
    /// Every plan converged, so a sum of N means none was reconciled by two
    /// replicas (and none by none).
    #[serde(default)]
    plans_per_replica: Vec<f64>,
    floor: Option<Spread>,
}

fn small() -> String {
    Template::Small.as_str().to_string()
}

fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

async fn run(client: &Client, kind: Kind, n: usize) -> Figures {
    let audit_log = env_path("RP_AUDIT_LOG");
    let timeout = Duration::from_secs(env_or("RP_BENCH_TIMEOUT_SECONDS", 3600));
    let idle_seconds: u64 = env_or("RP_BENCH_IDLE_SECONDS", 30);
    let settle = Duration::from_secs(5);
    let ns = cluster::test_namespace(client, "bench-scale").await;
    production_config(client, &ns).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.resource());
    let controller = Controller::start(kind, &ns).await;
    let seen = Seen::default();
    let watch = seen.watch(client, &ns, kind);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut f = Figures {
        controller: if kind == Kind::ReleasePlan {
            "releaseplan"
        } else {
            "argo-rollouts"
        }
        .into(),
        n,
        template: Template::from_env().as_str().to_string(),
        idle_seconds,
        ..Figures::default()
    };

    // Cold start.
    let (_, mark) = audit(&audit_log, 0);
    let counters0 = controller.own_counters().await;
    let (u0, _) = controller.usage();
    let names: Vec<String> = (0..n).map(|i| format!("app-{i:05}")).collect();
    let start = Instant::now();
    let created = generations(write_all(&api, kind, &names, "registry.example/app:1", false).await);
    f.create_seconds = start.elapsed().as_secs_f64();
    let times = seen.wait_all(&created, start, timeout).await;
    f.cold = Spread::of(&times);
    eprintln!("cold start: all {n} converged after {:.1}s", f.cold.all);
    tokio::time::sleep(settle).await;
    let (u1, _) = controller.usage();
    f.cold_cpu = u1.cpu - u0.cpu;
    let (w, mark) = audit(&audit_log, mark);
    f.cold_writes = w;
    let counters1 = controller.own_counters().await;
    f.cold_counters = delta(&counters1, &counters0);
    f.rss_idle_mib = u1.rss_kib as f64 / 1024.0;

    // Idle.
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    // Sampled by the operator every 5 s: the idle time has one from after the cold start.
    f.cache_cold = controller.cache_sizes().await;
    f.plans_per_replica = controller.plans_per_replica().await;
    let (u2, _) = controller.usage();
    f.idle_cpu = u2.cpu - u1.cpu;
    let (w, mark) = audit(&audit_log, mark);
    f.idle_writes = w;
    let counters2 = controller.own_counters().await;

    // Rollout of every tenth object.
    let chosen: Vec<String> = names.iter().step_by(10).cloned().collect();
    f.rollout_n = chosen.len();
    let start = Instant::now();
    let written = write_all(&api, kind, &chosen, "registry.example/app:2", true).await;
    let patched = generations(written.clone());
    let times = seen.wait_all(&patched, start, timeout).await;
    f.rollout = Spread::of(&times);
    eprintln!(
        "rollout: all {} converged after {:.1}s",
        chosen.len(),
        f.rollout.all
    );
    tokio::time::sleep(settle).await;
    let (u3, replica_peak) = controller.usage();
    f.rollout_cpu = u3.cpu - u2.cpu;
    let (w, _) = audit(&audit_log, mark);
    f.rollout_writes = w;
    f.rollout_first_write = Some(Latency::of(first_writes(
        &audit_log,
        mark,
        kind.workload_resource(),
        &written,
    )));
    f.rollout_counters = delta(&controller.own_counters().await, &counters2);
    tokio::time::sleep(Duration::from_secs(6)).await;
    f.cache_rollout = controller.cache_sizes().await;
    f.peak_rss_mib = u3.peak_kib as f64 / 1024.0;
    f.shards = shards();
    f.peak_rss_replica_mib = replica_peak as f64 / 1024.0;
    watch.abort();
    let controller = match controller {
        Controller::Ours(mut ops) if failover_on(kind) && !ops.is_empty() => {
            // Sharded, the first replica's shard moves to a standby; the
            // others keep theirs.
            let leader = ops.remove(0);
            let (terminated, leader) = failover(&ns, &audit_log, leader, false).await;
            let (killed, leader) = failover(&ns, &audit_log, leader, true).await;
            f.failover = vec![terminated, killed];
            ops.insert(0, leader);
            Controller::Ours(ops)
        }
        other => other,
    };
    controller.stop();

    // The floor: the same pods from plain Deployments, no controller of ours.
    if env_or("RP_BENCH_FLOOR", 0) == 1 {
        let ns = cluster::test_namespace(client, "bench-floor").await;
        production_config(client, &ns).await;
        let deployments: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &Kind::Deployment.resource());
        let seen = Seen::default();
        let watch = seen.watch(client, &ns, Kind::Deployment);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let start = Instant::now();
        let created = generations(
            write_all(
                &deployments,
                Kind::Deployment,
                &names,
                "registry.example/app:1",
                false,
            )
            .await,
        );
        let times = seen.wait_all(&created, start, timeout).await;
        eprintln!(
            "floor: all {n} Deployments ready after {:.1}s",
            percentile(&times, 1.0)
        );
        f.floor = Some(Spread::of(&times));
        watch.abort();
    }
    f
}

fn writes_cell(w: &Writes) -> String {
    if w.by_kind.is_empty() {
        return w.total.to_string();
    }
    let kinds: Vec<String> = w.by_kind.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{} ({})", w.total, kinds.join(", "))
}

/// The counters of one metric with one label (`prefix` is the metric's name
/// up to the label's value), each as (label value, value per object).
fn per_plan_by_label<'a>(
    counters: &'a BTreeMap<String, f64>,
    prefix: &'a str,
    objects: usize,
) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    #[allow(clippy::cast_precision_loss)]
    let objects = objects.max(1) as f64;
    counters.iter().filter_map(move |(k, v)| {
        let label = k.strip_prefix(prefix)?.strip_suffix("\"}")?;
        Some((label, v / objects))
    })
}

fn counters_cell(c: &BTreeMap<String, f64>) -> String {
    let v: Vec<String> = c
        .iter()
        .map(|(k, v)| format!("{}: {v}", k.trim_start_matches("releaseplan_")))
        .collect();
    v.join(", ")
}

fn print_table(f: &Figures) {
    let per = |w: &Writes, n: usize| w.total as f64 / n.max(1) as f64;
    println!();
    println!(
        "| {}, N = {}, {} template | value |",
        f.controller, f.n, f.template
    );
    println!("| --- | --- |");
    println!(
        "| cold start, s to first / p50 / p90 / all converged | {} (creating the {} objects took {:.1}) |",
        f.cold.cell(),
        f.n,
        f.create_seconds
    );
    if let Some(floor) = &f.floor {
        println!(
            "| floor: {} plain Deployments, s to first / p50 / p90 / all ready | {} (cold start / floor: {:.2}) |",
            f.n,
            floor.cell(),
            f.cold.all / floor.all.max(0.001)
        );
    }
    println!("| controller CPU, cold start, s | {:.2} |", f.cold_cpu);
    println!(
        "| peak RSS (VmHWM), MiB | {:.1} (after cold start: {:.1}) |",
        f.peak_rss_mib, f.rss_idle_mib
    );
    if f.shards > 1 {
        println!(
            "| shards (one replica each); peak RSS of one replica, MiB | {}; {:.1} |",
            f.shards, f.peak_rss_replica_mib
        );
    }
    println!(
        "| API writes, cold start (audit log, by resource verb) | {} = {:.2} per object |",
        writes_cell(&f.cold_writes),
        per(&f.cold_writes, f.n)
    );
    println!(
        "| 409 conflicts, cold start | {} |",
        f.cold_writes.conflicts
    );
    println!("| Events written, cold start | {} |", f.cold_writes.events);
    if !f.cold_counters.is_empty() {
        println!(
            "| operator /metrics, cold start | {} |",
            counters_cell(&f.cold_counters)
        );
    }
    println!(
        "| idle {} s after the cold start: writes / CPU s | {} / {:.2} |",
        f.idle_seconds,
        writes_cell(&f.idle_writes),
        f.idle_cpu
    );
    println!(
        "| rollout of {} (10%), s to first / p50 / p90 / all converged | {} |",
        f.rollout_n,
        f.rollout.cell()
    );
    println!("| controller CPU, rollout, s | {:.2} |", f.rollout_cpu);
    println!(
        "| API writes, rollout | {} = {:.2} per rolled object |",
        writes_cell(&f.rollout_writes),
        per(&f.rollout_writes, f.rollout_n)
    );
    println!(
        "| 409 conflicts / Events, rollout | {} / {} |",
        f.rollout_writes.conflicts, f.rollout_writes.events
    );
    if let Some(l) = &f.rollout_first_write {
        println!(
            "| rollout: spec patch → first {} write, s p50 / p90 / p99 / max | {} |",
            if f.controller == "releaseplan" {
                "Deployment"
            } else {
                "ReplicaSet"
            },
            l.cell()
        );
    }
    if !f.rollout_counters.is_empty() {
        println!(
            "| operator /metrics, rollout | {} |",
            counters_cell(&f.rollout_counters)
        );
    }
    for (what, cpu, counters) in [
        ("cold start", f.cold_cpu, &f.cold_counters),
        ("rollout", f.rollout_cpu, &f.rollout_counters),
    ] {
        let runs = counters
            .get("releaseplan_reconcile_runs_total")
            .copied()
            .unwrap_or(0.0);
        if runs > 0.0 {
            println!(
                "| controller CPU per reconcile, {what}, ms | {:.2} ({runs} reconciles) |",
                1000.0 * cpu / runs
            );
            let objects = if what == "rollout" { f.rollout_n } else { f.n };
            println!(
                "| reconciles per plan, {what} | {:.1} |",
                runs / objects.max(1) as f64
            );
            let wakes = per_plan_by_label(counters, "releaseplan_wakes_total{source=\"", objects)
                .map(|(source, v)| format!("{source} {v:.1}"))
                .collect::<Vec<_>>();
            if !wakes.is_empty() {
                println!(
                    "| wakes per plan by source, {what} | {} |",
                    wakes.join(", ")
                );
            }
            // Reconciles no change started, by the timer that started them.
            let timed = per_plan_by_label(
                counters,
                "releaseplan_timed_reconciles_total{cause=\"",
                objects,
            )
            .filter(|(_, v)| *v > 0.0)
            .map(|(cause, v)| format!("{cause} {v:.2}"))
            .collect::<Vec<_>>();
            if !timed.is_empty() {
                println!(
                    "| timed reconciles per plan by cause, {what} | {} |",
                    timed.join(", ")
                );
            }
            let mean = |name: &str| {
                let sum = counters.get(&format!("{name}_sum")).copied()?;
                let count = counters.get(&format!("{name}_count")).copied()?;
                (count > 0.0).then(|| 1000.0 * sum / count)
            };
            if let (Some(run), Some(wait)) = (
                mean("releaseplan_reconcile_duration_seconds"),
                mean("releaseplan_reconcile_queue_wait_seconds"),
            ) {
                println!(
                    "| mean reconcile duration / wait for a reconcile, {what}, ms | {run:.1} / {wait:.1} |"
                );
            }
        }
    }
    for (what, sizes) in [
        ("after the cold start", &f.cache_cold),
        ("after the rollout", &f.cache_rollout),
    ] {
        if !sizes.is_empty() {
            let cells: Vec<String> = sizes
                .iter()
                .map(|(r, (n, b))| {
                    format!(
                        "{r}: {n} objects, {:.0} B each, {:.2} MiB",
                        b / n.max(1.0),
                        b / 1048576.0
                    )
                })
                .collect();
            println!(
                "| cached objects, estimated bytes, {what} | {} |",
                cells.join("; ")
            );
        }
    }
    if f.plans_per_replica.len() > 1 {
        let sum: f64 = f.plans_per_replica.iter().sum();
        let each: Vec<String> = f
            .plans_per_replica
            .iter()
            .map(|p| format!("{p:.0}"))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let verdict = if (sum - f.n as f64).abs() < 0.5 {
            "every plan by exactly one replica"
        } else {
            "NOT one replica per plan"
        };
        println!(
            "| plans reconciled per replica, cold start | {} = {sum:.0} of {} ({verdict}) |",
            each.join(" + "),
            f.n
        );
    }
    for fo in &f.failover {
        #[allow(clippy::cast_precision_loss)]
        let plans = if fo.plans > 0.0 { fo.plans } else { f.n as f64 };
        let whose = if f.shards > 1 {
            "to a shard's holder"
        } else {
            "to the leader"
        };
        println!(
            "| failover ({} {whose}, {plans:.0} Stable plans, Lease {:.0} s): s until the standby leads / has reconciled each of them | {:.1} / {:.1} |",
            fo.how, fo.lease_seconds, fo.leads_after, fo.caught_up_after
        );
        println!(
            "| failover ({}): writes of the new leader but the Lease / Lease writes / CPU s / RSS, peak RSS MiB | {} / {} / {:.2} / {:.1}, {:.1} |",
            fo.how,
            writes_cell(&fo.writes),
            fo.lease_writes,
            fo.cpu,
            fo.rss_mib,
            fo.peak_rss_mib
        );
    }
    println!();
}

fn compare(ours: &Figures, argo: &Figures) {
    let ratio = |a: f64, b: f64| {
        if b == 0.0 {
            "n/a".to_string()
        } else {
            format!("{:.2}", a / b)
        }
    };
    let row = |what: &str, a: f64, b: f64, unit: &str| {
        println!("| {what} | {} | {a:.1}{unit} | {b:.1}{unit} |", ratio(a, b));
    };
    let count = |what: &str, a: u64, b: u64| {
        println!("| {what} | {} | {a} | {b} |", ratio(a as f64, b as f64));
    };
    println!();
    println!(
        "| figure, N = {} (ours: {} plans, Argo: {} Rollouts) | ours / Argo | ours | Argo |",
        ours.n, ours.n, argo.n
    );
    println!("| --- | --- | --- | --- |");
    row(
        "cold start, p50 converged",
        ours.cold.p50,
        argo.cold.p50,
        " s",
    );
    row(
        "cold start, all converged",
        ours.cold.all,
        argo.cold.all,
        " s",
    );
    row(
        "controller CPU, cold start",
        ours.cold_cpu,
        argo.cold_cpu,
        " s",
    );
    row("peak RSS", ours.peak_rss_mib, argo.peak_rss_mib, " MiB");
    count(
        "API writes, cold start",
        ours.cold_writes.total,
        argo.cold_writes.total,
    );
    count(
        "API writes, cold start and the idle time after it",
        ours.cold_writes.total + ours.idle_writes.total,
        argo.cold_writes.total + argo.idle_writes.total,
    );
    count(
        "409 conflicts, cold start",
        ours.cold_writes.conflicts,
        argo.cold_writes.conflicts,
    );
    count(
        "Events, cold start and the idle time after it",
        ours.cold_writes.events + ours.idle_writes.events,
        argo.cold_writes.events + argo.idle_writes.events,
    );
    count(
        "writes while idle",
        ours.idle_writes.total,
        argo.idle_writes.total,
    );
    row(
        "rollout of 10%, all converged",
        ours.rollout.all,
        argo.rollout.all,
        " s",
    );
    row(
        "controller CPU, rollout of 10%",
        ours.rollout_cpu,
        argo.rollout_cpu,
        " s",
    );
    count(
        "API writes, rollout of 10%",
        ours.rollout_writes.total,
        argo.rollout_writes.total,
    );
    count(
        "409 conflicts, rollout of 10%",
        ours.rollout_writes.conflicts,
        argo.rollout_writes.conflicts,
    );
    if let (Some(a), Some(b)) = (&ours.rollout_first_write, &argo.rollout_first_write) {
        row(
            "rollout: spec patch → first Deployment (ReplicaSet) write, p99",
            a.p99,
            b.p99,
            " s",
        );
    }
    println!();
}

// ------------------------------------------------------------ the plot

/// One point of the plot: N, replicas, and of one replica its peak RSS (MiB)
/// and its controller CPU seconds at the cold start (the replicas' sum over
/// their number: each shard holds about the same share of the plans).
struct Point {
    n: usize,
    shards: u32,
    rss: f64,
    cpu: f64,
}

impl Point {
    fn of(f: &Figures) -> Point {
        let shards = f.shards.max(1);
        let rss = if f.peak_rss_replica_mib > 0.0 {
            f.peak_rss_replica_mib
        } else {
            f.peak_rss_mib
        };
        Point {
            n: f.n,
            shards,
            rss,
            cpu: f.cold_cpu / f64::from(shards),
        }
    }
}

/// `scale --plot OUT.svg RUN.json...`: per replica peak RSS and cold-start
/// CPU against N, a line for each number of shards, as an SVG (two panels),
/// and the points as a table on stdout.
fn plot(out: &str, runs: &[String]) {
    let mut points: Vec<Point> = runs.iter().map(|r| Point::of(&read_figures(r))).collect();
    points.sort_by_key(|p| (p.shards, p.n));
    println!("| N | shards | peak RSS per replica (MiB) | cold-start CPU per replica (s) |");
    println!("| --- | --- | --- | --- |");
    for p in &points {
        println!("| {} | {} | {:.1} | {:.1} |", p.n, p.shards, p.rss, p.cpu);
    }
    let svg = [
        panel(&points, 0.0, "peak RSS per replica (MiB)", |p| p.rss),
        panel(
            &points,
            470.0,
            "controller CPU per replica, cold start (s)",
            |p| p.cpu,
        ),
    ]
    .concat();
    let text = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"940\" height=\"380\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"940\" height=\"380\" fill=\"white\"/>\n{svg}</svg>\n"
    );
    std::fs::write(out, text).unwrap_or_else(|e| panic!("cannot write {out}: {e}"));
    println!("\nwritten: {out}");
}

/// Colours of the lines, by number of shards.
fn colour(shards: u32) -> &'static str {
    match shards {
        1 => "#1f77b4",
        2 => "#ff7f0e",
        4 => "#2ca02c",
        _ => "#7f7f7f",
    }
}

/// One panel at x offset `dx`: axes from 0 to the largest N and value, a
/// polyline with dots for each number of shards, and a legend.
#[allow(clippy::cast_precision_loss)]
fn panel(points: &[Point], dx: f64, title: &str, value: impl Fn(&Point) -> f64) -> String {
    let (left, top, width, height) = (dx + 60.0, 40.0, 380.0, 280.0);
    let max_n = points.iter().map(|p| p.n).max().unwrap_or(1) as f64;
    let max_v = points.iter().map(&value).fold(0.0_f64, f64::max).max(1.0) * 1.1;
    let x = |n: usize| left + n as f64 / max_n * width;
    let y = |v: f64| top + height - v / max_v * height;
    let mut s = format!(
        "<text x=\"{}\" y=\"20\" font-weight=\"bold\">{title}</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">plans (N)</text>\n",
        left,
        top + height,
        left + width,
        top + height,
        top + height,
        left + width / 2.0,
        top + height + 34.0
    );
    for i in 0..=4 {
        let v = max_v * f64::from(i) / 4.0;
        let n = (max_n * f64::from(i) / 4.0).round();
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v:.0}</text>\n\
             <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{n}</text>\n",
            left - 6.0,
            y(v) + 4.0,
            y(v),
            left + width,
            y(v),
            left + width * f64::from(i) / 4.0,
            top + height + 16.0
        );
    }
    let mut shards: Vec<u32> = points.iter().map(|p| p.shards).collect();
    shards.dedup();
    for (row, k) in shards.iter().enumerate() {
        let line: Vec<&Point> = points.iter().filter(|p| p.shards == *k).collect();
        let path: Vec<String> = line
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.n), y(value(p))))
            .collect();
        let c = colour(*k);
        s += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>\n",
            path.join(" ")
        );
        for p in &line {
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{c}\"/>\n",
                x(p.n),
                y(value(p))
            );
        }
        let ly = top + 14.0 + 16.0 * row as f64;
        s += &format!(
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{c}\"/>\
             <text x=\"{}\" y=\"{}\">{k} shard{}</text>\n",
            left + 10.0,
            ly - 4.0,
            left + 28.0,
            ly,
            if *k == 1 { "" } else { "s" }
        );
    }
    s
}

fn read_figures(path: &str) -> Figures {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not a scale result: {e}"))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--compare") {
        let (Some(ours), Some(argo)) = (args.get(i + 1), args.get(i + 2)) else {
            panic!("usage: scale --compare OURS.json ARGO.json");
        };
        compare(&read_figures(ours), &read_figures(argo));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--plot") {
        let (Some(out), runs) = (args.get(i + 1), &args[(i + 2).min(args.len())..]) else {
            panic!("usage: scale --plot OUT.svg RUN.json...");
        };
        assert!(!runs.is_empty(), "usage: scale --plot OUT.svg RUN.json...");
        plot(out, runs);
        return;
    }
    // `cargo test --all-targets` also builds and runs benches without `--bench`.
    if !args.iter().any(|a| a == "--bench") {
        println!("scale benchmark: run with `make bench-scale` or `make bench-compare`");
        return;
    }
    let n: usize = env_or("RP_BENCH_N", 500);
    let kind = match std::env::var("RP_BENCH_CONTROLLER").as_deref() {
        Ok("argo") => Kind::Rollout,
        Ok("releaseplan") | Err(_) => Kind::ReleasePlan,
        Ok(other) => panic!("RP_BENCH_CONTROLLER must be releaseplan or argo, not {other}"),
    };
    let client = cluster::client().await;
    if kind == Kind::ReleasePlan {
        crd::install(&client).await;
    } else {
        let crds = env_path("RP_ARGO_CRDS");
        let ok = Command::new("kubectl")
            .args(["apply", "--server-side", "-f", &crds])
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("kubectl")
                .args([
                    "wait",
                    "--for",
                    "condition=established",
                    "--timeout",
                    "60s",
                    "crd",
                    "--all",
                ])
                .status()
                .is_ok_and(|s| s.success());
        assert!(ok, "cannot install the Argo Rollouts CRDs of {crds}");
    }
    let f = run(&client, kind, n).await;
    print_table(&f);
    if let Ok(path) = std::env::var("RP_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&f).unwrap()).unwrap();
        println!("figures written to {path}");
    }
}
