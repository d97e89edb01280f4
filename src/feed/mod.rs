//! The market-data lane: channel rules (C1-C6), symbol rules (S1-S8), the
//! clock-offset estimator, the lock-free state table and the receiver.
//! Everything here but `receiver` is sans-I/O.

pub mod channel;
pub mod clock;
pub mod counters;
pub mod engine;
pub mod hold;
pub mod index;
pub mod prefetch;
pub mod reader;
pub mod receiver;
pub mod settings;
pub mod shm;
pub mod state;
pub mod table;
pub mod verdict;
pub mod view;

pub use counters::{
    FeedCounters, HoleTimeHistogram, LineCounters, RecoveryCounters, SymbolSummary,
    HOLE_TIME_BOUNDS_NS,
};
pub use engine::{DatagramOutcome, Feed};
pub use settings::{ClockOffset, FeedSettings, Liveness, Mode, Recovery, VenueKind, VenueSettings};
pub use view::{
    FeedView, NoPublish, Publish, SuspectCause, SymbolView, FEED_VIEW_WORDS, SYMBOL_VIEW_WORDS,
};
