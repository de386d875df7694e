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

pub mod args;
pub mod complete;
pub mod connect;
pub mod dashboard;
pub mod edit;
pub mod error;
#[cfg(test)]
mod fixtures;
pub mod lint;
pub mod render;
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

use crate::api::ReleasePlan;
use crate::plan::Action;
use clap::{CommandFactory, Parser};
use error::chain;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use view::Format;
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
        } => wait::wait_for(&ctx, &name, timeout, output).await,
        Command::Lint { .. } | Command::Completion { .. } => Ok(EXIT_ERROR),
        Command::Set(SetCommand::Image { name, images, wait }) => {
            edit::set_image(&ctx, &name, &images, &wait).await
        }
        Command::Restart {
            name,
            component,
            wait,
        } => edit::restart(&ctx, &name, component.as_deref(), &wait).await,
        Command::Promote { request, full } => {
            request::run(&ctx, &request, Action::Promote { full }).await
        }
        Command::Abort { request } => request::run(&ctx, &request, Action::Abort).await,
        Command::Retry { request } => request::run(&ctx, &request, Action::Retry).await,
        Command::Pause { request } => request::run(&ctx, &request, Action::Pause).await,
        Command::Resume { request } => request::run(&ctx, &request, Action::Resume).await,
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
        } => undo::run(&ctx, &name, to_revision, apply).await,
    }
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
    let changes = ctx.plan_changes(name);
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
