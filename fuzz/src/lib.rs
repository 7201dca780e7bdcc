//! Fuzz targets for every decoder that faces the network or the disk, the
//! seeds of their corpus, and the allocator cap that turns an unbounded
//! allocation into a crash.
//!
//! Each target is a plain function `fn(&[u8])` ([`targets::TARGETS`]). Three
//! callers share them, so a crash found by one is replayed by the others:
//!
//! - `fuzz-afl <target>` (feature `afl`, built by `cargo afl build`): the
//!   coverage-guided AFL++ harness `scripts/fuzz.sh` runs;
//! - `tests/t10_corpus_replay.rs`: a normal `cargo test` that replays every
//!   file under `corpus/<target>/` and `crashes/<target>/`;
//! - `fuzz-seeds <dir>`: writes the seed corpus from real encodings.
//!
//! The property every target checks: the decoder never panics, never makes
//! one allocation larger than [`alloc_cap::MAX_ALLOCATION`] (a length field
//! claiming 4 GiB must be refused before anything is allocated for it), and
//! returns its crate's typed error; where a value decodes, encoding it again
//! and decoding that gives the same value.
//!
//! # Layout
//!
//! - [`targets`]: the registry and one module per target.
//! - [`seeds`]: real encodings the corpus starts from.
//! - [`alloc_cap`]: the capped global allocator of the harness and the test.

pub mod alloc_cap;
pub mod seeds;
pub mod targets;

pub use alloc_cap::CappedAlloc;
pub use targets::{find, Target, TARGETS};
