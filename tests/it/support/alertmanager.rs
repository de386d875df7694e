//! A real Alertmanager (Debian's `prometheus-alertmanager`, or
//! `ALERTMANAGER_BIN`) on 127.0.0.1: a free port, gossip off, a temporary
//! storage path and a minimal config; killed when dropped, its log printed
//! when the test panicked.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::servers::http_client;

/// A config that accepts alerts and notifies no one: the test reads them
/// back from the API.
const CONFIG: &str = "route:\n  receiver: none\nreceivers:\n  - name: none\n";

/// The bound of Alertmanager's start-up (it answers in well under a second
/// on an idle machine).
const START: Duration = Duration::from_secs(60);

/// A running Alertmanager.
pub struct Alertmanager {
    child: Child,
    /// Its address.
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

fn binary() -> PathBuf {
    std::env::var_os("ALERTMANAGER_BIN")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("prometheus-alertmanager"))
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
}

impl Alertmanager {
    /// Starts one and waits until it is ready (`/-/ready`). A port taken
    /// between its choice and the start (the process exits) is tried again
    /// with another.
    pub async fn start() -> Alertmanager {
        let mut last = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let config = dir.path().join("alertmanager.yml");
            std::fs::write(&config, CONFIG).expect("write the config");
            let log = std::fs::File::create(dir.path().join("log")).expect("create the log");
            let addr = free_port();
            let child = Command::new(binary())
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--cluster.listen-address=")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run {} ({e}): e2e/ensure-deps.sh test installs prometheus-alertmanager",
                        binary().display()
                    )
                });
            let mut am = Alertmanager { child, addr, dir };
            match am.ready().await {
                Ok(()) => return am,
                Err(e) => last = format!("{e}\n{}", am.log()),
            }
        }
        panic!("Alertmanager did not start: {last}");
    }

    /// Waits for `/-/ready`; an error when the process exited or the bound passed.
    async fn ready(&mut self) -> Result<(), String> {
        let url = format!("http://{}/-/ready", self.addr);
        let deadline = tokio::time::Instant::now() + START;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited ({status})"));
            }
            if let Ok(r) = http_client().get(&url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("not ready within {}s", START.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its base URL, as a receiver's Secret holds it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The active alerts (`GET /api/v2/alerts`: resolved ones are not listed).
    pub async fn alerts(&self) -> Result<Vec<Value>, String> {
        let r = http_client()
            .get(format!("{}/api/v2/alerts", self.url()))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("HTTP {}", r.status()));
        }
        r.json::<Vec<Value>>().await.map_err(|e| e.to_string())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("Alertmanager's log:\n{}", self.log());
        }
    }
}
