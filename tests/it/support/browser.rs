//! The dashboard in a real browser: `kubectl-releaseplan dashboard` as a
//! process, and headless Chromium driven through chromedriver (Debian's
//! `chromium` and `chromium-driver`, installed by `e2e/ensure-deps.sh test`).

use super::operator::free_port;
use super::wait_until;
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `kubectl-releaseplan dashboard`; killed on drop.
pub struct Dashboard {
    child: Child,
    /// The URL it printed first, with its per-run token, e.g.
    /// `http://127.0.0.1:40123/?token=9f…`.
    pub url: String,
}

impl Dashboard {
    /// Starts the plugin's dashboard with `args` (`-n NS`, `-A`, `--as U`...)
    /// on a free port and reads its URL from the first line of stdout.
    pub async fn start(args: &[&str]) -> Dashboard {
        let args: Vec<String> = args.iter().map(ToString::to_string).collect();
        tokio::task::spawn_blocking(move || {
            let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
                .arg("dashboard")
                .args(&args)
                .args(["--port", "0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("cannot run kubectl-releaseplan dashboard");
            let mut line = String::new();
            BufReader::new(child.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("dashboard stdout");
            let url = line.trim().to_string();
            assert!(
                url.starts_with("http://127.0.0.1:"),
                "first line is not the URL: {line:?}"
            );
            Dashboard { child, url }
        })
        .await
        .expect("dashboard thread")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        url::Url::parse(&self.url)
            .ok()
            .and_then(|u| u.port())
            .expect("port in the URL")
    }

    /// Its per-run token, from the URL.
    pub fn token(&self) -> String {
        url::Url::parse(&self.url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "token")
                    .map(|(_, v)| v.into_owned())
            })
            .expect("a token in the URL")
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Headless Chromium through its own chromedriver; both stopped on drop
/// (call [`Browser::close`] to end the session cleanly first).
pub struct Browser {
    driver: Child,
    /// The WebDriver session.
    pub client: Client,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session
    /// (`--no-sandbox`: the tests run as root), 1400×1000.
    pub async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(std::env::var("CHROMEDRIVER").unwrap_or("chromedriver".into()))
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "cannot run chromedriver (Debian package chromium-driver: e2e/ensure-deps.sh test)",
            );
        let mut options = json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1400,1000", "--no-first-run", "--disable-extensions"]});
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let mut caps = Capabilities::new();
        caps.insert("goog:chromeOptions".into(), options);
        let url = format!("http://127.0.0.1:{port}");
        let client = wait_until(
            Duration::from_secs(60),
            "chromedriver to open a session",
            || {
                let caps = caps.clone();
                let url = url.clone();
                async move {
                    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                        .capabilities(caps)
                        .connect(&url)
                        .await
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        Browser { driver, client }
    }

    /// Sends a Chrome DevTools Protocol command (`Performance.getMetrics`...)
    /// through chromedriver's `goog/cdp/execute`; its result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.client
            .issue_cmd(Driver::Cdp(json!({"cmd": cmd, "params": params})))
            .await
            .unwrap_or_else(|e| panic!("CDP {cmd}: {e}"))
    }

    /// The ARIA role the browser computes for the first element matching
    /// `css` (WebDriver's Get Computed Role): what a screen reader is told.
    pub async fn role(&self, css: &str) -> String {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        let id = e.element_id().to_string();
        self.client
            .issue_cmd(Driver::Role(id))
            .await
            .unwrap_or_else(|e| panic!("computed role of {css}: {e}"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .expect("execute script")
    }

    /// The text of the first element matching `css`, `None` when there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .await
        .as_str()
        .map(ToString::to_string)
    }

    /// Waits until the text of `css` contains `needle`; returns the text.
    pub async fn wait_text(&self, timeout: Duration, css: &str, needle: &str) -> String {
        wait_until(timeout, &format!("{css} to show {needle:?}"), || async {
            self.text(css).await.filter(|t| t.contains(needle))
        })
        .await
    }

    /// Clicks the element matching `css` (waiting for it to exist). The
    /// dashboard re-renders its page at each refresh, so an element found
    /// can be replaced before the click lands (a stale reference): then the
    /// new one is found and clicked, as a user's click would reach it.
    pub async fn click(&self, css: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let found = self
                .client
                .wait()
                .at_most(Duration::from_secs(60))
                .for_element(Locator::Css(css))
                .await
                .expect("element to click");
            match found.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                        && std::time::Instant::now() < deadline => {}
                Err(e) => panic!("click {css}: {e:?}"),
            }
        }
    }

    /// Saves a screenshot as `<target>/dashboard-screenshots/<name>.png`,
    /// prints and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        println!("screenshot: {}", path.display());
        path
    }

    /// Ends the session (closes Chromium), then chromedriver on drop.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Commands fantoccini has no method for.
#[derive(Debug)]
enum Driver {
    /// chromedriver's `POST goog/cdp/execute` with `{cmd, params}`.
    Cdp(Value),
    /// `GET element/{id}/computedrole`.
    Role(String),
}

impl fantoccini::wd::WebDriverCompatibleCommand for Driver {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        let session = base.join(&format!("session/{}/", session.unwrap_or_default()))?;
        match self {
            Driver::Cdp(_) => session.join("goog/cdp/execute"),
            Driver::Role(id) => session.join(&format!("element/{id}/computedrole")),
        }
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        match self {
            Driver::Cdp(body) => (http::Method::POST, Some(body.to_string())),
            Driver::Role(_) => (http::Method::GET, None),
        }
    }
}

/// `$CARGO_TARGET_DIR/dashboard-screenshots` (the target directory of the
/// binaries under test).
pub fn screenshot_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_kubectl-releaseplan"));
    // <target>/<profile>/kubectl-releaseplan
    bin.parent()
        .and_then(std::path::Path::parent)
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("dashboard-screenshots")
}
