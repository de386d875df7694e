//! GPU nodes and model servers, for the model-server tests.
//!
//! - [`GpuNodes`]: kwok nodes that advertise `nvidia.com/gpu`, so the real
//!   kube-scheduler fits GPU pods to them and leaves the rest Pending, as on
//!   a cluster whose GPUs are all taken. Each carries a taint of its test's
//!   own (no other test's pods land there) and, when asked, a pod CIDR on
//!   loopback, so kwok gives its pods addresses in 127.0.0.0/8.
//! - [`ModelServers`]: plays the kubelet's part for those pods: for each pod
//!   running with a loopback IP it starts a stand-in vLLM server
//!   (`e2e/model-server.py`) on the pod's IP, configured by the container's
//!   env (`MODEL`, `VERSION`, `LOAD_SECONDS`, `TTFT_MS`, `ERROR_RATE`), and
//!   stops it when the pod goes. The operator's serving check and a real
//!   Prometheus reach "the pod" at its own address, as in a cluster; every
//!   address is on 127.0.0.0/8.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The port the stand-ins serve on (vLLM's default).
pub const PORT: u16 = 8000;
/// The extended resource the nodes advertise.
pub const GPU: &str = "nvidia.com/gpu";

/// The test's GPU nodes, deleted when dropped.
pub struct GpuNodes {
    /// Their names.
    pub names: Vec<String>,
}

impl GpuNodes {
    /// `count` nodes with `gpus` GPUs each, tainted and labelled for the
    /// namespace `ns`. With `loopback` = `Some(k)`, node `i` has the pod
    /// CIDR `127.k.i.0/24` (pick `k` unique among the tests).
    pub async fn add(
        client: &Client,
        ns: &str,
        count: usize,
        gpus: u32,
        loopback: Option<u8>,
    ) -> GpuNodes {
        let api = Api::<Node>::all(client.clone());
        let mut names = Vec::new();
        for i in 0..count {
            let name = format!("kwok-gpu-{ns}-{i}");
            let mut spec = json!({
                "taints": [{"key": "releaseplan.io/test", "value": ns, "effect": "NoSchedule"}]
            });
            if let Some(k) = loopback {
                spec["podCIDR"] = json!(format!("127.{k}.{i}.0/24"));
                spec["podCIDRs"] = json!([format!("127.{k}.{i}.0/24")]);
            }
            let node: Node = serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "type": "kwok-test", "releaseplan.io/test-gpu": ns
                    }
                },
                "spec": spec,
                "status": {
                    "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "50", GPU: gpus.to_string()},
                    "capacity": {"cpu": "32", "memory": "128Gi", "pods": "50", GPU: gpus.to_string()}
                }
            }))
            .unwrap();
            api.create(&PostParams::default(), &node).await.unwrap();
            names.push(name);
        }
        GpuNodes { names }
    }
}

impl Drop for GpuNodes {
    /// Deleted with a client of its own: the test's runtime is blocked here.
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.names);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = super::cluster::client().await;
                let api = Api::<Node>::all(client);
                for n in names {
                    let _ = api.delete(&n, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}

/// A pod template of a model server on the namespace's GPU nodes: one GPU
/// per pod, the stand-in's settings as container env.
pub fn model_server_template(ns: &str, image: &str, env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    json!({
        "metadata": {"labels": {"app": "llama"}},
        "spec": {
            "nodeSelector": {"releaseplan.io/test-gpu": ns},
            "tolerations": [{"key": "releaseplan.io/test", "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
            "containers": [{
                "name": "vllm", "image": image, "env": env,
                "ports": [{"name": "http", "containerPort": PORT}],
                "resources": {"limits": {GPU: "1"}}
            }]
        }
    })
}

/// One running stand-in.
struct Server {
    child: Child,
    /// Its standard error.
    log: PathBuf,
    ip: String,
    pod: String,
    revision: String,
}

/// The stand-in model servers of a namespace's pods (see the module docs).
pub struct ModelServers {
    task: JoinHandle<()>,
    servers: Arc<Mutex<BTreeMap<String, Server>>>,
}

impl ModelServers {
    /// Follows the pods of `ns` (a watch); with `targets`, keeps a
    /// Prometheus file_sd list there: each server with the labels
    /// `namespace`, `pod` and `revision` (the pod's `releaseplan.io/revision`),
    /// as a cluster's relabelling would give them.
    pub fn start(client: &Client, ns: &str, targets: Option<PathBuf>) -> ModelServers {
        let servers: Arc<Mutex<BTreeMap<String, Server>>> = Arc::default();
        if let Some(t) = &targets {
            std::fs::write(t, "[]").unwrap();
        }
        let task = tokio::spawn({
            let api = Api::<Pod>::namespaced(client.clone(), ns);
            let servers = Arc::clone(&servers);
            let ns = ns.to_string();
            async move {
                // A watch, not a poll: a pod's server stops the moment its
                // pod is deleted, before kwok can hand its IP to a new pod
                // (as a pod's network goes with it in a cluster).
                let (store, writer) = reflector::store::<Pod>();
                let mut events = std::pin::pin!(
                    watcher(api, watcher::Config::default())
                        .default_backoff()
                        .reflect(writer)
                );
                // Also once a second: a stand-in that exited is started again
                // (and said), not left as a target nothing answers.
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tokio::select! {
                        ev = events.next() => match ev {
                            None => break,
                            Some(Err(_)) => continue,
                            Some(Ok(_)) => {}
                        },
                        _ = tick.tick() => {}
                    }
                    let pods: Vec<Pod> = store.state().iter().map(|p| (**p).clone()).collect();
                    let changed = sync(&ns, &pods, &servers);
                    if changed && let Some(t) = &targets {
                        write_targets(&ns, t, &servers);
                    }
                }
            }
        });
        ModelServers { task, servers }
    }

    /// The pods with a stand-in, by name: their IP.
    pub fn running(&self) -> BTreeMap<String, String> {
        self.servers
            .lock()
            .unwrap()
            .values()
            .map(|s| (s.pod.clone(), s.ip.clone()))
            .collect()
    }
}

impl Drop for ModelServers {
    fn drop(&mut self) {
        self.task.abort();
        for (_, mut s) in std::mem::take(&mut *self.servers.lock().unwrap()) {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// Starts a stand-in for each running loopback pod without one, stops those
/// whose pod is gone or terminating. Returns whether anything changed.
fn sync(ns: &str, pods: &[Pod], servers: &Mutex<BTreeMap<String, Server>>) -> bool {
    let mut servers = servers.lock().unwrap();
    let mut want = BTreeMap::new();
    for p in pods {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if let Some(ip) = ip.filter(|ip| ip.starts_with("127."))
            && running
            && p.metadata.deletion_timestamp.is_none()
        {
            want.insert(p.uid().unwrap_or_default(), (p, ip));
        }
    }
    let before = servers.len();
    // A stand-in that exited (it could not bind its address, or crashed):
    // dropped, so the next sync starts it again, and said, with its output.
    let exited: Vec<String> = servers
        .iter_mut()
        .filter_map(|(uid, s)| matches!(s.child.try_wait(), Ok(Some(_))).then(|| uid.clone()))
        .collect();
    for uid in &exited {
        if let Some(s) = servers.remove(uid) {
            let out = std::fs::read_to_string(&s.log).unwrap_or_default();
            let tail: Vec<&str> = out.lines().rev().take(5).collect();
            eprintln!(
                "model server of {ns}/{} on {} exited: {}",
                s.pod,
                s.ip,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
    }
    let gone: Vec<String> = servers
        .keys()
        .filter(|uid| !want.contains_key(*uid))
        .cloned()
        .collect();
    for uid in &gone {
        if let Some(mut s) = servers.remove(uid) {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
    let mut started = false;
    for (uid, (p, ip)) in want {
        if servers.contains_key(&uid) {
            continue;
        }
        let get = |k: &str, d: &str| env_of(p, k).unwrap_or_else(|| d.to_string());
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/model-server.py");
        let log = std::env::temp_dir().join(format!("model-server-{ns}-{uid}.log"));
        let child = Command::new("python3")
            .arg(script)
            .args(["--listen", &format!("{ip}:{PORT}")])
            .args(["--model", &get("MODEL", "llama")])
            .args(["--version", &get("VERSION", "0")])
            .args(["--load-seconds", &get("LOAD_SECONDS", "0")])
            .args(["--ttft-ms", &get("TTFT_MS", "80")])
            .args(["--error-rate", &get("ERROR_RATE", "0")])
            .args(["--rps", &get("RPS", "10")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(&log)
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn();
        match child {
            Ok(child) => {
                servers.insert(
                    uid,
                    Server {
                        child,
                        log,
                        ip,
                        pod: p.name_any(),
                        revision: p
                            .labels()
                            .get("releaseplan.io/revision")
                            .cloned()
                            .unwrap_or_default(),
                    },
                );
                started = true;
            }
            Err(e) => eprintln!("cannot start a model server for {ns}/{}: {e}", p.name_any()),
        }
    }
    started || servers.len() != before
}

fn write_targets(ns: &str, path: &PathBuf, servers: &Mutex<BTreeMap<String, Server>>) {
    let list: Vec<Value> = servers
        .lock()
        .unwrap()
        .values()
        .map(|s| {
            json!({
                "targets": [format!("{}:{PORT}", s.ip)],
                "labels": {"namespace": ns, "pod": s.pod, "revision": s.revision}
            })
        })
        .collect();
    // Written whole, then renamed: Prometheus never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&list).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
