//! The objects the operator writes for a plan, built purely from it: revision
//! Deployments, the ControllerRevisions that store each revision's template
//! (so `undo` is a lookup, for the operator and the plugin alike), and the
//! scale targets and HPAs of autoscaled components.

pub mod autoscaling;
pub mod controller_revision;
pub mod daemon_set;
pub mod deployment;
pub mod stateful_set;
