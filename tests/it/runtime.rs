//! The operator's async runtime follows `--worker-threads`: its task threads
//! are counted in /proc while it runs (tokio names them `tokio-rt-worker`).
//! And it does not start without knowing its own namespace.

use crate::support::Harness;

/// The operator's threads named `tokio-rt-worker`.
fn worker_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "tokio-rt-worker")
        .count()
}

#[tokio::test]
async fn worker_threads_sets_how_many_threads_run_the_tasks() {
    let h = Harness::new("threads").await;
    for n in [1, 3] {
        let op = h
            .operator()
            .args(["--worker-threads", &n.to_string()])
            .start()
            .await;
        assert_eq!(worker_threads(op.pid().unwrap()), n, "--worker-threads {n}");
    }
    // 0, the default: tokio's, one per CPU the process may use.
    let op = h.operator().start().await;
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(worker_threads(op.pid().unwrap()), cpus);
}

/// The binary run with nothing that names its namespace: its stderr and
/// exit code. `extra` adds flags; the kubeconfig points nowhere, so a run
/// that gets past the namespace ends at the next check, without a cluster.
fn run_without_namespace(extra: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_releaseplan"))
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(extra)
        .env_remove("POD_NAMESPACE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/nonexistent/releaseplan-test-kubeconfig")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the operator");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 50, part 5: no more `default` namespace guessed for the Lease
/// and the gates' credentials.
#[test]
fn the_operator_refuses_to_start_without_its_namespace() {
    if std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists() {
        eprintln!("skipped: this runs in a pod, whose service account names its namespace");
        return;
    }
    let (code, stderr) = run_without_namespace(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot tell which namespace the operator runs in: set --operator-namespace or POD_NAMESPACE"),
        "{stderr}"
    );
    // Named, it gets past that check (to the missing kubeconfig).
    let (code, stderr) = run_without_namespace(&["--operator-namespace", "rp-system"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains("cannot tell which namespace"), "{stderr}");
    assert!(stderr.contains("no Kubernetes configuration"), "{stderr}");
}
