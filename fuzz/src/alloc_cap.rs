//! The capped global allocator: one allocation above [`MAX_ALLOCATION`]
//! fails, and Rust's allocation-failure handler aborts the process with
//! "memory allocation of N bytes failed". On Linux an oversized
//! `Vec::with_capacity` would otherwise succeed (memory is overcommitted and
//! never touched), so a decoder that trusts a length field would go
//! unnoticed; with the cap it is a crash AFL++ records and the replay test
//! reports.

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation a target may make: far above anything an
/// input of at most 1 MiB (AFL++'s limit) legitimately needs, far below the
/// 4 GiB a hostile length field claims.
pub const MAX_ALLOCATION: usize = 64 * 1024 * 1024;

/// The system allocator, refusing allocations above [`MAX_ALLOCATION`].
/// Install it with `#[global_allocator] static A: CappedAlloc = CappedAlloc;`.
pub struct CappedAlloc;

// SAFETY: every call is forwarded to `System` unchanged, except that an
// oversized request returns null, which `GlobalAlloc` allows.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `dealloc`; a null return leaves `ptr` valid.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
