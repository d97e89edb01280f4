//! The market-data lane's core: channel rules (C1-C6), symbol rules
//! (S1-S8), the clock-offset estimator, the check (`check`: request,
//! verdict, answer line) and the lock-free state table. Sans-I/O: the
//! receiver's sockets are in `net`.

pub mod across;
pub mod channel;
pub mod check;
pub mod clock;
pub mod counters;
pub mod engine;
pub mod index;
pub mod outcome;
pub mod reader;
pub mod recovery;
pub mod settings;
pub mod shm;
pub mod state;
pub mod table;
pub mod verdict;
pub mod view;

// The cache prefetch hints (used by `venue` too), under the name the feed's
// files use: `super::prefetch`.
use crate::util::prefetch;

pub use counters::{
    FeedCounters, LineCounters, NsHistogram, RecoveryCounters, SymbolSummary, NS_HISTOGRAM_BOUNDS,
};
pub use engine::{DatagramOutcome, Feed, RefillStatus, SnapshotFailure, SnapshotPhase};
pub use settings::{ClockOffset, FeedSettings, Liveness, Mode, Recovery, VenueKind, VenueSettings};
pub use view::{
    FeedView, NoPublish, Publish, SuspectCause, SymbolView, FEED_VIEW_WORDS, SYMBOL_VIEW_WORDS,
};
