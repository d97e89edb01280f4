//! A set of channel ids (`Venue::channels_of`): venue-neutral, so that
//! the engine reads a symbol's channels without a venue's types.

/// A set of channel ids (0-255): the channels whose rules reach a symbol
/// (`cboe-pitch`: its units, 1-255).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelSet([u64; 4]);

impl ChannelSet {
    #[inline]
    pub fn contains(&self, channel: u8) -> bool {
        self.0[channel as usize >> 6] & (1 << (channel & 63)) != 0
    }

    #[inline]
    pub(crate) fn insert(&mut self, channel: u8) {
        self.0[channel as usize >> 6] |= 1 << (channel & 63);
    }

    #[inline]
    pub(crate) fn remove(&mut self, channel: u8) {
        self.0[channel as usize >> 6] &= !(1 << (channel & 63));
    }

    /// The ids in both sets.
    #[inline]
    pub fn intersection(&self, other: &ChannelSet) -> ChannelSet {
        ChannelSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// Removes every id of `other`.
    #[inline]
    pub(crate) fn remove_all(&mut self, other: &ChannelSet) {
        for (w, o) in self.0.iter_mut().zip(other.0) {
            *w &= !o;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The channel ids, ascending (by set bit: a symbol of one channel
    /// costs one step per word).
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some((i as u32 * 64 + bit) as u8)
            })
        })
    }
}

impl FromIterator<u8> for ChannelSet {
    fn from_iter<I: IntoIterator<Item = u8>>(ids: I) -> ChannelSet {
        let mut set = ChannelSet::default();
        for id in ids {
            set.insert(id);
        }
        set
    }
}
