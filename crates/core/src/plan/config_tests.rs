//! Config released with the code, in the simulation: a content change is a
//! new revision through the steps, each revision keeps reading its own copy,
//! a rollback returns to the stable revision's copy, a missing object holds
//! the plan, and a plan made before config was versioned does not roll out
//! when the operator is upgraded.

use super::*;
use crate::api::config::{CarriedConfig, ComponentConfig, ConfigKind, LiveConfig};
use crate::plan::config::{ConfigObs, copy_name, references};

/// `web` reads ConfigMap `web-config` through envFrom and Secret `web-db`
/// through a volume.
fn config_template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {
            "containers": [{"name": "app", "image": image,
                "envFrom": [{"configMapRef": {"name": "web-config"}}]}],
            "volumes": [{"name": "db", "secret": {"secretName": "web-db"}}]
        }
    }))
    .unwrap()
}

fn config_spec() -> ReleasePlanSpec {
    let mut s = canary_spec();
    s.components[0].template = config_template("shop:1");
    s
}

impl Sim {
    /// The user writes a ConfigMap or Secret (as git would).
    fn write_config(&mut self, kind: ConfigKind, name: &str, content: &str) {
        self.config.insert(
            (kind, name.to_string()),
            ConfigObs {
                digest: content.to_string(),
                copy_of: None,
                always_live: false,
            },
        );
    }

    /// Rolls the spec's change out to Stable, promoting past the pauses.
    fn release(&mut self) {
        self.settle();
        self.ask(Action::Promote { full: true });
        self.settle();
        assert_eq!(self.status.phase, Phase::Stable);
    }

    /// The names each revision Deployment of `web` reads, by hash.
    fn reads(&self, hash: &str) -> BTreeSet<config::ConfigRef> {
        self.revision_config.get(hash).cloned().unwrap_or_default()
    }
}

fn with_config() -> Sim {
    let mut sim = Sim::new(config_spec());
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v1");
    sim.write_config(ConfigKind::Secret, "web-db", "s1");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    sim
}

fn copy(kind: ConfigKind, source: &str, content: &str) -> config::ConfigRef {
    (kind, copy_name("shop", kind, source, content))
}

#[test]
fn each_revision_reads_copies_named_by_content() {
    let sim = with_config();
    let h = sim.hash_of("web");
    assert_ne!(
        h,
        revision::template_hash(&config_template("shop:1")),
        "the content is part of the revision"
    );
    let cm = copy(ConfigKind::ConfigMap, "web-config", "v1");
    let secret = copy(ConfigKind::Secret, "web-db", "s1");
    assert_eq!(sim.reads(&h), BTreeSet::from([cm.clone(), secret.clone()]));
    assert!(sim.config.contains_key(&cm) && sim.config.contains_key(&secret));
    let carried = &sim.status.components[0].config;
    assert_eq!(carried.len(), 2);
    assert!(carried.iter().all(|c| !c.live && c.copy.is_some()));
    assert_eq!(
        sim.config[&(ConfigKind::ConfigMap, "web-config".into())].copy_of,
        None,
        "the user's object is never written"
    );
}

#[test]
fn a_config_only_change_rolls_out_through_the_steps_and_old_pods_keep_their_copy() {
    let mut sim = with_config();
    let old = sim.hash_of("web");
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v2");
    let new = sim.hash_of("web");
    assert_ne!(old, new);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.status.current_step, 1, "held at the pause");
    assert_eq!((sim.at("web", &new), sim.at("web", &old)), (2, 8));
    assert!(
        sim.reads(&old)
            .contains(&copy(ConfigKind::ConfigMap, "web-config", "v1"))
    );
    assert!(
        sim.reads(&new)
            .contains(&copy(ConfigKind::ConfigMap, "web-config", "v2"))
    );
}

#[test]
fn a_failed_config_and_image_release_rolls_back_to_both() {
    let mut sim = with_config();
    let old = sim.hash_of("web");
    sim.spec.components[0].template = config_template("shop:2");
    sim.generation += 1;
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v2");
    let bad = sim.hash_of("web");
    sim.crashing.insert(bad.clone());
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!((sim.at("web", &old), sim.at("web", &bad)), (10, 0));
    assert!(
        sim.reads(&old)
            .contains(&copy(ConfigKind::ConfigMap, "web-config", "v1")),
        "the stable revision reads its own config"
    );
    assert!(
        sim.config
            .contains_key(&copy(ConfigKind::ConfigMap, "web-config", "v1")),
        "the stable revision's copy is kept"
    );
}

#[test]
fn undo_to_a_template_naming_the_copies_is_the_old_revision() {
    let mut sim = with_config();
    let old = sim.hash_of("web");
    let old_template = (*sim.templates()["web"]).clone();
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v2");
    sim.release();
    assert_ne!(sim.hash_of("web"), old);
    // `undo` writes the stored template (naming the copies) into the spec.
    sim.spec.components[0].template = old_template;
    sim.generation += 1;
    assert_eq!(sim.hash_of("web"), old, "the old revision, with its config");
    let carried = &sim.target().0.unwrap().components[0].config;
    assert!(
        carried.iter().any(|c| c.name == "web-config"
            && c.digest.as_deref() == Some("v1")
            && c.copy.is_some())
    );
}

#[test]
fn a_missing_object_holds_the_plan_until_it_exists() {
    let mut sim = Sim::new(config_spec());
    sim.write_config(ConfigKind::Secret, "web-db", "s1");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Pending);
    assert!(
        sim.deployments.is_empty(),
        "no revision whose pods cannot start"
    );
    assert!(sim.has_event("ConfigMissing"));
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("True"));
    let msg = sim.status.message.clone().unwrap();
    assert!(msg.contains("ConfigMap \"web-config\""), "{msg}");
    let events = sim.events.len();
    sim.settle();
    assert_eq!(sim.events.len(), events, "one event, not one per reconcile");
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v1");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
}

#[test]
fn a_deleted_source_keeps_the_copy_its_revision_reads() {
    let mut sim = with_config();
    let h = sim.hash_of("web");
    sim.config
        .remove(&(ConfigKind::ConfigMap, "web-config".to_string()));
    assert_eq!(sim.hash_of("web"), h);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &h), 10);
}

#[test]
fn live_references_and_unversioned_components_are_read_in_place() {
    let mut s = config_spec();
    s.components[0].config = Some(ComponentConfig {
        versioned: true,
        live: vec![LiveConfig {
            config_map: None,
            secret: Some("web-db".into()),
        }],
    });
    let mut sim = Sim::new(s);
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v1");
    sim.write_config(ConfigKind::Secret, "web-db", "s1");
    sim.settle();
    let h = sim.hash_of("web");
    assert!(
        sim.reads(&h)
            .contains(&(ConfigKind::Secret, "web-db".to_string()))
    );
    sim.write_config(ConfigKind::Secret, "web-db", "s2");
    assert_eq!(
        sim.hash_of("web"),
        h,
        "a live Secret's change is no release"
    );

    sim.spec.components[0].config = Some(ComponentConfig {
        versioned: false,
        live: Vec::new(),
    });
    assert_eq!(
        sim.hash_of("web"),
        revision::template_hash(&config_template("shop:1"))
    );
}

#[test]
fn an_upgrade_from_a_release_without_config_versioning_starts_no_rollout() {
    // The plan as an older operator left it: Stable on the unrewritten
    // template's hash, with no config recorded.
    let mut sim = with_config();
    let raw = revision::template_hash(&config_template("shop:1"));
    sim.spec.components[0].config = Some(ComponentConfig {
        versioned: false,
        live: Vec::new(),
    });
    sim.release();
    assert_eq!(sim.hash_of("web"), raw);
    sim.spec.components[0].config = None;
    for c in &mut sim.status.components {
        c.config.clear();
    }
    assert_eq!(sim.hash_of("web"), raw, "no new revision after the upgrade");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert!(
        sim.status.components[0]
            .config
            .iter()
            .all(|c: &CarriedConfig| c.copy.is_none())
    );
    // The first content change after the upgrade is released, with copies.
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v2");
    assert_ne!(sim.hash_of("web"), raw);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
}

#[test]
fn unused_copies_are_deleted_once_settled_and_their_revision_is_gone() {
    let mut s = config_spec();
    s.revision_history_limit = Some(0);
    let mut sim = Sim::new(s);
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v1");
    sim.write_config(ConfigKind::Secret, "web-db", "s1");
    sim.settle();
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v2");
    sim.release();
    assert!(
        !sim.config
            .contains_key(&copy(ConfigKind::ConfigMap, "web-config", "v1")),
        "the pruned revision's copy goes with it"
    );
    assert!(
        sim.config
            .contains_key(&copy(ConfigKind::ConfigMap, "web-config", "v2"))
    );
    assert!(
        sim.config
            .contains_key(&copy(ConfigKind::Secret, "web-db", "s1")),
        "a copy the current revision still reads stays"
    );
}

#[test]
fn references_are_found_everywhere_a_pod_reads_config() {
    let t: PodTemplateSpec = serde_json::from_value(json!({"spec": {
        "containers": [{"name": "a", "image": "x",
            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "k"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
            "envFrom": [{"secretRef": {"name": "s2"}}]}],
        "initContainers": [{"name": "i", "image": "x",
            "envFrom": [{"configMapRef": {"name": "cm2"}}]}],
        "imagePullSecrets": [{"name": "pull"}],
        "volumes": [{"name": "p", "projected": {"sources": [
            {"configMap": {"name": "cm3"}}, {"secret": {"name": "s3"}}]}},
            {"name": "v", "configMap": {"name": "cm4"}}]
    }}))
    .unwrap();
    let names: Vec<String> = references(&t).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["cm1", "cm2", "cm3", "cm4", "s1", "s2", "s3"]);
}

#[test]
fn copy_names_fit_and_differ_by_plan_and_content() {
    let long = "c".repeat(253);
    let n = copy_name("shop", ConfigKind::ConfigMap, &long, "d");
    assert!(n.len() <= 253, "{}", n.len());
    assert_ne!(
        copy_name("shop", ConfigKind::ConfigMap, "a", "d"),
        copy_name("cart", ConfigKind::ConfigMap, "a", "d")
    );
    assert_ne!(
        copy_name("shop", ConfigKind::ConfigMap, "a", "d1"),
        copy_name("shop", ConfigKind::ConfigMap, "a", "d2")
    );
}

/// The first reconcile creates the copies; decided again once they show (the
/// landing of its status write), the decision has nothing new to do: fewer
/// copies to create is the same work, done. A copy it did not ask for is new.
#[test]
fn a_decision_after_its_copies_were_made_repeats_it() {
    let mut sim = Sim::new(config_spec());
    sim.write_config(ConfigKind::ConfigMap, "web-config", "v1");
    sim.write_config(ConfigKind::Secret, "web-db", "s1");
    let first = sim.reconcile();
    assert_eq!(first.config.create.len(), 2);
    let again = decide(&sim.observe(), &sim.templates());
    assert!(again.config.create.is_empty());
    assert!(again.repeats(&first, &sim.status));
    let mut more = again.clone();
    more.config.create.push(config::CopyIntent {
        kind: ConfigKind::ConfigMap,
        name: "other".into(),
        source: "other-src".into(),
        digest: "d".into(),
    });
    assert!(!more.repeats(&first, &sim.status));
}

/// The names a versioned template reads decide it: a memo of its hash is
/// keyed by them (with the plan's generation). In every situation below,
/// two versionings name the same objects exactly when they rewrite the
/// template the same way.
#[test]
fn the_names_read_decide_the_rewritten_template() {
    let spec = config_spec();
    let component = &spec.components[0];
    let obs = |entries: &[(ConfigKind, &str, &str, Option<&str>)]| config::ConfigObservation {
        objects: entries
            .iter()
            .map(|(kind, name, digest, copy_of)| {
                (
                    (*kind, name.to_string()),
                    ConfigObs {
                        digest: digest.to_string(),
                        copy_of: copy_of.map(str::to_string),
                        always_live: false,
                    },
                )
            })
            .collect(),
        ..Default::default()
    };
    let cm = copy(ConfigKind::ConfigMap, "web-config", "v1");
    let recorded = [CarriedConfig {
        kind: ConfigKind::ConfigMap,
        name: "web-config".into(),
        digest: Some("v1".into()),
        copy: Some(cm.1.clone()),
        live: false,
    }];
    let situations = [
        config::version("shop", component, &obs(&[]), &[]),
        config::version(
            "shop",
            component,
            &obs(&[(ConfigKind::ConfigMap, "web-config", "v1", None)]),
            &[],
        ),
        config::version(
            "shop",
            component,
            &obs(&[
                (ConfigKind::ConfigMap, "web-config", "v1", None),
                (ConfigKind::Secret, "web-db", "s1", None),
            ]),
            &[],
        ),
        config::version(
            "shop",
            component,
            &obs(&[
                (ConfigKind::ConfigMap, "web-config", "v2", None),
                (ConfigKind::Secret, "web-db", "s1", None),
            ]),
            &[],
        ),
        // The source gone, its copy kept: the same names as with content v1.
        config::version(
            "shop",
            component,
            &obs(&[
                (ConfigKind::ConfigMap, &cm.1, "v1", Some("web-config")),
                (ConfigKind::Secret, "web-db", "s1", None),
            ]),
            &recorded,
        ),
        config::version(
            "shop",
            component,
            &config::ConfigObservation {
                disabled: true,
                ..obs(&[(ConfigKind::ConfigMap, "web-config", "v1", None)])
            },
            &[],
        ),
    ];
    let rewritten = |v: &config::Versioned| {
        revision::template_hash(v.template.as_ref().unwrap_or(&component.template))
    };
    // Volumes first, then the containers' references.
    assert_eq!(situations[0].renamed, ["web-db", "web-config"]);
    assert_eq!(situations[2].renamed[1], cm.1);
    assert_eq!(situations[2].renamed, situations[4].renamed);
    for a in &situations {
        assert_eq!(a.renamed.len(), 2);
        for b in &situations {
            assert_eq!(
                a.renamed == b.renamed,
                rewritten(a) == rewritten(b),
                "{:?} and {:?}",
                a.renamed,
                b.renamed
            );
        }
    }
}

fn config_versioned(
    sim: &Sim,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    sim.status
        .conditions
        .iter()
        .find(|c| c.type_ == config::CONFIG_VERSIONED)
}

#[test]
fn losing_access_to_the_namespace_starts_no_rollout_and_says_so_once() {
    // Released with copies; then the namespace leaves --config-namespaces
    // (the chart upgrade that made "none" the default).
    let mut sim = with_config();
    let versioned = sim.hash_of("web");
    assert!(
        config_versioned(&sim).is_none(),
        "nothing to say while versioned"
    );
    sim.config_denied = true;
    assert_eq!(
        sim.hash_of("web"),
        versioned,
        "the revision keeps the copies status records: no new revision"
    );
    let before = sim.events.len();
    sim.settle();
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &versioned), 10);
    // Every reference has a recorded copy: nothing is read live, nothing to say.
    assert!(config_versioned(&sim).is_none());
    assert_eq!(sim.events.len(), before);
    // The copies stay: without access nothing is pruned.
    let last = sim.last.as_ref().unwrap();
    assert!(last.config.create.is_empty() && last.config.delete.is_empty());

    // A reference added without access is read live, and the plan says so,
    // in one Warning, whatever the number of reconciles.
    let mut t = config_template("shop:2");
    let spec = t.spec.as_mut().unwrap();
    spec.containers[0]
        .env_from
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(json!({"secretRef": {"name": "web-extra"}})).unwrap());
    sim.spec.components[0].template = t;
    sim.generation += 1;
    sim.release();
    let new = sim.hash_of("web");
    assert!(
        sim.reads(&new)
            .contains(&copy(ConfigKind::ConfigMap, "web-config", "v1")),
        "the new revision still reads the recorded copy"
    );
    assert!(
        sim.reads(&new)
            .contains(&(ConfigKind::Secret, "web-extra".to_string())),
        "the new reference is read live"
    );
    let c = config_versioned(&sim).expect("ConfigVersioned is set");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ConfigAccessDenied")
    );
    assert!(
        c.message.contains("web: Secret web-extra") && c.message.contains("config.namespaces"),
        "{}",
        c.message
    );
    let warnings = sim
        .events
        .iter()
        .filter(|e| e.reason == EventReason::ConfigNotVersioned)
        .count();
    assert_eq!(warnings, 1, "one Warning, not one per reconcile");

    // Access back: the reference is versioned (a new revision with its
    // copy), and the condition goes.
    sim.config_denied = false;
    sim.write_config(ConfigKind::Secret, "web-extra", "x1");
    assert_ne!(sim.hash_of("web"), new);
    sim.release();
    assert!(config_versioned(&sim).is_none());
}

#[test]
fn a_denied_namespace_reads_every_reference_live_from_the_first_release() {
    let mut sim = Sim::new(config_spec());
    sim.config_denied = true;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable, "not held: read live");
    assert_eq!(
        sim.hash_of("web"),
        revision::template_hash(&config_template("shop:1")),
        "the spec's own template, unrewritten"
    );
    let c = config_versioned(&sim).expect("ConfigVersioned is set");
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("web: ConfigMap web-config") && c.message.contains("web: Secret web-db"),
        "{}",
        c.message
    );
    // A component that reads its config live by choice has nothing to say.
    let mut sim = Sim::new(config_spec());
    sim.spec.components[0].config = Some(ComponentConfig {
        versioned: false,
        live: Vec::new(),
    });
    sim.config_denied = true;
    sim.settle();
    assert!(config_versioned(&sim).is_none());
}
