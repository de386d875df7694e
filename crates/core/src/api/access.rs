//! How a gate authenticates and which CA it trusts: `auth`, `headers` and
//! `tls`, one set of types shared by Prometheus and webhook gates (and by any
//! later HTTP gate kind), so the YAML reads the same everywhere.
//!
//! Values that are secret never sit in the plan: they are references to keys
//! of Secrets (and, for CA bundles, ConfigMaps) in the **operator's own
//! namespace**, which the operator reads when it calls the gate (see
//! docs/decisions.md, "Where gate credentials live").

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Annotation a Secret or ConfigMap must carry before gates may use it: the
/// namespaces whose plans may reference it, comma-separated, or `*` for all.
pub const ANNOTATION_GATE_NAMESPACES: &str = "releaseplan.io/gate-namespaces";

/// CEL on a gate: an `Authorization` header and `auth` would both set the same
/// header; one of them has to go.
pub const AUTH_HEADER_RULE: &str = "!has(self.auth) || !has(self.headers) || !self.headers.exists(h, h.name.lowerAscii() == 'authorization')";
/// Message of [`AUTH_HEADER_RULE`].
pub const AUTH_HEADER_MESSAGE: &str =
    "set either auth or an Authorization header in headers, not both";

/// A key of a Secret in the operator's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret, in the operator's namespace. It must carry the
    /// annotation `releaseplan.io/gate-namespaces` naming the plan's namespace
    /// (or `*`).
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("secretKeyRef.name must be a Secret name (a DNS subdomain)"))]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key in the Secret's data.
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$')").message("secretKeyRef.key must be a valid Secret key: letters, digits, '-', '_' and '.'"))]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A key of a ConfigMap in the operator's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap, in the operator's namespace. It must carry the
    /// annotation `releaseplan.io/gate-namespaces` naming the plan's namespace
    /// (or `*`).
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("configMapKeyRef.name must be a ConfigMap name (a DNS subdomain)"))]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key in the ConfigMap's data.
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$')").message("configMapKeyRef.key must be a valid ConfigMap key: letters, digits, '-', '_' and '.'"))]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A secret value: read from a key of a Secret at every call, so a rotated
/// Secret is used from the next evaluation on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretValue {
    /// The Secret key holding the value (surrounding whitespace, such as a
    /// trailing newline, is dropped).
    pub secret_key_ref: SecretKeyRef,
}

/// Credentials sent with every call of the gate: exactly one of `bearer` and
/// `basic`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[x_kube(
    validation = Rule::new("has(self.bearer) != has(self.basic)").message("auth: set exactly one of bearer and basic")
)]
#[serde(rename_all = "camelCase")]
pub struct GateAuth {
    /// `Authorization: Bearer <token>`, the token read from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<SecretValue>,

    /// `Authorization: Basic ...` (RFC 7617).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicAuth>,
}

/// HTTP basic authentication: a user name and a password from a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The user name (not secret; it has no ':').
    #[x_kube(validation = Rule::new("!self.contains(':')").message("basic.username must not contain ':'"))]
    #[schemars(length(min = 1, max = 256))]
    pub username: String,

    /// The password, read from a Secret.
    pub password: SecretValue,
}

/// One request header sent with every call of the gate: exactly one of
/// `value` and `valueFrom`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[x_kube(
    validation = Rule::new("has(self.value) != has(self.valueFrom)").message("headers: set exactly one of value and valueFrom"),
    validation = Rule::new("!(self.name.lowerAscii() in ['host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'te', 'upgrade', 'accept'])").message("headers: Host, Content-Length, Content-Type, Transfer-Encoding, Connection, TE, Upgrade and Accept are set by the operator")
)]
#[serde(rename_all = "camelCase")]
pub struct GateHeader {
    /// Header name, e.g. `X-Scope-OrgID`.
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9!#$%&\\'*+.^_`|~-]+$')").message("header name must be an HTTP token: letters, digits and !#$%&'*+.^_`|~-"))]
    #[schemars(length(min = 1, max = 128))]
    pub name: String,

    /// The value, written in the plan (not secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[\\\\t\\\\x20-\\\\x7e]*$')").message("header value must be printable ASCII"))]
    #[schemars(length(max = 4096))]
    pub value: Option<String>,

    /// The value, read from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<SecretValue>,
}

/// TLS settings of the gate's calls.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct GateTls {
    /// PEM CA certificates trusted for this gate, besides the public roots:
    /// for servers with certificates of a private CA.
    pub ca: CaBundleRef,
}

/// Where a PEM CA bundle is: exactly one of `secretKeyRef` and
/// `configMapKeyRef`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[x_kube(
    validation = Rule::new("has(self.secretKeyRef) != has(self.configMapKeyRef)").message("tls.ca: set exactly one of secretKeyRef and configMapKeyRef")
)]
#[serde(rename_all = "camelCase")]
pub struct CaBundleRef {
    /// A Secret key holding the PEM bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,

    /// A ConfigMap key holding the PEM bundle (e.g. one distributed by
    /// trust-manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
}
