//! Process plumbing: metrics, the health server, leader election, logging,
//! the client-side rate limit.

pub mod leader;
pub mod liveness;
pub mod metrics;
pub mod ratelimit;
pub mod server;
pub mod telemetry;
