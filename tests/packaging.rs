//! The build `make test` made, packaged and shipped the way a release is,
//! in CI: e2e/package.sh (the packaging half of `make dist`) lays out the
//! test build's binaries as the release does (tarballs, OCI image, chart,
//! krew manifest, SBOM, provenance, SHA256SUMS); e2e/publish.sh pushes the
//! image and the chart to a registry on 127.0.0.1 and signs and attests
//! them with cosign and a key made here; cosign verifies them as an
//! admission policy would, and refuses an image changed after signing;
//! helm installs the chart from the registry by the image's digest; the
//! operator pulled back from the registry runs with the installed
//! Deployment's arguments, as the chart's ServiceAccount, until it holds
//! the Lease and releases a plan; and krew's validator installs the plugin
//! from the manifest. The cross-compiled `make dist` stays a release-time
//! target (tests/release.rs): docs/releasing.md says which check runs where.
//!
//! Needs the test cluster (KUBECONFIG), cosign and krew (`e2e/build-control-plane.sh
//! packaging`), docker-registry, skopeo and file (`e2e/ensure-deps.sh test`):
//! `make test` provides all of them.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod release_support;

use release_support::{
    Registry, VERSION, cosign_bin, helm, json, krew_installs_every_platform, layout_blob, root,
    run, run_fails, sha256_hex, skopeo,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The Rust target of the test build (the machine's).
fn host_triple() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// The release layout of the test build, made once per test binary (the
/// packaging gzips two debug binaries: most of a minute), in a folder of
/// cargo's target dir emptied first (a temp dir in a static is never removed).
fn packaged() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let operator = Path::new(env!("CARGO_BIN_EXE_releaseplan"));
        let plugin = Path::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"));
        assert_eq!(operator.parent(), plugin.parent());
        let dist = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packaging-dist");
        let _ = std::fs::remove_dir_all(&dist);
        run(scripted(&root().join("e2e/package.sh"))
            .arg(&dist)
            .arg(format!(
                "{}={}",
                host_triple(),
                operator.parent().unwrap().display()
            )));
        dist
    })
}

/// A script of e2e/ run by the test: none of the release's own settings
/// from the environment (a signing key, a public transparency log, another
/// CA bundle or home), cargo offline, and a proxy on a closed loopback port
/// for anything that would leave the machine (loopback is exempt), so a tool
/// that reaches out fails loudly instead of sending traffic.
fn scripted(script: &Path) -> Command {
    let mut c = Command::new(script);
    for var in [
        "RP_SIGNING_KEY",
        "RP_COSIGN_TLOG",
        "CA_BUNDLE",
        "RP_DIST_URL",
        "RP_SOURCE_URL",
        "RP_BUILDER_ID",
        "RP_ICON_URL",
        "COSIGN_REPOSITORY",
        "SDKROOT",
    ] {
        c.env_remove(var);
    }
    no_egress(&mut c);
    c.env("CARGO_NET_OFFLINE", "true");
    c
}

/// Points every proxy variable at a closed loopback port, loopback exempt.
fn no_egress(c: &mut Command) {
    for var in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        c.env(var, "http://127.0.0.1:9");
    }
    for var in ["NO_PROXY", "no_proxy"] {
        c.env(var, "127.0.0.1,localhost");
    }
}

/// The tagged image index of a layout: (digest, index).
fn image_index(dist: &Path) -> (String, Value) {
    let top = json(&std::fs::read(dist.join("oci/index.json")).unwrap());
    let desc = &top["manifests"][0];
    assert_eq!(
        desc["annotations"]["org.opencontainers.image.ref.name"],
        VERSION
    );
    let digest = desc["digest"].as_str().unwrap().to_string();
    let index = json(&layout_blob(&dist.join("oci"), &digest));
    (digest, index)
}

/// cosign, verifying offline: the key is the only trust (an empty trusted
/// root, so cosign asks no TUF mirror on the network), no transparency log
/// (the test's signatures are not in the public one).
fn cosign_verify(dir: &Path, what: &str, key: &Path, reference: &str) -> Command {
    let root_file = dir.join("trusted-root.json");
    std::fs::write(
        &root_file,
        r#"{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#,
    )
    .unwrap();
    let mut c = Command::new(cosign_bin());
    no_egress(&mut c);
    c.arg(what)
        .arg("--key")
        .arg(key)
        .arg("--trusted-root")
        .arg(&root_file)
        .args([
            "--insecure-ignore-tlog",
            "--allow-http-registry",
            "--allow-insecure-registry",
            "--output",
            "json",
        ])
        .arg(reference)
        .env("HOME", dir);
    c
}

/// The in-toto statements of `cosign verify-attestation`'s JSON lines.
fn statements(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let envelope: Value = serde_json::from_str(l).unwrap();
            let payload = envelope["payload"].as_str().unwrap();
            json(&base64_decode(payload))
        })
        .collect()
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// Runs CMD with BYTES on its stdin; panics with its output when it fails.
fn run_with_stdin(cmd: &mut Command, bytes: &[u8]) {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kubectl(args: &[&str]) -> Vec<u8> {
    run(Command::new("kubectl").args(args)).stdout
}

/// Polls F every 200 ms until it gives Some, for at most SECS seconds.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The operator process, killed when dropped.
struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `$(VAR)` of a container's arguments, expanded from its environment as
/// the kubelet does.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    env.iter().fold(arg.to_string(), |a, (k, v)| {
        a.replace(&format!("$({k})"), v)
    })
}

#[test]
fn the_test_build_is_published_signed_installed_by_digest_and_releases_a_plan() {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "no test cluster (KUBECONFIG unset): run make test"
    );
    let dist = packaged();
    let (index_digest, index) = image_index(dist);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let registry = Registry::start(dir);
    let host = registry.addr.clone();

    // SHA256SUMS covers the layout, the provenance names this commit.
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    for line in sums.lines() {
        let (sum, name) = line.split_once("  ").unwrap();
        assert_eq!(
            sha256_hex(&std::fs::read(dist.join(name)).unwrap()),
            sum,
            "{name}"
        );
    }
    for name in [
        "releaseplan.cdx.json",
        "releaseplan.provenance.json",
        "releaseplan.yaml",
        "oci/index.json",
    ] {
        assert!(
            sums.lines().any(|l| l.ends_with(&format!("  {name}"))),
            "SHA256SUMS lacks {name}"
        );
    }
    let commit = String::from_utf8(run(Command::new("git").args(["rev-parse", "HEAD"])).stdout)
        .unwrap()
        .trim()
        .to_string();
    let provenance = json(&std::fs::read(dist.join("releaseplan.provenance.json")).unwrap());
    assert_eq!(
        provenance["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"],
        commit.as_str()
    );
    let sbom = json(&std::fs::read(dist.join("releaseplan.cdx.json")).unwrap());

    // Published with a throwaway key: pushed, signed, attested.
    run(Command::new(cosign_bin())
        .args(["generate-key-pair", "--output-key-prefix", "release"])
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .env("HOME", dir));
    let key = dir.join("release.key");
    let public = dir.join("release.pub");
    let out = run(scripted(&root().join("e2e/publish.sh"))
        .arg(dist)
        .arg(&host)
        .env("COSIGN_KEY", &key)
        .env("COSIGN_PASSWORD", "")
        .env("RP_REGISTRY_PLAIN_HTTP", "1")
        // Registry logins and cosign's state in the temp dir, the tools
        // where the scripts put them.
        .env("HOME", dir)
        .env("RP_CACHE", release_support::cache()));
    let said = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("publish.sh printed no {name}=:\n{said}"))
            .to_string()
    };
    let image = field("image");
    let chart_ref = field("chart");
    assert_eq!(
        image,
        format!("{host}/releaseplan@{index_digest}"),
        "the registry's digest is not the layout's index"
    );
    release_support::assert_tag_serves(dir, &host, &index);

    // Verified as an admission policy would: the signature, the SBOM and
    // the provenance, on the index and on each arch's image.
    run(&mut cosign_verify(dir, "verify", &public, &image));
    for desc in index["manifests"].as_array().unwrap() {
        let one = format!("{host}/releaseplan@{}", desc["digest"].as_str().unwrap());
        run(&mut cosign_verify(dir, "verify", &public, &one));
    }
    run(&mut cosign_verify(dir, "verify", &public, &chart_ref));
    let attested = |kind: &str| {
        let out =
            run(cosign_verify(dir, "verify-attestation", &public, &image).args(["--type", kind]));
        let found = statements(&out.stdout);
        assert_eq!(found.len(), 1, "{kind}: one attestation");
        let st = found.into_iter().next().unwrap();
        assert_eq!(
            st["subject"][0]["digest"]["sha256"].as_str(),
            index_digest.strip_prefix("sha256:"),
            "{kind}: the attestation's subject is not the image"
        );
        (
            st["predicateType"].as_str().unwrap().to_string(),
            st["predicate"].clone(),
        )
    };
    let (sbom_type, attested_sbom) = attested("cyclonedx");
    assert_eq!(attested_sbom, sbom, "the attested SBOM is not the layout's");
    // cosign parses the provenance into SLSA's types (it adds an empty
    // runDetails.metadata): the build and the builder are the layout's.
    let (provenance_type, attested_provenance) = attested("slsaprovenance1");
    assert_eq!(
        attested_provenance["buildDefinition"], provenance["buildDefinition"],
        "the attested provenance is not the layout's"
    );
    assert_eq!(
        attested_provenance["runDetails"]["builder"],
        provenance["runDetails"]["builder"]
    );
    admission_policy_fits(&public, &host, &[sbom_type, provenance_type]);
    // Another key verifies nothing.
    run(Command::new(cosign_bin())
        .args(["generate-key-pair", "--output-key-prefix", "other"])
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .env("HOME", dir));
    let said = run_fails(&mut cosign_verify(
        dir,
        "verify",
        &dir.join("other.pub"),
        &image,
    ));
    assert!(said.contains("no matching signatures"), "{said}");
    // An image changed after signing, pushed under the same tag: the tag no
    // longer verifies, nor does the new digest.
    let changed = dir.join("changed");
    let binary = dir.join("releaseplan-changed");
    std::fs::copy(env!("CARGO_BIN_EXE_releaseplan"), &binary).unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&binary)
            .unwrap();
        f.write_all(b"changed after signing").unwrap();
    }
    let arch = index["manifests"][0]["platform"]["architecture"]
        .as_str()
        .unwrap()
        .to_string();
    run(Command::new("python3")
        .arg(root().join("e2e/oci-image.py"))
        .arg(changed.join("oci"))
        .args([VERSION, &commit, "0", "https://example.invalid"])
        .arg(format!("{arch}={}", binary.display())));
    run(skopeo(dir)
        .args([
            "copy",
            "--all",
            "--preserve-digests",
            "--dest-tls-verify=false",
        ])
        .arg(format!("oci:{}:{VERSION}", changed.join("oci").display()))
        .arg(format!("docker://{host}/releaseplan:{VERSION}")));
    let (changed_digest, _) = image_index(&changed);
    assert_ne!(changed_digest, index_digest);
    let by_tag = format!("{host}/releaseplan:{VERSION}");
    let said = run_fails(&mut cosign_verify(dir, "verify", &public, &by_tag));
    assert!(said.contains("no signatures found"), "{said}");
    let said = run_fails(&mut cosign_verify(
        dir,
        "verify",
        &public,
        &format!("{host}/releaseplan@{changed_digest}"),
    ));
    assert!(said.contains("no signatures found"), "{said}");
    // The signed image's signature copied onto the changed image (cosign
    // finds it by the tag sha256-<digest>.sig): it names the signed digest,
    // so it does not verify the changed one.
    let sig_tag = |digest: &str| {
        format!(
            "docker://{host}/releaseplan:{}.sig",
            digest.replacen(':', "-", 1)
        )
    };
    run(skopeo(dir)
        .args(["copy", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(sig_tag(&index_digest))
        .arg(sig_tag(&changed_digest)));
    let said = run_fails(&mut cosign_verify(
        dir,
        "verify",
        &public,
        &format!("{host}/releaseplan@{changed_digest}"),
    ));
    assert!(said.contains("no matching signatures"), "{said}");
    // The signed digest still verifies, whatever the tag now names.
    run(&mut cosign_verify(dir, "verify", &public, &image));

    // Installed from the registry by digest into the test cluster.
    let (_, chart_version) = release_support::chart_of(dist);
    let pid = std::process::id();
    let ns = format!("rp-packaging-{pid}");
    let apps = format!("rp-packaging-apps-{pid}");
    kubectl(&["create", "namespace", &apps]);
    // The release named for this run, its GatePolicy limited to the apps
    // namespace (labelled for it), as tests/it/chart.rs does: nothing of it
    // reaches the rest of the cluster.
    let release = format!("rp-{pid}");
    kubectl(&["label", "namespace", &apps, &format!("rptenant={apps}")]);
    let installed = Installed {
        dir: dir.to_path_buf(),
        release: release.clone(),
        namespaces: vec![apps.clone(), ns.clone()],
    };
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    run(
        release_support::helm_install(dir, &release, &host, &chart_version, &ns, &index_digest)
            .arg(format!("--set=watchNamespace={apps}"))
            .arg(format!("--set=metricsPort={metrics_port}"))
            .arg(format!(
                "--set=gatePolicy.namespaceSelector.matchLabels.rptenant={apps}"
            )),
    );
    let stored = json(&kubectl(&["get", "deployments", "-o", "json", "-n", &ns]));
    let deployment = &stored["items"][0];
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        image.as_str(),
        "the installed Deployment's image is not the signed digest"
    );

    // The operator pulled back from the registry by that digest: the test
    // build, unchanged.
    let pulled = dir.join("pulled");
    run(skopeo(dir)
        .args(["copy", "--src-tls-verify=false"])
        .arg(format!("docker://{image}"))
        .arg(format!("oci:{}:pulled", pulled.display())));
    let top = json(&std::fs::read(pulled.join("index.json")).unwrap());
    let manifest = json(&layout_blob(
        &pulled,
        top["manifests"][0]["digest"].as_str().unwrap(),
    ));
    let config = json(&layout_blob(
        &pulled,
        manifest["config"]["digest"].as_str().unwrap(),
    ));
    let layer = pulled.join("blobs/sha256").join(
        manifest["layers"][0]["digest"]
            .as_str()
            .unwrap()
            .strip_prefix("sha256:")
            .unwrap(),
    );
    let rootfs = dir.join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&rootfs));
    let entrypoint = config["config"]["Entrypoint"][0].as_str().unwrap();
    let binary = rootfs.join(entrypoint.trim_start_matches('/'));
    assert!(
        std::fs::read(&binary).unwrap()
            == std::fs::read(env!("CARGO_BIN_EXE_releaseplan")).unwrap(),
        "the image's {entrypoint} is not the test build"
    );
    // The SBOM lists the image's other file, the CA bundle, by its hash.
    let ca = std::fs::read(rootfs.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(
        sbom["components"].as_array().unwrap().iter().any(|c| {
            c["name"] == "ca-certificates" && c["hashes"][0]["content"] == sha256_hex(&ca).as_str()
        }),
        "the SBOM does not list the image's CA bundle"
    );

    // Run as the chart's ServiceAccount, with the Deployment's arguments.
    let sa = pod["serviceAccountName"].as_str().unwrap();
    let token = String::from_utf8(kubectl(&[
        "create",
        "token",
        sa,
        "-n",
        &ns,
        "--duration=1h",
    ]))
    .unwrap()
    .trim()
    .to_string();
    let admin = json(&kubectl(&[
        "config", "view", "--raw", "--minify", "-o", "json",
    ]));
    let cluster = &admin["clusters"][0]["cluster"];
    let kubeconfig = dir.join("operator.kubeconfig");
    std::fs::write(
        &kubeconfig,
        serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "test", "user": sa}}],
            "current-context": "sa",
        }))
        .unwrap(),
    )
    .unwrap();
    let pod_name = format!("rp-packaging-{pid}");
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod_name.clone(),
                Some("metadata.namespace") => ns.clone(),
                Some(other) => panic!("env {name}: fieldRef {other}"),
                None => e["value"].as_str().unwrap_or_default().to_string(),
            };
            (name, value)
        })
        .collect();
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| expand(a.as_str().unwrap(), &env))
        .collect();
    let log = dir.join("operator.log");
    let operator = Operator(
        Command::new(&binary)
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", &kubeconfig)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("operator.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let operator_log = || {
        format!(
            "{}{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read_to_string(dir.join("operator.err")).unwrap_or_default()
        )
    };
    let lease = args
        .iter()
        .find_map(|a| a.strip_prefix("--lease-name="))
        .expect("the chart runs the operator with leader election");
    let lease = lease.to_string();
    let mut operator = operator;
    let leads = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(60, "the image's operator holds the Lease", || {
            if let Ok(Some(exit)) = operator.0.try_wait() {
                panic!("the operator exited ({exit})");
            }
            let out = Command::new("kubectl")
                .args(["get", "lease", &lease, "-n", &ns, "-o"])
                .arg("jsonpath={.spec.holderIdentity}")
                .output()
                .ok()?;
            (String::from_utf8_lossy(&out.stdout) == pod_name).then_some(())
        });
    }));
    if leads.is_err() {
        panic!("the Lease; operator log:\n{}", operator_log());
    }

    // It releases a plan: the first revision, then a new image.
    let plan = |image: &str| {
        format!(
            r#"{{"apiVersion":"releaseplan.io/v1alpha1","kind":"ReleasePlan",
"metadata":{{"name":"shop","namespace":"{apps}"}},
"spec":{{"components":[{{"name":"web","replicas":2,"template":{{"metadata":{{"labels":{{"app":"shop"}}}},
"spec":{{"containers":[{{"name":"web","image":"{image}"}}]}}}}}}],
"strategy":{{"steps":[{{"setWeight":50}}]}},"health":{{"progressDeadlineSeconds":120}}}}}}"#
        )
    };
    let stable = |after: Option<&str>| -> String {
        let after = after.map(str::to_string);
        wait_for(120, "the plan is Stable", || {
            let out = Command::new("kubectl")
                .args(["get", "releaseplan", "shop", "-n", &apps, "-o", "json"])
                .output()
                .ok()?;
            let p: Value = serde_json::from_slice(&out.stdout).ok()?;
            let st = &p["status"];
            let rev = st["stableRevision"].as_str()?.to_string();
            (st["phase"] == "Stable"
                && st["observedGeneration"] == p["metadata"]["generation"]
                && after.as_deref() != Some(rev.as_str()))
            .then_some(rev)
        })
    };
    let apply = |doc: String| {
        run_with_stdin(
            Command::new("kubectl").args(["apply", "-f", "-"]),
            doc.as_bytes(),
        );
    };
    apply(plan("registry.example/shop:1.0"));
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stable(None)))
        .unwrap_or_else(|_| panic!("first release; operator log:\n{}", operator_log()));
    apply(plan("registry.example/shop:2.0"));
    let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stable(Some(&first))))
        .unwrap_or_else(|_| panic!("second release; operator log:\n{}", operator_log()));
    assert_ne!(first, second);
    let deployments = json(&kubectl(&["get", "deployments", "-n", &apps, "-o", "json"]));
    let images: Vec<&str> = deployments["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["spec"]["replicas"].as_i64() > Some(0))
        .map(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(images, ["registry.example/shop:2.0"], "after the release");

    // Deleted while the operator runs, so its finalizer is taken off and
    // the namespace can go.
    run(Command::new("kubectl").args([
        "delete",
        "releaseplan",
        "shop",
        "-n",
        &apps,
        "--wait",
        "--timeout=60s",
    ]));
    drop(operator);
    drop(installed);
    drop(registry);
}

/// The chart's release and the test's namespaces, removed when dropped
/// (also when the test fails), so the test binaries after this one find the
/// cluster as they would without it: helm uninstall takes the chart's
/// cluster-scoped objects (roles, bindings, the GatePolicy) with it.
struct Installed {
    dir: PathBuf,
    release: String,
    namespaces: Vec<String>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(ns) = self.namespaces.last() {
            let _ = helm(&self.dir)
                .args(["uninstall", &self.release, "--namespace", ns])
                .output();
        }
        // A plan left by a failed run keeps its finalizer (no operator runs
        // now): taken off, or the namespace stays Terminating.
        for n in &self.namespaces {
            let _ = Command::new("kubectl")
                .args(["patch", "releaseplan", "shop", "-n", n, "--type=merge"])
                .args(["-p", r#"{"metadata":{"finalizers":null}}"#])
                .output();
        }
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "crd",
                "imagevalidatingpolicies.policies.kyverno.io",
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        for n in &self.namespaces {
            let _ = Command::new("kubectl")
                .args(["delete", "namespace", n, "--wait=false"])
                .output();
        }
    }
}

/// The Kyverno policy docs/releasing.md gives (examples/kyverno-image-policy.yaml),
/// with this test's key and registry, is accepted by the API server under
/// Kyverno's own CRD (its schema: field names and types; Kyverno compiles
/// the CEL itself at admission, which is not run here), and asks for exactly
/// the attestation types cosign wrote (TYPES).
fn admission_policy_fits(public: &Path, host: &str, types: &[String]) {
    let crd = release_support::cache()
        .join(format!(
            "kyverno-crds-v{}",
            release_support::pinned("KYVERNO_VERSION")
        ))
        .join("policies.kyverno.io_imagevalidatingpolicies.yaml");
    assert!(
        crd.is_file(),
        "{} is missing: e2e/build-control-plane.sh kyverno-crds",
        crd.display()
    );
    run(Command::new("kubectl")
        .args(["apply", "--server-side", "-f"])
        .arg(&crd));
    // Polled: `kubectl wait` fails at once while a new CRD has no
    // conditions yet (seen: "<nil> is of the type <nil>").
    wait_for(60, "Kyverno's CRD is established", || {
        let out = Command::new("kubectl")
            .args([
                "get",
                "crd",
                "imagevalidatingpolicies.policies.kyverno.io",
                "-o",
            ])
            .arg(r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#)
            .output()
            .ok()?;
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    });
    let example =
        std::fs::read_to_string(root().join("examples/kyverno-image-policy.yaml")).unwrap();
    let key = std::fs::read_to_string(public).unwrap();
    let indent = "            ";
    let key_block: String = key.lines().map(|l| format!("{indent}{l}\n")).collect();
    let placeholder = format!(
        "{indent}-----BEGIN PUBLIC KEY-----\n{indent}REPLACE WITH THE RELEASE KEY (cosign.pub)\n{indent}-----END PUBLIC KEY-----\n"
    );
    assert!(
        example.contains(&placeholder),
        "the example's key placeholder moved"
    );
    let filled = example.replace(&placeholder, &key_block).replace(
        "registry.example.com/releaseplan",
        &format!("{host}/releaseplan"),
    );
    let policy: Value = yaml_serde::from_str(&filled).unwrap();
    let mut wanted: Vec<&str> = policy["spec"]["attestations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["intoto"]["type"].as_str().unwrap())
        .collect();
    wanted.sort_unstable();
    let mut written: Vec<&str> = types.iter().map(String::as_str).collect();
    written.sort_unstable();
    assert_eq!(
        wanted, written,
        "the policy's attestation types against cosign's"
    );
    let key_in_policy = policy["spec"]["attestors"][0]["cosign"]["key"]["data"]
        .as_str()
        .unwrap();
    assert_eq!(key_in_policy, key, "the key did not land in the policy");
    run_with_stdin(
        Command::new("kubectl").args(["apply", "--dry-run=server", "-f", "-"]),
        filled.as_bytes(),
    );
}

/// krew's own validator installs the test build's plugin from the manifest
/// package.sh wrote (the platform of this machine).
#[test]
fn krews_validator_installs_the_test_builds_plugin_from_its_manifest() {
    // The placeholder home, with the version in it (RP_DIST_URL unset).
    let manifest = std::fs::read_to_string(packaged().join("releaseplan.yaml")).unwrap();
    let want = format!(
        "uri: https://releases.example.invalid/releaseplan/v{VERSION}/kubectl-releaseplan_{VERSION}_linux_{}.tar.gz",
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    );
    assert!(manifest.contains(&want), "{want} not in:\n{manifest}");
    assert_eq!(krew_installs_every_platform(packaged()), 1);
}
