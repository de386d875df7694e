//! The `kubectl releaseplan` plugin (binary `kubectl-releaseplan`).
//!
//! `get` draws a plan as a tree, `wait` blocks a CI job until the current
//! generation settles (with exit codes), `promote`, `abort`, `retry`, `pause`
//! and `resume` ask the operator for an action through the
//! `releaseplan.io/request` annotation (never the spec), `history` lists
//! finished rollouts, and `undo` looks up an earlier revision's stored
//! templates and prints them as a patch for git. The pure parts (rendering,
//! the wait decision, request values, the undo patch) live in the submodules
//! and are unit-tested; this module does the I/O.

#[cfg(test)]
mod fixtures;
pub mod render;
pub mod request;
pub mod undo;
pub mod wait;

use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::plan::Action;
use clap::{Args, Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Client, Config};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use wait::{Decision, EXIT_ERROR, EXIT_TIMEOUT};

const EXIT_CODES: &str = "\
Exit codes of `wait`:
  0  the current generation is Stable (status.observedGeneration == metadata.generation)
  1  error: plan not found, CRD not installed, no cluster reachable, bad arguments
  2  the current generation was rolled back (phase RolledBack)
  3  Stalled=True for another reason: InvalidSpec, RolloutHalted (a check failed with
     rollback.automatic: false), RollbackSlow
  4  timed out
Other commands exit 0 on success and 1 on error.";

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
}

/// A plugin command.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show a plan as a tree: phase, step, weight, revisions, components with their
    /// revision Deployments, gates and conditions.
    Get {
        /// Name of the ReleasePlan.
        name: String,
        /// Redraw on every change (in place on a terminal, a new block otherwise).
        #[arg(short, long)]
        watch: bool,
    },
    /// Block until the current generation settles; the exit code says how (for CI).
    #[command(after_help = EXIT_CODES)]
    Wait {
        /// Name of the ReleasePlan.
        name: String,
        /// Give up after this long (exit 4), e.g. 90s, 10m, 1h30m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
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
    /// List finished rollouts (and the one in progress).
    History {
        /// Name of the ReleasePlan.
        name: String,
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

/// Arguments of the request commands.
#[derive(Args, Debug)]
pub struct RequestArgs {
    /// Name of the ReleasePlan.
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
        let config = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|e| CliError::Config(chain(&e)))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| CliError::Config(chain(&e)))?
            }
            None if global.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| CliError::Config(chain(&e)))?,
            None => Config::infer()
                .await
                .map_err(|e| CliError::Config(chain(&e)))?,
        };
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

    /// The ControllerRevisions storing the plan's revision templates.
    pub async fn stored_templates(&self, name: &str) -> Result<Vec<ControllerRevision>, CliError> {
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &self.namespace);
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
    let cli = match Cli::try_parse() {
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
    let ctx = Ctx::connect(&cli.global).await?;
    match cli.command {
        Command::Get { name, watch } => get(&ctx, &name, watch).await,
        Command::Wait { name, timeout } => wait_for(&ctx, &name, timeout).await,
        Command::Promote { request, full } => {
            send_request(&ctx, &request, Action::Promote { full }).await
        }
        Command::Abort { request } => send_request(&ctx, &request, Action::Abort).await,
        Command::Retry { request } => send_request(&ctx, &request, Action::Retry).await,
        Command::Pause { request } => send_request(&ctx, &request, Action::Pause).await,
        Command::Resume { request } => send_request(&ctx, &request, Action::Resume).await,
        Command::History { name } => {
            let plan = ctx.plan(&name).await?;
            print!("{}", render::render_history(&plan, chrono::Utc::now()));
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

async fn get(ctx: &Ctx, name: &str, watch: bool) -> Result<i32, CliError> {
    let plan = ctx.plan(name).await?;
    let deployments = ctx.deployments(name).await?;
    let mut last = render::render_tree(&plan, &deployments);
    let mut out = std::io::stdout();
    if !watch {
        out.write_all(last.as_bytes())?;
        return Ok(0);
    }
    let tty = out.is_terminal();
    let draw = |out: &mut std::io::Stdout, text: &str| -> std::io::Result<()> {
        if tty {
            // Home the cursor and clear the screen, then draw.
            write!(out, "\x1b[H\x1b[2J{text}")?;
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
        let text = render::render_tree(&plan, &deployments);
        if text != last {
            draw(&mut out, &text)?;
            last = text;
        }
    }
}

fn stamp() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn wait_for(ctx: &Ctx, name: &str, timeout: Duration) -> Result<i32, CliError> {
    let plan = ctx.plan(name).await?;
    let ns = ctx.namespace.clone();
    println!(
        "{}  waiting up to {}s for releaseplan {ns}/{name} generation {} to settle",
        stamp(),
        timeout.as_secs(),
        plan.metadata.generation.unwrap_or(0)
    );
    let mut last_line = String::new();
    let mut report = |plan: &ReleasePlan| -> Option<i32> {
        let line = render::progress_line(plan);
        if line != last_line {
            println!("{}  {line}", stamp());
            last_line = line;
        }
        match wait::decide(plan) {
            Decision::Done(code, why) => {
                println!("{}  done (exit {code}): {why}", stamp());
                Some(code)
            }
            Decision::Waiting(_) => None,
        }
    };
    if let Some(code) = report(&plan) {
        return Ok(code);
    }
    let watching = async {
        let changes = plan_changes(ctx, name);
        futures::pin_mut!(changes);
        while let Some(change) = changes.next().await {
            match change {
                Some(plan) => {
                    if let Some(code) = report(&plan) {
                        return Ok(code);
                    }
                }
                None => return Err(CliError::Deleted(name.to_string())),
            }
        }
        Err(CliError::Deleted(name.to_string()))
    };
    if let Ok(r) = tokio::time::timeout(timeout, watching).await {
        r
    } else {
        println!(
            "{}  timed out after {}s (exit {EXIT_TIMEOUT}): {last_line}",
            stamp(),
            timeout.as_secs()
        );
        Ok(EXIT_TIMEOUT)
    }
}

async fn send_request(ctx: &Ctx, args: &RequestArgs, action: Action) -> Result<i32, CliError> {
    let name = args.name.as_str();
    let before = ctx.plan(name).await?;
    let ignored = action
        .applies_in(&before.status.clone().unwrap_or_default())
        .err();
    if let Some(why) = &ignored {
        eprintln!("warning: {why}; sending it anyway, the operator will ignore it");
    }
    if let Some(note) = request::no_op_note(action, &before) {
        eprintln!("note: {note}");
    }
    let value = request::request_value(action, chrono::Utc::now(), request::nonce());
    ctx.plans()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(request::request_patch(&value)),
        )
        .await
        .map_err(|e| ctx.error(&format!("annotate releaseplan {name}"), e))?;
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
        println!("now:    {}", render::summary(&after));
        return Err(CliError::Ignored(why.to_string()));
    }
    println!("acknowledged by the operator");
    println!("before: {}", render::summary(&before));
    println!("now:    {}", render::summary(&after));
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
            matches!(cli.command, Command::Wait { ref name, timeout } if name == "shop" && timeout == Duration::from_secs(900))
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
