//! The `kubectl releaseplan` plugin (binary `kubectl-releaseplan`).
//!
//! `get` draws a plan as a tree, `list` tabulates plans, `wait` blocks a CI
//! job until the current generation settles (with exit codes), `promote`,
//! `abort`, `retry`, `pause` and `resume` ask the operator for an action
//! through the `releaseplan.io/request` annotation (never the spec), `history`
//! lists finished rollouts, `undo` looks up an earlier revision's stored
//! templates and prints them as a patch for git, `set image` and `restart`
//! edit the spec by component name with guarded JSON patches, `lint` checks
//! plan files, `preview` shows what a plan file will do before it is applied, `dashboard` serves a live web page of the plans, and
//! `completion` prints shell scripts.
//!
//! One file per verb holds its pure part (unit-tested) and the I/O that runs
//! it: [`get`], [`list`], [`history`], [`wait`], [`request`] (the five
//! request verbs), [`edit`] (`set image`, `restart`), [`undo`], [`lint`],
//! [`complete`] and [`dashboard`]. Under them: [`args`] (the command line),
//! [`connect`] (the kubectl-like flags and the client), [`error`], [`view`]
//! (the `-o json|yaml` documents) and [`text`] (the short texts of a plan's
//! state that several verbs print). This module only dispatches.

pub mod adopt;
pub mod args;
pub mod complete;
pub mod connect;
pub mod dashboard;
pub mod edit;
pub mod error;
#[cfg(test)]
mod fixtures;
pub mod get;
pub mod history;
pub mod lint;
pub mod list;
pub mod live;
pub mod preview;
pub mod request;
pub mod text;
pub mod undo;
pub mod view;
pub mod wait;

pub use args::{Cli, Command, SetCommand};
pub use connect::{Ctx, Global};
pub use error::CliError;
pub use lint::LINT_INVALID;
// For the doc checks (src/doc_lists.rs), which read the flags through this path.
#[cfg(test)]
pub(crate) use connect::apply_flags;

use crate::plan::Action;
use clap::{CommandFactory, Parser};
use wait::EXIT_ERROR;

/// Parses the command line, runs the command and returns the process exit code.
/// Installs the rustls crypto provider first, as the operator does.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if complete::handle(&args, Cli::command) {
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
            return lint::run(&cli.global, filename, *offline).await;
        }
        Command::Preview(args) => return preview::run(&cli.global, args).await,
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
        } => get::run(&ctx, &name, watch, output).await,
        Command::List {
            all_namespaces,
            watch,
            output,
        } => list::run(&ctx, all_namespaces, watch, output).await,
        Command::Wait {
            name,
            timeout,
            output,
        } => wait::wait_for(&ctx, &name, timeout, output).await,
        Command::Lint { .. } | Command::Completion { .. } | Command::Preview(_) => Ok(EXIT_ERROR),
        Command::Set(SetCommand::Image { name, images, wait }) => {
            edit::set_image(&ctx, &name, &images, &wait).await
        }
        Command::Restart {
            name,
            component,
            wait,
        } => edit::restart(&ctx, &name, component.as_deref(), &wait).await,
        Command::Promote {
            request,
            full,
            override_window,
        } => {
            let action = if override_window {
                Action::OverrideWindow
            } else {
                Action::Promote { full }
            };
            request::run(&ctx, &request, action).await
        }
        Command::Abort { request } => request::run(&ctx, &request, Action::Abort).await,
        Command::Retry { request } => request::run(&ctx, &request, Action::Retry).await,
        Command::Pause { request } => request::run(&ctx, &request, Action::Pause).await,
        Command::Resume { request } => request::run(&ctx, &request, Action::Resume).await,
        Command::Dashboard(args) => dashboard::serve(ctx, &args).await,
        Command::History { name, output } => history::run(&ctx, &name, output).await,
        Command::Undo {
            name,
            to_revision,
            apply,
        } => undo::run(&ctx, &name, to_revision, apply).await,
        Command::Adopt {
            deployment,
            plan,
            component,
        } => adopt::run(&ctx, &deployment, plan.as_deref(), component.as_deref()).await,
    }
}
