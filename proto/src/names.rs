//! The lowercase names of the pool enums (`assigned`, `active`), as the CLI
//! prints them and the Jepsen history records them: spelled here and nowhere
//! else. The protobuf names (`SANDBOX_PHASE_ASSIGNED`) stay the wire names of
//! the enums themselves.

use crate::pool_types::{MemberState, SandboxPhase};

impl SandboxPhase {
    /// The lowercase name: `admitting`, `assigned`, `recovering`, `stopping`,
    /// `deleted`, `failed` (`unspecified` for the zero value).
    pub fn name(self) -> &'static str {
        match self {
            SandboxPhase::Unspecified => "unspecified",
            SandboxPhase::Admitting => "admitting",
            SandboxPhase::Assigned => "assigned",
            SandboxPhase::Recovering => "recovering",
            SandboxPhase::Stopping => "stopping",
            SandboxPhase::Deleted => "deleted",
            SandboxPhase::Failed => "failed",
        }
    }

    /// The lowercase name of a phase as carried in a message (an `i32`); a
    /// value this build does not know is `unspecified`.
    pub fn name_of(value: i32) -> &'static str {
        SandboxPhase::try_from(value)
            .unwrap_or(SandboxPhase::Unspecified)
            .name()
    }
}

impl MemberState {
    /// The lowercase name: `active`, `draining`, `leaving`, `expired`
    /// (`unspecified` for the zero value).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Unspecified => "unspecified",
            MemberState::Active => "active",
            MemberState::Draining => "draining",
            MemberState::Leaving => "leaving",
            MemberState::Expired => "expired",
        }
    }

    /// The lowercase name of a state as carried in a message (an `i32`); a
    /// value this build does not know is `unspecified`.
    pub fn name_of(value: i32) -> &'static str {
        MemberState::try_from(value)
            .unwrap_or(MemberState::Unspecified)
            .name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_protobuf_names_lowercased_without_prefix() {
        for v in 0..=6 {
            let p = SandboxPhase::try_from(v).unwrap();
            let wire = p.as_str_name().strip_prefix("SANDBOX_PHASE_").unwrap();
            assert_eq!(p.name(), wire.to_ascii_lowercase());
            assert_eq!(SandboxPhase::name_of(v), p.name());
        }
        for v in 0..=4 {
            let s = MemberState::try_from(v).unwrap();
            let wire = s.as_str_name().strip_prefix("MEMBER_STATE_").unwrap();
            assert_eq!(s.name(), wire.to_ascii_lowercase());
        }
        assert_eq!(SandboxPhase::name_of(99), "unspecified");
        assert_eq!(MemberState::name_of(-1), "unspecified");
    }
}
