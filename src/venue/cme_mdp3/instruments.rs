//! A CME channel's instruments (venues.md `cme-mdp3`, Instruments and
//! symbols; Trading state): SecurityID to instrument, the names that
//! resolve to it (its latest definition's `Symbol`, and always
//! `#<SecurityID>`), its book's depth and SecurityGroup, its book, and its
//! trading state as SecurityStatus, definitions and snapshots set it.
//! Pure: no time, no I/O. An instrument is created (and allocates) once;
//! messages of known instruments allocate nothing.

use std::collections::HashMap;

use super::book::{Book, DEFAULT_DEPTH, MAX_DEPTH};
use super::messages::{trim, Definition, SecurityStatus};
use super::templates::enums::security_trading_status as st;

/// The longest name a definition gives (`Symbol`, `char[20]`).
pub const NAME_LEN: usize = 20;

/// An instrument's name from its definition, trailing NULs and spaces
/// removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Name {
    bytes: [u8; NAME_LEN],
    len: u8,
}

impl Name {
    /// `None` for an empty name.
    pub fn new(chars: &[u8]) -> Option<Name> {
        let t = trim(chars);
        if t.is_empty() {
            return None;
        }
        let t = &t[..t.len().min(NAME_LEN)];
        let mut bytes = [0; NAME_LEN];
        bytes[..t.len()].copy_from_slice(t);
        Some(Name {
            bytes,
            len: t.len() as u8,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The name a definition's `Symbol` gives, if it names anything: not
/// when empty or beginning with `#` (venues.md `cme-mdp3`, Instruments and
/// symbols: `#` names are SecurityIDs' alone).
pub fn naming(symbol: &[u8]) -> Option<Name> {
    Name::new(symbol).filter(|n| n.as_bytes().first() != Some(&b'#'))
}

/// A SecurityGroup (`char[6]`, trimmed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Group([u8; 6]);

impl Group {
    pub fn new(chars: &[u8]) -> Option<Group> {
        let t = trim(chars);
        if t.is_empty() {
            return None;
        }
        let mut g = [0; 6];
        let n = t.len().min(6);
        g[..n].copy_from_slice(&t[..n]);
        Some(Group(g))
    }
}

/// V2 for this venue: what a SecurityTradingStatus says (`None`: no
/// change, e.g. 103 or a value the contract does not list).
pub fn halted(status: u8) -> Option<bool> {
    match status {
        st::READY_TO_TRADE => Some(false),
        st::TRADING_HALT
        | st::CLOSE
        | st::NEW_PRICE_INDICATION
        | st::NOT_AVAILABLE_FOR_TRADING
        | st::PRE_OPEN
        | st::PRE_CROSS
        | st::CROSS
        | st::POST_CLOSE => Some(true),
        _ => None,
    }
}

/// One instrument of the channel.
#[derive(Clone, Debug)]
pub struct Instrument {
    pub security_id: i32,
    /// Its latest definition's name (`None`: no definition yet, or the
    /// latest one deleted it).
    pub name: Option<Name>,
    pub group: Option<Group>,
    pub defined: bool,
    pub book: Book,
    /// The trading state: `None` until something sets it this session.
    pub halted: Option<bool>,
    /// When a SecurityStatus (its own or its group's) last set it this
    /// session (the directory's status counter; 0: never).
    status_at: u64,
    /// When a SecurityStatus for this instrument itself last came.
    own_status_at: u64,
}

impl Instrument {
    fn new(security_id: i32) -> Instrument {
        Instrument {
            security_id,
            name: None,
            group: None,
            defined: false,
            book: Book::new(DEFAULT_DEPTH),
            halted: None,
            status_at: 0,
            own_status_at: 0,
        }
    }

    /// Whether a SecurityStatus set its state this session (definitions
    /// and snapshots then no longer do).
    pub fn status_set(&self) -> bool {
        self.status_at != 0
    }
}

/// A change of an instrument's trading state, for V2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HaltChange {
    pub index: u32,
    pub halted: bool,
}

/// The channel's instruments, dense indices in order of first sight.
#[derive(Debug, Default)]
pub struct Instruments {
    list: Vec<Instrument>,
    by_id: HashMap<i32, u32>,
    by_name: HashMap<Name, u32>,
    /// The latest SecurityStatus of each SecurityGroup this session: the
    /// status and when it came.
    group_status: HashMap<Group, (u8, u64)>,
    /// Orders SecurityStatus messages within the session (from 1).
    status_clock: u64,
}

impl Instruments {
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, index: u32) -> Option<&Instrument> {
        self.list.get(index as usize)
    }

    pub fn get_mut(&mut self, index: u32) -> Option<&mut Instrument> {
        self.list.get_mut(index as usize)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Instrument> {
        self.list.iter()
    }

    /// The instrument of a SecurityID, if known.
    pub fn find(&self, security_id: i32) -> Option<u32> {
        self.by_id.get(&security_id).copied()
    }

    /// The instrument of a SecurityID, made known if new.
    pub fn index(&mut self, security_id: i32) -> u32 {
        if let Some(&i) = self.by_id.get(&security_id) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(Instrument::new(security_id));
        self.by_id.insert(security_id, i);
        i
    }

    /// The instrument a name resolves to: `#<SecurityID>` always, else the
    /// instrument whose definition most recently carried the name.
    pub fn resolve(&self, name: &[u8]) -> Option<u32> {
        if let Some(id) = name.strip_prefix(b"#") {
            // Only the canonical decimal form names it: no sign but `-`,
            // no leading zero.
            let digits = id.strip_prefix(b"-").unwrap_or(id);
            let canonical = !digits.is_empty()
                && digits.iter().all(u8::is_ascii_digit)
                && (digits[0] != b'0' || digits == b"0")
                && !(digits == b"0" && digits.len() != id.len());
            if !canonical {
                return None;
            }
            let id: i32 = std::str::from_utf8(id).ok()?.parse().ok()?;
            return self.find(id);
        }
        self.by_name.get(&Name::new(name)?).copied()
    }

    /// A definition (from a definition line or the incremental feed):
    /// names the instrument (or, with SecurityUpdateAction `D`, removes
    /// its name), sets its depth and SecurityGroup; its trading status
    /// applies unless a SecurityStatus set the state this session, and the
    /// group's latest SecurityStatus reaches it unless its own came later.
    /// Never changes the book's levels. Returns the instrument and its
    /// trading-state change, if any.
    pub fn define(&mut self, d: &Definition<'_>) -> (u32, Option<HaltChange>) {
        let index = self.index(d.security_id);
        // A `Symbol` that is empty or begins with `#` names nothing: a `#`
        // name is only ever a SecurityID's (such a definition gives depth
        // and group, and removes no name).
        if let Some(name) = naming(d.symbol) {
            let old = self.list[index as usize].name;
            if let Some(old) = old {
                if self.by_name.get(&old) == Some(&index) {
                    self.by_name.remove(&old);
                }
            }
            let deleted = d.update_action == b'D';
            if !deleted {
                self.by_name.insert(name, index);
            }
            self.list[index as usize].name = (!deleted).then_some(name);
        }
        let group = Group::new(d.security_group);
        let inst = &mut self.list[index as usize];
        inst.defined = true;
        inst.group = group;
        if let Some(depth) = d.gbx_depth {
            inst.book.set_depth(depth.clamp(1, MAX_DEPTH as i8) as u8);
        }
        let before = inst.halted;
        if let Some(&(status, at)) = group.and_then(|g| self.group_status.get(&g)) {
            let inst = &mut self.list[index as usize];
            if inst.own_status_at < at {
                if let Some(h) = halted(status) {
                    inst.halted = Some(h);
                }
                inst.status_at = at;
            }
        }
        let inst = &mut self.list[index as usize];
        if !inst.status_set() {
            if let Some(h) = d.trading_status.and_then(halted) {
                inst.halted = Some(h);
            }
        }
        (index, change(index, before, inst.halted))
    }

    /// A used snapshot's MDSecurityTradingStatus: sets the state only of
    /// an instrument no SecurityStatus has set this session.
    pub fn snapshot_status(&mut self, index: u32, status: Option<u8>) -> Option<HaltChange> {
        let inst = self.list.get_mut(index as usize)?;
        if inst.status_set() {
            return None;
        }
        let before = inst.halted;
        if let Some(h) = status.and_then(halted) {
            inst.halted = Some(h);
        }
        change(index, before, inst.halted)
    }

    /// A SecurityStatus: for its SecurityID (made known if new), or, when
    /// that is null, for every instrument whose definition has its
    /// SecurityGroup (and those defined later). Calls `on_change` for each
    /// instrument whose trading state changed.
    pub fn status(&mut self, s: &SecurityStatus<'_>, mut on_change: impl FnMut(HaltChange)) {
        self.status_clock += 1;
        let at = self.status_clock;
        let Some(status) = s.trading_status else {
            return;
        };
        let verdict = halted(status);
        match s.security_id {
            Some(id) => {
                let index = self.index(id);
                let inst = &mut self.list[index as usize];
                inst.own_status_at = at;
                inst.status_at = at;
                let before = inst.halted;
                if let Some(h) = verdict {
                    inst.halted = Some(h);
                }
                if let Some(c) = change(index, before, inst.halted) {
                    on_change(c);
                }
            }
            None => {
                let Some(group) = Group::new(s.security_group) else {
                    return;
                };
                self.group_status.insert(group, (status, at));
                for (i, inst) in self.list.iter_mut().enumerate() {
                    if inst.group != Some(group) {
                        continue;
                    }
                    inst.status_at = at;
                    let before = inst.halted;
                    if let Some(h) = verdict {
                        inst.halted = Some(h);
                    }
                    if let Some(c) = change(i as u32, before, inst.halted) {
                        on_change(c);
                    }
                }
            }
        }
    }

    /// A channel reset or a session change: every book emptied and every
    /// trading state forgotten (the instruments and their names stay).
    /// Calls `on_change` for each instrument that was halted.
    pub fn reset(&mut self, mut on_change: impl FnMut(HaltChange)) {
        self.group_status.clear();
        self.status_clock = 0;
        for (i, inst) in self.list.iter_mut().enumerate() {
            inst.book.clear();
            if inst.halted == Some(true) {
                on_change(HaltChange {
                    index: i as u32,
                    halted: false,
                });
            }
            inst.halted = None;
            inst.status_at = 0;
            inst.own_status_at = 0;
        }
    }
}

fn change(index: u32, before: Option<bool>, after: Option<bool>) -> Option<HaltChange> {
    let (b, a) = (before == Some(true), after == Some(true));
    (b != a).then_some(HaltChange { index, halted: a })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def<'a>(
        id: i32,
        symbol: &'a [u8],
        group: &'a [u8],
        action: u8,
        status: Option<u8>,
    ) -> Definition<'a> {
        Definition {
            template_id: 54,
            security_id: id,
            symbol,
            security_group: group,
            update_action: action,
            trading_status: status,
            tot_num_reports: None,
            gbx_depth: Some(3),
        }
    }

    fn status<'a>(id: Option<i32>, group: &'a [u8], s: u8) -> SecurityStatus<'a> {
        SecurityStatus {
            transact_time: 0,
            security_group: group,
            security_id: id,
            trading_status: Some(s),
        }
    }

    #[test]
    fn names_resolve_to_the_latest_definition() {
        let mut d = Instruments::default();
        let (es, _) = d.define(&def(1001, b"ESZ6\0\0", b"ES", b'A', None));
        assert_eq!(d.resolve(b"ESZ6"), Some(es));
        assert_eq!(d.resolve(b"#1001"), Some(es));
        assert_eq!(d.resolve(b"#01001"), None, "canonical decimal only");
        assert_eq!(d.resolve(b"#+1001"), None);
        assert_eq!(d.resolve(b"#"), None);
        assert_eq!(d.resolve(b"#9999"), None);
        assert_eq!(d.get(es).unwrap().book.depth(), 3);
        // Another instrument takes the name; a rename frees the old one.
        let (other, _) = d.define(&def(2002, b"ESZ6", b"ES", b'A', None));
        assert_eq!(d.resolve(b"ESZ6"), Some(other));
        d.define(&def(2002, b"ESH7", b"ES", b'M', None));
        assert_eq!(d.resolve(b"ESZ6"), None);
        assert_eq!(d.resolve(b"ESH7"), Some(other));
        // D removes the name; the # name remains.
        d.define(&def(2002, b"ESH7", b"ES", b'D', None));
        assert_eq!(d.resolve(b"ESH7"), None);
        assert_eq!(d.resolve(b"#2002"), Some(other));
        assert_eq!(d.get(other).unwrap().name, None);
        // A `#` or empty Symbol names nothing and removes no name.
        d.define(&def(1001, b"ESZ6", b"ES", b'M', None));
        let (es2, _) = d.define(&def(1001, b"#2002", b"ES", b'A', None));
        assert_eq!(es2, es);
        assert_eq!(d.resolve(b"#2002"), Some(other));
        assert_eq!(d.resolve(b"ESZ6"), Some(es));
        d.define(&def(1001, b"", b"ES", b'D', None));
        assert_eq!(d.resolve(b"ESZ6"), Some(es));
        assert_eq!(d.get(es).unwrap().name, Name::new(b"ESZ6"));
    }

    #[test]
    fn security_status_by_instrument_and_group() {
        let mut d = Instruments::default();
        let (es, _) = d.define(&def(1, b"ESZ6", b"ES", b'A', None));
        let (nq, _) = d.define(&def(2, b"NQZ6", b"NQ", b'A', None));
        let mut changes = Vec::new();
        d.status(&status(None, b"ES", st::PRE_OPEN), |c| changes.push(c));
        assert_eq!(
            changes,
            [HaltChange {
                index: es,
                halted: true
            }]
        );
        assert_eq!(d.get(nq).unwrap().halted, None);
        changes.clear();
        d.status(&status(None, b"ES", st::NO_CHANGE), |c| changes.push(c));
        assert!(changes.is_empty(), "103 changes nothing");
        d.status(&status(None, b"ES", st::READY_TO_TRADE), |c| {
            changes.push(c)
        });
        assert_eq!(
            changes,
            [HaltChange {
                index: es,
                halted: false
            }]
        );
        changes.clear();
        // An unseen SecurityID becomes known.
        d.status(&status(Some(7), b"", st::TRADING_HALT), |c| changes.push(c));
        let seven = d.find(7).unwrap();
        assert_eq!(
            changes,
            [HaltChange {
                index: seven,
                halted: true
            }]
        );
    }

    #[test]
    fn group_status_reaches_later_definitions_and_outranks_theirs() {
        let mut d = Instruments::default();
        d.status(&status(None, b"ZN", st::PRE_OPEN), |_| {});
        // Defined later, with an older "ready to trade" of its own.
        let (zn, c) = d.define(&def(5, b"ZNZ6", b"ZN", b'A', Some(st::READY_TO_TRADE)));
        assert_eq!(
            c,
            Some(HaltChange {
                index: zn,
                halted: true
            })
        );
        assert_eq!(d.get(zn).unwrap().halted, Some(true));
        // Its own SecurityStatus after the group's wins over the group's.
        d.status(&status(Some(5), b"ZN", st::READY_TO_TRADE), |_| {});
        let (_, c) = d.define(&def(5, b"ZNZ6", b"ZN", b'M', Some(st::PRE_OPEN)));
        assert_eq!(c, None);
        assert_eq!(d.get(zn).unwrap().halted, Some(false));
    }

    #[test]
    fn definitions_and_snapshots_set_the_state_only_without_a_status() {
        let mut d = Instruments::default();
        let (es, c) = d.define(&def(1, b"ESZ6", b"ES", b'A', Some(st::PRE_OPEN)));
        assert_eq!(
            c,
            Some(HaltChange {
                index: es,
                halted: true
            })
        );
        assert_eq!(
            d.snapshot_status(es, Some(st::READY_TO_TRADE)),
            Some(HaltChange {
                index: es,
                halted: false
            })
        );
        d.status(&status(Some(1), b"ES", st::PRE_OPEN), |_| {});
        assert_eq!(d.snapshot_status(es, Some(st::READY_TO_TRADE)), None);
        let (_, c) = d.define(&def(1, b"ESZ6", b"ES", b'M', Some(st::READY_TO_TRADE)));
        assert_eq!(c, None);
        assert_eq!(d.get(es).unwrap().halted, Some(true));
        // A reset forgets every state (and the group's).
        let mut changes = Vec::new();
        d.reset(|c| changes.push(c));
        assert_eq!(
            changes,
            [HaltChange {
                index: es,
                halted: false
            }]
        );
        assert_eq!(
            d.snapshot_status(es, Some(st::PRE_OPEN)),
            Some(HaltChange {
                index: es,
                halted: true
            })
        );
    }
}
