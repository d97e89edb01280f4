//! Image (recovery.md R5): a picture of the channel from a server (a
//! snapshot), joined with the datagrams held meanwhile. Two sans-I/O
//! machines, `now` passed in:
//!
//! - [`Image`]: when an attempt is wanted and may start (late join, lost
//!   hole; the pace: backoff from each start, 1 s doubling to 60 s, back
//!   to 1 s after 60 s without need), what bounds the hold while one runs,
//!   and whether its end is plausible. States: [`SnapshotPhase`]. The
//!   driver (`Feed`) applies the picture and releases the hold.
//! - `ImageSession` (below): one attempt's conversation with the server
//!   through the venue's `ImageCodec`.

use super::hold::Limit;
use crate::feed::counters::RecoveryCounters;

/// R5: where a feed's snapshot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotPhase {
    /// No snapshot is needed (or the feed has no snapshot server).
    Idle,
    /// One is needed; the next attempt may start at `not_before`.
    Wanted { not_before: i64 },
    /// An attempt started at `since`: every datagram of the session is
    /// held until its `G` or its failure.
    Running { since: i64 },
}

/// R5: why a snapshot attempt failed (the I/O shell reports the
/// connection's failures; the core finds the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotFailure {
    /// The TCP connection was refused or could not be made.
    Refused,
    /// Login Rejected (`J`).
    LoginRejected,
    /// End of Session (`Z`) or the connection closed before `G`.
    Closed,
    /// 15 s without a whole packet from the server.
    Silence,
    /// 30 s without `G`.
    NoEndOfSnapshot,
    /// A packet or message that does not parse.
    Malformed,
    /// More than `SNAPSHOT_HOLD_MAX` datagrams, or more than
    /// `snapshot.hold_mib` of them, held meanwhile.
    HeldBound,
    /// The snapshot's own messages passed `snapshot.max_mib`.
    SnapshotBound,
    /// `G` is `max_channel_jump` or more beyond the furthest held datagram,
    /// or as far below the first one (C3b's rule for a snapshot).
    Implausible,
    /// The feed's session changed (or ended) during the attempt.
    SessionChanged,
}

impl SnapshotFailure {
    pub const ALL: [SnapshotFailure; 10] = [
        SnapshotFailure::Refused,
        SnapshotFailure::LoginRejected,
        SnapshotFailure::Closed,
        SnapshotFailure::Silence,
        SnapshotFailure::NoEndOfSnapshot,
        SnapshotFailure::Malformed,
        SnapshotFailure::HeldBound,
        SnapshotFailure::SnapshotBound,
        SnapshotFailure::Implausible,
        SnapshotFailure::SessionChanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotFailure::Refused => "refused",
            SnapshotFailure::LoginRejected => "login_rejected",
            SnapshotFailure::Closed => "closed_before_end",
            SnapshotFailure::Silence => "silence",
            SnapshotFailure::NoEndOfSnapshot => "no_end_of_snapshot",
            SnapshotFailure::Malformed => "malformed",
            SnapshotFailure::HeldBound => "held_bound",
            SnapshotFailure::SnapshotBound => "snapshot_bound",
            SnapshotFailure::Implausible => "implausible_end",
            SnapshotFailure::SessionChanged => "session_changed",
        }
    }

    /// Its place in `ALL` (counters, the feed view's reason code).
    pub fn index(self) -> usize {
        SnapshotFailure::ALL
            .iter()
            .position(|&f| f == self)
            .unwrap_or(0)
    }
}

/// R5: most datagrams held while a snapshot runs.
pub const SNAPSHOT_HOLD_MAX: usize = 1_000_000;
/// R5 "Pace": an attempt starts at the earliest this long after the
/// previous one started, doubling up to the maximum while attempts keep
/// being needed.
const SNAPSHOT_BACKOFF_MIN_NS: i64 = 1_000_000_000;
const SNAPSHOT_BACKOFF_MAX_NS: i64 = 60_000_000_000;
/// R5 "Pace": after this long without needing a snapshot, the backoff is
/// back to its minimum.
const SNAPSHOT_BACKOFF_RESET_NS: i64 = 60_000_000_000;

/// R5: the feed's image service: its phase, pace and last failure.
#[derive(Clone, Copy, Debug)]
pub struct Image {
    /// Whether the feed has an image server.
    enabled: bool,
    phase: SnapshotPhase,
    /// The wait between the next attempt's start and the one after it.
    backoff_ns: i64,
    /// The earliest start of the next attempt (the last start plus the
    /// backoff then): whatever ended the last one, none starts sooner.
    earliest_next: i64,
    /// Since when no snapshot has been needed (the last one applied), if
    /// one was ever started.
    idle_since: Option<i64>,
    last_failure: Option<SnapshotFailure>,
    /// `snapshot.hold_mib`, in bytes.
    hold_bytes: usize,
}

impl Image {
    pub fn new(enabled: bool, hold_bytes: usize) -> Image {
        Image {
            enabled,
            phase: SnapshotPhase::Idle,
            backoff_ns: SNAPSHOT_BACKOFF_MIN_NS,
            earliest_next: i64::MIN,
            idle_since: None,
            last_failure: None,
            hold_bytes,
        }
    }

    #[inline]
    pub fn phase(&self) -> SnapshotPhase {
        self.phase
    }

    pub fn last_failure(&self) -> Option<SnapshotFailure> {
        self.last_failure
    }

    #[inline]
    pub fn running(&self) -> bool {
        matches!(self.phase, SnapshotPhase::Running { .. })
    }

    /// R5: what the hold may keep while an attempt runs.
    pub fn hold_limit(&self) -> Limit {
        Limit::Image {
            packets: SNAPSHOT_HOLD_MAX,
            bytes: self.hold_bytes,
        }
    }

    /// R5: a late join or a lost hole: an attempt is wanted (on a feed
    /// with an image server, none wanted or running yet).
    pub fn want(&mut self, now: i64) {
        if self.enabled && self.phase == SnapshotPhase::Idle {
            if self
                .idle_since
                .is_some_and(|t| now.saturating_sub(t) >= SNAPSHOT_BACKOFF_RESET_NS)
            {
                // Pace: 60 s without needing one, back to the minimum.
                self.backoff_ns = SNAPSHOT_BACKOFF_MIN_NS;
            }
            self.phase = SnapshotPhase::Wanted {
                not_before: now.max(self.earliest_next),
            };
        }
    }

    /// R5: whether an attempt starts now (then `Running`).
    pub fn poll_start(&mut self, now: i64, counters: &mut RecoveryCounters) -> bool {
        match self.phase {
            SnapshotPhase::Wanted { not_before } if now >= not_before => {
                self.phase = SnapshotPhase::Running { since: now };
                // Pace: the next attempt, whatever ends this one, waits
                // the backoff from this start.
                self.earliest_next = now.saturating_add(self.backoff_ns);
                self.backoff_ns = (self.backoff_ns * 2).min(SNAPSHOT_BACKOFF_MAX_NS);
                counters.snapshots_started += 1;
                true
            }
            _ => false,
        }
    }

    /// R5: the running attempt failed (`false`: none was running); the
    /// next waits for its pace.
    pub fn failed(
        &mut self,
        why: SnapshotFailure,
        now: i64,
        counters: &mut RecoveryCounters,
    ) -> bool {
        if !self.running() {
            return false;
        }
        counters.snapshots_failed[why.index()] += 1;
        self.last_failure = Some(why);
        self.phase = SnapshotPhase::Wanted {
            not_before: now.max(self.earliest_next),
        };
        true
    }

    /// R5: the running attempt's image was applied at `now`. Pace: the
    /// backoff stays as it is until 60 s pass without need.
    pub fn applied(&mut self, now: i64, counters: &mut RecoveryCounters) {
        counters.snapshots_applied += 1;
        self.phase = SnapshotPhase::Idle;
        self.idle_since = Some(now);
        self.last_failure = None;
    }
}

/// R5: an end `next` that C3b's rule does not believe: `max_jump` or more
/// beyond the furthest held datagram (`furthest`: the channel's `next`
/// when nothing is held), or as far below the first one (`first`: the
/// channel's `next` when nothing is held).
pub fn implausible_end(next: u64, furthest: u64, first: u64, max_jump: u64) -> bool {
    let jump = max_jump.max(1);
    next >= furthest.saturating_add(jump) || next.saturating_add(jump) <= first
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn wanted_started_failed_and_paced_from_each_start() {
        let mut img = Image::new(true, 1 << 20);
        let mut c = RecoveryCounters::default();
        assert_eq!(img.phase(), SnapshotPhase::Idle);
        assert!(!img.poll_start(0, &mut c), "not wanted");
        img.want(10);
        assert_eq!(img.phase(), SnapshotPhase::Wanted { not_before: 10 });
        assert!(img.poll_start(10, &mut c));
        assert_eq!(img.phase(), SnapshotPhase::Running { since: 10 });
        assert!(img.running());
        img.want(11);
        assert!(
            img.running(),
            "wanting again changes nothing while one runs"
        );
        assert!(img.failed(SnapshotFailure::Refused, 20, &mut c));
        assert_eq!(img.last_failure(), Some(SnapshotFailure::Refused));
        // 1 s from the start, then 2 s from the next start.
        assert_eq!(img.phase(), SnapshotPhase::Wanted { not_before: 10 + S });
        assert!(!img.poll_start(S, &mut c));
        assert!(img.poll_start(10 + S, &mut c));
        assert!(img.failed(SnapshotFailure::Silence, 11 + S, &mut c));
        assert_eq!(
            img.phase(),
            SnapshotPhase::Wanted {
                not_before: 10 + 3 * S
            }
        );
        assert_eq!(c.snapshots_started, 2);
        assert_eq!(c.snapshots_failed[SnapshotFailure::Refused.index()], 1);
        assert_eq!(c.snapshots_failed[SnapshotFailure::Silence.index()], 1);
        assert!(
            !img.failed(SnapshotFailure::Silence, 12 + S, &mut c),
            "none running"
        );
    }

    #[test]
    fn the_backoff_doubles_to_a_minute_and_resets_after_a_minute_without_need() {
        let mut img = Image::new(true, 1 << 20);
        let mut c = RecoveryCounters::default();
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            img.want(now);
            let SnapshotPhase::Wanted { not_before } = img.phase() else {
                panic!("wanted");
            };
            waits.push(not_before - now);
            now = not_before;
            assert!(img.poll_start(now, &mut c));
            img.applied(now, &mut c);
        }
        assert_eq!(
            waits,
            [0, S, 2 * S, 4 * S, 8 * S, 16 * S, 32 * S, 60 * S],
            "applied, then needed again at once: paced all the same"
        );
        // 60 s without need: back to 1 s.
        now += 60 * S;
        img.want(now);
        assert!(img.poll_start(now, &mut c));
        img.applied(now, &mut c);
        img.want(now);
        assert_eq!(
            img.phase(),
            SnapshotPhase::Wanted {
                not_before: now + S
            }
        );
        assert_eq!(img.last_failure(), None);
        assert_eq!(c.snapshots_applied, 9);
    }

    #[test]
    fn a_feed_without_an_image_server_never_wants_one() {
        let mut img = Image::new(false, 0);
        img.want(5);
        assert_eq!(img.phase(), SnapshotPhase::Idle);
    }

    #[test]
    fn an_end_far_from_the_lines_is_implausible() {
        // Held 100..200, max jump 1,000.
        assert!(!implausible_end(150, 200, 100, 1_000));
        assert!(!implausible_end(1_199, 200, 100, 1_000));
        assert!(implausible_end(1_200, 200, 100, 1_000));
        assert!(implausible_end(1, 2_000, 1_001, 1_000));
        assert!(!implausible_end(2, 2_000, 1_001, 1_000));
    }

    #[test]
    fn the_hold_limit_is_the_images_own() {
        let img = Image::new(true, 4096);
        assert_eq!(
            img.hold_limit(),
            Limit::Image {
                packets: SNAPSHOT_HOLD_MAX,
                bytes: 4096
            }
        );
    }
}
