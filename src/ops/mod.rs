//! Process plumbing: metrics, the health server, leader election, logging.

pub mod leader;
pub mod liveness;
pub mod metrics;
pub mod server;
pub mod telemetry;
