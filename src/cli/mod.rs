//! The `kubectl releaseplan` plugin (binary `kubectl-releaseplan`).
//!
//! `get` draws a plan as a tree, `list` tabulates plans, `wait` blocks a CI
//! job until the current generation settles (with exit codes), `promote`,
//! `abort`, `retry`, `pause` and `resume` ask the operator for an action
//! through the `releaseplan.io/request` annotation (never the spec), `history`
//! lists finished rollouts, `undo` looks up an earlier revision's stored
//! templates and prints them as a patch for git, `set image` and `restart`
//! edit the spec by component name with guarded JSON patches, `lint` checks
//! plan files, and `completion` prints shell scripts. `-o json|yaml` prints
//! the documents of `view`. The pure parts (rendering, views, the wait
//! decision, request values, the undo patch, the edit patches, the lint
//! checks) live in the submodules and are unit-tested; this module does the I/O.

pub mod complete;
pub mod dashboard;
pub mod edit;
#[cfg(test)]
mod fixtures;
pub mod lint;
pub mod render;
pub mod request;
pub mod text;
pub mod undo;
pub mod view;
pub mod wait;

use crate::api::cached::CachedRevision;
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::plan::Action;
use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCompleter;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Client, Config, ResourceExt};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use view::Format;
use wait::{Decision, EXIT_ERROR, EXIT_TIMEOUT};

const EXIT_CODES: &str = "\
Exit codes of `wait`:
  0  the current generation is Stable (status.observedGeneration == metadata.generation)
  1  error: plan not found, CRD not installed, no cluster reachable, bad arguments
  2  the current generation was rolled back (phase RolledBack)
  3  Stalled=True for another reason: InvalidSpec, RolloutHalted (a check failed with
     rollback.automatic: false), RollbackSlow
  4  timed out
`set image --wait` and `restart --wait` exit like `wait`; `lint` exits 2 when a
plan is invalid. Other commands exit 0 on success and 1 on error.";

const LINT_HELP: &str = "\
Checks, in order: apiVersion/kind/metadata.name; the CRD's structural schema
(types, unknown and required fields, bounds); the typed spec; the operator's
own spec checks (those behind the InvalidSpec stall); then, unless --offline
and when a cluster answers, a server-side apply dry run (CEL rules, admission).
Documents of other kinds are skipped.

Exit codes of `lint`:
  0  every ReleasePlan in the files is valid
  1  error: a file cannot be read or parsed, no ReleasePlan in it, bad arguments,
     or the API server failed for another reason than the plan (e.g. RBAC)
  2  at least one plan is invalid (each problem printed as FIELD: MESSAGE)";

/// The kubectl plugin for ReleasePlans: inspect, wait for, and steer rollouts.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-releaseplan",
    bin_name = "kubectl releaseplan",
    version,
    about = "Inspect, wait for and steer ReleasePlan rollouts (kubectl plugin)",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Connection options.
    #[command(flatten)]
    pub global: Global,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

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

/// A plugin command.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show a plan as a tree: phase, step, weight, revisions, components with their
    /// revision Deployments, gates and conditions.
    Get {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// Redraw on every change (in place on a terminal, a new block otherwise).
        #[arg(short, long)]
        watch: bool,
        /// Print a document for scripts instead of the tree (shape: docs/plugin.md).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// List plans: phase, step, weight, revisions, age and the failing gate.
    List {
        /// All namespaces.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Keep watching: one more row (or document) per change.
        #[arg(short, long)]
        watch: bool,
        /// Print documents for scripts instead of the table (shape: docs/plugin.md).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Validate plan files before merge: the CRD schema, the operator's own spec
    /// checks, and a server-side dry run when a cluster is reachable.
    #[command(after_help = LINT_HELP)]
    Lint {
        /// The file (YAML or JSON, several documents allowed; `-` for stdin).
        #[arg(short, long, required = true)]
        filename: Vec<PathBuf>,
        /// Offline checks only, even when a cluster is reachable.
        #[arg(long)]
        offline: bool,
    },
    /// Print a shell completion script (plan names come from the cluster).
    #[command(after_help = "\
  bash:  source <(kubectl-releaseplan completion bash)     (e.g. in ~/.bashrc)
  zsh:   source <(kubectl-releaseplan completion zsh)      (e.g. in ~/.zshrc)
  fish:  kubectl-releaseplan completion fish | source
  for `kubectl releaseplan <Tab>` (kubectl 1.26+, with kubectl's own completion set up):
         kubectl-releaseplan completion kubectl > ~/bin/kubectl_complete-releaseplan
         chmod +x ~/bin/kubectl_complete-releaseplan        (any directory on the PATH)")]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: complete::Shell,
    },
    /// Change a plan's spec: `set image` (a JSON patch addressed by component name).
    #[command(subcommand)]
    Set(SetCommand),
    /// Roll the same images out again through the normal steps, by bumping the
    /// pod-template annotation releaseplan.io/restartedAt.
    #[command(after_help = EXIT_CODES)]
    Restart {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// Only this component (default: every component).
        component: Option<String>,
        /// How to wait afterwards.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Block until the current generation settles; the exit code says how (for CI).
    #[command(after_help = EXIT_CODES)]
    Wait {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// Give up after this long (exit 4), e.g. 90s, 10m, 1h30m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
        /// Print one result document at the end (progress lines go to stderr).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Skip the current step or pause of a rollout (with --full: go to 100% at once).
    Promote {
        /// The plan and how long to wait for the operator.
        #[command(flatten)]
        request: RequestArgs,
        /// Go straight to the final step (100%).
        #[arg(long)]
        full: bool,
    },
    /// Roll the current rollout back to the stable revision now.
    Abort {
        /// The plan and how long to wait for the operator.
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Roll the desired revision out again after a rollback, or re-run a halted step.
    Retry {
        /// The plan and how long to wait for the operator.
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Hold the rollout at its current step (failure detection keeps running).
    Pause {
        /// The plan and how long to wait for the operator.
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Lift a pause request.
    Resume {
        /// The plan and how long to wait for the operator.
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Serve a live web dashboard of the plans on 127.0.0.1, with your own
    /// kubeconfig and RBAC (nothing is installed in the cluster).
    #[command(after_help = dashboard::AFTER_HELP)]
    Dashboard(dashboard::DashboardArgs),
    /// List finished rollouts (and the one in progress).
    History {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// Print a document for scripts instead of the table (shape: docs/plugin.md).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Go back to an earlier revision: prints a JSON merge patch of spec.components
    /// to apply in git (GitOps), or applies it to the spec with --apply.
    #[command(after_help = "\
The templates are the ones the operator stored for each revision (one
ControllerRevision per component revision, kept up to spec.revisionHistoryLimit
old revisions). Without --apply nothing in the cluster changes: the patch goes
to stdout, notes to stderr. Apply it in git, or:
  kubectl releaseplan undo shop > undo.json
  kubectl patch rp shop --type merge --patch-file undo.json
--apply edits spec.components directly: a GitOps tool that owns the plan will
revert it on its next sync.")]
    Undo {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// History entry number to go back to (default: the last Promoted entry before
        /// the current revision).
        #[arg(long)]
        to_revision: Option<i64>,
        /// Patch spec.components in the cluster (for users without GitOps).
        #[arg(long)]
        apply: bool,
    },
}

/// The `set` commands.
#[derive(Subcommand, Debug)]
pub enum SetCommand {
    /// Set container images of components by name: COMPONENT=IMAGE (the
    /// component's only container) or COMPONENT/CONTAINER=IMAGE.
    #[command(after_help = "\
The patch is a JSON patch that first tests the component's and the container's
name at the index it writes, so a concurrent change to the list (a reorder, a
removal) makes the API server refuse it instead of patching another component;
the plugin then reads the plan again and retries.
It edits the spec: a GitOps tool that owns the plan reverts it on its next sync.

With --wait, the exit codes are those of `wait`:
  0 Stable, 1 error, 2 rolled back, 3 stalled, 4 timed out.")]
    Image {
        /// Name of the ReleasePlan.
        #[arg(add = ArgValueCompleter::new(complete::plan_names))]
        name: String,
        /// One or more COMPONENT=IMAGE or COMPONENT/CONTAINER=IMAGE.
        #[arg(required = true, value_name = "COMPONENT[/CONTAINER]=IMAGE")]
        images: Vec<edit::ImageSet>,
        /// How to wait afterwards.
        #[command(flatten)]
        wait: WaitArgs,
    },
}

/// `--wait` and its options, for the commands that change the spec.
#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    /// Then wait for the new generation to settle, as `wait` does, with its exit codes.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 4).
    #[arg(long, default_value = "10m", value_parser = parse_timeout, requires = "wait")]
    pub timeout: Duration,
    /// With --wait: print one result document at the end, as `wait -o` does.
    #[arg(short, long, value_enum, requires = "wait")]
    pub output: Option<Format>,
}

/// Arguments of the request commands.
#[derive(Args, Debug)]
pub struct RequestArgs {
    /// Name of the ReleasePlan.
    #[arg(add = ArgValueCompleter::new(complete::plan_names))]
    pub name: String,
    /// How long to wait for the operator to acknowledge the request.
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    pub ack_timeout: Duration,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    crate::api::time::parse_duration(s)
}

/// Errors of the plugin, each with a message that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No kubeconfig or in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    Config(String),
    /// The plan does not exist.
    #[error("releaseplan {name} not found in namespace {namespace}")]
    NotFound {
        /// Plan name.
        name: String,
        /// Namespace looked in.
        namespace: String,
    },
    /// The CRD is missing.
    #[error(
        "the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed in the cluster at {0}: install it with `kubectl apply --server-side -f crds/releaseplan.yaml`"
    )]
    CrdMissing(String),
    /// The API server cannot be reached.
    #[error("cannot reach the Kubernetes API at {url}: {reason}")]
    Unreachable {
        /// Cluster URL.
        url: String,
        /// The error chain.
        reason: String,
    },
    /// The API server refused a request.
    #[error("the Kubernetes API refused to {what}: {reason}")]
    Refused {
        /// What was attempted.
        what: String,
        /// The API server's message.
        reason: String,
    },
    /// The plan was deleted while watching it.
    #[error("releaseplan {0} was deleted")]
    Deleted(String),
    /// The operator did not acknowledge a request in time.
    #[error(
        "the operator did not acknowledge request {value} within {seconds}s: is it running and watching namespace {namespace}? The annotation stays set; the operator applies it when it runs"
    )]
    NotAcknowledged {
        /// The annotation value.
        value: String,
        /// The wait.
        seconds: u64,
        /// Namespace of the plan.
        namespace: String,
    },
    /// The request was acknowledged but does not apply.
    #[error("the operator ignored the request: {0}")]
    Ignored(String),
    /// Undo cannot be built.
    #[error(transparent)]
    Undo(#[from] undo::UndoError),
    /// A spec edit cannot be built (unknown component or container).
    #[error(transparent)]
    Edit(#[from] edit::EditError),
    /// The plan kept changing under a guarded patch.
    #[error("releaseplan {0} changed while it was being patched ({1} attempts): try again")]
    Conflict(String, u32),
    /// A file given to `lint` cannot be read or parsed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Writing output failed.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

/// An error and its sources, joined with `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
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

/// A request sent by [`Ctx::request`].
pub struct Sent {
    /// The annotation value; the operator acknowledges exactly this value.
    pub value: String,
    /// The plan before the request.
    pub before: ReleasePlan,
    /// Why the operator will ignore it, when it does not apply now.
    pub ignored: Option<String>,
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

    fn plans(&self) -> Api<ReleasePlan> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Maps an API error: refused (with the server's message) or unreachable.
    fn error(&self, what: &str, e: kube::Error) -> CliError {
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

    async fn not_found(&self, name: &str) -> CliError {
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

    /// Sends a request (promote, abort...) to the operator: the metadata-only
    /// patch of the request annotation, the one request of the plugin's verbs
    /// and of the dashboard's buttons. Warns on stderr when the operator will
    /// ignore it or when it changes nothing; does not wait for the operator.
    pub async fn request(&self, name: &str, action: Action) -> Result<Sent, CliError> {
        let before = self.plan(name).await?;
        let ignored = action
            .applies_in(&before.status.clone().unwrap_or_default())
            .err()
            .map(|why| why.to_string());
        if let Some(why) = &ignored {
            eprintln!("warning: {why}; sending it anyway, the operator will ignore it");
        }
        if let Some(note) = request::no_op_note(action, &before) {
            eprintln!("note: {note}");
        }
        let value = request::request_value(action, chrono::Utc::now(), request::nonce());
        self.plans()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(request::request_patch(&value)),
            )
            .await
            .map_err(|e| self.error(&format!("annotate releaseplan {name}"), e))?;
        Ok(Sent {
            value,
            before,
            ignored,
        })
    }

    /// The ControllerRevisions storing the plan's revision templates.
    pub async fn stored_templates(&self, name: &str) -> Result<Vec<CachedRevision>, CliError> {
        let api: Api<CachedRevision> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api
            .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={name}")))
            .await
            .map_err(|e| {
                self.error(
                    &format!("list the stored templates (ControllerRevisions) of {name}"),
                    e,
                )
            })?
            .items)
    }
}

/// Parses the command line, runs the command and returns the process exit code.
/// Installs the rustls crypto provider first, as the operator does.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if complete::handle(&args) {
        return 0;
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits 2 on usage errors; 2 means "rolled back" for `wait`.
            return if e.use_stderr() { EXIT_ERROR } else { 0 };
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return EXIT_ERROR;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

/// Runs a parsed command; `Ok` carries the exit code.
pub async fn run(cli: Cli) -> Result<i32, CliError> {
    match &cli.command {
        Command::Lint { filename, offline } => {
            return lint_cmd(&cli.global, filename, *offline).await;
        }
        Command::Completion { shell } => {
            print!("{}", complete::script(*shell)?);
            return Ok(0);
        }
        _ => {}
    }
    let ctx = Ctx::connect(&cli.global).await?;
    match cli.command {
        Command::Get {
            name,
            watch,
            output,
        } => get(&ctx, &name, watch, output).await,
        Command::List {
            all_namespaces,
            watch,
            output,
        } => list(&ctx, all_namespaces, watch, output).await,
        Command::Wait {
            name,
            timeout,
            output,
        } => wait_for(&ctx, &name, timeout, output).await,
        Command::Lint { .. } | Command::Completion { .. } => Ok(EXIT_ERROR),
        Command::Set(SetCommand::Image { name, images, wait }) => {
            set_image(&ctx, &name, &images, &wait).await
        }
        Command::Restart {
            name,
            component,
            wait,
        } => restart(&ctx, &name, component.as_deref(), &wait).await,
        Command::Promote { request, full } => {
            send_request(&ctx, &request, Action::Promote { full }).await
        }
        Command::Abort { request } => send_request(&ctx, &request, Action::Abort).await,
        Command::Retry { request } => send_request(&ctx, &request, Action::Retry).await,
        Command::Pause { request } => send_request(&ctx, &request, Action::Pause).await,
        Command::Resume { request } => send_request(&ctx, &request, Action::Resume).await,
        Command::Dashboard(args) => dashboard::serve(ctx, &args).await,
        Command::History { name, output } => {
            let plan = ctx.plan(&name).await?;
            match output {
                Some(f) => print!("{}", view::to_text(&view::history_view(&plan), f, false)),
                None => print!("{}", render::render_history(&plan, chrono::Utc::now())),
            }
            Ok(0)
        }
        Command::Undo {
            name,
            to_revision,
            apply,
        } => undo_cmd(&ctx, &name, to_revision, apply).await,
    }
}

/// The changes of a plan: the plan each time it changes (`None` once deleted).
/// Watch errors are retried with backoff; the first is reported on stderr.
fn plan_changes(
    ctx: &Ctx,
    name: &str,
) -> impl futures::Stream<Item = Option<ReleasePlan>> + Send + use<> {
    let mut warned = false;
    watch_object(ctx.plans(), name)
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

async fn get(ctx: &Ctx, name: &str, watch: bool, output: Option<Format>) -> Result<i32, CliError> {
    let render = |plan: &ReleasePlan, deployments: &[Deployment]| match output {
        Some(f) => view::to_text(&view::plan_view(plan, Some(deployments)), f, watch),
        None => render::render_tree(plan, deployments),
    };
    let plan = ctx.plan(name).await?;
    let deployments = ctx.deployments(name).await?;
    let mut last = render(&plan, &deployments);
    let mut out = std::io::stdout();
    if !watch {
        out.write_all(last.as_bytes())?;
        return Ok(0);
    }
    let tty = out.is_terminal() && output.is_none();
    let yaml = output == Some(Format::Yaml);
    let draw = |out: &mut std::io::Stdout, text: &str| -> std::io::Result<()> {
        if tty {
            // Home the cursor and clear the screen, then draw.
            write!(out, "\x1b[H\x1b[2J{text}")?;
        } else if yaml {
            write!(out, "---\n{text}")?;
        } else if output.is_some() {
            write!(out, "{text}")?;
        } else {
            writeln!(out, "{text}")?;
        }
        out.flush()
    };
    draw(&mut out, &last)?;
    let changes = plan_changes(ctx, name);
    futures::pin_mut!(changes);
    // Deployments change without a plan status write now and then: refresh too.
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        let plan = tokio::select! {
            change = changes.next() => match change {
                Some(Some(p)) => p,
                Some(None) => return Err(CliError::Deleted(name.to_string())),
                None => return Ok(0),
            },
            _ = tick.tick() => match ctx.plan(name).await {
                Ok(p) => p,
                Err(CliError::NotFound { .. }) => return Err(CliError::Deleted(name.to_string())),
                Err(_) => continue,
            },
        };
        let Ok(deployments) = ctx.deployments(name).await else {
            continue;
        };
        let text = render(&plan, &deployments);
        if text != last {
            draw(&mut out, &text)?;
            last = text;
        }
    }
}

fn stamp() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Waits for the current generation of `name` to settle. Without `output` the
/// log lines go to stdout (for CI logs); with it they go to stderr and stdout
/// gets one [`view::WaitResult`] document.
async fn wait_for(
    ctx: &Ctx,
    name: &str,
    timeout: Duration,
    output: Option<Format>,
) -> Result<i32, CliError> {
    let log = |line: String| {
        if output.is_some() {
            eprintln!("{}  {line}", stamp());
        } else {
            println!("{}  {line}", stamp());
        }
    };
    let plan = ctx.plan(name).await?;
    let ns = ctx.namespace.clone();
    log(format!(
        "waiting up to {}s for releaseplan {ns}/{name} generation {} to settle",
        timeout.as_secs(),
        plan.metadata.generation.unwrap_or(0)
    ));
    let mut last_line = String::new();
    let mut last_plan = plan.clone();
    let mut report = |plan: &ReleasePlan| -> Option<(i32, String)> {
        let line = text::progress_line(plan);
        if line != last_line {
            log(line.clone());
            last_line = line;
        }
        last_plan = plan.clone();
        match wait::decide(plan) {
            Decision::Done(code, why) => {
                log(format!("done (exit {code}): {why}"));
                Some((code, why))
            }
            Decision::Waiting(_) => None,
        }
    };
    let settled = if let Some(done) = report(&plan) {
        Some(done)
    } else {
        let watching = async {
            let changes = plan_changes(ctx, name);
            futures::pin_mut!(changes);
            while let Some(change) = changes.next().await {
                match change {
                    Some(plan) => {
                        if let Some(done) = report(&plan) {
                            return Ok(done);
                        }
                    }
                    None => return Err(CliError::Deleted(name.to_string())),
                }
            }
            Err(CliError::Deleted(name.to_string()))
        };
        match tokio::time::timeout(timeout, watching).await {
            Ok(r) => Some(r?),
            Err(_) => None,
        }
    };
    let (code, reason) = settled.unwrap_or_else(|| {
        log(format!(
            "timed out after {}s (exit {EXIT_TIMEOUT}): {last_line}",
            timeout.as_secs()
        ));
        (EXIT_TIMEOUT, format!("timed out: {last_line}"))
    });
    if let Some(f) = output {
        let doc = view::WaitResult {
            api_version: view::API_VERSION,
            kind: "WaitResult",
            exit_code: code,
            result: view::wait_result_word(code),
            reason,
            plan: view::plan_view(&last_plan, None),
        };
        print!("{}", view::to_text(&doc, f, false));
    }
    Ok(code)
}

/// `list`: the table (or documents) of the plans in the namespace, or in all
/// namespaces; with `watch`, then one row (or document) per change.
async fn list(ctx: &Ctx, all: bool, watch: bool, output: Option<Format>) -> Result<i32, CliError> {
    let api: Api<ReleasePlan> = if all {
        Api::all(ctx.client.clone())
    } else {
        ctx.plans()
    };
    let mut plans = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(CliError::CrdMissing(ctx.url.clone()));
        }
        Err(e) => return Err(ctx.error("list releaseplans", e)),
    };
    plans.sort_by_key(|p| (p.namespace(), p.name_any()));
    let now = chrono::Utc::now();
    let mut rows = vec![view::list_header(all)];
    rows.extend(plans.iter().map(|p| view::list_row(p, all, now)));
    let mut out = std::io::stdout();
    match output {
        Some(f) if !watch => {
            let doc = view::PlanList {
                api_version: view::API_VERSION,
                kind: "PlanList",
                items: plans.iter().map(|p| view::plan_view(p, None)).collect(),
            };
            out.write_all(view::to_text(&doc, f, false).as_bytes())?;
        }
        Some(f) => {
            for p in &plans {
                write_doc(&mut out, &view::plan_view(p, None), f)?;
            }
        }
        None if plans.is_empty() && !watch => {
            let scope = if all {
                "any namespace".to_string()
            } else {
                format!("namespace {}", ctx.namespace)
            };
            eprintln!("no releaseplans in {scope}");
        }
        None => {
            for line in text::columns(&rows) {
                writeln!(out, "{line}")?;
            }
        }
    }
    if !watch {
        return Ok(0);
    }
    out.flush()?;
    // Rows seen so far, by namespace/name, to print only real changes.
    let mut seen: std::collections::BTreeMap<(Option<String>, String), Vec<String>> = plans
        .iter()
        .map(|p| ((p.namespace(), p.name_any()), view::list_row(p, all, now)))
        .collect();
    let events =
        kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let (plan, deleted) = match event {
            Ok(
                kube::runtime::watcher::Event::Apply(p)
                | kube::runtime::watcher::Event::InitApply(p),
            ) => (p, false),
            Ok(kube::runtime::watcher::Event::Delete(p)) => (p, true),
            Ok(_) => continue,
            Err(e) => {
                eprintln!("warning: watch failed, retrying: {}", chain(&e));
                continue;
            }
        };
        let key = (plan.namespace(), plan.name_any());
        let mut row = view::list_row(&plan, all, chrono::Utc::now());
        if deleted {
            row[usize::from(all) + 1] = "(deleted)".into();
            seen.remove(&key);
        } else if seen.get(&key).is_some_and(|r| same_row(r, &row)) {
            continue;
        } else {
            seen.insert(key, row.clone());
        }
        if let Some(f) = output {
            write_doc(&mut out, &view::plan_view(&plan, None), f)?;
        } else {
            rows.push(row);
            if let Some(line) = text::columns(&rows).last() {
                writeln!(out, "{line}")?;
            }
        }
        out.flush()?;
    }
    Ok(0)
}

/// Rows equal but for the age column (the age alone is no change).
fn same_row(a: &[String], b: &[String]) -> bool {
    let age = a.len().saturating_sub(2);
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| i == age || x == y)
}

/// One document of a stream: JSON on one line, YAML after `---`.
fn write_doc<T: serde::Serialize>(
    out: &mut std::io::Stdout,
    doc: &T,
    f: Format,
) -> std::io::Result<()> {
    if f == Format::Yaml {
        out.write_all(b"---\n")?;
    }
    out.write_all(view::to_text(doc, f, true).as_bytes())
}

/// Reads the documents of a plan file (`-`: stdin), YAML or JSON.
fn read_documents(path: &std::path::Path) -> Result<Vec<serde_json::Value>, CliError> {
    use serde::Deserialize as _;
    let name = path.display().to_string();
    let file_error = |reason: String| CliError::File {
        path: name.clone(),
        reason,
    };
    let text = if name == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| file_error(e.to_string()))?;
    let mut docs = Vec::new();
    for de in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_json::Value::deserialize(de).map_err(|e| file_error(e.to_string()))?;
        if !doc.is_null() {
            docs.push(doc);
        }
    }
    Ok(docs)
}

/// `lint`: the offline checks of [`lint::check_document`] on every document,
/// then a server-side apply dry run of the valid plans when a cluster answers.
async fn lint_cmd(global: &Global, files: &[PathBuf], offline: bool) -> Result<i32, CliError> {
    let mut valid = Vec::new();
    let mut invalid = 0;
    for path in files {
        for (i, doc) in read_documents(path)?.iter().enumerate() {
            let name = doc["metadata"]["name"].as_str().unwrap_or("(no name)");
            let at = format!("{} document {} ({name})", path.display(), i + 1);
            match lint::check_document(doc) {
                lint::Verdict::Valid(plan) => valid.push((at, plan, doc.clone())),
                lint::Verdict::Invalid(problems) => {
                    invalid += 1;
                    println!("{at}: invalid");
                    for p in problems {
                        println!("  {p}");
                    }
                }
                lint::Verdict::Other(kind) => eprintln!("{at}: skipped, kind {kind}"),
            }
        }
    }
    if valid.is_empty() && invalid == 0 {
        return Err(CliError::File {
            path: files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            reason: "no ReleasePlan in the file(s)".into(),
        });
    }
    let ctx = if offline {
        None
    } else {
        match Ctx::connect(global).await {
            Ok(ctx) => match ctx.client.apiserver_version().await {
                Ok(_) => Some(ctx),
                Err(e) => {
                    eprintln!(
                        "note: no cluster reachable ({}): offline checks only",
                        chain(&e)
                    );
                    None
                }
            },
            Err(e) => {
                eprintln!("note: no cluster configured ({e}): offline checks only");
                None
            }
        }
    };
    let mut error = false;
    for (at, plan, doc) in valid {
        let Some(ctx) = &ctx else {
            println!("{at}: valid (offline checks)");
            continue;
        };
        let ns = plan.namespace().unwrap_or_else(|| ctx.namespace.clone());
        let api: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ns);
        let mut params = PatchParams::apply("kubectl-releaseplan-lint")
            .dry_run()
            .force();
        params.field_validation = Some(kube::api::ValidationDirective::Strict);
        // The document as written: the server sees exactly the file.
        match api
            .patch(&plan.name_any(), &params, &Patch::Apply(&doc))
            .await
        {
            Ok(_) => {
                println!(
                    "{at}: valid (offline checks and a server-side dry run in namespace {ns})"
                );
            }
            Err(kube::Error::Api(s)) if matches!(s.code, 400 | 422) => {
                invalid += 1;
                println!(
                    "{at}: refused by the API server's dry run ({} {})",
                    s.code, s.reason
                );
                println!("  {}", s.message);
            }
            Err(e) => {
                error = true;
                eprintln!(
                    "error: {at}: {}",
                    ctx.error(&format!("dry-run releaseplan {ns}/{}", plan.name_any()), e)
                );
            }
        }
    }
    Ok(if invalid > 0 {
        LINT_INVALID
    } else if error {
        EXIT_ERROR
    } else {
        0
    })
}

/// Exit code of `lint` when a plan is invalid.
pub const LINT_INVALID: i32 = 2;

/// How many times a guarded patch is rebuilt when the plan changed under it.
const PATCH_ATTEMPTS: u32 = 3;

/// Applies a JSON patch built from the plan's raw spec by `build`; when the
/// API server refuses it (422: a `test` op failed because the list changed),
/// reads the plan again and rebuilds it. A patch refused twice in the same
/// form is a real refusal and reported as such. Returns the patched plan.
async fn guarded_patch<B>(ctx: &Ctx, name: &str, mut build: B) -> Result<ReleasePlan, CliError>
where
    B: FnMut(&serde_json::Value) -> Result<Option<serde_json::Value>, CliError>,
{
    let raw: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ctx.namespace,
        &ApiResource::erase::<ReleasePlan>(&()),
    );
    let mut previous: Option<serde_json::Value> = None;
    for _ in 0..PATCH_ATTEMPTS {
        let obj = match raw.get_opt(name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Err(ctx.not_found(name).await),
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(ctx.not_found(name).await),
            Err(e) => return Err(ctx.error(&format!("read releaseplan {name}"), e)),
        };
        let Some(patch) = build(&obj.data["spec"])? else {
            return ctx.plan(name).await;
        };
        let ops: json_patch::Patch =
            serde_json::from_value(patch.clone()).map_err(|e| CliError::Refused {
                what: format!("build a JSON patch for releaseplan {name}"),
                reason: e.to_string(),
            })?;
        match ctx
            .plans()
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
            .await
        {
            Ok(p) => return Ok(p),
            Err(kube::Error::Api(s)) if s.code == 422 && previous.as_ref() != Some(&patch) => {
                previous = Some(patch);
            }
            Err(e) => return Err(ctx.error(&format!("patch the spec of releaseplan {name}"), e)),
        }
    }
    Err(CliError::Conflict(name.to_string(), PATCH_ATTEMPTS))
}

/// After a spec change: say where it stands and, with `--wait`, wait for it.
async fn after_edit(
    ctx: &Ctx,
    name: &str,
    before_generation: Option<i64>,
    patched: &ReleasePlan,
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let generation = patched.metadata.generation.unwrap_or(0);
    if patched.metadata.generation == before_generation {
        say(
            wait,
            &format!(
                "releaseplan {}/{name} unchanged (generation {generation})",
                ctx.namespace
            ),
        );
    } else {
        say(
            wait,
            &format!(
                "releaseplan {}/{name} patched (generation {generation}); the operator rolls it out",
                ctx.namespace
            ),
        );
    }
    if wait.wait {
        return wait_for(ctx, name, wait.timeout, wait.output).await;
    }
    Ok(0)
}

/// A line about an edit: on stdout, or on stderr when stdout is for the
/// `-o` document of `--wait`.
fn say(wait: &WaitArgs, line: &str) {
    if wait.output.is_some() {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// `set image`: a guarded JSON patch of the named containers' images.
async fn set_image(
    ctx: &Ctx,
    name: &str,
    images: &[edit::ImageSet],
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let before = ctx.plan(name).await?;
    let mut lines = Vec::new();
    let patched = guarded_patch(ctx, name, |spec| {
        let e = edit::set_image_patch(name, spec, images)?;
        lines = e.lines;
        Ok(e.changes.then_some(e.patch))
    })
    .await?;
    for line in &lines {
        say(wait, line);
    }
    after_edit(ctx, name, before.metadata.generation, &patched, wait).await
}

/// `restart`: a guarded JSON patch of the restartedAt annotation.
async fn restart(
    ctx: &Ctx,
    name: &str,
    component: Option<&str>,
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let before = ctx.plan(name).await?;
    let at = stamp();
    let patched = guarded_patch(ctx, name, |spec| {
        Ok(Some(edit::restart_patch(name, spec, component, &at)?))
    })
    .await?;
    say(
        wait,
        &format!(
            "{}={at} set on the pod template of {}",
            edit::ANNOTATION_RESTARTED_AT,
            component.map_or_else(|| "every component".into(), |c| format!("component {c}"))
        ),
    );
    after_edit(ctx, name, before.metadata.generation, &patched, wait).await
}

async fn send_request(ctx: &Ctx, args: &RequestArgs, action: Action) -> Result<i32, CliError> {
    let name = args.name.as_str();
    let Sent {
        value,
        before,
        ignored,
    } = ctx.request(name, action).await?;
    println!("requested {value} on releaseplan {}/{name}", ctx.namespace);

    let deadline = tokio::time::Instant::now() + args.ack_timeout;
    let after = loop {
        let plan = ctx.plan(name).await?;
        let acked = plan
            .status
            .as_ref()
            .and_then(|s| s.acknowledged_request.as_deref())
            == Some(value.as_str());
        if acked {
            break plan;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::NotAcknowledged {
                value,
                seconds: args.ack_timeout.as_secs(),
                namespace: ctx.namespace.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    if let Some(why) = ignored {
        println!("now:    {}", text::summary(&after));
        return Err(CliError::Ignored(why));
    }
    println!("acknowledged by the operator");
    println!("before: {}", text::summary(&before));
    println!("now:    {}", text::summary(&after));
    if let Some(m) = after.status.as_ref().and_then(|s| s.message.as_deref()) {
        println!("        {m}");
    }
    Ok(0)
}

async fn undo_cmd(
    ctx: &Ctx,
    name: &str,
    to_revision: Option<i64>,
    apply: bool,
) -> Result<i32, CliError> {
    let plan = ctx.plan(name).await?;
    let stored = ctx.stored_templates(name).await?;
    let built = undo::build_undo(&plan, &stored, to_revision)?;
    let entry = &built.entry;
    eprintln!(
        "undo of releaseplan {}/{name} to history entry {} (revision {}, {})",
        ctx.namespace, entry.number, entry.revision, entry.outcome
    );
    for note in &built.notes {
        eprintln!("note: {note}");
    }
    if !apply {
        let text = serde_json::to_string_pretty(&built.patch).unwrap_or_default();
        println!("{text}");
        eprintln!(
            "this JSON merge patch replaces spec.components; put it in git (GitOps), or apply it with\n  kubectl patch releaseplan {name} -n {} --type merge --patch-file <file>\nor rerun with --apply",
            ctx.namespace
        );
        return Ok(0);
    }
    let patched = ctx
        .plans()
        .patch(name, &PatchParams::default(), &Patch::Merge(&built.patch))
        .await
        .map_err(|e| ctx.error(&format!("patch the spec of releaseplan {name}"), e))?;
    println!(
        "spec.components of releaseplan {}/{name} set to revision {} (generation {}); the operator rolls it out",
        ctx.namespace,
        entry.revision,
        patched.metadata.generation.unwrap_or(0)
    );
    println!(
        "follow it with: kubectl releaseplan wait {name} -n {}",
        ctx.namespace
    );
    eprintln!(
        "note: the spec was edited in the cluster; a GitOps tool that owns this plan will revert it unless git changes too"
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_commands_and_global_flags_anywhere() {
        let cli = Cli::try_parse_from([
            "kubectl-releaseplan",
            "wait",
            "shop",
            "-n",
            "prod",
            "--timeout",
            "15m",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("prod"));
        assert!(
            matches!(cli.command, Command::Wait { ref name, timeout, output: None } if name == "shop" && timeout == Duration::from_secs(900))
        );
        let cli = Cli::try_parse_from([
            "kubectl-releaseplan",
            "--context",
            "dev",
            "promote",
            "--full",
            "shop",
        ])
        .unwrap();
        assert_eq!(cli.global.context.as_deref(), Some("dev"));
        assert!(matches!(cli.command, Command::Promote { full: true, .. }));
        let cli =
            Cli::try_parse_from(["kubectl-releaseplan", "undo", "shop", "--to-revision", "3"])
                .unwrap();
        assert!(matches!(
            cli.command,
            Command::Undo {
                to_revision: Some(3),
                apply: false,
                ..
            }
        ));
        assert!(
            Cli::try_parse_from(["kubectl-releaseplan", "wait", "shop", "--timeout", "soon"])
                .is_err()
        );
    }

    #[test]
    fn parses_the_new_commands_and_kubectl_flags() {
        let cli = Cli::try_parse_from([
            "kubectl-releaseplan",
            "set",
            "image",
            "shop",
            "web=a:1",
            "api/proxy=b:2",
            "--wait",
            "-o",
            "json",
            "--as",
            "jane",
            "--as-group",
            "g1",
            "--as-group",
            "g2",
            "--request-timeout",
            "30",
            "-s",
            "https://h:6443",
            "--insecure-skip-tls-verify",
        ])
        .unwrap();
        let Command::Set(SetCommand::Image { images, wait, .. }) = &cli.command else {
            panic!("{cli:?}");
        };
        assert_eq!(images.len(), 2);
        assert!(wait.wait && wait.output == Some(Format::Json));
        assert_eq!(cli.global.as_group, ["g1", "g2"]);
        assert_eq!(cli.global.request_timeout, Some(Duration::from_secs(30)));
        let mut config = Config::new("https://old:6443".parse().unwrap());
        config.root_cert = Some(vec![vec![1]]);
        apply_flags(&mut config, &cli.global).unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://h:6443/");
        assert!(config.accept_invalid_certs && config.root_cert.is_none());
        assert_eq!(config.auth_info.impersonate.as_deref(), Some("jane"));
        assert_eq!(config.read_timeout, Some(Duration::from_secs(30)));
        // --timeout and -o of set image need --wait.
        assert!(
            Cli::try_parse_from([
                "kubectl-releaseplan",
                "set",
                "image",
                "shop",
                "web=a",
                "--timeout",
                "1m"
            ])
            .is_err()
        );
        assert!(
            Cli::try_parse_from(["kubectl-releaseplan", "list", "-A", "-w", "-o", "yaml"]).is_ok()
        );
        assert!(
            Cli::try_parse_from(["kubectl-releaseplan", "restart", "shop", "web", "--wait"])
                .is_ok()
        );
        assert!(
            Cli::try_parse_from(["kubectl-releaseplan", "lint", "-f", "-", "--offline"]).is_ok()
        );
    }

    #[test]
    fn help_documents_exit_codes() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("wait")
            .unwrap()
            .render_long_help()
            .to_string();
        for line in [
            "0  the current generation is Stable",
            "2  the current generation was rolled back",
            "3  Stalled=True",
            "4  timed out",
        ] {
            assert!(help.contains(line), "{help}");
        }
    }

    #[test]
    fn error_messages() {
        let e = CliError::NotFound {
            name: "shop".into(),
            namespace: "x".into(),
        };
        assert_eq!(e.to_string(), "releaseplan shop not found in namespace x");
        assert!(
            CliError::CrdMissing("https://127.0.0.1:6443/".into())
                .to_string()
                .starts_with("the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed")
        );
    }
}
