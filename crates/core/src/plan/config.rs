//! Config released with the code, decided purely: which ConfigMaps and
//! Secrets each component's template references, the template its revision
//! runs (each reference pointed at an immutable copy named by the content),
//! and which copies to create and delete.
//!
//! Because a copy's name is derived from its source's content, the template
//! that reads it hashes differently when the content does: a config change
//! is a new revision, through the same steps and gates as an image change,
//! and the revision's stored template keeps pointing at its own copies, so
//! a rollback or `undo` returns to them. The user's objects are only read.

use crate::api::config::{CarriedConfig, ComponentConfig, ConfigKind};
pub use crate::api::config::{ConfigRef, for_each_ref, references};
use crate::api::revision::hash_value;
use crate::api::{Component, ComponentStatus, Phase};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// Longest ConfigMap or Secret name (a DNS subdomain).
const MAX_OBJECT_NAME: usize = 253;

/// One ConfigMap or Secret of the plan's namespace, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigObs {
    /// Digest of its content ([`crate::api::config::digest`]).
    pub digest: String,
    /// The source it copies, when it is one of this plan's copies.
    pub copy_of: Option<String>,
    /// A Secret of a type never copied (service-account token, pull secret).
    pub always_live: bool,
}

/// What the controller saw of config: the objects the plan's templates
/// reference and the plan's own copies, and which copies its kept
/// revisions (Deployments and stored templates) still read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigObservation {
    /// Referenced objects that exist, and every copy made for the plan.
    pub objects: BTreeMap<ConfigRef, ConfigObs>,
    /// Copies a kept revision of the plan references.
    pub in_use: BTreeSet<ConfigRef>,
    /// The operator runs with config versioning off (`--config-versioning=false`,
    /// without the RBAC to watch ConfigMaps and Secrets): every reference is
    /// read live.
    pub disabled: bool,
    /// The operator may not read or copy config in the plan's namespace
    /// (`--config-namespaces` does not name it, or its RBAC is missing there):
    /// nothing is observed, nothing is copied or pruned, and each reference
    /// reads the copy its recorded revision reads, else the object live.
    pub denied: bool,
}

/// Name of the copy of `source` with content `digest` made for `plan`:
/// `<source>-<hash>`, the hash over plan, kind, source and content, so two
/// plans reading one ConfigMap own a copy each and a changed content is a
/// new name. Shortened to a valid object name when `source` is long.
pub fn copy_name(plan: &str, kind: ConfigKind, source: &str, digest: &str) -> String {
    let hash = hash_value(&json!([plan, kind.as_str(), source, digest]));
    let keep = MAX_OBJECT_NAME - 1 - hash.len();
    let prefix: String = source.chars().take(keep).collect();
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// A component's config, versioned: the template its revision runs (`None`
/// when no reference is rewritten) and what it carries.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Versioned {
    /// The spec's template with each versioned reference pointed at its copy.
    pub template: Option<PodTemplateSpec>,
    /// Each referenced object: digest and copy, or read live.
    pub carried: Vec<CarriedConfig>,
    /// Required references that exist neither as an object nor as a copy
    /// the component already reads.
    pub missing: Vec<ConfigRef>,
    /// The name each config reference of the template reads, in the
    /// template's order: with the spec's template, all the rewritten
    /// template depends on (a memo of its hash is keyed by it).
    pub renamed: Vec<String>,
    /// References read live only because the operator may not read config
    /// in the namespace ([`ConfigObservation::denied`]): the plan says so.
    pub unversioned: Vec<ConfigRef>,
}

fn is_live(cfg: &ComponentConfig, disabled: bool, kind: ConfigKind, name: &str) -> bool {
    disabled
        || !cfg.versioned
        || cfg.live.iter().any(|l| match kind {
            ConfigKind::ConfigMap => l.config_map.as_deref() == Some(name),
            ConfigKind::Secret => l.secret.as_deref() == Some(name),
        })
}

/// Versions the config of one component of plan `plan`. `recorded` is what
/// status says the component's revision carries: when a source is deleted
/// after its copy was made, the component keeps reading that copy instead of
/// holding the plan.
pub fn version(
    plan: &str,
    component: &Component,
    seen: &ConfigObservation,
    recorded: &[CarriedConfig],
) -> Versioned {
    let cfg = component.config.clone().unwrap_or_default();
    let mut out = Versioned::default();
    let Some(mut spec) = component.template.spec.clone() else {
        return out;
    };
    let mut rewritten = false;
    let mut carried: BTreeMap<ConfigRef, CarriedConfig> = BTreeMap::new();
    for_each_ref(&mut spec, &mut |kind, name, optional| {
        let key = (kind, name.clone());
        let live = CarriedConfig {
            kind,
            name: name.clone(),
            digest: None,
            copy: None,
            live: true,
        };
        if is_live(&cfg, seen.disabled, kind, name) {
            carried.insert(key, live);
            return;
        }
        if seen.denied {
            // Neither the source nor its copies can be seen: the revision
            // keeps the copy status says it reads (pods read it, the operator
            // need not), so losing access starts no rollout.
            if let Some(r) = recorded
                .iter()
                .find(|r| r.kind == kind && r.name == *name && !r.live && r.copy.is_some())
            {
                carried.insert(key, r.clone());
                *name = r.copy.clone().unwrap_or_default();
                rewritten = true;
            } else {
                if !out.unversioned.contains(&key) {
                    out.unversioned.push(key.clone());
                }
                carried.insert(key, live);
            }
            return;
        }
        match seen.objects.get(&key) {
            Some(o) if o.copy_of.is_some() => {
                // The template names a copy itself (as `undo` writes it).
                let source = o.copy_of.clone().unwrap_or_default();
                carried.insert(
                    (kind, source.clone()),
                    CarriedConfig {
                        kind,
                        name: source,
                        digest: Some(o.digest.clone()),
                        copy: Some(name.clone()),
                        live: false,
                    },
                );
            }
            Some(o) if o.always_live => {
                carried.insert(key, live);
            }
            Some(o) => {
                let copy = copy_name(plan, kind, name, &o.digest);
                carried.insert(
                    key,
                    CarriedConfig {
                        kind,
                        name: name.clone(),
                        digest: Some(o.digest.clone()),
                        copy: Some(copy.clone()),
                        live: false,
                    },
                );
                *name = copy;
                rewritten = true;
            }
            None => {
                let kept = recorded.iter().find(|r| {
                    r.kind == kind
                        && r.name == *name
                        && r.copy
                            .as_ref()
                            .is_some_and(|c| seen.objects.contains_key(&(kind, c.clone())))
                });
                if let Some(r) = kept {
                    carried.insert(key, r.clone());
                    *name = r.copy.clone().unwrap_or_default();
                    rewritten = true;
                } else if !optional && !out.missing.contains(&key) {
                    out.missing.push(key);
                }
            }
        }
    });
    out.carried = carried.into_values().collect();
    for_each_ref(&mut spec, &mut |_, name, _| out.renamed.push(name.clone()));
    if rewritten {
        let mut t = component.template.clone();
        t.spec = Some(spec);
        out.template = Some(t);
    }
    out
}

/// Whether a component whose revision was made by an operator release
/// without config versioning keeps that revision: its status names the
/// spec's unrewritten template (`raw_hash`) and records no copy, and the
/// content it recorded (if any) is still the content. So an upgrade of the
/// operator starts no rollout; the first config change does.
pub fn keeps_unversioned(status: Option<&ComponentStatus>, raw_hash: &str, v: &Versioned) -> bool {
    let Some(s) = status else {
        return false;
    };
    if s.current_hash.as_deref() != Some(raw_hash) {
        return false;
    }
    let recorded: Vec<&CarriedConfig> = s.config.iter().filter(|c| !c.live).collect();
    if recorded.iter().any(|c| c.copy.is_some()) {
        return false;
    }
    recorded.is_empty()
        || v.carried.iter().filter(|c| !c.live).all(|c| {
            recorded
                .iter()
                .any(|r| r.kind == c.kind && r.name == c.name && r.digest == c.digest)
        })
}

/// A copy to create: `name`, with the content of `source` at `digest` (the
/// controller checks the source still has it before copying).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyIntent {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// The object copied.
    pub source: String,
    /// The copy.
    pub name: String,
    /// The content's digest.
    pub digest: String,
}

/// Copies to create and delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigIntents {
    /// Copies the spec's revisions read that do not exist yet.
    pub create: Vec<CopyIntent>,
    /// The plan's copies no kept revision reads (only once settled).
    pub delete: Vec<ConfigRef>,
}

impl ConfigIntents {
    /// Whether these intents ask for nothing `earlier`'s did not: decided
    /// right after `earlier`'s copies were made (and seen as made), fewer
    /// creates are the same work done.
    pub fn within(&self, earlier: &ConfigIntents) -> bool {
        self.create.iter().all(|c| earlier.create.contains(c))
            && self.delete.iter().all(|d| earlier.delete.contains(d))
    }
}

/// What to create and delete: a copy the target carries is created when
/// missing; once the plan is settled, a copy of the plan that neither the
/// target nor any kept revision reads is deleted.
pub fn intents(
    seen: &ConfigObservation,
    carried: &[&CarriedConfig],
    phase: Phase,
    deleting: bool,
) -> ConfigIntents {
    let mut out = ConfigIntents::default();
    // Without access, copies can be neither seen nor written: the ones that
    // exist stay (a revision may read them) until access returns.
    if deleting || seen.denied {
        return out;
    }
    for c in carried {
        let (Some(copy), Some(digest)) = (&c.copy, &c.digest) else {
            continue;
        };
        let key = (c.kind, copy.clone());
        if !seen.objects.contains_key(&key) && !out.create.iter().any(|i| i.name == *copy) {
            out.create.push(CopyIntent {
                kind: c.kind,
                source: c.name.clone(),
                name: copy.clone(),
                digest: digest.clone(),
            });
        }
    }
    if matches!(phase, Phase::Stable | Phase::RolledBack) {
        for (key, o) in &seen.objects {
            let wanted = carried
                .iter()
                .any(|c| c.kind == key.0 && c.copy.as_deref() == Some(key.1.as_str()));
            if o.copy_of.is_some() && !wanted && !seen.in_use.contains(key) {
                out.delete.push(key.clone());
            }
        }
    }
    out
}

/// Condition type set while config the plan references is read live only
/// because the operator may not read it in the plan's namespace: a team that
/// expects each revision to carry its config learns that it does not, and
/// what an administrator changes for it.
pub const CONFIG_VERSIONED: &str = "ConfigVersioned";

/// What [`CONFIG_VERSIONED`] says: the references read live, by component,
/// and the chart value and flag that would grant access.
pub fn unversioned_text(unversioned: &[(String, ConfigRef)]) -> String {
    let names: Vec<String> = unversioned
        .iter()
        .map(|(c, (kind, name))| format!("{c}: {} {name}", kind.as_str()))
        .collect();
    format!(
        "config is read live, not versioned with each revision ({}): the operator may not read ConfigMaps and Secrets in this namespace; a revision made before keeps the copies it reads; an administrator grants access by listing the namespace in the chart value config.namespaces (operator flag --config-namespaces)",
        names.join(", ")
    )
}
