//! [`MemberState`]: where a pool member is in its life, and its number on
//! every wire.
//!
//! The one definition of the concept. The snapshot (`MemberRecord.state`,
//! [`crate::snapshot`]) stores [`MemberState::tag`]; the API's
//! `openshell.pool_types.v1.MemberState` spells the same numbers (the
//! gateway's one conversion checks it in a unit test). The numbers are a
//! wire format: explicit, never reused, 0 is proto3's "never written".

/// A member's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum MemberState {
    /// In service.
    Active = 1,
    /// Being drained (or drained): receives no new sandboxes.
    Draining = 2,
    /// Left gracefully; its sandboxes are taken over.
    Leaving = 3,
    /// Missed heartbeats for the TTL; its sandboxes are taken over.
    Expired = 4,
}

impl MemberState {
    /// Every state, in tag order.
    pub const ALL: [MemberState; 4] = [
        MemberState::Active,
        MemberState::Draining,
        MemberState::Leaving,
        MemberState::Expired,
    ];

    /// The state's number on the wire.
    pub const fn tag(self) -> i32 {
        self as i32
    }

    /// The state numbered `tag`, if any (0 and unknown numbers: none).
    pub fn from_tag(tag: i32) -> Option<MemberState> {
        MemberState::ALL.into_iter().find(|s| s.tag() == tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers old snapshots hold.
    #[test]
    fn tags_are_fixed_and_round_trip() {
        let tags: Vec<i32> = MemberState::ALL.iter().map(|s| s.tag()).collect();
        assert_eq!(tags, [1, 2, 3, 4]);
        for state in MemberState::ALL {
            assert_eq!(MemberState::from_tag(state.tag()), Some(state));
        }
        assert_eq!(MemberState::from_tag(0), None);
        assert_eq!(MemberState::from_tag(5), None);
    }
}
