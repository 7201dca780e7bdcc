//! [`AttachRefusal`] on the wire: a gateway that refuses a supervisor's
//! hello, or closes its attached stream, because of the incarnation says
//! which case it is in the error status's metadata (key
//! [`REFUSAL_KEY`], value the enum name), so the supervisor decides from a
//! typed value rather than from the human-readable message.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::supervisor_host::AttachRefusal;

/// The metadata key of the refusal.
pub const REFUSAL_KEY: &str = "openshell-attach-refusal";

/// A status with `code` and `message` that carries `refusal`.
pub fn refusal_status(code: Code, message: impl Into<String>, refusal: AttachRefusal) -> Status {
    let mut status = Status::new(code, message);
    status.metadata_mut().insert(
        REFUSAL_KEY,
        MetadataValue::from_static(refusal.as_str_name()),
    );
    status
}

/// The refusal a status carries, if any (unknown names read as none).
pub fn refusal_of(status: &Status) -> Option<AttachRefusal> {
    let value = status.metadata().get(REFUSAL_KEY)?.to_str().ok()?;
    AttachRefusal::from_str_name(value).filter(|r| *r != AttachRefusal::Unspecified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_survives_the_status_headers_and_text_alone_is_not_one() {
        for refusal in [
            AttachRefusal::IncarnationRetired,
            AttachRefusal::IncarnationSuperseded,
        ] {
            let status = refusal_status(Code::FailedPrecondition, "why", refusal);
            // What the client rebuilds from the response's headers/trailers.
            let mut headers = tonic::codegen::http::HeaderMap::new();
            status
                .add_header(&mut headers)
                .unwrap_or_else(|e| panic!("{e}"));
            let received =
                Status::from_header_map(&headers).unwrap_or_else(|| panic!("no status decoded"));
            assert_eq!(refusal_of(&received), Some(refusal));
        }
        assert_eq!(
            refusal_of(&Status::failed_precondition("incarnation retired")),
            None
        );
        let mut odd = Status::failed_precondition("x");
        odd.metadata_mut()
            .insert(REFUSAL_KEY, MetadataValue::from_static("SOMETHING_ELSE"));
        assert_eq!(refusal_of(&odd), None);
    }
}
