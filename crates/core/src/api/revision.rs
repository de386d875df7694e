//! Revision identity: a stable hash of each component's pod template, and
//! the Deployment names built from it.
//!
//! The hash is taken over a canonical JSON form of the template: keys sorted,
//! and nulls, empty strings-free objects, empty lists and empty maps dropped,
//! so key order and an omitted field versus its empty value do not change it.
//! It depends only on the template's content, never on the process or the
//! operator's release.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Characters of a hash: no vowels (no words) and no look-alike characters,
/// as Kubernetes itself uses for generated names.
pub const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a template hash.
pub const HASH_LEN: usize = 10;
/// Longest Deployment name we create: a DNS label, so every tool accepts it.
pub const MAX_NAME_LEN: usize = 63;

/// Removes nulls, empty objects and empty arrays, recursively. Object keys are
/// kept sorted by serde_json's default map.
fn canonical(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(canonical).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(map) => {
            let map: serde_json::Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| canonical(v).map(|v| (k, v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        other => Some(other),
    }
}

/// `len` characters of [`ALPHABET`] from a digest (names shortened with a hash).
pub(crate) fn encode_digest(digest: &[u8], len: usize) -> String {
    encode(digest, len)
}

fn encode(digest: &[u8], len: usize) -> String {
    digest
        .iter()
        .take(len)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// Hash of a JSON value in canonical form.
pub fn hash_value(v: &Value) -> String {
    hash_owned(v.clone())
}

/// [`hash_value`] of a value the caller no longer needs: canonicalized in
/// place and written straight into the digest, the same bytes as its text
/// (a production template is hashed at every reconcile; the copy and the
/// text were most of that cost).
pub fn hash_owned(v: Value) -> String {
    let canon = canonical(v).unwrap_or(Value::Null);
    let mut hasher = Sha256::new();
    // Writing into a digest cannot fail, nor can serializing a Value.
    let _ = serde_json::to_writer(&mut hasher, &canon);
    encode(&hasher.finalize(), HASH_LEN)
}

/// Stable hash of a component's pod template.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    // Serializing a k8s-openapi type cannot fail; Null only hashes an empty template.
    hash_owned(serde_json::to_value(template).unwrap_or(Value::Null))
}

/// Works out the template hashes of one plan's components. A template's
/// hash is a pure function of it, and a caller that knows which template it
/// has (the plan's generation, the component, where its config references
/// point) can answer from a memo instead of serializing and hashing about
/// 6 KB of JSON at every reconcile.
pub trait TemplateHasher {
    /// [`template_hash`] of `template`: component `component`'s template in
    /// the spec, as written (`renamed` None) or with its config references
    /// pointed at the names in `renamed`, in the template's order.
    fn hash(
        &self,
        component: &str,
        renamed: Option<&[String]>,
        template: &PodTemplateSpec,
    ) -> String;
}

/// Hashes every template it is given: no memo.
#[derive(Debug, Clone, Copy, Default)]
pub struct Direct;

impl TemplateHasher for Direct {
    fn hash(&self, _: &str, _: Option<&[String]>, template: &PodTemplateSpec) -> String {
        template_hash(template)
    }
}

/// Revision of the whole plan: a hash over every component's name and template hash,
/// in name order, so adding, removing or changing any component makes a new revision.
pub fn plan_revision<'a>(components: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = components.into_iter().collect();
    pairs.sort_unstable();
    let joined: Vec<String> = pairs.iter().map(|(n, h)| format!("{n}={h}")).collect();
    let digest = Sha256::digest(joined.join(",").as_bytes());
    encode(&digest, HASH_LEN)
}

/// What a baseline's revision adds to the stable revision it copies.
pub const BASELINE_SUFFIX: &str = "-baseline";

/// The revision of a component's baseline (`baseline: true`): the stable
/// revision's template, started fresh beside the canary and labelled apart,
/// so a query tells canary, baseline and stable pods apart.
pub fn baseline_of(stable: &str) -> String {
    format!("{stable}{BASELINE_SUFFIX}")
}

/// Whether a revision is a baseline (see [`baseline_of`]): it is never a
/// release's revision, only a copy run while a canary is judged.
pub fn is_baseline(hash: &str) -> bool {
    hash.ends_with(BASELINE_SUFFIX)
}

/// Name of the Deployment of one component revision: `<plan>-<component>-<hash>`,
/// shortened with a hash of the full prefix when it would exceed 63 characters, so
/// two long names never collide.
pub fn deployment_name(plan: &str, component: &str, hash: &str) -> String {
    let full = format!("{plan}-{component}-{hash}");
    if full.len() <= MAX_NAME_LEN {
        return full;
    }
    let prefix = format!("{plan}-{component}");
    let prefix_hash = encode(&Sha256::digest(prefix.as_bytes()), 6);
    // <truncated>-<prefix hash 6>-<hash 10>
    let keep = MAX_NAME_LEN - 1 - prefix_hash.len() - 1 - hash.len();
    let truncated: String = prefix.chars().take(keep).collect();
    let truncated = truncated.trim_end_matches(['-', '.']);
    format!("{truncated}-{prefix_hash}-{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn template(v: Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_hash_is_of_the_canonical_text() {
        let v = json!({"b": [1, {"z": null, "y": "é\n"}], "a": {}, "c": "x"});
        let text = canonical(v.clone()).unwrap().to_string();
        assert_eq!(text, r#"{"b":[1,{"y":"é\n"}],"c":"x"}"#);
        assert_eq!(
            hash_value(&v),
            encode(&Sha256::digest(text.as_bytes()), HASH_LEN)
        );
        assert_eq!(hash_owned(v.clone()), hash_value(&v));
    }

    #[test]
    fn same_template_same_hash_whatever_the_key_order() {
        let a = template(json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}));
        let b = template(
            json!({"spec": {"containers": [{"image": "nginx:1", "name": "app"}]},
            "metadata": {"labels": {"b": "2", "a": "1"}}}),
        );
        assert_eq!(template_hash(&a), template_hash(&b));
    }

    #[test]
    fn omitted_and_empty_fields_hash_alike() {
        let a = template(json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}));
        let b = template(json!({"metadata": {"labels": {}, "annotations": {}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1", "env": [], "ports": []}],
                     "volumes": []}}));
        assert_eq!(template_hash(&a), template_hash(&b));
    }

    #[test]
    fn a_changed_image_changes_the_hash() {
        let a = template(json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}));
        let b = template(json!({"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}));
        assert_ne!(template_hash(&a), template_hash(&b));
    }

    #[test]
    fn hash_is_pinned_across_releases() {
        // If this fails, every running plan would see a new revision after an upgrade
        // of the operator: change the hashing only with a migration.
        let a = template(json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}));
        assert_eq!(template_hash(&a), "p6cfmdjqcz");
    }

    #[test]
    fn short_names_are_kept_whole() {
        assert_eq!(
            deployment_name("shop", "web", "abcdefghij"),
            "shop-web-abcdefghij"
        );
    }

    #[test]
    fn plan_revision_ignores_component_order() {
        assert_eq!(
            plan_revision([("a", "x"), ("b", "y")]),
            plan_revision([("b", "y"), ("a", "x")])
        );
        assert_ne!(plan_revision([("a", "x")]), plan_revision([("a", "y")]));
    }

    proptest! {
        #[test]
        fn names_always_fit_and_stay_distinct(
            plan in "[a-z][a-z0-9-]{0,62}",
            c1 in "[a-z][a-z0-9-]{0,39}",
            c2 in "[a-z][a-z0-9-]{0,39}",
            hash in "[b-z2-9]{10}",
        ) {
            let n1 = deployment_name(&plan, &c1, &hash);
            prop_assert!(n1.len() <= MAX_NAME_LEN, "{n1} too long");
            prop_assert!(n1.ends_with(&hash));
            prop_assert!(n1.starts_with(|c: char| c.is_ascii_alphanumeric()));
            if c1 != c2 {
                prop_assert_ne!(n1, deployment_name(&plan, &c2, &hash));
            }
        }
    }
}
