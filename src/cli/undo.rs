//! Client-side `undo`: the `spec.components` of an earlier revision, as a
//! JSON merge patch for the user's git repository (or, with `--apply`, for the
//! spec).
//!
//! The status records only template *hashes* (`history[].components`); the
//! templates themselves are stored by the operator, one ControllerRevision
//! per component revision, exactly as the spec had them. So undo is a lookup:
//! the restored spec is the same revision, and the operator scales its kept
//! Deployment back up (or recreates it) instead of making a new one.

use super::connect::Ctx;
use super::error::{CliError, UndoError};
use crate::api::{HistoryEntry, LABEL_PLAN, Outcome, ReleasePlan};
use crate::objects::controller_revision;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Map, Value, json};

/// A ready undo: the entry restored and the merge patch to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Undo {
    /// The history entry restored.
    pub entry: HistoryEntry,
    /// JSON merge patch of `spec.components` (a merge patch replaces the list whole).
    pub patch: Value,
    /// Things the user should know (replicas guessed, outcome of the entry).
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
            .find(|h| h.outcome == Outcome::Promoted && h.revision != current)
            .cloned()
            .ok_or_else(|| UndoError::NoEarlierPromoted(current.clone()))?,
    };
    if entry.revision == current {
        return Err(UndoError::AlreadyCurrent(entry.number, entry.revision));
    }
    Ok(entry)
}

/// Builds the undo of `plan` to history entry `to` (or the last promoted
/// revision before the current one) from the plan's stored templates.
pub fn build_undo(
    plan: &ReleasePlan,
    stored: &[ControllerRevision],
    to: Option<i64>,
) -> Result<Undo, UndoError> {
    let entry = pick_entry(plan, to)?;
    if entry.components.is_empty() {
        return Err(UndoError::NoComponents(entry.number));
    }
    let status = plan.status.clone().unwrap_or_default();
    let mut notes = Vec::new();
    if entry.outcome != Outcome::Promoted {
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
        let cr =
            controller_revision::find(stored, name, hash).ok_or_else(|| UndoError::NotStored {
                component: name.clone(),
                hash: hash.clone(),
                revision: entry.revision.clone(),
                limit: plan.spec.revision_history_limit(),
            })?;
        let template = controller_revision::template(cr, hash).map_err(UndoError::Unusable)?;
        // A component the spec still has keeps its other fields (traffic,
        // autoscaling, replicas): only the template goes back.
        let current = plan.spec.components.iter().find(|c| &c.name == name);
        let mut c = if let Some(Ok(Value::Object(c))) = current.map(serde_json::to_value) {
            c
        } else {
            let replicas = status
                .components
                .iter()
                .find(|c| &c.name == name)
                .map_or_else(
                    || {
                        notes.push(format!(
                            "component {name} is no longer in the spec or status: replicas set to 1, adjust it"
                        ));
                        1
                    },
                    |c| c.replicas,
                );
            let mut c = Map::new();
            c.insert("name".into(), json!(name));
            c.insert("replicas".into(), json!(replicas));
            c
        };
        // Serializing a k8s-openapi type cannot fail.
        c.insert(
            "template".into(),
            serde_json::to_value(&template).unwrap_or(Value::Null),
        );
        components.push(Value::Object(c));
    }
    let patch = json!({"spec": {"components": components}});
    Ok(Undo {
        entry,
        patch,
        notes,
    })
}

/// The ControllerRevisions storing the plan's revision templates.
pub async fn stored_templates(ctx: &Ctx, name: &str) -> Result<Vec<ControllerRevision>, CliError> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    Ok(api
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={name}")))
        .await
        .map_err(|e| {
            ctx.error(
                &format!("list the stored templates (ControllerRevisions) of {name}"),
                e,
            )
        })?
        .items)
}

/// `undo`: prints the patch back to an earlier revision, or with `apply`
/// patches the spec with it.
pub(super) async fn run(
    ctx: &Ctx,
    name: &str,
    to_revision: Option<i64>,
    apply: bool,
) -> Result<i32, CliError> {
    let plan = ctx.plan(name).await?;
    let stored = stored_templates(ctx, name).await?;
    let built = build_undo(&plan, &stored, to_revision)?;
    let entry = &built.entry;
    eprintln!(
        "undo of releaseplan {}/{name} to history entry {} (revision {}, {})",
        ctx.namespace, entry.number, entry.revision, entry.outcome
    );
    for note in &built.notes {
        eprintln!("note: {note}");
    }
    if !apply {
        let text = serde_json::to_string_pretty(&built.patch).unwrap_or_default();
        println!("{text}");
        eprintln!(
            "this JSON merge patch replaces spec.components; put it in git (GitOps), or apply it with\n  kubectl patch releaseplan {name} -n {} --type merge --patch-file <file>\nor rerun with --apply",
            ctx.namespace
        );
        return Ok(0);
    }
    let patched = ctx
        .plans()
        .patch(name, &PatchParams::default(), &Patch::Merge(&built.patch))
        .await
        .map_err(|e| ctx.error(&format!("patch the spec of releaseplan {name}"), e))?;
    println!(
        "spec.components of releaseplan {}/{name} set to revision {} (generation {}); the operator rolls it out",
        ctx.namespace,
        entry.revision,
        patched.metadata.generation.unwrap_or(0)
    );
    println!(
        "follow it with: kubectl releaseplan wait {name} -n {}",
        ctx.namespace
    );
    eprintln!(
        "note: the spec was edited in the cluster; a GitOps tool that owns this plan will revert it unless git changes too"
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::revision::template_hash;
    use crate::cli::fixtures::plan_json;
    use crate::objects::controller_revision::{StoredError, Write};
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    /// The ControllerRevision the operator writes for a component revision.
    fn stored(component: &str, spec_template: &Value) -> (ControllerRevision, String) {
        let plan: ReleasePlan = serde_json::from_value(plan_json()).unwrap();
        let typed: PodTemplateSpec = serde_json::from_value(spec_template.clone()).unwrap();
        let hash = template_hash(&typed);
        let Write::Apply(cr) =
            controller_revision::to_write(&plan, component, &hash, &typed, 1, None)
        else {
            panic!("a new one is applied");
        };
        (*cr, hash)
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
        // Current is rev2 and stable: undo goes to rev1.
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
    fn undo_brings_back_only_the_template_of_a_component_the_spec_still_has() {
        // Autoscaling, traffic and an absent `replicas` stay as the spec has them.
        let (web1, h1) = stored("web", &web_template("web:1"));
        let mut v = plan_json();
        v["spec"]["components"][0] = json!({"name": "web", "template": web_template("web:2"),
            "autoscaling": {"minReplicas": 2, "maxReplicas": 9},
            "traffic": {"port": 80}});
        v["status"]["history"] = json!([entry(1, "rev1", "Promoted", &[format!("web={h1}")])]);
        v["status"]["currentRevision"] = json!("rev2");
        let p: ReleasePlan = serde_json::from_value(v).unwrap();
        let undo = build_undo(&p, &[web1], Some(1)).unwrap();
        assert_eq!(
            undo.patch["spec"]["components"][0],
            json!({"name": "web", "template": web_template("web:1"),
                "autoscaling": {"minReplicas": 2, "maxReplicas": 9},
                "traffic": {"port": 80}})
        );
    }

    #[test]
    fn defaults_the_user_wrote_are_kept_as_written() {
        // Values equal to the API server's defaults, written in the spec: the
        // stored template is the spec's, so they come back, and the hash matches.
        let mut spec_t = web_template("web:1");
        spec_t["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        spec_t["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = json!(10);
        spec_t["spec"]["restartPolicy"] = json!("Always");
        let (cr, hash) = stored("web", &spec_t);
        let p = plan_with_history(
            json!([entry(1, "rev1", "Promoted", &[format!("web={hash}")])]),
            "rev2",
        );
        let undo = build_undo(&p, &[cr], None).unwrap();
        let t = &undo.patch["spec"]["components"][0]["template"];
        assert_eq!(t, &spec_t);
        let typed: PodTemplateSpec = serde_json::from_value(t.clone()).unwrap();
        assert_eq!(template_hash(&typed), hash);
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
        let crs = [web1];
        assert_eq!(build_undo(&p, &crs, Some(1)).unwrap().entry.number, 1);
        assert_eq!(
            build_undo(&p, &crs, Some(9)).unwrap_err(),
            UndoError::NoEntry(9, "1 (Promoted), 2 (RolledBack), 3 (Promoted)".into())
        );
        assert_eq!(
            build_undo(&p, &crs, Some(3)).unwrap_err(),
            UndoError::AlreadyCurrent(3, "rev3".into())
        );
        let err = build_undo(&p, &crs, Some(2)).unwrap_err();
        assert!(
            matches!(&err, UndoError::NotStored { component, hash, .. } if component == "web" && hash == "gonegone00")
        );
        let text = err.to_string();
        assert!(
            text.contains("has no stored template") && text.contains("revisionHistoryLimit, now 3"),
            "{text}"
        );
        assert!(text.contains("revision rev2 cannot be rebuilt"), "{text}");
    }

    #[test]
    fn a_stored_object_of_another_revision_is_refused() {
        let (mut web1, h1) = stored("web", &web_template("web:1"));
        web1.data = Some(web_template("web:666").into());
        let p = plan_with_history(
            json!([entry(1, "rev1", "Promoted", &[format!("web={h1}")])]),
            "rev2",
        );
        let err = build_undo(&p, &[web1], None).unwrap_err();
        assert!(
            matches!(
                &err,
                UndoError::Unusable(StoredError::OtherRevision { wanted, .. }) if wanted == &h1
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("cannot be rebuilt"), "{err}");
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
    fn outcomes_are_compared_as_typed_values() {
        // `h.outcome == "Promted"` must not compile: a string shim on
        // `Outcome` would let a misspelt outcome never match, silently.
        // (An inherent constant wins over the trait's only when the bound holds.)
        struct Probe<T>(std::marker::PhantomData<T>);
        trait NoShim {
            const SHIM: bool = false;
        }
        impl<T> NoShim for Probe<T> {}
        impl<T: PartialEq<&'static str>> Probe<T> {
            const SHIM: bool = true;
        }
        // The probe sees String's comparison with &str, and none on Outcome.
        let shims = [Probe::<String>::SHIM, Probe::<Outcome>::SHIM];
        assert_eq!(shims, [true, false], "Outcome compares with strings");
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
}
