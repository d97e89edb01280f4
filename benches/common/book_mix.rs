//! The day-like operation stream of the book benches (`itch_book`,
//! `pitch_book`): 1,000,000 live orders over 8,000 symbols (about 62 per
//! side, prices within 50 ticks of a per-symbol mid), then adds (45%),
//! deletes (35%), replaces (10%), partial cancels (5%) and executions (5%)
//! near the top of book, refs sequential, half of the activity on 100 hot
//! symbols. Operations, not messages: each bench encodes them for its
//! venue.

use tickgate::venue::nasdaq_itch::messages::Side;

pub const LOCATES: usize = 8_000;
pub const HOT: usize = 100;
pub const LIVE: usize = 1_000_000;
pub const TICK: u32 = 100; // one cent, 4 implied decimals

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Add {
        locate: u16,
        order_ref: u64,
        side: Side,
        shares: u32,
        price: u32,
    },
    Execute {
        order_ref: u64,
        shares: u32,
    },
    Cancel {
        order_ref: u64,
        shares: u32,
    },
    Delete {
        order_ref: u64,
    },
    Replace {
        original: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    },
}

#[derive(Clone, Copy)]
pub struct Resting {
    order_ref: u64,
    shares: u32,
    price: u32,
}

/// The venue: knows every live order so that each generated operation is
/// valid when applied in order.
pub struct Venue {
    rng: u64,
    /// The next order reference an add or replace takes.
    pub next_ref: u64,
    mids: Vec<u32>,
    live: Vec<Vec<Resting>>,
    count: usize,
}

impl Venue {
    pub fn new() -> Venue {
        let mut v = Venue {
            rng: 0x2545_f491_4f6c_dd1d,
            next_ref: 1,
            mids: Vec::with_capacity(LOCATES),
            live: vec![Vec::new(); LOCATES],
            count: 0,
        };
        for _ in 0..LOCATES {
            // $5 to $300.
            let mid = 50_000 + (v.next() % 2_950_000) as u32;
            v.mids.push(mid - mid % TICK);
        }
        v
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn symbol(&mut self) -> usize {
        let r = self.next();
        if r & 1 == 0 {
            (r >> 8) as usize % HOT
        } else {
            (r >> 8) as usize % LOCATES
        }
    }

    /// A price `depth` ticks at most from the mid, on the side's own side,
    /// skewed toward the top.
    fn price(&mut self, l: usize, side: Side, depth: u64) -> u32 {
        let (a, b) = (self.next() % depth, self.next() % depth);
        let k = a.min(b) as u32 + 1;
        match side {
            Side::Buy => self.mids[l] - k * TICK,
            Side::Sell => self.mids[l] + k * TICK,
        }
    }

    fn add(&mut self, l: usize, depth: u64) -> Op {
        let side = if self.next() & 1 == 0 {
            Side::Buy
        } else {
            Side::Sell
        };
        let price = self.price(l, side, depth);
        let shares = 100 * (1 + (self.next() % 10) as u32);
        let order_ref = self.next_ref;
        self.next_ref += 1;
        self.live[l].push(Resting {
            order_ref,
            shares,
            price,
        });
        self.count += 1;
        Op::Add {
            locate: l as u16,
            order_ref,
            side,
            shares,
            price,
        }
    }

    /// Index of a live order of `l`: one of the 16 newest mostly (quotes
    /// that are cancelled or hit soon after they are placed), else any.
    fn pick(&mut self, l: usize) -> usize {
        let n = self.live[l].len();
        let r = self.next();
        if !r.is_multiple_of(5) {
            n - 1 - (r >> 8) as usize % n.min(16)
        } else {
            (r >> 8) as usize % n
        }
    }

    fn remove(&mut self, l: usize, i: usize) -> Resting {
        self.count -= 1;
        self.live[l].swap_remove(i)
    }

    pub fn op(&mut self) -> Op {
        let l = self.symbol();
        if self.next().is_multiple_of(50) {
            // The mid moves a tick now and then; resting orders stay.
            let m = &mut self.mids[l];
            *m = if self.rng & 1 == 0 {
                *m + TICK
            } else {
                (*m - TICK).max(100 * TICK)
            };
        }
        let target = LIVE / LOCATES;
        let r = self.next() % 100;
        // Adds take the place of removals when the symbol runs thin, and
        // the other way round, so the live count stays near LIVE.
        let add_share = if self.live[l].len() < target { 55 } else { 35 };
        if self.live[l].len() < 2 || r < add_share {
            return self.add(l, 10);
        }
        let i = self.pick(l);
        match r {
            _ if r < add_share + 35 => {
                let o = self.remove(l, i);
                Op::Delete {
                    order_ref: o.order_ref,
                }
            }
            _ if r < add_share + 45 => {
                let o = self.remove(l, i);
                let new_ref = self.next_ref;
                self.next_ref += 1;
                let price = if self.next() & 1 == 0 {
                    o.price + TICK
                } else {
                    o.price.saturating_sub(TICK).max(TICK)
                };
                let shares = 100 * (1 + (self.next() % 10) as u32);
                self.live[l].push(Resting {
                    order_ref: new_ref,
                    shares,
                    price,
                });
                self.count += 1;
                Op::Replace {
                    original: o.order_ref,
                    new_ref,
                    shares,
                    price,
                }
            }
            _ if r < add_share + 50 => {
                let o = &mut self.live[l][i];
                let shares = (o.shares / 2).max(1);
                let full = shares >= o.shares;
                let order_ref = o.order_ref;
                o.shares -= shares.min(o.shares);
                if full {
                    self.remove(l, i);
                }
                Op::Cancel { order_ref, shares }
            }
            _ => {
                // Executions hit partly or fully.
                let whole = self.next() & 1 == 0;
                let o = &mut self.live[l][i];
                let shares = if whole {
                    o.shares
                } else {
                    (o.shares / 3).max(1)
                };
                let order_ref = o.order_ref;
                o.shares -= shares;
                if o.shares == 0 {
                    self.remove(l, i);
                }
                Op::Execute { order_ref, shares }
            }
        }
    }

    /// The initial book: LIVE adds, deeper than the stream's (50 ticks).
    pub fn preload(&mut self) -> Vec<Op> {
        (0..LIVE)
            .map(|i| {
                let l = i % LOCATES;
                self.add(l, 50)
            })
            .collect()
    }

    pub fn fill(&mut self, ops: &mut Vec<Op>, n: usize) {
        ops.clear();
        ops.extend((0..n).map(|_| self.op()));
    }
}
