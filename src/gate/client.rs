//! Gate socket client: `tickgate check` and `tickgate status` (I/O).

#[derive(Debug, clap::Args)]
pub struct CheckArgs {}

pub fn check_main(_args: CheckArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {}

pub fn status_main(_args: StatusArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
