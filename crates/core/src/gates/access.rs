//! Credentials and CA bundles of HTTP gates (`auth`, `headers`, `tls`), the
//! pure half: the settings as written, their rules, and who may use a
//! shared object. The operator crate reads them (`releaseplan::gates::access`).
//!
//! The plan holds references only; the gate runner's task reads the
//! referenced Secrets and ConfigMaps (one GET each, with a timeout) right
//! before each evaluation, never inside a reconcile. So a rotated Secret is
//! used from the next evaluation on, and a missing Secret or key is an
//! `Error` result of the gate whose message names the object and key, never
//! a value.
//!
//! Where the objects may live is one rule (docs/decisions.md): the
//! operator's own namespace, and only objects that name the plan's namespace
//! (or `*`) in their annotation `releaseplan.io/gate-namespaces`, so a plan
//! author can neither read another namespace's Secrets nor any Secret of the
//! operator's namespace that its owner did not share.
//!
//! Values never leave this module except into the request: header values
//! are marked sensitive (hidden from `Debug`), the operator's `Resolved` has no `Debug`
//! that shows them, and errors carry names only.

use std::time::Duration;

use http::header::HeaderName;

use crate::api::access::{ANNOTATION_GATE_NAMESPACES, GateAuth, GateHeader, GateTls, SecretKeyRef};

/// Longest wait for the API server when reading one Secret or ConfigMap.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A gate's `auth`, `headers` and `tls`, as written in the spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Bearer token or basic auth.
    pub auth: Option<GateAuth>,
    /// Extra headers.
    pub headers: Vec<GateHeader>,
    /// CA bundle to trust.
    pub tls: Option<GateTls>,
}

impl Access {
    /// Collects a gate's access settings.
    pub fn of(auth: Option<&GateAuth>, headers: &[GateHeader], tls: Option<&GateTls>) -> Access {
        Access {
            auth: auth.cloned(),
            headers: headers.to_vec(),
            tls: tls.cloned(),
        }
    }

    /// The admission rules of these fields (the CRD's CEL), checked again
    /// by the operator, as every rule is (`plan::spec`): a plan stored before
    /// a rule existed gets `InvalidSpec` naming the field instead of a gate
    /// that silently sends something else. The field is relative to the
    /// gate, e.g. `headers[1].name`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |field: String, message: &str| Err((field, message.to_string()));
        if let Some(auth) = &self.auth {
            match (&auth.bearer, &auth.basic) {
                (Some(b), None) => check_ref("auth.bearer.secretKeyRef", &b.secret_key_ref)?,
                (None, Some(basic)) => {
                    if basic.username.is_empty() || basic.username.contains(':') {
                        return bad(
                            "auth.basic.username".into(),
                            "basic.username must not be empty or contain ':'",
                        );
                    }
                    check_ref(
                        "auth.basic.password.secretKeyRef",
                        &basic.password.secret_key_ref,
                    )?;
                }
                _ => return bad("auth".into(), "auth: set exactly one of bearer and basic"),
            }
        }
        for (i, h) in self.headers.iter().enumerate() {
            let name = h.name.to_ascii_lowercase();
            if HeaderName::from_bytes(h.name.as_bytes()).is_err() {
                return bad(
                    format!("headers[{i}].name"),
                    "header name must be an HTTP token",
                );
            }
            if RESERVED_HEADERS.contains(&name.as_str()) {
                return bad(
                    format!("headers[{i}]"),
                    "headers: Host, Content-Length, Content-Type, Transfer-Encoding, Connection, TE, Upgrade and Accept are set by the operator",
                );
            }
            if self.headers[..i]
                .iter()
                .any(|g| g.name.eq_ignore_ascii_case(&h.name))
            {
                return bad(
                    "headers".into(),
                    "headers: header names must be unique (case-insensitive)",
                );
            }
            if name == "authorization" && self.auth.is_some() {
                return bad(String::new(), crate::api::access::AUTH_HEADER_MESSAGE);
            }
            match (&h.value, &h.value_from) {
                (Some(v), None) => {
                    if v.chars().any(|c| c != '\t' && !(' '..='~').contains(&c)) {
                        return bad(
                            format!("headers[{i}].value"),
                            "header value must be printable ASCII",
                        );
                    }
                }
                (None, Some(from)) => {
                    check_ref(
                        &format!("headers[{i}].valueFrom.secretKeyRef"),
                        &from.secret_key_ref,
                    )?;
                }
                _ => {
                    return bad(
                        format!("headers[{i}]"),
                        "headers: set exactly one of value and valueFrom",
                    );
                }
            }
        }
        if let Some(tls) = &self.tls {
            match (&tls.ca.secret_key_ref, &tls.ca.config_map_key_ref) {
                (Some(r), None) => check_ref("tls.ca.secretKeyRef", r)?,
                (None, Some(r)) => check_name_key("tls.ca.configMapKeyRef", &r.name, &r.key)?,
                _ => {
                    return bad(
                        "tls.ca".into(),
                        "tls.ca: set exactly one of secretKeyRef and configMapKeyRef",
                    );
                }
            }
        }
        Ok(())
    }

    /// Nothing to read: no credentials, no secret headers, no CA.
    pub fn reads_nothing(&self) -> bool {
        self.auth.is_none()
            && self.tls.is_none()
            && self.headers.iter().all(|h| h.value_from.is_none())
    }
}

/// The kind of object a value is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        })
    }
}

/// Why a gate's credentials or CA bundle could not be used. Names objects
/// and keys, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The object has no such key.
    #[error("{kind} {namespace}/{name} has no key {key:?}")]
    NoKey {
        /// Secret or ConfigMap.
        kind: Kind,
        /// The operator's namespace.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The object does not exist, or does not share itself with the plan's
    /// namespace: one answer for both, so a plan author cannot learn which
    /// names exist in the operator's namespace.
    #[error(
        "{kind} {namespace}/{name} is not available to namespace {plan_namespace}: it must exist in the operator's namespace {namespace} and its annotation {ANNOTATION_GATE_NAMESPACES} must list {plan_namespace} (or be \"*\")"
    )]
    Unavailable {
        /// Secret or ConfigMap.
        kind: Kind,
        /// The operator's namespace.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The namespace of the plan that references it.
        plan_namespace: String,
    },
    /// The API server refused, failed or did not answer.
    #[error("cannot read {kind} {namespace}/{name}: {why}")]
    Unreadable {
        /// Secret or ConfigMap.
        kind: Kind,
        /// The operator's namespace.
        namespace: String,
        /// Name of the object.
        name: String,
        /// What went wrong, by kind (status code or timeout).
        why: String,
        /// The API server was away (no answer, a 5xx or a 429), not a
        /// refusal: worth asking again rather than holding against the gate.
        away: bool,
    },
    /// The value cannot be used as it is.
    #[error("key {key:?} of {kind} {namespace}/{name} {why}")]
    Unusable {
        /// Secret or ConfigMap.
        kind: Kind,
        /// The operator's namespace.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The key.
        key: String,
        /// What is wrong with it (never the value).
        why: String,
    },
    /// The administrator's GatePolicy refuses it (a Secret sent to a host it
    /// is not bound to); the message names the rule.
    #[error(transparent)]
    Policy(#[from] crate::gates::policy::PolicyRefusal),
    /// A field that needs exactly one of two settings has neither (the
    /// CRD and [`Access::check`] refuse such a spec first).
    #[error("{0}")]
    Incomplete(&'static str),
    /// A header name or plain value of the spec is not valid HTTP.
    #[error("header {0:?} is not a valid HTTP header")]
    BadHeader(String),
    /// The operator runs without access to the cluster's Secrets (tests).
    #[error(
        "this gate reads credentials, and the operator was started without a credentials reader"
    )]
    NoReader,
}

/// Headers the operator sets itself (lowercase): a gate may not set them.
const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
    "accept",
];

fn check_ref(field: &str, r: &SecretKeyRef) -> Result<(), (String, String)> {
    check_name_key(field, &r.name, &r.key)
}

/// An object name (a DNS subdomain) and a data key (`[-._a-zA-Z0-9]+`).
fn check_name_key(field: &str, name: &str, key: &str) -> Result<(), (String, String)> {
    let subdomain = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !subdomain {
        return Err((
            format!("{field}.name"),
            "the name must be a DNS subdomain".into(),
        ));
    }
    let valid_key = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_key {
        return Err((
            format!("{field}.key"),
            "the key must be letters, digits, '-', '_' and '.'".into(),
        ));
    }
    Ok(())
}

/// Whether an object's `releaseplan.io/gate-namespaces` annotation lets
/// plans of `namespace` use it: a comma-separated list of namespaces, or `*`.
pub fn shared_with(annotation: Option<&String>, namespace: &str) -> bool {
    annotation.is_some_and(|a| {
        a.split(',')
            .map(str::trim)
            .any(|n| n == "*" || n == namespace)
    })
}

/// Whether plans of `namespace` may use a ClusterGateTemplate with these
/// annotations: without `releaseplan.io/gate-namespaces` every namespace may
/// (what a cluster-wide template has always meant); with it, only those it
/// lists. A template a namespace may not use is, to that namespace, a
/// template that does not exist (no oracle of the names, and no copy of its
/// content into that namespace's status).
pub fn cluster_template_admits(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    namespace: &str,
) -> bool {
    match annotations.and_then(|a| a.get(crate::api::access::ANNOTATION_GATE_NAMESPACES)) {
        None => true,
        Some(a) => shared_with(Some(a), namespace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_template_is_for_every_namespace_unless_it_lists_them() {
        use std::collections::BTreeMap;
        assert!(cluster_template_admits(None, "team-a"));
        let listed = BTreeMap::from([(
            crate::api::access::ANNOTATION_GATE_NAMESPACES.to_string(),
            "team-a, team-c".to_string(),
        )]);
        assert!(cluster_template_admits(Some(&listed), "team-a"));
        assert!(!cluster_template_admits(Some(&listed), "team-b"));
        let none = BTreeMap::from([(
            crate::api::access::ANNOTATION_GATE_NAMESPACES.to_string(),
            String::new(),
        )]);
        assert!(
            !cluster_template_admits(Some(&none), "team-a"),
            "listed: none"
        );
    }

    #[test]
    fn sharing_is_by_namespace_list_or_star() {
        let a = |s: &str| Some(s.to_string());
        assert!(shared_with(a("shop").as_ref(), "shop"));
        assert!(shared_with(a("a, shop ,b").as_ref(), "shop"));
        assert!(shared_with(a("*").as_ref(), "anything"));
        assert!(!shared_with(a("shop-2").as_ref(), "shop"));
        assert!(!shared_with(a("").as_ref(), "shop"));
        assert!(!shared_with(None, "shop"));
    }

    #[test]
    fn errors_name_objects_and_keys() {
        let e = AccessError::NoKey {
            kind: Kind::Secret,
            namespace: "rp-system".into(),
            name: "prom".into(),
            key: "token".into(),
        };
        assert_eq!(e.to_string(), "Secret rp-system/prom has no key \"token\"");
        let e = AccessError::Unavailable {
            kind: Kind::ConfigMap,
            namespace: "rp-system".into(),
            name: "ca".into(),
            plan_namespace: "shop".into(),
        };
        assert_eq!(
            e.to_string(),
            "ConfigMap rp-system/ca is not available to namespace shop: it must exist in the operator's namespace rp-system and its annotation releaseplan.io/gate-namespaces must list shop (or be \"*\")"
        );
    }

    fn checked(v: serde_json::Value) -> Result<(), (String, String)> {
        let a: crate::api::WebhookGate = serde_json::from_value(v).unwrap();
        Access::of(a.auth.as_ref(), &a.headers, a.tls.as_ref()).check()
    }

    #[test]
    fn the_admission_rules_are_checked_again() {
        use serde_json::json;
        let gate = |extra: serde_json::Value| {
            let mut g = json!({"name": "g", "url": "http://h"});
            for (k, v) in extra.as_object().unwrap() {
                g[k] = v.clone();
            }
            g
        };
        let tok = json!({"secretKeyRef": {"name": "creds", "key": "token"}});
        let field = |v| checked(v).unwrap_err().0;
        assert_eq!(checked(gate(json!({}))), Ok(()));
        assert_eq!(
            checked(gate(json!({"auth": {"bearer": tok},
                "headers": [{"name": "X-A", "value": "a\tb"}, {"name": "X-B", "valueFrom": tok}],
                "tls": {"ca": {"configMapKeyRef": {"name": "ca.internal", "key": "ca.crt"}}}}))),
            Ok(())
        );
        assert_eq!(field(gate(json!({"auth": {}}))), "auth");
        let basic = json!({"username": "a:b", "password": tok});
        assert_eq!(
            field(gate(json!({"auth": {"basic": basic}}))),
            "auth.basic.username"
        );
        assert_eq!(
            field(gate(
                json!({"auth": {"bearer": {"secretKeyRef": {"name": "Bad", "key": "k"}}}})
            )),
            "auth.bearer.secretKeyRef.name"
        );
        assert_eq!(
            field(gate(
                json!({"headers": [{"name": "X-A", "valueFrom": {"secretKeyRef": {"name": "a", "key": "a/b"}}}]})
            )),
            "headers[0].valueFrom.secretKeyRef.key"
        );
        assert_eq!(
            field(gate(json!({"headers": [{"name": "X A", "value": "a"}]}))),
            "headers[0].name"
        );
        assert_eq!(
            field(gate(json!({"headers": [{"name": "Accept", "value": "a"}]}))),
            "headers[0]"
        );
        assert_eq!(
            field(gate(json!({"headers": [{"name": "X-A"}]}))),
            "headers[0]"
        );
        assert_eq!(
            field(gate(json!({"headers": [{"name": "X-A", "value": "a\nb"}]}))),
            "headers[0].value"
        );
        assert_eq!(
            field(gate(
                json!({"headers": [{"name": "X-A", "value": "a"}, {"name": "x-a", "value": "b"}]})
            )),
            "headers"
        );
        assert_eq!(
            checked(gate(
                json!({"auth": {"bearer": tok}, "headers": [{"name": "Authorization", "value": "x"}]})
            )),
            Err((
                String::new(),
                crate::api::access::AUTH_HEADER_MESSAGE.to_string()
            ))
        );
        assert_eq!(field(gate(json!({"tls": {"ca": {}}}))), "tls.ca");
    }

    #[test]
    fn only_secret_references_need_a_read() {
        let plain = GateHeader {
            name: "X-Org".into(),
            value: Some("a".into()),
            value_from: None,
        };
        assert!(Access::of(None, std::slice::from_ref(&plain), None).reads_nothing());
        let secret = GateHeader {
            value: None,
            value_from: Some(crate::api::access::SecretValue::default()),
            ..plain
        };
        assert!(!Access::of(None, &[secret], None).reads_nothing());
    }
}
