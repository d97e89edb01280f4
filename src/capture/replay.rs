//! `tickgate replay`: a capture through the same core, capture time as the clock.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The capture (pcap or pcapng).
    pub capture: PathBuf,
}

pub fn main(_args: ReplayArgs) -> anyhow::Result<i32> {
    anyhow::bail!("replay is not implemented yet")
}
