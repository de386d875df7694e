//! The command line: [`Cli`], its [`Command`]s and their help texts. The
//! option groups of one command live with it ([`WaitArgs`],
//! [`RequestArgs`], [`DashboardArgs`](super::dashboard::DashboardArgs)); the
//! connection flags are [`Global`]'s.

use super::connect::Global;
use super::request::RequestArgs;
use super::view::Format;
use super::wait::WaitArgs;
use super::{complete, dashboard, edit};
use crate::api::time::parse_duration;
use clap::{Parser, Subcommand};
use clap_complete::ArgValueCompleter;
use std::path::PathBuf;
use std::time::Duration;

const EXIT_CODES: &str = "\
Exit codes of `wait`:
  0  the current generation is Stable (status.observedGeneration == metadata.generation)
  1  error: plan not found, CRD not installed, no cluster reachable, bad arguments
  2  the current generation was rolled back (phase RolledBack)
  3  Stalled=True for another reason: InvalidSpec, RolloutHalted (a check failed with
     rollback.automatic: false), RollbackSlow, GatePolicyRefused (the GatePolicy
     refuses a gate or route: the release does not start until it allows it)
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

const PREVIEW_HELP: &str = "\
The timeline is a simulation through the operator's own decision code: pods
become ready (at once for the minimum, after --ready-after for the expected
duration), every gate passes, pauses without a duration are promoted. See
docs/plugin.md, \"preview\", for the -o json document.

Exit codes of `preview`:
  0  the preview ran (the plan and its Deployments pass the dry runs)
  1  error: the file cannot be read, no cluster reachable (without --offline), bad arguments
  2  the plan is invalid, or a dry run was refused";

/// The kubectl plugin for ReleasePlans: inspect, wait for, and steer rollouts.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-releaseplan",
    bin_name = "kubectl releaseplan",
    version = crate::build_info::VERSION_LINE,
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
    /// Show what applying a plan file will do, before it is applied: which
    /// components get a new revision and why, the steps with replicas and
    /// weights, gates, durations, the peak pods and requests, and server-side
    /// dry runs of the plan and of its new Deployments.
    #[command(after_help = PREVIEW_HELP)]
    Preview(super::preview::PreviewArgs),
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
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
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
        #[arg(long, conflicts_with = "override_window")]
        full: bool,
        /// Also through a closed release window or a ReleaseFreeze: start a held
        /// rollout, or take one step of a held one (recorded in a Warning Event).
        #[arg(long)]
        override_window: bool,
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
    /// Print the ReleasePlan that takes a running Deployment over without a
    /// restart of capacity (`spec.components[].adopt`), its template, replicas
    /// and HPA included, as YAML to commit or to pipe into `kubectl apply`.
    #[command(after_help = "\
The Deployment is scaled down only as the plan's first revision's pods become
ready, then held at 0 until you delete it (docs/operations.md, \"Adopting a
running Deployment\"). An HPA that scales the Deployment becomes the plan's
`autoscaling`; delete it when you apply the plan. Writes nothing.")]
    Adopt {
        /// The Deployment (`NAME` or `deployment/NAME`).
        deployment: String,
        /// Name of the plan (default: the Deployment's, as a DNS label).
        #[arg(long)]
        plan: Option<String>,
        /// Name of the component (default: the Deployment's, as a DNS label of at most
        /// 40 characters).
        #[arg(long)]
        component: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::connect::apply_flags;
    use clap::CommandFactory;
    use kube::Config;

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
}
