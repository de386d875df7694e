//! The real operator binary against the test cluster, one process per test
//! namespace: [`Operator::launcher`] builds the command line (flags,
//! environment, leader election), [`Launcher::start`] runs it and waits for
//! `/readyz`, and the [`Operator`] reads its metrics and stops it.
//!
//! The binary's defaults are the chart's (`--gate-policy=required`, and no
//! start without its own namespace); the tests run it as a single-tenant
//! install in the test's namespace instead: `POD_NAMESPACE` is the test
//! namespace and `RELEASEPLAN_GATE_POLICY=optional`, as environment so
//! that a test's own flag wins and an older release's binary
//! (tests/upgrade_release.rs) that knows neither ignores them.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A running operator process; killed when dropped.
pub struct Operator {
    child: Option<Child>,
    /// Port of its /metrics server.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
}

/// How to start an operator: see [`Operator::launcher`].
pub struct Launcher {
    namespace: String,
    binary: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    rust_log: String,
    ready_within: Duration,
    port: Option<u16>,
    open_policy: bool,
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// Sum of every sample of a metric family in OpenMetrics text.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/healthz` of the operator whose metrics server listens on `port`: its
/// status code, or None when it does not answer within 2 s.
pub async fn healthz(port: u16) -> Option<u16> {
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    Some(r.status().as_u16())
}

impl Launcher {
    /// Adds command-line flags (after `--namespace` and `--metrics-addr`).
    pub fn args<I, S>(mut self, args: I) -> Launcher
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// Sets an environment variable of the process, after the inherited ones
    /// (so `KUBECONFIG` can point it at another identity than the tests' own).
    pub fn env(mut self, key: &str, value: &str) -> Launcher {
        self.envs.push((key.to_string(), value.to_string()));
        self
    }

    /// Turns on leader election with its Lease in `lease_namespace`; the
    /// other lease flags (`--lease-name`, `--identity`...) go through [`Launcher::args`].
    pub fn leader_election(self, lease_namespace: &str) -> Launcher {
        self.args(["--leader-election", "--lease-namespace", lease_namespace])
    }

    /// Leaves the gate policy to the binary's default (`required`, the
    /// chart's) instead of the harness's `optional`.
    pub fn policy_default(mut self) -> Launcher {
        self.open_policy = false;
        self
    }

    /// Runs `binary` instead of the one cargo built for this package.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Launcher {
        self.binary = binary.into();
        self
    }

    /// The `RUST_LOG` of the process (`info,releaseplan=debug` unless set).
    pub fn rust_log(mut self, filter: &str) -> Launcher {
        self.rust_log = filter.to_string();
        self
    }

    /// How long [`Launcher::start`] waits for /readyz (30 s unless set): an
    /// operator started while the API server is away is ready only after
    /// its return.
    pub fn ready_within(mut self, limit: Duration) -> Launcher {
        self.ready_within = limit;
        self
    }

    /// Serves metrics and probes on `port` (a free one unless set), so that
    /// a test can probe the process before [`Launcher::start`] returns.
    pub fn port(mut self, port: u16) -> Launcher {
        self.port = Some(port);
        self
    }

    /// Starts the process, logging to a file under the temp dir, and waits
    /// for its /readyz. Fails at once, with the log, when it exits instead.
    pub async fn start(self) -> Operator {
        let port = self.port.unwrap_or_else(free_port);
        let dir = std::env::temp_dir().join("releaseplan-tests");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("operator-{}-{port}.log", self.namespace));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(&self.binary);
        command
            .arg("--namespace")
            .arg(&self.namespace)
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .args(&self.args)
            .env("RUST_LOG", &self.rust_log)
            .env("POD_NAMESPACE", &self.namespace);
        if self.open_policy {
            command.env("RELEASEPLAN_GATE_POLICY", "optional");
        } else {
            command.env_remove("RELEASEPLAN_GATE_POLICY");
        }
        let child = command
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        let mut op = Operator {
            child: Some(child),
            port,
            log,
        };
        let url = format!("http://127.0.0.1:{port}/readyz");
        let deadline = std::time::Instant::now() + self.ready_within;
        loop {
            if let Some(Ok(Some(status))) = op.child.as_mut().map(std::process::Child::try_wait) {
                panic!(
                    "the operator exited ({status}) before /readyz:\n{}",
                    op.log_text()
                );
            }
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return op;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {:?} waiting for the operator's /readyz:\n{}",
                self.ready_within,
                op.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Operator {
    /// A launcher of the operator watching `namespace`, running in it
    /// (`POD_NAMESPACE`), with the open gate policy and no other flags.
    pub fn launcher(namespace: &str) -> Launcher {
        Launcher {
            namespace: namespace.to_string(),
            binary: PathBuf::from(env!("CARGO_BIN_EXE_releaseplan")),
            args: Vec::new(),
            // Config versioning where the operator watches (the chart's
            // default grants none): a test of the default sets it back.
            envs: vec![("RELEASEPLAN_CONFIG_NAMESPACES".into(), "*".into())],
            rust_log: "info,releaseplan=debug".to_string(),
            ready_within: Duration::from_secs(30),
            port: None,
            open_policy: true,
        }
    }

    /// Starts the operator watching `namespace`, with extra flags, and waits for /readyz.
    pub async fn start(namespace: &str, extra: &[&str]) -> Operator {
        Operator::launcher(namespace).args(extra).start().await
    }

    /// The exit status, once the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok()?
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The operator's metrics text.
    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        match reqwest::get(&url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Sum of a counter family in the metrics (all label sets), or of one
    /// series when `name` carries its labels (`name{operation="apply"}`).
    pub async fn counter(&self, name: &str) -> f64 {
        sum_metric(&self.metrics().await, name)
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    /// SIGKILL: the process dies mid-work.
    pub fn kill(&mut self) {
        self.signal("KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// Sends `sig` (`TERM`, `INT`...) and returns at once.
    pub fn send(&self, sig: &str) {
        self.signal(sig);
    }

    /// Waits up to `limit` for the process to exit: its status and how long
    /// it took, or `None` (the process is then killed).
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let start = std::time::Instant::now();
        let mut c = self.child.take()?;
        while start.elapsed() < limit {
            if let Ok(Some(s)) = c.try_wait() {
                return Some((s, start.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// SIGTERM, then waits (bounded) for the process to exit.
    pub async fn terminate(&mut self) -> Option<ExitStatus> {
        self.signal("TERM");
        let mut c = self.child.take()?;
        for _ in 0..100 {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = c.kill();
        c.wait().ok()
    }

    /// The log so far, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
