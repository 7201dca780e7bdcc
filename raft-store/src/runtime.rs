//! The async runtime openraft runs on: tokio, with an election-timeout
//! random generator that a simulation can seed.
//!
//! openraft 0.9 draws each election timeout from its runtime's
//! `thread_rng()` (`Config::new_rand_election_timeout`). Its own
//! `TokioRuntime` hands out `rand::thread_rng()`, which no caller can seed,
//! so two runs of the same simulated schedule would elect different leaders.
//! [`Runtime`] is `TokioRuntime` in every other respect (spawn, sleep,
//! timeouts, instants and oneshots are tokio's), and its generator is a
//! per-thread `StdRng` seeded from the operating system's entropy, as
//! `thread_rng()` is: a gateway behaves exactly as before. The simulation
//! (the `sim` crate) calls [`seed_thread_rng`] on its one thread before it
//! starts any node, and every election timeout then follows the seed.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    /// This thread's election-timeout generator (see the module doc).
    static ELECTION_RNG: RefCell<StdRng> = RefCell::new(StdRng::from_entropy());
}

/// Seeds this thread's election-timeout generator: every election timeout
/// openraft draws on this thread from now on follows `seed`. For
/// deterministic simulation only; a gateway never calls it.
pub fn seed_thread_rng(seed: u64) {
    ELECTION_RNG.with(|rng| *rng.borrow_mut() = StdRng::seed_from_u64(seed));
}

/// A handle on this thread's election-timeout generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRng;

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        ELECTION_RNG.with(|rng| rng.borrow_mut().next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        ELECTION_RNG.with(|rng| rng.borrow_mut().next_u64())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        ELECTION_RNG.with(|rng| rng.borrow_mut().fill_bytes(dest));
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        ELECTION_RNG.with(|rng| rng.borrow_mut().try_fill_bytes(dest))
    }
}

/// tokio, with a seedable election-timeout generator (see the module doc).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Runtime;

impl AsyncRuntime for Runtime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ThreadRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(tx), rx)
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    /// The same seed gives the same election timeouts, another seed others.
    #[test]
    fn a_seeded_thread_draws_the_same_timeouts() {
        let draw = |seed| {
            seed_thread_rng(seed);
            (0..8)
                .map(|_| Runtime::thread_rng().gen_range(150u64..300))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
