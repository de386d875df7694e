//! A real data plane for the traffic tests: real HTTP requests through a real
//! Gateway API implementation (Traefik, built by `make tools`) to backends
//! that answer for the revision a Service selects.
//!
//! Why it is built this way (docs/control-plane.md, "The traffic data
//! plane"): kwok's pods run nothing, and the API server refuses EndpointSlices
//! with loopback addresses, so pod IPs cannot carry test traffic. The test
//! cluster's Service ClusterIPs are on loopback instead (`make test` starts it
//! with `RP_SERVICE_CIDR=127.96.0.0/16`); Traefik runs with native Kubernetes
//! load balancing (it sends to a Service's ClusterIP, as kube-proxy would take
//! it from there), and a backend emulator plays kube-proxy plus the pods:
//!
//! - it serves HTTP on `ClusterIP:port` of every Service of the namespace
//!   (bound and unbound as Services come, go or change ports);
//! - each request is answered, at request time, with the
//!   `releaseplan.io/revision` value of the Service's selector (the body), so
//!   a test counts answers per revision;
//! - when the Service's EndpointSlices (made by the controller-manager from
//!   kwok's pods, whose IPs are never contacted) hold no endpoint kube-proxy
//!   would send to (a ready one, or else one still serving while its pod
//!   terminates), it answers 503 with header [`UNREADY_HEADER`], where
//!   kube-proxy would reject the connection: a test sees traffic sent to a
//!   revision without pods to serve it.
//!
//! Every address used is on 127.0.0.0/8.
//!
//! ```ignore
//! let dp = DataPlane::start(&h.client, &h.ns).await;
//! dp.apply_route("web", json!([{ "backendRefs": [...] }])).await;
//! let counts = dp.send(1000, &[]).await;
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use releaseplan::api::LABEL_REVISION;
use serde_json::{Value, json};
use tokio::task::{JoinHandle, JoinSet};

use super::{crd, servers, tools, wait_until};

/// The GatewayClass of the tests, cluster-scoped and shared by every
/// [`DataPlane`] (each Traefik watches only its own namespace).
pub const GATEWAY_CLASS: &str = "releaseplan-tests";
/// Traefik's controller name, which a GatewayClass names to be served by it.
const CONTROLLER_NAME: &str = "traefik.io/gateway-controller";
/// The name of each test's Gateway, in the test's namespace.
pub const GATEWAY: &str = "gateway";
/// Field manager of the data plane's server-side applies.
const MANAGER: &str = "releaseplan-tests-traffic";
/// Set on the emulator's 503 answers for a Service without an endpoint to
/// send to (its body is still the revision), to tell them from Traefik's own
/// errors.
pub const UNREADY_HEADER: &str = "x-releaseplan-no-ready-endpoints";
/// How long a single request may take before it counts as a connection error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests in flight at once in [`DataPlane::send`].
const SEND_CONCURRENCY: usize = 8;

/// Gateway API kinds, as dynamic objects (no Rust types for them here).
fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind),
        plural,
    )
}

/// Traefik's entry point of the Gateway's listener (IngressRoutes name it).
pub const ENTRY_POINT: &str = "web";

/// The IngressRoute resource (Traefik's own CRD).
pub fn ingress_route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("traefik.io", "v1alpha1", "IngressRoute"),
        "ingressroutes",
    )
}

/// The HTTPRoute resource.
pub fn http_route_resource() -> ApiResource {
    gateway_api("HTTPRoute", "httproutes")
}

/// A Gateway, its Traefik and the backend emulator for one test namespace.
/// Dropping it stops Traefik and the emulator; after a failed test, the path
/// and the end of Traefik's log are printed.
pub struct DataPlane {
    /// The test's namespace (Gateway, routes and Services live there).
    pub ns: String,
    /// Where the Gateway's listener accepts requests: 127.0.0.1:<free port>.
    pub addr: SocketAddr,
    client: Client,
    traefik: Child,
    log: PathBuf,
    emulator: JoinHandle<()>,
    backends: Arc<Backends>,
    http: reqwest::Client,
}

impl DataPlane {
    /// Installs the Gateway API CRDs and the shared GatewayClass (both
    /// idempotent), creates the Gateway [`GATEWAY`] in `ns` with a listener on
    /// a free loopback port, starts the emulator and Traefik (watching `ns`
    /// only), and returns once Traefik has accepted the Gateway and listens.
    pub async fn start(client: &Client, ns: &str) -> DataPlane {
        DataPlane::start_with(client, ns, false).await
    }

    /// [`DataPlane::start`], and Traefik's own CRDs installed (idempotent)
    /// and its Kubernetes CRD provider on for `ns` too (native load
    /// balancing, as the Gateway API provider): IngressRoutes on entry point
    /// [`ENTRY_POINT`] route requests of the same listener.
    pub async fn start_with_ingress_routes(client: &Client, ns: &str) -> DataPlane {
        DataPlane::start_with(client, ns, true).await
    }

    async fn start_with(client: &Client, ns: &str, ingress_routes: bool) -> DataPlane {
        require_loopback_service_cidr(client).await;
        crd::install_gateway_api(client).await;
        if ingress_routes {
            crd::install_traefik(client).await;
        }
        apply_gateway_class(client).await;
        // The Gateway's listener and Traefik's entry point share this port.
        let port = super::operator::free_port();
        apply_gateway(client, ns, port).await;

        let backends = Arc::new(Backends::default());
        let emulator = tokio::spawn(emulate(client.clone(), ns.to_string(), backends.clone()));
        let (traefik, log) = spawn_traefik(ns, port, ingress_routes);
        let dp = DataPlane {
            ns: ns.to_string(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            client: client.clone(),
            traefik,
            log,
            emulator,
            backends,
            http: servers::http_client(),
        };
        dp.wait_gateway_accepted().await;
        dp
    }

    /// The path of Traefik's log.
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    /// Waits until Traefik reports the Gateway Accepted for its current
    /// generation and its entry point accepts connections.
    async fn wait_gateway_accepted(&self) {
        let gateways: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &gateway_api("Gateway", "gateways"),
        );
        wait_until(
            Duration::from_secs(90),
            &format!(
                "Traefik to accept Gateway {}/{GATEWAY} (its log: {})",
                self.ns,
                self.log.display()
            ),
            || async {
                let gw = gateways.get(GATEWAY).await.map_err(|e| e.to_string())?;
                let generation = gw.metadata.generation;
                let accepted = gw.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c["type"] == "Accepted"
                            && c["status"] == "True"
                            && c["observedGeneration"].as_i64() == generation
                    });
                if !accepted {
                    return Err(format!("status {}", gw.data["status"]));
                }
                tokio::net::TcpStream::connect(self.addr)
                    .await
                    .map_err(|e| format!("entry point {}: {e}", self.addr))?;
                Ok(())
            },
        )
        .await;
    }

    /// Server-side applies the HTTPRoute `name` attached to the Gateway, with
    /// `rules` (its `spec.rules`).
    pub async fn apply_route(&self, name: &str, rules: Value) {
        let route = json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": name, "namespace": self.ns },
            "spec": { "parentRefs": [self.parent_ref()], "rules": rules },
        });
        Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &self.ns,
            &http_route_resource(),
        )
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(route),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot apply HTTPRoute {}/{name}: {e}", self.ns));
    }

    /// The `parentRefs` entry that attaches a route to this Gateway.
    pub fn parent_ref(&self) -> Value {
        json!({ "name": GATEWAY })
    }

    /// Sends `n` requests (a few in flight at once) to the Gateway with
    /// `headers`, and counts the answers.
    pub async fn send(&self, n: usize, headers: &[(&str, &str)]) -> Counts {
        let outcomes: Vec<Outcome> = futures::stream::iter(0..n)
            .map(|_| request(&self.http, self.addr, headers))
            .buffer_unordered(SEND_CONCURRENCY)
            .collect()
            .await;
        let mut counts = Counts::default();
        for outcome in outcomes {
            counts.add(outcome);
        }
        counts
    }

    /// Sends batches of `batch` requests until `done` holds for one batch's
    /// counts, which it returns (e.g. until Traefik has programmed a route, or
    /// a selector change has reached the answers).
    pub async fn wait_for(
        &self,
        what: &str,
        batch: usize,
        headers: &[(&str, &str)],
        done: impl Fn(&Counts) -> bool,
    ) -> Counts {
        let done = &done;
        wait_until(
            Duration::from_secs(90),
            &format!("{what} (Traefik's log: {})", self.log.display()),
            || async move {
                let counts = self.send(batch, headers).await;
                if done(&counts) {
                    Ok(counts)
                } else {
                    Err(counts.to_string())
                }
            },
        )
        .await
    }

    /// Starts sending requests in the background, `workers` at a time with
    /// `pause` between one worker's requests, counting answers per `window`
    /// of time: during a transition, a test sees when traffic left a revision.
    pub fn sampler(
        &self,
        headers: &[(&str, &str)],
        window: Duration,
        workers: usize,
        pause: Duration,
    ) -> Sampler {
        let started = Instant::now();
        let shared = Arc::new(Mutex::new(Timeline {
            started,
            window,
            windows: Vec::new(),
            first_ok: BTreeMap::new(),
            last_ok: BTreeMap::new(),
            last_error: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let tasks = (0..workers.max(1))
            .map(|_| {
                let (http, addr, shared, stop, headers) = (
                    self.http.clone(),
                    self.addr,
                    shared.clone(),
                    stop.clone(),
                    headers.clone(),
                );
                tokio::spawn(async move {
                    let headers: Vec<(&str, &str)> = headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = request(&http, addr, &headers).await;
                        shared.lock().unwrap().record(Instant::now(), outcome);
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Sampler {
            shared,
            stop,
            tasks,
        }
    }

    /// Waits until the emulator has an endpoint to send to for Service `name`.
    pub async fn wait_service_ready(&self, name: &str) {
        wait_until(
            Duration::from_secs(90),
            &format!("an endpoint to send to of Service {}/{name}", self.ns),
            || async {
                let services = self.backends.services.read().unwrap();
                services.get(name).is_some_and(|b| b.ready).then_some(())
            },
        )
        .await;
    }

    /// Every change of what the emulator answers for a Service, in order:
    /// its selector's revision, or its endpoints (e.g. its pods went).
    pub fn backend_changes(&self) -> Vec<BackendChange> {
        self.backends.changes.lock().unwrap().clone()
    }

    /// [`DataPlane::backend_changes`] as lines, times relative to `since`.
    pub fn render_backend_changes(&self, since: Instant) -> String {
        self.backend_changes()
            .iter()
            .map(|c| {
                let at = c.at.saturating_duration_since(since).as_secs_f64()
                    - since.saturating_duration_since(c.at).as_secs_f64();
                let endpoints: Vec<String> = c
                    .endpoints
                    .iter()
                    .map(|(pod, state)| match state {
                        EndpointState::Ready => pod.clone(),
                        EndpointState::ServingTerminating => {
                            format!("{pod} (terminating, serving)")
                        }
                        EndpointState::Unavailable => format!("{pod} (not ready)"),
                    })
                    .collect();
                format!(
                    "  {at:+7.2}s  Service {} -> {} ({}): [{}]",
                    c.service,
                    c.revision,
                    if c.ready {
                        "ready"
                    } else {
                        "no endpoint to send to"
                    },
                    endpoints.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for DataPlane {
    /// Stops Traefik and the emulator; after a failed test, prints where
    /// Traefik's log is and its last lines.
    fn drop(&mut self) {
        self.emulator.abort();
        let _ = self.traefik.kill();
        let _ = self.traefik.wait();
        if std::thread::panicking() {
            let tail = std::fs::read_to_string(&self.log)
                .map(|text| {
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(30)..].join("\n")
                })
                .unwrap_or_default();
            eprintln!(
                "Traefik's log of namespace {}: {}\n(last lines)\n{tail}",
                self.ns,
                self.log.display()
            );
        }
    }
}

/// One request's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200: the body, the revision the answering Service selects.
    Ok(String),
    /// The emulator's 503: the Service (of this revision) had no endpoint to
    /// send to.
    Unready(String),
    /// Any other answer (Traefik's 404 before a route is programmed, its
    /// 500/502/503 for a backend it cannot use): the status code.
    Status(u16),
    /// No answer: connection refused or reset, or no answer within the
    /// timeout.
    Connection,
}

/// Answers counted by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// 200 answers per revision.
    pub ok: BTreeMap<String, u64>,
    /// The emulator's 503 answers per revision (no endpoint to send to).
    pub unready: BTreeMap<String, u64>,
    /// Other answers by status code (5xx from Traefik, 404 with no route...).
    pub status: BTreeMap<u16, u64>,
    /// Requests that got no answer (connection refused/reset, timeout).
    pub connection: u64,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Ok(rev) => *self.ok.entry(rev).or_default() += 1,
            Outcome::Unready(rev) => *self.unready.entry(rev).or_default() += 1,
            Outcome::Status(code) => *self.status.entry(code).or_default() += 1,
            Outcome::Connection => self.connection += 1,
        }
    }

    fn merge(&mut self, other: &Counts) {
        for (rev, n) in &other.ok {
            *self.ok.entry(rev.clone()).or_default() += n;
        }
        for (rev, n) in &other.unready {
            *self.unready.entry(rev.clone()).or_default() += n;
        }
        for (code, n) in &other.status {
            *self.status.entry(*code).or_default() += n;
        }
        self.connection += other.connection;
    }

    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.ok.values().sum::<u64>()
            + self.unready.values().sum::<u64>()
            + self.status.values().sum::<u64>()
            + self.connection
    }

    /// 200 answers of `revision`.
    pub fn ok_of(&self, revision: &str) -> u64 {
        self.ok.get(revision).copied().unwrap_or(0)
    }

    /// Requests that failed: the emulator's 503s, any 5xx, and connection
    /// errors (a 404 is not counted: it means no route matched).
    pub fn errors(&self) -> u64 {
        self.unready.values().sum::<u64>()
            + self
                .status
                .iter()
                .filter(|(code, _)| **code >= 500)
                .map(|(_, n)| n)
                .sum::<u64>()
            + self.connection
    }

    /// Whether every request was answered 200 by `revision`.
    pub fn all_ok_from(&self, revision: &str) -> bool {
        self.total() > 0 && self.ok_of(revision) == self.total()
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.ok.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        parts.extend(
            self.unready
                .iter()
                .map(|(r, n)| format!("{r} unready (503): {n}")),
        );
        parts.extend(self.status.iter().map(|(c, n)| format!("status {c}: {n}")));
        if self.connection > 0 {
            parts.push(format!("connection errors: {}", self.connection));
        }
        if parts.is_empty() {
            parts.push("no requests".to_string());
        }
        write!(f, "{} of {}", parts.join(", "), self.total())
    }
}

/// Sends one request to the Gateway and classifies the answer.
async fn request(http: &reqwest::Client, addr: SocketAddr, headers: &[(&str, &str)]) -> Outcome {
    debug_assert!(addr.ip().is_loopback());
    let mut req = http.get(format!("http://{addr}/")).timeout(REQUEST_TIMEOUT);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let Ok(resp) = req.send().await else {
        return Outcome::Connection;
    };
    let status = resp.status().as_u16();
    let unready = resp.headers().contains_key(UNREADY_HEADER);
    let Ok(body) = resp.text().await else {
        return Outcome::Connection;
    };
    match status {
        200 => Outcome::Ok(body),
        503 if unready => Outcome::Unready(body),
        code => Outcome::Status(code),
    }
}

/// A background sender of requests (see [`DataPlane::sampler`]). Dropping it
/// stops the senders.
pub struct Sampler {
    shared: Arc<Mutex<Timeline>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Sampler {
    /// What was counted so far.
    pub fn snapshot(&self) -> Timeline {
        self.shared.lock().unwrap().clone()
    }

    /// Stops sending (waiting for the requests in flight) and returns what
    /// was counted.
    pub async fn stop(mut self) -> Timeline {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.snapshot()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The answers a [`Sampler`] counted, per window of time since it started.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// When sampling started.
    pub started: Instant,
    /// The width of each window.
    pub window: Duration,
    /// Counts per window: window `i` covers `started + i * window` onwards.
    pub windows: Vec<Counts>,
    /// When each revision first answered 200.
    pub first_ok: BTreeMap<String, Instant>,
    /// When each revision last answered 200.
    pub last_ok: BTreeMap<String, Instant>,
    /// When the last failed request (see [`Counts::errors`]) ended.
    pub last_error: Option<Instant>,
}

impl Timeline {
    fn record(&mut self, at: Instant, outcome: Outcome) {
        let i = usize::try_from(
            at.saturating_duration_since(self.started).as_nanos() / self.window.as_nanos().max(1),
        )
        .unwrap_or(usize::MAX);
        if self.windows.len() <= i {
            self.windows.resize(i + 1, Counts::default());
        }
        match &outcome {
            Outcome::Ok(rev) => {
                self.first_ok.entry(rev.clone()).or_insert(at);
                self.last_ok.insert(rev.clone(), at);
            }
            Outcome::Status(code) if *code < 500 => {}
            _ => self.last_error = Some(at),
        }
        self.windows[i].add(outcome);
    }

    /// All windows together.
    pub fn total(&self) -> Counts {
        let mut all = Counts::default();
        for w in &self.windows {
            all.merge(w);
        }
        all
    }

    /// The windows from `from` (an instant) on, together.
    pub fn since(&self, from: Instant) -> Counts {
        let first = self.index(from);
        let mut all = Counts::default();
        for w in self.windows.iter().skip(first) {
            all.merge(w);
        }
        all
    }

    /// The window index holding `at`.
    fn index(&self, at: Instant) -> usize {
        usize::try_from(
            at.saturating_duration_since(self.started).as_nanos() / self.window.as_nanos().max(1),
        )
        .unwrap_or(usize::MAX)
    }

    /// One line per window: its start (seconds since sampling started) and
    /// its counts; for the test output.
    pub fn render(&self) -> String {
        self.render_from(self.started)
    }

    /// [`Timeline::render`] from the window holding `from` on.
    pub fn render_from(&self, from: Instant) -> String {
        let first = self.index(from);
        self.windows
            .iter()
            .enumerate()
            .skip(first)
            .map(|(i, c)| {
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                format!("  +{:>6.2}s  {c}", (self.window * i).as_secs_f64())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A change of a Service's answers, as the emulator saw it.
#[derive(Debug, Clone)]
pub struct BackendChange {
    /// When the emulator saw it.
    pub at: Instant,
    /// The Service.
    pub service: String,
    /// The revision its selector named then.
    pub revision: String,
    /// Whether it had an endpoint kube-proxy would send to from then on: a
    /// ready one, or else one serving while its pod terminates.
    pub ready: bool,
    /// Its endpoints then, from its EndpointSlices: (pod, state).
    pub endpoints: Vec<(String, EndpointState)>,
}

/// An endpoint's conditions, as kube-proxy reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointState {
    /// Ready (an unknown readiness counts as ready, as the field says).
    Ready,
    /// Not ready, but serving while its pod terminates: used when no
    /// endpoint of the Service is ready.
    ServingTerminating,
    /// Neither.
    Unavailable,
}

impl EndpointState {
    fn of(e: &k8s_openapi::api::discovery::v1::Endpoint) -> EndpointState {
        let c = e.conditions.as_ref();
        let ready = c.and_then(|c| c.ready) != Some(false);
        let serving = c.and_then(|c| c.serving).unwrap_or(ready);
        let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
        if ready {
            EndpointState::Ready
        } else if serving && terminating {
            EndpointState::ServingTerminating
        } else {
            EndpointState::Unavailable
        }
    }
}

/// What the emulator answers for, per Service name: read by every request.
#[derive(Default)]
struct Backends {
    services: RwLock<BTreeMap<String, Backend>>,
    changes: Mutex<Vec<BackendChange>>,
}

/// A Service as the emulator answers for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Backend {
    revision: String,
    ready: bool,
    endpoints: Vec<(String, EndpointState)>,
}

/// The emulator: keeps [`Backends`] and the listeners in step with the
/// Services and EndpointSlices of `ns`, until aborted.
async fn emulate(client: Client, ns: String, backends: Arc<Backends>) {
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let service_events = watcher(
        Api::<Service>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(services_writer)
    .map(|_| ());
    let slice_events = watcher(
        Api::<EndpointSlice>::namespaced(client, &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(slices_writer)
    .map(|_| ());
    let mut events = futures::stream::select(service_events.boxed(), slice_events.boxed());
    let mut listeners = Listeners::default();
    // Binds that failed (an address still held) are tried again each second.
    let mut retry = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            event = events.next() => if event.is_none() { return },
            _ = retry.tick() => {}
        }
        sync(&services, &slices, &backends, &mut listeners.0).await;
    }
}

/// The emulator's listeners by address, each serving one Service; dropped
/// with the emulator (aborted by [`DataPlane`]'s drop), it stops them all.
#[derive(Default)]
struct Listeners(BTreeMap<SocketAddr, (String, JoinHandle<()>)>);

impl Drop for Listeners {
    fn drop(&mut self) {
        for (_, task) in self.0.values() {
            task.abort();
        }
    }
}

/// One step of the emulator: the answers of each Service from the caches,
/// then a listener on each `ClusterIP:port` of a loopback ClusterIP, and none
/// elsewhere.
async fn sync(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    backends: &Arc<Backends>,
    listeners: &mut BTreeMap<SocketAddr, (String, JoinHandle<()>)>,
) {
    let services = services.state();
    let slices = slices.state();
    let mut wanted: BTreeMap<SocketAddr, String> = BTreeMap::new();
    let mut next: BTreeMap<String, Backend> = BTreeMap::new();
    for svc in &services {
        let name = svc.name_any();
        let Some(spec) = svc.spec.as_ref() else {
            continue;
        };
        let revision = spec
            .selector
            .as_ref()
            .and_then(|s| s.get(LABEL_REVISION))
            .cloned()
            .unwrap_or_default();
        let endpoints: Vec<(String, EndpointState)> = slices
            .iter()
            .filter(|s| s.labels().get("kubernetes.io/service-name") == Some(&name))
            .flat_map(|s| s.endpoints.iter())
            .map(|e| {
                let pod = e.target_ref.as_ref().and_then(|r| r.name.clone());
                (pod.unwrap_or_default(), EndpointState::of(e))
            })
            .collect();
        // kube-proxy's choice: the ready endpoints; if there is none, those
        // still serving while they terminate; if none either, it refuses.
        let ready = endpoints.iter().any(|(_, e)| *e == EndpointState::Ready)
            || endpoints
                .iter()
                .any(|(_, e)| *e == EndpointState::ServingTerminating);
        next.insert(
            name.clone(),
            Backend {
                revision,
                ready,
                endpoints,
            },
        );
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .filter(IpAddr::is_loopback)
        else {
            continue;
        };
        for port in spec.ports.iter().flatten() {
            if port.protocol.as_deref().unwrap_or("TCP") != "TCP" {
                continue;
            }
            if let Ok(p) = u16::try_from(port.port) {
                wanted.insert(SocketAddr::new(ip, p), name.clone());
            }
        }
    }

    {
        let mut current = backends.services.write().unwrap();
        let mut changes = backends.changes.lock().unwrap();
        for (name, backend) in &next {
            if current.get(name) != Some(backend) {
                changes.push(BackendChange {
                    at: Instant::now(),
                    service: name.clone(),
                    revision: backend.revision.clone(),
                    ready: backend.ready,
                    endpoints: backend.endpoints.clone(),
                });
            }
        }
        *current = next;
    }

    listeners.retain(|addr, (service, task)| {
        let keep = wanted.get(addr) == Some(service) && !task.is_finished();
        if !keep {
            task.abort();
        }
        keep
    });
    for (addr, service) in wanted {
        if listeners.contains_key(&addr) {
            continue;
        }
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let task = tokio::spawn(serve(listener, service.clone(), backends.clone()));
                listeners.insert(addr, (service, task));
            }
            Err(e) => {
                eprintln!("traffic emulator: cannot bind {addr} for Service {service} yet: {e}")
            }
        }
    }
}

/// Serves HTTP/1.1 for the Service `service` on `listener`. Aborting the task
/// drops the JoinSet, which closes every connection: a Service that goes or
/// changes ports is no longer answered on the old address.
async fn serve(listener: tokio::net::TcpListener, service: String, backends: Arc<Backends>) {
    let app = axum::Router::new().fallback(move || answer(backends.clone(), service.clone()));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

/// The answer for `service` now: its selector's revision, 200 with a ready
/// endpoint, else 503 with [`UNREADY_HEADER`]. A Service the emulator no
/// longer knows (just deleted) gets a plain 503.
async fn answer(backends: Arc<Backends>, service: String) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let backend = backends.services.read().unwrap().get(&service).cloned();
    match backend {
        Some(Backend {
            revision,
            ready: true,
            ..
        }) => (StatusCode::OK, revision).into_response(),
        Some(Backend { revision, .. }) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(UNREADY_HEADER, "true")],
            revision,
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "unknown Service").into_response(),
    }
}

/// Refuses a cluster whose ClusterIPs are not on loopback: the emulator could
/// not serve them, and nothing may be sent elsewhere.
async fn require_loopback_service_cidr(client: &Client) {
    let svc = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .expect("cannot read Service default/kubernetes");
    let ip = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    assert!(
        ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()),
        "the test cluster's Service ClusterIPs are not on loopback (kubernetes is {ip}): \
         start it with RP_SERVICE_CIDR=127.96.0.0/16 (e2e/cluster-up.sh's default)"
    );
}

/// The shared GatewayClass served by Traefik (cluster-scoped; applied by
/// every test, the same object each time).
async fn apply_gateway_class(client: &Client) {
    let classes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &gateway_api("GatewayClass", "gatewayclasses"),
    );
    let class = json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": { "name": GATEWAY_CLASS },
        "spec": { "controllerName": CONTROLLER_NAME },
    });
    // Every test applies the same object: a concurrent first create can
    // answer 409, which another try resolves.
    let params = PatchParams::apply(MANAGER).force();
    let mut attempt = 0;
    loop {
        match classes
            .patch(GATEWAY_CLASS, &params, &Patch::Apply(&class))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 20 => attempt += 1,
            Err(e) => panic!("cannot apply GatewayClass {GATEWAY_CLASS}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The test's Gateway: one HTTP listener on 127.0.0.1:`port` (Traefik binds
/// its entry point of that port), for routes of the same namespace.
async fn apply_gateway(client: &Client, ns: &str, port: u16) {
    let gateway = json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": GATEWAY, "namespace": ns },
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "listeners": [{
                "name": "web",
                "port": port,
                "protocol": "HTTP",
                "allowedRoutes": { "namespaces": { "from": "Same" } },
            }],
        },
    });
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &gateway_api("Gateway", "gateways"))
        .patch(
            GATEWAY,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(gateway),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot apply Gateway {ns}/{GATEWAY}: {e}"));
}

/// Where Traefik's log goes: the cluster's log folder when there is one
/// (e2e/with-cluster.sh prints the end of each log there after a failure,
/// and cluster-down.sh stops a Traefik whose command line names the run
/// dir), else the target's temporary folder.
fn log_file(ns: &str) -> PathBuf {
    let dir = std::env::var_os("RP_CLUSTER_DIR")
        .map(|d| PathBuf::from(d).join("logs"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&dir).expect("cannot create the log folder");
    dir.join(format!("traefik-{ns}.log"))
}

/// Starts Traefik: its Gateway API provider for namespace `ns` only, native
/// Kubernetes load balancing (to ClusterIPs), one entry point on
/// 127.0.0.1:`port`, and nothing that reaches outside (no version check, no
/// usage statistics). It reads the cluster from KUBECONFIG. It stays in the
/// test's process group, so stopping `make test` stops it too.
fn spawn_traefik(ns: &str, port: u16, ingress_routes: bool) -> (Child, PathBuf) {
    let bin = tools::cached("traefik", "TRAEFIK_VERSION")
        .map(|d| d.join("bin/traefik"))
        .filter(|b| b.is_file())
        .unwrap_or_else(|| panic!("Traefik is not built: run `make tools`"));
    let log = log_file(ns);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
    let mut args = vec![
        "--global.checkNewVersion=false".to_string(),
        "--global.sendAnonymousUsage=false".to_string(),
        format!("--entryPoints.{ENTRY_POINT}.address=127.0.0.1:{port}"),
        "--providers.kubernetesgateway=true".to_string(),
        "--providers.kubernetesgateway.nativeLBByDefault=true".to_string(),
        format!("--providers.kubernetesgateway.namespaces={ns}"),
        "--log.level=INFO".to_string(),
        format!("--log.filePath={}", log.display()),
    ];
    if ingress_routes {
        args.extend([
            "--providers.kubernetescrd=true".to_string(),
            "--providers.kubernetescrd.nativeLBByDefault=true".to_string(),
            format!("--providers.kubernetescrd.namespaces={ns}"),
        ]);
    }
    let child = Command::new(&bin)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file handle"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    (child, log)
}

/// The acceptance interval `[lo, hi]` of a count drawn from Binomial(`n`,
/// `p`): a correct router (independent requests, each to the canary with
/// probability `p`, or any deterministic weighted round robin, which lands
/// even closer) falls outside with probability at most `alpha`, `alpha / 2`
/// in each tail. Exact tails, summed in log space (no normal
/// approximation, which is poor for small `n * p`).
pub fn binomial_bounds(n: u64, p: f64, alpha: f64) -> (u64, u64) {
    if p <= 0.0 {
        return (0, 0);
    }
    if p >= 1.0 {
        return (n, n);
    }
    // ln P(X = k), for k = 0..=n.
    let mut ln_pmf = Vec::with_capacity(usize::try_from(n).unwrap() + 1);
    let mut ln_choose = 0.0_f64;
    for k in 0..=n {
        let (kf, nf) = (k as f64, n as f64);
        ln_pmf.push(ln_choose + kf * p.ln() + (nf - kf) * (1.0 - p).ln());
        ln_choose += (nf - kf).ln() - (kf + 1.0).ln();
    }
    let tail = |ks: &mut dyn Iterator<Item = u64>| {
        let mut mass = 0.0;
        for k in ks {
            let pk = ln_pmf[usize::try_from(k).unwrap()].exp();
            if mass + pk > alpha / 2.0 {
                return k;
            }
            mass += pk;
        }
        unreachable!("a distribution's mass is 1")
    };
    (tail(&mut (0..=n)), tail(&mut (0..=n).rev()))
}

/// The per-run false-failure bound of every split assertion: with it, a
/// correct router fails a test less than once in a million runs per check.
pub const SPLIT_ALPHA: f64 = 1e-6;

/// Asserts that of `counts` (all answered 200), the share of `revision` is
/// within the binomial interval of `weight` percent ([`binomial_bounds`],
/// [`SPLIT_ALPHA`]); returns a line "expected vs observed" for the output.
pub fn assert_split(counts: &Counts, revision: &str, weight: u32, what: &str) -> String {
    let n = counts.total();
    assert_eq!(counts.errors(), 0, "{what}: requests failed: {counts}");
    let observed = counts.ok_of(revision);
    let (lo, hi) = binomial_bounds(n, f64::from(weight) / 100.0, SPLIT_ALPHA);
    let line = format!(
        "{what}: {revision} expected {weight}% ({lo}..={hi} of {n}), observed {observed} ({:.1}%); {counts}",
        100.0 * observed as f64 / n.max(1) as f64
    );
    assert!(
        (lo..=hi).contains(&observed),
        "{line}: outside the interval a correct router misses with p < {SPLIT_ALPHA}"
    );
    line
}
