//! Credentials and CA bundles of HTTP gates (`auth`, `headers`, `tls`).
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
//! are marked sensitive (hidden from `Debug`), [`Resolved`] has no `Debug`
//! that shows them, and errors carry names only.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::ResourceExt;
use reqwest::header::{HeaderName, HeaderValue};

use super::outbound::GateHttp;
use crate::api::access::{
    ANNOTATION_GATE_NAMESPACES, CaBundleRef, GateAuth, GateHeader, GateTls, SecretKeyRef,
};

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
    /// The object does not exist.
    #[error(
        "{kind} {namespace}/{name} not found (gate credentials and CA bundles are read from the operator's namespace {namespace})"
    )]
    NotFound {
        /// Secret or ConfigMap.
        kind: Kind,
        /// The operator's namespace.
        namespace: String,
        /// Name of the object.
        name: String,
    },
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
    /// The object does not share itself with the plan's namespace.
    #[error(
        "{kind} {namespace}/{name} is not shared with namespace {plan_namespace}: its annotation {ANNOTATION_GATE_NAMESPACES} must list {plan_namespace} (or be \"*\")"
    )]
    NotShared {
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

/// Credentials ready to be sent, and the client that trusts the gate's CA.
/// No `Debug`: it holds secret values.
pub struct Resolved {
    auth: Option<Auth>,
    headers: Vec<(HeaderName, HeaderValue)>,
    client: Option<reqwest::Client>,
}

enum Auth {
    Bearer(String),
    Basic(String, String),
}

impl Resolved {
    /// No credentials, no headers, the default client.
    pub fn none() -> Resolved {
        Resolved {
            auth: None,
            headers: Vec::new(),
            client: None,
        }
    }

    /// The client to send with: the one trusting the gate's CA bundle, or the
    /// operator's default one.
    pub fn client<'a>(&'a self, http: &'a GateHttp) -> &'a reqwest::Client {
        self.client.as_ref().unwrap_or_else(|| http.client())
    }

    /// Adds the credentials and headers to a request.
    pub fn apply(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        for (name, value) in &self.headers {
            request = request.header(name.clone(), value.clone());
        }
        match &self.auth {
            // Both mark the Authorization value sensitive.
            Some(Auth::Bearer(token)) => request.bearer_auth(token),
            Some(Auth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        }
    }
}

/// Reads the Secrets and ConfigMaps gates reference, in one namespace (the
/// operator's).
#[derive(Clone)]
pub struct CredentialReader {
    client: Option<kube::Client>,
    namespace: String,
    timeout: Duration,
}

impl std::fmt::Debug for CredentialReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialReader")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl CredentialReader {
    /// A reader of `namespace` (the operator's own).
    pub fn new(client: kube::Client, namespace: String) -> CredentialReader {
        CredentialReader {
            client: Some(client),
            namespace,
            timeout: READ_TIMEOUT,
        }
    }

    /// A reader without a cluster: gates that reference nothing still work;
    /// any reference is an error.
    pub fn none() -> CredentialReader {
        CredentialReader {
            client: None,
            namespace: String::new(),
            timeout: READ_TIMEOUT,
        }
    }

    /// The namespace objects are read from.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Reads what `access` references for a plan of `plan_namespace` and
    /// builds the request settings. Each object is read once per call.
    pub async fn resolve(
        &self,
        http: &GateHttp,
        access: &Access,
        plan_namespace: &str,
    ) -> Result<Resolved, AccessError> {
        if access.reads_nothing() && access.headers.is_empty() {
            return Ok(Resolved::none());
        }
        let mut read = Reads {
            reader: self,
            plan_namespace,
            secrets: HashMap::new(),
            config_maps: HashMap::new(),
        };
        let auth = match &access.auth {
            None => None,
            Some(GateAuth {
                bearer: Some(b),
                basic: None,
            }) => Some(Auth::Bearer(
                read.text(&b.secret_key_ref, "is not a valid bearer token")
                    .await?,
            )),
            Some(GateAuth {
                bearer: None,
                basic: Some(basic),
            }) => Some(Auth::Basic(
                basic.username.clone(),
                read.text(&basic.password.secret_key_ref, "is not a valid password")
                    .await?,
            )),
            Some(_) => {
                return Err(AccessError::Incomplete(
                    "auth: set exactly one of bearer and basic",
                ));
            }
        };
        let mut headers = Vec::with_capacity(access.headers.len());
        for h in &access.headers {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| AccessError::BadHeader(h.name.clone()))?;
            let value = match (&h.value, &h.value_from) {
                (Some(v), _) => {
                    HeaderValue::from_str(v).map_err(|_| AccessError::BadHeader(h.name.clone()))?
                }
                (None, Some(from)) => {
                    let text = read
                        .text(&from.secret_key_ref, "is not a valid header value")
                        .await?;
                    let mut value =
                        HeaderValue::from_str(&text).map_err(|_| AccessError::Unusable {
                            kind: Kind::Secret,
                            namespace: self.namespace.clone(),
                            name: from.secret_key_ref.name.clone(),
                            key: from.secret_key_ref.key.clone(),
                            why: "is not a valid header value".into(),
                        })?;
                    value.set_sensitive(true);
                    value
                }
                (None, None) => {
                    return Err(AccessError::Incomplete(
                        "headers: set exactly one of value and valueFrom",
                    ));
                }
            };
            headers.push((name, value));
        }
        let client = match &access.tls {
            Some(tls) => Some(read.ca(http, &tls.ca).await?),
            None => None,
        };
        Ok(Resolved {
            auth,
            headers,
            client,
        })
    }
}

/// The objects read during one [`CredentialReader::resolve`].
struct Reads<'a> {
    reader: &'a CredentialReader,
    plan_namespace: &'a str,
    secrets: HashMap<String, Secret>,
    config_maps: HashMap<String, ConfigMap>,
}

impl Reads<'_> {
    fn err(&self, kind: Kind, name: &str) -> impl Fn(String) -> AccessError {
        let namespace = self.reader.namespace.clone();
        let name = name.to_string();
        move |why| AccessError::Unreadable {
            kind,
            namespace: namespace.clone(),
            name: name.clone(),
            why,
        }
    }

    /// GETs one object with the reader's timeout; checks it is shared with
    /// the plan's namespace.
    async fn get<K>(&self, kind: Kind, name: &str) -> Result<K, AccessError>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let Some(client) = &self.reader.client else {
            return Err(AccessError::NoReader);
        };
        let ns = &self.reader.namespace;
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        let unreadable = self.err(kind, name);
        let got = tokio::time::timeout(self.reader.timeout, api.get_opt(name))
            .await
            .map_err(|_| {
                unreadable(format!(
                    "the API server did not answer within {}s",
                    self.reader.timeout.as_secs()
                ))
            })?
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 403 => unreadable(format!(
                    "the operator may not read it (HTTP 403: grant get on {}s in {ns})",
                    kind.to_string().to_lowercase()
                )),
                kube::Error::Api(s) => unreadable(format!("HTTP {}", s.code)),
                _ => unreadable("the API server could not be reached".into()),
            })?;
        let Some(obj) = got else {
            return Err(AccessError::NotFound {
                kind,
                namespace: ns.clone(),
                name: name.to_string(),
            });
        };
        if !shared_with(
            obj.annotations().get(ANNOTATION_GATE_NAMESPACES),
            self.plan_namespace,
        ) {
            return Err(AccessError::NotShared {
                kind,
                namespace: ns.clone(),
                name: name.to_string(),
                plan_namespace: self.plan_namespace.to_string(),
            });
        }
        Ok(obj)
    }

    /// The bytes of a Secret key.
    async fn secret_bytes(&mut self, r: &SecretKeyRef) -> Result<Vec<u8>, AccessError> {
        if !self.secrets.contains_key(&r.name) {
            let s: Secret = self.get(Kind::Secret, &r.name).await?;
            self.secrets.insert(r.name.clone(), s);
        }
        self.secrets
            .get(&r.name)
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(&r.key))
            .map(|b| b.0.clone())
            .ok_or_else(|| AccessError::NoKey {
                kind: Kind::Secret,
                namespace: self.reader.namespace.clone(),
                name: r.name.clone(),
                key: r.key.clone(),
            })
    }

    /// A Secret key as one line of text, surrounding whitespace dropped.
    async fn text(&mut self, r: &SecretKeyRef, why: &str) -> Result<String, AccessError> {
        let bytes = self.secret_bytes(r).await?;
        let unusable = || AccessError::Unusable {
            kind: Kind::Secret,
            namespace: self.reader.namespace.clone(),
            name: r.name.clone(),
            key: r.key.clone(),
            why: why.to_string(),
        };
        let text = String::from_utf8(bytes).map_err(|_| unusable())?;
        let text = text.trim();
        if text.is_empty() || text.chars().any(char::is_control) {
            return Err(unusable());
        }
        Ok(text.to_string())
    }

    /// The client trusting the referenced CA bundle.
    async fn ca(
        &mut self,
        http: &GateHttp,
        r: &CaBundleRef,
    ) -> Result<reqwest::Client, AccessError> {
        let (kind, name, key, pem) = match (&r.secret_key_ref, &r.config_map_key_ref) {
            (Some(s), _) => (
                Kind::Secret,
                s.name.clone(),
                s.key.clone(),
                self.secret_bytes(s).await?,
            ),
            (None, Some(c)) => {
                if !self.config_maps.contains_key(&c.name) {
                    let cm: ConfigMap = self.get(Kind::ConfigMap, &c.name).await?;
                    self.config_maps.insert(c.name.clone(), cm);
                }
                let cm = self.config_maps.get(&c.name);
                let pem = cm
                    .and_then(|m| m.data.as_ref())
                    .and_then(|d| d.get(&c.key))
                    .map(|s| s.as_bytes().to_vec())
                    .or_else(|| {
                        cm.and_then(|m| m.binary_data.as_ref())
                            .and_then(|d| d.get(&c.key))
                            .map(|b| b.0.clone())
                    })
                    .ok_or_else(|| AccessError::NoKey {
                        kind: Kind::ConfigMap,
                        namespace: self.reader.namespace.clone(),
                        name: c.name.clone(),
                        key: c.key.clone(),
                    })?;
                (Kind::ConfigMap, c.name.clone(), c.key.clone(), pem)
            }
            (None, None) => {
                return Err(AccessError::Incomplete(
                    "tls.ca: set exactly one of secretKeyRef and configMapKeyRef",
                ));
            }
        };
        http.client_trusting(&pem)
            .map_err(|why| AccessError::Unusable {
                kind,
                namespace: self.reader.namespace.clone(),
                name,
                key,
                why,
            })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = AccessError::NotShared {
            kind: Kind::ConfigMap,
            namespace: "rp-system".into(),
            name: "ca".into(),
            plan_namespace: "shop".into(),
        };
        assert!(
            e.to_string()
                .contains("releaseplan.io/gate-namespaces must list shop")
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
