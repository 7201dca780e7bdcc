//! The wall clock, simulated on the thread that runs a simulation.
//!
//! turmoil simulates tokio's clock, not the wall clock, and hyper's HTTP/2
//! server (under tonic's `Server`) stamps every response with a `date`
//! header read from `SystemTime::now()`. Its bytes reached the nodes and the
//! trace: the same seed gave another trace hash in another process (found
//! by `t20`, see `docs/design/0004-simulation.md`). tonic 0.14 does not
//! expose hyper's `auto_date_header(false)`.
//!
//! So, as madsim does, this crate defines `clock_gettime` itself: calls from
//! code linked into a binary that links this crate resolve here. On a
//! thread that runs a simulation ([`set`] by the driver before each step),
//! `CLOCK_REALTIME` answers [`EPOCH`] plus the simulated time, and the
//! monotonic clocks (`std::time::Instant`) [`MONOTONIC_EPOCH`] plus it: the
//! gateway's hub times supervisors' statuses with `Instant`, which must
//! follow the simulated schedule, not the machine running it. Every other
//! call goes to the kernel unchanged (the raw system call, so other threads
//! see the real time).

use std::cell::Cell;
use std::time::Duration;

/// The simulated wall clock at simulated time zero: 2000-01-01T00:00:00Z
/// (far from any real date, so a leak of real time shows).
pub const EPOCH: Duration = Duration::from_secs(946_684_800);

/// The simulated monotonic clock (`std::time::Instant`) at simulated time
/// zero: the gateway's own timers that read `Instant` (when a supervisor's
/// status last arrived, retry deadlines) follow simulated time, as tokio's
/// do.
pub const MONOTONIC_EPOCH: Duration = Duration::from_secs(1_000_000);

thread_local! {
    /// Simulated time elapsed, while this thread runs a simulation.
    static ELAPSED: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// Sets (or, with `None`, clears) this thread's simulated time.
pub fn set(elapsed: Option<Duration>) {
    ELAPSED.with(|cell| cell.set(elapsed));
}

/// `clock_gettime(2)`, with the wall and monotonic clocks simulated on a simulation's
/// thread (see the module doc).
///
/// # Safety
/// As `clock_gettime(2)`: `tp` must be valid for writing one `timespec`.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(
    clock: libc::clockid_t,
    tp: *mut libc::timespec,
) -> libc::c_int {
    let epoch = match clock {
        libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE => Some(EPOCH),
        libc::CLOCK_MONOTONIC
        | libc::CLOCK_MONOTONIC_COARSE
        | libc::CLOCK_MONOTONIC_RAW
        | libc::CLOCK_BOOTTIME => Some(MONOTONIC_EPOCH),
        _ => None,
    };
    let simulated = epoch.and_then(|epoch| {
        ELAPSED
            .try_with(Cell::get)
            .ok()
            .flatten()
            .map(|elapsed| epoch + elapsed)
    });
    match simulated {
        Some(now) if !tp.is_null() => {
            // SAFETY: the caller passes a valid, writable timespec.
            unsafe {
                (*tp).tv_sec = now.as_secs() as libc::time_t;
                (*tp).tv_nsec = now.subsec_nanos() as libc::c_long;
            }
            0
        }
        // SAFETY: the same arguments as the caller's, to the same call.
        _ => unsafe { libc::syscall(libc::SYS_clock_gettime, clock, tp) as libc::c_int },
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    /// A simulation's thread reads the simulated wall clock; other threads,
    /// and this one once cleared, read the real one.
    #[test]
    fn only_a_simulation_thread_reads_the_simulated_clocks() {
        let since_epoch = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
        };
        set(Some(Duration::from_millis(1_500)));
        assert_eq!(since_epoch(), EPOCH + Duration::from_millis(1_500));
        let other = std::thread::spawn(since_epoch).join().expect("thread");
        let twenty_years = Duration::from_secs(20 * 365 * 86_400);
        assert!(other > EPOCH + twenty_years, "real time: {other:?}");
        let start = std::time::Instant::now();
        set(Some(Duration::from_millis(4_000)));
        assert_eq!(since_epoch(), EPOCH + Duration::from_millis(4_000));
        assert_eq!(start.elapsed(), Duration::from_millis(2_500));
        set(None);
        assert!(since_epoch() > EPOCH + twenty_years);
    }
}
