//! Line skew (recovery.md, for choosing `gap_hold_us`): the time from a
//! packet's first copy to its second, once per packet. Sans-I/O: arrival
//! times are passed in.

/// Recent packets remembered (a ring indexed by sequence).
const RING: usize = 1024;

/// The first arrival of recent packets by sequence; the second copy reads
/// and clears its entry.
#[derive(Debug)]
pub struct LineSkew {
    first_copy: Box<[(u64, i64); RING]>,
}

impl Default for LineSkew {
    fn default() -> LineSkew {
        LineSkew {
            first_copy: Box::new([(0, 0); RING]),
        }
    }
}

impl LineSkew {
    /// Packet `seq`'s first copy arrived at `now`.
    #[inline]
    pub fn first(&mut self, seq: u64, now: i64) {
        self.first_copy[(seq as usize) % RING] = (seq, now);
    }

    /// Another copy of `seq` arrived at `now`: the skew, for its second
    /// copy only (`None` for a later copy or a packet no longer
    /// remembered).
    #[inline]
    pub fn second(&mut self, seq: u64, now: i64) -> Option<i64> {
        let e = &mut self.first_copy[(seq as usize) % RING];
        if e.0 != seq || e.1 == i64::MIN {
            return None;
        }
        let skew = now.saturating_sub(e.1).max(0);
        e.1 = i64::MIN;
        Some(skew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_once_per_packet_from_its_first_copy() {
        let mut s = LineSkew::default();
        s.first(7, 100);
        assert_eq!(s.second(7, 130), Some(30));
        assert_eq!(s.second(7, 140), None, "a third copy");
        assert_eq!(s.second(8, 140), None, "no first copy");
        s.first(9, 200);
        assert_eq!(s.second(9, 150), Some(0), "never negative");
        s.first(10, 300);
        s.first(10 + RING as u64, 400);
        assert_eq!(s.second(10, 500), None, "forgotten");
        assert_eq!(s.second(10 + RING as u64, 450), Some(50));
    }
}
