//! releaseplan's pure core: what the operator decides, with no way to do
//! I/O. The crate depends on no async runtime, Kubernetes client or HTTP
//! client, so a network call here is a compile error, not a review finding
//! (`cargo tree -p releaseplan-core -e normal` shows it).
//!
//! `api` holds the ReleasePlan types (the CRD), `plan` the rollout state
//! machine (`decide`: observation in, one decision out), `gates` the gate
//! specs and the pure half of gates (parsing, verdicts, Job and template
//! gates), `objects` the Deployments and ControllerRevisions built from a
//! plan. The operator and the `kubectl releaseplan` plugin (crate
//! `releaseplan`) sit on top.

// Unit tests follow the lint policy's correctness lints, not pedantic style.
#![cfg_attr(test, allow(clippy::pedantic))]

pub mod analysis;
pub mod api;
pub mod fleet;
pub mod gates;
pub mod notify;
pub mod objects;
pub mod plan;
pub mod shard;
