//! `tickgate record`: write what a feed's lines receive to a nanosecond pcap (I/O).

#[derive(Debug, clap::Args)]
pub struct RecordArgs {}

pub fn main(_args: RecordArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
