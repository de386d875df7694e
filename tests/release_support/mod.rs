//! What tests/release.rs (the artifacts of `make dist`) and
//! tests/packaging.rs (the test build packaged the same way, in `make test`)
//! share: running commands, a registry on 127.0.0.1, the pinned tools, and
//! krew's validator.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The checkout.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs a command; panics with its output when it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command that must fail; its stdout and stderr, together.
pub fn run_fails(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{cmd:?} succeeded:\n{said}");
    said
}

pub fn json(data: &[u8]) -> Value {
    serde_json::from_slice(data).unwrap()
}

/// A blob of an OCI layout by its digest ("sha256:..."), checked.
pub fn layout_blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let data = std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap();
    assert_eq!(
        sha256_hex(&data),
        hex,
        "blob {digest} does not match its digest"
    );
    data
}

/// A docker-registry on 127.0.0.1, killed when dropped.
pub struct Registry {
    child: Child,
    pub addr: String,
}

impl Registry {
    pub fn start(dir: &Path) -> Registry {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {addr}\n",
                dir.join("storage").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .expect("docker-registry (Debian package docker-registry: e2e/ensure-deps.sh test)");
        let registry = Registry { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !registry.answers() {
            assert!(
                Instant::now() < deadline,
                "docker-registry on {} did not answer in 30 s:\n{}",
                registry.addr,
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// GET /v2/ answers 200 (Go answers an HTTP/1.0 request in HTTP/1.0).
    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return false;
        };
        let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr);
        let mut answer = String::new();
        s.write_all(request.as_bytes()).is_ok()
            && s.read_to_string(&mut answer).is_ok()
            && answer.split_whitespace().nth(1) == Some("200")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pinned version of e2e/versions.env (HELM_VERSION, K8S_VERSION): a
/// parameter's (`K8S_VERSION=${K8S_VERSION:-1.36.3}`) is the environment's
/// when set, as for the scripts.
pub fn pinned(name: &str) -> String {
    let versions = std::fs::read_to_string(root().join("e2e/versions.env")).unwrap();
    let prefix = format!("{name}=");
    let value = versions
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{name} in e2e/versions.env"));
    match value
        .strip_prefix(&format!("${{{name}:-"))
        .and_then(|v| v.strip_suffix('}'))
    {
        Some(default) => std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string()),
        None => value.to_string(),
    }
}

/// The cache folder of the scripts (RP_CACHE, default ~/.cache/releaseplan).
pub fn cache() -> PathBuf {
    std::env::var_os("RP_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/releaseplan"),
        PathBuf::from,
    )
}

/// The helm binary e2e/build-control-plane.sh builds (or HELM_BIN).
pub fn helm_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HELM_BIN") {
        return bin.into();
    }
    cache().join(format!("helm-v{}/bin/helm", pinned("HELM_VERSION")))
}

/// The cosign binary `e2e/build-control-plane.sh cosign` builds.
pub fn cosign_bin() -> PathBuf {
    cache().join(format!("cosign-v{}/bin/cosign", pinned("COSIGN_VERSION")))
}

/// helm with its state (config, cache, registry logins) in DIR.
pub fn helm(dir: &Path) -> Command {
    let mut c = Command::new(helm_bin());
    for (var, sub) in [
        ("HELM_CONFIG_HOME", "helm/config"),
        ("HELM_CACHE_HOME", "helm/cache"),
        ("HELM_DATA_HOME", "helm/data"),
    ] {
        c.env(var, dir.join(sub));
    }
    c
}

/// The tag VERSION of HOST's releaseplan repository serves exactly INDEX
/// (skopeo with its state in DIR).
pub fn assert_tag_serves(dir: &Path, host: &str, index: &Value) {
    let raw = run(skopeo(dir)
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{host}/releaseplan:{VERSION}")))
    .stdout;
    assert_eq!(
        &json(&raw),
        index,
        "the tag does not serve the layout's index"
    );
}

/// The chart package of a release layout and its version
/// (`releaseplan-<version>.tgz`).
pub fn chart_of(dist: &Path) -> (PathBuf, String) {
    let chart = std::fs::read_dir(dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .expect("a chart .tgz in the layout");
    let version = chart
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.strip_prefix("releaseplan-"))
        .expect("releaseplan-<version>.tgz")
        .to_string();
    (chart, version)
}

/// `helm install RELEASE` (state in DIR) of the chart pushed to the
/// plain-HTTP registry HOST, at VERSION, the image named by DIGEST, into
/// the namespace NS (created); more `--set`s can be added.
pub fn helm_install(
    dir: &Path,
    release: &str,
    host: &str,
    version: &str,
    ns: &str,
    digest: &str,
) -> Command {
    let mut c = helm(dir);
    c.args(["install", release])
        .arg(format!("oci://{host}/charts/releaseplan"))
        .args([
            "--version",
            version,
            "--plain-http",
            "--namespace",
            ns,
            "--create-namespace",
        ])
        .arg(format!("--set=image.repository={host}/releaseplan"))
        .arg(format!("--set=image.digest={digest}"));
    c
}

/// skopeo with an accept-anything policy file in DIR (the push needs none).
pub fn skopeo(dir: &Path) -> Command {
    let policy = dir.join("skopeo-policy.json");
    if !policy.exists() {
        std::fs::write(
            &policy,
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
        )
        .unwrap();
    }
    let mut c = Command::new("skopeo");
    c.arg("--policy").arg(&policy).env("HOME", dir);
    c
}

/// krew's own validator (built by `e2e/build-control-plane.sh krew`)
/// installs the plugin from DIST's manifest on each of its platforms (with
/// krew itself), from DIST served on 127.0.0.1 in place of the release's
/// home; it also wants a LICENSE among the installed files. Returns the
/// number of platforms installed.
pub fn krew_installs_every_platform(dist: &Path) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    drop(server);
    let mut http = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
        .arg(dist)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "http.server on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let manifest = std::fs::read_to_string(dist.join("releaseplan.yaml")).unwrap();
    let mut uris = 0;
    let local: String = manifest
        .lines()
        .map(|l| match l.split_once("uri: ") {
            Some((indent, uri)) => {
                uris += 1;
                assert!(
                    !uri.contains('\\') && uri.contains(&format!("{VERSION}/")),
                    "a krew uri that is not a URL of this version: {uri}"
                );
                let file = uri.rsplit('/').next().unwrap();
                format!("{indent}uri: http://127.0.0.1:{port}/{file}\n")
            }
            None => format!("{l}\n"),
        })
        .collect();
    // The validator wants the file named after the plugin.
    let path = tmp.path().join("releaseplan.yaml");
    std::fs::write(&path, local).unwrap();
    // The validator installs through `kubectl krew`: kubectl (the test
    // cluster's PATH) and krew's own plugin binary beside the validator.
    let bin = cache().join(format!("krew-v{}/bin", pinned("KREW_VERSION")));
    let path_var = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = Command::new(bin.join("validate-krew-manifest"))
        .arg("-manifest")
        .arg(&path)
        .env("HOME", tmp.path())
        .env("PATH", path_var)
        .output()
        .expect("validate-krew-manifest (e2e/build-control-plane.sh krew)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = http.kill();
    let _ = http.wait();
    assert!(
        out.status.success(),
        "validate-krew-manifest failed:\n{said}"
    );
    // Each platform installed (downloaded, its sum checked, unpacked, the
    // binary and a LICENSE found), in the manifest's order.
    for i in 0..uris {
        assert!(
            said.contains(&format!("installed  spec.platforms[{i}]")),
            "the validator did not install spec.platforms[{i}]:\n{said}"
        );
    }
    assert!(
        said.contains(&format!("all {uris} spec.platforms installed fine")),
        "{said}"
    );
    uris
}
