//! `kubectl releaseplan dashboard`: a live web UI of the plans, served on
//! 127.0.0.1 by the plugin itself with the caller's kubeconfig and RBAC.
//!
//! Watches on ReleasePlans, their revision Deployments and their Events feed
//! one in-memory [`Store`](store::Store); every change is announced on a broadcast channel
//! and pushed to the open pages as server-sent events (the overview gets the
//! changed rows, a plan page the whole plan). The buttons POST to endpoints
//! that send exactly the request of the plugin's verbs ([`request::send`](crate::cli::request::send)) and
//! return the API server's refusal verbatim. The page (HTML, CSS, JS) is
//! embedded in the binary: no CDN, no build step. Shapes are computed here
//! (pure functions, unit-tested), the page only draws them.
//!
//! [`server`] serves the page and runs the watches; [`store`] holds what they
//! have seen; [`model`] computes what the page shows; [`guard`] keeps other
//! sites, host names and requests without the per-run token out.

pub mod guard;
pub mod model;
pub mod server;
pub mod store;

pub use server::{AFTER_HELP, DashboardArgs, serve};
