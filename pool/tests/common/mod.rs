//! Shared test harness: applies commands through the wire encoding, checks
//! that rejections change nothing, and asserts I1–I8 after every step.
#![allow(dead_code)]

use pool::*;

/// A replica under test.
pub struct H {
    pub st: PoolState,
    pub idx: u64,
    pub tracker: InvariantTracker,
    pub log: Vec<Vec<u8>>,
}

impl Default for H {
    fn default() -> Self {
        Self::new()
    }
}

impl H {
    pub fn new() -> H {
        H {
            st: PoolState::new(),
            idx: 0,
            tracker: InvariantTracker::new(),
            log: Vec::new(),
        }
    }

    /// Applies `c` like a raft replica would (encode, decode, apply).
    pub fn apply(&mut self, c: Command) -> Outcome {
        let before = self.st.encode_snapshot();
        self.idx += 1;
        let bytes = c.encode_to_vec();
        let decoded = Command::decode(&bytes).expect("decode own encoding");
        assert!(decoded == c, "command round trip");
        let o = self.st.apply(self.idx, &decoded);
        self.log.push(bytes);
        if o.is_rejected() {
            assert!(
                before == self.st.encode_snapshot(),
                "rejected {} changed state: {o:?}",
                c.name()
            );
        }
        if let Err(e) = self.st.check_invariants() {
            panic!("after {} -> {o:?}: {e}", c.name());
        }
        if let Err(e) = self.tracker.observe(&c, &self.st) {
            panic!("after {} -> {o:?}: {e}", c.name());
        }
        for pending_moves in [0, 1] {
            assert!(
                pool::coordinator::plan(&self.st, pending_moves)
                    == pool::coordinator::plan_by_scan(&self.st, pending_moves),
                "after {}: the indexed plan differs from the plan by scan",
                c.name()
            );
        }
        o
    }

    pub fn ok(&mut self, c: Command) -> Effect {
        match self.apply(c.clone()) {
            Outcome::Applied(e) => e,
            Outcome::Rejected(r) => panic!("{} rejected: {r}", c.name()),
        }
    }

    pub fn rejected(&mut self, c: Command) -> Reason {
        match self.apply(c.clone()) {
            Outcome::Applied(e) => panic!("{} applied: {e:?}", c.name()),
            Outcome::Rejected(r) => r,
        }
    }

    pub fn join(&mut self, m: &str, inc: u64, cap: u32) -> Outcome {
        self.apply(join(m, inc, cap))
    }

    pub fn tick(&mut self) {
        let n = self.st.now_tick();
        self.ok(Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: n,
        }));
    }

    pub fn ticks(&mut self, n: u64) {
        for _ in 0..n {
            self.tick();
        }
    }

    pub fn beat(&mut self, members: &[(&str, u64)]) -> Effect {
        self.ok(Command::Heartbeat(Heartbeat {
            beats: members
                .iter()
                .map(|(m, i)| Beat {
                    member: m.to_string(),
                    incarnation: *i,
                })
                .collect(),
        }))
    }

    pub fn launch(&mut self, lid: &str, sb: &str) -> Outcome {
        self.apply(launch(lid, sb))
    }

    pub fn owner(&self, sb: &str) -> Owner {
        self.st.sandbox(sb).expect("sandbox").owner.clone()
    }

    /// The current owner acknowledges its term.
    pub fn ack(&mut self, sb: &str) -> Outcome {
        let s = self.st.sandbox(sb).expect("sandbox").clone();
        self.apply(Command::Acknowledge(Acknowledge {
            sandbox: sb.to_string(),
            generation: s.generation,
            member: s.owner.member,
            incarnation: s.owner.incarnation,
            term: s.owner.term,
        }))
    }

    /// The current owner reports `status` under its current term.
    pub fn report(&mut self, sb: &str, status: &str) -> Outcome {
        let s = self.st.sandbox(sb).expect("sandbox").clone();
        self.apply(report(
            sb,
            s.generation,
            &s.owner.member,
            s.owner.incarnation,
            s.owner.term,
            status,
        ))
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.st.encode_snapshot()
    }

    /// Replays the log on a fresh state and compares snapshot bytes.
    pub fn assert_replay_identical(&self) {
        let mut fresh = PoolState::new();
        for (i, b) in self.log.iter().enumerate() {
            let c = Command::decode(b).expect("decode");
            fresh.apply(i as u64 + 1, &c);
        }
        assert!(
            fresh.encode_snapshot() == self.snapshot(),
            "replay diverged"
        );
    }
}

/// A legacy join (process id 0): the process names its incarnation, as
/// entries written before docs/design/0002 do.
pub fn join(m: &str, inc: u64, cap: u32) -> Command {
    Command::Join(Join {
        member: m.to_string(),
        uid: format!("uid-{m}-{inc}"),
        incarnation: inc,
        address: format!("{m}:7000"),
        capacity: cap,
        ..Join::default()
    })
}

/// A join of process `pid` that last held incarnation `known` (0: asks
/// for a new one); the pool assigns the incarnation.
pub fn join_process(m: &str, pid: u64, known: u64, cap: u32) -> Command {
    Command::Join(Join {
        member: m.to_string(),
        uid: format!("uid-{m}-{pid}"),
        address: format!("{m}:7000"),
        capacity: cap,
        process_id: pid,
        known_incarnation: known,
        ..Join::default()
    })
}

pub fn launch(lid: &str, sb: &str) -> Command {
    Command::Launch(Launch {
        launch_id: lid.to_string(),
        sandbox: sb.to_string(),
        material_ref: format!("material/{lid}"),
    })
}

pub fn report(sb: &str, generation: u64, m: &str, inc: u64, term: u64, status: &str) -> Command {
    Command::Report(Report {
        sandbox: sb.to_string(),
        generation,
        member: m.to_string(),
        incarnation: inc,
        term,
        status: status.to_string(),
    })
}

pub fn takeover_of(st: &PoolState, sb: &str) -> Command {
    let s = st.sandbox(sb).expect("sandbox");
    Command::Takeover(Takeover {
        raft_term: 0,
        sandbox: sb.to_string(),
        generation: s.generation,
        expected_owner: s.owner.member.clone(),
        expected_incarnation: s.owner.incarnation,
        expected_term: s.owner.term,
    })
}
