//! jepsen
