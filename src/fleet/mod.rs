//! The hub side of fleets (docs/fleets.md: proposed, not wired to a
//! controller yet): member clusters as multi-cluster tools register them.
//! The decision itself is pure, in `releaseplan_core::fleet`.

pub mod member;
pub mod observe;
