//! The TOML config file (`config/tickgate.toml` is the commented example).
//! Parsing and validation only: no sockets are opened here.

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The reliable lane; absent means switched off.
    pub fills: Option<crate::fills::config::FillsConfig>,
}
