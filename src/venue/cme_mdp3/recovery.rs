//! What CME's snapshot loop asks of the feed's loops machine
//! (`feed::recovery::loops`, venues.md `cme-mdp3`, Snapshots): the entry
//! kept while an instrument waits, ranked by its RptSeq. The machine keeps
//! the waits, the entries and the coverage; the adapter adds what needs
//! the channel and the book: `m` below `next`, each side's levels 1, 2,
//! ... without a repeat, and any RptSeq for an instrument whose sequence
//! is not believed (`adapter.rs`, `snapshot`).

use super::messages::{BookEntry, EntryKind};

/// The default bound on kept entries, per feed (venues.md).
pub const DEFAULT_RECOVERY_ENTRIES: usize = 1_000_000;

/// An incremental entry kept while its instrument waits for a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptEntry {
    pub rpt_seq: u32,
    pub transact_time: u64,
    pub kind: EntryKind,
    pub book: Option<BookEntry>,
}
