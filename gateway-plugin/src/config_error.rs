//! What every part of the gateway configuration reports: [`ConfigError`]
//! and the range check the validations share, both from `gateway-config`
//! (the configuration as read and written), re-exported here so that the
//! sections' validation (`config_*.rs`) imports one leaf.

pub use gateway_config::error::{in_range, ConfigError};
