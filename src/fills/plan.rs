//! The pure part of applying a batch: given the events that the
//! processed-events insert reported as new (F1), and the state of their
//! deals and positions read *under lock* in the same transaction, decide
//! each event's outcome and the rows to write. Both stores run the same
//! planner, so SQLite and PostgreSQL behave identically.
//!
//! Deal rows: one row per `(account, deal_id)` in `fills` (unique, F2/F3):
//! the two sides of one execution may both be the firm's, under one deal
//! id, so a deal id alone is not a deal. A BUST names its account too, so
//! it belongs to exactly one row. A BUST whose FILL has not arrived is
//! stored *in that same row* as `bust_held`, so the unique key also
//! serialises a FILL and its BUST arriving at the same moment on two
//! instances: whichever inserts second blocks on the first's row and then
//! sees it. (A separate pending table would let both commit without seeing
//! each other and strand the BUST.)

use std::collections::{HashMap, HashSet};

use rust_decimal::Decimal;

use super::model::{Bust, Event, Fill, Kind, Outcome, Side};
use super::position::Position;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DealStatus {
    /// The FILL is part of its position.
    Applied,
    /// FILL and BUST both seen; the FILL's effect was reversed once.
    Busted,
    /// Only a BUST seen; applied when the FILL arrives.
    BustHeld,
}

impl DealStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DealStatus::Applied => "applied",
            DealStatus::Busted => "busted",
            DealStatus::BustHeld => "bust_held",
        }
    }
    pub fn parse(s: &str) -> Option<DealStatus> {
        match s {
            "applied" => Some(DealStatus::Applied),
            "busted" => Some(DealStatus::Busted),
            "bust_held" => Some(DealStatus::BustHeld),
            _ => None,
        }
    }
}

/// The `fills` row of one deal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DealRow {
    pub status: DealStatus,
    /// Present for Applied and Busted.
    pub fill: Option<Fill>,
    /// Present for Busted and BustHeld.
    pub bust: Option<Bust>,
}

impl DealRow {
    pub fn deal_id(&self) -> &str {
        match (&self.fill, &self.bust) {
            (Some(f), _) => &f.deal_id,
            (None, Some(b)) => &b.deal_id,
            (None, None) => "",
        }
    }

    /// The row a deal's first event creates when the deal is unknown.
    pub fn first(ev: &Event) -> DealRow {
        match ev {
            Event::Fill(f) => DealRow {
                status: DealStatus::Applied,
                fill: Some(f.clone()),
                bust: None,
            },
            Event::Bust(b) => DealRow {
                status: DealStatus::BustHeld,
                fill: None,
                bust: Some(b.clone()),
            },
        }
    }
}

pub type PosKey = (String, String);

/// F2: the key of a deal row, `(account, deal_id)`.
pub type DealKey = (String, String);

/// The [`DealKey`] of an event.
pub fn deal_key(ev: &Event) -> DealKey {
    let (a, d) = ev.deal_key();
    (a.to_owned(), d.to_owned())
}

/// One applied fill of a position's history, in application order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistFill {
    pub deal_id: String,
    pub side: Side,
    pub qty: Decimal,
    pub price: Decimal,
}

/// Everything the planner decides for one batch.
#[derive(Debug, Default)]
pub struct Plan {
    /// (input index, outcome) for every new event.
    pub outcomes: Vec<(usize, Outcome)>,
    /// Final row per touched deal; `None` = the deal must not exist.
    pub deals: HashMap<DealKey, Option<DealRow>>,
    /// Deals whose FILL became applied in this batch, in application order
    /// (they get the next application sequence numbers).
    pub newly_applied: Vec<DealKey>,
    /// Final positions of touched keys.
    pub positions: HashMap<PosKey, Position>,
    /// New events that were rejected: their processed rows must go.
    pub unprocess: Vec<(Kind, String)>,
    /// Held BUSTs applied because their FILL arrived.
    pub released: usize,
}

fn key_of(f: &Fill) -> PosKey {
    (f.account.clone(), f.symbol.clone())
}

/// Keys whose history must be loaded: a new BUST targets an applied fill
/// (stored, or earlier in this batch) of that key.
pub fn replay_keys(
    new_events: &[(usize, &Event)],
    deals: &HashMap<DealKey, Option<DealRow>>,
) -> Vec<PosKey> {
    let mut batch_fill_key: HashMap<(&str, &str), PosKey> = HashMap::new();
    let mut keys = HashSet::new();
    for (_, ev) in new_events {
        match ev {
            Event::Fill(f) => {
                batch_fill_key
                    .entry(ev.deal_key())
                    .or_insert_with(|| key_of(f));
            }
            Event::Bust(_) => {
                // F2: the BUST's own (account, deal_id).
                if let Some(Some(DealRow {
                    fill: Some(f),
                    status: DealStatus::Applied,
                    ..
                })) = deals.get(&deal_key(ev))
                {
                    keys.insert(key_of(f));
                } else if let Some(k) = batch_fill_key.get(&ev.deal_key()) {
                    keys.insert(k.clone());
                }
            }
        }
    }
    let mut keys: Vec<PosKey> = keys.into_iter().collect();
    keys.sort();
    keys
}

/// Position keys the new events may change (sorted: a fixed lock order).
pub fn position_keys(
    new_events: &[(usize, &Event)],
    deals: &HashMap<DealKey, Option<DealRow>>,
) -> Vec<PosKey> {
    let mut keys = HashSet::new();
    for (_, ev) in new_events {
        match ev {
            Event::Fill(f) => {
                keys.insert(key_of(f));
            }
            Event::Bust(_) => {
                if let Some(Some(DealRow { fill: Some(f), .. })) = deals.get(&deal_key(ev)) {
                    keys.insert(key_of(f));
                }
            }
        }
    }
    let mut keys: Vec<PosKey> = keys.into_iter().collect();
    keys.sort();
    keys
}

/// Decide the batch. `deals` holds every deal (by `(account, deal_id)`,
/// F2) of `new_events` (None = unknown before this batch), `positions` the
/// current position of every key from [`position_keys`] that exists,
/// `history` the applied fills (in application order, excluding this
/// batch's) of every key from [`replay_keys`].
pub fn plan(
    new_events: &[(usize, &Event)],
    mut deals: HashMap<DealKey, Option<DealRow>>,
    mut positions: HashMap<PosKey, Position>,
    mut history: HashMap<PosKey, Vec<HistFill>>,
) -> Plan {
    let mut p = Plan::default();
    let mut touched_pos: HashSet<PosKey> = HashSet::with_capacity(positions.len());
    p.outcomes.reserve(new_events.len());
    p.newly_applied.reserve(new_events.len());
    for &(idx, ev) in new_events {
        // F2: a deal is its (account, deal_id); the same deal id on another
        // account is another deal.
        let dk = deal_key(ev);
        let state = deals.get(&dk).cloned().flatten();
        let outcome = match ev {
            Event::Fill(f) => match state {
                None => apply_fill(f, &mut positions, &mut history, &mut touched_pos)
                    .map(|()| {
                        deals.insert(dk.clone(), Some(DealRow::first(ev)));
                        p.newly_applied.push(dk.clone());
                        Outcome::Applied
                    })
                    .unwrap_or_else(Outcome::Rejected),
                Some(DealRow {
                    status: DealStatus::BustHeld,
                    bust: Some(held),
                    ..
                }) => {
                    // The held BUST names this account (same key): fill
                    // then immediate reversal, the position is exactly as
                    // before, so it is not touched.
                    deals.insert(
                        dk.clone(),
                        Some(DealRow {
                            status: DealStatus::Busted,
                            fill: Some(f.clone()),
                            bust: Some(held),
                        }),
                    );
                    p.released += 1;
                    Outcome::Applied
                }
                // Already filled (F3): the same FILL again, or a conflict.
                Some(row) => repeat_of_deal(ev, row.fill.map(Event::Fill)),
            },
            Event::Bust(b) => match state {
                // No FILL of this (account, deal_id) yet: held until it
                // comes, even if the deal id is filled on another account.
                None => {
                    deals.insert(dk.clone(), Some(DealRow::first(ev)));
                    Outcome::Held
                }
                Some(DealRow {
                    status: DealStatus::Applied,
                    fill: Some(f),
                    ..
                }) => match reverse_fill(&f, &mut positions, &mut history, &mut touched_pos) {
                    Ok(()) => {
                        deals.insert(
                            dk.clone(),
                            Some(DealRow {
                                status: DealStatus::Busted,
                                fill: Some(f),
                                bust: Some(b.clone()),
                            }),
                        );
                        Outcome::Applied
                    }
                    Err(r) => Outcome::Rejected(r),
                },
                // Already busted, or a BUST already held (F3): the same
                // BUST again, or a conflict.
                Some(row) => repeat_of_deal(ev, row.bust.map(Event::Bust)),
            },
        };
        if let Outcome::Rejected(_) | Outcome::Conflict(_) = outcome {
            p.unprocess.push((ev.kind(), ev.event_id().to_owned()));
        }
        p.outcomes.push((idx, outcome));
    }
    let touched_deals: HashSet<(&str, &str)> =
        new_events.iter().map(|(_, e)| e.deal_key()).collect();
    p.deals = deals
        .into_iter()
        .filter(|((a, d), _)| touched_deals.contains(&(a.as_str(), d.as_str())))
        .collect();
    p.positions = positions
        .into_iter()
        .filter(|(k, _)| touched_pos.contains(k))
        .collect();
    p
}

/// F2b/F3: a new event id for a deal that already has its event of this
/// kind (`stored`): a duplicate by deal id if the content is the same
/// (a repeat whose processed row expired), else a conflict naming the
/// deal and the event it already has.
fn repeat_of_deal(ev: &Event, stored: Option<Event>) -> Outcome {
    match stored {
        Some(s) if s.content_hash() != ev.content_hash() => Outcome::Conflict(format!(
            "conflict: deal_id {:?} of account {:?} already has a {} (event_id {:?}) with \
             different content",
            ev.deal_id(),
            s.account(),
            s.kind().as_str(),
            s.event_id()
        )),
        _ => Outcome::DuplicateByDealId,
    }
}

fn apply_fill(
    f: &Fill,
    positions: &mut HashMap<PosKey, Position>,
    history: &mut HashMap<PosKey, Vec<HistFill>>,
    touched: &mut HashSet<PosKey>,
) -> Result<(), String> {
    let key = key_of(f);
    let cur = positions.get(&key).copied().unwrap_or_default();
    let next = cur
        .apply(f.side, f.qty, f.price)
        .map_err(|e| format!("{e} for {}/{}", f.account, f.symbol))?;
    if let Some(h) = history.get_mut(&key) {
        h.push(HistFill {
            deal_id: f.deal_id.clone(),
            side: f.side,
            qty: f.qty,
            price: f.price,
        });
    }
    // Most fills hit a position already loaded and already touched: no
    // new key strings for those.
    match positions.get_mut(&key) {
        Some(p) => *p = next,
        None => {
            positions.insert(key.clone(), next);
        }
    }
    if !touched.contains(&key) {
        touched.insert(key);
    }
    Ok(())
}

/// A BUST: the position becomes the replay of the key's remaining fills,
/// i.e. exactly what it would be had the busted fill never happened.
fn reverse_fill(
    f: &Fill,
    positions: &mut HashMap<PosKey, Position>,
    history: &mut HashMap<PosKey, Vec<HistFill>>,
    touched: &mut HashSet<PosKey>,
) -> Result<(), String> {
    let key = key_of(f);
    let Some(h) = history.get_mut(&key) else {
        return Err(format!(
            "internal: history of {}/{} not loaded",
            f.account, f.symbol
        ));
    };
    let rest: Vec<HistFill> = h
        .iter()
        .filter(|x| x.deal_id != f.deal_id)
        .cloned()
        .collect();
    let next = Position::replay(rest.iter().map(|x| (x.side, &x.qty, &x.price)))
        .map_err(|e| format!("{e} for {}/{}", f.account, f.symbol))?;
    *h = rest;
    positions.insert(key.clone(), next);
    touched.insert(key);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fills::model::parse_value;

    fn ev(v: serde_json::Value) -> Event {
        parse_value(&v).unwrap()
    }
    fn fill(id: &str, deal: &str, side: &str, qty: &str, px: &str) -> Event {
        ev(
            serde_json::json!({"kind":"FILL","event_id":id,"deal_id":deal,"account":"A",
            "symbol":"S","side":side,"qty":qty,"price":px,"exec_time":"2026-11-30T08:00:00Z"}),
        )
    }
    fn bust(id: &str, deal: &str) -> Event {
        ev(
            serde_json::json!({"kind":"BUST","event_id":id,"deal_id":deal,"account":"A",
            "exec_time":"2026-11-30T08:00:00Z"}),
        )
    }
    fn key() -> PosKey {
        ("A".into(), "S".into())
    }
    fn dk(account: &str, deal: &str) -> DealKey {
        (account.into(), deal.into())
    }
    fn on(account: &str, e: Event) -> Event {
        match e {
            Event::Fill(f) => Event::Fill(Fill {
                account: account.into(),
                ..f
            }),
            Event::Bust(b) => Event::Bust(Bust {
                account: account.into(),
                ..b
            }),
        }
    }

    /// F2: one deal id on two accounts is two deals (an internal cross):
    /// both FILLs apply, each to its own position, and a BUST of one side
    /// reverses only that side.
    #[test]
    fn one_deal_id_two_accounts_are_two_deals() {
        let buy = fill("F1", "D1", "BUY", "10", "100");
        let sell = on("B", fill("F2", "D1", "SELL", "10", "100"));
        let b = on("B", bust("B1", "D1"));
        let new = [(0, &buy), (1, &sell), (2, &b)];
        let deals = HashMap::from([(dk("A", "D1"), None), (dk("B", "D1"), None)]);
        assert_eq!(replay_keys(&new, &deals), vec![("B".into(), "S".into())]);
        let p = plan(
            &new,
            deals,
            HashMap::new(),
            HashMap::from([(("B".into(), "S".into()), vec![])]),
        );
        assert_eq!(
            p.outcomes,
            vec![
                (0, Outcome::Applied),
                (1, Outcome::Applied),
                (2, Outcome::Applied)
            ]
        );
        assert_eq!(p.newly_applied, vec![dk("A", "D1"), dk("B", "D1")]);
        assert_eq!(
            p.deals[&dk("A", "D1")].as_ref().unwrap().status,
            DealStatus::Applied
        );
        assert_eq!(
            p.deals[&dk("B", "D1")].as_ref().unwrap().status,
            DealStatus::Busted
        );
        assert_eq!(
            p.positions[&key()],
            Position::FLAT
                .apply(Side::Buy, 10.into(), 100.into())
                .unwrap()
        );
        assert_eq!(p.positions[&("B".into(), "S".into())], Position::FLAT);
    }

    /// F2: a BUST naming an account whose side of the deal has no FILL is
    /// held for that `(account, deal_id)`; the other account's fill stays.
    #[test]
    fn bust_of_the_other_account_is_held() {
        let f = fill("F1", "D1", "BUY", "10", "100");
        let b = on("B", bust("B1", "D1"));
        let deals = HashMap::from([
            (dk("A", "D1"), Some(DealRow::first(&f))),
            (dk("B", "D1"), None),
        ]);
        let new = [(0, &b)];
        assert!(replay_keys(&new, &deals).is_empty());
        assert!(position_keys(&new, &deals).is_empty());
        let p = plan(&new, deals, HashMap::new(), HashMap::new());
        assert_eq!(p.outcomes, vec![(0, Outcome::Held)]);
        assert!(p.positions.is_empty());
        assert!(!p.deals.contains_key(&dk("A", "D1")), "A's deal untouched");
        assert_eq!(p.deals.get(&dk("B", "D1")), Some(&Some(DealRow::first(&b))));
    }

    #[test]
    fn bust_of_stored_fill_replays_history() {
        let f1 = fill("F1", "D1", "BUY", "10", "100");
        let f2 = fill("F2", "D2", "SELL", "4", "110");
        let b = bust("B2", "D2");
        let p1 = Position::FLAT
            .apply(Side::Buy, 10.into(), 100.into())
            .unwrap();
        let p2 = p1.apply(Side::Sell, 4.into(), 110.into()).unwrap();
        let deals = HashMap::from([(dk("A", "D2"), Some(DealRow::first(&f2)))]);
        let new = [(0, &b)];
        assert_eq!(replay_keys(&new, &deals), vec![key()]);
        let hist = |e: &Event| {
            let Event::Fill(f) = e else { unreachable!() };
            HistFill {
                deal_id: f.deal_id.clone(),
                side: f.side,
                qty: f.qty,
                price: f.price,
            }
        };
        let p = plan(
            &new,
            deals,
            HashMap::from([(key(), p2)]),
            HashMap::from([(key(), vec![hist(&f1), hist(&f2)])]),
        );
        assert_eq!(p.outcomes, vec![(0, Outcome::Applied)]);
        assert_eq!(p.positions[&key()], p1);
        assert_eq!(
            p.deals[&dk("A", "D2")].as_ref().unwrap().status,
            DealStatus::Busted
        );
        assert!(p.unprocess.is_empty());
    }

    #[test]
    fn held_bust_released_by_fill_in_same_batch() {
        let b = bust("B1", "D1");
        let f = fill("F1", "D1", "BUY", "1", "1");
        let new = [(0, &b), (1, &f)];
        let deals = HashMap::from([(dk("A", "D1"), None)]);
        let p = plan(&new, deals, HashMap::new(), HashMap::new());
        assert_eq!(p.outcomes, vec![(0, Outcome::Held), (1, Outcome::Applied)]);
        assert_eq!(p.released, 1);
        assert!(
            p.positions.is_empty(),
            "position untouched: fill and bust cancel"
        );
        assert_eq!(
            p.deals[&dk("A", "D1")].as_ref().unwrap().status,
            DealStatus::Busted
        );
        assert!(p.newly_applied.is_empty());
    }

    #[test]
    fn overflowing_fill_is_rejected_and_unprocessed() {
        let f = fill("F1", "D1", "BUY", "79228162514264337593543950335", "2");
        let new = [(0, &f)];
        let p = plan(
            &new,
            HashMap::from([(dk("A", "D1"), None)]),
            HashMap::new(),
            HashMap::new(),
        );
        assert!(matches!(&p.outcomes[0].1, Outcome::Rejected(r) if r.contains("overflow")));
        assert_eq!(p.unprocess, vec![(Kind::Fill, "F1".to_string())]);
        assert_eq!(p.deals[&dk("A", "D1")], None);
    }
}
