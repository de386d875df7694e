//! Process plumbing: metrics, the health server, leader election and
//! sharding, logging,
//! the client-side rate limit and the API request metrics.

pub mod api_client;
pub mod backoff;
pub mod deadline;
pub mod leader;
pub mod liveness;
pub mod metrics;
pub mod process;
pub mod ratelimit;
pub mod requests;
pub mod server;
pub mod shard;
pub mod telemetry;
