//! Helpers for tests that need local servers: a real Prometheus started by
//! e2e/prometheus.sh, and small axum servers on 127.0.0.1.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A Prometheus server started by `e2e/prometheus.sh start`, stopped when
/// dropped, also when the test panics (`stop`, keeping its log under
/// `.e2e-run/prometheus-<name>/logs`; `remove` after a passing test).
pub struct Prometheus {
    name: String,
    /// Base URL, e.g. `http://127.0.0.1:23456`.
    pub url: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/prometheus.sh")
}

impl Prometheus {
    /// Starts a Prometheus scraping `target` (`host:port`, path `/metrics`)
    /// every second; returns once it answers `/-/ready`.
    pub fn start(target: SocketAddr) -> Prometheus {
        Prometheus::start_with(target, &[])
    }

    /// [`Prometheus::start`] serving as the web config file `web_config`
    /// says (TLS, basic auth); `curl_args` let the readiness check through
    /// (`--cacert ca.pem -u user:password`). The URL is https:// with TLS.
    pub fn start_secured(
        target: SocketAddr,
        web_config: &std::path::Path,
        curl_args: &str,
    ) -> Prometheus {
        Prometheus::start_with(
            target,
            &[
                (
                    "RP_PROMETHEUS_WEB_CONFIG",
                    web_config.to_str().expect("utf-8 path"),
                ),
                ("RP_PROMETHEUS_CURL_ARGS", curl_args),
            ],
        )
    }

    /// [`Prometheus::start`] scraping as the prometheus-operator does for
    /// a ServiceMonitor `endpoint` (as rendered): its `honorLabels`, and the
    /// target labels the operator's relabelling adds from the Service
    /// (`labels`: namespace, service, job, endpoint).
    pub fn start_as_service_monitor(
        target: SocketAddr,
        endpoint: &serde_json::Value,
        labels: &[(&str, &str)],
    ) -> Prometheus {
        let honor = endpoint["honorLabels"]
            .as_bool()
            .unwrap_or(false)
            .to_string();
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Prometheus::start_with(
            target,
            &[
                ("RP_PROMETHEUS_HONOR_LABELS", honor.as_str()),
                ("RP_PROMETHEUS_TARGET_LABELS", labels.join(",").as_str()),
            ],
        )
    }

    /// A Prometheus scraping every second the targets the file_sd list at
    /// `targets` names (re-read every second, so they may come and go).
    pub fn start_file_sd(targets: &std::path::Path) -> Prometheus {
        Prometheus::start_args(
            "-",
            &[(
                "RP_PROMETHEUS_FILE_SD",
                targets.to_str().expect("utf-8 path"),
            )],
        )
    }

    fn start_with(target: SocketAddr, envs: &[(&str, &str)]) -> Prometheus {
        Prometheus::start_args(&target.to_string(), envs)
    }

    fn start_args(target: &str, envs: &[(&str, &str)]) -> Prometheus {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new(script())
            .args(["start", &name, target])
            .envs(envs.iter().copied())
            .output()
            .expect("cannot run e2e/prometheus.sh");
        // Built before the check so that a failed start is stopped too.
        let url = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string();
        let guard = Prometheus { name, url };
        assert!(
            out.status.success()
                && (guard.url.starts_with("http://127.0.0.1:")
                    || guard.url.starts_with("https://127.0.0.1:")),
            "e2e/prometheus.sh start failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for Prometheus {
    /// Stops the server; after a failed test its log stays in the run dir.
    fn drop(&mut self) {
        let cmd = if std::thread::panicking() {
            "stop"
        } else {
            "remove"
        };
        match Command::new(script()).args([cmd, &self.name]).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "e2e/prometheus.sh {cmd} {} failed: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("cannot run e2e/prometheus.sh {cmd} {}: {e}", self.name),
        }
    }
}

/// Serves `app` on a free port of 127.0.0.1 until the test's runtime ends.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("cannot bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("no local address");
    tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("test server failed");
    });
    addr
}

/// An address of 127.0.0.1 where nothing listens (bound, then released).
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("cannot bind 127.0.0.1:0");
    listener.local_addr().expect("no local address")
}

/// A client like the operator's, ignoring any proxy of the environment.
/// Installs the process's TLS crypto provider first, as the operator does.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("cannot build an HTTP client")
}

/// The operator's gate client with the default outbound policy (link-local
/// and metadata refused, bodies kept out of messages).
pub fn gate_http() -> releaseplan::gates::outbound::GateHttp {
    gate_http_with(releaseplan::gates::outbound::OutboundPolicy::default())
}

/// The operator's gate client with `policy`, as the operator's flags build it.
pub fn gate_http_with(
    policy: releaseplan::gates::outbound::OutboundPolicy,
) -> releaseplan::gates::outbound::GateHttp {
    let _ = rustls::crypto::ring::default_provider().install_default();
    releaseplan::gates::outbound::GateHttp::new(policy).expect("cannot build the gate client")
}

/// A TCP proxy on 127.0.0.1 to `upstream` that can freeze: once frozen it
/// keeps every connection open and passes no more bytes either way, the way
/// an API server whose etcd hangs leaves its clients waiting. TLS passes
/// through untouched (the API server's certificate names 127.0.0.1).
pub struct FreezableProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FreezableProxy {
    /// Starts proxying to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FreezableProxy {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, Arc::clone(&flag)));
                tokio::spawn(pump(sr, cw, Arc::clone(&flag)));
            }
        });
        FreezableProxy { addr, frozen }
    }

    /// From now on, nothing passes.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// A copy of the test kubeconfig (`KUBECONFIG`) whose server is this
    /// proxy, written to `dir`; its path.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> PathBuf {
        let path = std::env::var("KUBECONFIG").expect("KUBECONFIG");
        let text = std::fs::read_to_string(&path).unwrap();
        let api = std::env::var("RP_API_URL").expect("RP_API_URL (the cluster's env file)");
        assert!(text.contains(&api), "{path} does not name {api}");
        let out = dir.join("proxied.kubeconfig");
        std::fs::write(&out, text.replace(&api, &format!("https://{}", self.addr))).unwrap();
        out
    }
}

/// Copies `from` to `to` until either side closes; while `frozen`, holds
/// what it read.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let n =
            match tokio::time::timeout(std::time::Duration::from_millis(100), from.read(&mut buf))
                .await
            {
                Err(_) => continue,
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(n)) => n,
            };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The API server's address, from the cluster's env file (`RP_API_URL`).
pub fn api_server_addr() -> SocketAddr {
    let api = std::env::var("RP_API_URL").expect("RP_API_URL (the cluster's env file)");
    api.trim_start_matches("https://").parse().unwrap()
}
