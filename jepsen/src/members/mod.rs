//! The pool workload's members (supervisors), of two kinds:
//!
//! - [`process`]: real `openshell-supervisor` processes in the run's members
//!   namespace, starting real `openshell-sandbox-runtime` processes; what
//!   those runtimes logged is read back by [`runtime_log`];
//! - [`scripted`]: scripted supervisors, tokio tasks in the harness on the
//!   real stream protocol (`testkit::member`), recording every join, grant,
//!   ack and report in the history.

pub mod process;
pub mod runtime_log;
pub mod scripted;
