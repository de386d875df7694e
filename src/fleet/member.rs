//! A member cluster from an Argo CD cluster Secret: label
//! `argocd.argoproj.io/secret-type: cluster`, keys `name`, `server` and
//! `config` (JSON: `bearerToken`, `username`/`password`, `tlsClientConfig`,
//! `execProviderConfig`), the format Argo CD, ApplicationSets and Kargo
//! register clusters in. It becomes a kubeconfig, so kube-rs reads the
//! certificates, the token and an exec plugin as it reads any kubeconfig,
//! and every request to the member has a deadline.

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The label that marks an Argo CD cluster Secret, and its value.
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// See [`SECRET_TYPE_LABEL`].
pub const SECRET_TYPE_CLUSTER: &str = "cluster";

/// Why a Secret does not give a member cluster.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// A key is missing or unreadable.
    #[error("cluster Secret {secret}: {what}")]
    Invalid {
        /// `namespace/name` of the Secret.
        secret: String,
        /// What is wrong.
        what: String,
    },
    /// Argo CD supports it, this operator does not (yet).
    #[error(
        "cluster Secret {secret}: {what} is not supported; use bearerToken, client certificates or execProviderConfig"
    )]
    Unsupported {
        /// `namespace/name` of the Secret.
        secret: String,
        /// The field.
        what: &'static str,
    },
    /// kube-rs refused the kubeconfig made from it (a certificate that is
    /// not PEM, an exec plugin that failed).
    #[error("cluster Secret {secret}: {source}")]
    Config {
        /// `namespace/name` of the Secret.
        secret: String,
        /// kube-rs's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
}

/// `config` of an Argo CD cluster Secret (the fields this operator reads).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArgoConfig {
    bearer_token: Option<String>,
    username: Option<String>,
    password: Option<String>,
    #[serde(default)]
    tls_client_config: TlsClientConfig,
    exec_provider_config: Option<ExecProviderConfig>,
    aws_auth_config: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlsClientConfig {
    #[serde(default)]
    insecure: bool,
    server_name: Option<String>,
    /// Base64 of PEM, as in a kubeconfig's `*-data` fields.
    ca_data: Option<String>,
    cert_data: Option<String>,
    key_data: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecProviderConfig {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    api_version: Option<String>,
}

/// A member cluster: its name, labels (what a fleet selects on) and how to
/// reach it.
#[derive(Debug, Clone)]
pub struct Member {
    /// The cluster's name (`name`, else the Secret's name).
    pub name: String,
    /// Its API server's URL.
    pub server: String,
    /// The Secret's labels.
    pub labels: BTreeMap<String, String>,
    /// `namespace/name` of the Secret, for messages.
    pub secret: String,
    kubeconfig: Kubeconfig,
    /// The Secret names a CA (`tlsClientConfig.caData`).
    has_ca: bool,
}

/// Deadlines of every request to a member: a member that does not answer
/// holds its wave, it never blocks the hub.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// To open a connection.
    pub connect: Duration,
    /// For an answer.
    pub read: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            connect: Duration::from_secs(5),
            read: Duration::from_secs(15),
        }
    }
}

fn key(secret: &Secret, name: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(name)?;
    String::from_utf8(bytes.0.clone()).ok()
}

impl Member {
    /// Reads an Argo CD cluster Secret.
    pub fn from_secret(secret: &Secret) -> Result<Member, MemberError> {
        let id = format!(
            "{}/{}",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        );
        let invalid = |what: &str| MemberError::Invalid {
            secret: id.clone(),
            what: what.to_string(),
        };
        let server = key(secret, "server").ok_or_else(|| invalid("no key server"))?;
        let name = key(secret, "name")
            .or_else(|| secret.metadata.name.clone())
            .ok_or_else(|| invalid("no key name"))?;
        let config: ArgoConfig = match key(secret, "config") {
            Some(raw) => serde_json::from_str(&raw)
                .map_err(|e| invalid(&format!("key config is not Argo CD's JSON: {e}")))?,
            None => ArgoConfig::default(),
        };
        if config.aws_auth_config.is_some() {
            return Err(MemberError::Unsupported {
                secret: id,
                what: "awsAuthConfig",
            });
        }
        let tls = &config.tls_client_config;
        let mut user = serde_json::Map::new();
        if let Some(t) = &config.bearer_token {
            user.insert("token".into(), json!(t));
        }
        if let (Some(u), Some(p)) = (&config.username, &config.password) {
            user.insert("username".into(), json!(u));
            user.insert("password".into(), json!(p));
        }
        if let Some(c) = &tls.cert_data {
            user.insert("client-certificate-data".into(), json!(c));
        }
        if let Some(k) = &tls.key_data {
            user.insert("client-key-data".into(), json!(k));
        }
        if let Some(e) = &config.exec_provider_config {
            user.insert(
                "exec".into(),
                json!({
                    "command": e.command,
                    "args": e.args,
                    "env": e.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
                    "apiVersion": e.api_version.as_deref().unwrap_or("client.authentication.k8s.io/v1"),
                }),
            );
        }
        let mut cluster = serde_json::Map::new();
        cluster.insert("server".into(), json!(server));
        if tls.insecure {
            cluster.insert("insecure-skip-tls-verify".into(), json!(true));
        }
        if let Some(ca) = &tls.ca_data {
            cluster.insert("certificate-authority-data".into(), json!(ca));
        }
        if let Some(n) = &tls.server_name {
            cluster.insert("tls-server-name".into(), json!(n));
        }
        let kubeconfig: Kubeconfig = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }))
        .map_err(|e| invalid(&format!("cannot make a kubeconfig of it: {e}")))?;
        Ok(Member {
            name,
            server,
            labels: secret.metadata.labels.clone().unwrap_or_default(),
            secret: id,
            kubeconfig,
            has_ca: tls.ca_data.is_some(),
        })
    }

    /// The client configuration of the member, with `deadlines` on every
    /// request.
    pub async fn config(&self, deadlines: Deadlines) -> Result<kube::Config, MemberError> {
        let mut config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig.clone(),
            &KubeConfigOptions::default(),
        )
        .await
        .map_err(|source| MemberError::Config {
            secret: self.secret.clone(),
            source,
        })?;
        // kube-rs reads a caData without any PEM block as no certificate at
        // all: a client that trusts nothing, failing only at the first call.
        if self.has_ca && config.root_cert.as_ref().is_none_or(Vec::is_empty) {
            return Err(MemberError::Invalid {
                secret: self.secret.clone(),
                what: "tlsClientConfig.caData holds no PEM certificate".into(),
            });
        }
        config.connect_timeout = Some(deadlines.connect);
        config.read_timeout = Some(deadlines.read);
        config.write_timeout = Some(deadlines.read);
        Ok(config)
    }
}

#[cfg(test)]
#[path = "member_tests.rs"]
mod tests;
