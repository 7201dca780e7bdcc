//! Audit records: one structured log line (target `audit`, level info) for
//! every administrative call, naming the action, its outcome, the caller
//! and the objects it names. docs/security.md ("Audit records") is the
//! format's reference; a log pipeline selects the lines by their target.
//!
//! The caller is its role and a fingerprint of its bearer token (the first
//! 8 hex digits of the token's SHA-256, [`crate::auth::Caller`]), never the
//! token itself, plus the peer address of the connection. A call refused
//! for lack of a valid token never reaches a handler (the authentication
//! interceptor logs it as `request refused`), so it has no audit record.

use tonic::{Code, Request, Status};

use crate::auth::{Auth, Caller};
use crate::status::FORWARDED;

/// The `target` of every audit record.
pub const TARGET: &str = "audit";

/// One administrative call being audited: written once, by
/// [`Record::finish`] with the call's outcome, or, if the call ends before
/// that (an early return, a cancelled call), on drop with outcome `error`.
#[must_use = "an audit record is written by finish() or on drop"]
pub struct Record {
    /// What was asked (`sandbox.create`, `raft.add_learner`, ...).
    action: &'static str,
    /// Who asked.
    caller: Caller,
    /// The connection's peer address (`-` if unknown).
    peer: String,
    /// Whether another gateway forwarded the call here.
    forwarded: bool,
    /// The objects the call names (`field`, `value`).
    objects: Vec<(String, String)>,
    /// Written already.
    written: bool,
}

impl Record {
    /// Starts the record of `action` called with `request`, naming
    /// `objects` (`field`, `value`).
    pub fn start<T>(
        action: &'static str,
        auth: &Auth,
        request: &Request<T>,
        objects: &[(&str, &str)],
    ) -> Self {
        Record {
            action,
            caller: auth.caller(request),
            peer: request
                .remote_addr()
                .map_or_else(|| "-".to_string(), |a| a.to_string()),
            forwarded: request.metadata().contains_key(FORWARDED),
            objects: objects
                .iter()
                .map(|(field, value)| (field.to_string(), value.to_string()))
                .collect(),
            written: false,
        }
    }

    /// Starts the record of `action` taken by this gateway itself (the
    /// autopilot): role `autopilot`, no token, no peer.
    pub fn internal(action: &'static str, objects: &[(&str, &str)]) -> Self {
        Record {
            action,
            caller: Caller {
                role: "autopilot",
                token: "-".to_string(),
            },
            peer: "-".to_string(),
            forwarded: false,
            objects: objects
                .iter()
                .map(|(field, value)| (field.to_string(), value.to_string()))
                .collect(),
            written: false,
        }
    }

    /// Starts the record of `action` that a pool member asked for on its
    /// own authenticated supervisor stream (a stopping supervisor's drain
    /// and leave): the caller is role `supervisor`, token `-` (the member's
    /// credential is never fingerprinted here), peer the member id.
    pub fn member(action: &'static str, member: &str, objects: &[(&str, &str)]) -> Self {
        Record {
            action,
            caller: Caller {
                role: "supervisor",
                token: "-".to_string(),
            },
            peer: format!("member:{member}"),
            forwarded: false,
            objects: objects
                .iter()
                .map(|(field, value)| (field.to_string(), value.to_string()))
                .collect(),
            written: false,
        }
    }

    /// Names `field` as `value` (replacing what it named before): e.g. the
    /// id the gateway chose for a sandbox created without one.
    pub fn name(&mut self, field: &str, value: &str) {
        match self.objects.iter_mut().find(|(f, _)| f == field) {
            Some((_, v)) => *v = value.to_string(),
            None => self.objects.push((field.to_string(), value.to_string())),
        }
    }

    /// Passes `check` (the role check of a handler) on; a refusal is
    /// written as the record's outcome at once.
    pub fn check(&mut self, check: Result<(), Status>) -> Result<(), Status> {
        if let Err(status) = &check {
            self.write(outcome(status.code()), Some(status.code()));
        }
        check
    }

    /// Writes the record with outcome `ok` (for a handler that returns
    /// through several paths: see [`Record::check`] and the drop).
    pub fn ok(mut self) {
        self.write("ok", None);
    }

    /// Writes the record with `result`'s outcome and hands `result` back.
    pub fn finish<R>(mut self, result: Result<R, Status>) -> Result<R, Status> {
        match &result {
            Ok(_) => self.write("ok", None),
            Err(status) => self.write(outcome(status.code()), Some(status.code())),
        }
        result
    }

    fn write(&mut self, outcome: &str, code: Option<Code>) {
        self.written = true;
        let code = code.map_or_else(String::new, |c| format!("{c:?}"));
        let objects = self
            .objects
            .iter()
            .map(|(field, value)| format!("{field}={value:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        tracing::info!(
            target: TARGET,
            action = self.action,
            outcome,
            code = %code,
            role = self.caller.role,
            token = %self.caller.token,
            peer = %self.peer,
            forwarded = self.forwarded,
            objects = %objects,
            "audit"
        );
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if !self.written {
            self.write("error", None);
        }
    }
}

/// `refused` for a caller without the right (no valid token, no role),
/// `error` for every other failure.
fn outcome(code: Code) -> &'static str {
    match code {
        Code::Unauthenticated | Code::PermissionDenied => "refused",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes() {
        assert_eq!(outcome(Code::PermissionDenied), "refused");
        assert_eq!(outcome(Code::Unauthenticated), "refused");
        assert_eq!(outcome(Code::InvalidArgument), "error");
    }

    #[test]
    fn objects_are_quoted_and_the_token_is_not_kept() {
        let auth = Auth::new(["adm1n-s3cret".to_string()], []);
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("authorization", "Bearer adm1n-s3cret".parse().unwrap());
        let mut record = Record::start("sandbox.delete", &auth, &request, &[("sandbox_id", "a b")]);
        record.name("sandbox_id", "sb-1");
        assert_eq!(
            record.objects,
            [("sandbox_id".to_string(), "sb-1".to_string())]
        );
        assert_eq!(record.caller.role, "platform_admin");
        assert_eq!(record.caller.token.len(), 8);
        assert!(!record.caller.token.contains("s3cret"));
        record.written = true;
    }
}
