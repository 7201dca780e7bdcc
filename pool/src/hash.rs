//! Consistent-hash ring placement.
//!
//! The hash is **FNV-1a 64** (offset basis `0xcbf29ce484222325`, prime
//! `0x100000001b3`) followed by the **SplitMix64 finalizer** (FNV alone
//! spreads short keys that differ in their last byte poorly over the high
//! bits, which decide ring order). Both are implemented inline because std's
//! `DefaultHasher` is not stable across Rust releases and every replica (and
//! every future binary that replays an old log) must compute the same ring.
//! Changing this function changes placement of future commands only (past
//! placements are recorded in the log), but it must then be versioned.
//!
//! * Member `m` owns [`VNODES_PER_MEMBER`] points: `fnv1a64("{m}#{i}")` for
//!   `i in 0..64`.
//! * Sandbox `s` at generation `g` hashes to `fnv1a64("{s}/{g}")`.
//! * Placement walks clockwise (increasing hash, wrapping) from the sandbox's
//!   point and returns the first member accepted by a predicate (eligible and
//!   with free capacity). Ties between equal points are broken by member id.
//!
//! The ring holds every member id ever seen (records are never removed), so
//! it only changes when a new member id joins; eligibility is a predicate
//! evaluated during the walk. A member joining therefore moves no existing
//! assignment: placement runs only for launches, takeovers and moves.

/// Virtual nodes per member.
pub const VNODES_PER_MEMBER: u32 = 64;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64-bit hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// SplitMix64 finalizer (Steele, Lea, Flood 2014).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ring hash: `mix64(fnv1a64(bytes))`.
pub fn ring_hash(bytes: &[u8]) -> u64 {
    mix64(fnv1a64(bytes))
}

/// The ring point of one virtual node of a member.
pub fn vnode_point(member: &str, vnode: u32) -> u64 {
    ring_hash(format!("{member}#{vnode}").as_bytes())
}

/// The ring point of a sandbox generation.
pub fn sandbox_point(sandbox: &str, generation: u64) -> u64 {
    ring_hash(format!("{sandbox}/{generation}").as_bytes())
}

/// A sorted ring of `(point, member id)`; derived data, rebuilt from the
/// member table and never serialized.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    /// Sorted by `(point, member id)`.
    points: Vec<(u64, String)>,
}

impl Ring {
    /// Builds a ring over the given member ids.
    pub fn new<'a>(members: impl IntoIterator<Item = &'a str>) -> Ring {
        let mut points = Vec::new();
        for m in members {
            for v in 0..VNODES_PER_MEMBER {
                points.push((vnode_point(m, v), m.to_string()));
            }
        }
        points.sort();
        Ring { points }
    }

    /// Adds a member's virtual nodes (no-op if already present is the
    /// caller's concern: the pool only calls this for new member ids).
    pub fn add(&mut self, member: &str) {
        for v in 0..VNODES_PER_MEMBER {
            self.points
                .push((vnode_point(member, v), member.to_string()));
        }
        self.points.sort();
    }

    /// Removes a member's virtual nodes (garbage collection of a departed
    /// member).
    pub fn remove(&mut self, member: &str) {
        self.points.retain(|(_, m)| m != member);
    }

    /// Number of points on the ring.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True if the ring has no points.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Walks clockwise from `point` and returns the first member id for which
    /// `accept` returns true. Each member is asked at most once.
    pub fn walk(&self, point: u64, mut accept: impl FnMut(&str) -> bool) -> Option<&str> {
        if self.points.is_empty() {
            return None;
        }
        let start = self.points.partition_point(|(p, _)| *p < point);
        let n = self.points.len();
        // Members refused so far; small in practice (walks end early).
        let mut refused: Vec<&str> = Vec::new();
        for i in 0..n {
            let (_, m) = &self.points[(start + i) % n];
            let m = m.as_str();
            if refused.contains(&m) {
                continue;
            }
            if accept(m) {
                return Some(m);
            }
            refused.push(m);
        }
        None
    }
}

/// Naive reference placement (used by tests and the benchmark): for every
/// accepted member, compute its smallest clockwise distance from `point` over
/// its virtual nodes; the smallest `(distance, member id)` wins.
pub fn naive_place<'a>(
    members: &[&'a str],
    point: u64,
    accept: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    members
        .iter()
        .filter(|m| accept(m))
        .map(|m| {
            let d = (0..VNODES_PER_MEMBER)
                .map(|v| vnode_point(m, v).wrapping_sub(point))
                .min()
                .unwrap_or(u64::MAX);
            (d, *m)
        })
        .min()
        .map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED_A0: u64 = 13_381_881_994_556_204_389;

    #[test]
    fn fnv_known_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        // Pinned so an accidental change of the ring hash fails loudly.
        assert_eq!(ring_hash(b"a#0"), PINNED_A0);
    }
}
