//! `tickgate demo` (to be written).

#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

pub fn demo_main(_args: DemoArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
