//! releaseplan: a Kubernetes operator that releases workloads safely.
//!
//! `api` holds the ReleasePlan types, `plan` the pure rollout state machine,
//! `gates` the health gates, `controller` the reconcile I/O and `ops` the
//! process plumbing (metrics, health, leader election, telemetry); `cli` is
//! the `kubectl releaseplan` plugin.

// Unit tests follow the lint policy's correctness lints, not pedantic style.
#![cfg_attr(test, allow(clippy::pedantic))]

pub mod api;
pub mod cli;
pub mod controller;
// Lists in the docs checked against the code (docs that cannot drift).
#[cfg(test)]
mod doc_lists;
pub mod gates;
pub mod ops;
pub mod plan;
