//! The hub's read path of fleets (docs/fleets.md: proposed, not wired to a
//! controller yet) against real member clusters: two of the project's
//! clusters started here, registered as Argo CD cluster Secrets (client
//! certificates from their kubeconfigs), plus a member whose port is closed
//! and one that accepts connections and never answers. `observe` must read
//! the plan of the first (its revision as the member computes it, then the
//! revision the hub admitted), see that the second has none, and report the
//! other two as unreachable within the deadline; `decide` then admits the
//! canary wave's cluster.
//!
//! Its own target, `make test-fleet` (`test = false`: it starts two
//! clusters of its own); not in `make test` until the fleet controller
//! exists.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use releaseplan::api::ReleasePlan;
use releaseplan::fleet::member::{Deadlines, Member, SECRET_TYPE_CLUSTER, SECRET_TYPE_LABEL};
use releaseplan::fleet::observe::{ANNOTATION_ADMITTED, observe};
use releaseplan::plan::Target;
use releaseplan_core::fleet::{
    FleetObservation, FleetState, MemberView, Verdict, WaveSpec, decide,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A cluster of the project's scripts, stopped when dropped.
struct Cluster {
    name: String,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn start(name: &str) -> Cluster {
        let out = Command::new(root().join("e2e/cluster-up.sh"))
            .arg(name)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster-up {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir =
            std::env::var_os("RP_RUN_DIR").map_or_else(|| root().join(".e2e-run"), PathBuf::from);
        Cluster {
            name: name.to_string(),
            kubeconfig: dir.join(name).join("kubeconfig"),
        }
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Vec<u8> {
        use std::io::Write;
        let mut child = Command::new(self.bin("kubectl"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?} on {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A binary of the control plane the scripts built (kubectl).
    fn bin(&self, name: &str) -> PathBuf {
        let env = std::fs::read_to_string(self.kubeconfig.with_file_name("env")).unwrap();
        let path = env
            .lines()
            .find_map(|l| {
                l.strip_prefix("export PATH=")
                    .or_else(|| l.strip_prefix("PATH="))
            })
            .map(|p| p.trim_matches(['"', '\'']).to_string())
            .unwrap_or_default();
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from(name))
    }

    /// This cluster as Argo CD registers it: a cluster Secret with the
    /// admin's client certificate from its kubeconfig.
    fn argo_secret(&self, labels: &[(&str, &str)]) -> Secret {
        let kc: Value =
            yaml_serde::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let cluster = &kc["clusters"][0]["cluster"];
        let user = &kc["users"][0]["user"];
        let config = json!({
            "tlsClientConfig": {
                "caData": cluster["certificate-authority-data"],
                "certData": user["client-certificate-data"],
                "keyData": user["client-key-data"],
            }
        });
        secret(
            &self.name,
            cluster["server"].as_str().unwrap(),
            &config.to_string(),
            labels,
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(root().join("e2e/cluster-down.sh"))
            .arg(&self.name)
            .output();
    }
}

fn secret(name: &str, server: &str, config: &str, labels: &[(&str, &str)]) -> Secret {
    let mut l: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.insert(SECRET_TYPE_LABEL.into(), SECRET_TYPE_CLUSTER.into());
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("cluster-{name}")),
            namespace: Some("argocd".into()),
            labels: Some(l),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("name".to_string(), ByteString(name.as_bytes().to_vec())),
            ("server".to_string(), ByteString(server.as_bytes().to_vec())),
            ("config".to_string(), ByteString(config.as_bytes().to_vec())),
        ])),
        ..Secret::default()
    }
}

const PLAN: &str = r#"{"apiVersion":"releaseplan.io/v1alpha1","kind":"ReleasePlan",
"metadata":{"name":"shop","namespace":"shop"},
"spec":{"components":[{"name":"web","replicas":2,"template":{"metadata":{"labels":{"app":"shop"}},
"spec":{"containers":[{"name":"web","image":"registry.example/shop:2.0"}]}}}],
"strategy":{"steps":[{"setWeight":50}]}}}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_hub_reads_its_members_plans_and_admits_the_canary_wave() {
    let pid = std::process::id();
    let m1 = Cluster::start(&format!("fleet-a-{pid}"));
    let m2 = Cluster::start(&format!("fleet-b-{pid}"));
    let crds = root().join("crds");
    for m in [&m1, &m2] {
        m.kubectl(
            &["apply", "--server-side", "-f", crds.to_str().unwrap()],
            None,
        );
        // Polled: `kubectl wait` fails at once on a CRD without conditions yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        let established = || {
            let crd: Value = serde_json::from_slice(&m.kubectl(
                &["get", "crd", "releaseplans.releaseplan.io", "-o", "json"],
                None,
            ))
            .unwrap();
            crd["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
        };
        while !established() {
            assert!(Instant::now() < deadline, "the CRD is not established");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    m1.kubectl(&["create", "namespace", "shop"], None);
    m1.kubectl(&["apply", "-f", "-"], Some(PLAN));

    // A member whose port is closed, and one that accepts and never answers.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let secrets = [
        m1.argo_secret(&[("env", "prod")]),
        m2.argo_secret(&[("env", "prod")]),
        secret(
            "closed",
            &format!("https://{closed}"),
            r#"{"bearerToken":"x","tlsClientConfig":{"insecure":true}}"#,
            &[],
        ),
        secret(
            "silent",
            &format!("https://{silent_addr}"),
            r#"{"bearerToken":"x","tlsClientConfig":{"insecure":true}}"#,
            &[],
        ),
    ];
    let members: Vec<Member> = secrets
        .iter()
        .map(|s| Member::from_secret(s).unwrap())
        .collect();
    assert_eq!(
        members[0].labels.get("env").map(String::as_str),
        Some("prod")
    );
    let deadlines = Deadlines {
        connect: Duration::from_secs(2),
        read: Duration::from_secs(3),
    };

    let started = Instant::now();
    let views = observe(&members, "shop", "shop", deadlines).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the look took {took:?}");
    let spec: ReleasePlan = serde_json::from_str(PLAN).unwrap();
    let revision = Target::from_spec(&spec.spec).unwrap().revision;
    match &views[&m1.name] {
        MemberView::Plan(p) => {
            assert_eq!(p.revision, revision, "the revision the member computes");
            assert_eq!(p.admitted, None);
        }
        other => panic!("{}: {other:?}", m1.name),
    }
    assert_eq!(views[&m2.name], MemberView::NoPlan);
    for n in ["closed", "silent"] {
        assert!(
            matches!(&views[n], MemberView::Unreachable(_)),
            "{n}: {:?}",
            views[n]
        );
    }

    // The pure decision over what was read: the canary wave names the
    // first member, which is admitted; the unreachable ones are reported.
    let waves = vec![
        WaveSpec {
            name: "canary".into(),
            clusters: vec![m1.name.clone()],
            ..WaveSpec::default()
        },
        WaveSpec {
            name: "rest".into(),
            ..WaveSpec::default()
        },
    ];
    let d = decide(&FleetObservation {
        now: chrono::Utc::now(),
        waves,
        members: views,
        state: FleetState::default(),
    });
    assert_eq!(d.admit, vec![(m1.name.clone(), revision.clone())]);
    let verdict = |n: &str| d.clusters.iter().find(|c| c.name == n).unwrap().verdict;
    assert_eq!(verdict("closed"), Verdict::Unreachable);
    assert_eq!(verdict("silent"), Verdict::Unreachable);

    // The admission, as the hub will write it (metadata only), read back.
    m1.kubectl(
        &[
            "annotate",
            "releaseplan",
            "shop",
            "-n",
            "shop",
            &format!("{ANNOTATION_ADMITTED}={revision}"),
        ],
        None,
    );
    let again = observe(&members[..1], "shop", "shop", deadlines).await;
    match &again[&m1.name] {
        MemberView::Plan(p) => assert_eq!(p.admitted.as_deref(), Some(revision.as_str())),
        other => panic!("{other:?}"),
    }
    drop(silent);
}
