//! Sharding: the plans split over several leader Leases, one replica each.
//!
//! With `--shards S` a plan belongs to shard `fnv1a64("namespace/name") mod S`,
//! and a replica reconciles, and caches, only the plans of the shard whose
//! Lease it holds (and the objects labelled with those plans). A replica holds
//! at most one shard; replicas beyond S are standbys that take over a shard
//! whose holder stops. The hash is fixed: changing it would move plans between
//! running replicas during an upgrade.

pub use releaseplan_core::shard::{Shard, of};

/// The Lease of shard `index` of `count`: the leader Lease itself without
/// sharding (so one replica and its standbys keep the Lease they always had),
/// else `<lease>-<index>-of-<count>`: replicas of another shard count never
/// share a Lease with these.
pub fn lease_name(base: &str, index: u32, count: u32) -> String {
    if count <= 1 {
        base.to_string()
    } else {
        format!("{base}-{index}-of-{count}")
    }
}

/// The shard count of a Lease named by [`lease_name`] for `base`, if it is one.
pub fn layout_of(base: &str, lease: &str) -> Option<u32> {
    if lease == base {
        return Some(1);
    }
    let rest = lease.strip_prefix(base)?.strip_prefix('-')?;
    let (index, count) = rest.split_once("-of-")?;
    let (index, count) = (index.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
    (count > 1 && index < count).then_some(count)
}

/// The order in which a replica tries the shards: its own first (by a hash of
/// its identity), so replicas that start together spread over the shards
/// instead of all racing for shard 0.
pub fn preference(identity: &str, count: u32) -> Vec<u32> {
    let count = count.max(1);
    let first = of("", identity, count);
    (0..count).map(|i| (first + i) % count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        // A change here moves plans between shards of running replicas:
        // these values must never change.
        assert_eq!(of("default", "web", 2), 1);
        assert_eq!(of("default", "a", 2), 0);
        assert_eq!(of("shop", "checkout", 7), 6);
        assert_eq!(of("a", "b", 1), 0);
        assert_eq!(of("a", "b", 0), 0, "no shards counts as one");
    }

    #[test]
    fn plans_spread_over_the_shards() {
        let count = 4;
        let mut per = [0u32; 4];
        for i in 0..4000 {
            per[of("ns", &format!("app-{i}"), count) as usize] += 1;
        }
        for n in per {
            assert!((800..=1200).contains(&n), "{per:?}");
        }
    }

    #[test]
    fn namespace_and_name_are_not_run_together() {
        // "a/bc" and "ab/c" are different plans.
        let differ = (2..40).any(|c| of("a", "bc", c) != of("ab", "c", c));
        assert!(differ);
    }

    #[test]
    fn lease_names_round_trip_and_others_are_not_ours() {
        assert_eq!(lease_name("rp", 0, 1), "rp");
        assert_eq!(lease_name("rp", 2, 3), "rp-2-of-3");
        assert_eq!(layout_of("rp", "rp"), Some(1));
        assert_eq!(layout_of("rp", "rp-2-of-3"), Some(3));
        assert_eq!(layout_of("rp", "rp-3-of-3"), None);
        assert_eq!(layout_of("rp", "rp-x-of-3"), None);
        assert_eq!(layout_of("rp", "rpx-0-of-2"), None);
        assert_eq!(layout_of("rp", "other"), None);
    }

    #[test]
    fn each_replica_tries_every_shard_once() {
        for id in ["op-a", "op-b", "releaseplan-7d9f-xk2"] {
            let mut p = preference(id, 5);
            p.sort_unstable();
            assert_eq!(p, vec![0, 1, 2, 3, 4]);
        }
        assert_eq!(preference("x", 0), vec![0]);
    }

    #[test]
    fn a_shard_owns_its_plans_only() {
        let s = Shard { index: 1, count: 2 };
        assert!(s.owns("default", "web"));
        assert!(!s.owns("default", "a"));
    }
}
