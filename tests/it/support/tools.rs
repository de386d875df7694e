//! The pinned tools of `make tools` (helm, kubectl) and running commands:
//! shared by the chart and monitoring tests.

use super::cluster;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A version pinned in e2e/versions.env (`KEY=version`).
pub fn pinned_version(key: &str) -> Option<String> {
    let versions = std::fs::read_to_string(cluster::repo_root().join("e2e/versions.env"))
        .expect("cannot read e2e/versions.env");
    versions
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
}

/// The cache folder of a pinned part of `make tools`: `<cache>/<part>-v<version>`
/// (`RP_CACHE`, default `~/.cache/releaseplan`), if the version is pinned.
pub fn cached(part: &str, version_key: &str) -> Option<PathBuf> {
    let version = pinned_version(version_key)?;
    let cache = std::env::var_os("RP_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/releaseplan")))?;
    Some(cache.join(format!("{part}-v{version}")))
}

/// A pinned tool of `make tools`: `<cache>/<part>-v<version>/bin/<name>`,
/// else the first `name` on PATH.
pub fn tool(name: &str, part: &str, version_key: &str) -> PathBuf {
    if let Some(pinned) = cached(part, version_key)
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
    tool("helm", "helm", "HELM_VERSION")
}

pub fn kubectl_bin() -> PathBuf {
    tool("kubectl", "k8s", "K8S_VERSION")
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
