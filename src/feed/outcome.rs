//! What one datagram did, as the feed and its recovery driver answer it.

use crate::venue::DatagramError;

/// What one datagram did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramOutcome {
    /// Processed (blocks applied to the symbol rules, or a channel
    /// heartbeat / end of session taken into account).
    Applied,
    /// Invalid for the feed's venue (wire.md, venues.md): dropped whole,
    /// counted, no state changed.
    Invalid(DatagramError),
    /// C2: already delivered (by the other line).
    Duplicate,
    /// C5/C6: a packet of a replaced or ended session.
    StaleSession,
    /// `line` is not one of the feed's lines: ignored, nothing counted.
    UnknownLine,
    /// R1: beyond an open hole: kept until the hole is filled or declared.
    Held,
    /// Dropped and counted, nothing changed: an unbelievable channel jump
    /// (C3b), a stale end of session (C6), a re-request answer of another
    /// session or not a data packet (R4).
    Ignored,
}
