//! Which plans a shard owns: `fnv1a64("namespace/name") mod count`. Here so
//! that decoding ([`crate::api::foreign`]) and the operator's shard filter
//! ask the same question; the Leases are the operator's (`ops::shard`).

use kube::Resource;

/// The shard this process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// Shards in all.
    pub count: u32,
}

impl Shard {
    /// Whether the plan `namespace/name` belongs to this shard.
    pub fn owns(&self, namespace: &str, name: &str) -> bool {
        of(namespace, name, self.count) == self.index
    }

    /// Whether `obj`, a plan, belongs to this shard.
    pub fn owns_plan<K: Resource>(&self, obj: &K) -> bool {
        let meta = obj.meta();
        self.owns(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }
}

/// The shard of the plan `namespace/name` among `count` (FNV-1a, 64 bits).
pub fn of(namespace: &str, name: &str, count: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut h = OFFSET;
    for b in namespace
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(name.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    let count = u64::from(count.max(1));
    // The remainder is below `count`, itself a u32.
    u32::try_from(h % count).unwrap_or(0)
}
