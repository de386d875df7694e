//! The release artifacts of `make dist` (e2e/dist.sh), checked as a user
//! and a registry would see them: SHA256SUMS covers every file and a
//! signature over it verifies (a key made for the test); the image layout
//! holds the tarballs' operator binary under the expected config; and the
//! image and the chart go through a real registry on 127.0.0.1 (Debian's
//! docker-registry, pushed with skopeo and `helm push`), the chart rendered
//! and installed into the test cluster from there with the pushed digest;
//! and krew's own validator installs the plugin from the manifest.
//!
//! They need `make dist` first (slow) and the `release` packages of
//! e2e/ensure-deps.sh: `make test-release` provides both and runs them;
//! `make test` leaves this binary out (`test = false` in Cargo.toml, so
//! `cargo test --all-targets` does not build it). RP_DIST_DIR names the
//! artifacts' directory (default: dist/ of the checkout); HELM_BIN the helm
//! binary (default: the one e2e/build-control-plane.sh builds).

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod release_support;

use release_support::{
    VERSION, helm, json, krew_installs_every_platform, layout_blob, pinned, run, sha256_hex, skopeo,
};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The directory `make dist` wrote.
fn dist() -> PathBuf {
    let dir = std::env::var_os("RP_DIST_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("dist"),
        PathBuf::from,
    );
    assert!(
        dir.join("SHA256SUMS").is_file(),
        "{} holds no SHA256SUMS: run make dist (or make test-release)",
        dir.display()
    );
    dir
}

/// A blob of the OCI layout by its digest ("sha256:...").
fn blob(dist: &Path, digest: &str) -> Vec<u8> {
    layout_blob(&dist.join("oci"), digest)
}

/// The image index the layout's index.json tags VERSION: (digest, index).
fn image_index(dist: &Path) -> (String, Value) {
    let top = json(&std::fs::read(dist.join("oci/index.json")).unwrap());
    let entries = top["manifests"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        1,
        "index.json: one entry, the multi-arch index"
    );
    let desc = &entries[0];
    assert_eq!(
        desc["annotations"]["org.opencontainers.image.ref.name"],
        VERSION
    );
    assert_eq!(desc["mediaType"], "application/vnd.oci.image.index.v1+json");
    let digest = desc["digest"].as_str().unwrap().to_string();
    let index = json(&blob(dist, &digest));
    (digest, index)
}

/// FILE of a .tar.gz (through tar, as a user would unpack it).
fn untar(archive: &Path, file: &str) -> Vec<u8> {
    run(Command::new("tar").arg("-xzOf").arg(archive).arg(file)).stdout
}

#[test]
fn sha256sums_cover_every_artifact_and_a_signature_over_them_verifies() {
    let dist = dist();
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let mut listed: Vec<String> = Vec::new();
    for line in sums.lines() {
        let (sum, name) = line.split_once("  ").expect("sha256sum lines: SUM  NAME");
        assert_eq!(
            sha256_hex(&std::fs::read(dist.join(name)).unwrap()),
            sum,
            "{name}"
        );
        listed.push(name.to_string());
    }
    for arch in ["amd64", "arm64"] {
        for bin in ["releaseplan", "kubectl-releaseplan"] {
            let name = format!("{bin}_{VERSION}_linux_{arch}.tar.gz");
            assert!(listed.contains(&name), "SHA256SUMS lacks {name}");
        }
    }
    for name in [
        "releaseplan.yaml",
        "releaseplan.cdx.json",
        "releaseplan.provenance.json",
        "oci/index.json",
    ] {
        assert!(listed.iter().any(|l| l == name), "SHA256SUMS lacks {name}");
    }
    assert!(
        listed
            .iter()
            .any(|l| l.starts_with("releaseplan-") && l.ends_with(".tgz"))
    );

    // The krew manifest names each plugin tarball with its sum.
    let krew = std::fs::read_to_string(dist.join("releaseplan.yaml")).unwrap();
    for arch in ["amd64", "arm64"] {
        let name = format!("kubectl-releaseplan_{VERSION}_linux_{arch}.tar.gz");
        let sum = sha256_hex(&std::fs::read(dist.join(&name)).unwrap());
        assert!(
            krew.contains(&format!("/{name}\n      sha256: {sum}\n")),
            "krew manifest: {name}"
        );
    }

    // Signed with a key made here, as docs/releasing.md does with the
    // release key: ssh-keygen -Y sign -n file, verified against an
    // allowed_signers line.
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("release-key");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "releaseplan-test"])
        .arg("-f")
        .arg(&key));
    let signed = tmp.path().join("SHA256SUMS");
    std::fs::copy(dist.join("SHA256SUMS"), &signed).unwrap();
    run(Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "file", "-f"])
        .arg(&key)
        .arg(&signed));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let allowed = tmp.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!("releaseplan-release namespaces=\"file\" {public}"),
    )
    .unwrap();
    let verify = |file: &Path, namespace: &str| {
        let mut child = Command::new("ssh-keygen")
            .args([
                "-Y",
                "verify",
                "-I",
                "releaseplan-release",
                "-n",
                namespace,
                "-f",
            ])
            .arg(&allowed)
            .arg("-s")
            .arg(tmp.path().join("SHA256SUMS.sig"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&std::fs::read(file).unwrap())
            .unwrap();
        child.wait().unwrap().success()
    };
    assert!(verify(&signed, "file"), "the signature does not verify");
    assert!(!verify(&signed, "git"), "verified in another namespace");
    // One line of it changed: a file's sum dropped.
    let tampered = tmp.path().join("tampered");
    let first = sums.lines().next().unwrap();
    std::fs::write(&tampered, sums.replacen(first, "", 1)).unwrap();
    assert!(!verify(&tampered, "file"), "a changed SHA256SUMS verified");
}

#[test]
fn each_image_runs_the_tarballs_static_operator_as_65532_from_scratch() {
    let dist = dist();
    let (_, index) = image_index(&dist);
    let mut arches = Vec::new();
    for desc in index["manifests"].as_array().unwrap() {
        let arch = desc["platform"]["architecture"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(desc["platform"]["os"], "linux");
        let manifest = json(&blob(&dist, desc["digest"].as_str().unwrap()));
        let config = json(&blob(&dist, manifest["config"]["digest"].as_str().unwrap()));
        assert_eq!(config["architecture"], arch.as_str());
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/releaseplan"])
        );
        let labels = &config["config"]["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], VERSION);
        assert_eq!(labels["org.opencontainers.image.title"], "releaseplan");
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        for key in ["source", "revision", "created"] {
            let value = labels[format!("org.opencontainers.image.{key}")]
                .as_str()
                .unwrap_or("");
            assert!(!value.is_empty(), "label {key} is empty");
        }
        // From scratch: one layer, the CA bundle gates verify HTTPS with,
        // and /releaseplan, the tarball's binary.
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{arch}: one layer");
        let layer = dist
            .join("oci/blobs/sha256")
            .join(&layers[0]["digest"].as_str().unwrap()[7..]);
        let listing = run(Command::new("tar").arg("-tzvf").arg(&layer)).stdout;
        let listing = String::from_utf8(listing).unwrap();
        let names: Vec<&str> = listing
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        assert_eq!(
            names,
            [
                "etc/",
                "etc/ssl/",
                "etc/ssl/certs/",
                "etc/ssl/certs/ca-certificates.crt",
                "releaseplan"
            ],
            "{arch} layer: {listing}"
        );
        let binary = listing.lines().last().unwrap_or_default();
        assert!(
            binary.starts_with("-rwxr-xr-x 0/0"),
            "{arch} layer: {listing}"
        );
        let ca = untar(&layer, "etc/ssl/certs/ca-certificates.crt");
        assert!(ca.len() > 1000, "{arch}: the CA bundle is empty");
        // The SBOM lists everything in the image: the CA bundle too.
        let sbom = json(&std::fs::read(dist.join("releaseplan.cdx.json")).unwrap());
        assert!(
            sbom["components"].as_array().unwrap().iter().any(|c| {
                c["name"] == "ca-certificates"
                    && c["hashes"][0]["content"] == sha256_hex(&ca).as_str()
            }),
            "{arch}: the SBOM does not list the image's CA bundle"
        );
        let tarball = dist.join(format!("releaseplan_{VERSION}_linux_{arch}.tar.gz"));
        assert!(
            untar(&layer, "releaseplan") == untar(&tarball, "releaseplan"),
            "{arch}: the image's /releaseplan is not the tarball's"
        );
        arches.push(arch);
    }
    arches.sort();
    assert_eq!(arches, ["amd64", "arm64"]);
}

#[test]
fn image_and_chart_pushed_to_a_loopback_registry_render_with_the_pushed_digest() {
    let dist = dist();
    let (index_digest, index) = image_index(&dist);
    let tmp = tempfile::tempdir().unwrap();
    let registry = release_support::Registry::start(tmp.path());
    let host = registry.addr.clone();

    // The image: every arch, digests kept (skopeo fails rather than
    // rewrite a manifest).
    let skopeo = || skopeo(tmp.path());
    let digestfile = tmp.path().join("digest");
    run(skopeo()
        .args([
            "copy",
            "--all",
            "--preserve-digests",
            "--dest-tls-verify=false",
            "--digestfile",
        ])
        .arg(&digestfile)
        .arg(format!("oci:{}:{VERSION}", dist.join("oci").display()))
        .arg(format!("docker://{host}/releaseplan:{VERSION}")));
    let pushed = std::fs::read_to_string(&digestfile)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        pushed, index_digest,
        "the registry's digest is not the layout's index"
    );
    release_support::assert_tag_serves(tmp.path(), &host, &index);
    for arch in ["amd64", "arm64"] {
        let seen = json(
            &run(skopeo()
                .args([
                    "inspect",
                    "--tls-verify=false",
                    "--override-os",
                    "linux",
                    "--override-arch",
                    arch,
                ])
                .arg(format!("docker://{host}/releaseplan@{pushed}")))
            .stdout,
        );
        assert_eq!(seen["Architecture"], arch);
        assert_eq!(seen["Labels"]["org.opencontainers.image.version"], VERSION);
    }

    // The chart, as an OCI artifact, with helm's state in the temp dir.
    let helm = || helm(tmp.path());
    let (chart, chart_version) = release_support::chart_of(&dist);
    run(helm()
        .arg("push")
        .arg(&chart)
        .arg(format!("oci://{host}/charts"))
        .arg("--plain-http"));
    let rendered = run(helm()
        .args(["template", "rp"])
        .arg(format!("oci://{host}/charts/releaseplan"))
        .args([
            "--version",
            &chart_version,
            "--plain-http",
            "--namespace",
            "releaseplan-system",
        ])
        // helm template assumes Kubernetes 1.20, under the chart's kubeVersion.
        .arg(format!("--kube-version={}", pinned("K8S_VERSION")))
        .arg(format!("--set=image.repository={host}/releaseplan"))
        .arg(format!("--set=image.digest={pushed}")))
    .stdout;
    let rendered = String::from_utf8(rendered).unwrap();
    let mut images = Vec::new();
    for doc in rendered.split("\n---") {
        let Ok(value) = yaml_serde::from_str::<Value>(doc) else {
            continue;
        };
        if value["kind"] != "Deployment" {
            continue;
        }
        for c in value["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            images.push(c["image"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        images,
        [format!("{host}/releaseplan@{pushed}")],
        "the Deployment's images are not exactly the pushed digest"
    );

    // Installed from the registry into the test cluster (make test-release
    // starts one): the Deployment the API server stores names the digest.
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "no test cluster (KUBECONFIG unset): run make test-release"
    );
    let ns = format!("releaseplan-release-{}", std::process::id());
    run(&mut release_support::helm_install(
        tmp.path(),
        "rp",
        &host,
        &chart_version,
        &ns,
        &pushed,
    ));
    let stored = json(
        &run(Command::new("kubectl")
            .args(["get", "deployments", "-o", "json", "-n"])
            .arg(&ns))
        .stdout,
    );
    let installed: Vec<&str> = stored["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
        })
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        installed,
        [format!("{host}/releaseplan@{pushed}")],
        "the installed Deployment's images are not exactly the pushed digest"
    );
    run(helm().args(["uninstall", "rp", "--namespace"]).arg(&ns));
    drop(registry);
}

/// krew's own validator installs the plugin from the manifest on each
/// platform (release_support::krew_installs_every_platform): one per plugin
/// tarball, Windows included.
#[test]
fn krews_validator_installs_the_plugin_from_the_manifest_on_each_platform() {
    let dist = dist();
    let tarballs = plugin_tarballs(&dist);
    assert!(
        tarballs.iter().any(|t| t.contains("_windows_amd64")),
        "no Windows plugin in {tarballs:?}"
    );
    assert_eq!(krew_installs_every_platform(&dist), tarballs.len());
}

/// The plugin tarballs of dist/, by name.
fn plugin_tarballs(dist: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dist)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.starts_with("kubectl-releaseplan_") && n.ends_with(".tar.gz"))
        .collect();
    names.sort();
    names
}

/// Every shipped binary carries its dependency list as cargo-auditable
/// writes it (section `.dep-v0`: zlib-compressed JSON), which `cargo audit
/// bin`, trivy, grype and syft read: the root package and the crates of
/// Cargo.lock at their locked versions.
#[test]
fn every_binary_carries_its_dependency_list_for_scanners() {
    let dist = dist();
    let lock = std::fs::read_to_string(release_support::root().join("Cargo.lock")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut names = plugin_tarballs(&dist);
    names.extend(["amd64", "arm64"].map(|a| format!("releaseplan_{VERSION}_linux_{a}.tar.gz")));
    for name in names {
        let bin = if name.contains("_windows_") {
            "kubectl-releaseplan.exe"
        } else if name.starts_with("kubectl-") {
            "kubectl-releaseplan"
        } else {
            "releaseplan"
        };
        let exe = tmp.path().join(format!("{name}.bin"));
        std::fs::write(&exe, untar(&dist.join(&name), bin)).unwrap();
        let section = tmp.path().join(format!("{name}.dep-v0"));
        // The host's objcopy knows its own arch and PE; an arm64 ELF is read
        // as a generic little-endian ELF.
        let elf = std::fs::read(&exe).unwrap().starts_with(b"\x7fELF");
        let mut objcopy = Command::new("objcopy");
        if elf {
            objcopy.args(["-I", "elf64-little"]);
        }
        run(objcopy
            .arg("--dump-section")
            .arg(format!(".dep-v0={}", section.display()))
            .arg(&exe)
            .arg(tmp.path().join("discard")));
        let inflated = run(Command::new("python3")
            .args([
                "-c",
                "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(open(sys.argv[1], 'rb').read()))",
            ])
            .arg(&section))
        .stdout;
        let deps = json(&inflated);
        let packages = deps["packages"].as_array().expect("packages");
        let root = packages
            .iter()
            .find(|p| p["root"] == true)
            .unwrap_or_else(|| panic!("{name}: no root package"));
        assert_eq!(root["name"], "releaseplan", "{name}");
        assert_eq!(root["version"], VERSION, "{name}");
        let kube = packages
            .iter()
            .find(|p| p["name"] == "kube-client")
            .unwrap_or_else(|| panic!("{name}: kube-client is not listed"));
        let pinned = format!(
            "name = \"kube-client\"\nversion = \"{}\"",
            kube["version"].as_str().unwrap()
        );
        assert!(
            lock.contains(&pinned),
            "{name}: kube-client is not Cargo.lock's"
        );
        assert!(packages.len() > 100, "{name}: {} packages", packages.len());
    }
}
