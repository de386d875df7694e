//! Leader election on a `coordination.k8s.io` Lease (kube-lease-manager).
//!
//! kube-lease-manager renews the lease and takes it over when it expires. A
//! follower would only notice a released lease at its expiry, so we also watch
//! the Lease and retry the moment its holder is cleared: a leader that stops on
//! SIGTERM hands over at once, a killed one within the lease duration.

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

/// Builds the lease manager.
pub async fn manager(client: Client, cfg: &LeaderConfig) -> Result<LeaseManager, LeaderError> {
    let grace = (cfg.duration_seconds / 3).max(1);
    Ok(LeaseManagerBuilder::new(client, &cfg.name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.duration_seconds)
        .with_grace(grace)
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

/// Waits until this process leads and returns the lease manager that holds
/// the lease; `None` when `stop` fires first. A released lease is noticed at
/// once: the manager caches the lease until it expires, so a fresh one is
/// built to read it again.
pub async fn acquire(
    client: Client,
    cfg: &LeaderConfig,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Option<LeaseManager>, LeaderError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut current = manager(client.clone(), cfg).await?;
    loop {
        if *stop.borrow() {
            return Ok(None);
        }
        let released_now = tokio::select! {
            r = current.changed() => {
                if r? {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "leading");
                    return Ok(Some(current));
                }
                false
            }
            () = released(api.clone(), cfg.name.clone()) => true,
            _ = stop.changed() => return Ok(None),
        };
        if released_now {
            tracing::info!("lease released by its holder: trying to take it");
            current = manager(client.clone(), cfg).await?;
        }
    }
}

/// Keeps the lease renewed; resolves when leadership is lost.
pub async fn hold(manager: &LeaseManager) -> Result<(), LeaderError> {
    loop {
        if !manager.changed().await? {
            return Ok(());
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
