//! The daemon: wires feeds, the gate server, metrics and the fills lane together (I/O).

#[derive(Debug, clap::Args)]
pub struct RunArgs {}

pub fn run_main(_args: RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

pub fn demo_main(_args: DemoArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
