//! Credentials and CA bundles of HTTP gates, the I/O half: the referenced
//! Secrets and ConfigMaps read right before an evaluation (see the core's
//! `gates::access` for the rules), and the request they make.
//!
//! Values never leave this module except into the request: header values
//! are marked sensitive (hidden from `Debug`), [`Resolved`] has no `Debug`
//! that shows them, and errors carry names only.

pub use releaseplan_core::gates::access::*;

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::ResourceExt;
use reqwest::header::{HeaderName, HeaderValue};

use super::outbound::GateHttp;
use crate::api::access::{ANNOTATION_GATE_NAMESPACES, CaBundleRef, GateAuth, SecretKeyRef};
use crate::gates::policy::{Destination, NamespacePolicy};

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

/// What the administrator's GatePolicy adds to one call: where it goes (a
/// shared Secret is sent only to hosts it is bound to) and the headers it
/// pins.
pub struct Binding<'a> {
    /// The policies of the plan's namespace.
    pub policy: &'a NamespacePolicy,
    /// The call's host and port (None: the URL has none and the call fails
    /// before anything is sent).
    pub destination: Option<&'a Destination>,
    /// Headers set on every call, `(name, value)`.
    pub pinned: &'a [(String, String)],
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
    /// builds the request settings, with the headers `bound` pins; a Secret
    /// `bound` does not let go to the destination is an error. Each object
    /// is read once per call.
    pub async fn resolve(
        &self,
        http: &GateHttp,
        access: &Access,
        plan_namespace: &str,
        bound: &Binding<'_>,
    ) -> Result<Resolved, AccessError> {
        if access.reads_nothing() && access.headers.is_empty() && bound.pinned.is_empty() {
            return Ok(Resolved::none());
        }
        let mut read = Reads {
            reader: self,
            bound,
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
        // Pinned last; a plan's gate cannot set them (refused before).
        for (name, value) in bound.pinned {
            let bad = || AccessError::BadHeader(name.clone());
            headers.push((
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?,
                HeaderValue::from_str(value).map_err(|_| bad())?,
            ));
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

impl CredentialReader {
    /// One Secret key as one line of text, for a plan of `plan_namespace`,
    /// under the same rules as a gate's (the Secret shared with the
    /// namespace, and bound to `bound.destination` when a GatePolicy says
    /// so): a notification receiver's URL and token.
    pub async fn secret_text(
        &self,
        r: &SecretKeyRef,
        plan_namespace: &str,
        bound: &Binding<'_>,
    ) -> Result<String, AccessError> {
        let mut read = Reads {
            reader: self,
            bound,
            plan_namespace,
            secrets: HashMap::new(),
            config_maps: HashMap::new(),
        };
        let read = read.text(r, "is not one line of text");
        tokio::time::timeout(self.timeout, read)
            .await
            .unwrap_or_else(|_| {
                Err(AccessError::Unreadable {
                    kind: Kind::Secret,
                    namespace: self.namespace.clone(),
                    name: r.name.clone(),
                    why: format!("not read within {}s", self.timeout.as_secs()),
                    away: true,
                })
            })
    }
}

/// The objects read during one [`CredentialReader::resolve`].
struct Reads<'a> {
    reader: &'a CredentialReader,
    bound: &'a Binding<'a>,
    plan_namespace: &'a str,
    secrets: HashMap<String, Secret>,
    config_maps: HashMap<String, ConfigMap>,
}

impl Reads<'_> {
    fn err(&self, kind: Kind, name: &str) -> impl Fn(String, bool) -> AccessError {
        let namespace = self.reader.namespace.clone();
        let name = name.to_string();
        move |why, away| AccessError::Unreadable {
            kind,
            namespace: namespace.clone(),
            name: name.clone(),
            why,
            away,
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
                unreadable(
                    format!(
                        "the API server did not answer within {}s",
                        self.reader.timeout.as_secs()
                    ),
                    true,
                )
            })?
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 403 => unreadable(
                    format!(
                        "the operator may not read it (HTTP 403: grant get on {}s in {ns})",
                        kind.to_string().to_lowercase()
                    ),
                    false,
                ),
                kube::Error::Api(s) => unreadable(
                    format!("HTTP {}", s.code),
                    crate::kube_errors::away_status(s.code),
                ),
                _ => unreadable("the API server could not be reached".into(), true),
            })?;
        let unavailable = || AccessError::Unavailable {
            kind,
            namespace: ns.clone(),
            name: name.to_string(),
            plan_namespace: self.plan_namespace.to_string(),
        };
        // Missing and not shared answer alike: no oracle of the names in the
        // operator's namespace (the operator's own log tells them apart).
        let Some(obj) = got else {
            tracing::debug!(%kind, %name, "gate credentials: no such object");
            return Err(unavailable());
        };
        if !shared_with(
            obj.annotations().get(ANNOTATION_GATE_NAMESPACES),
            self.plan_namespace,
        ) {
            tracing::debug!(%kind, %name, plan_namespace = self.plan_namespace, "gate credentials: not shared");
            return Err(unavailable());
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

    /// A Secret key as one line of text, surrounding whitespace dropped: a
    /// value that is sent, so only to a destination the Secret is bound to.
    async fn text(&mut self, r: &SecretKeyRef, why: &str) -> Result<String, AccessError> {
        let bytes = self.secret_bytes(r).await?;
        if let Some(d) = self.bound.destination {
            let annotations = self
                .secrets
                .get(&r.name)
                .and_then(|s| s.metadata.annotations.as_ref());
            self.bound
                .policy
                .admit_credential(&r.name, annotations, d)?;
        }
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
