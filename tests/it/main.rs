//! The integration tests, in one binary (as ripgrep and cargo keep theirs):
//! one module per area, the shared [`support`] layer, one link of the crate
//! and its dependencies instead of one per file. The test harness runs the
//! tests of every module in parallel threads, so each test keeps to its own
//! namespace, operator process, proxy, Prometheus and ports, and names any
//! cluster-scoped object after its namespace.
//!
//! Against the cluster of `make test`, or one of your own:
//! `e2e/cluster-up.sh it && . .e2e-run/it/env && cargo test --test it`;
//! one area: `cargo test --test it rollback::` (a filter is a substring of
//! `module::test`: `-- gates:: --skip job_gates::` where one name holds another).
//!
//! One test lives outside this binary on purpose: `tests/apiserver_restart.rs`
//! stops the API server that every test here uses (its header says why).

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod support;

mod admission;
mod adoption;
mod alerts;
mod allocator;
mod analysis;
mod autoscaling;
mod chart;
mod cluster;
mod config;
mod consumers;
mod controller;
mod daemon;
mod dashboard;
mod failure_modes;
mod faults;
mod freezes;
mod gate_access;
mod gate_budget;
mod gate_policy;
mod gate_templates;
mod gate_trials;
mod gated_rollout;
mod gates;
mod job_gates;
mod leader;
mod metrics_pipeline;
mod model_servers;
mod monitoring;
mod notifications;
mod notify_alertmanager;
mod notify_commit_status;
mod notify_failures;
mod order;
mod plugin;
mod preview;
mod rollback;
mod runtime;
mod server_side_apply;
mod shutdown;
mod stateful;
mod template_admission;
mod traffic;
mod traffic_gitops;
