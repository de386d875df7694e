//! What our users' tools say about a ReleasePlan, by running their own code on
//! live plans: kstatus (Flux, kpt, `kubectl wait`-like tools), Argo CD's
//! resource health Lua (integrations/argocd/health.lua in gopher-lua) and
//! Flux's `healthCheckExprs` (integrations/flux/health-check.yaml in cel-go).
//! The three run in `rp-health` (e2e/health), built by
//! `e2e/build-control-plane.sh consumers`. Each state is reached on the local
//! control plane with the real operator; the matrix it builds must be the
//! table "What each consumer sees" of docs/api.md (the test fails otherwise,
//! and `RP_BLESS=1` writes it there). Argo CD's resource actions
//! (integrations/argocd/actions) run the same way: discovery on every state,
//! each action's merge patch applied to a live plan.

use crate::support;

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use releaseplan::api::{Phase, ReleasePlan, ReleasePlanStatus};
use releaseplan::plan::Action;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::fixtures::{faulty_template, plan, refused_template, template, web_with as web};
use support::operator::Operator;
use support::plans::{
    condition, create, create_stable, get, patch_spec, request, set_components, wait_phase,
};
use support::{WAIT, cluster, crd, wait_until};

/// The built rp-health: `RP_HEALTH` (set by the cluster's env file), else
/// where `e2e/build-control-plane.sh consumers` puts it.
fn rp_health() -> PathBuf {
    let path = if let Some(p) = std::env::var_os("RP_HEALTH").filter(|v| !v.is_empty()) {
        PathBuf::from(p)
    } else {
        let versions = std::fs::read_to_string(cluster::repo_root().join("e2e/versions.env"))
            .expect("e2e/versions.env");
        let version = versions
            .lines()
            .find_map(|l| l.strip_prefix("RP_HEALTH_VERSION="))
            .expect("RP_HEALTH_VERSION in e2e/versions.env")
            .trim()
            .to_string();
        let cache = std::env::var_os("RP_CACHE").map_or_else(
            || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/releaseplan"),
            PathBuf::from,
        );
        cache.join(format!("rp-health-v{version}/bin/rp-health"))
    };
    assert!(
        path.is_file(),
        "rp-health not found at {} (RP_HEALTH or the cache): build it with \
         `e2e/build-control-plane.sh consumers` (make test does)",
        path.display()
    );
    path
}

/// One consumer's answer: (status, message).
type Answer = (String, String);

#[derive(Debug)]
struct Seen {
    kstatus: Answer,
    argocd: Answer,
    flux: Answer,
    /// Exit code of `kubectl releaseplan wait --timeout 1s` (4: still waiting).
    wait: i32,
    /// Exit code of `kubectl wait --for=condition=Ready --timeout=1s`.
    ready: i32,
    /// The Argo CD actions discovery.lua offers (not greyed out).
    actions: BTreeSet<String>,
}

const ACTIONS: &str = "integrations/argocd/actions";

fn answer(v: &Value, who: &str) -> Answer {
    let a = &v[who];
    (
        a["status"].as_str().unwrap_or("<none>").to_string(),
        a["message"].as_str().unwrap_or("").to_string(),
    )
}

/// Plans untyped: read and patched exactly as the API server has them, as
/// the consumers see them (no typed round trip).
fn dynamic_plans(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("releaseplan.io", "v1alpha1", "ReleasePlan");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "releaseplans");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The plan exactly as the API server returns it.
async fn live(client: &Client, ns: &str, name: &str) -> Value {
    let plan = dynamic_plans(client, ns).get(name).await;
    serde_json::to_value(plan.expect("cannot read the plan")).unwrap()
}

/// `text` with every non-blank line indented by `by`, as YAML block scalars
/// carry it.
fn indent(text: &str, by: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                "\n".to_string()
            } else {
                format!("{by}{l}\n")
            }
        })
        .collect()
}

/// Runs rp-health with `args` on `obj` (its stdin); its JSON answer, or its
/// stderr when it fails.
fn run_rp_health(bin: &Path, args: &[&OsStr], obj: &Value) -> Result<Value, String> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run rp-health");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(obj.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("rp-health prints JSON"))
}

/// Runs every consumer on the live plan `name`.
async fn seen(client: &Client, ns: &str, name: &str) -> Seen {
    let obj = live(client, ns, name).await;
    let root = cluster::repo_root();
    let bin = rp_health();
    let (ns2, name2) = (ns.to_string(), name.to_string());
    tokio::task::spawn_blocking(move || {
        let health = root.join("integrations/argocd/health.lua");
        let cel = root.join("integrations/flux/health-check.yaml");
        let discovery = root.join(ACTIONS).join("discovery.lua");
        let args = [
            "-lua".as_ref(),
            health.as_os_str(),
            "-cel".as_ref(),
            cel.as_os_str(),
            "-discovery".as_ref(),
            discovery.as_os_str(),
        ];
        let v = run_rp_health(&bin, &args, &obj).expect("rp-health failed");
        let wait = Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(["wait", &name2, "-n", &ns2, "--timeout", "1s"])
            .output()
            .expect("cannot run kubectl-releaseplan")
            .status
            .code()
            .unwrap_or(-1);
        let ready = Command::new(root.join("e2e/kubectl.sh"))
            .args([
                "wait",
                "--for=condition=Ready",
                &format!("releaseplan/{name2}"),
                "-n",
                &ns2,
                "--timeout=1s",
            ])
            .output()
            .expect("cannot run kubectl")
            .status
            .code()
            .unwrap_or(-1);
        let actions = v["actions"]
            .as_object()
            .expect("rp-health prints the discovered actions")
            .iter()
            .filter(|(_, a)| a["disabled"] != json!(true))
            .map(|(n, _)| n.clone())
            .collect();
        Seen {
            kstatus: answer(&v, "kstatus"),
            argocd: answer(&v, "argocd"),
            flux: answer(&v, "flux"),
            wait,
            ready,
            actions,
        }
    })
    .await
    .unwrap()
}

/// Waits until condition `type_` of the plan's current generation is
/// True with `reason`.
async fn wait_condition(client: &Client, ns: &str, name: &str, type_: &str, reason: &str) {
    wait_until(
        WAIT,
        &format!("{name}: {type_}=True ({reason})"),
        || async {
            let p = get(client, ns, name).await?;
            let observed = p.status.as_ref()?.observed_generation == p.metadata.generation;
            (observed && condition(&p, type_).is_some_and(|c| c.0 == "True" && c.1 == reason))
                .then_some(())
        },
    )
    .await;
}

/// The actions the operator would act on for this status: the core's own
/// rule (`Action::applies_in`), with pause offered only when no pause is
/// requested and resume only when one is.
fn applicable(status: &ReleasePlanStatus) -> BTreeSet<String> {
    Action::ALL
        .into_iter()
        .filter(|a| a.applies_in(status).is_ok())
        .filter(|a| match a {
            Action::Pause => !status.pause_requested,
            Action::Resume => status.pause_requested,
            _ => true,
        })
        .map(|a| a.word().to_string())
        .collect()
}

/// A step that holds a rollout at 50% for longer than the test.
fn long_steps() -> Value {
    json!([{"setWeight": 50}, {"pause": {"duration": "1h"}}])
}

struct Matrix {
    rows: Vec<(&'static str, Seen)>,
}

impl Matrix {
    /// Records what the consumers say about `name` as `state`, and checks it
    /// against the expected (kstatus, argocd, flux) statuses and `wait` exit.
    async fn check(
        &mut self,
        client: &Client,
        ns: &str,
        name: &str,
        state: &'static str,
        want: (&str, &str, &str, i32, i32),
    ) {
        let s = seen(client, ns, name).await;
        println!("{state}: {s:?}");
        // Argo CD offers what the operator would act on (read after the
        // consumers: the status cannot have moved on in a held state).
        let p = get(client, ns, name).await.expect("the plan");
        let status = p.status.clone().unwrap_or_default();
        let want_actions = if p.metadata.deletion_timestamp.is_some() {
            s.actions.clone()
        } else {
            applicable(&status)
        };
        self.rows.push((state, s));
        let s = &self.rows.last().unwrap().1;
        let got = (
            s.kstatus.0.as_str(),
            s.argocd.0.as_str(),
            s.flux.0.as_str(),
            s.wait,
            s.ready,
        );
        assert_eq!(
            got, want,
            "{state}: (kstatus, argocd, flux, releaseplan wait exit, kubectl wait Ready exit) of {s:?}"
        );
        assert_eq!(
            s.actions, want_actions,
            "{state}: Argo CD's discovery.lua and the operator's Action::applies_in differ"
        );
    }

    /// The table of docs/api.md.
    fn table(&self) -> String {
        let mut t = String::from(
            "| state | kstatus | Argo CD | Argo CD actions | Flux CEL | `releaseplan wait` | `kubectl wait` Ready |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for (state, s) in &self.rows {
            let actions = if s.actions.is_empty() {
                "none".to_string()
            } else {
                s.actions.iter().cloned().collect::<Vec<_>>().join(", ")
            };
            t.push_str(&format!(
                "| {state} | {} | {} | {actions} | {} | {} | {} |\n",
                s.kstatus.0, s.argocd.0, s.flux.0, s.wait, s.ready
            ));
        }
        t
    }
}

const BEGIN: &str = "<!-- consumers matrix: written by tests/it/consumers.rs (RP_BLESS=1) -->\n";
const END: &str = "<!-- end of consumers matrix -->\n";

/// docs/api.md must show `table` between the markers; `RP_BLESS=1` writes it.
fn check_docs_table(table: &str) {
    let path = cluster::repo_root().join("docs/api.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let start = docs
        .find(BEGIN)
        .expect("docs/api.md has the matrix begin marker")
        + BEGIN.len();
    let end = start
        + docs[start..]
            .find(END)
            .expect("docs/api.md has the matrix end marker");
    if docs[start..end] == *table {
        return;
    }
    if std::env::var_os("RP_BLESS").is_some() {
        std::fs::write(&path, format!("{}{table}{}", &docs[..start], &docs[end..])).unwrap();
        return;
    }
    panic!(
        "docs/api.md's consumer matrix differs from what the consumers said; \
         rerun with RP_BLESS=1 to write it, and review the diff.\nnow:\n{table}\ndocs:\n{}",
        &docs[start..end]
    );
}

#[tokio::test]
async fn each_consumer_reads_each_state_of_a_live_plan() {
    rp_health();
    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "consumers").await;
    let mut m = Matrix { rows: Vec::new() };

    // Created while the operator is down: no status at all.
    let one = json!({"components": [web(template("shop:1"), 2)]});
    create(&client, &ns, &plan("fresh", one.clone())).await;
    m.check(
        &client,
        &ns,
        "fresh",
        "created, operator down (status defaulted, `observedGeneration` 0)",
        ("InProgress", "Progressing", "InProgress", 4, 1),
    )
    .await;

    let op = Operator::start(&ns, &[]).await;
    wait_phase(&client, &ns, "fresh", Phase::Stable, WAIT).await;
    m.check(
        &client,
        &ns,
        "fresh",
        "first release done (`Stable`)",
        ("Current", "Healthy", "Current", 0, 0),
    )
    .await;

    // Rolling out, held at 50% by a timed pause.
    let steps =
        |s: Value| json!({"components": [web(template("shop:1"), 2)], "strategy": {"steps": s}});
    create_stable(&client, &ns, "roll", steps(long_steps())).await;
    set_components(&client, &ns, "roll", json!([web(template("shop:2"), 2)])).await;
    wait_phase(&client, &ns, "roll", Phase::RollingOut, WAIT).await;
    m.check(
        &client,
        &ns,
        "roll",
        "`RollingOut`",
        ("InProgress", "Progressing", "InProgress", 4, 1),
    )
    .await;

    request(&client, &ns, "roll", "pause").await;
    wait_condition(&client, &ns, "roll", "Paused", "PauseRequested").await;
    m.check(
        &client,
        &ns,
        "roll",
        "paused by request (`Paused` `PauseRequested`)",
        ("InProgress", "Suspended", "InProgress", 4, 1),
    )
    .await;

    // Waiting at `pause: {}` for promotion, then also spec.paused.
    create_stable(
        &client,
        &ns,
        "step",
        steps(json!([{"setWeight": 50}, {"pause": {}}])),
    )
    .await;
    set_components(&client, &ns, "step", json!([web(template("shop:2"), 2)])).await;
    wait_condition(&client, &ns, "step", "Paused", "PauseStep").await;
    m.check(
        &client,
        &ns,
        "step",
        "waiting at `pause: {}` (`Paused` `PauseStep`)",
        ("InProgress", "Suspended", "InProgress", 4, 1),
    )
    .await;
    patch_spec(&client, &ns, "step", json!({"paused": true})).await;
    wait_condition(&client, &ns, "step", "Paused", "SpecPaused").await;
    m.check(
        &client,
        &ns,
        "step",
        "`spec.paused` (`Paused` `SpecPaused`)",
        ("InProgress", "Suspended", "InProgress", 4, 1),
    )
    .await;

    // Paused on a gate past its inconclusiveLimit: a webhook that answers
    // Inconclusive, none tolerated. A human promotes, retries or aborts.
    let unsure = support::servers::serve(axum::Router::new().route(
        "/unsure",
        axum::routing::post(|| async {
            axum::Json(json!({"verdict": "Inconclusive", "reason": "no traffic yet"}))
        }),
    ))
    .await;
    create_stable(&client, &ns, "unsure", steps(long_steps())).await;
    let hooks = json!([{"name": "smoke", "url": format!("http://{unsure}/unsure"),
        "timeoutSeconds": 2, "retries": 0, "inconclusiveLimit": 0}]);
    patch_spec(
        &client,
        &ns,
        "unsure",
        json!({"components": [web(template("shop:2"), 2)], "health": {"webhooks": hooks}}),
    )
    .await;
    wait_condition(&client, &ns, "unsure", "Paused", "GateInconclusive").await;
    m.check(
        &client,
        &ns,
        "unsure",
        "paused on an inconclusive gate (`Paused` `GateInconclusive`)",
        ("InProgress", "Suspended", "InProgress", 4, 1),
    )
    .await;

    // Halted: a check fails with automatic rollback off.
    let halt = json!({"components": [web(template("shop:1"), 2)], "strategy": {"steps": long_steps()},
        "rollback": {"automatic": false}});
    create_stable(&client, &ns, "halt", halt).await;
    set_components(
        &client,
        &ns,
        "halt",
        json!([web(faulty_template("shop:2", "crash-loop"), 2)]),
    )
    .await;
    wait_condition(&client, &ns, "halt", "Stalled", "RolloutHalted").await;
    m.check(
        &client,
        &ns,
        "halt",
        "halted (`Stalled` `RolloutHalted`)",
        ("Failed", "Degraded", "Failed", 3, 1),
    )
    .await;
    // The per-plan metric names the halted plan (the phase alone says RollingOut).
    let halted_series = format!(
        "releaseplan_plan_info{{namespace=\"{ns}\",plan=\"halt\",phase=\"RollingOut\",halted=\"true\"}} 1"
    );
    wait_until(WAIT, "the halted plan's info series", || async {
        op.metrics().await.contains(&halted_series).then_some(())
    })
    .await;

    // Refused by the API server.
    create(
        &client,
        &ns,
        &plan(
            "refused",
            json!({"components": [web(refused_template(), 2)]}),
        ),
    )
    .await;
    wait_condition(&client, &ns, "refused", "Stalled", "DeploymentRefused").await;
    m.check(
        &client,
        &ns,
        "refused",
        "Deployment refused (`Stalled` `DeploymentRefused`)",
        ("Failed", "Degraded", "Failed", 3, 1),
    )
    .await;

    // An invalid spec the CRD's rules cannot see: a gate interval of more
    // than the ten years the operator accepts.
    let invalid = json!({"components": [web(template("shop:1"), 2)],
        "health": {"prometheus": [{"name": "errors", "address": "http://127.0.0.1:9",
            "query": "up", "threshold": "< 1", "interval": "9999999h"}]}});
    create(&client, &ns, &plan("invalid", invalid)).await;
    wait_condition(&client, &ns, "invalid", "Stalled", "InvalidSpec").await;
    m.check(
        &client,
        &ns,
        "invalid",
        "invalid spec (`Stalled` `InvalidSpec`)",
        ("Failed", "Degraded", "Failed", 3, 1),
    )
    .await;

    // A rollback that cannot finish: a pod quota stops the stable revision
    // from scaling back up. RollbackInProgress, then RollbackSlow past the
    // progress deadline, then RolledBack once the quota goes.
    let slow = json!({"components": [web(template("shop:1"), 2)], "strategy": {"steps": long_steps()},
        "health": {"progressDeadlineSeconds": 15}});
    create_stable(&client, &ns, "back", slow).await;
    set_components(&client, &ns, "back", json!([web(template("shop:2"), 2)])).await;
    wait_until(WAIT, "back: both revisions at 50% ready", || async {
        let p = get(&client, &ns, "back").await?;
        let s = p.status.as_ref()?;
        let c = s.components.first()?;
        (s.phase == Phase::RollingOut && c.current_ready == 1 && c.stable_ready == 1).then_some(())
    })
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-more-pods"},
        "spec": {"hard": {"pods": pods.to_string()}}
    }))
    .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // The quota controller must have counted the pods before the abort.
    wait_until(WAIT, "the pod quota to be counted", || async {
        let q = quotas.get("no-more-pods").await.ok()?;
        q.status?.used?.get("pods").map(|_| ())
    })
    .await;
    request(&client, &ns, "back", "abort").await;
    wait_phase(&client, &ns, "back", Phase::RollbackInProgress, WAIT).await;
    m.check(
        &client,
        &ns,
        "back",
        "`RollbackInProgress`",
        ("InProgress", "Progressing", "InProgress", 4, 1),
    )
    .await;
    wait_condition(&client, &ns, "back", "Stalled", "RollbackSlow").await;
    m.check(
        &client,
        &ns,
        "back",
        "rollback too slow (`Stalled` `RollbackSlow`)",
        ("Failed", "Degraded", "Failed", 3, 1),
    )
    .await;
    quotas
        .delete("no-more-pods", &DeleteParams::default())
        .await
        .unwrap();
    wait_phase(&client, &ns, "back", Phase::RolledBack, WAIT).await;
    m.check(
        &client,
        &ns,
        "back",
        "`RolledBack`",
        ("Failed", "Degraded", "Failed", 2, 1),
    )
    .await;

    // Held by the administrator's GatePolicy (issue #50): a GatePolicy that
    // selects this namespace alone (by a label) and lists no host. A first
    // release whose gate calls a host it does not list does not start; a
    // new revision of a stable plan does not either, and that plan keeps
    // the generation it is stable for. Nothing later in this test has a
    // gate, and the policy goes before it goes on.
    let tenant = "releaseplan-test/tenant";
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {tenant: ns}}})),
        )
        .await
        .unwrap();
    let policies: Api<releaseplan::api::policy::GatePolicy> = Api::all(client.clone());
    let policy_name = format!("{ns}-consumers");
    let policy = serde_json::from_value(json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "GatePolicy",
        "metadata": {"name": policy_name},
        "spec": {"namespaceSelector": {"matchLabels": {tenant: ns}}, "destinations": {"hosts": []}}}))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let gated = |image: &str| {
        json!({"components": [web(template(image), 2)],
               "health": {"webhooks": [{"name": "smoke", "url": "http://127.0.0.1:9/hook"}]}})
    };
    create(&client, &ns, &plan("held", gated("shop:1"))).await;
    wait_condition(&client, &ns, "held", "Stalled", "GatePolicyRefused").await;
    m.check(
        &client,
        &ns,
        "held",
        "first release held by the GatePolicy (`Stalled` `GatePolicyRefused`)",
        ("Failed", "Degraded", "Failed", 3, 1),
    )
    .await;
    create_stable(
        &client,
        &ns,
        "kept",
        json!({"components": [web(template("shop:1"), 2)]}),
    )
    .await;
    patch_spec(&client, &ns, "kept", gated("shop:2")).await;
    wait_until(WAIT, "kept: the new revision held", || async {
        let p = get(&client, &ns, "kept").await?;
        let c = p
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Stalled")?
            .clone();
        (c.status == "True"
            && c.reason == "GatePolicyRefused"
            && c.observed_generation == p.metadata.generation)
            .then_some(())
    })
    .await;
    m.check(
        &client,
        &ns,
        "kept",
        "new revision held by the GatePolicy (`Stable`, `Stalled` `GatePolicyRefused`, `observedGeneration` behind)",
        ("InProgress", "Progressing", "InProgress", 3, 1),
    )
    .await;
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .unwrap();

    // Being deleted: a finalizer of ours keeps the object after the
    // operator's own finalizer is gone, as any other controller's would.
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let hold = "test.releaseplan.io/hold";
    plans
        .patch(
            "fresh",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [hold, "releaseplan.io/finalizer"]}})),
        )
        .await
        .unwrap();
    plans
        .delete("fresh", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(WAIT, "fresh: only our finalizer left", || async {
        let p = get(&client, &ns, "fresh").await?;
        (p.metadata.deletion_timestamp.is_some()
            && p.metadata.finalizers.as_deref() == Some(&[hold.to_string()][..]))
        .then_some(())
    })
    .await;
    m.check(
        &client,
        &ns,
        "fresh",
        "being deleted (another finalizer holds it)",
        ("Terminating", "Progressing", "InProgress", 4, 1),
    )
    .await;
    plans
        .patch(
            "fresh",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();

    // The deleted plan's series goes with it.
    wait_until(WAIT, "the deleted plan's info series to go", || async {
        let text = op.metrics().await;
        (text.contains("releaseplan_plan_info{") && !text.contains("plan=\"fresh\"")).then_some(())
    })
    .await;

    // A new spec the operator has not seen: it is down.
    let mut op = op;
    op.terminate().await;
    patch_spec(&client, &ns, "roll", json!({"paused": true})).await;
    m.check(
        &client,
        &ns,
        "roll",
        "new spec, operator down (`observedGeneration` behind)",
        ("InProgress", "Progressing", "InProgress", 4, 1),
    )
    .await;

    let table = m.table();
    println!("\n{table}");
    check_docs_table(&table);
}

/// Runs Argo CD's action `action` (integrations/argocd/actions) on the live
/// plan in rp-health, applies the merge patch it yields as Argo CD does, and
/// waits for the operator to acknowledge the request.
async fn run_action(client: &Client, ns: &str, name: &str, action: &str) {
    let obj = live(client, ns, name).await;
    let script = cluster::repo_root()
        .join(ACTIONS)
        .join(action)
        .join("action.lua");
    let bin = rp_health();
    let v = tokio::task::spawn_blocking(move || {
        run_rp_health(&bin, &["-action".as_ref(), script.as_os_str()], &obj)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("action {action}: {e}"));
    let patch = v["patch"].clone();
    let request = patch["metadata"]["annotations"]["releaseplan.io/request"]
        .as_str()
        .unwrap_or_else(|| panic!("action {action} made no request: {patch}"))
        .to_string();
    assert!(
        request.starts_with(&format!("{action}/argocd-")),
        "action {action} asked {request:?}"
    );
    assert_eq!(
        patch,
        json!({"metadata": {"annotations": {"releaseplan.io/request": request}}}),
        "action {action} must change nothing but the request"
    );
    dynamic_plans(client, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(WAIT, &format!("{name}: {request} acknowledged"), || async {
        let p = get(client, ns, name).await?;
        (p.status?.acknowledged_request.as_deref() == Some(request.as_str())).then_some(())
    })
    .await;
}

/// Every Argo CD action, run as Argo CD runs it, moves a live plan the way
/// the plugin's request does.
#[tokio::test]
async fn argocd_actions_drive_a_live_plan() {
    rp_health();
    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "argocd-actions").await;
    let _op = Operator::start(&ns, &[]).await;
    let spec = json!({"components": [web(template("shop:1"), 2)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}});
    create_stable(&client, &ns, "act", spec).await;
    set_components(&client, &ns, "act", json!([web(template("shop:2"), 2)])).await;
    wait_condition(&client, &ns, "act", "Paused", "PauseStep").await;

    run_action(&client, &ns, "act", "pause").await;
    wait_condition(&client, &ns, "act", "Paused", "PauseRequested").await;
    run_action(&client, &ns, "act", "resume").await;
    wait_condition(&client, &ns, "act", "Paused", "PauseStep").await;
    let p = get(&client, &ns, "act").await.unwrap();
    assert!(!p.status.unwrap().pause_requested);

    run_action(&client, &ns, "act", "promote").await;
    let p = wait_phase(&client, &ns, "act", Phase::Stable, WAIT).await;
    let shop2 = p.status.unwrap().current_revision;

    set_components(&client, &ns, "act", json!([web(template("shop:3"), 2)])).await;
    wait_condition(&client, &ns, "act", "Paused", "PauseStep").await;
    run_action(&client, &ns, "act", "abort").await;
    let p = wait_phase(&client, &ns, "act", Phase::RolledBack, WAIT).await;
    assert_eq!(p.status.unwrap().stable_revision, shop2);

    run_action(&client, &ns, "act", "retry").await;
    wait_condition(&client, &ns, "act", "Paused", "PauseStep").await;
    run_action(&client, &ns, "act", "promote-full").await;
    let p = wait_phase(&client, &ns, "act", Phase::Stable, WAIT).await;
    let s = p.status.unwrap();
    assert_ne!(s.current_revision, shop2, "shop:3 is live");
    assert_eq!(s.stable_revision, s.current_revision);
}

/// The README's argocd-cm snippet carries every action file as it is.
#[test]
fn readme_carries_the_argocd_actions() {
    let root = cluster::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let discovery = std::fs::read_to_string(root.join(ACTIONS).join("discovery.lua")).unwrap();
    assert!(
        readme.contains(&format!(
            "  resource.customizations.actions.releaseplan.io_ReleasePlan: |\n    discovery.lua: |\n{}",
            indent(&discovery, "      ")
        )),
        "README.md's argocd-cm snippet differs from {ACTIONS}/discovery.lua"
    );
    for action in Action::ALL {
        let word = action.word();
        let lua =
            std::fs::read_to_string(root.join(ACTIONS).join(word).join("action.lua")).unwrap();
        assert!(
            readme.contains(&format!(
                "    - name: {word}\n      action.lua: |\n{}",
                indent(&lua, "        ")
            )),
            "README.md's argocd-cm snippet differs from {ACTIONS}/{word}/action.lua"
        );
    }
}

/// The README carries integrations/argocd/health.lua as it is, indented in
/// the `argocd-cm` snippet: the file is what the test above runs.
#[test]
fn readme_carries_the_argocd_health_check() {
    let root = cluster::repo_root();
    let lua = std::fs::read_to_string(root.join("integrations/argocd/health.lua")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let indented = indent(&lua, "    ");
    assert!(
        readme.contains(&format!(
            "  resource.customizations.health.releaseplan.io_ReleasePlan: |\n{indented}  resource.customizations.actions"
        )),
        "README.md's argocd-cm snippet differs from integrations/argocd/health.lua: copy the file in again"
    );
}

/// docs/api.md shows the expressions of integrations/flux/health-check.yaml.
#[test]
fn docs_carry_the_flux_health_check() {
    let root = cluster::repo_root();
    let exprs = std::fs::read_to_string(root.join("integrations/flux/health-check.yaml")).unwrap();
    let docs = std::fs::read_to_string(root.join("docs/api.md")).unwrap();
    for field in ["failed: ", "current: "] {
        let line = exprs
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in integrations/flux/health-check.yaml"));
        assert!(
            docs.contains(&format!("      {line}\n")),
            "docs/api.md does not show {line:?} of integrations/flux/health-check.yaml"
        );
    }
}

/// docs/api.md names every reason the operator writes (Events, conditions,
/// failures), so the contract there covers what tools can meet.
#[test]
fn docs_name_every_reason() {
    use releaseplan::plan::reasons::{ConditionReason, EventReason, FailureReason};
    let docs = std::fs::read_to_string(cluster::repo_root().join("docs/api.md")).unwrap();
    let reasons = EventReason::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(ConditionReason::ALL.iter().map(|r| r.as_str()))
        .chain(FailureReason::ALL.iter().map(|r| r.as_str()));
    let missing: Vec<&str> = reasons
        .filter(|r| !docs.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md does not name these reasons: {missing:?}"
    );
}

/// A plan of a StatefulSet and a DaemonSet reads the same to every consumer
/// as a plan of Deployments: its status has the same phases and conditions
/// whatever runs its pods (issue #51). Released, then rolled back by a
/// crash-looping DaemonSet revision.
#[tokio::test]
async fn each_consumer_reads_a_stateful_and_daemon_plan_as_any_other() {
    rp_health();
    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "consumers-kinds").await;
    let mut m = Matrix { rows: Vec::new() };
    let _op = Operator::start(&ns, &[]).await;
    let kinds = |agent: Value| {
        json!({
            "components": [
                {"name": "db", "kind": "StatefulSet", "replicas": 2, "template": template("db:1")},
                {"name": "agent", "kind": "DaemonSet", "template": agent},
            ],
            "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "1s"}}]},
            "health": {"progressDeadlineSeconds": 600}
        })
    };
    create_stable(&client, &ns, "kinds", kinds(template("agent:1"))).await;
    m.check(
        &client,
        &ns,
        "kinds",
        "StatefulSet and DaemonSet released (`Stable`)",
        ("Current", "Healthy", "Current", 0, 0),
    )
    .await;
    patch_spec(
        &client,
        &ns,
        "kinds",
        json!({"components": kinds(faulty_template("agent:2", "crash-loop"))["components"]}),
    )
    .await;
    wait_phase(&client, &ns, "kinds", Phase::RolledBack, WAIT).await;
    m.check(
        &client,
        &ns,
        "kinds",
        "StatefulSet and DaemonSet `RolledBack`",
        ("Failed", "Degraded", "Failed", 2, 1),
    )
    .await;
}
