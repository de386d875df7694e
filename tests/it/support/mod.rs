//! The one support layer of the integration tests (the binary of
//! `tests/it/`, whose `main.rs` declares it, and `tests/apiserver_restart.rs`)
//! and the benchmarks (`benches/*.rs`); those others include it through
//! `#[path]`:
//!
//! - [`Harness`]: a client of the local test cluster, a fresh namespace and
//!   the CRD installed, optionally an operator watching the namespace;
//! - [`wait_until`]: the one poller, and [`WAIT`], the bound of a wait;
//! - [`operator`]: the one operator launcher ([`operator::Operator::launcher`]);
//! - [`fixtures`]: templates, components, plans; [`plans`]: the plans on the
//!   cluster; [`cluster`]: client and namespaces; [`crd`]: the CRD install;
//!   [`servers`]: a real Prometheus and local HTTP servers; [`traffic`]: a
//!   Gateway, Traefik and a backend emulator, for real HTTP requests;
//!   [`metrics`]: the simulated CPU usage of a namespace's pods, which
//!   metrics-server reports and the HPA controller scales on; [`recorder`]:
//!   a notification receiver on loopback that records what it gets;
//!   [`alertmanager`]: a real Alertmanager on loopback.
//!
//! The cluster is the one of `make test` (KUBECONFIG); see docs/control-plane.md.

// Every binary that includes it (the tests of tests/it, the API server
// restart test, each bench) compiles this whole module but uses only part of
// it, so what one leaves unused is not dead: without this allow, each would
// warn about the helpers that only the others call.
#![allow(dead_code)]

pub mod alertmanager;
pub mod browser;
pub mod cluster;
pub mod crd;
pub mod faults;
pub mod fixtures;
pub mod forge;
pub mod gpu;
pub mod metrics;
pub mod operator;
pub mod plans;
pub mod recorder;
pub mod servers;
pub mod tools;
pub mod traffic;
mod wait;

use std::time::Duration;

use kube::Client;

use operator::Operator;
pub use wait::wait_until;

/// The bound of a test's wait for the operator or the cluster to get
/// somewhere: a phase, a condition, an Event, a Lease holder, a page showing
/// a change. What is waited for takes seconds; the rest is room for a loaded
/// machine (2 cores, with other builds and clusters beside the tests). A wait
/// that ends sooner costs nothing, so one bound serves every such wait.
pub const WAIT: Duration = Duration::from_secs(120);

/// The bound of a wait through a Job gate: the Job controller creates the
/// pod, kwok finishes it after the delay its annotation asks for, the Job
/// is marked, the gate decides. Longer than [`WAIT`], and longer than the
/// gates' own `timeoutSeconds` (120 s in the tests), so that a Job which
/// never finishes fails its gate before the test's wait gives up.
pub const JOB_WAIT: Duration = Duration::from_secs(180);

/// A test's place on the cluster: a client, and a fresh namespace in which
/// the ReleasePlan CRD is served.
pub struct Harness {
    /// A client of the local test cluster.
    pub client: Client,
    /// The test's own namespace, `<prefix>-<unique suffix>`.
    pub ns: String,
}

impl Harness {
    /// A client, the CRD installed, and a fresh namespace named after `prefix`.
    pub async fn new(prefix: &str) -> Harness {
        let client = cluster::client().await;
        crd::install(&client).await;
        let ns = cluster::test_namespace(&client, prefix).await;
        Harness { client, ns }
    }

    /// [`Harness::new`], and an operator watching the namespace, started with
    /// no extra flags.
    pub async fn with_operator(prefix: &str) -> (Harness, Operator) {
        let h = Harness::new(prefix).await;
        let op = h.operator().start().await;
        (h, op)
    }

    /// A launcher of an operator watching this namespace (add flags, then
    /// `.start().await`).
    pub fn operator(&self) -> operator::Launcher {
        Operator::launcher(&self.ns)
    }
}
