//! The records a sandbox generation and a launch leave in the pool state
//! (`Sandbox` with its `Phase`, `Owner`, `Recovery` and `Report`/`Runtime`
//! parts, and `LaunchOutcome`): their own file so that the tables that
//! index them (`crate::table`) and the state that holds the tables
//! (`crate::state`, which re-exports them) import them without importing
//! each other.

/// A sandbox generation's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Admitted and placed; the first owner has not acknowledged yet.
    Admitting,
    /// Owner acknowledged the current term.
    Assigned,
    /// Owner changed (takeover or move); the new owner has not acknowledged.
    Recovering,
    /// Stop requested; no recovery or move any more (I8).
    Stopping,
    /// Deleted; terminal (I8).
    Deleted,
    /// Recovery, launch or runtime failed (see `Sandbox::failure`); terminal.
    Failed,
}

impl Phase {
    /// Phases that hold a capacity slot on the owner (I5).
    pub fn is_charged(self) -> bool {
        matches!(
            self,
            Phase::Admitting | Phase::Assigned | Phase::Recovering | Phase::Stopping
        )
    }

    /// Phases where ownership may still change (takeover / move).
    pub fn is_movable(self) -> bool {
        matches!(self, Phase::Admitting | Phase::Assigned | Phase::Recovering)
    }
}

/// The owner of a sandbox generation. There is exactly one per sandbox
/// record (I1 by construction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Member id.
    pub member: String,
    /// Member incarnation.
    pub incarnation: u64,
    /// Ownership term; +1 on every owner change (I1).
    pub term: u64,
    /// Credential epoch; +1 on every owner change (I2).
    pub credential_epoch: u64,
    /// True once the owner acknowledged `term` (I3).
    pub acknowledged: bool,
}

/// Why a sandbox is recovering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryCause {
    /// The previous owner was dead or draining.
    Takeover,
    /// A planned move of this operation.
    Move(String),
}

/// An in-progress recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The new owner must acknowledge before this tick.
    pub deadline_tick: u64,
    /// Why.
    pub cause: RecoveryCause,
}

/// The last accepted report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportRecord {
    /// Reporter member.
    pub member: String,
    /// Reporter incarnation.
    pub incarnation: u64,
    /// Term the report was made under.
    pub term: u64,
    /// Opaque status.
    pub status: String,
    /// Raft log index that accepted it: reports are ordered by this, never by
    /// a clock.
    pub index: u64,
}

/// How to reach a sandbox generation's runtime (recorded by the leader's
/// launcher through `RecordRuntime`; docs/design/0003). Recorded at most once
/// per generation and never replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// The runtime's name (a DNS label): the server name its certificate
    /// carries, which a supervisor verifies whatever IP it dials.
    pub name: String,
    /// `host:port` the runtime listens on.
    pub address: String,
    /// PEM of the CA certificate that signed the runtime's certificate.
    pub ca_pem: String,
    /// The raft log index that recorded it (0: recorded before the index
    /// was kept). The launcher counts a runtime as lost only when a list
    /// it took after this index misses it: a list taken before the record
    /// (a deposed leader's, a slow driver call's) says nothing about it.
    pub recorded_index: u64,
    /// The scope of the driver that listed it (empty: recorded before
    /// scopes were kept). A launcher whose driver has another scope cannot
    /// see this runtime, so never judges it lost.
    pub driver_scope: String,
}

/// A sandbox generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// Sandbox id.
    pub id: String,
    /// Generation (1 for the first launch of this id).
    pub generation: u64,
    /// Phase.
    pub phase: Phase,
    /// Owner.
    pub owner: Owner,
    /// Set while recovering.
    pub recovery: Option<Recovery>,
    /// Last accepted report.
    pub last_report: Option<ReportRecord>,
    /// The launch that admitted it.
    pub launch_id: String,
    /// Launch material reference; empty once not live (I5).
    pub material_ref: String,
    /// Failure reason if failed.
    pub failure: Option<String>,
    /// This generation's runtime endpoint, once the leader's launcher
    /// recorded it (kept after the generation ends, so the launcher knows
    /// what to delete; a new generation starts without one).
    pub runtime: Option<Runtime>,
    /// The tick it became terminal (deleted or failed; the first of the
    /// two): garbage collection removes the record a retention later.
    pub ended_tick: Option<u64>,
}

/// The recorded outcome of a launch id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchOutcome {
    /// Admitted as this sandbox generation.
    Admitted {
        /// Sandbox id.
        sandbox: String,
        /// Generation.
        generation: u64,
        /// The tick the generation ended (deleted or failed): the record
        /// is collected a retention later, and the launch id may then be
        /// admitted again.
        ended_tick: Option<u64>,
    },
    /// Refused; tombstone (no sandbox, charge or material, I5).
    Refused {
        /// Sandbox id asked for.
        sandbox: String,
        /// Why (display text of the reason).
        reason: String,
        /// The tick it was refused: the tombstone is collected a retention
        /// later, and the launch id may then be admitted.
        tick: u64,
    },
}
