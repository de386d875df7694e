//! releaseplan: a Kubernetes operator that releases workloads safely.
//!
//! The pure core is its own crate, `releaseplan-core` (crates/core): `api`
//! (the ReleasePlan types), `plan` (the rollout state machine), the pure
//! half of `gates` and `objects`, re-exported here under the same paths.
//! This crate adds the I/O: `gates` calls Prometheus and webhooks,
//! `controller` observes, acts and writes, `ops` is the process plumbing
//! (metrics, health, leader election, telemetry), and `cli` the `kubectl
//! releaseplan` plugin.

// Unit tests follow the lint policy's correctness lints, not pedantic style.
#![cfg_attr(test, allow(clippy::pedantic))]

pub use releaseplan_core::{api, objects, plan};
pub mod build_info;
pub mod cli;
pub mod controller;
pub mod fleet;
// Lists in the docs checked against the code (docs that cannot drift).
#[cfg(test)]
mod canned_api;
#[cfg(test)]
mod doc_lists;
pub mod gates;
mod kube_errors;
pub mod ops;
