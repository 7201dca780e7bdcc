//! The shared end-to-end harness of gateway-plugin (included by path until
//! it becomes a test-kit crate) plus [`cli`], the helpers that drive the
//! `openshell-pool` binary.
#![allow(dead_code, unused_imports)]

#[path = "../../../gateway-plugin/tests/common/mod.rs"]
mod shared;

pub mod cli;

pub use shared::*;
