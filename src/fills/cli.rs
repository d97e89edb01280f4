//! `tickgate fills apply`: JSON-lines events from a file or standard input.

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {}

pub fn apply_main(_args: ApplyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
