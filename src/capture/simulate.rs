//! `tickgate simulate`: a seeded synthetic provider writing a capture.

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {}

pub fn main(_args: SimulateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("simulate is not implemented yet")
}
