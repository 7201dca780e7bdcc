//! Jepsen-only fault injection: the switch the `fault-skip-i4` feature adds.
//!
//! Without the feature `skip_i4()` is a constant `false` and nothing can turn
//! it on. With it, the fault is still off until the binary that embeds the
//! pool turns it on at start-up (the gateway: `OPENSHELL_FAULT=skip-i4`), so
//! one fault build serves every checker proof (jepsen/tests/t50, t55, t60).
//! When on, `apply_takeover` skips the I4 check and `owner_is_dead` calls an
//! active member dead once its heartbeat is older than half the TTL.

#[cfg(feature = "fault-skip-i4")]
static SKIP_I4: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the skip-I4 fault on or off (feature `fault-skip-i4` only).
#[cfg(feature = "fault-skip-i4")]
pub fn set_skip_i4(on: bool) {
    SKIP_I4.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// True while the skip-I4 fault is on.
#[cfg(feature = "fault-skip-i4")]
pub fn skip_i4() -> bool {
    SKIP_I4.load(std::sync::atomic::Ordering::SeqCst)
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-skip-i4"))]
pub const fn skip_i4() -> bool {
    false
}
