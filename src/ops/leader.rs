//! Leader election on a `coordination.k8s.io` Lease (kube-lease-manager).
//!
//! kube-lease-manager renews the lease and takes it over when it expires. A
//! follower would only notice a released lease at its expiry, so we also watch
//! the Lease and retry the moment its holder is cleared: a leader that stops on
//! SIGTERM hands over at once, a killed one within the lease duration.

use crate::ops::deadline::DeadlineBody;
use crate::ops::shard;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease could not be created, read or written.
    #[error("lease: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
}

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Unique identity of this process.
    pub identity: String,
    /// Seconds a lease stays valid without renewal.
    pub duration_seconds: u64,
}

/// How long before its expiry the leader renews the Lease: two thirds of
/// its duration (10 s of 15), at least a second, so that a renewal that
/// fails (an API server blip) leaves time to try again before the expiry,
/// as client-go's leader election does.
pub fn renew_grace(duration_seconds: u64) -> std::time::Duration {
    std::time::Duration::from_secs((duration_seconds * 2 / 3).max(1))
}

/// How long the election's client waits for an answer about the Lease
/// (`main`'s lease client, [`LeaseDeadlineLayer`]): a third of the lease
/// duration less half a second for clocks and timers (4.5 s of 15; at least
/// half a second), so that a renewal that hangs is given up while a try
/// can still land before the expiry.
pub fn renew_deadline(duration_seconds: u64) -> std::time::Duration {
    std::time::Duration::from_millis(duration_seconds.saturating_mul(1000) / 3)
        .saturating_sub(CLOCK_MARGIN)
        .max(CLOCK_MARGIN)
}

/// Room left for timers before a Lease's expiry by a request about it.
const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_millis(500);

/// Room a failed renewal's last try leaves before the expiry as this
/// process counts it: for the followers' clocks, which judge the expiry
/// from the renew time the leader wrote, and may be ahead of ours.
const RETRY_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The pause between two tries of a failed renewal.
const RENEW_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// When each Lease was last renewed by this process: the time the last
/// PATCH of it that the API server accepted was sent, as
/// [`LeaseDeadlineLayer`] saw it. kube-lease-manager keeps its own expiry
/// private; this is what a failed renewal's retries are measured against.
/// Only renewals of a held Lease count: the PATCHes that take a Lease are
/// [`Renewals::forget`]ed once it is won (the second one, which counts the
/// transition, is sent after the first one's answer, later than the renew
/// time the followers go by).
#[derive(Debug, Clone, Default)]
pub struct Renewals(
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>>,
);

impl Renewals {
    fn record(&self, lease: &str, sent: tokio::time::Instant) {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = last.entry(lease.to_string()).or_insert(sent);
        *at = (*at).max(sent);
    }

    /// Forgets what was noted of `lease`: called once it is won, so that
    /// only its renewals count.
    pub fn forget(&self, lease: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(lease);
    }

    /// When `lease` was last renewed, if this process ever renewed it.
    pub fn last(&self, lease: &str) -> Option<tokio::time::Instant> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(lease)
            .copied()
    }
}

/// After a renewal failed at `now`: how long to wait before trying again,
/// or `None` when a try started now could no longer get its answer
/// ([`renew_deadline`]) before the lease's expiry (the last accepted
/// renewal's send time plus the lease duration, less [`RETRY_MARGIN`]).
fn renewal_retry(
    now: tokio::time::Instant,
    last_renewed: Option<tokio::time::Instant>,
    duration: std::time::Duration,
    request_deadline: std::time::Duration,
) -> Option<std::time::Duration> {
    let latest_start = (last_renewed? + duration).checked_sub(request_deadline + RETRY_MARGIN)?;
    (now < latest_start).then(|| RENEW_RETRY.min(latest_start - now))
}

/// Gives up on a request for a Lease (a read or a renewal, not a watch)
/// after `after`, its answer's body included: a renewal that has not landed
/// within a third of the lease duration may land after the lease's expiry, when a follower may
/// already lead, so the leader must stop instead (kube's own retries of
/// 429, 503 and 504 run inside the deadline); and a renewal whose body
/// stalls must not keep `hold` waiting past that expiry either. Other requests of the
/// election's client keep the longer deadline every request has
/// (`ops::deadline`); the heartbeat has its own (`ops::liveness`).
/// It also notes each accepted PATCH of a Lease in [`Renewals`].
#[derive(Debug, Clone)]
pub struct LeaseDeadlineLayer {
    after: std::time::Duration,
    renewals: Renewals,
}

impl LeaseDeadlineLayer {
    /// Requests for Leases give up after `after`; accepted renewals are
    /// noted in `renewals`.
    pub fn new(after: std::time::Duration, renewals: Renewals) -> Self {
        Self { after, renewals }
    }
}

impl<S> tower::Layer<S> for LeaseDeadlineLayer {
    type Service = LeaseDeadline<S>;
    fn layer(&self, inner: S) -> Self::Service {
        LeaseDeadline {
            inner,
            after: self.after,
            renewals: self.renewals.clone(),
        }
    }
}

/// The service of [`LeaseDeadlineLayer`].
#[derive(Debug, Clone)]
pub struct LeaseDeadline<S> {
    inner: S,
    after: std::time::Duration,
    renewals: Renewals,
}

/// A Lease request that did not get its answer within the deadline.
#[derive(Debug, thiserror::Error)]
#[error("no answer about the lease within {0:?}")]
pub struct LeaseDeadlineExceeded(std::time::Duration);

impl<S, B, RB> tower::Service<http::Request<B>> for LeaseDeadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    RB: Send + 'static,
{
    type Response = http::Response<DeadlineBody<RB>>;
    type Error = tower::BoxError;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, tower::BoxError>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let bounded =
            req.uri().path().contains("/leases") && !crate::ops::requests::is_watch(req.uri());
        let renewal = (bounded && req.method() == http::Method::PATCH)
            .then(|| req.uri().path().rsplit_once("/leases/"))
            .flatten()
            .map(|(_, name)| name.to_string());
        let after = self.after;
        let renewals = self.renewals.clone();
        let sent = tokio::time::Instant::now();
        let deadline = sent + after;
        let answer = self.inner.call(req);
        Box::pin(async move {
            if !bounded {
                let response = answer.await.map_err(Into::into)?;
                return Ok(response.map(DeadlineBody::unbounded));
            }
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(r) => {
                    let response = r.map_err(Into::into)?;
                    if let Some(lease) = renewal
                        && response.status().is_success()
                    {
                        renewals.record(&lease, sent);
                    }
                    Ok(response.map(|body| {
                        DeadlineBody::new(body, deadline, after, |after| {
                            LeaseDeadlineExceeded(after).into()
                        })
                    }))
                }
                Err(_) => Err(LeaseDeadlineExceeded(after).into()),
            }
        })
    }
}

/// Builds the lease manager.
pub async fn manager(client: Client, cfg: &LeaderConfig) -> Result<LeaseManager, LeaderError> {
    Ok(LeaseManagerBuilder::new(client, &cfg.name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.duration_seconds)
        .with_grace(renew_grace(cfg.duration_seconds).as_secs())
        .with_field_manager(format!("releaseplan-{}", cfg.identity))
        .build()
        .await?)
}

/// Resolves when the Lease is seen released after this call started.
async fn released(api: Api<Lease>, name: String) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, cfg).boxed();
    let mut synced = false;
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::InitDone) => synced = true,
            Ok(watcher::Event::Apply(lease)) if synced => {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                if holder.is_none_or(|h| h.is_empty()) {
                    return;
                }
            }
            Ok(watcher::Event::Delete(_)) if synced => return,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "lease watch error");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
    futures::future::pending::<()>().await;
}

/// Whether a lease error is the API server being away (no answer, a 5xx,
/// a 429, a request past [`LeaseDeadlineLayer`]'s deadline) or a race with
/// another replica over the Lease's creation: a follower asks again. Any
/// other error (403: no RBAC; 404: no such namespace) is an answer, and
/// ends the start with it.
fn transient(e: &LeaderError) -> bool {
    use kube_lease_manager::LeaseManagerError as E;
    let LeaderError::Lease(e) = e;
    match e {
        E::KubeError(k) => crate::kube_errors::is_transient(k),
        E::LeaseAlreadyExists(_) | E::NonexistentLease(_) => true,
        _ => false,
    }
}

/// Builds the lease manager, asking again after a transient error: a
/// follower has nothing to lose by waiting.
async fn manager_retried(
    client: &Client,
    cfg: &LeaderConfig,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Option<LeaseManager>, LeaderError> {
    loop {
        match manager(client.clone(), cfg).await {
            Ok(m) => return Ok(Some(m)),
            Err(e) if transient(&e) => {
                tracing::warn!(error = %e, lease = %cfg.name, retry_in = ?FOLLOWER_RETRY, "cannot read the lease yet");
                tokio::select! {
                    () = tokio::time::sleep(FOLLOWER_RETRY) => {}
                    _ = stop.changed() => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// A follower's pause after an API error before it asks again.
const FOLLOWER_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until this process leads and returns the lease manager that holds
/// the lease; `None` when `stop` fires first. A released lease is noticed at
/// once: the manager caches the lease until it expires, so a fresh one is
/// built to read it again. A transient error is asked again after a
/// second: a follower does not exit for a blip (its restart would meet the
/// same outage); any other error is returned.
pub async fn acquire(
    client: Client,
    cfg: &LeaderConfig,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Option<LeaseManager>, LeaderError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let Some(mut current) = manager_retried(&client, cfg, stop).await? else {
        return Ok(None);
    };
    loop {
        if *stop.borrow() {
            return Ok(None);
        }
        let released_now = tokio::select! {
            r = current.changed() => match r.map_err(LeaderError::from) {
                Ok(true) => {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "leading");
                    return Ok(Some(current));
                }
                Ok(false) => false,
                Err(e) if transient(&e) => {
                    tracing::warn!(error = %e, lease = %cfg.name, retry_in = ?FOLLOWER_RETRY, "cannot read the lease");
                    tokio::select! {
                        () = tokio::time::sleep(FOLLOWER_RETRY) => {}
                        _ = stop.changed() => return Ok(None),
                    }
                    false
                }
                Err(e) => return Err(e),
            },
            () = released(api.clone(), cfg.name.clone()) => true,
            _ = stop.changed() => return Ok(None),
        };
        if released_now {
            tracing::info!("lease released by its holder: trying to take it");
            let Some(m) = manager_retried(&client, cfg, stop).await? else {
                return Ok(None);
            };
            current = m;
        }
    }
}

/// Keeps the lease `cfg.name` renewed; resolves when leadership is lost:
/// another holder, or renewals that kept failing until a try could no
/// longer land before the expiry (after which a follower may lead). A
/// failed renewal is tried again each second until then, so an API server
/// blip shorter than a third of the lease duration less 1.5 s (3.5 s of 15)
/// costs nothing.
pub async fn hold(manager: &LeaseManager, cfg: &LeaderConfig, renewals: &Renewals) {
    let duration = std::time::Duration::from_secs(cfg.duration_seconds);
    let request_deadline = renew_deadline(cfg.duration_seconds);
    loop {
        match manager.changed().await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let now = tokio::time::Instant::now();
                let last = renewals.last(&cfg.name);
                let Some(wait) = renewal_retry(now, last, duration, request_deadline) else {
                    tracing::error!(error = %e, lease = %cfg.name, "cannot renew the lease before it expires");
                    return;
                };
                tracing::warn!(error = %e, lease = %cfg.name, retry_in = ?wait, "cannot renew the lease; trying again before it expires");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Waits until this process holds one of the `count` shard Leases named after
/// `cfg.name` (see [`shard::lease_name`]) and returns the shard and its lease
/// manager; `None` when `stop` fires first. The shards are tried in this
/// process's order of preference, each a little after the one before, so that
/// replicas starting together take different shards and one process rarely
/// wins two at once (it keeps the first; the other stays held until the
/// lease expires, and another replica takes it then).
pub async fn acquire_shard(
    client: Client,
    cfg: &LeaderConfig,
    count: u32,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<(u32, LeaseManager)>, LeaderError> {
    const STAGGER: std::time::Duration = std::time::Duration::from_millis(300);
    let attempts = shard::preference(&cfg.identity, count)
        .into_iter()
        .zip(0u32..)
        .map(|(index, rank)| {
            let client = client.clone();
            let mut stop = stop.clone();
            let cfg = LeaderConfig {
                name: shard::lease_name(&cfg.name, index, count),
                ..cfg.clone()
            };
            async move {
                tokio::select! {
                    () = tokio::time::sleep(STAGGER * rank) => {}
                    _ = stop.changed() => return Ok(None),
                }
                Ok(acquire(client, &cfg, &mut stop).await?.map(|m| (index, m)))
            }
            .boxed()
        });
    let (first, _, _rest) = futures::future::select_all(attempts).await;
    first
}

/// Resolves once no replica of another shard count holds a Lease named after
/// `cfg.name`: during a change of `--shards` the old replicas must stop before
/// the new ones reconcile, or a plan would have two.
pub async fn other_layouts_gone(client: Client, cfg: &LeaderConfig, count: u32) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut told = false;
    loop {
        match api.list(&kube::api::ListParams::default()).await {
            Ok(list) => {
                let now = k8s_openapi::jiff::Timestamp::now().as_second();
                let others: Vec<String> = list
                    .items
                    .iter()
                    .filter(|l| {
                        let name = l.metadata.name.as_deref().unwrap_or_default();
                        shard::layout_of(&cfg.name, name).is_some_and(|c| c != count)
                            && held(l, now)
                    })
                    .filter_map(|l| l.metadata.name.clone())
                    .collect();
                if others.is_empty() {
                    return;
                }
                if !told {
                    tracing::warn!(
                        leases = ?others,
                        "replicas of another shard count still hold their leases: waiting for them to stop"
                    );
                    told = true;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list the leases of other shard counts"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}

/// Whether a Lease has a holder whose last renewal has not expired.
fn held(lease: &Lease, now: i64) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let holder = spec
        .holder_identity
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref());
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    holder && renewed.is_some_and(|t| t.0.as_second().saturating_add(duration) > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    /// A follower that cannot read the Lease while the API server is away
    /// asks again (it used to end the process, whose restart met the same
    /// outage); a refusal is an answer and ends the start.
    #[tokio::test(start_paused = true)]
    async fn a_follower_waits_out_a_blip_but_not_a_refusal() {
        use crate::canned_api::{answering, status};
        let cfg = LeaderConfig {
            namespace: "ns".into(),
            name: "rp".into(),
            identity: "me".into(),
            duration_seconds: 15,
        };
        let (_tx, mut stop) = tokio::sync::watch::channel(false);
        let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "rp", "namespace": "ns", "resourceVersion": "1"}, "spec": {}});
        let (client, asked) = answering(vec![status(503), status(500), status(429), (200, lease)]);
        let got = manager_retried(&client, &cfg, &mut stop).await;
        assert!(matches!(got, Ok(Some(_))), "{:?}", got.err());
        assert_eq!(*asked.lock().unwrap(), 4);

        let (client, asked) = answering(vec![status(403)]);
        let got = manager_retried(&client, &cfg, &mut stop).await;
        assert!(got.is_err(), "a refusal is returned");
        assert_eq!(*asked.lock().unwrap(), 1);
    }

    /// A server that never answers a Lease read or renewal in time: the
    /// request gives up at the deadline. The heartbeat (`/version`) and the
    /// Lease watch are left to wait.
    #[tokio::test(start_paused = true)]
    async fn a_lease_request_gives_up_at_the_deadline_and_nothing_else_does() {
        let never = tower::service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        });
        let mut svc =
            LeaseDeadlineLayer::new(std::time::Duration::from_secs(5), Renewals::default())
                .layer(never);
        let req = |uri: &str| http::Request::builder().uri(uri).body(()).unwrap();
        let lease = "/apis/coordination.k8s.io/v1/namespaces/rp/leases/releaseplan-leader";

        let started = tokio::time::Instant::now();
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(req(lease))
            .await
            .unwrap_err();
        assert!(err.is::<LeaseDeadlineExceeded>(), "{err}");
        assert_eq!(started.elapsed(), std::time::Duration::from_secs(5));

        for uri in [
            "/version",
            "/apis/coordination.k8s.io/v1/namespaces/rp/leases?fieldSelector=metadata.name%3Dx&watch=true",
        ] {
            let waited = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                svc.ready().await.unwrap().call(req(uri)),
            )
            .await;
            assert!(waited.is_err(), "{uri} was cut short: {waited:?}");
        }
    }

    /// An answer about a Lease whose headers come in time but whose body
    /// stalls is cut at the same deadline; a body that came is read whole,
    /// and the heartbeat's stalled body is left to wait.
    #[tokio::test(start_paused = true)]
    async fn a_lease_answers_stalled_body_gives_up_at_the_deadline() {
        use http_body_util::BodyExt;
        use std::time::Duration;
        type Frame = http_body::Frame<&'static [u8]>;
        let stalled = tower::service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let never = futures::stream::pending::<Result<Frame, std::convert::Infallible>>();
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::StreamBody::new(
                never,
            )))
        });
        let mut svc =
            LeaseDeadlineLayer::new(Duration::from_secs(5), Renewals::default()).layer(stalled);
        let req = |uri: &str| http::Request::builder().uri(uri).body(()).unwrap();
        let lease = "/apis/coordination.k8s.io/v1/namespaces/rp/leases/releaseplan-leader";

        let started = tokio::time::Instant::now();
        let answer = svc.ready().await.unwrap().call(req(lease)).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(2), "headers in time");
        let cut = tokio::time::timeout(Duration::from_secs(60), answer.into_body().collect());
        let err = cut.await.expect("cut at the deadline").unwrap_err();
        assert!(err.is::<LeaseDeadlineExceeded>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(5), "one deadline");

        let answer = svc
            .ready()
            .await
            .unwrap()
            .call(req("/version"))
            .await
            .unwrap();
        let waited =
            tokio::time::timeout(Duration::from_secs(60), answer.into_body().collect()).await;
        assert!(waited.is_err(), "the heartbeat's body was cut short");

        let whole = tower::service_fn(|_req: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                &b"{}"[..],
            )))
        });
        let mut svc =
            LeaseDeadlineLayer::new(Duration::from_secs(5), Renewals::default()).layer(whole);
        let answer = svc.ready().await.unwrap().call(req(lease)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}", "a body that came is read, even late");
    }

    /// A failed renewal is tried again each second while a try can still
    /// get its answer before the lease expires (the last accepted renewal
    /// plus the duration, less the request deadline and half a second);
    /// the last try is timed to start at that limit; past it, or with no
    /// renewal known (the first renewal after the Lease was won), leadership
    /// ends.
    #[test]
    fn a_failed_renewal_is_tried_again_while_it_can_land_before_the_expiry() {
        let s = std::time::Duration::from_secs;
        let ms = std::time::Duration::from_millis;
        let t0 = tokio::time::Instant::now();
        let (duration, deadline) = (s(15), renew_deadline(15));
        assert_eq!(deadline, ms(4500));
        assert_eq!(renew_grace(15), s(10), "renewed 10 s before the expiry");
        let retry = |now, last| renewal_retry(now, last, duration, deadline);
        // Renewed at t0: expires at t0 + 15; a try must start by t0 + 8.5
        // (its answer by t0 + 13: 2 s for the followers' clocks).
        assert_eq!(retry(t0 + s(5), Some(t0)), Some(s(1)), "first failure");
        assert_eq!(retry(t0 + s(7), Some(t0)), Some(s(1)));
        assert_eq!(retry(t0 + ms(8100), Some(t0)), Some(ms(400)), "the last");
        assert_eq!(retry(t0 + ms(8500), Some(t0)), None, "could land too late");
        assert_eq!(retry(t0 + s(5), None), None, "no renewal known");
        // Short leases: the deadline and the margin leave no room.
        assert_eq!(renew_deadline(2), ms(500));
        assert_eq!(renewal_retry(t0 + s(1), Some(t0), s(2), ms(500)), None);
        // Once won, the Lease's taking is forgotten: no retry before a
        // renewal of it is noted.
        let renewals = Renewals::default();
        renewals.record("rp", t0);
        renewals.forget("rp");
        assert_eq!(renewals.last("rp"), None);
    }

    /// The layer notes a Lease's renewal when the API server accepts its
    /// PATCH, at the time it was sent; a refused PATCH, a read or another
    /// Lease's PATCH does not count for it.
    #[tokio::test(start_paused = true)]
    async fn an_accepted_renewal_is_noted_at_the_time_it_was_sent() {
        use std::time::Duration;
        let slow = tower::service_fn(|req: http::Request<()>| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let status = if req.uri().query() == Some("refuse") {
                500
            } else {
                200
            };
            let mut r = http::Response::new(());
            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, std::convert::Infallible>(r)
        });
        let renewals = Renewals::default();
        let mut svc = LeaseDeadlineLayer::new(Duration::from_secs(5), renewals.clone()).layer(slow);
        let lease = "/apis/coordination.k8s.io/v1/namespaces/rp/leases/releaseplan-leader";
        let mut send = |method: http::Method, uri: String| {
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap();
            svc.call(req)
        };
        let t0 = tokio::time::Instant::now();
        send(http::Method::PATCH, lease.to_string()).await.unwrap();
        assert_eq!(renewals.last("releaseplan-leader"), Some(t0), "sent at t0");

        send(http::Method::PATCH, format!("{lease}?refuse"))
            .await
            .unwrap();
        send(http::Method::GET, lease.to_string()).await.unwrap();
        assert_eq!(renewals.last("releaseplan-leader"), Some(t0), "unchanged");

        let t1 = tokio::time::Instant::now();
        send(http::Method::PATCH, format!("{lease}-1-of-2"))
            .await
            .unwrap();
        assert_eq!(renewals.last("releaseplan-leader-1-of-2"), Some(t1));
        assert_eq!(renewals.last("releaseplan-leader"), Some(t0));
    }
}
