//! The dashboard's HTTP server: the embedded page, the JSON and server-sent
//! event endpoints fed by the [`Store`], the buttons' endpoint, and the
//! watches that fill the store. Runs until Ctrl-C.

use super::guard::{
    TOKEN_QUERY, TokenGate, allowed_hosts, check_host, check_token, new_token, post_refusal,
};
use super::model::{Detail, Row};
use super::store::{Key, Note, Store, Tracked};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::cli::connect::Ctx;
use crate::cli::error::CliError;
use crate::cli::request;
use crate::plan::Action;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::Serialize;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

/// Extra help of the command.
pub const AFTER_HELP: &str = "\
The first line on stdout is the URL to open, with the per-run token
(?token=...): every request needs it (the page keeps it in an HttpOnly,
SameSite=Strict cookie), so other local users and processes see nothing. The
server binds 127.0.0.1 unless --address says otherwise (then it warns on
stderr), answers only requests addressed to it by that name (Host header),
and accepts a button's POST only with the token in a header and from its own
origin, so other web pages cannot press the buttons.
Everything it shows and does is with your kubeconfig's identity (and --as):
it needs list and watch on releaseplans, deployments, statefulsets, daemonsets
and events, and the
buttons need patch on releaseplans.";

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");
/// The placeholder in index.html replaced by the per-run token.
const TOKEN_PLACEHOLDER: &str = "__RP_TOKEN__";
/// The placeholder in index.html replaced by what is shown (scope, cluster).
const SCOPE_PLACEHOLDER: &str = "__RP_SCOPE__";

/// Arguments of `dashboard`.
#[derive(clap::Args, Debug, Clone)]
pub struct DashboardArgs {
    /// Every namespace (default: the namespace of -n or of the context).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Port to listen on; 0 picks a free one (the URL on stdout says which).
    #[arg(long, default_value_t = 3100)]
    pub port: u16,
    /// Address to bind; anything but a loopback address exposes your
    /// credentials' view of the cluster to whoever reaches it.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub address: IpAddr,
}

/// The server's shared state.
struct Shared {
    store: RwLock<Store>,
    notes: broadcast::Sender<Note>,
    ctx: Ctx,
    token: String,
    index: String,
}

type App = Arc<Shared>;

/// Runs the dashboard until Ctrl-C.
pub async fn serve(ctx: Ctx, args: &DashboardArgs) -> Result<i32, CliError> {
    let listener = tokio::net::TcpListener::bind((args.address, args.port))
        .await
        .map_err(|e| {
            CliError::Config(format!(
                "cannot listen on {}:{}: {e}",
                args.address, args.port
            ))
        })?;
    let addr = listener.local_addr()?;
    let token = new_token()?;
    let gate = Arc::new(TokenGate::new(token.clone(), addr.port()));
    let url = format!("http://{addr}/?{TOKEN_QUERY}={token}");
    // Host header values the server answers to; empty: any (non-loopback bind).
    let hosts: Arc<[String]> = allowed_hosts(addr).into();
    let scope = if args.all_namespaces {
        "all namespaces".to_string()
    } else {
        format!("namespace {}", ctx.namespace)
    };
    let index = INDEX_HTML.replace(TOKEN_PLACEHOLDER, &token).replace(
        SCOPE_PLACEHOLDER,
        &html_escape(&format!("{scope} · {}", ctx.url)),
    );
    let (notes, _) = broadcast::channel(4096);
    let namespace = (!args.all_namespaces).then(|| ctx.namespace.clone());
    let app: App = Arc::new(Shared {
        store: RwLock::new(Store::default()),
        notes,
        token,
        index,
        ctx,
    });
    let api = |app: &App| -> (kube::Client, Option<String>) {
        (app.ctx.client.clone(), namespace.clone())
    };
    let (client, ns) = api(&app);
    tokio::spawn(follow::<ReleasePlan>(
        scoped(client.clone(), ns.as_deref()),
        watcher::Config::default(),
        app.clone(),
    ));
    tokio::spawn(follow::<Deployment>(
        scoped(client.clone(), ns.as_deref()),
        watcher::Config::default().labels(LABEL_PLAN),
        app.clone(),
    ));
    tokio::spawn(follow::<k8s_openapi::api::apps::v1::StatefulSet>(
        scoped(client.clone(), ns.as_deref()),
        watcher::Config::default().labels(LABEL_PLAN),
        app.clone(),
    ));
    tokio::spawn(follow::<k8s_openapi::api::apps::v1::DaemonSet>(
        scoped(client.clone(), ns.as_deref()),
        watcher::Config::default().labels(LABEL_PLAN),
        app.clone(),
    ));
    tokio::spawn(follow::<KubeEvent>(
        scoped(client, ns.as_deref()),
        watcher::Config::default().fields("involvedObject.kind=ReleasePlan"),
        app.clone(),
    ));

    let router = Router::new()
        .route("/", get(index_page))
        .route("/app.js", get(app_js))
        .route("/app.css", get(app_css))
        .route("/api/plans", get(plans_json))
        .route("/api/stream", get(overview_stream))
        .route("/api/plans/{ns}/{name}", get(detail_json))
        .route("/api/plans/{ns}/{name}/stream", get(detail_stream))
        .route("/api/plans/{ns}/{name}/actions/{action}", post(act))
        .layer(middleware::from_fn_with_state(gate, check_token))
        .layer(middleware::from_fn_with_state(hosts, check_host))
        .with_state(app);
    // The URL first, alone on its line: scripts and tests read it. The only
    // place the token is printed.
    println!("{url}");
    eprintln!(
        "serving the ReleasePlan dashboard of {scope} at http://{addr}/ with your kubeconfig's identity; Ctrl-C stops it"
    );
    if !addr.ip().is_loopback() {
        eprintln!("{}", beyond_loopback_warning(addr));
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(0)
}

/// The warning of a server bound beyond loopback: who can reach it, and
/// what they get with the token.
fn beyond_loopback_warning(addr: std::net::SocketAddr) -> String {
    format!(
        "warning: listening on {addr}, beyond loopback: whoever can reach this port and learns the token \
         sees the plans and presses the buttons with your kubeconfig's identity; the token travels \
         unencrypted (plain HTTP) and the Host check is off. Bind 127.0.0.1 (the default) unless this \
         machine and its network are yours alone."
    )
}

/// An API of `K` in `namespace`, or in every namespace.
fn scoped<K>(client: kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// Follows one kind into the store, announcing each change; an error is kept
/// for the page and the watch retried with backoff (it never ends the server).
async fn follow<K>(api: Api<K>, config: watcher::Config, app: App)
where
    K: Tracked + serde::de::DeserializeOwned + Sync,
{
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut buffer: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        let note = {
            let Ok(mut store) = app.store.write() else {
                return;
            };
            store.apply(event, &mut buffer)
        };
        if let Some(note) = note {
            // No page open: nobody to tell.
            let _ = app.notes.send(note);
        }
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Headers for every embedded asset: no caching across runs (the token
/// changes), no framing, no sniffing, scripts only from here.
fn asset(content_type: &'static str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

async fn index_page(State(app): State<App>) -> Response {
    asset("text/html; charset=utf-8", app.index.clone())
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS.to_string())
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS.to_string())
}

/// The overview message: rows to add or replace, keys to remove, watch errors.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct OverviewMsg {
    /// Replace the page's whole list with `upsert` (a snapshot).
    reset: bool,
    upsert: Vec<Row>,
    delete: Vec<String>,
    errors: Vec<String>,
    /// The server's clock, for "time in step".
    now: DateTime<Utc>,
}

fn read(app: &App) -> std::sync::RwLockReadGuard<'_, Store> {
    // A writer that panicked leaves the data as it was: still worth showing.
    app.store
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn snapshot(app: &App) -> OverviewMsg {
    let store = read(app);
    OverviewMsg {
        reset: true,
        upsert: store.overview(),
        delete: Vec::new(),
        errors: store.errors(),
        now: Utc::now(),
    }
}

async fn plans_json(State(app): State<App>) -> Json<OverviewMsg> {
    Json(snapshot(&app))
}

/// An SSE message of `value` as JSON (an `error` event if it cannot be
/// serialized, which plain data does not do); `Result` for axum's stream type.
#[allow(clippy::unnecessary_wraps)]
fn sse_json<T: Serialize>(value: &T) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default()
        .json_data(value)
        .unwrap_or_else(|e| SseEvent::default().event("error").data(e.to_string())))
}

/// Waits for the next note, then takes every note already queued: one
/// message per burst. `None` when the server stops; `Resync` when notes were
/// lost (the page then gets a snapshot).
async fn next_burst(rx: &mut broadcast::Receiver<Note>) -> Option<BTreeSet<Key>> {
    let mut keys = BTreeSet::new();
    let push = |note: Note, keys: &mut BTreeSet<Key>| match note {
        Note::Changed(k) => {
            keys.insert(k);
            true
        }
        Note::Resync => false,
    };
    let first = match rx.recv().await {
        Ok(n) => n,
        Err(broadcast::error::RecvError::Lagged(_)) => return Some(BTreeSet::new()),
        Err(broadcast::error::RecvError::Closed) => return None,
    };
    let mut whole = !push(first, &mut keys);
    loop {
        match rx.try_recv() {
            Ok(n) => whole |= !push(n, &mut keys),
            Err(broadcast::error::TryRecvError::Lagged(_)) => whole = true,
            Err(_) => break,
        }
    }
    // An empty set stands for "everything".
    Some(if whole { BTreeSet::new() } else { keys })
}

async fn overview_stream(
    State(app): State<App>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let rx = app.notes.subscribe();
    let first = sse_json(&snapshot(&app));
    let rest = futures::stream::unfold((app, rx), |(app, mut rx)| async move {
        let keys = next_burst(&mut rx).await?;
        let msg = if keys.is_empty() {
            snapshot(&app)
        } else {
            let store = read(&app);
            let mut upsert = Vec::new();
            let mut delete = Vec::new();
            for k in &keys {
                match store.overview_row(k) {
                    Some(r) => upsert.push(r),
                    None => delete.push(format!("{}/{}", k.0, k.1)),
                }
            }
            OverviewMsg {
                reset: false,
                upsert,
                delete,
                errors: store.errors(),
                now: Utc::now(),
            }
        };
        Some((sse_json(&msg), (app, rx)))
    });
    Sse::new(futures::stream::once(async { first }).chain(rest)).keep_alive(KeepAlive::default())
}

/// The plan page's message: the plan (`null` once deleted).
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct DetailMsg {
    detail: Option<Detail>,
    errors: Vec<String>,
    now: DateTime<Utc>,
}

fn detail_msg(app: &App, key: &Key) -> DetailMsg {
    let store = read(app);
    DetailMsg {
        detail: store.detail(key),
        errors: store.errors(),
        now: Utc::now(),
    }
}

async fn detail_json(
    State(app): State<App>,
    Path((ns, name)): Path<(String, String)>,
) -> Json<DetailMsg> {
    Json(detail_msg(&app, &(ns, name)))
}

async fn detail_stream(
    State(app): State<App>,
    Path((ns, name)): Path<(String, String)>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let key = (ns, name);
    let rx = app.notes.subscribe();
    let first = sse_json(&detail_msg(&app, &key));
    let rest = futures::stream::unfold((app, rx, key), |(app, mut rx, key)| async move {
        loop {
            let keys = next_burst(&mut rx).await?;
            if keys.is_empty() || keys.contains(&key) {
                let msg = sse_json(&detail_msg(&app, &key));
                return Some((msg, (app, rx, key)));
            }
        }
    });
    Sse::new(futures::stream::once(async { first }).chain(rest)).keep_alive(KeepAlive::default())
}

/// A button's answer.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct ActResult {
    /// The request annotation sent (absent when refused).
    request: Option<String>,
    /// For the page: what happened, or the API server's refusal verbatim.
    message: String,
}

async fn act(
    State(app): State<App>,
    Path((ns, name, word)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> (StatusCode, Json<ActResult>) {
    let refuse = |code: StatusCode, message: String| {
        (
            code,
            Json(ActResult {
                request: None,
                message,
            }),
        )
    };
    if let Some(why) = post_refusal(&headers, &app.token) {
        return refuse(StatusCode::FORBIDDEN, why.into());
    }
    let Some(action) = Action::parse(&word) else {
        return refuse(StatusCode::NOT_FOUND, format!("no action {word}"));
    };
    match request::send(&app.ctx.in_namespace(&ns), &name, action).await {
        Ok(sent) => {
            let message = match sent.ignored {
                Some(why) => format!(
                    "sent {} to {ns}/{name}; the operator will ignore it: {why}",
                    sent.value
                ),
                None => format!(
                    "sent {} to {ns}/{name}; the page shows the operator's answer",
                    sent.value
                ),
            };
            (
                StatusCode::OK,
                Json(ActResult {
                    request: Some(sent.value),
                    message,
                }),
            )
        }
        Err(e @ CliError::Unreachable { .. }) => refuse(StatusCode::BAD_GATEWAY, e.to_string()),
        Err(e @ CliError::NotFound { .. }) => refuse(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => refuse(StatusCode::FORBIDDEN, e.to_string()),
    }
}
