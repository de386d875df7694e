//! Runs the real operator binary against the test cluster, one process per
//! test namespace, and reads what it did. Use with `mod operator;`.
#![allow(dead_code)]

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{LABEL_PLAN, Phase, ReleasePlan};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running operator process; killed when dropped.
pub struct Operator {
    child: Option<Child>,
    /// Port of its /metrics server.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

impl Operator {
    /// Starts the operator watching `namespace`, with extra flags, and waits for /readyz.
    pub async fn start(namespace: &str, extra: &[&str]) -> Operator {
        Operator::start_with_env(namespace, extra, &[]).await
    }

    /// The operator's metrics text.
    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        match reqwest::get(&url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Sum of a counter family in the metrics (all label sets).
    pub async fn counter(&self, name: &str) -> f64 {
        sum_metric(&self.metrics().await, name)
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    /// SIGKILL: the process dies mid-work.
    pub fn kill(&mut self) {
        self.signal("KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits (bounded) for the process to exit.
    pub async fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.signal("TERM");
        let mut c = self.child.take()?;
        for _ in 0..100 {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = c.kill();
        c.wait().ok()
    }

    /// The log so far, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sum of every sample of a metric family in OpenMetrics text.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A pod template running `image`.
pub fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

/// A pod template running `image` with a kwok fault annotation.
pub fn faulty_template(image: &str, fault: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "shop"}, "annotations": {"kwok.releaseplan.io/fault": fault}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

/// A ReleasePlan object.
pub fn plan(name: &str, spec: Value) -> ReleasePlan {
    serde_json::from_value(json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": "ReleasePlan",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("ReleasePlan object")
}

/// Creates a plan.
pub async fn create(client: &Client, ns: &str, p: &ReleasePlan) {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), p)
        .await
        .expect("cannot create the ReleasePlan");
}

/// Merge-patches a plan's spec (as a user or GitOps tool would).
pub async fn patch_spec(client: &Client, ns: &str, name: &str, spec: Value) {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("cannot patch the ReleasePlan");
}

/// Sets the component list of a plan (a JSON merge patch replaces lists whole).
pub async fn set_components(client: &Client, ns: &str, name: &str, components: Value) {
    patch_spec(client, ns, name, json!({ "components": components })).await;
}

/// Asks for an action through the request annotation, as the plugin does.
pub async fn request(client: &Client, ns: &str, name: &str, action: &str) {
    let id = format!(
        "{action}/{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"releaseplan.io/request": id}}})),
        )
        .await
        .expect("cannot annotate the ReleasePlan");
}

/// The plan as stored.
pub async fn get(client: &Client, ns: &str, name: &str) -> Option<ReleasePlan> {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("cannot read the ReleasePlan")
}

/// Waits until the plan is in `phase` with its current generation observed.
pub async fn wait_phase(
    client: &Client,
    ns: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> ReleasePlan {
    crate::common::wait_until(
        timeout,
        &format!("plan {ns}/{name} to be {phase}"),
        || async {
            let p = get(client, ns, name).await?;
            let s = p.status.as_ref()?;
            (s.phase == phase && s.observed_generation == p.metadata.generation)
                .then_some(p.clone())
        },
    )
    .await
}

/// Revision Deployments of a plan: name -> (spec replicas, ready replicas, image).
pub async fn revisions(
    client: &Client,
    ns: &str,
    plan: &str,
) -> BTreeMap<String, (i32, i32, String)> {
    let list = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={plan}")))
        .await
        .expect("cannot list Deployments");
    list.items
        .into_iter()
        .map(|d| {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            (d.name_any(), (replicas, ready, image))
        })
        .collect()
}

/// The revision Deployment running `image`: (replicas, ready).
pub fn by_image(revs: &BTreeMap<String, (i32, i32, String)>, image: &str) -> Option<(i32, i32)> {
    revs.values()
        .find(|(_, _, i)| i == image)
        .map(|(r, ready, _)| (*r, *ready))
}

impl Operator {
    /// Like [`Operator::start`], with extra environment variables for the
    /// process (set after the inherited ones, so `KUBECONFIG` can point it at
    /// another identity than the tests' own).
    pub async fn start_with_env(
        namespace: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Operator {
        let port = free_port();
        let dir = std::env::temp_dir().join("releaseplan-tests");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("operator-{namespace}-{port}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_releaseplan"))
            .arg("--namespace")
            .arg(namespace)
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "info,releaseplan=debug")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("cannot start the operator binary");
        let mut op = Operator {
            child: Some(child),
            port,
            log,
        };
        // Fails at once, with the log, when the process exits instead.
        let url = format!("http://127.0.0.1:{port}/readyz");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(Ok(Some(status))) = op.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "the operator exited ({status}) before /readyz:\n{}",
                    op.log_text()
                );
            }
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return op;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after 30s waiting for the operator's /readyz:\n{}",
                op.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Creates a plan and waits until its first release is Stable.
pub async fn create_stable(client: &Client, ns: &str, name: &str, spec: Value) -> ReleasePlan {
    create(client, ns, &plan(name, spec)).await;
    wait_phase(client, ns, name, Phase::Stable, Duration::from_secs(120)).await
}
