//! The stored template of each component revision: one `apps/v1`
//! ControllerRevision per revision the operator rolls out, as StatefulSet and
//! DaemonSet keep theirs.
//!
//! A revision Deployment holds its template as the API server defaulted it; the
//! ControllerRevision holds the spec's own template, the one that hashes to the
//! revision. So a Deployment deleted by hand can be recreated after the spec
//! has moved on, and `undo` is a lookup rather than a reconstruction. Pure
//! helpers: building, comparing and reading; the controller does the I/O.

use super::deployment::{MANAGED_BY, is_subset, revision_labels};
use crate::api::cached::{CachedRevision, Labelled};
use crate::api::revision::{deployment_name, template_hash};
use crate::api::{LABEL_COMPONENT, LABEL_REVISION, ReleasePlan};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::Resource;
use serde::Deserialize;
use serde_json::Value;

/// Why a ControllerRevision does not give the template of a revision.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoredError {
    /// `data` is missing.
    #[error("ControllerRevision {0} stores no data")]
    NoData(String),
    /// `data` is not a pod template.
    #[error("ControllerRevision {name} does not store a pod template: {reason}")]
    NotATemplate {
        /// The ControllerRevision.
        name: String,
        /// The parse error.
        reason: String,
    },
    /// `data` is a pod template of another revision (written by someone else).
    #[error(
        "ControllerRevision {name} stores a template of revision {found}, not of revision {wanted}"
    )]
    OtherRevision {
        /// The ControllerRevision.
        name: String,
        /// The revision wanted.
        wanted: String,
        /// The revision the stored template hashes to.
        found: String,
    },
}

/// Name of the ControllerRevision of one component revision: the name of its
/// Deployment, so each is found from the other.
pub fn name(plan: &str, component: &str, hash: &str) -> String {
    deployment_name(plan, component, hash)
}

/// The ControllerRevision storing `template` (as `data`) for one component
/// revision, numbered `number`, owned by the plan.
pub fn build(
    plan: &ReleasePlan,
    component: &str,
    hash: &str,
    template: Value,
    number: i64,
) -> ControllerRevision {
    let plan_name = plan.metadata.name.clone().unwrap_or_default();
    let mut labels = revision_labels(&plan_name, component, hash);
    labels.insert(MANAGED_BY.into(), "releaseplan".into());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(&plan_name, component, hash)),
            namespace: plan.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: plan.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(template)),
        revision: number,
    }
}

/// The template a ControllerRevision stores, checked to be that of revision
/// `hash`: it parses as a pod template and hashes to it. Takes the whole
/// object as read from the API server: the cache keeps no `data`.
pub fn template(cr: &ControllerRevision, hash: &str) -> Result<PodTemplateSpec, StoredError> {
    let name = cr.metadata.name.clone().unwrap_or_default();
    let data = cr
        .data
        .as_ref()
        .ok_or_else(|| StoredError::NoData(name.clone()))?;
    checked(name, &data.0, hash)
}

/// `data` (parsed) as the pod template of revision `hash` of the
/// ControllerRevision `name`.
fn checked(name: String, data: &Value, hash: &str) -> Result<PodTemplateSpec, StoredError> {
    let t = PodTemplateSpec::deserialize(data).map_err(|e| StoredError::NotATemplate {
        name: name.clone(),
        reason: e.to_string(),
    })?;
    let found = template_hash(&t);
    if found != hash {
        return Err(StoredError::OtherRevision {
            name,
            wanted: hash.to_string(),
            found,
        });
    }
    Ok(t)
}

/// The ControllerRevision of one component revision among `stored`, by its
/// labels (cached, or read whole).
pub fn find<'a, R: Labelled>(
    stored: impl IntoIterator<Item = &'a R>,
    component: &str,
    hash: &str,
) -> Option<&'a R> {
    stored.into_iter().find(|cr| {
        cr.label(LABEL_COMPONENT) == Some(component) && cr.label(LABEL_REVISION) == Some(hash)
    })
}

/// What to write so that a revision's template is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// It is stored as it should be.
    Nothing,
    /// Apply this object (create it).
    Apply(Box<ControllerRevision>),
    /// It stores the right template but lost labels or its owner (an orphan
    /// of a plan deleted with orphan propagation, adopted by a plan of the
    /// same name): merge-patch this metadata, leaving `data` as it is (it
    /// cannot change, and a respelling of the same template may differ).
    Relabel(Box<ObjectMeta>),
    /// The object of that name stores another template, and `data` cannot
    /// change: delete the object of this uid, then apply the new one.
    Replace {
        /// Uid of the object to delete (a precondition of the delete).
        uid: String,
        /// The object to apply after.
        with: Box<ControllerRevision>,
    },
    /// Another controller holds an object of that name (a deleted plan of the
    /// same name, not yet collected): leave it alone.
    Foreign,
}

/// Look before you write: what to do so that revision `hash` of `component`
/// is stored with `template` (the spec's), given the object of that name, if
/// any. A new object is numbered `number`; an existing one keeps its data and
/// number (the rollout that first rolled the revision out).
pub fn to_write(
    plan: &ReleasePlan,
    component: &str,
    hash: &str,
    template: &PodTemplateSpec,
    number: i64,
    existing: Option<&CachedRevision>,
) -> Write {
    let fresh = || {
        // Serializing a k8s-openapi type cannot fail.
        let data = serde_json::to_value(template).unwrap_or(Value::Null);
        Box::new(build(plan, component, hash, data, number))
    };
    let Some(existing) = existing else {
        return Write::Apply(fresh());
    };
    let uid = plan.metadata.uid.as_deref().unwrap_or_default();
    let foreign = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid != uid);
    if foreign {
        return Write::Foreign;
    }
    if existing.stored.hash() != Some(hash) {
        return Write::Replace {
            uid: existing.metadata.uid.clone().unwrap_or_default(),
            with: fresh(),
        };
    }
    let desired = build(plan, component, hash, Value::Null, existing.revision).metadata;
    match (
        serde_json::to_value(&desired),
        serde_json::to_value(existing.full_metadata()),
    ) {
        (Ok(d), Ok(o)) if is_subset(&d, &o) => Write::Nothing,
        _ => Write::Relabel(Box::new(desired)),
    }
}

/// The merge patch of a [`Write::Relabel`]: labels added, owners set.
pub fn relabel_patch(meta: &ObjectMeta) -> Value {
    serde_json::json!({"metadata": {
        "labels": meta.labels,
        "ownerReferences": meta.owner_references,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LABEL_PLAN;
    use serde_json::json;

    fn plan() -> ReleasePlan {
        serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1"},
            "spec": {"components": [{"name": "web", "replicas": 2,
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "app", "image": "shop:1"}]}}}]}
        }))
        .unwrap()
    }

    fn spec_template() -> PodTemplateSpec {
        plan().spec.components[0].template.clone()
    }

    /// The object as the cache holds it after our apply.
    fn as_stored(cr: &ControllerRevision) -> CachedRevision {
        let mut v = serde_json::to_value(cr).unwrap();
        v["metadata"]["uid"] = json!("cr-1");
        v["metadata"]["resourceVersion"] = json!("7");
        v["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        serde_json::from_value(v).unwrap()
    }

    /// The object as the cache holds it.
    fn cached(cr: &ControllerRevision) -> CachedRevision {
        serde_json::from_value(serde_json::to_value(cr).unwrap()).unwrap()
    }

    #[test]
    fn stores_the_spec_template_owned_and_labelled() {
        let t = spec_template();
        let hash = template_hash(&t);
        let Write::Apply(cr) = to_write(&plan(), "web", &hash, &t, 4, None) else {
            panic!("a missing one is applied");
        };
        assert_eq!(
            cr.metadata.name.as_deref(),
            Some(format!("shop-web-{hash}").as_str())
        );
        assert_eq!(cr.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(cr.revision, 4);
        let labels = cr.metadata.labels.clone().unwrap();
        assert_eq!(labels.get(LABEL_PLAN).map(String::as_str), Some("shop"));
        assert_eq!(labels.get(LABEL_COMPONENT).map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(LABEL_REVISION).map(String::as_str),
            Some(hash.as_str())
        );
        let owner = &cr.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ReleasePlan", "u-1", Some(true))
        );
        assert_eq!(
            cr.data.as_ref().unwrap().0,
            serde_json::to_value(&t).unwrap()
        );
        assert_eq!(template(&cr, &hash), Ok(t));
        assert_eq!(cached(&cr).stored.hash(), Some(hash.as_str()));
    }

    #[test]
    fn an_existing_one_is_left_alone_and_keeps_its_number() {
        let t = spec_template();
        let hash = template_hash(&t);
        let Write::Apply(cr) = to_write(&plan(), "web", &hash, &t, 1, None) else {
            panic!()
        };
        let stored = as_stored(&cr);
        assert_eq!(
            to_write(&plan(), "web", &hash, &t, 9, Some(&stored)),
            Write::Nothing
        );
        // The same revision spelled otherwise (an empty list): data cannot
        // change and need not, it is the same revision.
        let mut respelled = t.clone();
        respelled.spec.as_mut().unwrap().volumes = Some(Vec::new());
        assert_eq!(template_hash(&respelled), hash);
        assert_eq!(
            to_write(&plan(), "web", &hash, &respelled, 9, Some(&stored)),
            Write::Nothing
        );
        // Orphaned (plan deleted with orphan propagation, then made again): adopted.
        let mut orphan = stored.clone();
        orphan.metadata.owner_references = None;
        let Write::Relabel(adopted) = to_write(&plan(), "web", &hash, &t, 9, Some(&orphan)) else {
            panic!("an orphan is adopted")
        };
        let patch = relabel_patch(&adopted);
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(patch["metadata"]["labels"][LABEL_PLAN], "shop");
        assert!(patch.get("data").is_none(), "data is left as stored");
    }

    #[test]
    fn another_template_under_the_name_is_replaced_and_a_foreign_one_left() {
        let t = spec_template();
        let hash = template_hash(&t);
        let Write::Apply(cr) = to_write(&plan(), "web", &hash, &t, 1, None) else {
            panic!()
        };
        let evil = json!({"spec": {"containers": [{"name": "x", "image": "evil"}]}});
        let mut other = as_stored(&cr);
        other.stored = crate::api::cached::StoredTemplate::of(Some(&evil));
        match to_write(&plan(), "web", &hash, &t, 2, Some(&other)) {
            Write::Replace { uid, with } => {
                assert_eq!(uid, "cr-1");
                assert_eq!(template(&with, &hash), Ok(t.clone()));
            }
            w => panic!("{w:?}"),
        }
        let mut other_whole = (*cr).clone();
        other_whole.data = Some(RawExtension(evil));
        assert!(matches!(
            template(&other_whole, &hash),
            Err(StoredError::OtherRevision { .. })
        ));
        let mut foreign = as_stored(&cr);
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "u-old".into();
        assert_eq!(
            to_write(&plan(), "web", &hash, &t, 2, Some(&foreign)),
            Write::Foreign
        );
    }

    #[test]
    fn finds_by_component_and_revision() {
        let t = spec_template();
        let hash = template_hash(&t);
        let cr = cached(&build(
            &plan(),
            "web",
            &hash,
            serde_json::to_value(&t).unwrap(),
            1,
        ));
        let api = cached(&build(&plan(), "api", &hash, json!({}), 1));
        let all = [api, cr.clone()];
        assert_eq!(find(&all, "web", &hash), Some(&cr));
        assert_eq!(find(&all, "web", "other"), None);
        let mut empty = build(&plan(), "web", &hash, json!({}), 1);
        empty.data = None;
        assert!(matches!(
            template(&empty, &hash),
            Err(StoredError::NoData(_))
        ));
        let mut bad = empty;
        bad.data = Some(RawExtension(json!({"spec": "no"})));
        assert!(matches!(
            template(&bad, &hash),
            Err(StoredError::NotATemplate { .. })
        ));
    }
}
