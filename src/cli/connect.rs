//! The connection to the cluster: the kubectl-like global flags
//! ([`Global`]), the kube configuration they make (`apply_flags`) and the
//! client with its namespace ([`Ctx`]), with the reads every command shares.

use super::error::{CliError, chain};
use crate::api::{LABEL_PLAN, ReleasePlan};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Client, Config};
use std::path::PathBuf;
use std::time::Duration;

/// Options shared by every command.
#[derive(Args, Debug, Clone, Default)]
pub struct Global {
    /// Namespace of the plan (default: the kubeconfig context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path of the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the API server (overrides the kubeconfig's; works without one).
    #[arg(short = 's', long, global = true)]
    pub server: Option<String>,
    /// Bearer token for the API server (replaces the kubeconfig user's credentials).
    #[arg(long, global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// User to impersonate.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate (repeat for several).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// Path of a PEM file of certificate authorities to trust for the API server.
    #[arg(long, global = true, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not verify the API server's certificate (insecure).
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,
    /// Give up on one API request after this long: 30s, 1m, or plain seconds,
    /// for connecting, sending and waiting for the answer; 0 means no limit.
    /// Default: kube's (30s to connect, 295s for a stalled send, no limit on
    /// the answer). Watches are restarted when it passes.
    #[arg(long, global = true, value_parser = parse_request_timeout, value_name = "DURATION")]
    pub request_timeout: Option<Duration>,
}

/// kubectl's `--request-timeout`: a duration (`30s`, `1m`) or plain seconds.
fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => crate::api::time::parse_duration(s),
    }
}

fn parse_server(server: &str) -> Result<http::Uri, CliError> {
    server
        .parse()
        .map_err(|e| CliError::Config(format!("--server {server}: {e}")))
}

/// Maps the kubectl global flags onto the connection configuration, as kubectl
/// does: each overrides what the kubeconfig says.
pub(crate) fn apply_flags(config: &mut Config, g: &Global) -> Result<(), CliError> {
    if let Some(server) = &g.server {
        config.cluster_url = parse_server(server)?;
    }
    if let Some(token) = &g.token {
        let auth = &mut config.auth_info;
        auth.token = Some(token.clone().into());
        auth.token_file = None;
        auth.exec = None;
        auth.auth_provider = None;
        auth.username = None;
        auth.password = None;
    }
    if let Some(user) = &g.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !g.as_group.is_empty() {
        config.auth_info.impersonate_groups = Some(g.as_group.clone());
    }
    if let Some(path) = &g.certificate_authority {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let bad = |reason: String| {
            CliError::Config(format!(
                "--certificate-authority {}: {reason}",
                path.display()
            ))
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate in the file".into()));
        }
        config.root_cert = Some(certs);
        config.root_cert_file = None;
    }
    if g.insecure_skip_tls_verify {
        if g.certificate_authority.is_some() {
            return Err(CliError::Config(
                "--insecure-skip-tls-verify and --certificate-authority exclude each other".into(),
            ));
        }
        config.accept_invalid_certs = true;
        config.root_cert = None;
        config.root_cert_file = None;
    }
    if let Some(t) = g.request_timeout {
        let t = (!t.is_zero()).then_some(t);
        config.connect_timeout = t;
        config.read_timeout = t;
        config.write_timeout = t;
        config.reset_reader_on_write = true;
    }
    Ok(())
}

/// A connection to the cluster and the namespace to work in.
pub struct Ctx {
    /// The API client.
    pub client: Client,
    /// The namespace of the plan.
    pub namespace: String,
    /// The cluster URL, for messages.
    pub url: String,
}

impl Ctx {
    /// Connects as kubectl would: `--kubeconfig`, else `$KUBECONFIG` or
    /// `~/.kube/config`, else the in-cluster service account; `--context` picks
    /// the context, `-n` the namespace (default: the context's).
    pub async fn connect(global: &Global) -> Result<Ctx, CliError> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..KubeConfigOptions::default()
        };
        let loaded = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|e| CliError::Config(chain(&e)))?;
                Ok(Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| CliError::Config(chain(&e)))?)
            }
            None if global.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| CliError::Config(chain(&e))),
            None => Config::infer()
                .await
                .map_err(|e| CliError::Config(chain(&e))),
        };
        let mut config = match (loaded, &global.server) {
            (Ok(c), _) => c,
            // Like kubectl: --server (with --token) needs no kubeconfig.
            (Err(_), Some(server)) => Config::new(parse_server(server)?),
            (Err(e), None) => return Err(e),
        };
        apply_flags(&mut config, global)?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let url = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| CliError::Config(chain(&e)))?;
        Ok(Ctx {
            client,
            namespace,
            url,
        })
    }

    pub(super) fn plans(&self) -> Api<ReleasePlan> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Maps an API error: refused (with the server's message) or unreachable.
    pub(super) fn error(&self, what: &str, e: kube::Error) -> CliError {
        match e {
            kube::Error::Api(s) => CliError::Refused {
                what: what.to_string(),
                reason: format!("{} ({} {})", s.message, s.code, s.reason),
            },
            e => CliError::Unreachable {
                url: self.url.clone(),
                reason: chain(&e),
            },
        }
    }

    /// Reads a plan; a 404 is told apart as a missing plan or a missing CRD.
    pub async fn plan(&self, name: &str) -> Result<ReleasePlan, CliError> {
        match self.plans().get_opt(name).await {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(self.not_found(name).await),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(self.not_found(name).await),
            Err(e) => Err(self.error(&format!("read releaseplan {name}"), e)),
        }
    }

    pub(super) async fn not_found(&self, name: &str) -> CliError {
        match self.plans().list(&ListParams::default().limit(1)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => CliError::CrdMissing(self.url.clone()),
            _ => CliError::NotFound {
                name: name.to_string(),
                namespace: self.namespace.clone(),
            },
        }
    }

    /// The revision Deployments of a plan.
    pub async fn deployments(&self, name: &str) -> Result<Vec<Deployment>, CliError> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut list = api
            .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={name}")))
            .await
            .map_err(|e| self.error(&format!("list the Deployments of {name}"), e))?
            .items;
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(list)
    }

    /// The StatefulSets and DaemonSets of a plan's StatefulSet and
    /// DaemonSet components, and their pods: read only for the kinds the
    /// plan has (a plan of Deployments needs no right on them).
    pub async fn workload_objects(
        &self,
        plan: &ReleasePlan,
    ) -> Result<(Vec<StatefulSet>, Vec<DaemonSet>, Vec<Pod>), CliError> {
        use crate::api::workload::WorkloadKind;
        let name = plan.metadata.name.clone().unwrap_or_default();
        let has = |k: WorkloadKind| plan.spec.components.iter().any(|c| c.kind == k);
        let selector = format!("{LABEL_PLAN}={name}");
        let sets = if has(WorkloadKind::StatefulSet) {
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
            api.list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| self.error(&format!("list the StatefulSets of {name}"), e))?
                .items
        } else {
            Vec::new()
        };
        let daemons = if has(WorkloadKind::DaemonSet) {
            let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), &self.namespace);
            api.list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| self.error(&format!("list the DaemonSets of {name}"), e))?
                .items
        } else {
            Vec::new()
        };
        if sets.is_empty() && daemons.is_empty() {
            return Ok((sets, daemons, Vec::new()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!(
            "{selector},{}",
            releaseplan_core::objects::stateful_set::LABEL_WORKLOAD
        );
        let pods = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| self.error(&format!("list the pods of {name}"), e))?
            .items;
        Ok((sets, daemons, pods))
    }

    /// The same connection working in `namespace` (the dashboard serves
    /// several namespaces with one client).
    #[must_use]
    pub fn in_namespace(&self, namespace: &str) -> Ctx {
        Ctx {
            client: self.client.clone(),
            namespace: namespace.to_string(),
            url: self.url.clone(),
        }
    }

    /// The changes of a plan: the plan each time it changes (`None` once deleted).
    /// Watch errors are retried with backoff; the first is reported on stderr.
    pub(super) fn plan_changes(
        &self,
        name: &str,
    ) -> impl futures::Stream<Item = Option<ReleasePlan>> + Send + use<> {
        let mut warned = false;
        watch_object(self.plans(), name)
            .default_backoff()
            .filter_map(move |r| {
                let out = match r {
                    Ok(p) => Some(p),
                    Err(e) => {
                        if !warned {
                            warned = true;
                            eprintln!("warning: watch failed, retrying: {}", chain(&e));
                        }
                        None
                    }
                };
                futures::future::ready(out)
            })
    }
}
