//! Symbols as members of units (venues.md `cboe-pitch`, Units and
//! symbols). A symbol belongs to unit `u` while `u`'s current session
//! (running or ended) has carried it in an Add Order, a Trade or a Trading
//! Status. A unit's new session forgets its members. A symbol that a
//! running session carries leaves every unit whose session has ended (Cboe
//! may move symbols between units from one day to the next). Cboe puts
//! each symbol on exactly one unit, so normally a symbol has one.
//!
//! The unit rules (C3, C5, C6, R3, a spin's clearing) reach a unit's
//! members through [`Membership::members`]; the check reads a symbol's
//! units through [`Membership::units_of`]. Pure code. Memory: a 256-bit
//! set per symbol slot, allocated up front, and a list of member slots per
//! unit that grows once per symbol and session, never per message.

/// A set of units (1-255; id 0 unused): the venue-neutral set of channel
/// ids, since each unit is a channel.
pub use crate::venue::ChannelSet as UnitSet;

/// What carrying a symbol on a unit changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// The symbol was not a member of the unit before: it takes the unit's
    /// standing causes at once (a late join's `no_snapshot`, a loss's
    /// `channel_gap`; venues.md).
    pub joined: bool,
    /// Ended units the symbol left.
    pub left: UnitSet,
}

/// The units of every symbol of one feed.
#[derive(Clone, Debug)]
pub struct Membership {
    /// By symbol slot.
    units_of: Vec<UnitSet>,
    /// By unit: the slots that joined it this session. A slot that left
    /// since (only an ended unit is left) stays listed and is skipped; it
    /// cannot join the same unit twice in one session, since an ended
    /// session carries nothing more and a new one clears the list.
    members: Vec<Vec<u32>>,
    /// Units whose session has ended.
    ended: UnitSet,
    /// Slots a new session took out of a unit since `take_changed` (the
    /// engine publishes their units for the gate's readers; `carry`'s
    /// changes are told through `Rules::channels_changed` instead).
    changed: Vec<u32>,
}

impl Membership {
    /// Room for `max_symbols` symbol slots (more are ignored: a slot the
    /// symbol table cannot give does not exist).
    pub fn new(max_symbols: usize) -> Membership {
        Membership {
            units_of: vec![UnitSet::default(); max_symbols],
            members: vec![Vec::new(); 256],
            ended: UnitSet::default(),
            changed: Vec::new(),
        }
    }

    /// An Add Order, Trade or Trading Status of `unit` names the symbol at
    /// `slot`.
    #[inline]
    pub fn carry(&mut self, unit: u8, slot: u32) -> Carried {
        let Some(set) = self.units_of.get_mut(slot as usize) else {
            return Carried::default();
        };
        // The usual case: already a member of this unit and of no other.
        let mut only = UnitSet::default();
        only.insert(unit);
        if *set == only {
            return Carried::default();
        }
        let mut out = Carried::default();
        if !set.contains(unit) {
            set.insert(unit);
            self.members[unit as usize].push(slot);
            out.joined = true;
        }
        if !self.ended.contains(unit) {
            // A running session carries it: it leaves every ended unit.
            out.left = set.intersection(&self.ended);
            set.remove_all(&self.ended);
        }
        out
    }

    /// Cache hint for the units of the symbol at `slot` (changes nothing).
    #[inline(always)]
    pub fn prefetch(&self, slot: u32) {
        if let Some(set) = self.units_of.get(slot as usize) {
            crate::util::prefetch::prefetch(set);
        }
    }

    /// The unit's session ended (C6): its members stay, until a running
    /// session carries them or the unit begins a new one.
    pub fn end_session(&mut self, unit: u8) {
        self.ended.insert(unit);
    }

    /// A new session of the unit (C5): it forgets its members (they keep
    /// the cause C5 gave them) and runs.
    pub fn new_session(&mut self, unit: u8) {
        let list = &mut self.members[unit as usize];
        for &slot in list.iter() {
            if let Some(set) = self.units_of.get_mut(slot as usize) {
                set.remove(unit);
                self.changed.push(slot);
            }
        }
        list.clear();
        self.ended.remove(unit);
    }

    /// The units of the symbol at `slot` (empty: no unit carried it; it is
    /// affected by no unit).
    #[inline]
    pub fn units_of(&self, slot: u32) -> UnitSet {
        self.units_of
            .get(slot as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Appends the slots a new session took out of a unit since the last
    /// call to `out` and forgets them.
    pub fn take_changed(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.changed);
    }

    /// The unit's members now.
    pub fn members(&self, unit: u8) -> impl Iterator<Item = u32> + '_ {
        self.members[unit as usize]
            .iter()
            .copied()
            .filter(move |&s| self.units_of(s).contains(unit))
    }

    /// Whether the unit's session has ended.
    pub fn ended(&self, unit: u8) -> bool {
        self.ended.contains(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(m: &Membership, slot: u32) -> Vec<u8> {
        m.units_of(slot).iter().collect()
    }

    #[test]
    fn a_symbol_joins_the_unit_that_carries_it_once() {
        let mut m = Membership::new(8);
        assert!(m.units_of(3).is_empty(), "no unit carried it: no unit");
        assert_eq!(
            m.carry(1, 3),
            Carried {
                joined: true,
                left: UnitSet::default()
            }
        );
        assert_eq!(m.carry(1, 3), Carried::default(), "already a member");
        assert_eq!(units(&m, 3), [1]);
        assert_eq!(m.members(1).collect::<Vec<_>>(), [3]);
        assert_eq!(m.members(2).count(), 0);
    }

    #[test]
    fn a_symbol_of_several_units_belongs_to_each() {
        let mut m = Membership::new(8);
        m.carry(1, 0);
        assert!(m.carry(200, 0).joined);
        assert_eq!(units(&m, 0), [1, 200]);
        assert_eq!(m.units_of(0).len(), 2);
        assert_eq!(m.members(200).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_new_session_forgets_the_unit_s_members_only() {
        let mut m = Membership::new(8);
        m.carry(1, 0);
        m.carry(1, 1);
        m.carry(2, 1);
        m.carry(2, 2);
        let mut changed = Vec::new();
        m.take_changed(&mut changed);
        assert!(changed.is_empty(), "carrying is told through Rules");
        m.new_session(1);
        m.take_changed(&mut changed);
        assert_eq!(changed, [0, 1], "the slots that left unit 1");
        changed.clear();
        m.take_changed(&mut changed);
        assert!(changed.is_empty(), "taken once");
        assert!(m.units_of(0).is_empty());
        assert_eq!(units(&m, 1), [2]);
        assert_eq!(units(&m, 2), [2]);
        assert_eq!(m.members(1).count(), 0);
        assert_eq!(m.members(2).collect::<Vec<_>>(), [1, 2]);
        assert!(m.carry(1, 0).joined, "the new session carries it again");
    }

    #[test]
    fn a_running_session_takes_a_symbol_from_every_ended_unit() {
        let mut m = Membership::new(8);
        m.carry(1, 5);
        m.carry(3, 5);
        m.end_session(1);
        m.end_session(3);
        assert!(m.ended(1) && m.ended(3));
        // Ended sessions keep their members (the check reads them: "a
        // unit of the symbol has ended its session").
        assert_eq!(units(&m, 5), [1, 3]);
        assert_eq!(m.members(1).collect::<Vec<_>>(), [5]);
        // The next day, the symbol comes on unit 2.
        let c = m.carry(2, 5);
        assert!(c.joined);
        assert_eq!(c.left.iter().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(units(&m, 5), [2]);
        assert_eq!(m.members(1).count(), 0, "listed but no longer a member");
        // A running unit is never left for another running one.
        m.carry(4, 5);
        assert_eq!(units(&m, 5), [2, 4]);
    }

    #[test]
    fn an_ended_unit_carrying_a_symbol_takes_nothing_from_others() {
        let mut m = Membership::new(8);
        m.carry(1, 0);
        m.end_session(1);
        m.end_session(2);
        // The messages of the packet that held End of Session are applied
        // before C6 ends it; a symbol carried there joins, nothing leaves.
        let c = m.carry(2, 0);
        assert!(c.joined);
        assert!(c.left.is_empty());
        assert_eq!(units(&m, 0), [1, 2]);
        m.new_session(2);
        assert!(!m.ended(2));
        assert_eq!(units(&m, 0), [1]);
    }

    #[test]
    fn slots_beyond_the_table_are_ignored() {
        let mut m = Membership::new(2);
        assert_eq!(m.carry(1, 2), Carried::default());
        assert!(m.units_of(2).is_empty());
        assert_eq!(m.members(1).count(), 0);
    }
}
