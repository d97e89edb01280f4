//! What a `cboe-pitch` feed's recovery connections are doing, for the
//! `STATUS` listing: its Gap Request Proxy connection (recovery.md R4c)
//! and each unit's spin (R5c). The feed's writer publishes a [`Links`]
//! into the feed's [`SharedLinks`] now and then; the gate reads it when a
//! client asks for `STATUS`. Feeds of other venues have none, and their
//! listing is unchanged.
//!
//! Lines, after the feed's `FEED` line:
//!
//! ```text
//! GRP <feed> logged_in=<0|1> count_limit=<n> pause=<S|M|D|-> pause_left_ms=<n|->
//! UNIT <feed> <unit> spin=<none|idle|wanted|running>[:last_failure=<reason>] spin_wait_ms=<n|-> grp=<on|off|->
//! ```

use std::sync::{Arc, Mutex};

use crate::feed::check::{write_i64, write_u64};
use crate::feed::SnapshotFailure;

/// A feed's recovery connections, as its writer last saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Links {
    /// R4c: the Gap Request Proxy, when the feed has `grp`.
    pub grp: Option<GrpLink>,
    /// Every unit heard or named by `spin.servers`, by id.
    pub units: Vec<UnitLink>,
}

/// R4c: the feed's Gap Request Proxy connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpLink {
    pub logged_in: bool,
    /// The most messages one Gap Request asks for (`grp.max_count`, halved
    /// by each `C`).
    pub count_limit: u64,
    /// The refusal holding every Gap Request back (`S`, `M`, `D`) and
    /// until when (Unix ns).
    pub pause: Option<(u8, i64)>,
}

/// R5c: where a unit's spin stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpinLink {
    /// `spin.servers` names no server for the unit.
    NoServer,
    /// No spin needed.
    Idle,
    /// A spin is needed; the next attempt may start at `not_before`
    /// (the pace), `last_failure` the previous attempt's failure.
    Wanted {
        not_before: i64,
        last_failure: Option<SnapshotFailure>,
    },
    /// An attempt started at `since`.
    Running { since: i64 },
}

/// One unit of the feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitLink {
    pub unit: u8,
    pub spin: SpinLink,
    /// R4c `I`: `Some(true)` when the Gap Request Proxy does not serve the
    /// unit until its next session; `None` without a Gap Request Proxy.
    pub grp_off: Option<bool>,
}

/// The cell a feed's writer publishes into and the gate reads.
pub type SharedLinks = Arc<Mutex<Links>>;

/// Milliseconds from `now` to `until`, never below 0.
fn left_ms(out: &mut Vec<u8>, until: i64, now: i64) {
    write_i64(out, (until.saturating_sub(now) / 1_000_000).max(0));
}

impl Links {
    /// Appends the `GRP` and `UNIT` lines of feed `name` at `now` (Unix
    /// ns); nothing when the feed has neither a proxy nor units.
    pub fn write_lines(&self, name: &str, now: i64, out: &mut Vec<u8>) {
        if let Some(g) = &self.grp {
            out.extend_from_slice(b"GRP ");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b" logged_in=");
            out.push(if g.logged_in { b'1' } else { b'0' });
            out.extend_from_slice(b" count_limit=");
            write_u64(out, g.count_limit);
            out.extend_from_slice(b" pause=");
            match g.pause {
                Some((status, until)) if until > now => {
                    out.push(if status.is_ascii_graphic() {
                        status
                    } else {
                        b'?'
                    });
                    out.extend_from_slice(b" pause_left_ms=");
                    left_ms(out, until, now);
                }
                _ => out.extend_from_slice(b"- pause_left_ms=-"),
            }
            out.push(b'\n');
        }
        for u in &self.units {
            out.extend_from_slice(b"UNIT ");
            out.extend_from_slice(name.as_bytes());
            out.push(b' ');
            write_u64(out, u.unit as u64);
            out.extend_from_slice(b" spin=");
            let mut wait = None;
            match u.spin {
                SpinLink::NoServer => out.extend_from_slice(b"none"),
                SpinLink::Idle => out.extend_from_slice(b"idle"),
                SpinLink::Running { .. } => out.extend_from_slice(b"running"),
                SpinLink::Wanted {
                    not_before,
                    last_failure,
                } => {
                    out.extend_from_slice(b"wanted");
                    if let Some(f) = last_failure {
                        out.extend_from_slice(b":last_failure=");
                        out.extend_from_slice(f.as_str().as_bytes());
                    }
                    wait = Some(not_before);
                }
            }
            out.extend_from_slice(b" spin_wait_ms=");
            match wait {
                Some(t) => left_ms(out, t, now),
                None => out.push(b'-'),
            }
            out.extend_from_slice(b" grp=");
            out.extend_from_slice(match u.grp_off {
                None => b"-",
                Some(false) => b"on",
                Some(true) => b"off",
            });
            out.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_489_600_000_000_000;

    fn lines(l: &Links) -> String {
        let mut out = Vec::new();
        l.write_lines("cboe", NOW, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn nothing_without_links() {
        assert_eq!(lines(&Links::default()), "");
    }

    #[test]
    fn grp_and_units() {
        let l = Links {
            grp: Some(GrpLink {
                logged_in: true,
                count_limit: 25,
                pause: Some((b'S', NOW + 800_000_000)),
            }),
            units: vec![
                UnitLink {
                    unit: 1,
                    spin: SpinLink::Running { since: NOW - 5 },
                    grp_off: Some(false),
                },
                UnitLink {
                    unit: 2,
                    spin: SpinLink::Wanted {
                        not_before: NOW + 2_000_000_000,
                        last_failure: Some(SnapshotFailure::Silence),
                    },
                    grp_off: Some(true),
                },
                UnitLink {
                    unit: 3,
                    spin: SpinLink::NoServer,
                    grp_off: None,
                },
            ],
        };
        assert_eq!(
            lines(&l),
            "GRP cboe logged_in=1 count_limit=25 pause=S pause_left_ms=800\n\
             UNIT cboe 1 spin=running spin_wait_ms=- grp=on\n\
             UNIT cboe 2 spin=wanted:last_failure=silence spin_wait_ms=2000 grp=off\n\
             UNIT cboe 3 spin=none spin_wait_ms=- grp=-\n"
        );
    }

    #[test]
    fn a_pause_that_ended_is_not_shown() {
        let l = Links {
            grp: Some(GrpLink {
                logged_in: false,
                count_limit: 100,
                pause: Some((b'M', NOW - 1)),
            }),
            units: vec![],
        };
        assert_eq!(
            lines(&l),
            "GRP cboe logged_in=0 count_limit=100 pause=- pause_left_ms=-\n"
        );
    }
}
