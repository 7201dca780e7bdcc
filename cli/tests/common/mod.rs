//! What the CLI tests (t60–t62) share: the test kit, and [`cli`], the
//! helpers that drive the `openshell-pool` binary.
#![allow(dead_code, unused_imports)]

pub mod cli;

pub use testkit::bins;
pub use testkit::bins::gateway_bin;
pub use testkit::gateway::*;
pub use testkit::ports::free_port;
pub use testkit::TestResult;
