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
// For the doc checks (src/doc_lists.rs), which read the flags through this path.
#[cfg(test)]
pub(crate) use connect::apply_flags;
use error::chain;
use request::{RequestArgs, Sent};
use wait::WaitArgs;

use crate::api::ReleasePlan;
use crate::plan::Action;
use clap::{CommandFactory, Parser};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use view::Format;
use wait::{Decision, EXIT_ERROR, EXIT_TIMEOUT};

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
            result: wait::wait_result_word(code),
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
    } = request::send(ctx, name, action).await?;
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
    let stored = undo::stored_templates(ctx, name).await?;
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
