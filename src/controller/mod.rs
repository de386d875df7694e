//! The reconcile: all I/O around the pure core.
//!
//! [`reconcile`] reads one reconcile top-down: observe, decide once, act,
//! write. [`watches`] wires the caches and [`run`] the kube-runtime
//! `Controller`; [`context`] is what the reconciles share; [`error`] names
//! what can fail. Siblings import from each other's files, never through
//! this one: it only declares the modules and what the crate uses.

mod act;
mod adopt;
mod autoscale;
pub mod config;
pub mod config_cache;
mod context;
mod daemon;
pub(crate) mod error;
pub mod events;
mod finalizer;
pub mod freeze;
pub mod gates;
mod hashes;
pub mod index;
pub mod jobs;
mod keys;
#[cfg(test)]
pub(crate) mod kinds;
mod memory;
pub mod notify;
pub mod observe;
mod outcome;
mod owned;
pub mod policy;
pub mod queue;
mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub mod router;
mod run;
mod serving;
mod stand_in;
mod stateful;
mod stored;
mod sweep;
mod template_copies;
pub mod templates;
pub mod traffic;
pub mod trim;
mod watches;
mod write;

pub use context::{Context, Settings};
pub use error::{Error, StartError};
pub use outcome::FIELD_MANAGER;
pub use queue::WakeSource;
pub use reconcile::{error_policy, reconcile};
pub use run::run;
pub use watches::Watched;
pub use watches::{check_crd, watch_backoff};
