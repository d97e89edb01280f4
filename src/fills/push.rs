//! `tickgate fills push`: the retrying client of fills.md.

#[derive(Debug, clap::Args)]
pub struct PushArgs {}

pub fn main(_args: PushArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
