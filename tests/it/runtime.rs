//! The operator's async runtime follows `--worker-threads`: its task threads
//! are counted in /proc while it runs (tokio names them `tokio-rt-worker`).

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
