//! `cme-mdp3`: CME Group MDP 3.0, SBE over UDP (venues.md `cme-mdp3`).
//! `sbe` is the framing (packet header, MsgSize, SBE header, blocks and
//! groups as the wire lays them out); `templates` the decoders generated
//! from CME's schemas in `schema/` (versions 5 to 13) by
//! `tests/cme_sbe_codegen.rs`; `encode` writes packets from the same
//! layouts (the simulator, the tests). Sans-I/O.

pub mod adapter;
pub mod book;
pub mod channel;
pub mod channel_file;
pub mod encode;
pub mod instruments;
pub mod line_kind;
pub mod messages;
pub mod recovery;
pub mod sbe;
pub mod templates;

pub use adapter::CmeMdp3;
