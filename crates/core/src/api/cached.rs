//! Types of objects the operator caches in bulk, holding only what it reads.
//!
//! k8s-openapi's structs keep every optional part inline: an empty `Pod` is
//! 2.4 KB before any heap, whatever the trim leaves in it, and a
//! ControllerRevision's `data` as a `serde_json::Value` costs a B-tree node
//! per JSON object. With thousands of plans these caches are most of the
//! process's memory, so they are decoded straight into these types instead:
//! fields they do not name are skipped while decoding and never stored.
//! Reads only: the operator never writes these types back.

use k8s_openapi::api::apps::v1::DeploymentStatus;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;

use super::foreign::{self, unless_foreign};
use super::{LABEL_PLAN, ReleasePlan, ReleasePlanSpec, ReleasePlanStatus};

/// Implements `k8s_openapi::Resource` and `Metadata` for a namespaced cached
/// type: (type, apiVersion, group, kind, version, plural).
macro_rules! namespaced_resource {
    ($t:ty, $api_version:literal, $group:literal, $kind:literal, $version:literal, $plural:literal) => {
        impl k8s_openapi::Resource for $t {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $t {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use namespaced_resource;

/// An object's labels as one packed text, `key\0value\0key\0value`.
///
/// `ObjectMeta` keeps labels in a `BTreeMap<String, String>`, whose first
/// node is 544 bytes however few labels it holds, and each key and value is
/// an allocation of its own: with four cached objects per plan that was
/// about a fifth of the caches. Labels are read by key among a handful, so a
/// scan of one string is as quick. Neither keys nor values can hold NUL (the
/// API server validates both), so the separator is unambiguous.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<str>);

impl Labels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The labels, in the order they were given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = (!self.0.is_empty()).then(|| self.0.split('\0'));
        std::iter::from_fn(move || {
            let parts = parts.as_mut()?;
            Some((parts.next()?, parts.next()?))
        })
    }

    /// Keeps only the labels `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        let kept: Labels = self.iter().filter(|(k, v)| keep(k, v)).collect();
        *self = kept;
    }

    /// The labels as `ObjectMeta` keeps them (`None` when there are none).
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.0.is_empty()).then(|| {
            self.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Labels {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(iter: I) -> Self {
        let mut text = String::new();
        for (k, v) in iter {
            if !text.is_empty() {
                text.push('\0');
            }
            text.push_str(k);
            text.push('\0');
            text.push_str(v);
        }
        Labels(text.into_boxed_str())
    }
}

/// Decoded straight from the JSON map into the packed text: no `BTreeMap`
/// and no string per key or value in between (every watch event decodes it).
impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Packer;
        impl<'de> serde::de::Visitor<'de> for Packer {
            type Value = Labels;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of label keys to values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Labels, A::Error> {
                let mut text = String::new();
                while map.next_key_seed(Append(&mut text, true))?.is_some() {
                    map.next_value_seed(Append(&mut text, false))?;
                }
                Ok(Labels(text.into_boxed_str()))
            }
        }
        d.deserialize_map(Packer)
    }
}

/// Appends one label key (`true`: after a separator unless first) or value
/// (after the key's separator) to the packed text.
struct Append<'a>(&'a mut String, bool);

impl<'de> serde::de::DeserializeSeed<'de> for Append<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for Append<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a label key or value")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        if !self.1 || !self.0.is_empty() {
            self.0.push('\0');
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// JSON text kept compressed (an LZ4 block, its length first): the caches
/// hold thousands of plan and Deployment specs, each read whole only now and
/// then (a plan's at its reconcile, a Deployment's when it is checked), and a
/// production pod template is about 6 KB of text that packs to about a third.
/// Unpacking 6 KB takes microseconds against the tens a JSON decode takes.
#[derive(Clone, PartialEq, Eq)]
pub struct Packed(Box<[u8]>);

/// Packed text that does not unpack (only a bug or corrupted memory makes one).
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// Not an LZ4 block this type wrote.
    #[error("packed text does not decompress: {0}")]
    Decompress(#[from] lz4_flex::block::DecompressError),
    /// Not UTF-8 once decompressed.
    #[error("packed text is not UTF-8: {0}")]
    Utf8(#[from] std::string::FromUtf8Error),
}

impl Packed {
    /// `text`, packed.
    pub fn pack(text: &str) -> Packed {
        Packed(lz4_flex::block::compress_prepend_size(text.as_bytes()).into_boxed_slice())
    }

    /// The text back.
    pub fn unpack(&self) -> Result<String, UnpackError> {
        let bytes = lz4_flex::block::decompress_size_prepended(&self.0)?;
        Ok(String::from_utf8(bytes)?)
    }

    /// Bytes held.
    pub fn packed_len(&self) -> usize {
        self.0.len()
    }
}

impl Default for Packed {
    fn default() -> Self {
        Packed::pack("")
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.unpack() {
            Ok(text) => write!(f, "Packed({text})"),
            Err(e) => write!(f, "Packed({e})"),
        }
    }
}

/// The labels of a watched object, whichever form its type keeps them in:
/// what the plan index, the shard filter and the plan wake-ups read.
pub trait Labelled {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

/// [`Labelled`] for types that keep their labels in `ObjectMeta`.
macro_rules! labelled_by_meta {
    ($($t:ty),*) => {$(
        impl Labelled for $t {
            fn label(&self, key: &str) -> Option<&str> {
                kube::Resource::meta(self)
                    .labels
                    .as_ref()?
                    .get(key)
                    .map(String::as_str)
            }
        }
    )*};
}

labelled_by_meta!(
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::apps::v1::DaemonSet,
    k8s_openapi::api::apps::v1::ControllerRevision,
    k8s_openapi::api::batch::v1::Job,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
    super::scale::ComponentScale,
    super::gateway::HTTPRoute,
    super::traefik::IngressRoute
);

/// [`Labelled`], and `ObjectMeta` with the labels put back, for the cached
/// types that keep them packed.
macro_rules! packed_labels {
    ($($t:ty),*) => {$(
        impl Labelled for $t {
            fn label(&self, key: &str) -> Option<&str> {
                self.labels.get(key)
            }
        }

        impl $t {
            /// The metadata as the API server sent it, labels included
            /// (less what the trim dropped).
            pub fn full_metadata(&self) -> ObjectMeta {
                ObjectMeta {
                    labels: self.labels.to_map(),
                    ..self.metadata.clone()
                }
            }
        }
    )*};
}

packed_labels!(CachedPod, CachedDeployment, CachedRevision);

/// `ObjectMeta` as the cached types decode it: managedFields are skipped
/// while decoding, and labels decode as `L` (packed [`Labels`], or the map).
///
/// managedFields are often larger than the rest of an object, and decoded
/// they are a `Value` tree of B-tree nodes; the trim drops them, but only
/// after the watch hands the object on, and a list page holds hundreds of
/// decoded objects before that: a new leader listing pods in pages of 500
/// held 4.7 MB of them at its peak (heaptrack, 500 plans).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MetaWire<L> {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<L>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl<L> MetaWire<L> {
    /// The metadata without its labels (and without managedFields), and the labels.
    fn split(self) -> (ObjectMeta, Option<L>) {
        let meta = ObjectMeta {
            annotations: self.annotations,
            creation_timestamp: self.creation_timestamp,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            deletion_timestamp: self.deletion_timestamp,
            finalizers: self.finalizers,
            generate_name: self.generate_name,
            generation: self.generation,
            labels: None,
            managed_fields: None,
            name: self.name,
            namespace: self.namespace,
            owner_references: self.owner_references,
            resource_version: self.resource_version,
            self_link: self.self_link,
            uid: self.uid,
        };
        (meta, self.labels)
    }
}

/// The metadata of an object made for a plan, its plan (label) noted for
/// [`foreign`]: the rest of another shard's object is skipped.
fn meta_by_plan_label<'de, D: Deserializer<'de>>(d: D) -> Result<MetaWire<Labels>, D::Error> {
    let meta = MetaWire::<Labels>::deserialize(d)?;
    let plan = meta.labels.as_ref().and_then(|l| l.get(LABEL_PLAN));
    foreign::metadata_seen(meta.namespace.as_deref(), plan);
    Ok(meta)
}

/// The metadata of a plan, its name noted for [`foreign`].
fn meta_of_plan<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<MetaWire<BTreeMap<String, String>>, D::Error> {
    let meta = MetaWire::<BTreeMap<String, String>>::deserialize(d)?;
    foreign::metadata_seen(meta.namespace.as_deref(), meta.name.as_deref());
    Ok(meta)
}

/// A pod as the pod checks read it: metadata (labels select the plan,
/// component and revision) and its containers' states.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "PodWire")]
pub struct CachedPod {
    /// Metadata, but for its labels (the trim keeps name and namespace).
    pub metadata: ObjectMeta,
    /// The labels, packed (the trim keeps the operator's own).
    pub labels: Labels,
    /// What the pod checks read of its status.
    pub status: Option<CachedPodStatus>,
    /// `spec.nodeName` (kept only for a DaemonSet component's pods: their
    /// nodes are what its rollout moves).
    pub node: Option<String>,
}

/// A pod as decoded, before its labels are packed.
#[derive(Deserialize)]
struct PodWire {
    #[serde(default, deserialize_with = "meta_by_plan_label")]
    metadata: MetaWire<Labels>,
    #[serde(default, deserialize_with = "unless_foreign")]
    status: Option<CachedPodStatus>,
    #[serde(default, deserialize_with = "unless_foreign")]
    spec: Option<PodSpecWire>,
}

/// Of a pod's spec, the node it runs on.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodSpecWire {
    #[serde(default)]
    node_name: Option<String>,
}

impl From<PodWire> for CachedPod {
    fn from(w: PodWire) -> Self {
        foreign::object_done();
        let (metadata, labels) = w.metadata.split();
        CachedPod {
            metadata,
            labels: labels.unwrap_or_default(),
            status: w.status,
            node: w.spec.and_then(|s| s.node_name),
        }
    }
}

/// The containers' states of a pod.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    /// Init containers, in order.
    #[serde(default)]
    pub init_container_statuses: Vec<CachedContainerStatus>,
    /// Containers, in order.
    #[serde(default)]
    pub container_statuses: Vec<CachedContainerStatus>,
    /// Its `Ready` condition is True (what a StatefulSet component's
    /// revisions count).
    #[serde(default, rename = "conditions", deserialize_with = "ready_condition")]
    pub ready: bool,
    /// `status.podIP`: where a component's `serving` check asks the pod
    /// (an address that does not parse reads as none).
    #[serde(default, rename = "podIP", deserialize_with = "pod_ip")]
    pub pod_ip: Option<std::net::IpAddr>,
}

fn pod_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::net::IpAddr>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.and_then(|s| s.parse().ok()))
}

/// Whether a pod's conditions hold `Ready: True`, read without keeping them.
fn ready_condition<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    struct Condition {
        #[serde(default, rename = "type")]
        type_: String,
        #[serde(default)]
        status: String,
    }
    let conditions = Option::<Vec<Condition>>::deserialize(d)?;
    Ok(conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// One container's status: name, readiness, restarts and its waiting state.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    /// Container name.
    #[serde(default)]
    pub name: String,
    /// Whether it passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// Restarts so far.
    #[serde(default)]
    pub restart_count: i32,
    /// The current state; only `waiting` is kept.
    #[serde(default)]
    pub state: Option<CachedContainerState>,
}

/// A container's state, as far as the checks read it.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CachedContainerState {
    /// Set while the container waits (with the reason, e.g. CrashLoopBackOff).
    #[serde(default)]
    pub waiting: Option<ContainerStateWaiting>,
}

namespaced_resource!(CachedPod, "v1", "", "Pod", "v1", "pods");

/// A revision Deployment as the operator reads it: metadata, the replicas it
/// asks for, its whole spec as compact JSON text (compared with the desired
/// spec before an apply, and the template of a revision the spec no longer
/// has is re-applied from it) and the replica counts of its status.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "DeploymentWire")]
pub struct CachedDeployment {
    /// Metadata, but for its labels.
    pub metadata: ObjectMeta,
    /// The labels, packed (they name the plan, component and revision).
    pub labels: Labels,
    /// `spec`, as JSON text, with `spec.replicas` read out of it.
    pub spec: Option<CachedDeploymentSpec>,
    /// The status (the trim keeps the replica counts only).
    pub status: Option<DeploymentStatus>,
}

/// A Deployment as decoded, before its labels are packed.
#[derive(Deserialize)]
struct DeploymentWire {
    #[serde(default, deserialize_with = "meta_by_plan_label")]
    metadata: MetaWire<Labels>,
    #[serde(default, deserialize_with = "unless_foreign")]
    spec: Option<CachedDeploymentSpec>,
    #[serde(default, deserialize_with = "unless_foreign")]
    status: Option<DeploymentStatus>,
}

impl From<DeploymentWire> for CachedDeployment {
    fn from(w: DeploymentWire) -> Self {
        foreign::object_done();
        let (metadata, labels) = w.metadata.split();
        CachedDeployment {
            metadata,
            labels: labels.unwrap_or_default(),
            spec: w.spec,
            status: w.status,
        }
    }
}

/// A Deployment's spec as JSON text, with its replicas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedDeploymentSpec {
    /// `spec.replicas`.
    pub replicas: Option<i32>,
    /// The whole spec, compact JSON, packed.
    pub json: Packed,
    /// The ConfigMaps and Secrets its template references, sorted: read by
    /// every reconcile of a plan with config, so worked out once here.
    pub refs: Box<[super::config::ConfigRef]>,
}

/// Of a Deployment's spec, what decoding reads: the rest of the text is
/// skipped, not built into a tree.
#[derive(Deserialize)]
struct SpecRead {
    replicas: Option<i32>,
    template: Option<TemplateRead>,
}

#[derive(Deserialize)]
struct TemplateRead {
    spec: Option<k8s_openapi::api::core::v1::PodSpec>,
}

impl<'de> Deserialize<'de> for CachedDeploymentSpec {
    /// The spec's text is kept as it came (every status update of a
    /// Deployment is decoded here, about 14 per plan in a rollout, so no
    /// JSON tree is built and written out again): only `replicas` and the
    /// template's pod spec are parsed, for its config references.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        // The API server stores only valid specs; one that does not read
        // here is kept as text, with no replicas nor references.
        let (replicas, refs) = match serde_json::from_str::<SpecRead>(raw.get()) {
            Ok(read) => (
                read.replicas,
                read.template
                    .and_then(|t| t.spec)
                    .map(|s| super::config::references_in(s).into_iter().collect())
                    .unwrap_or_default(),
            ),
            Err(_) => (None, Box::default()),
        };
        Ok(CachedDeploymentSpec {
            replicas,
            json: Packed::pack(raw.get()),
            refs,
        })
    }
}

impl CachedDeployment {
    /// `spec.replicas`.
    pub fn replicas(&self) -> Option<i32> {
        self.spec.as_ref().and_then(|s| s.replicas)
    }

    /// The ConfigMaps and Secrets its template references.
    pub fn refs(&self) -> &[super::config::ConfigRef] {
        self.spec.as_ref().map_or(&[], |s| &s.refs)
    }

    /// The pod template of its spec (default when it has none or it does not
    /// parse: the API server only stores valid ones).
    pub fn template(&self) -> PodTemplateSpec {
        self.spec
            .as_ref()
            .and_then(|s| s.json.unpack().ok())
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|mut v| v.get_mut("template").map(Value::take))
            .and_then(|t| serde_json::from_value(t).ok())
            .unwrap_or_default()
    }

    /// The object as JSON, as the API server sent it (less what the trim
    /// dropped), to compare a desired Deployment with.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": serde_json::to_value(self.full_metadata()).unwrap_or(Value::Null),
        });
        if let Some(spec) = &self.spec {
            v["spec"] = spec
                .json
                .unpack()
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or(Value::Null);
        }
        if let Some(status) = &self.status {
            v["status"] = serde_json::to_value(status).unwrap_or(Value::Null);
        }
        v
    }
}

namespaced_resource!(
    CachedDeployment,
    "apps/v1",
    "apps",
    "Deployment",
    "v1",
    "deployments"
);

/// A ControllerRevision (apps/v1) as stored by the operator: of its `data`,
/// only what a reconcile reads, worked out once while decoding (the revision
/// the stored template hashes to, and the ConfigMaps and Secrets it
/// references). The template itself is not kept: it is read back from the
/// API server (one GET) only to recreate a revision's Deployment after the
/// spec has moved on, and by `undo`. With a production-sized template it was
/// a third of the caches.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "RevisionWire")]
pub struct CachedRevision {
    /// Metadata, but for its labels.
    pub metadata: ObjectMeta,
    /// The labels, packed (they name the plan, component and revision).
    pub labels: Labels,
    /// What `data` stores.
    pub stored: StoredTemplate,
    /// The revision number.
    pub revision: i64,
}

/// What a ControllerRevision's `data` stores, as the operator reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoredTemplate {
    /// A pod template: the revision it hashes to, and the ConfigMaps and
    /// Secrets it references.
    Template {
        /// [`super::revision::template_hash`] of the template.
        hash: Box<str>,
        /// Its references, sorted.
        refs: Box<[super::config::ConfigRef]>,
    },
    /// No `data`.
    #[default]
    Missing,
    /// `data` that is not a pod template: why.
    Invalid(Box<str>),
}

impl StoredTemplate {
    /// What `data` (as sent, if any) stores.
    pub fn of(data: Option<&Value>) -> StoredTemplate {
        let Some(data) = data else {
            return StoredTemplate::Missing;
        };
        match PodTemplateSpec::deserialize(data) {
            Ok(t) => StoredTemplate::Template {
                hash: super::revision::template_hash(&t).into_boxed_str(),
                refs: super::config::references(&t).into_iter().collect(),
            },
            Err(e) => StoredTemplate::Invalid(e.to_string().into_boxed_str()),
        }
    }

    /// The revision the template hashes to, if it is one.
    pub fn hash(&self) -> Option<&str> {
        match self {
            StoredTemplate::Template { hash, .. } => Some(hash),
            _ => None,
        }
    }

    /// The ConfigMaps and Secrets it references (none if it is no template).
    pub fn refs(&self) -> &[super::config::ConfigRef] {
        match self {
            StoredTemplate::Template { refs, .. } => refs,
            _ => &[],
        }
    }
}

/// A ControllerRevision as decoded, before its labels are packed.
#[derive(Deserialize)]
struct RevisionWire {
    #[serde(default, deserialize_with = "meta_by_plan_label")]
    metadata: MetaWire<Labels>,
    #[serde(default, rename = "data", deserialize_with = "stored_template")]
    stored: StoredTemplate,
    #[serde(default)]
    revision: i64,
}

impl From<RevisionWire> for CachedRevision {
    fn from(w: RevisionWire) -> Self {
        foreign::object_done();
        let (metadata, labels) = w.metadata.split();
        CachedRevision {
            metadata,
            labels: labels.unwrap_or_default(),
            stored: w.stored,
            revision: w.revision,
        }
    }
}

/// A ReleasePlan as the controller's cache keeps it: its metadata, and its
/// spec and status as compact JSON text. Decoded as a [`ReleasePlan`] first,
/// so a plan its types refuse fails at the watch as it always did; the
/// reconcile of a plan decodes it again (tens of microseconds). The text of a
/// one-component plan is about 1.3 KB, the decoded structs 6.6 KB (a pod
/// template alone is 1.8 KB inline before any heap): with thousands of plans
/// the plan cache was the largest one.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedPlan {
    /// Metadata (the trim drops managedFields and kubectl's last-applied copy).
    pub metadata: ObjectMeta,
    spec: Packed,
    status: Option<Packed>,
    /// The names of the objects the spec reads (ConfigMaps and Secrets its
    /// templates reference, gate templates), `\0`-separated: what a change
    /// of such an object is matched against before any plan is unpacked.
    names: Box<str>,
}

impl CachedPlan {
    /// The cache's form of `plan`.
    pub fn new(plan: &ReleasePlan) -> Result<CachedPlan, serde_json::Error> {
        Self::from_parts(plan.metadata.clone(), &plan.spec, plan.status.as_ref())
    }

    /// The cache's form of a plan's parts: spec and status as compact text.
    fn from_parts(
        metadata: ObjectMeta,
        spec: &ReleasePlanSpec,
        status: Option<&ReleasePlanStatus>,
    ) -> Result<CachedPlan, serde_json::Error> {
        let text = |t: String| Packed::pack(&t);
        let mut names: Vec<String> = spec
            .components
            .iter()
            .flat_map(|c| super::config::references(&c.template))
            .map(|(_, name)| name)
            .chain(
                spec.health
                    .template_refs()
                    .into_iter()
                    .map(|t| t.template_ref.name),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        Ok(CachedPlan {
            metadata,
            spec: text(serde_json::to_string(spec)?),
            status: status.map(serde_json::to_string).transpose()?.map(text),
            names: names.join("\0").into_boxed_str(),
        })
    }

    /// The plan, decoded.
    pub fn decode(&self) -> Result<ReleasePlan, serde_json::Error> {
        let unpack = |p: &Packed| p.unpack().map_err(serde::de::Error::custom);
        let mut plan = ReleasePlan::new(
            self.metadata.name.as_deref().unwrap_or_default(),
            serde_json::from_str(&unpack(&self.spec)?)?,
        );
        plan.metadata = self.metadata.clone();
        plan.status = match &self.status {
            Some(s) => Some(serde_json::from_str(&unpack(s)?)?),
            None => None,
        };
        Ok(plan)
    }

    /// Whether the spec reads an object named `name` (a ConfigMap or Secret
    /// its templates reference, a gate template): no unpacking, no decoding.
    pub fn reads(&self, name: &str) -> bool {
        !name.is_empty() && self.names.split('\0').any(|n| n == name)
    }

    /// The spec as JSON text: a cheap test before decoding ("does it name
    /// X"). Empty if it does not unpack (then neither does the plan decode).
    pub fn spec_text(&self) -> String {
        self.spec.unpack().unwrap_or_default()
    }
}

/// A plan as decoded: the types of [`ReleasePlan`], but for managedFields.
#[derive(Deserialize)]
struct PlanWire {
    #[serde(default, deserialize_with = "meta_of_plan")]
    metadata: MetaWire<BTreeMap<String, String>>,
    #[serde(deserialize_with = "unless_foreign")]
    spec: ReleasePlanSpec,
    #[serde(default, deserialize_with = "unless_foreign")]
    status: Option<ReleasePlanStatus>,
}

impl<'de> Deserialize<'de> for CachedPlan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = PlanWire::deserialize(d)?;
        let foreign = foreign::skipping();
        foreign::object_done();
        let (metadata, labels) = w.metadata.split();
        if foreign {
            // Another shard's plan: its metadata is all the watch reads.
            return Ok(CachedPlan {
                metadata: ObjectMeta { labels, ..metadata },
                spec: Packed::pack(""),
                status: None,
                names: Box::default(),
            });
        }
        CachedPlan::from_parts(
            ObjectMeta { labels, ..metadata },
            &w.spec,
            w.status.as_ref(),
        )
        .map_err(serde::de::Error::custom)
    }
}

namespaced_resource!(
    CachedPlan,
    "releaseplan.io/v1alpha1",
    "releaseplan.io",
    "ReleasePlan",
    "v1alpha1",
    "releaseplans"
);

/// Any JSON value, kept as its compact text (a `Value` tree costs several
/// times the text; a `RawValue` would need the deserializer to be serde_json's
/// own reader, which kube's watch decoding does not promise). Another
/// shard's revision keeps nothing ([`foreign`]).
fn stored_template<'de, D: Deserializer<'de>>(d: D) -> Result<StoredTemplate, D::Error> {
    let v: Option<Value> = unless_foreign(d)?;
    Ok(StoredTemplate::of(v.as_ref()))
}

namespaced_resource!(
    CachedRevision,
    "apps/v1",
    "apps",
    "ControllerRevision",
    "v1",
    "controllerrevisions"
);

/// Estimated bytes one cached object holds: its own size and the heap
/// blocks it owns (string and list contents), without the allocator's
/// overhead per block. What `releaseplan_cached_bytes` sums, every few
/// seconds: cheap enough to walk every cache.
pub trait Footprint {
    /// The estimate, in bytes.
    fn footprint(&self) -> usize;
}

/// Heap bytes of an optional string.
fn text(s: Option<&String>) -> usize {
    s.map_or(0, String::len)
}

/// Heap bytes of `ObjectMeta`'s contents (not its inline size).
fn meta_heap(m: &ObjectMeta) -> usize {
    let map = |m: Option<&BTreeMap<String, String>>| {
        m.map_or(0, |m| {
            // A B-tree node holds up to 11 entries of two `String`s, and more.
            let nodes = m.len().div_ceil(11);
            nodes * 544 + m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        })
    };
    let owners = m.owner_references.as_ref().map_or(0, |o| {
        o.iter()
            .map(|r| {
                std::mem::size_of::<OwnerReference>()
                    + r.api_version.len()
                    + r.kind.len()
                    + r.name.len()
                    + r.uid.len()
            })
            .sum()
    });
    let finalizers = m.finalizers.as_ref().map_or(0, |f| {
        f.iter()
            .map(|s| std::mem::size_of::<String>() + s.len())
            .sum()
    });
    text(m.name.as_ref())
        + text(m.namespace.as_ref())
        + text(m.uid.as_ref())
        + text(m.resource_version.as_ref())
        + text(m.generate_name.as_ref())
        + text(m.self_link.as_ref())
        + map(m.labels.as_ref())
        + map(m.annotations.as_ref())
        + owners
        + finalizers
}

impl Footprint for CachedPlan {
    fn footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + meta_heap(&self.metadata)
            + self.spec.packed_len()
            + self.status.as_ref().map_or(0, Packed::packed_len)
            + self.names.len()
    }
}

impl Footprint for CachedDeployment {
    fn footprint(&self) -> usize {
        let spec = self.spec.as_ref().map_or(0, |s| {
            s.json.packed_len()
                + s.refs
                    .iter()
                    .map(|(_, n)| std::mem::size_of::<super::config::ConfigRef>() + n.len())
                    .sum::<usize>()
        });
        let status = self
            .status
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<DeploymentStatus>());
        std::mem::size_of::<Self>()
            + meta_heap(&self.metadata)
            + self.labels.0.len()
            + spec
            + status
    }
}

impl Footprint for CachedPod {
    fn footprint(&self) -> usize {
        let status = self.status.as_ref().map_or(0, |s| {
            s.init_container_statuses
                .iter()
                .chain(&s.container_statuses)
                .map(|c| {
                    std::mem::size_of::<CachedContainerStatus>()
                        + c.name.len()
                        + c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .map_or(0, |w| {
                                std::mem::size_of::<ContainerStateWaiting>()
                                    + text(w.message.as_ref())
                                    + text(w.reason.as_ref())
                            })
                })
                .sum()
        });
        std::mem::size_of::<Self>() + meta_heap(&self.metadata) + self.labels.0.len() + status
    }
}

impl<K> Footprint for super::config::CachedConfig<K> {
    fn footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + meta_heap(&self.metadata)
            + self.plan.as_deref().map_or(0, str::len)
            + self.source.as_deref().map_or(0, str::len)
            + self.digest.len()
            + text(self.secret_type.as_ref())
    }
}

impl Footprint for CachedRevision {
    fn footprint(&self) -> usize {
        let stored = match &self.stored {
            StoredTemplate::Template { hash, refs } => {
                hash.len()
                    + refs
                        .iter()
                        .map(|(_, n)| std::mem::size_of::<super::config::ConfigRef>() + n.len())
                        .sum::<usize>()
            }
            StoredTemplate::Missing => 0,
            StoredTemplate::Invalid(why) => why.len(),
        };
        std::mem::size_of::<Self>() + meta_heap(&self.metadata) + self.labels.0.len() + stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn a_plan_round_trips_through_its_cached_text() {
        let plan: ReleasePlan = serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "resourceVersion": "7",
                "annotations": {"releaseplan.io/request": "promote"}},
            "spec": {"components": [{"name": "web", "replicas": 2, "template": {
                "metadata": {"labels": {"app": "shop"}},
                "spec": {"containers": [{"name": "app", "image": "shop:1",
                    "env": [{"name": "A", "value": "1"}]}]}}}],
                "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "1s"}}]}},
            "status": {"phase": "RollingOut", "currentStep": 1, "weight": 50}
        }))
        .unwrap();
        let cached: CachedPlan =
            serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
        let json = |p: &ReleasePlan| serde_json::to_value(p).unwrap();
        assert_eq!(json(&cached.decode().unwrap()), json(&plan));
        assert!(cached.spec_text().contains("shop:1"));
        let no_status = ReleasePlan {
            status: None,
            ..plan.clone()
        };
        assert_eq!(
            json(&CachedPlan::new(&no_status).unwrap().decode().unwrap()),
            json(&no_status)
        );
    }

    /// A pod template about the size of a production service's: many
    /// env vars, probes, volumes.
    fn big_template(image: &str) -> Value {
        let env: Vec<Value> = (0..26)
            .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-of-setting-{i}")}))
            .collect();
        json!({"metadata": {"labels": {"app": "shop", "team": "checkout"}},
            "spec": {"containers": [{"name": "app", "image": image, "env": env,
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5}}],
                "volumes": [{"name": "config", "configMap": {"name": "shop-config"}}]}})
    }

    #[test]
    fn specs_are_kept_packed_to_under_half_their_text() {
        let plan: ReleasePlan = serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod"},
            "spec": {"components": [{"name": "web", "replicas": 2, "template": big_template("shop:1")}]}
        }))
        .unwrap();
        let cached = CachedPlan::new(&plan).unwrap();
        let text = serde_json::to_string(&plan.spec).unwrap();
        assert!(text.len() > 1500, "{}", text.len());
        assert!(
            cached.spec.packed_len() * 2 < text.len(),
            "{} packed of {}",
            cached.spec.packed_len(),
            text.len()
        );
        assert_eq!(cached.spec_text(), text);
        assert_eq!(cached.decode().unwrap().spec, plan.spec);
        // What a ConfigMap's change is matched against, without unpacking:
        // the names the spec reads, whole.
        assert!(cached.reads("shop-config"));
        assert!(!cached.reads("shop"), "a name, not a substring");
        assert!(!cached.reads("shop-config-2a9f"), "a copy's name");
        assert!(!cached.reads(""));

        let d: CachedDeployment = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-1", "namespace": "prod"},
            "spec": {"replicas": 2, "template": big_template("shop:1")}
        }))
        .unwrap();
        let spec = d.spec.as_ref().unwrap();
        assert!(spec.json.packed_len() * 2 < spec.json.unpack().unwrap().len());
        assert_eq!(
            d.template().spec.unwrap().containers[0].image.as_deref(),
            Some("shop:1")
        );
        assert_eq!(
            d.refs(),
            [(
                super::super::config::ConfigKind::ConfigMap,
                "shop-config".to_string()
            )]
        );
        assert_eq!(Packed::default().unpack().unwrap(), "");
    }

    /// A Deployment's spec is kept as the API server wrote it, not decoded
    /// into a tree and written out again: its keys stay in their order.
    #[test]
    fn a_deployment_spec_is_kept_as_it_came() {
        let text = r#"{"metadata":{"name":"shop-web-1"},"spec":{"selector":{"matchLabels":{"app":"shop"}},"replicas":3,"template":{"spec":{"volumes":[{"name":"c","configMap":{"name":"settings"}}],"containers":[{"name":"app","image":"shop:1","env":[{"name":"PW","valueFrom":{"secretKeyRef":{"name":"db","key":"pw"}}}]}]}}}}"#;
        let d: CachedDeployment = serde_json::from_str(text).unwrap();
        let spec = d.spec.as_ref().unwrap();
        let kept = spec.json.unpack().unwrap();
        assert!(kept.starts_with(r#"{"selector":"#), "{kept}");
        assert_eq!(d.replicas(), Some(3));
        use super::super::config::ConfigKind;
        assert_eq!(
            d.refs(),
            [
                (ConfigKind::ConfigMap, "settings".to_string()),
                (ConfigKind::Secret, "db".to_string())
            ]
        );
        assert_eq!(d.to_json()["spec"]["replicas"], 3);
        // A spec whose template does not read is still kept, without
        // references (the API server stores only valid ones).
        let odd: CachedDeployment = serde_json::from_str(
            r#"{"metadata":{"name":"x"},"spec":{"replicas":1,"template":{"spec":"no"}}}"#,
        )
        .unwrap();
        assert!(odd.refs().is_empty());
        assert_eq!(odd.to_json()["spec"]["template"]["spec"], "no");
    }

    #[test]
    fn a_plan_its_types_refuse_fails_at_decoding_as_before() {
        let bad = json!({"metadata": {"name": "x"}, "spec": {"components": "not a list"}});
        assert!(serde_json::from_value::<ReleasePlan>(bad.clone()).is_err());
        assert!(serde_json::from_value::<CachedPlan>(bad).is_err());
    }

    #[test]
    fn a_pod_keeps_labels_and_container_states_only() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "prod", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "app", "image": "shop:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 1,
                    "image": "i", "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 4,
                    "image": "shop:1", "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 1}}}]}
        }))
        .unwrap();
        let cached: CachedPod =
            serde_json::from_value(serde_json::to_value(&pod).unwrap()).unwrap();
        assert_eq!(cached.metadata.labels, None, "labels are kept packed");
        assert_eq!(cached.labels.get("a"), Some("b"));
        assert_eq!(cached.full_metadata().labels, pod.metadata.labels);
        let status = cached.status.unwrap();
        assert_eq!(status.init_container_statuses.len(), 1);
        assert!(status.init_container_statuses[0].ready);
        assert_eq!(
            status.init_container_statuses[0].state,
            Some(CachedContainerState::default())
        );
        let app = &status.container_statuses[0];
        assert_eq!(
            (app.name.as_str(), app.ready, app.restart_count),
            ("app", false, 4)
        );
        let waiting = app.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(waiting.message.as_deref(), Some("back-off"));
    }

    #[test]
    fn a_revision_keeps_what_its_data_stores_not_the_data() {
        let template = json!({"spec": {
            "containers": [{"name": "app", "image": "shop:1-a-long-image-name",
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}],
            "volumes": [{"name": "c", "configMap": {"name": "settings"}}]}});
        let cr: ControllerRevision = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-abc"},
            "data": template,
            "revision": 3
        }))
        .unwrap();
        let cached: CachedRevision =
            serde_json::from_value(serde_json::to_value(&cr).unwrap()).unwrap();
        let typed: PodTemplateSpec = serde_json::from_value(template).unwrap();
        assert_eq!(
            cached.stored.hash(),
            Some(super::super::revision::template_hash(&typed).as_str())
        );
        use super::super::config::ConfigKind;
        assert_eq!(
            cached.stored.refs(),
            [
                (ConfigKind::ConfigMap, "settings".to_string()),
                (ConfigKind::Secret, "db".to_string())
            ]
        );
        assert_eq!(cached.revision, 3);
        // The template itself is not held: nothing of it but its hash and references.
        assert!(!format!("{cached:?}").contains("a-long-image-name"));

        let missing: CachedRevision =
            serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(missing.stored, StoredTemplate::Missing);
        let invalid: CachedRevision =
            serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"spec": "no"}}))
                .unwrap();
        assert!(matches!(invalid.stored, StoredTemplate::Invalid(_)));
    }

    #[test]
    fn packed_labels_read_like_the_map_they_came_from() {
        let map: BTreeMap<String, String> =
            [("a", "1"), ("releaseplan.io/plan", "shop"), ("e", "")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let mut labels: Labels = serde_json::from_value(json!(map)).unwrap();
        assert_eq!(labels.get("releaseplan.io/plan"), Some("shop"));
        assert_eq!(labels.get("e"), Some(""), "an empty value is a value");
        assert_eq!(labels.get("releaseplan.io"), None);
        assert_eq!(labels.get("shop"), None, "a value is never taken for a key");
        assert_eq!(labels.to_map(), Some(map));
        labels.retain(|k, _| k.starts_with("releaseplan.io/"));
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("releaseplan.io/plan", "shop")]
        );
        labels.retain(|_, _| false);
        assert_eq!(labels, Labels::default());
        assert_eq!(labels.to_map(), None);
        assert_eq!(labels.iter().count(), 0);
        assert_eq!(
            serde_json::from_str::<Labels>("{}").unwrap(),
            Labels::default()
        );
    }

    /// Metadata with every field set, managedFields included.
    fn full_meta() -> Value {
        json!({
            "name": "shop-web-abc", "namespace": "prod", "generateName": "shop-web-",
            "uid": "u-1", "resourceVersion": "42", "generation": 3, "selfLink": "/x",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-02T00:00:00Z", "deletionGracePeriodSeconds": 30,
            "labels": {"app": "shop", "releaseplan.io/plan": "shop"},
            "annotations": {"a": "b"}, "finalizers": ["releaseplan.io/cleanup"],
            "ownerReferences": [{"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                "name": "shop", "uid": "p-1", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}]
        })
    }

    #[test]
    fn cached_types_keep_all_metadata_but_managed_fields_as_decoded() {
        let sent: ObjectMeta = serde_json::from_value(full_meta()).unwrap();
        assert!(sent.managed_fields.is_some());
        let expected = ObjectMeta {
            managed_fields: None,
            ..sent.clone()
        };
        let deployment: CachedDeployment =
            serde_json::from_value(json!({"metadata": full_meta(), "spec": {"replicas": 2}}))
                .unwrap();
        assert_eq!(deployment.full_metadata(), expected);
        assert_eq!(deployment.labels.get("app"), Some("shop"));
        let pod: CachedPod = serde_json::from_value(json!({"metadata": full_meta()})).unwrap();
        assert_eq!(pod.full_metadata(), expected);
        let revision: CachedRevision =
            serde_json::from_value(json!({"metadata": full_meta(), "revision": 1})).unwrap();
        assert_eq!(revision.full_metadata(), expected);
        let plan: CachedPlan =
            serde_json::from_value(json!({"metadata": full_meta(), "spec": {"components": []}}))
                .unwrap();
        assert_eq!(
            plan.metadata, expected,
            "a plan keeps its labels in the map"
        );
    }

    #[test]
    fn null_or_missing_metadata_parts_decode_as_absent() {
        let pod: CachedPod =
            serde_json::from_value(json!({"metadata": {"name": "p", "labels": null}})).unwrap();
        assert_eq!(pod.labels, Labels::default());
        let pod: CachedPod = serde_json::from_value(json!({})).unwrap();
        assert_eq!(pod.full_metadata(), ObjectMeta::default());
        assert!(
            serde_json::from_value::<CachedPod>(json!({"metadata": {"labels": ["a"]}})).is_err()
        );
        assert!(
            serde_json::from_value::<CachedPod>(json!({"metadata": {"labels": {"a": 1}}})).is_err()
        );
    }
}
