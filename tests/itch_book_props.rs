//! Property of the ITCH order book (proptest): after every operation of a
//! random sequence of adds, executions/cancels, deletes, replaces and
//! clears, over a few locates, refs and prices (so refs collide and are
//! reused, executions run over, refs are unknown, and a tiny `max_orders`
//! overflows), the result of the operation, the best bid and offer of every
//! locate and the live-order count equal those of a naive model: a HashMap
//! of live orders, its best found by scanning every order.

use proptest::prelude::*;
use std::collections::HashMap;
use tickgate::venue::nasdaq_itch::book::{Bbo, Books, Effect, Level, OrderError};
use tickgate::venue::nasdaq_itch::messages::Side;

const LOCATES: u16 = 3;

#[derive(Debug, Clone)]
enum Op {
    Add {
        locate: u16,
        order_ref: u64,
        side: Side,
        shares: u32,
        price: u32,
    },
    Reduce {
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
    Clear,
}

#[derive(Debug, Clone, Copy)]
struct Live {
    locate: u16,
    side: Side,
    shares: u32,
    price: u32,
}

/// Refs 0..12 (plus one far ref that shares low bits with 3, so table
/// slots collide), prices from a handful so levels are shared.
fn order_ref() -> impl Strategy<Value = u64> {
    prop_oneof![9 => 0u64..12, 1 => Just(3 + (1 << 40))]
}

fn price() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(100u32),
        Just(101),
        Just(102),
        Just(105),
        Just(u32::MAX)
    ]
}

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Buy), Just(Side::Sell)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..LOCATES, order_ref(), side(), 0u32..6, price()).prop_map(
            |(locate, order_ref, side, shares, price)| Op::Add { locate, order_ref, side, shares, price }
        ),
        4 => (order_ref(), 0u32..8).prop_map(|(order_ref, shares)| Op::Reduce { order_ref, shares }),
        2 => order_ref().prop_map(|order_ref| Op::Delete { order_ref }),
        3 => (order_ref(), order_ref(), 0u32..6, price()).prop_map(
            |(original, new_ref, shares, price)| Op::Replace { original, new_ref, shares, price }
        ),
        1 => Just(Op::Clear),
    ]
}

struct Model {
    live: HashMap<u64, Live>,
    max: usize,
}

impl Model {
    fn add(&mut self, o: Live, order_ref: u64) -> Result<(), OrderError> {
        if o.shares == 0 {
            Err(OrderError::ZeroShares)
        } else if self.live.contains_key(&order_ref) {
            Err(OrderError::RefInUse)
        } else if self.live.len() >= self.max {
            Err(OrderError::Overflow)
        } else {
            self.live.insert(order_ref, o);
            Ok(())
        }
    }

    fn apply(&mut self, op: &Op) -> Option<Result<Effect, OrderError>> {
        match *op {
            Op::Add {
                locate,
                order_ref,
                side,
                shares,
                price,
            } => {
                let r = self.add(
                    Live {
                        locate,
                        side,
                        shares,
                        price,
                    },
                    order_ref,
                );
                // Add has no Effect: carried as Effect with locate 0.
                Some(r.map(|()| Effect {
                    locate: 0,
                    error: None,
                }))
            }
            Op::Reduce { order_ref, shares } => {
                let Some(o) = self.live.get_mut(&order_ref) else {
                    return Some(Err(OrderError::Unknown));
                };
                let locate = o.locate;
                let error = (shares > o.shares).then_some(OrderError::TooLarge);
                if shares >= o.shares {
                    self.live.remove(&order_ref);
                } else {
                    o.shares -= shares;
                }
                Some(Ok(Effect { locate, error }))
            }
            Op::Delete { order_ref } => Some(
                self.live
                    .remove(&order_ref)
                    .map(|o| Effect {
                        locate: o.locate,
                        error: None,
                    })
                    .ok_or(OrderError::Unknown),
            ),
            Op::Replace {
                original,
                new_ref,
                shares,
                price,
            } => {
                let Some(o) = self.live.remove(&original) else {
                    return Some(Err(OrderError::Unknown));
                };
                let error = self.add(Live { shares, price, ..o }, new_ref).err();
                Some(Ok(Effect {
                    locate: o.locate,
                    error,
                }))
            }
            Op::Clear => {
                self.live.clear();
                None
            }
        }
    }

    fn best(&self, locate: u16) -> Bbo {
        let side_best = |side: Side| {
            let mut best: Option<Level> = None;
            for o in self.live.values() {
                if o.locate != locate || o.side != side {
                    continue;
                }
                best = match best {
                    Some(l) if l.price == o.price => Some(Level {
                        price: l.price,
                        shares: l.shares + o.shares as u64,
                    }),
                    Some(l)
                        if (side == Side::Buy && l.price > o.price)
                            || (side == Side::Sell && l.price < o.price) =>
                    {
                        Some(l)
                    }
                    _ => Some(Level {
                        price: o.price,
                        shares: o.shares as u64,
                    }),
                };
            }
            best
        };
        Bbo {
            bid: side_best(Side::Buy),
            ask: side_best(Side::Sell),
        }
    }
}

fn run(books: &mut Books, op: &Op) -> Option<Result<Effect, OrderError>> {
    match *op {
        Op::Add {
            locate,
            order_ref,
            side,
            shares,
            price,
        } => Some(
            books
                .add(locate, order_ref, side, shares, price)
                .map(|()| Effect {
                    locate: 0,
                    error: None,
                }),
        ),
        Op::Reduce { order_ref, shares } => Some(books.reduce(order_ref, shares)),
        Op::Delete { order_ref } => Some(books.delete(order_ref)),
        Op::Replace {
            original,
            new_ref,
            shares,
            price,
        } => Some(books.replace(original, new_ref, shares, price)),
        Op::Clear => {
            books.clear();
            None
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn books_match_a_naive_model_after_every_operation(
        max in 1usize..8,
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let mut books = Books::new(max);
        let mut model = Model { live: HashMap::new(), max };
        for (step, op) in ops.iter().enumerate() {
            let got = run(&mut books, op);
            let want = model.apply(op);
            prop_assert_eq!(got, want, "step {} {:?}", step, op);
            // One locate past those used: must stay empty.
            for l in 0..=LOCATES {
                prop_assert_eq!(books.best(l), model.best(l), "step {} {:?} locate {}", step, op, l);
            }
            prop_assert_eq!(books.live_orders(), model.live.len(), "step {}", step);
        }
    }
}
