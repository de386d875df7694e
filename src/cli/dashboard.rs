//! `kubectl releaseplan dashboard`: a live web UI of the plans, served on
//! 127.0.0.1 by the plugin itself with the caller's kubeconfig and RBAC.
//!
//! Watches on ReleasePlans, their revision Deployments and their Events feed
//! one in-memory [`Store`]; every change is announced on a broadcast channel
//! and pushed to the open pages as server-sent events (the overview gets the
//! changed rows, a plan page the whole plan). The buttons POST to endpoints
//! that send exactly the request of the plugin's verbs ([`request::send`]) and
//! return the API server's refusal verbatim. The page (HTML, CSS, JS) is
//! embedded in the binary: no CDN, no build step. Shapes are computed here
//! (pure functions, unit-tested), the page only draws them.

use super::connect::Ctx;
use super::error::{CliError, chain};
use super::request;
use super::view::{HistoryView, PlanView, history_view, plan_view};
use crate::api::{LABEL_PLAN, Phase, ReleasePlan};
use crate::plan::Action;
use crate::plan::steps::strategy_steps;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

/// Extra help of the command.
pub const AFTER_HELP: &str = "\
The first line on stdout is the URL to open. The server binds 127.0.0.1 unless
--address says otherwise, answers only requests addressed to it by that name
(Host header), and accepts a button's POST only with the page's per-run token
and from its own origin, so other web pages cannot press the buttons.
Everything it shows and does is with your kubeconfig's identity (and --as):
it needs list and watch on releaseplans, deployments and events, and the
buttons need patch on releaseplans.";

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const APP_CSS: &str = include_str!("dashboard/app.css");
/// The placeholder in index.html replaced by the per-run token.
const TOKEN_PLACEHOLDER: &str = "__RP_TOKEN__";
/// The placeholder in index.html replaced by what is shown (scope, cluster).
const SCOPE_PLACEHOLDER: &str = "__RP_SCOPE__";
/// The request header carrying the per-run token on a POST.
pub const TOKEN_HEADER: &str = "x-releaseplan-token";
/// Events kept per plan (newest).
const EVENTS_KEPT: usize = 50;
/// Gate values kept per gate (newest), for the chart.
const GATE_POINTS_KEPT: usize = 120;

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

/// A plan, or an object of a plan: (namespace, name).
type Key = (String, String);

/// One Event of a plan, as shown.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The reason (see docs/api.md).
    pub reason: String,
    /// The message.
    pub message: String,
    /// How many times it happened.
    pub count: i32,
    /// When it last happened.
    pub last: Option<DateTime<Utc>>,
}

/// One evaluation of a gate, for its chart.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct GatePoint {
    /// When it was evaluated.
    pub at: DateTime<Utc>,
    /// The value as written in status (a number, mostly).
    pub value: String,
    /// The verdict then.
    pub verdict: String,
}

/// What the watches have seen: the page's whole model.
#[derive(Default, Debug)]
pub struct Store {
    plans: BTreeMap<Key, ReleasePlan>,
    /// Revision Deployments by (namespace, Deployment name).
    deployments: BTreeMap<Key, Deployment>,
    /// Events by plan, then by Event name.
    events: BTreeMap<Key, BTreeMap<String, EventRow>>,
    /// Gate values seen since the dashboard started, by plan and gate.
    gate_points: BTreeMap<Key, BTreeMap<String, VecDeque<GatePoint>>>,
    /// The last error of each watch (`releaseplans`, `deployments`, `events`).
    errors: BTreeMap<&'static str, String>,
}

/// A change announced to the open pages.
#[derive(Debug, Clone, PartialEq)]
enum Note {
    /// This plan (or one of its Deployments or Events) changed.
    Changed(Key),
    /// Everything may have changed (a watch restarted, an error came or went).
    Resync,
}

/// How a watched kind goes into the [`Store`].
trait Tracked: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + 'static {
    /// The watch's name in errors.
    const KIND: &'static str;
    /// Stores or replaces the object; the plan it belongs to.
    fn upsert(self, store: &mut Store) -> Option<Key>;
    /// Forgets the object; the plan it belonged to.
    fn remove(&self, store: &mut Store) -> Option<Key>;
    /// Forgets every object of this kind (before a relist).
    fn clear(store: &mut Store);
}

impl Tracked for ReleasePlan {
    const KIND: &'static str = "releaseplans";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let key = (self.namespace().unwrap_or_default(), self.name_any());
        record_gates(store.gate_points.entry(key.clone()).or_default(), &self);
        store.plans.insert(key.clone(), self);
        Some(key)
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let key = (self.namespace().unwrap_or_default(), self.name_any());
        store.plans.remove(&key);
        store.gate_points.remove(&key);
        Some(key)
    }
    fn clear(store: &mut Store) {
        store.plans.clear();
    }
}

impl Tracked for Deployment {
    const KIND: &'static str = "deployments";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let ns = self.namespace().unwrap_or_default();
        let plan = self.labels().get(LABEL_PLAN).cloned()?;
        store
            .deployments
            .insert((ns.clone(), self.name_any()), self);
        Some((ns, plan))
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let ns = self.namespace().unwrap_or_default();
        store.deployments.remove(&(ns.clone(), self.name_any()));
        Some((ns, self.labels().get(LABEL_PLAN).cloned()?))
    }
    fn clear(store: &mut Store) {
        store.deployments.clear();
    }
}

impl Tracked for KubeEvent {
    const KIND: &'static str = "events";
    fn upsert(self, store: &mut Store) -> Option<Key> {
        let key = event_plan(&self)?;
        let row = event_row(&self);
        let rows = store.events.entry(key.clone()).or_default();
        rows.insert(self.name_any(), row);
        if rows.len() > EVENTS_KEPT {
            // Drop the oldest: the map is small, a scan is fine.
            if let Some(oldest) = rows
                .iter()
                .min_by_key(|(_, r)| r.last)
                .map(|(n, _)| n.clone())
            {
                rows.remove(&oldest);
            }
        }
        Some(key)
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let key = event_plan(self)?;
        if let Some(rows) = store.events.get_mut(&key) {
            rows.remove(&self.name_any());
        }
        Some(key)
    }
    fn clear(store: &mut Store) {
        store.events.clear();
    }
}

/// The plan an Event is about, when it is about a ReleasePlan.
fn event_plan(e: &KubeEvent) -> Option<Key> {
    let o = &e.involved_object;
    (o.kind.as_deref() == Some("ReleasePlan")).then(|| {
        (
            o.namespace
                .clone()
                .unwrap_or_else(|| e.namespace().unwrap_or_default()),
            o.name.clone().unwrap_or_default(),
        )
    })
}

/// An Event as shown: the newest of its times.
fn event_row(e: &KubeEvent) -> EventRow {
    let last = e
        .last_timestamp
        .as_ref()
        .map(crate::api::time::from_k8s)
        .or_else(|| {
            e.event_time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond()))
        })
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(crate::api::time::from_k8s)
        });
    EventRow {
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: e
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(e.count)
            .unwrap_or(1),
        last,
    }
}

/// Appends each gate's latest evaluation, when it is new, to its series.
fn record_gates(series: &mut BTreeMap<String, VecDeque<GatePoint>>, plan: &ReleasePlan) {
    let Some(status) = &plan.status else { return };
    for g in &status.gates {
        let (Some(at), Some(value)) = (g.last_evaluated, g.value.clone()) else {
            continue;
        };
        let points = series.entry(g.name.clone()).or_default();
        if points.back().is_some_and(|p| p.at >= at) {
            continue;
        }
        points.push_back(GatePoint {
            at,
            value,
            verdict: g.verdict.to_string(),
        });
        if points.len() > GATE_POINTS_KEPT {
            points.pop_front();
        }
    }
}

/// How urgently a plan needs a look: 0 first.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum Attention {
    /// Halted (Stalled=True), rolling back or rolled back: someone must act.
    Failing,
    /// A rollout is moving, waiting or has not started.
    Moving,
    /// Settled and healthy.
    Settled,
}

/// The attention a plan needs, and a word for it (shown next to the colour).
pub fn attention(plan: &ReleasePlan) -> (Attention, &'static str) {
    let s = plan.status.clone().unwrap_or_default();
    let stalled = s
        .conditions
        .iter()
        .any(|c| c.type_ == "Stalled" && c.status == "True");
    match s.phase {
        Phase::RollbackInProgress => (Attention::Failing, "rolling back"),
        Phase::RolledBack => (Attention::Failing, "rolled back"),
        _ if stalled => (Attention::Failing, "halted"),
        Phase::RollingOut if s.pause_requested || plan.spec.paused => (Attention::Moving, "paused"),
        Phase::RollingOut | Phase::Pending => (Attention::Moving, "in progress"),
        Phase::Stable => (Attention::Settled, "healthy"),
    }
}

/// A step of the strategy as a segment of the progress bar.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepMark {
    /// `weight`, `pause`, `scale` or `header` ([`Step::kind`](crate::plan::steps::Step::kind)).
    pub kind: &'static str,
    /// `25%`, `pause`, `pause 30s`, `scale 2 pods`... (the core's text of
    /// the [`Step`](crate::plan::steps::Step)).
    pub label: String,
}

/// The steps the operator runs for the plan, as segments: the core's parsed
/// steps (a blue-green plan has one); none when they cannot be run (the step
/// text says so).
pub fn step_marks(plan: &ReleasePlan) -> Vec<StepMark> {
    strategy_steps(&plan.spec.strategy)
        .unwrap_or_default()
        .iter()
        .map(|s| StepMark {
            kind: s.kind(),
            label: s.to_string(),
        })
        .collect()
}

/// A button of the plan page: one per request of the core
/// ([`Action::ALL`]), in its order.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ActionButton {
    /// The request's word ([`Action::word`]): the button's id and the last
    /// segment of the URL it posts to.
    pub word: &'static str,
    /// What it does: the tooltip and the confirmation's question.
    pub title: &'static str,
    /// Why the operator would ignore it now (the button is disabled then).
    pub why_not: Option<String>,
}

/// What a button does, in a few words.
fn action_title(action: Action) -> &'static str {
    match action {
        Action::Promote { full: false } => "Promote: skip the current step or pause",
        Action::Promote { full: true } => "Promote fully: go to 100% at once",
        Action::Abort => "Abort: roll back to the stable revision now",
        Action::Retry => "Retry the rolled-back or halted revision",
        Action::Pause => "Pause: hold the rollout at its current step",
        Action::Resume => "Resume: lift the pause request",
    }
}

/// A plan as the overview shows it (and the head of the plan page).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `namespace/name`: the page's key.
    pub key: String,
    /// What the plugin's `get -o json` prints.
    #[serde(flatten)]
    pub view: PlanView,
    /// How urgently it needs a look.
    pub attention: Attention,
    /// The same in a word.
    pub attention_text: &'static str,
    /// `status.trafficWeight`: the share of requests on the current revision
    /// when a router is configured (absent otherwise), next to the replica
    /// split `weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_weight: Option<i64>,
    /// The steps as segments.
    pub steps: Vec<StepMark>,
    /// When the current step started (time in step).
    pub step_started_at: Option<DateTime<Utc>>,
    /// The buttons, each with why it does not apply now, if it does not; on
    /// the plan page only (empty, and left out, in the overview).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionButton>,
}

/// The row of `plan`. With `deployments` (the plan page), components list
/// their revisions and `actions` says which buttons apply; without (the
/// overview, which has no buttons) neither is there: the reasons would be a
/// third of a 1,000-plan snapshot.
pub fn row(plan: &ReleasePlan, deployments: Option<&[Deployment]>) -> Row {
    let view = plan_view(plan, deployments);
    let (attention, attention_text) = attention(plan);
    let status = plan.status.clone().unwrap_or_default();
    let actions = match deployments {
        None => Vec::new(),
        Some(_) => Action::ALL
            .into_iter()
            .map(|action| ActionButton {
                word: action.word(),
                title: action_title(action),
                why_not: action.applies_in(&status).err().map(|e| e.to_string()),
            })
            .collect(),
    };
    Row {
        key: format!("{}/{}", view.namespace, view.name),
        view,
        attention,
        attention_text,
        traffic_weight: status.traffic_weight.map(i64::from),
        steps: step_marks(plan),
        step_started_at: status.step_started_at,
        actions,
    }
}

/// A plan page's document.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    /// The plan, with revision Deployments.
    pub plan: Row,
    /// The conditions with their messages.
    pub conditions: Vec<Condition>,
    /// Finished rollouts and the one in progress.
    pub history: HistoryView,
    /// The plan's Events, newest first.
    pub events: Vec<EventRow>,
    /// Each gate's values seen since the dashboard started, oldest first.
    pub gate_series: BTreeMap<String, Vec<GatePoint>>,
}

impl Store {
    fn overview(&self) -> Vec<Row> {
        self.plans.values().map(|p| row(p, None)).collect()
    }

    fn detail(&self, key: &Key) -> Option<Detail> {
        let plan = self.plans.get(key)?;
        let deployments: Vec<Deployment> = self
            .deployments
            .range((key.0.clone(), String::new())..)
            .take_while(|((ns, _), _)| *ns == key.0)
            .filter(|(_, d)| d.labels().get(LABEL_PLAN) == Some(&key.1))
            .map(|(_, d)| d.clone())
            .collect();
        let mut events: Vec<EventRow> = self
            .events
            .get(key)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        events.sort_by_key(|e| std::cmp::Reverse(e.last));
        Some(Detail {
            plan: row(plan, Some(&deployments)),
            conditions: plan
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
            history: history_view(plan),
            events,
            gate_series: self
                .gate_points
                .get(key)
                .map(|g| {
                    g.iter()
                        .map(|(n, p)| (n.clone(), p.iter().cloned().collect()))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    fn errors(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|(kind, e)| format!("watch of {kind}: {e}"))
            .collect()
    }
}

/// The server's shared state.
struct Shared {
    store: RwLock<Store>,
    notes: broadcast::Sender<Note>,
    ctx: Ctx,
    token: String,
    index: String,
    /// Host header values the server answers to; empty: any (non-loopback bind).
    hosts: Vec<String>,
}

type App = Arc<Shared>;

/// A random per-run token (hex), from the operating system's generator.
fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::Config(format!("no random numbers for the page token: {e}")))?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write;
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// The Host header values a loopback server answers to (the DNS rebinding
/// defence): its address and `localhost`, with the port.
pub fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    if !addr.ip().is_loopback() {
        return Vec::new();
    }
    let port = addr.port();
    let mut hosts = vec![format!("localhost:{port}"), addr.to_string()];
    if addr.ip().is_ipv4() {
        hosts.push(format!("127.0.0.1:{port}"));
    } else {
        hosts.push(format!("[::1]:{port}"));
    }
    hosts
}

/// Why a button's POST is refused before it reaches the cluster: a missing or
/// wrong token, or another site's Origin.
pub fn post_refusal(headers: &HeaderMap, token: &str) -> Option<&'static str> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = host.is_some_and(|h| origin.to_str().ok() == Some(&format!("http://{h}")));
        if !same {
            return Some("cross-origin request refused");
        }
    }
    let given = headers.get(TOKEN_HEADER).and_then(|t| t.to_str().ok());
    if given != Some(token) {
        return Some("missing or wrong page token: reload the dashboard");
    }
    None
}

/// Refuses requests addressed to another host name (DNS rebinding).
async fn check_host(State(app): State<App>, req: Request, next: Next) -> Response {
    if !app.hosts.is_empty() {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| app.hosts.iter().any(|a| a == h)) {
            return (StatusCode::MISDIRECTED_REQUEST, "unknown Host").into_response();
        }
    }
    next.run(req).await
}

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
        hosts: allowed_hosts(addr),
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
        .layer(middleware::from_fn_with_state(app.clone(), check_host))
        .with_state(app);
    // The URL first, alone on its line: scripts and tests read it.
    println!("http://{addr}/");
    eprintln!(
        "serving the ReleasePlan dashboard of {scope} at http://{addr}/ with your kubeconfig's identity; Ctrl-C stops it"
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(0)
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
            let had_error = store.errors.remove(K::KIND).is_some();
            match event {
                Ok(WatchEvent::Init) => {
                    buffer.clear();
                    had_error.then_some(Note::Resync)
                }
                Ok(WatchEvent::InitApply(k)) => {
                    buffer.push(k);
                    had_error.then_some(Note::Resync)
                }
                Ok(WatchEvent::InitDone) => {
                    K::clear(&mut store);
                    for k in buffer.drain(..) {
                        k.upsert(&mut store);
                    }
                    Some(Note::Resync)
                }
                Ok(WatchEvent::Apply(k)) => k.upsert(&mut store).map(Note::Changed),
                Ok(WatchEvent::Delete(k)) => k.remove(&mut store).map(Note::Changed),
                Err(e) => {
                    store.errors.insert(K::KIND, chain(&e));
                    Some(Note::Resync)
                }
            }
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
                match store.plans.get(k) {
                    Some(p) => upsert.push(row(p, None)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan;
    use axum::http::HeaderValue;

    #[test]
    fn failing_plans_need_attention_first() {
        let mut p = plan();
        assert_eq!(attention(&p), (Attention::Moving, "in progress"));
        let s = p.status.as_mut().unwrap();
        s.phase = Phase::RolledBack;
        assert_eq!(attention(&p).0, Attention::Failing);
        let s = p.status.as_mut().unwrap();
        s.phase = Phase::RollingOut;
        s.conditions.push(
            serde_json::from_value::<Condition>(serde_json::json!({
                "type": "Stalled", "status": "True", "reason": "RolloutHalted",
                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}))
            .unwrap(),
        );
        assert_eq!(attention(&p), (Attention::Failing, "halted"));
        assert!(Attention::Failing < Attention::Moving);
        assert!(Attention::Moving < Attention::Settled);
    }

    #[test]
    fn steps_become_segments_with_pauses_marked() {
        let p = plan();
        let marks = step_marks(&p);
        assert_eq!(marks.len(), p.spec.strategy.steps.len());
        assert!(marks.iter().any(|m| m.kind == "pause"), "{marks:?}");
        assert!(marks.iter().any(|m| m.label.ends_with('%')), "{marks:?}");
    }

    /// A plan of the fixture with these `spec.strategy` settings.
    fn with_strategy(strategy: serde_json::Value) -> ReleasePlan {
        let mut v = crate::cli::fixtures::plan_json();
        v["spec"]["strategy"] = strategy;
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn step_marks_are_the_cores_parsed_steps() {
        // Every kind of step the core runs, labelled from its parsed value:
        // none drawn as an unknown weight "?".
        let p = with_strategy(serde_json::json!({"steps": [
            {"setCanaryScale": {"replicas": 2}},
            {"setHeaderRoute": {"headers": [{"name": "x-canary", "value": "yes"}]}},
            {"setWeight": 10},
            {"pause": {"duration": "90s"}},
            {"setCanaryScale": {"weight": 50}},
            {"setCanaryScale": {"matchTrafficWeight": true}},
            {"setHeaderRoute": {"headers": []}},
            {"pause": {}},
        ]}));
        let marks: Vec<(&str, String)> = step_marks(&p)
            .into_iter()
            .map(|m| (m.kind, m.label))
            .collect();
        let want = [
            ("scale", "scale 2 pods"),
            ("header", "header x-canary: yes"),
            ("weight", "10%"),
            ("pause", "pause 1m30s"),
            ("scale", "scale 50%"),
            ("scale", "scale with traffic"),
            ("header", "no header route"),
            ("pause", "pause"),
        ];
        let want: Vec<(&str, String)> = want.iter().map(|(k, l)| (*k, l.to_string())).collect();
        assert_eq!(marks, want);
    }

    #[test]
    fn a_blue_green_plan_draws_the_one_step_the_core_runs() {
        let mut p = with_strategy(serde_json::json!({"blueGreen": {"autoPromotionSeconds": 300}}));
        p.status.as_mut().unwrap().current_step = 0;
        let r = row(&p, None);
        let marks: Vec<(&str, &str)> = r.steps.iter().map(|m| (m.kind, m.label.as_str())).collect();
        assert_eq!(marks, [("pause", "pause 5m")]);
        assert_eq!(
            (r.view.step.total, r.view.step.text.as_str()),
            (1, "step 1/1")
        );
        let p = with_strategy(serde_json::json!({"blueGreen": {}}));
        assert_eq!(step_marks(&p).len(), 1);
    }

    #[test]
    fn the_buttons_are_the_cores_actions_in_its_order() {
        // The page draws one button per entry, in this order, with no table
        // of its own: the core's `Action::ALL`, each by its word.
        let r = serde_json::to_value(row(&plan(), Some(&[]))).unwrap();
        let words: Vec<&str> = r["actions"]
            .as_array()
            .unwrap_or_else(|| panic!("actions is not a list: {}", r["actions"]))
            .iter()
            .map(|a| a["word"].as_str().unwrap())
            .collect();
        let core: Vec<&str> = Action::ALL.iter().map(|a| a.word()).collect();
        assert_eq!(words, core);
        for a in &r["actions"].as_array().unwrap()[..] {
            assert!(!a["title"].as_str().unwrap().is_empty(), "{a}");
        }
    }

    #[test]
    fn a_row_says_which_buttons_apply() {
        let mut p = plan();
        let r = row(&p, Some(&[]));
        assert_eq!(r.key, format!("{}/{}", r.view.namespace, r.view.name));
        assert_eq!(r.actions.len(), Action::ALL.len());
        // The overview has no buttons, and its rows no reasons.
        assert!(row(&p, None).actions.is_empty());
        let overview = serde_json::to_value(row(&p, None)).unwrap();
        assert!(overview.get("actions").is_none(), "{overview}");
        p.status.as_mut().unwrap().phase = Phase::Stable;
        let r = row(&p, Some(&[]));
        let why_not = |word: &str| {
            r.actions
                .iter()
                .find(|a| a.word == word)
                .map(|a| a.why_not.clone())
        };
        assert!(
            matches!(why_not("promote"), Some(Some(_))),
            "{:?}",
            r.actions
        );
        assert_eq!(why_not("pause"), Some(None), "{:?}", r.actions);
    }

    #[test]
    fn the_traffic_weight_is_shown_only_when_status_has_it() {
        // Without a router the row carries no trafficWeight at all.
        let r = serde_json::to_value(row(&plan(), None)).unwrap();
        assert!(
            r.get("weight").is_some() && r.get("trafficWeight").is_none(),
            "{r}"
        );
        let mut p = plan();
        p.status.as_mut().unwrap().traffic_weight = Some(10);
        let r = serde_json::to_value(row(&p, None)).unwrap();
        assert_eq!(r["trafficWeight"], 10, "{r}");
    }

    #[test]
    fn gate_points_are_appended_once_per_evaluation() {
        let mut p = plan();
        let at: DateTime<Utc> = "2025-01-02T09:00:00Z".parse().unwrap();
        p.status.as_mut().unwrap().gates = vec![crate::api::GateStatus {
            name: "errors".into(),
            value: Some("0.5".into()),
            last_evaluated: Some(at),
            ..crate::api::GateStatus::default()
        }];
        let mut series = BTreeMap::new();
        record_gates(&mut series, &p);
        record_gates(&mut series, &p);
        assert_eq!(series["errors"].len(), 1);
        p.status.as_mut().unwrap().gates[0].last_evaluated =
            Some(at + chrono::Duration::seconds(10));
        record_gates(&mut series, &p);
        assert_eq!(series["errors"].len(), 2);
    }

    #[test]
    fn loopback_answers_only_its_own_host_names() {
        let hosts = allowed_hosts("127.0.0.1:3100".parse().unwrap());
        assert!(hosts.contains(&"localhost:3100".to_string()));
        assert!(hosts.contains(&"127.0.0.1:3100".to_string()));
        assert!(!hosts.iter().any(|h| h.contains("evil")));
        assert!(allowed_hosts("0.0.0.0:3100".parse().unwrap()).is_empty());
    }

    #[test]
    fn posts_need_the_token_and_the_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:3100"));
        assert!(post_refusal(&h, "t0k").is_some());
        h.insert(TOKEN_HEADER, HeaderValue::from_static("t0k"));
        assert_eq!(post_refusal(&h, "t0k"), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:3100"),
        );
        assert_eq!(post_refusal(&h, "t0k"), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(
            post_refusal(&h, "t0k"),
            Some("cross-origin request refused")
        );
        h.remove(header::ORIGIN);
        assert!(post_refusal(&h, "wrong").is_some());
    }
}
