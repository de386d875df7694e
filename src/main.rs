//! The releaseplan operator process.

use clap::Parser;
use ipnet::IpNet;
use releaseplan::controller::router::Dispatch as _;
use releaseplan::controller::{self, Settings};
use releaseplan::gates::outbound::{self, GateHttp, HostRule, OutboundPolicy};
use releaseplan::ops::api_client;
use releaseplan::ops::deadline::RequestDeadlineLayer;
use releaseplan::ops::leader::{self, LeaderConfig};
use releaseplan::ops::liveness::Liveness;
use releaseplan::ops::metrics::Metrics;
use releaseplan::ops::ratelimit::RateLimitLayer;
use releaseplan::ops::requests::RequestMetricsLayer;
use releaseplan::ops::server::{self, Health};
use releaseplan::ops::shard::Shard;
use releaseplan::ops::telemetry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// jemalloc rather than glibc's malloc: decoding watch events, hashing and
/// writing templates allocate and free many small blocks; glibc's malloc
/// spent a third of the operator's CPU on them at 1,000 plans and held a
/// quarter more memory (its arenas fragment), mimalloc held more still
/// (docs/benchmarks.md, "The allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Releases workloads safely: canary steps, health gates, automatic rollback.
#[derive(Parser, Debug)]
#[command(version = releaseplan::build_info::VERSION_LINE, about)]
// Each bool is an on/off command-line flag, not a state.
#[allow(clippy::struct_excessive_bools)]
struct Args {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "RELEASEPLAN_NAMESPACE")]
    namespace: Option<String>,
    /// The namespace the operator runs in, where its Lease and the gates'
    /// credentials live (default: the pod's service account namespace; the
    /// chart sets POD_NAMESPACE). Without one the operator does not start:
    /// guessing `default` would read credentials from the wrong namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    operator_namespace: Option<String>,
    /// Reconciles run at once. Each spends most of its time waiting on the API
    /// server, so this is about round trips in flight; `--qps` bounds the load.
    #[arg(long, env = "RELEASEPLAN_CONCURRENCY", default_value_t = 32)]
    concurrency: u16,
    /// Threads that run the operator's tasks beside the main one (0: one per
    /// CPU it may use). One spends less CPU in a rollout, more converges a
    /// burst sooner (docs/operations.md).
    #[arg(long, env = "RELEASEPLAN_WORKER_THREADS", default_value_t = 0)]
    worker_threads: u16,
    /// Requests per second to the API server, on average (0: no limit).
    #[arg(long, env = "RELEASEPLAN_QPS", default_value_t = 200)]
    qps: u32,
    /// Requests to the API server allowed at once above `--qps`.
    #[arg(long, env = "RELEASEPLAN_BURST", default_value_t = 400)]
    burst: u32,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "RELEASEPLAN_METRICS_ADDR", default_value = "[::]:8080")]
    metrics_addr: SocketAddr,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "RELEASEPLAN_LOG_JSON")]
    log_json: bool,
    /// Elect a leader on a Lease so that only one replica reconciles.
    #[arg(long, env = "RELEASEPLAN_LEADER_ELECTION")]
    leader_election: bool,
    /// Split the plans over this many leader Leases: each replica reconciles
    /// and caches the plans of one shard, replicas beyond this are standbys.
    /// Needs `--leader-election`. Changing it on a running deployment makes the
    /// new replicas wait until the old ones have stopped.
    #[arg(long, env = "RELEASEPLAN_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    shards: u32,
    /// Name of the leader Lease (with `--shards N`, the shards' Leases are
    /// `<name>-<shard>-of-<N>`).
    #[arg(
        long,
        env = "RELEASEPLAN_LEASE_NAME",
        default_value = "releaseplan-leader"
    )]
    lease_name: String,
    /// Namespace of the leader Lease (default: `--operator-namespace`).
    #[arg(long, env = "RELEASEPLAN_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds the lease stays valid without renewal.
    #[arg(long, env = "RELEASEPLAN_LEASE_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    lease_seconds: u64,
    /// Identity in the lease and in events (default: POD_NAME, else host name and pid).
    #[arg(long, env = "RELEASEPLAN_IDENTITY")]
    identity: Option<String>,
    /// /healthz fails when a reconcile runs, a request to the API server waits
    /// for its answer, or a watch keeps failing, this long.
    #[arg(long, env = "RELEASEPLAN_STUCK_AFTER_SECONDS", default_value_t = 120)]
    stuck_after_seconds: u64,
    /// A request to the API server that is not a watch fails (and is retried
    /// with backoff) when its whole answer has not come within this many
    /// seconds; the API server itself gives up on a request after 60.
    #[arg(long, env = "RELEASEPLAN_API_REQUEST_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    api_request_timeout_seconds: u64,
    /// A reconcile that has not ended within this many seconds is given up as
    /// an error and retried with backoff; more than
    /// `--api-request-timeout-seconds`, less than `--stuck-after-seconds`.
    #[arg(long, env = "RELEASEPLAN_RECONCILE_TIMEOUT_SECONDS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    reconcile_timeout_seconds: u64,
    /// Networks gates may not call (comma-separated CIDRs or addresses), on
    /// top of link-local and cloud-metadata addresses, which are always refused.
    #[arg(long, env = "RELEASEPLAN_GATE_DENY_CIDRS", value_delimiter = ',', value_parser = outbound::parse_cidr)]
    gate_deny_cidrs: Vec<IpNet>,
    /// When set, the only hosts gates may call (comma-separated host names,
    /// `*.domain`, CIDRs); default: any address but the refused ones.
    #[arg(long, env = "RELEASEPLAN_GATE_ALLOW_HOSTS", value_delimiter = ',')]
    gate_allow_hosts: Vec<HostRule>,
    /// Characters of a failing gate answer's body repeated in status and
    /// Events (sanitized, at most 1024); 0 keeps bodies out.
    #[arg(long, env = "RELEASEPLAN_GATE_ERROR_BODY_CHARS", default_value_t = 0)]
    gate_error_body_chars: u16,
    /// Largest answer a gate reads, in bytes: a bigger one is an error of
    /// the gate, and never held whole (a gate's answer is one number).
    #[arg(long, env = "RELEASEPLAN_GATE_MAX_ANSWER_BYTES", default_value = "262144", value_parser = clap::value_parser!(u32).range(1024..=16_777_216))]
    gate_max_answer_bytes: u32,
    /// Prometheus and webhook gate calls in flight at once, all namespaces
    /// together (0: no limit). A call over budget waits: its gate is not
    /// evaluated yet, never failed.
    #[arg(long, env = "RELEASEPLAN_GATE_CALLS_IN_FLIGHT", default_value_t = 32)]
    gate_calls_in_flight: u32,
    /// Gate calls in flight at once of one namespace (0: no limit): a
    /// namespace over it waits on its own share, not on the others'.
    #[arg(
        long,
        env = "RELEASEPLAN_GATE_CALLS_IN_FLIGHT_PER_NAMESPACE",
        default_value_t = 8
    )]
    gate_calls_in_flight_per_namespace: u32,
    /// Gate calls started per second, all namespaces together (0: no limit).
    #[arg(long, env = "RELEASEPLAN_GATE_CALLS_PER_SECOND", default_value_t = 50)]
    gate_calls_per_second: u32,
    /// Gate calls started per second in one namespace (0: no limit).
    #[arg(
        long,
        env = "RELEASEPLAN_GATE_CALLS_PER_SECOND_PER_NAMESPACE",
        default_value_t = 10
    )]
    gate_calls_per_second_per_namespace: u32,
    /// Namespace whose Secrets and ConfigMaps gates may reference (auth,
    /// headers, CA bundles) (default: `--operator-namespace`, the operator's
    /// own).
    #[arg(long, env = "RELEASEPLAN_GATE_CREDENTIALS_NAMESPACE")]
    gate_credentials_namespace: Option<String>,
    /// `required`: a namespace that no GatePolicy selects gets no gate call
    /// and no route; `optional`: it keeps the operator-wide rules (a
    /// namespace some GatePolicy selects gets only what its policies allow
    /// either way). `required` by default, as the chart: a binary run by
    /// hand is no more open than an install.
    #[arg(long, env = "RELEASEPLAN_GATE_POLICY", default_value = "required")]
    gate_policy: releaseplan::gates::policy::Mode,
    /// Offer HTTP/2 to the API server: one connection carries every watch and
    /// request. false speaks HTTP/1.1, a connection per watch and per request
    /// in flight (for a front proxy that mishandles HTTP/2).
    #[arg(long, env = "RELEASEPLAN_API_HTTP2", default_value_t = true, action = clap::ArgAction::Set)]
    api_http2: bool,
    /// Version the ConfigMaps and Secrets pod templates reference with each
    /// revision (needs list and watch on them); false reads every reference
    /// live, as a plain Deployment does.
    #[arg(long, env = "RELEASEPLAN_CONFIG_VERSIONING", default_value_t = true, action = clap::ArgAction::Set)]
    config_versioning: bool,
    /// Namespaces where config versioning may read and copy ConfigMaps and
    /// Secrets, comma-separated; `*` for every namespace the operator watches.
    /// Empty: none (config is read live, and plans that reference config say
    /// so in their ConfigVersioned condition). The RBAC must grant the same:
    /// the chart's config.namespaces renders both.
    #[arg(
        long,
        env = "RELEASEPLAN_CONFIG_NAMESPACES",
        value_delimiter = ',',
        value_parser = releaseplan::controller::config_cache::ConfigNamespaces::parse_entry
    )]
    config_namespaces: Vec<String>,
    /// Pod Security Standard level of the Job gates tenants write (in plans and
    /// GateTemplates): restricted (fields left unset get the restricted values),
    /// baseline or privileged (no check). ClusterGateTemplates are not held to it.
    #[arg(
        long,
        env = "RELEASEPLAN_GATE_JOB_POD_SECURITY",
        default_value = "restricted"
    )]
    gate_job_pod_security: releaseplan::gates::pod_security::Level,
    /// Link in notifications to the plan in a dashboard or Argo CD: a URL
    /// template over the plan's `namespace`, `name` and `uid`, e.g.
    /// `https://argocd.example/applications/{{ namespace }}-{{ name }}`.
    #[arg(long, env = "RELEASEPLAN_DASHBOARD_URL", value_parser = dashboard_url)]
    dashboard_url: Option<String>,
}

/// A `--dashboard-url` that renders (a template error shows at start-up).
fn dashboard_url(s: &str) -> Result<String, String> {
    releaseplan_core::notify::payload::check_template(s)?;
    Ok(s.to_string())
}

#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error("no Kubernetes configuration: {0}")]
    Config(#[from] kube::Error),
    #[error(transparent)]
    Start(#[from] controller::StartError),
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    #[error("health server: {0}")]
    Server(#[from] std::io::Error),
    #[error(transparent)]
    GateHttp(#[from] outbound::BuildError),
    #[error(
        "--shards {0} needs --leader-election: each shard is served by the holder of its Lease"
    )]
    ShardsWithoutElection(u32),
    #[error(
        "--reconcile-timeout-seconds {reconcile} must be more than --api-request-timeout-seconds {request}: a reconcile must outlast one request it waits on"
    )]
    Deadlines { reconcile: u64, request: u64 },
    #[error(
        "cannot tell which namespace the operator runs in: set --operator-namespace or POD_NAMESPACE (in a pod: from fieldRef metadata.namespace, as the chart does). Its Lease and the gates' credentials live there; it no longer falls back to `default`"
    )]
    NoNamespace,
}

/// Where a pod with a mounted service account token finds its namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The namespace the operator runs in: `--operator-namespace` (or
/// POD_NAMESPACE), else the service account's, else an error. Never a
/// guess: a wrong one would serve another namespace's Secrets as gate
/// credentials.
fn own_namespace(args: &Args) -> Result<String, MainError> {
    let given = args.operator_namespace.as_deref().map(str::trim);
    if let Some(ns) = given.filter(|ns| !ns.is_empty()) {
        return Ok(ns.to_string());
    }
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .ok_or(MainError::NoNamespace)
}

/// How long a signal waits for in-flight reconciles, Events and the lease
/// release before the process exits anyway.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// Resolves on SIGTERM or Ctrl-C.
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn identity(args: &Args) -> String {
    args.identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .map_or_else(|_| "releaseplan".into(), |h| h.trim().to_string());
            format!("{host}-{}", std::process::id())
        })
}

/// The client of the controller, under the `--qps`/`--burst` limit, and the
/// client of leader election, outside it: a busy controller must never hold
/// up the lease renewal. Each is one HTTP/2 connection where the API server
/// offers it (`ops::api_client`), so the two never wait on each other.
/// Both count their requests in `metrics`, the limited one inside the limit
/// (a duration is the API server's, not the wait for a token).
async fn clients(
    args: &Args,
    metrics: &Arc<Metrics>,
    liveness: &Arc<Liveness>,
    renewals: &leader::Renewals,
) -> Result<(kube::Client, kube::Client), MainError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| MainError::Config(kube::Error::InferConfig(e)))?;
    let counted = RequestMetricsLayer::new(Arc::clone(metrics)).with_liveness(Arc::clone(liveness));
    let http2 = if args.api_http2 {
        api_client::Http2::Offered
    } else {
        api_client::Http2::Off
    };
    // The deadline inside the count: a request given up is counted and
    // logged as one that got no answer. Inside the `--qps` limit: it bounds
    // the API server's time, not the wait for a token (the reconcile's own
    // deadline bounds that).
    let deadline = Duration::from_secs(args.api_request_timeout_seconds);
    let limited = api_client::builder(config.clone(), http2)?
        .with_layer(&RequestDeadlineLayer::new(deadline))
        .with_layer(&counted)
        .with_layer(&RateLimitLayer::new(args.qps, args.burst))
        .build();
    let lease = api_client::builder(config, http2)?
        .with_layer(&RequestDeadlineLayer::new(deadline))
        .with_layer(&leader::LeaseDeadlineLayer::new(
            leader::renew_deadline(args.lease_seconds),
            renewals.clone(),
        ))
        .with_layer(&counted)
        .build();
    Ok((limited, lease))
}

// Start-up in order: clients, health server, the check of the CRDs, leader
// election, the controller.
#[allow(clippy::too_many_lines)]
async fn run(args: Args) -> Result<(), MainError> {
    if args.shards > 1 && !args.leader_election {
        return Err(MainError::ShardsWithoutElection(args.shards));
    }
    if args.reconcile_timeout_seconds <= args.api_request_timeout_seconds {
        return Err(MainError::Deadlines {
            reconcile: args.reconcile_timeout_seconds,
            request: args.api_request_timeout_seconds,
        });
    }
    let own = own_namespace(&args)?;
    let metrics = Arc::new(Metrics::new());
    metrics.shards.set(i64::from(args.shards));
    let liveness = Liveness::new(std::time::Duration::from_secs(args.stuck_after_seconds));
    let renewals = leader::Renewals::default();
    let (client, lease_client) = clients(&args, &metrics, &liveness, &renewals).await?;

    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        signal().await;
        tracing::info!(
            "signal received: finishing in-flight reconciles (at most {SHUTDOWN_GRACE:?})"
        );
        let _ = stop_tx.send(true);
        // In-flight work can hang on an API server that does not answer
        // (etcd down): the process must still end, before the kubelet's
        // default 30s grace period turns into a SIGKILL.
        tokio::select! {
            () = tokio::time::sleep(SHUTDOWN_GRACE) => {
                tracing::warn!("in-flight work did not finish within {SHUTDOWN_GRACE:?}: exiting");
            }
            () = signal() => tracing::warn!("second signal: exiting now"),
        }
        std::process::exit(1);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // Even an idle operator asks the API server something every half bound,
    // so a connection that hangs without an error fails /healthz.
    let beat = tokio::spawn(releaseplan::ops::liveness::heartbeat(
        lease_client.clone(),
        Arc::clone(&liveness),
    ));
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
        liveness: liveness.clone(),
    };
    let server = tokio::spawn(server::serve(
        args.metrics_addr,
        health,
        stopped(stop_rx.clone()),
    ));
    // After the server: while the API server is away the check waits for
    // it, and the probes answer meanwhile (not ready; alive unless a
    // request hangs past the bound).
    tokio::select! {
        r = controller::check_crd(&client, args.namespace.as_deref()) => r?,
        () = stopped(stop_rx.clone()) => {
            let _ = server.await;
            return Ok(());
        }
    }

    let id = identity(&args);
    let routers = controller::router::served(&client, args.namespace.as_deref()).await;
    for kind in releaseplan::api::RouterKind::ALL {
        if !routers.contains(&kind) {
            tracing::info!(
                kind = kind.kind(),
                "the cluster serves no such routes (or RBAC forbids them): plans that use this router will report the refused route; restart the operator after installing its CRD"
            );
        }
    }
    let settings = Settings {
        routers,
        namespace: args.namespace.clone(),
        concurrency: args.concurrency,
        instance: Some(id.clone()),
        gate_http: GateHttp::new(OutboundPolicy {
            deny: args.gate_deny_cidrs.clone(),
            allow: args.gate_allow_hosts.clone(),
            error_body_chars: args.gate_error_body_chars,
        })?
        .with_max_answer_bytes(args.gate_max_answer_bytes as usize),
        gate_budget: releaseplan::gates::budget::Limits {
            in_flight: args.gate_calls_in_flight,
            in_flight_per_namespace: args.gate_calls_in_flight_per_namespace,
            per_second: args.gate_calls_per_second,
            per_second_per_namespace: args.gate_calls_per_second_per_namespace,
        },
        gate_credentials_namespace: args
            .gate_credentials_namespace
            .clone()
            .unwrap_or_else(|| own.clone()),
        config_versioning: args.config_versioning,
        config_namespaces: releaseplan::controller::config_cache::ConfigNamespaces::from_list(
            &args.config_namespaces,
        ),
        gate_policy: args.gate_policy,
        job_pod_security: args.gate_job_pod_security,
        shard: None,
        notify: controller::notify::NotifySettings {
            dashboard_url: args.dashboard_url.clone(),
        },
        reconcile_deadline: Duration::from_secs(args.reconcile_timeout_seconds),
    };
    if args.leader_election {
        let cfg = LeaderConfig {
            namespace: args.lease_namespace.clone().unwrap_or(own),
            name: args.lease_name.clone(),
            identity: id,
            duration_seconds: args.lease_seconds,
        };
        ready.store(true, Ordering::Relaxed);
        let stop = stop_rx.clone();
        if let Some((shard, manager)) =
            leader::acquire_shard(lease_client.clone(), &cfg, args.shards, &stop).await?
        {
            tracing::info!(shard, shards = args.shards, "serving a shard");
            let held = LeaderConfig {
                name: releaseplan::ops::shard::lease_name(&cfg.name, shard, args.shards),
                ..cfg.clone()
            };
            // Taking the Lease was no renewal (`leader::Renewals`).
            renewals.forget(&held.name);
            // Renewed while the replicas of another shard count stop.
            tokio::select! {
                () = leader::other_layouts_gone(lease_client, &cfg, args.shards) => {},
                () = leader::hold(&manager, &held, &renewals) => {
                    tracing::error!("leadership lost: exiting so that only the leader writes");
                    std::process::exit(1);
                }
                () = stopped(stop_rx.clone()) => {
                    manager.release().await.map_err(leader::LeaderError::from)?;
                    tracing::info!("lease released");
                    let _ = server.await;
                    return Ok(());
                }
            }
            metrics.leader.set(1);
            metrics.shard.set(i64::from(shard));
            let settings = Settings {
                shard: (args.shards > 1).then_some(Shard {
                    index: shard,
                    count: args.shards,
                }),
                ..settings
            };
            // Boxed: the controller's future is large (every watch's state).
            let ctrl = Box::pin(controller::run(
                client,
                settings,
                metrics,
                liveness,
                stopped(stop_rx.clone()),
            ));
            tokio::select! {
                () = ctrl => {},
                () = leader::hold(&manager, &held, &renewals) => {
                    tracing::error!("leadership lost: exiting so that only the leader writes");
                    std::process::exit(1);
                }
            }
            manager.release().await.map_err(leader::LeaderError::from)?;
            tracing::info!("lease released");
        }
    } else {
        ready.store(true, Ordering::Relaxed);
        metrics.leader.set(1);
        metrics.shard.set(0);
        Box::pin(controller::run(
            client,
            settings,
            metrics,
            liveness,
            stopped(stop_rx.clone()),
        ))
        .await;
    }
    let _ = server.await;
    beat.abort();
    Ok(())
}

fn main() {
    let args = Args::parse();
    telemetry::init(args.log_json);
    // One TLS crypto provider for the whole process (kube and the gate client).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if args.worker_threads > 0 {
        runtime.worker_threads(usize::from(args.worker_threads));
    }
    let result = match runtime.build() {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("releaseplan: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        tracing::error!("{e}");
        eprintln!("releaseplan: {e}");
        std::process::exit(2);
    }
}
