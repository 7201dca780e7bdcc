//! One pool member of the workload, of either kind ([`crate::members`]):
//! what the fault loop and the final reads do to a member, whatever it is.

use crate::members::process::ProcessSupervisor;
use crate::members::scripted::ScriptedSupervisor;

/// One pool member of the workload.
pub enum PoolMember {
    /// An `openshell-supervisor` process.
    Process(ProcessSupervisor),
    /// A scripted supervisor.
    Scripted(ScriptedSupervisor),
}

impl PoolMember {
    pub(super) fn member(&self) -> &str {
        match self {
            PoolMember::Process(p) => p.member(),
            PoolMember::Scripted(s) => s.member(),
        }
    }

    pub(super) fn is_alive(&self) -> bool {
        match self {
            PoolMember::Process(p) => p.is_alive(),
            PoolMember::Scripted(s) => s.is_alive(),
        }
    }

    /// For nemesis messages: `incarnation N` or `pid N`.
    pub(super) fn describe(&self) -> String {
        match self {
            PoolMember::Process(p) => format!(
                "pid {}",
                p.pid().map(|p| p.to_string()).unwrap_or("-".into())
            ),
            PoolMember::Scripted(s) => format!("incarnation {}", s.incarnation()),
        }
    }

    pub(super) fn pause(&self) {
        match self {
            PoolMember::Process(p) => p.pause(),
            PoolMember::Scripted(s) => s.pause(),
        }
    }

    pub(super) fn resume(&self) {
        match self {
            PoolMember::Process(p) => p.resume(),
            PoolMember::Scripted(s) => s.resume(),
        }
    }

    pub(super) fn kill(&self) {
        match self {
            PoolMember::Process(p) => p.kill(),
            PoolMember::Scripted(s) => s.kill(),
        }
    }

    /// Starts a new incarnation.
    pub(super) fn restart(&self, seed: u64) -> anyhow::Result<()> {
        match self {
            PoolMember::Process(p) => p.restart(),
            PoolMember::Scripted(s) => {
                s.restart(seed);
                Ok(())
            }
        }
    }
}
