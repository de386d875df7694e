//! The pinned tools of `make tools` (helm, kubectl) and running commands:
//! shared by the chart and monitoring tests.

use super::cluster;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A version pinned in e2e/versions.env: `KEY=version`, or for a parameter
/// `KEY=${KEY:-version}`, whose value is then the environment's KEY when set
/// (as the scripts that source the file read it).
pub fn pinned_version(key: &str) -> Option<String> {
    let (value, parameter) = pinned_default(key)?;
    Some(parameter.then(|| env_value(key)).flatten().unwrap_or(value))
}

/// The version e2e/versions.env gives KEY, whatever the environment says,
/// and whether KEY is a parameter (`KEY=${KEY:-version}`).
pub fn pinned_default(key: &str) -> Option<(String, bool)> {
    let versions = std::fs::read_to_string(cluster::repo_root().join("e2e/versions.env"))
        .expect("cannot read e2e/versions.env");
    let value = versions
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}=")))?
        .trim();
    Some(
        match value
            .strip_prefix(&format!("${{{key}:-"))
            .and_then(|v| v.strip_suffix('}'))
        {
            Some(default) => (default.to_string(), true),
            None => (value.to_string(), false),
        },
    )
}

fn env_value(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// The Kubernetes version the tests run on: the one the run asked for, as
/// e2e/with-cluster.sh and the cluster's env file export it
/// (`RP_K8S_VERSION`), else `K8S_VERSION` as the scripts read it.
/// tests/it/cluster.rs checks that the API server is of this version.
pub fn k8s_version() -> String {
    env_value("RP_K8S_VERSION")
        .or_else(|| pinned_version("K8S_VERSION"))
        .expect("K8S_VERSION in e2e/versions.env")
}

/// The cache folder of `make tools`' builds (`RP_CACHE`, default `~/.cache/releaseplan`).
fn cache_root() -> Option<PathBuf> {
    std::env::var_os("RP_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/releaseplan")))
}

/// The cache folder of a pinned part of `make tools`: `<cache>/<part>-v<version>`
/// (`RP_CACHE`, default `~/.cache/releaseplan`), if the version is pinned.
pub fn cached(part: &str, version_key: &str) -> Option<PathBuf> {
    let version = pinned_version(version_key)?;
    Some(cache_root()?.join(format!("{part}-v{version}")))
}

/// A tool of `make tools` in the cache folder `dir`: `<dir>/bin/<name>`,
/// else the first `name` on PATH.
fn tool(name: &str, dir: Option<PathBuf>) -> PathBuf {
    if let Some(pinned) = dir
        .map(|d| d.join("bin").join(name))
        .filter(|p| p.is_file())
    {
        return pinned;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{name} not found: run `make tools` (it builds the pinned {name})")
        })
}

pub fn helm_bin() -> PathBuf {
    tool("helm", cached("helm", "HELM_VERSION"))
}

/// The kubectl of the cluster's Kubernetes version.
pub fn kubectl_bin() -> PathBuf {
    tool(
        "kubectl",
        cache_root().map(|c| c.join(format!("k8s-v{}", k8s_version()))),
    )
}

/// Runs a command, feeding `stdin`; returns stdout or panics with stderr.
pub fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = output(program, args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}\n{stdout}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a command, feeding `stdin`; its exit status and output.
pub fn output(program: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        let input = input.to_string();
        // A writer thread: the child may fill stdout before it reads all input.
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{} did not finish: {e}", program.display()))
}

/// What the Adaptive Cards SDK (e2e/teams/check-card.js, under Node) says
/// of a Teams message: `Ok(report)` when it finds nothing wrong, else
/// `Err(report)` naming each problem.
pub fn check_teams_card(body: &serde_json::Value) -> Result<String, String> {
    let sdk = cached("adaptivecards", "ADAPTIVECARDS_VERSION")
        .map(|d| d.join("node_modules/adaptivecards/dist/adaptivecards.js"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the Adaptive Cards SDK is not there: run e2e/build-control-plane.sh adaptivecards"
            )
        });
    let script = cluster::repo_root().join("e2e/teams/check-card.js");
    let out = output(
        Path::new("node"),
        &[script.to_str().unwrap(), sdk.to_str().unwrap()],
        Some(&body.to_string()),
    );
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(report)
    } else {
        Err(report)
    }
}
