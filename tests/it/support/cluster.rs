//! The local cluster of `make test` (e2e/with-cluster.sh exports its
//! KUBECONFIG): a client, fresh namespaces. See docs/control-plane.md.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{metrics, wait_until};

/// A client for the test cluster named by `KUBECONFIG`. Refuses a cluster
/// that is not on this machine, since tests create and break things.
pub async fn client() -> Client {
    assert!(
        !std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()),
        "no test cluster: run `make test` (KUBECONFIG unset)"
    );
    // One rustls crypto provider for the process, as the operator's main does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = Kubeconfig::from_env()
        .expect("cannot read the kubeconfig named by KUBECONFIG")
        .expect("KUBECONFIG names no kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("cannot load the kubeconfig named by KUBECONFIG");
    let host = config.cluster_url.host().unwrap_or_default();
    assert!(
        matches!(host, "127.0.0.1" | "localhost" | "[::1]"),
        "refusing to run tests against {}: not a local test cluster",
        config.cluster_url
    );
    Client::try_from(config).expect("cannot build a client for the test cluster")
}

/// A client of the test cluster that acts as user `user` (the test's
/// administrator impersonates it): what that user may do is what the API
/// server allows it, as for a real user.
pub async fn client_as(user: &str) -> Client {
    let _ = client().await;
    let kubeconfig = Kubeconfig::from_env()
        .expect("cannot read the kubeconfig named by KUBECONFIG")
        .expect("KUBECONFIG names no kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("cannot load the kubeconfig named by KUBECONFIG");
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).expect("cannot build a client for the test cluster")
}

/// Creates a fresh namespace `<prefix>-<unique suffix>` and returns its name,
/// once its `default` service account exists (pods can be created in it).
/// Its pods have a simulated CPU usage of
/// [`metrics::DEFAULT_CPU_MILLICORES`](super::metrics::DEFAULT_CPU_MILLICORES)
/// each, which [`super::metrics::set_cpu_usage`] changes.
pub async fn test_namespace(client: &Client, prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .subsec_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let suffix = format!("{:x}{:x}{n}", std::process::id() % 0x1000, nanos % 0x100000);
    let prefix: String = prefix
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let name = format!("{}-{suffix}", prefix.trim_matches('-'));

    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "releaseplan.io/test": "true" } }
    }))
    .expect("namespace object");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
    // Every pod has a usage, so metrics-server reports every pod, and kwok
    // logs no "no resource usage found" for each pod at every scrape. A
    // cluster started before the metrics pipeline has no such resource (404):
    // only the metrics tests need it.
    match metrics::apply_usage(client, &name, metrics::DEFAULT_CPU_MILLICORES).await {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("cannot set the CPU usage of namespace {name}: {e}"),
    }

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_until(
        Duration::from_secs(60),
        &format!("the default service account of namespace {name}"),
        || {
            let accounts = accounts.clone();
            async move { accounts.get_opt("default").await.ok().flatten() }
        },
    )
    .await;
    name
}

/// The root of the repository (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
