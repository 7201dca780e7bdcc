//! Placement against a naive reference, and measured stability.

use pool::hash::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The ring walk equals the naive "smallest clockwise distance over all
    /// virtual nodes of accepted members", for any eligibility mask.
    #[test]
    fn ring_matches_naive_reference(n in 1usize..12, mask in any::<u16>(), keys in proptest::collection::vec((0u32..1000, 1u64..4), 1..30)) {
        let ids: Vec<String> = (0..n).map(|i| format!("member-{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let ring = Ring::new(refs.iter().copied());
        let accept = |m: &str| {
            let i: usize = m.trim_start_matches("member-").parse().unwrap_or(0);
            mask & (1 << i) != 0
        };
        for (k, g) in keys {
            let p = sandbox_point(&format!("sb-{k}"), g);
            prop_assert_eq!(ring.walk(p, accept), naive_place(&refs, p, accept));
        }
    }
}

fn placement(ids: &[String], keys: usize) -> Vec<String> {
    let ring = Ring::new(ids.iter().map(String::as_str));
    (0..keys)
        .map(|k| {
            ring.walk(sandbox_point(&format!("sb-{k}"), 1), |_| true)
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// Measured: joining one member to N moves about 1/(N+1) of the keys (only
/// onto the new member); removing one moves only that member's keys.
#[test]
fn placement_is_stable_when_members_join_and_leave() {
    let keys = 5000;
    for n in [4usize, 20, 50] {
        let mut ids: Vec<String> = (0..n).map(|i| format!("member-{i}")).collect();
        let before = placement(&ids, keys);
        ids.push("member-new".into());
        let after = placement(&ids, keys);
        let moved: Vec<usize> = (0..keys).filter(|&k| before[k] != after[k]).collect();
        assert!(
            moved.iter().all(|&k| after[k] == "member-new"),
            "a join moved keys between old members"
        );
        let share = moved.len() as f64 / keys as f64;
        let expected = 1.0 / (n as f64 + 1.0);
        eprintln!("join: n={n} moved share {share:.4} expected {expected:.4}");
        assert!(
            share < expected * 1.6 && share > expected * 0.4,
            "n={n}: share {share}"
        );
        // Leave: only the leaver's keys move.
        ids.remove(0);
        let after_leave = placement(&ids, keys);
        for k in 0..keys {
            if after[k] != "member-0" {
                assert_eq!(after[k], after_leave[k]);
            }
        }
    }
}

/// Load spread with 64 virtual nodes: the busiest member holds well under
/// twice the mean.
#[test]
fn load_spread_is_reasonable() {
    let ids: Vec<String> = (0..20).map(|i| format!("member-{i}")).collect();
    let p = placement(&ids, 20_000);
    let mut counts = std::collections::BTreeMap::new();
    for m in &p {
        *counts.entry(m.clone()).or_insert(0u32) += 1;
    }
    let max = *counts.values().max().unwrap_or(&0) as f64;
    let mean = 20_000.0 / 20.0;
    eprintln!("load: max/mean {:.3}", max / mean);
    assert!(max / mean < 1.6);
}
