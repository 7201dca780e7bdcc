//! The runtime's session state machine: which supervisor is active, at which
//! credential epoch, and whether the workload still runs.
//!
//! Pure: every method takes `now` and does no I/O, so the rules are unit
//! tested without processes. The gRPC service holds one [`Core`] behind a
//! mutex and calls [`Core::enforce_deadline`] before every decision, so a
//! recovery deadline that has passed is honoured even if the ticker has not
//! run yet.

use std::time::{Duration, Instant};

use proto::sandbox_runtime::Grant;

/// Stop reason when no supervisor activated before the recovery deadline.
pub const STOP_RECOVERY_FAILED: &str = "SupervisorRecoveryFailed";
/// Stop reason after a release grant.
pub const STOP_RELEASED: &str = "released";

/// Why a session operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The grant's credential epoch is older than the current one (I2).
    #[error("credential epoch {presented} is older than the current epoch {current}")]
    StaleEpoch {
        /// Epoch in the grant.
        presented: u64,
        /// The runtime's current epoch.
        current: u64,
    },
    /// The current epoch belongs to another member incarnation.
    #[error(
        "credential epoch {credential_epoch} is held by member {member} incarnation {incarnation}; \
         another supervisor needs a higher epoch"
    )]
    EpochHeld {
        /// The current epoch.
        credential_epoch: u64,
        /// Member that holds it.
        member: String,
        /// Its incarnation.
        incarnation: u64,
    },
    /// The workload was stopped; nothing revives it (I8).
    #[error("workload stopped ({reason}); nothing revives it")]
    Stopped {
        /// The stop reason.
        reason: String,
    },
    /// The token is not the current session's.
    #[error("fenced or unknown session")]
    UnknownSession,
}

/// The runtime's state as `Status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusView {
    /// supervised, unsupervised or stopped.
    pub state: &'static str,
    /// Active member (empty unless supervised).
    pub active_member: String,
    /// Active incarnation (0 unless supervised).
    pub active_incarnation: u64,
    /// Current credential epoch.
    pub credential_epoch: u64,
    /// Term of the grant that set the current epoch.
    pub term: u64,
    /// Time unsupervised (0 while supervised or stopped).
    pub unsupervised_ms: u64,
    /// Why the workload stopped (empty while running).
    pub stop_reason: String,
}

#[derive(Debug, Clone)]
struct Session {
    token: String,
    member: String,
    incarnation: u64,
    last_heartbeat: Instant,
}

/// The session state machine.
#[derive(Debug)]
pub struct Core {
    heartbeat_timeout: Duration,
    recovery_deadline: Duration,
    credential_epoch: u64,
    term: u64,
    /// Member incarnation that holds the current epoch (set by activation,
    /// kept across relinquish so that holder may re-attach).
    holder: Option<(String, u64)>,
    session: Option<Session>,
    /// Start of the unsupervised period while there is no session.
    unsupervised_since: Instant,
    stop_reason: Option<String>,
}

/// Constant-time comparison of session tokens.
fn token_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Core {
    /// A runtime that started at `now`, unsupervised, at epoch 0.
    pub fn new(heartbeat_timeout: Duration, recovery_deadline: Duration, now: Instant) -> Self {
        Core {
            heartbeat_timeout,
            recovery_deadline,
            credential_epoch: 0,
            term: 0,
            holder: None,
            session: None,
            unsupervised_since: now,
            stop_reason: None,
        }
    }

    /// Since when the runtime is unsupervised, `None` while supervised or
    /// stopped.
    fn unsupervised_since(&self, now: Instant) -> Option<Instant> {
        if self.stop_reason.is_some() {
            return None;
        }
        match &self.session {
            Some(s) => {
                let lapse = s.last_heartbeat + self.heartbeat_timeout;
                (now > lapse).then_some(lapse)
            }
            None => Some(self.unsupervised_since),
        }
    }

    /// Stops the runtime when it has been unsupervised for longer than the
    /// recovery deadline. Returns true when this call stopped it (the caller
    /// then stops the workload process).
    pub fn enforce_deadline(&mut self, now: Instant) -> bool {
        match self.unsupervised_since(now) {
            Some(since) if now.saturating_duration_since(since) > self.recovery_deadline => {
                self.stop_reason = Some(STOP_RECOVERY_FAILED.to_string());
                true
            }
            _ => false,
        }
    }

    /// When the recovery deadline will pass if nothing changes.
    pub fn deadline_at(&self, now: Instant) -> Option<Instant> {
        if self.stop_reason.is_some() {
            return None;
        }
        let since = match &self.session {
            Some(s) => s.last_heartbeat + self.heartbeat_timeout,
            None => self.unsupervised_since,
        };
        Some((since + self.recovery_deadline).max(now))
    }

    /// The stop reason, if stopped.
    pub fn stop_reason(&self) -> Option<&str> {
        self.stop_reason.as_deref()
    }

    /// Activates the grant's member incarnation with a new session `token`.
    /// The grant must already be verified, addressed to this sandbox and not
    /// a release grant.
    ///
    /// # Errors
    /// [`SessionError::Stopped`], [`SessionError::StaleEpoch`] or
    /// [`SessionError::EpochHeld`].
    pub fn activate(
        &mut self,
        grant: &Grant,
        token: String,
        now: Instant,
    ) -> Result<(), SessionError> {
        if let Some(reason) = &self.stop_reason {
            return Err(SessionError::Stopped {
                reason: reason.clone(),
            });
        }
        if grant.credential_epoch < self.credential_epoch {
            return Err(SessionError::StaleEpoch {
                presented: grant.credential_epoch,
                current: self.credential_epoch,
            });
        }
        if grant.credential_epoch == self.credential_epoch {
            if let Some((member, incarnation)) = &self.holder {
                if *member != grant.member_id || *incarnation != grant.incarnation {
                    return Err(SessionError::EpochHeld {
                        credential_epoch: self.credential_epoch,
                        member: member.clone(),
                        incarnation: *incarnation,
                    });
                }
            }
        }
        self.credential_epoch = grant.credential_epoch;
        self.term = grant.term;
        self.holder = Some((grant.member_id.clone(), grant.incarnation));
        self.session = Some(Session {
            token,
            member: grant.member_id.clone(),
            incarnation: grant.incarnation,
            last_heartbeat: now,
        });
        Ok(())
    }

    fn session_mut(&mut self, token: &str) -> Result<&mut Session, SessionError> {
        match &mut self.session {
            Some(s) if token_eq(&s.token, token) => Ok(s),
            _ => Err(SessionError::UnknownSession),
        }
    }

    /// Records a heartbeat of the current session. A heartbeat after the
    /// workload stopped is accepted (the caller reports the stopped
    /// workload) but revives nothing.
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] for any token but the current one.
    pub fn heartbeat(&mut self, token: &str, now: Instant) -> Result<(), SessionError> {
        let stopped = self.stop_reason.is_some();
        let session = self.session_mut(token)?;
        if !stopped {
            session.last_heartbeat = now;
        }
        Ok(())
    }

    /// Ends the current session (planned move): unsupervised time starts
    /// (or continues, if the session had already lapsed).
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] for any token but the current one.
    pub fn relinquish(&mut self, token: &str, now: Instant) -> Result<(), SessionError> {
        let timeout = self.heartbeat_timeout;
        let session = self.session_mut(token)?;
        let lapse = session.last_heartbeat + timeout;
        self.unsupervised_since = now.min(lapse);
        self.session = None;
        Ok(())
    }

    /// Checks that `token` may run commands.
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] or [`SessionError::Stopped`].
    pub fn check_exec(&mut self, token: &str) -> Result<(), SessionError> {
        let reason = self.stop_reason.clone();
        self.session_mut(token)?;
        match reason {
            Some(reason) => Err(SessionError::Stopped { reason }),
            None => Ok(()),
        }
    }

    /// Applies a verified release grant for this sandbox. Returns true when
    /// this call stopped the runtime (false when it was already stopped).
    ///
    /// # Errors
    /// [`SessionError::StaleEpoch`] for a grant older than the current epoch.
    pub fn release(&mut self, grant: &Grant) -> Result<bool, SessionError> {
        if grant.credential_epoch < self.credential_epoch {
            return Err(SessionError::StaleEpoch {
                presented: grant.credential_epoch,
                current: self.credential_epoch,
            });
        }
        if self.stop_reason.is_some() {
            return Ok(false);
        }
        self.stop_reason = Some(STOP_RELEASED.to_string());
        Ok(true)
    }

    /// The workload process exited; records why unless a stop was already
    /// decided (then that reason stands).
    pub fn workload_exited(&mut self, reason: String) {
        if self.stop_reason.is_none() {
            self.stop_reason = Some(reason);
        }
    }

    /// Stops for `reason` (e.g. runtime shutdown) unless already stopped.
    /// Returns true when this call stopped it.
    pub fn stop(&mut self, reason: &str) -> bool {
        if self.stop_reason.is_some() {
            return false;
        }
        self.stop_reason = Some(reason.to_string());
        true
    }

    /// The state as `Status` reports it.
    pub fn status(&self, now: Instant) -> StatusView {
        let mut view = StatusView {
            state: "supervised",
            active_member: String::new(),
            active_incarnation: 0,
            credential_epoch: self.credential_epoch,
            term: self.term,
            unsupervised_ms: 0,
            stop_reason: self.stop_reason.clone().unwrap_or_default(),
        };
        if self.stop_reason.is_some() {
            view.state = "stopped";
        } else if let Some(since) = self.unsupervised_since(now) {
            view.state = "unsupervised";
            view.unsupervised_ms =
                u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX);
        } else if let Some(s) = &self.session {
            view.active_member = s.member.clone();
            view.active_incarnation = s.incarnation;
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HB: Duration = Duration::from_millis(1000);
    const DEADLINE: Duration = Duration::from_millis(5000);

    fn grant(member: &str, incarnation: u64, credential_epoch: u64) -> Grant {
        Grant {
            sandbox_id: "sb".into(),
            generation: 1,
            member_id: member.into(),
            incarnation,
            term: credential_epoch + 10,
            credential_epoch,
            log_index: 1,
            release: false,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn higher_epoch_fences_and_stale_or_foreign_epochs_are_refused() {
        let t0 = Instant::now();
        let mut core = Core::new(HB, DEADLINE, t0);
        assert_eq!(core.status(t0).state, "unsupervised");
        assert_eq!(core.activate(&grant("m1", 1, 1), "a".into(), t0), Ok(()));
        assert_eq!(core.heartbeat("a", t0), Ok(()));
        let s = core.status(t0);
        assert_eq!(
            (
                s.state,
                s.active_member.as_str(),
                s.credential_epoch,
                s.term
            ),
            ("supervised", "m1", 1, 11)
        );
        assert_eq!(core.activate(&grant("m2", 1, 2), "b".into(), t0), Ok(()));
        assert_eq!(core.heartbeat("a", t0), Err(SessionError::UnknownSession));
        assert_eq!(core.check_exec("a"), Err(SessionError::UnknownSession));
        assert_eq!(core.check_exec("b"), Ok(()));
        assert_eq!(
            core.activate(&grant("m1", 1, 1), "c".into(), t0),
            Err(SessionError::StaleEpoch {
                presented: 1,
                current: 2
            })
        );
        assert!(matches!(
            core.activate(&grant("m3", 1, 2), "c".into(), t0),
            Err(SessionError::EpochHeld { .. })
        ));
        assert!(matches!(
            core.activate(&grant("m2", 2, 2), "c".into(), t0),
            Err(SessionError::EpochHeld { .. })
        ));
        // Re-attach: same member incarnation, same epoch, new token.
        assert_eq!(core.activate(&grant("m2", 1, 2), "c".into(), t0), Ok(()));
        assert_eq!(core.heartbeat("b", t0), Err(SessionError::UnknownSession));
        assert_eq!(core.heartbeat("c", t0), Ok(()));
        assert_eq!(core.heartbeat("", t0), Err(SessionError::UnknownSession));
    }

    #[test]
    fn recovery_deadline_counts_from_start_lapse_and_relinquish() {
        let t0 = Instant::now();
        let mut core = Core::new(HB, DEADLINE, t0);
        assert!(!core.enforce_deadline(t0 + ms(5000)));
        assert_eq!(core.status(t0 + ms(4000)).unsupervised_ms, 4000);
        assert!(core
            .activate(&grant("m1", 1, 1), "a".into(), t0 + ms(4000))
            .is_ok());
        assert_eq!(core.status(t0 + ms(4500)).state, "supervised");
        // Lapsed at 5000, deadline passes after 10000.
        assert_eq!(core.status(t0 + ms(6000)).unsupervised_ms, 1000);
        assert!(!core.enforce_deadline(t0 + ms(10_000)));
        // A heartbeat before the deadline resumes supervision.
        assert!(core.heartbeat("a", t0 + ms(9000)).is_ok());
        assert_eq!(core.status(t0 + ms(9500)).state, "supervised");
        assert!(core.relinquish("a", t0 + ms(9500)).is_ok());
        assert_eq!(
            core.heartbeat("a", t0 + ms(9500)),
            Err(SessionError::UnknownSession)
        );
        assert_eq!(core.status(t0 + ms(10_500)).unsupervised_ms, 1000);
        assert_eq!(core.deadline_at(t0 + ms(10_500)), Some(t0 + ms(14_500)));
        assert!(!core.enforce_deadline(t0 + ms(14_500)));
        assert!(core.enforce_deadline(t0 + ms(14_501)));
        assert!(!core.enforce_deadline(t0 + ms(20_000)), "stops once");
        assert_eq!(core.stop_reason(), Some(STOP_RECOVERY_FAILED));
        assert_eq!(core.status(t0 + ms(20_000)).state, "stopped");
        assert!(matches!(
            core.activate(&grant("m1", 1, 9), "z".into(), t0),
            Err(SessionError::Stopped { .. })
        ));
    }

    #[test]
    fn release_wins_and_a_later_exit_keeps_the_reason() {
        let t0 = Instant::now();
        let mut core = Core::new(HB, DEADLINE, t0);
        assert!(core.activate(&grant("m1", 1, 3), "a".into(), t0).is_ok());
        let mut release = grant("gw", 0, 2);
        release.release = true;
        assert_eq!(
            core.release(&release),
            Err(SessionError::StaleEpoch {
                presented: 2,
                current: 3
            })
        );
        release.credential_epoch = 3;
        assert_eq!(core.release(&release), Ok(true));
        assert_eq!(core.release(&release), Ok(false));
        core.workload_exited("workload exited: signal: 15".into());
        assert_eq!(core.stop_reason(), Some(STOP_RELEASED));
        assert!(core.heartbeat("a", t0).is_ok());
        assert!(matches!(
            core.check_exec("a"),
            Err(SessionError::Stopped { .. })
        ));
        assert!(matches!(
            core.activate(&grant("m1", 1, 4), "b".into(), t0),
            Err(SessionError::Stopped { .. })
        ));
    }
}
