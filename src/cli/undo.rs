//! Client-side `undo`: rebuild the `spec.components` of an earlier revision
//! from the revision Deployments the operator keeps at zero replicas, as a JSON
//! merge patch for the user's git repository (or, with `--apply`, for the spec).
//!
//! The status only records template *hashes* (`history[].components`), so the
//! templates come from the old Deployments. The API server filled in defaults
//! there (`imagePullPolicy`, `terminationMessagePath`, probe timings, ...); they
//! are taken out again, trying the combinations that give back the recorded
//! hash, so that the restored spec is the same revision and the operator reuses
//! its Deployment. When no combination matches, the patch still restores the
//! same pods, under a new revision hash, and says so.

use crate::api::revision::hash_value;
use crate::api::{HistoryEntry, LABEL_COMPONENT, LABEL_REVISION, ReleasePlan};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use serde_json::{Map, Value, json};

/// Why no undo patch can be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UndoError {
    /// The plan has no finished rollout.
    #[error("releaseplan {0} has no rollout history yet: nothing to undo")]
    NoHistory(String),
    /// `--to-revision N` names no history entry.
    #[error("no history entry number {0}; the history holds {1}")]
    NoEntry(i64, String),
    /// No `Promoted` entry other than the current revision.
    #[error(
        "no earlier promoted revision in the history (current revision {0}); pick one with --to-revision"
    )]
    NoEarlierPromoted(String),
    /// The chosen entry is the revision the spec already asks for.
    #[error("history entry {0} is revision {1}, which is already the current revision")]
    AlreadyCurrent(i64, String),
    /// The entry lists no component hashes.
    #[error("history entry {0} records no component templates")]
    NoComponents(i64),
    /// A `name=hash` item of the entry cannot be read.
    #[error("history entry {0} has a malformed component {1:?} (expected name=hash)")]
    Malformed(i64, String),
    /// The Deployment of a component revision is gone.
    #[error(
        "the Deployment of component {component} at template {hash} no longer exists (pruned beyond revisionHistoryLimit, now {limit}): revision {revision} cannot be rebuilt from the cluster; take its templates from your git history"
    )]
    Pruned {
        /// Component name.
        component: String,
        /// Its template hash at that revision.
        hash: String,
        /// Plan revision of the entry.
        revision: String,
        /// The plan's revision history limit.
        limit: usize,
    },
    /// The Deployment holds no pod template.
    #[error("the Deployment {0} has no pod template")]
    NoTemplate(String),
}

/// A ready undo: the entry restored and the merge patch to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Undo {
    /// The history entry restored.
    pub entry: HistoryEntry,
    /// JSON merge patch of `spec.components` (a merge patch replaces the list whole).
    pub patch: Value,
    /// Things the user should know (new hash, replicas guessed, outcome of the entry).
    pub notes: Vec<String>,
}

/// The history entry to restore: number `to`, or else the last `Promoted`
/// entry whose revision differs from `status.currentRevision`.
pub fn pick_entry(plan: &ReleasePlan, to: Option<i64>) -> Result<HistoryEntry, UndoError> {
    let status = plan.status.clone().unwrap_or_default();
    if status.history.is_empty() {
        return Err(UndoError::NoHistory(plan.name_any()));
    }
    let current = status.current_revision.clone().unwrap_or_default();
    let entry = match to {
        Some(n) => status
            .history
            .iter()
            .find(|h| h.number == n)
            .cloned()
            .ok_or_else(|| {
                let numbers: Vec<String> = status
                    .history
                    .iter()
                    .map(|h| format!("{} ({})", h.number, h.outcome))
                    .collect();
                UndoError::NoEntry(n, numbers.join(", "))
            })?,
        None => status
            .history
            .iter()
            .rev()
            .find(|h| h.outcome == "Promoted" && h.revision != current)
            .cloned()
            .ok_or_else(|| UndoError::NoEarlierPromoted(current.clone()))?,
    };
    if entry.revision == current {
        return Err(UndoError::AlreadyCurrent(entry.number, entry.revision));
    }
    Ok(entry)
}

#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

type Path = Vec<Seg>;

fn child(path: &Path, seg: Seg) -> Path {
    let mut p = path.clone();
    p.push(seg);
    p
}

fn key(path: &Path, k: &str) -> Path {
    child(path, Seg::Key(k.to_string()))
}

/// The pull policy the API server gives a container without one.
fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// Adds `path.k` to `out` when `v.k` equals `default`.
fn when_default(out: &mut Vec<Path>, v: &Value, path: &Path, k: &str, default: &Value) {
    if v.get(k) == Some(default) {
        out.push(key(path, k));
    }
}

fn items(v: &Value, k: &str) -> Vec<(usize, Value)> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().cloned().enumerate().collect())
        .unwrap_or_default()
}

fn field_ref_defaults(out: &mut Vec<Path>, items_of: &Value, path: &Path) {
    for (i, item) in items(items_of, "items") {
        let p = child(&key(path, "items"), Seg::Index(i));
        if let Some(f) = item.get("fieldRef") {
            when_default(out, f, &key(&p, "fieldRef"), "apiVersion", &json!("v1"));
        }
    }
}

fn handler_defaults(out: &mut Vec<Path>, h: &Value, path: &Path) {
    if let Some(g) = h.get("httpGet") {
        let p = key(path, "httpGet");
        when_default(out, g, &p, "scheme", &json!("HTTP"));
        when_default(out, g, &p, "path", &json!("/"));
    }
}

/// Fields of a pod template whose value is the one the API server fills in
/// when a Deployment is stored: each may or may not have been in the spec.
fn default_candidates(template: &Value) -> Vec<Path> {
    let mut out = Vec::new();
    let Some(spec) = template.get("spec") else {
        return out;
    };
    let sp: Path = vec![Seg::Key("spec".into())];
    when_default(&mut out, spec, &sp, "dnsPolicy", &json!("ClusterFirst"));
    when_default(&mut out, spec, &sp, "restartPolicy", &json!("Always"));
    when_default(
        &mut out,
        spec,
        &sp,
        "terminationGracePeriodSeconds",
        &json!(30),
    );
    when_default(
        &mut out,
        spec,
        &sp,
        "schedulerName",
        &json!("default-scheduler"),
    );
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in items(spec, list) {
            let cp = child(&key(&sp, list), Seg::Index(i));
            when_default(
                &mut out,
                &c,
                &cp,
                "terminationMessagePath",
                &json!("/dev/termination-log"),
            );
            when_default(
                &mut out,
                &c,
                &cp,
                "terminationMessagePolicy",
                &json!("File"),
            );
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            when_default(
                &mut out,
                &c,
                &cp,
                "imagePullPolicy",
                &json!(default_pull_policy(image)),
            );
            for (j, port) in items(&c, "ports") {
                let pp = child(&key(&cp, "ports"), Seg::Index(j));
                when_default(&mut out, &port, &pp, "protocol", &json!("TCP"));
            }
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                if let Some(pr) = c.get(probe) {
                    let p = key(&cp, probe);
                    when_default(&mut out, pr, &p, "timeoutSeconds", &json!(1));
                    when_default(&mut out, pr, &p, "periodSeconds", &json!(10));
                    when_default(&mut out, pr, &p, "successThreshold", &json!(1));
                    when_default(&mut out, pr, &p, "failureThreshold", &json!(3));
                    handler_defaults(&mut out, pr, &p);
                }
            }
            if let Some(l) = c.get("lifecycle") {
                for hook in ["postStart", "preStop"] {
                    if let Some(h) = l.get(hook) {
                        handler_defaults(&mut out, h, &key(&key(&cp, "lifecycle"), hook));
                    }
                }
            }
            for (j, env) in items(&c, "env") {
                if let Some(f) = env.get("valueFrom").and_then(|v| v.get("fieldRef")) {
                    let p = key(
                        &key(&child(&key(&cp, "env"), Seg::Index(j)), "valueFrom"),
                        "fieldRef",
                    );
                    when_default(&mut out, f, &p, "apiVersion", &json!("v1"));
                }
            }
        }
    }
    for (i, vol) in items(spec, "volumes") {
        let vp = child(&key(&sp, "volumes"), Seg::Index(i));
        for source in ["secret", "configMap", "downwardAPI", "projected"] {
            if let Some(s) = vol.get(source) {
                when_default(&mut out, s, &key(&vp, source), "defaultMode", &json!(420));
            }
        }
        if let Some(h) = vol.get("hostPath") {
            when_default(&mut out, h, &key(&vp, "hostPath"), "type", &json!(""));
        }
        if let Some(d) = vol.get("downwardAPI") {
            field_ref_defaults(&mut out, d, &key(&vp, "downwardAPI"));
        }
        if let Some(p) = vol.get("projected") {
            let pp = key(&vp, "projected");
            for (j, src) in items(p, "sources") {
                let sp2 = child(&key(&pp, "sources"), Seg::Index(j));
                if let Some(d) = src.get("downwardAPI") {
                    field_ref_defaults(&mut out, d, &key(&sp2, "downwardAPI"));
                }
                if let Some(t) = src.get("serviceAccountToken") {
                    when_default(
                        &mut out,
                        t,
                        &key(&sp2, "serviceAccountToken"),
                        "expirationSeconds",
                        &json!(3600),
                    );
                }
            }
        }
    }
    out
}

/// Removes the empty `securityContext` and `resources` objects the API server
/// adds (they do not change the hash: empty objects are not hashed).
fn drop_empty_defaults(template: &mut Value) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let empty = |v: Option<&Value>| v.and_then(Value::as_object).is_some_and(Map::is_empty);
    if empty(spec.get("securityContext")) {
        spec.remove("securityContext");
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            for k in ["resources", "securityContext"] {
                if empty(c.get(k)) {
                    c.remove(k);
                }
            }
        }
    }
}

/// Removes the object key at `path` (its last segment is a key).
fn remove(v: &mut Value, path: &Path) {
    let Some((Seg::Key(last), parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        let next = match seg {
            Seg::Key(k) => cur.get_mut(k.as_str()),
            Seg::Index(i) => cur.get_mut(*i),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(obj) = cur.as_object_mut() {
        obj.remove(last);
    }
}

/// Calls `f` with every `size`-subset of `0..k` (as a membership mask) until it
/// returns `Some`.
fn subsets<T>(k: usize, size: usize, f: &mut impl FnMut(&[bool]) -> Option<T>) -> Option<T> {
    fn go<T>(
        mask: &mut Vec<bool>,
        start: usize,
        left: usize,
        f: &mut impl FnMut(&[bool]) -> Option<T>,
    ) -> Option<T> {
        if left == 0 {
            return f(mask);
        }
        for i in start..mask.len() {
            if mask.len() - i < left {
                break;
            }
            mask[i] = true;
            if let Some(t) = go(mask, i + 1, left - 1, f) {
                return Some(t);
            }
            mask[i] = false;
        }
        None
    }
    let mut mask = vec![false; k];
    go(&mut mask, 0, size, f)
}

/// Most default-valued fields for which every combination is tried (2^14
/// hashes at worst); above it, only combinations keeping at most three of them.
const EXHAUSTIVE: usize = 14;

/// The pod template of a revision Deployment as it was in the spec: the
/// operator's `releaseplan.io/` labels removed, and the API server's defaults
/// removed as far as needed to give back `hash`. Returns the template and
/// whether its hash is `hash`.
pub fn restore_template(deployment: &Deployment, hash: &str) -> Result<(Value, bool), UndoError> {
    let template = deployment
        .spec
        .as_ref()
        .map(|s| &s.template)
        .ok_or_else(|| UndoError::NoTemplate(deployment.name_any()))?;
    let mut v = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.retain(|k, _| !k.starts_with(crate::api::GROUP));
            if labels.is_empty() {
                meta.remove("labels");
            }
        }
        meta.remove("creationTimestamp");
        if meta.is_empty()
            && let Some(obj) = v.as_object_mut()
        {
            obj.remove("metadata");
        }
    }
    drop_empty_defaults(&mut v);
    let candidates = default_candidates(&v);
    let k = candidates.len();
    let build = |keep: &[bool]| {
        let mut t = v.clone();
        for (path, kept) in candidates.iter().zip(keep) {
            if !kept {
                remove(&mut t, path);
            }
        }
        t
    };
    let max_kept = if k <= EXHAUSTIVE { k } else { 3 };
    for size in 0..=max_kept {
        let found = subsets(k, size, &mut |keep| {
            let t = build(keep);
            (hash_value(&t) == hash).then_some(t)
        });
        if let Some(t) = found {
            return Ok((t, true));
        }
    }
    Ok((build(&vec![false; k]), false))
}

/// Builds the undo of `plan` to history entry `to` (or the last promoted
/// revision before the current one) from the plan's revision Deployments.
pub fn build_undo(
    plan: &ReleasePlan,
    deployments: &[Deployment],
    to: Option<i64>,
) -> Result<Undo, UndoError> {
    let entry = pick_entry(plan, to)?;
    if entry.components.is_empty() {
        return Err(UndoError::NoComponents(entry.number));
    }
    let status = plan.status.clone().unwrap_or_default();
    let mut notes = Vec::new();
    if entry.outcome != "Promoted" {
        notes.push(format!(
            "history entry {} ended {} ({}): this revision never became stable",
            entry.number,
            entry.outcome,
            entry.reason.as_deref().unwrap_or("no reason recorded")
        ));
    }
    let mut wanted: Vec<(String, String)> = Vec::new();
    for item in &entry.components {
        let (name, hash) = item
            .split_once('=')
            .filter(|(n, h)| !n.is_empty() && !h.is_empty())
            .ok_or_else(|| UndoError::Malformed(entry.number, item.clone()))?;
        wanted.push((name.to_string(), hash.to_string()));
    }
    // Components in the order of the current spec, then those it no longer has.
    let position = |name: &str| {
        plan.spec
            .components
            .iter()
            .position(|c| c.name == name)
            .unwrap_or(usize::MAX)
    };
    wanted.sort_by_key(|(name, _)| position(name));

    let mut components = Vec::new();
    for (name, hash) in &wanted {
        let deployment = deployments
            .iter()
            .find(|d| {
                let l = d.labels();
                l.get(LABEL_COMPONENT) == Some(name) && l.get(LABEL_REVISION) == Some(hash)
            })
            .ok_or_else(|| UndoError::Pruned {
                component: name.clone(),
                hash: hash.clone(),
                revision: entry.revision.clone(),
                limit: plan.spec.revision_history_limit(),
            })?;
        let (template, exact) = restore_template(deployment, hash)?;
        if !exact {
            notes.push(format!(
                "component {name}: the template rebuilt from Deployment {} does not hash to {hash} (the API server changed fields the spec had): applying it runs the same pods under a new revision, as a normal rollout",
                deployment.name_any()
            ));
        }
        let replicas = plan
            .spec
            .components
            .iter()
            .find(|c| &c.name == name)
            .map(|c| c.replicas)
            .or_else(|| {
                status
                    .components
                    .iter()
                    .find(|c| &c.name == name)
                    .map(|c| c.replicas)
            })
            .unwrap_or_else(|| {
                notes.push(format!(
                    "component {name} is no longer in the spec or status: replicas set to 1, adjust it"
                ));
                1
            });
        let mut c = Map::new();
        c.insert("name".into(), json!(name));
        c.insert("replicas".into(), json!(replicas));
        c.insert("template".into(), template);
        components.push(Value::Object(c));
    }
    let patch = json!({"spec": {"components": components}});
    Ok(Undo {
        entry,
        patch,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::revision::template_hash;
    use crate::cli::fixtures::plan_json;
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    /// A Deployment as the API server stores it: the spec's template, the
    /// operator's labels and the server's defaults.
    fn stored(component: &str, spec_template: &Value) -> (Deployment, String) {
        let typed: PodTemplateSpec = serde_json::from_value(spec_template.clone()).unwrap();
        let hash = template_hash(&typed);
        let mut t = spec_template.clone();
        let labels = t["metadata"]["labels"]
            .as_object_mut()
            .cloned()
            .unwrap_or_default();
        let mut labels = labels;
        labels.insert("releaseplan.io/plan".into(), json!("shop"));
        labels.insert("releaseplan.io/component".into(), json!(component));
        labels.insert("releaseplan.io/revision".into(), json!(hash));
        t["metadata"]["labels"] = Value::Object(labels);
        t["metadata"]["creationTimestamp"] = Value::Null;
        let spec = t["spec"].as_object_mut().unwrap();
        spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
        spec.entry("restartPolicy").or_insert(json!("Always"));
        spec.entry("terminationGracePeriodSeconds")
            .or_insert(json!(30));
        spec.entry("schedulerName")
            .or_insert(json!("default-scheduler"));
        spec.entry("securityContext").or_insert(json!({}));
        for c in spec["containers"].as_array_mut().unwrap() {
            let c = c.as_object_mut().unwrap();
            let image = c["image"].as_str().unwrap().to_string();
            c.entry("terminationMessagePath")
                .or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
            c.entry("imagePullPolicy")
                .or_insert(json!(default_pull_policy(&image)));
            c.entry("resources").or_insert(json!({}));
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    p.as_object_mut()
                        .unwrap()
                        .entry("protocol")
                        .or_insert(json!("TCP"));
                }
            }
            if let Some(p) = c.get_mut("readinessProbe").and_then(Value::as_object_mut) {
                p.entry("timeoutSeconds").or_insert(json!(1));
                p.entry("periodSeconds").or_insert(json!(10));
                p.entry("successThreshold").or_insert(json!(1));
                p.entry("failureThreshold").or_insert(json!(3));
                if let Some(g) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                    g.entry("scheme").or_insert(json!("HTTP"));
                }
            }
        }
        let name = format!("shop-{component}-{hash}");
        let d = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "releaseplan.io/plan": "shop", "releaseplan.io/component": component,
                "releaseplan.io/revision": hash}},
            "spec": {"replicas": 0, "selector": {}, "template": t},
        }))
        .unwrap();
        (d, hash)
    }

    fn web_template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "web", "image": image,
                   "ports": [{"containerPort": 8080}],
                   "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}]}})
    }

    fn plan_with_history(history: Value, current: &str) -> ReleasePlan {
        let mut v = plan_json();
        v["status"]["history"] = history;
        v["status"]["currentRevision"] = json!(current);
        serde_json::from_value(v).unwrap()
    }

    fn entry(n: i64, rev: &str, outcome: &str, components: &[String]) -> Value {
        json!({"number": n, "revision": rev, "outcome": outcome, "components": components})
    }

    #[test]
    fn restores_the_exact_template_from_a_defaulted_deployment() {
        let spec_t = web_template("web:1");
        let (d, hash) = stored("web", &spec_t);
        let (t, exact) = restore_template(&d, &hash).unwrap();
        assert!(exact);
        assert_eq!(t, spec_t);
    }

    #[test]
    fn keeps_defaults_the_user_wrote() {
        // The user wrote imagePullPolicy and a probe period equal to the defaults.
        let mut spec_t = web_template("web:1");
        spec_t["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        spec_t["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = json!(10);
        spec_t["spec"]["restartPolicy"] = json!("Always");
        let (d, hash) = stored("web", &spec_t);
        let (t, exact) = restore_template(&d, &hash).unwrap();
        assert!(exact);
        let typed: PodTemplateSpec = serde_json::from_value(t).unwrap();
        assert_eq!(template_hash(&typed), hash);
    }

    #[test]
    fn a_template_without_labels_or_metadata() {
        let spec_t = json!({"spec": {"containers": [{"name": "a", "image": "a"}]}});
        let (d, hash) = stored("web", &spec_t);
        let (t, exact) = restore_template(&d, &hash).unwrap();
        assert!(exact, "{t}");
        assert_eq!(t, spec_t);
    }

    #[test]
    fn reports_a_template_it_cannot_match() {
        let spec_t = web_template("web:1");
        let (d, _) = stored("web", &spec_t);
        let (t, exact) = restore_template(&d, "nothashxyz").unwrap();
        assert!(!exact);
        // Still the spec's pods, without the server's defaults.
        assert_eq!(t, spec_t);
    }

    #[test]
    fn pull_policy_defaults() {
        assert_eq!(default_pull_policy("web"), "Always");
        assert_eq!(default_pull_policy("web:latest"), "Always");
        assert_eq!(default_pull_policy("web:1.2"), "IfNotPresent");
        assert_eq!(default_pull_policy("registry:5000/web"), "Always");
        assert_eq!(default_pull_policy("registry:5000/web:2"), "IfNotPresent");
        assert_eq!(default_pull_policy("web@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn builds_the_patch_for_the_last_promoted_revision() {
        let (web1, h1) = stored("web", &web_template("web:1"));
        let (web2, h2) = stored("web", &web_template("web:2"));
        let worker_t = json!({"spec": {"containers": [{"name": "w", "image": "worker:1"}]}});
        let (worker, hw) = stored("worker", &worker_t);
        let history = json!([
            entry(
                1,
                "rev1",
                "Promoted",
                &[format!("web={h1}"), format!("worker={hw}")]
            ),
            entry(
                2,
                "rev2",
                "Promoted",
                &[format!("web={h2}"), format!("worker={hw}")]
            ),
            entry(3, "rev3", "RolledBack", &["web=broken".to_string()]),
        ]);
        // Rolling out rev2 again? No: current is rev2 and stable; undo goes to rev1.
        let p = plan_with_history(history, "rev2");
        let undo = build_undo(&p, &[web2, worker.clone(), web1], None).unwrap();
        assert_eq!(undo.entry.number, 1);
        assert!(undo.notes.is_empty(), "{:?}", undo.notes);
        assert_eq!(
            undo.patch,
            json!({"spec": {"components": [
                {"name": "web", "replicas": 4, "template": web_template("web:1")},
                {"name": "worker", "replicas": 2, "template": worker_t},
            ]}})
        );
    }

    #[test]
    fn to_revision_and_its_errors() {
        let (web1, h1) = stored("web", &web_template("web:1"));
        let history = json!([
            entry(1, "rev1", "Promoted", &[format!("web={h1}")]),
            entry(2, "rev2", "RolledBack", &["web=gonegone00".to_string()]),
            entry(3, "rev3", "Promoted", &["web=zzz".to_string()]),
        ]);
        let p = plan_with_history(history, "rev3");
        let deps = [web1];
        assert_eq!(build_undo(&p, &deps, Some(1)).unwrap().entry.number, 1);
        assert_eq!(
            build_undo(&p, &deps, Some(9)).unwrap_err(),
            UndoError::NoEntry(9, "1 (Promoted), 2 (RolledBack), 3 (Promoted)".into())
        );
        assert_eq!(
            build_undo(&p, &deps, Some(3)).unwrap_err(),
            UndoError::AlreadyCurrent(3, "rev3".into())
        );
        let err = build_undo(&p, &deps, Some(2)).unwrap_err();
        assert!(
            matches!(&err, UndoError::Pruned { component, hash, .. } if component == "web" && hash == "gonegone00")
        );
        let text = err.to_string();
        assert!(
            text.contains("no longer exists (pruned beyond revisionHistoryLimit, now 3)"),
            "{text}"
        );
        assert!(text.contains("revision rev2 cannot be rebuilt"), "{text}");
    }

    #[test]
    fn a_rolled_back_entry_is_noted() {
        let (web1, h1) = stored("web", &web_template("web:1"));
        let history = json!([
            entry(1, "rev1", "Promoted", &["web=other".to_string()]),
            entry(2, "rev2", "RolledBack", &[format!("web={h1}")]),
        ]);
        let p = plan_with_history(history, "rev1");
        let undo = build_undo(&p, &[web1], Some(2)).unwrap();
        assert!(
            undo.notes[0].contains("ended RolledBack"),
            "{:?}",
            undo.notes
        );
    }

    #[test]
    fn default_pick_errors() {
        let p = plan_with_history(json!([]), "rev1");
        assert_eq!(
            pick_entry(&p, None).unwrap_err(),
            UndoError::NoHistory("shop".into())
        );
        let p = plan_with_history(json!([entry(1, "rev1", "Promoted", &[])]), "rev1");
        assert_eq!(
            pick_entry(&p, None).unwrap_err(),
            UndoError::NoEarlierPromoted("rev1".into())
        );
        let p = plan_with_history(json!([entry(1, "rev0", "Promoted", &[])]), "rev1");
        assert_eq!(
            build_undo(&p, &[], None).unwrap_err(),
            UndoError::NoComponents(1)
        );
        let p = plan_with_history(
            json!([entry(1, "rev0", "Promoted", &["web".to_string()])]),
            "rev1",
        );
        assert_eq!(
            build_undo(&p, &[], None).unwrap_err(),
            UndoError::Malformed(1, "web".into())
        );
    }

    #[test]
    fn a_removed_component_gets_one_replica_and_a_note() {
        let gone_t = json!({"spec": {"containers": [{"name": "g", "image": "gone:1"}]}});
        let (gone, hg) = stored("gone", &gone_t);
        let p = plan_with_history(
            json!([entry(1, "rev0", "Promoted", &[format!("gone={hg}")])]),
            "rev1",
        );
        let undo = build_undo(&p, &[gone], None).unwrap();
        assert_eq!(undo.patch["spec"]["components"][0]["replicas"], json!(1));
        assert!(undo.notes[0].contains("replicas set to 1"));
    }

    #[test]
    fn many_defaults_still_search_bounded() {
        // 4 containers x 3 defaults = 12+ candidates: the search stays bounded.
        let containers: Vec<Value> = (0..5)
            .map(|i| {
                json!({"name": format!("c{i}"), "image": format!("img:{i}"),
                            "terminationMessagePolicy": "File"})
            })
            .collect();
        let spec_t = json!({"spec": {"containers": containers}});
        let (d, hash) = stored("web", &spec_t);
        let (t, exact) = restore_template(&d, &hash).unwrap();
        // 5 user-written defaults among 19 candidates: beyond the bounded search.
        assert!(!exact);
        assert!(
            t["spec"]["containers"][0]
                .get("terminationMessagePolicy")
                .is_none()
        );
        let spec_t = json!({"spec": {"containers": [{"name": "c", "image": "img:1",
            "terminationMessagePolicy": "File"}], "dnsPolicy": "ClusterFirst"}});
        let (d, hash) = stored("web", &spec_t);
        assert!(restore_template(&d, &hash).unwrap().1);
    }
}
