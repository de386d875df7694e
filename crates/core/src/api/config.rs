//! Config released with the code: `spec.components[].config`, what each
//! revision carries (`status.components[].config`), and the cached form of
//! the ConfigMaps and Secrets the operator watches (a content digest, never
//! the values).
//!
//! The ConfigMaps and Secrets a component's pod template references are
//! versioned with the revision: the operator copies each into an immutable
//! object named by its content, and the revision's template reads the copy.
//! docs/decisions.md ("Config: what the template references, copied by
//! content") says why this shape.

use super::revision::hash_value;
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::KubeSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Annotation on a copy: the name of the ConfigMap or Secret it copies.
pub const ANNOTATION_CONFIG_SOURCE: &str = "releaseplan.io/config-source";
/// Annotation on a copy: the digest of its content.
pub const ANNOTATION_CONFIG_DIGEST: &str = "releaseplan.io/config-digest";
/// Secret types never copied: the API server or kubelet fills or reads them
/// live (a copy of a service-account token would be a second, stale token).
pub const LIVE_SECRET_TYPES: &[&str] = &[
    "kubernetes.io/service-account-token",
    "kubernetes.io/dockercfg",
    "kubernetes.io/dockerconfigjson",
    "bootstrap.kubernetes.io/token",
];

/// How a component's ConfigMaps and Secrets are released.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentConfig {
    /// Version the ConfigMaps and Secrets the template references with the revision
    /// (default true): a change to their content starts a rollout like an image change,
    /// and each revision's pods read an immutable copy. False: every reference is read
    /// live, as a plain Deployment's.
    #[serde(default = "versioned_default")]
    pub versioned: bool,

    /// References read live, not versioned: a Secret rotated by another controller
    /// (cert-manager, an external-secrets operator) that every pod must see at once,
    /// or a large object that must not be copied per revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub live: Vec<LiveConfig>,
}

fn versioned_default() -> bool {
    true
}

impl Default for ComponentConfig {
    fn default() -> Self {
        ComponentConfig {
            versioned: true,
            live: Vec::new(),
        }
    }
}

/// One reference read live: name a ConfigMap or a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("has(self.configMap) != has(self.secret)").message("config.live: name exactly one of configMap or secret")
)]
#[serde(rename_all = "camelCase")]
pub struct LiveConfig {
    /// A ConfigMap the template references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub config_map: Option<String>,
    /// A Secret the template references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret: Option<String>,
}

/// ConfigMap or Secret.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum ConfigKind {
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 Secret.
    Secret,
}

impl ConfigKind {
    /// The kind's name, as in a manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
        }
    }

    /// The short form `kubectl get` takes: `configmap`, `secret`.
    pub fn short(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "configmap",
            ConfigKind::Secret => "secret",
        }
    }
}

impl std::fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One ConfigMap or Secret a revision reads: names and a short digest of its
/// content, never a value.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct CarriedConfig {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// The object the template names (yours, as git wrote it).
    pub name: String,
    /// Digest of its content when the revision was made (absent when read live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The immutable copy the revision's pods read (absent when read live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<String>,
    /// Read live: listed in `config.live`, `config.versioned` is false, or a Secret type
    /// that is never copied. Pods of every revision see its changes at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
}

impl std::fmt::Display for CarriedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.short(), self.name)?;
        match (&self.digest, self.live) {
            (_, true) => f.write_str(" (live)"),
            (Some(d), false) => write!(f, "@{d}"),
            (None, false) => Ok(()),
        }
    }
}

/// Digest of a ConfigMap's or Secret's content: its `data`, `binaryData` and
/// (for a Secret) `type`, in the wire form (base64 for bytes), canonical.
/// Names, labels and annotations are not content: relabelling a ConfigMap
/// does not start a rollout.
pub fn digest(kind: ConfigKind, data: &Value, binary_data: &Value, type_: Option<&str>) -> String {
    hash_value(&json!({
        "kind": kind.as_str(),
        "data": data,
        "binaryData": binary_data,
        "type": type_,
    }))
}

/// A ConfigMap or Secret as the operator caches it: its metadata (name,
/// labels and annotations of a copy) and the digest of its content. The
/// content itself is hashed while decoding and never kept: a Secret's
/// values are not in the operator's memory beyond one decode.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedConfig<K> {
    /// Metadata, without labels and annotations: of those only what makes a
    /// copy is read, kept in the two fields below (two maps of one entry
    /// each were most of a cached copy: 2000 copies at 1000 plans).
    pub metadata: ObjectMeta,
    /// The plan label's value, if any.
    pub plan: Option<Box<str>>,
    /// The config-source annotation's value, if any.
    pub source: Option<Box<str>>,
    /// [`digest`] of the content.
    pub digest: String,
    /// A Secret's `type`.
    pub secret_type: Option<String>,
    kind: std::marker::PhantomData<K>,
}

/// Marker of a cached ConfigMap.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigMapKind;
/// Marker of a cached Secret.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SecretKind;

/// A cached ConfigMap.
pub type CachedConfigMap = CachedConfig<ConfigMapKind>;
/// A cached Secret.
pub type CachedSecret = CachedConfig<SecretKind>;

/// Which kind a marker stands for.
pub trait KindOf {
    /// The kind.
    const KIND: ConfigKind;
}

impl KindOf for ConfigMapKind {
    const KIND: ConfigKind = ConfigKind::ConfigMap;
}

impl KindOf for SecretKind {
    const KIND: ConfigKind = ConfigKind::Secret;
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigWire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    binary_data: Value,
    #[serde(default, rename = "type")]
    type_: Option<String>,
}

impl<'de, K: KindOf> Deserialize<'de> for CachedConfig<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = ConfigWire::deserialize(d)?;
        let mut metadata = w.metadata;
        metadata.managed_fields = None;
        let plan = metadata
            .labels
            .take()
            .and_then(|mut l| l.remove(super::LABEL_PLAN))
            .map(String::into_boxed_str);
        let source = metadata
            .annotations
            .take()
            .and_then(|mut a| a.remove(ANNOTATION_CONFIG_SOURCE))
            .map(String::into_boxed_str);
        Ok(CachedConfig {
            digest: digest(K::KIND, &w.data, &w.binary_data, w.type_.as_deref()),
            metadata,
            plan,
            source,
            secret_type: w.type_,
            kind: std::marker::PhantomData,
        })
    }
}

impl<K> CachedConfig<K> {
    /// The source this object is a copy of, when it is a copy made for plan
    /// `plan` (labelled with the plan, annotated with its source).
    pub fn copy_of(&self, plan: &str) -> Option<&str> {
        if self.plan.as_deref() != Some(plan) {
            return None;
        }
        self.source.as_deref()
    }

    /// Whether it is a Secret of a type never copied.
    pub fn always_live(&self) -> bool {
        self.secret_type
            .as_deref()
            .is_some_and(|t| LIVE_SECRET_TYPES.contains(&t))
    }
}

super::cached::namespaced_resource!(CachedConfigMap, "v1", "", "ConfigMap", "v1", "configmaps");
super::cached::namespaced_resource!(CachedSecret, "v1", "", "Secret", "v1", "secrets");

/// Only the plan label is kept (the plan index and the shard filter read it).
impl<K> super::cached::Labelled for CachedConfig<K> {
    fn label(&self, key: &str) -> Option<&str> {
        if key == super::LABEL_PLAN {
            self.plan.as_deref()
        } else {
            None
        }
    }
}

/// The content of a ConfigMap or Secret as read in full (to copy it), in the
/// wire form [`digest`] takes.
pub fn digest_of_map(cm: &k8s_openapi::api::core::v1::ConfigMap) -> String {
    digest(
        ConfigKind::ConfigMap,
        &serde_json::to_value(&cm.data).unwrap_or(Value::Null),
        &serde_json::to_value(&cm.binary_data).unwrap_or(Value::Null),
        None,
    )
}

/// [`digest_of_map`] for a Secret.
pub fn digest_of_secret(s: &k8s_openapi::api::core::v1::Secret) -> String {
    digest(
        ConfigKind::Secret,
        &serde_json::to_value(&s.data).unwrap_or(Value::Null),
        &Value::Null,
        s.type_.as_deref(),
    )
}

/// The versioned config the components read, one `component: kind/name@digest`
/// each (what `status.history[].config` records and `history` prints).
pub fn summary(components: &[super::ComponentStatus]) -> Vec<String> {
    components
        .iter()
        .flat_map(|c| {
            c.config
                .iter()
                .filter(|k| !k.live)
                .map(move |k| format!("{}: {k}", c.name))
        })
        .collect()
}

/// A ConfigMap or Secret, by kind and name.
pub type ConfigRef = (ConfigKind, String);

/// Calls `f` with each ConfigMap or Secret reference of a pod spec (kind,
/// the name to read or rewrite, whether it is optional): volumes (also
/// projected), `env[].valueFrom` and `envFrom` of every container and init
/// container. Image pull secrets are not config: the kubelet reads them.
pub fn for_each_ref(spec: &mut PodSpec, f: &mut impl FnMut(ConfigKind, &mut String, bool)) {
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(cm) = v.config_map.as_mut() {
            f(
                ConfigKind::ConfigMap,
                &mut cm.name,
                cm.optional == Some(true),
            );
        }
        if let Some(s) = v.secret.as_mut()
            && let Some(name) = s.secret_name.as_mut()
        {
            f(ConfigKind::Secret, name, s.optional == Some(true));
        }
        for p in v
            .projected
            .iter_mut()
            .flat_map(|p| p.sources.iter_mut().flatten())
        {
            if let Some(cm) = p.config_map.as_mut() {
                f(
                    ConfigKind::ConfigMap,
                    &mut cm.name,
                    cm.optional == Some(true),
                );
            }
            if let Some(s) = p.secret.as_mut() {
                f(ConfigKind::Secret, &mut s.name, s.optional == Some(true));
            }
        }
    }
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        for e in c.env.iter_mut().flatten() {
            let Some(from) = e.value_from.as_mut() else {
                continue;
            };
            if let Some(r) = from.config_map_key_ref.as_mut() {
                f(ConfigKind::ConfigMap, &mut r.name, r.optional == Some(true));
            }
            if let Some(r) = from.secret_key_ref.as_mut() {
                f(ConfigKind::Secret, &mut r.name, r.optional == Some(true));
            }
        }
        for e in c.env_from.iter_mut().flatten() {
            if let Some(r) = e.config_map_ref.as_mut() {
                f(ConfigKind::ConfigMap, &mut r.name, r.optional == Some(true));
            }
            if let Some(r) = e.secret_ref.as_mut() {
                f(ConfigKind::Secret, &mut r.name, r.optional == Some(true));
            }
        }
    }
}

/// The ConfigMaps and Secrets a pod template references.
pub fn references(template: &PodTemplateSpec) -> BTreeSet<ConfigRef> {
    template.spec.clone().map(references_in).unwrap_or_default()
}

/// [`references`] of a pod spec the caller no longer needs (not copied).
pub fn references_in(mut spec: PodSpec) -> BTreeSet<ConfigRef> {
    let mut out = BTreeSet::new();
    for_each_ref(&mut spec, &mut |kind, name, _| {
        out.insert((kind, name.clone()));
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    #[test]
    fn the_cached_digest_is_the_full_objects() {
        let v = json!({"metadata": {"name": "c", "namespace": "n",
            "managedFields": [{"manager": "kubectl"}]},
            "data": {"a": "1", "b": "2"}, "binaryData": {"z": "AAEC"}});
        let cached: CachedConfigMap = serde_json::from_value(v.clone()).unwrap();
        let full: ConfigMap = serde_json::from_value(v).unwrap();
        assert_eq!(cached.digest, digest_of_map(&full));
        assert!(cached.metadata.managed_fields.is_none());

        let v = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"p": "c2VjcmV0"}});
        let cached: CachedSecret = serde_json::from_value(v.clone()).unwrap();
        let full: Secret = serde_json::from_value(v).unwrap();
        assert_eq!(cached.digest, digest_of_secret(&full));
    }

    #[test]
    fn content_not_metadata_makes_the_digest() {
        let a = digest(
            ConfigKind::ConfigMap,
            &json!({"a": "1"}),
            &Value::Null,
            None,
        );
        let b = digest(
            ConfigKind::ConfigMap,
            &json!({"a": "2"}),
            &Value::Null,
            None,
        );
        let c = digest(ConfigKind::Secret, &json!({"a": "1"}), &Value::Null, None);
        assert_ne!(a, b);
        assert_ne!(a, c);
        let relabelled: CachedConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "x", "labels": {"team": "a"}}, "data": {"a": "1"}}),
        )
        .unwrap();
        assert_eq!(relabelled.digest, a);
    }

    #[test]
    fn carried_config_shows_no_value() {
        let c = CarriedConfig {
            kind: ConfigKind::Secret,
            name: "db".into(),
            digest: Some("abc".into()),
            copy: Some("db-xyz".into()),
            live: false,
        };
        assert_eq!(c.to_string(), "secret/db@abc");
    }
}
