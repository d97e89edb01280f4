//! CME MDP 3.0 framing and the SBE views the generated decoders
//! (`templates`) read fields through (venues.md `cme-mdp3`, Framing).
//!
//! A packet is MsgSeqNum u32, SendingTime u64, then one or more messages,
//! each MsgSize u16 (its whole length, these two bytes included), the SBE
//! message header (blockLength, templateId, schemaId, version: u16 each),
//! the root block (the header's blockLength, not the schema's) and the
//! repeating groups, each a dimension header (its entries' blockLength and
//! count) and its entries, one blockLength apart. All integers are
//! little-endian.
//!
//! Zero-copy: every view borrows the datagram and nothing here allocates.
//! A field reads as `None` when the message's version predates it (the
//! schema's `sinceVersion`), when the block on the wire is too short to
//! hold it, or when it holds the schema's null value.

use std::fmt;
use std::marker::PhantomData;

/// MsgSeqNum u32 and SendingTime u64.
pub const PACKET_HEADER_LEN: usize = 12;
/// The MsgSize field before each message.
pub const MSG_SIZE_LEN: usize = 2;
/// blockLength, templateId, schemaId, version.
pub const MESSAGE_HEADER_LEN: usize = 8;
/// The smallest MsgSize: the size field and the SBE header, no root.
pub const MIN_MSG_SIZE: usize = MSG_SIZE_LEN + MESSAGE_HEADER_LEN;
/// The schemaId of CME's market data schema; messages of any other are
/// not decoded (skipped by MsgSize).
pub const SCHEMA_ID: u16 = 1;

/// The packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    pub msg_seq_num: u32,
    /// Unix nanoseconds.
    pub sending_time: u64,
}

/// The SBE message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHeader {
    /// The root block's length on the wire.
    pub block_length: u16,
    pub template_id: u16,
    pub schema_id: u16,
    /// The schema version the message was encoded with.
    pub version: u16,
}

/// Why a datagram is not a valid CME MDP 3.0 packet (it is dropped whole).
/// Offsets are from the start of the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SbeError {
    /// Shorter than the 12-byte packet header.
    ShortPacket { len: usize },
    /// A SendingTime of 2^63 or more (venues.md `cme-mdp3`, Framing).
    SendingTimeTooLarge { sending_time: u64 },
    /// A packet header and no message.
    NoMessage,
    /// A MsgSize below 10 (the size field and the SBE header).
    MsgSizeTooSmall { offset: usize, size: u16 },
    /// A message (or a MsgSize field) that runs past the end of the packet.
    MsgSizePastPacket { offset: usize, size: u16 },
    /// A known template whose root block (the header's blockLength) runs
    /// past its message.
    RootPastMessage { offset: usize, template_id: u16 },
    /// A known template whose group `group` (its dimension header or its
    /// entries) runs past its message.
    GroupPastMessage {
        offset: usize,
        template_id: u16,
        group: u8,
    },
    /// A known template whose root (`group` None) or group entries are
    /// shorter than the fields the adapter reads.
    ShortBlock {
        offset: usize,
        template_id: u16,
        group: Option<u8>,
        len: u16,
        need: u16,
    },
}

impl fmt::Display for SbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SbeError::ShortPacket { len } => {
                write!(f, "{len} bytes: shorter than the 12-byte packet header")
            }
            SbeError::SendingTimeTooLarge { sending_time } => {
                write!(f, "SendingTime {sending_time} is 2^63 or more")
            }
            SbeError::NoMessage => write!(f, "a packet header and no message"),
            SbeError::MsgSizeTooSmall { offset, size } => {
                write!(f, "MsgSize {size} at byte {offset} is below 10")
            }
            SbeError::MsgSizePastPacket { offset, size } => {
                write!(
                    f,
                    "message at byte {offset} (MsgSize {size}) runs past the packet"
                )
            }
            SbeError::RootPastMessage {
                offset,
                template_id,
            } => write!(
                f,
                "template {template_id} at byte {offset}: root block runs past the message"
            ),
            SbeError::GroupPastMessage {
                offset,
                template_id,
                group,
            } => write!(
                f,
                "template {template_id} at byte {offset}: group {group} runs past the message"
            ),
            SbeError::ShortBlock {
                offset,
                template_id,
                group,
                len,
                need,
            } => match group {
                None => write!(
                    f,
                    "template {template_id} at byte {offset}: root of {len} bytes, {need} needed"
                ),
                Some(g) => write!(
                    f,
                    "template {template_id} at byte {offset}: group {g} entries of {len} bytes, \
                     {need} needed"
                ),
            },
        }
    }
}

impl std::error::Error for SbeError {}

#[inline(always)]
fn le<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Reads the packet header and returns it with the packet's messages (an
/// iterator that checks each MsgSize as it goes).
#[inline]
pub fn packet(datagram: &[u8]) -> Result<(PacketHeader, Messages<'_>), SbeError> {
    let (Some(seq), Some(time)) = (le::<4>(datagram, 0), le::<8>(datagram, 4)) else {
        return Err(SbeError::ShortPacket {
            len: datagram.len(),
        });
    };
    let sending_time = u64::from_le_bytes(time);
    if sending_time > i64::MAX as u64 {
        // Framing: a time no clock reaches, so the packet is invalid (and
        // every reader of the time agrees on it).
        return Err(SbeError::SendingTimeTooLarge { sending_time });
    }
    if datagram.len() == PACKET_HEADER_LEN {
        return Err(SbeError::NoMessage);
    }
    Ok((
        PacketHeader {
            msg_seq_num: u32::from_le_bytes(seq),
            sending_time,
        },
        Messages {
            datagram,
            pos: PACKET_HEADER_LEN,
        },
    ))
}

/// One message as framed: its header and the bytes after the header, up
/// to its MsgSize (root, groups, and any padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawMessage<'a> {
    /// Where its MsgSize field starts in the datagram.
    pub offset: usize,
    pub header: MessageHeader,
    pub body: &'a [u8],
}

/// The messages of a packet, in order. Yields an error (and then nothing)
/// at the first message whose MsgSize is below 10 or runs past the packet.
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    datagram: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<RawMessage<'a>, SbeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let d = self.datagram;
        let offset = self.pos;
        if offset >= d.len() {
            return None;
        }
        let fail = |me: &mut Self, e| {
            me.pos = d.len();
            Some(Err(e))
        };
        let Some(size) = le::<2>(d, offset).map(u16::from_le_bytes) else {
            return fail(self, SbeError::MsgSizePastPacket { offset, size: 0 });
        };
        let end = offset + size as usize;
        if (size as usize) < MIN_MSG_SIZE {
            return fail(self, SbeError::MsgSizeTooSmall { offset, size });
        }
        if end > d.len() {
            return fail(self, SbeError::MsgSizePastPacket { offset, size });
        }
        let h = &d[offset + MSG_SIZE_LEN..offset + MIN_MSG_SIZE];
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        self.pos = end;
        Some(Ok(RawMessage {
            offset,
            header: MessageHeader {
                block_length: u16_at(0),
                template_id: u16_at(2),
                schema_id: u16_at(4),
                version: u16_at(6),
            },
            body: &d[offset + MIN_MSG_SIZE..end],
        }))
    }
}

/// Where a field lies in its block and from which schema version on it is
/// carried (the schema's `sinceVersion`, 0 when it has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub offset: usize,
    pub len: usize,
    pub since: u16,
}

impl FieldSpec {
    pub const fn new(offset: usize, len: usize, since: u16) -> FieldSpec {
        FieldSpec { offset, len, since }
    }

    /// The first byte past the field.
    pub const fn end(&self) -> usize {
        self.offset + self.len
    }
}

/// The bytes a block must have at `version` to hold every field of
/// `fields` that version carries.
pub fn required_len(fields: &[FieldSpec], version: u16) -> usize {
    fields
        .iter()
        .filter(|f| f.since <= version)
        .map(FieldSpec::end)
        .max()
        .unwrap_or(0)
}

/// A root block or one group entry, exactly as long as the wire says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<'a> {
    bytes: &'a [u8],
    version: u16,
}

macro_rules! read_int {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        /// The field as a little-endian integer (`None`: not carried).
        #[inline(always)]
        pub fn $name(&self, f: FieldSpec) -> Option<$t> {
            self.array(f).map(<$t>::from_le_bytes)
        }
    )*};
}

impl<'a> Block<'a> {
    pub fn new(bytes: &'a [u8], version: u16) -> Block<'a> {
        Block { bytes, version }
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The schema version of its message.
    pub fn version(&self) -> u16 {
        self.version
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The field's bytes, if this version carries it and the block holds it.
    #[inline(always)]
    pub fn get(&self, f: FieldSpec) -> Option<&'a [u8]> {
        if self.version < f.since {
            return None;
        }
        self.bytes.get(f.offset..f.end())
    }

    #[inline(always)]
    fn array<const N: usize>(&self, f: FieldSpec) -> Option<[u8; N]> {
        if self.version < f.since {
            return None;
        }
        le::<N>(self.bytes, f.offset)
    }

    read_int!(u8: u8, i8: i8, u16: u16, i16: i16, u32: u32, i32: i32, u64: u64, i64: i64);
}

/// A decimal with the schema's constant exponent (PRICE: -7, PRICE9: -9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    pub mantissa: i64,
    pub exponent: i8,
}

impl Decimal {
    /// The value in units of 10^-9 (wire.md's fixed point): exact, or
    /// `None` when it does not fit an i64 or has more than 9 decimals.
    #[inline]
    pub fn to_nanos(self) -> Option<i64> {
        let shift = i32::from(self.exponent) + 9;
        if shift < 0 {
            return None;
        }
        self.mantissa.checked_mul(10i64.checked_pow(shift as u32)?)
    }
}

/// How a group's dimension header is laid out: blockLength u16 at 0, the
/// entry count at `num_offset` (`num_len` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dimension {
    pub header_len: usize,
    pub num_offset: usize,
    pub num_len: usize,
}

/// A repeating group of a template: its dimension and the schema version
/// from which messages carry it (a message of an earlier version has no
/// such group on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    pub dimension: Dimension,
    pub since: u16,
}

/// One group's entries as laid out on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawGroup<'a> {
    entries: &'a [u8],
    stride: u16,
    count: u16,
}

impl<'a> RawGroup<'a> {
    /// The entries' blockLength from the group header (0 for an absent group).
    pub fn stride(&self) -> u16 {
        self.stride
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    /// The entries' bytes (`stride` times `count`).
    pub fn entries(&self) -> &'a [u8] {
        self.entries
    }

    /// A group again from its parts, as `entries`, `stride` and `count`
    /// gave them: `None` when `entries` is not `stride` times `count`
    /// bytes long.
    #[inline]
    pub fn from_parts(entries: &'a [u8], stride: u16, count: u16) -> Option<RawGroup<'a>> {
        (entries.len() == stride as usize * count as usize).then_some(RawGroup {
            entries,
            stride,
            count,
        })
    }
}

/// A template's root and groups, checked to lie within its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout<'a, const N: usize> {
    pub root: Block<'a>,
    pub groups: [RawGroup<'a>; N],
}

impl<'a, const N: usize> Layout<'a, N> {
    /// Lays `body` (a message's bytes after its header) out as the root
    /// (`header.block_length` bytes) then the groups of `specs` its
    /// version carries. An error names the part that runs past the
    /// message; bytes after the last group are ignored. `offset` (the
    /// message's place in the datagram) is only for the error.
    #[inline]
    pub fn new(
        header: MessageHeader,
        body: &'a [u8],
        specs: &[GroupSpec; N],
        offset: usize,
    ) -> Result<Layout<'a, N>, SbeError> {
        let template_id = header.template_id;
        let root_len = header.block_length as usize;
        let Some(root) = body.get(..root_len) else {
            return Err(SbeError::RootPastMessage {
                offset,
                template_id,
            });
        };
        let mut groups = [RawGroup::default(); N];
        let mut pos = root_len;
        for (i, (spec, g)) in specs.iter().zip(groups.iter_mut()).enumerate() {
            if header.version < spec.since {
                continue;
            }
            let past = SbeError::GroupPastMessage {
                offset,
                template_id,
                group: i as u8,
            };
            let d = spec.dimension;
            let Some(h) = body.get(pos..pos + d.header_len) else {
                return Err(past);
            };
            let stride = u16::from_le_bytes([h[0], h[1]]);
            let count = match d.num_len {
                1 => u16::from(h[d.num_offset]),
                _ => u16::from_le_bytes([h[d.num_offset], h[d.num_offset + 1]]),
            };
            let start = pos + d.header_len;
            let end = start + stride as usize * count as usize;
            let Some(entries) = body.get(start..end) else {
                return Err(past);
            };
            *g = RawGroup {
                entries,
                stride,
                count,
            };
            pos = end;
        }
        Ok(Layout {
            root: Block::new(root, header.version),
            groups,
        })
    }
}

/// The entries of a group, each a view `E` over one entry's block.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a, E> {
    raw: RawGroup<'a>,
    version: u16,
    next: u16,
    _entry: PhantomData<E>,
}

impl<'a, E: From<Block<'a>>> Group<'a, E> {
    pub fn new(raw: RawGroup<'a>, version: u16) -> Group<'a, E> {
        Group {
            raw,
            version,
            next: 0,
            _entry: PhantomData,
        }
    }

    /// The entries' blockLength on the wire.
    pub fn stride(&self) -> u16 {
        self.raw.stride
    }

    /// How many entries the group has.
    pub fn count(&self) -> u16 {
        self.raw.count
    }

    /// The group as laid out on the wire (whatever was iterated).
    pub fn raw(&self) -> RawGroup<'a> {
        self.raw
    }

    /// The schema version of its message.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Entry `i` (from the first, whatever was iterated).
    #[inline]
    pub fn get(&self, i: u16) -> Option<E> {
        if i >= self.raw.count {
            return None;
        }
        let s = self.raw.stride as usize;
        let at = i as usize * s;
        self.raw
            .entries
            .get(at..at + s)
            .map(|b| E::from(Block::new(b, self.version)))
    }
}

impl<'a, E: From<Block<'a>>> Iterator for Group<'a, E> {
    type Item = E;

    #[inline]
    fn next(&mut self) -> Option<E> {
        let e = self.get(self.next)?;
        self.next += 1;
        Some(e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.raw.count.saturating_sub(self.next) as usize;
        (n, Some(n))
    }
}

impl<'a, E: From<Block<'a>>> ExactSizeIterator for Group<'a, E> {}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP_SIZE: Dimension = Dimension {
        header_len: 3,
        num_offset: 2,
        num_len: 1,
    };

    fn msg(template: u16, version: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((10 + body.len()) as u16).to_le_bytes());
        m.extend_from_slice(&0u16.to_le_bytes());
        m.extend_from_slice(&template.to_le_bytes());
        m.extend_from_slice(&1u16.to_le_bytes());
        m.extend_from_slice(&version.to_le_bytes());
        m.extend_from_slice(body);
        m
    }

    fn datagram(msgs: &[Vec<u8>]) -> Vec<u8> {
        let mut d = 7u32.to_le_bytes().to_vec();
        d.extend_from_slice(&99u64.to_le_bytes());
        for m in msgs {
            d.extend_from_slice(m);
        }
        d
    }

    #[test]
    fn packet_header_and_messages() {
        let d = datagram(&[msg(12, 9, &[]), msg(12, 9, &[1, 2, 3])]);
        let (h, msgs) = packet(&d).unwrap();
        assert_eq!(
            h,
            PacketHeader {
                msg_seq_num: 7,
                sending_time: 99
            }
        );
        let all: Vec<_> = msgs.map(Result::unwrap).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].offset, 12);
        assert_eq!(all[1].offset, 22);
        assert_eq!(all[1].body, &[1, 2, 3]);
        assert_eq!(all[1].header.template_id, 12);
        assert_eq!(all[1].header.schema_id, 1);
        assert_eq!(all[1].header.version, 9);
    }

    #[test]
    fn framing_errors() {
        assert_eq!(
            packet(&[0; 11]).err(),
            Some(SbeError::ShortPacket { len: 11 })
        );
        assert_eq!(packet(&[0; 12]).err(), Some(SbeError::NoMessage));
        let mut d = datagram(&[msg(12, 9, &[])]);
        d[12] = 9;
        let (_, mut m) = packet(&d).unwrap();
        assert_eq!(
            m.next(),
            Some(Err(SbeError::MsgSizeTooSmall {
                offset: 12,
                size: 9
            }))
        );
        assert_eq!(m.next(), None);
        let mut d = datagram(&[msg(12, 9, &[])]);
        d[12] = 11;
        let (_, mut m) = packet(&d).unwrap();
        assert_eq!(
            m.next(),
            Some(Err(SbeError::MsgSizePastPacket {
                offset: 12,
                size: 11
            }))
        );
        // One byte left over: no room for a MsgSize.
        let mut d = datagram(&[msg(12, 9, &[])]);
        d.push(0);
        let (_, m) = packet(&d).unwrap();
        let r: Vec<_> = m.collect();
        assert_eq!(
            r[1],
            Err(SbeError::MsgSizePastPacket {
                offset: 22,
                size: 0
            })
        );
    }

    #[test]
    fn fields_by_version_and_length() {
        let f = FieldSpec {
            offset: 2,
            len: 4,
            since: 9,
        };
        let b = [0, 0, 1, 0, 0, 0, 7];
        assert_eq!(Block::new(&b, 9).u32(f), Some(1));
        assert_eq!(Block::new(&b, 8).u32(f), None, "before sinceVersion");
        assert_eq!(Block::new(&b[..5], 9).u32(f), None, "block too short");
        assert_eq!(required_len(&[f], 8), 0);
        assert_eq!(required_len(&[f], 9), 6);
    }

    #[test]
    fn groups_take_their_stride_from_the_wire() {
        // Root of 2 bytes, then a groupSize group of 2 entries of 3 bytes,
        // then a group only version 9 carries.
        let body = [0xaa, 0xbb, 3, 0, 2, 1, 2, 3, 4, 5, 6, 1, 0, 1, 9];
        let specs = [
            GroupSpec {
                dimension: GROUP_SIZE,
                since: 0,
            },
            GroupSpec {
                dimension: GROUP_SIZE,
                since: 9,
            },
        ];
        let mut h = MessageHeader {
            block_length: 2,
            template_id: 32,
            schema_id: 1,
            version: 9,
        };
        let l = Layout::new(h, &body, &specs, 0).unwrap();
        assert_eq!(l.root.bytes(), &[0xaa, 0xbb]);
        let g: Group<Block> = Group::new(l.groups[0], 9);
        let e: Vec<_> = g.map(|b| b.bytes().to_vec()).collect();
        assert_eq!(e, vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(l.groups[1].count(), 1);
        // Version 8 has no second group: its bytes are left over.
        h.version = 8;
        let l = Layout::new(h, &body, &specs, 0).unwrap();
        assert_eq!(l.groups[1].count(), 0);
        // A root past the message, a group past the message.
        h.block_length = 16;
        assert!(matches!(
            Layout::new(h, &body, &specs, 0),
            Err(SbeError::RootPastMessage { .. })
        ));
        h.block_length = 2;
        h.version = 9;
        assert!(matches!(
            Layout::new(h, &body[..14], &specs, 0),
            Err(SbeError::GroupPastMessage { group: 1, .. })
        ));
    }

    #[test]
    fn decimals_scale_to_nanos() {
        let p = |mantissa, exponent| Decimal { mantissa, exponent }.to_nanos();
        assert_eq!(p(45_002_500_000, -7), Some(4_500_250_000_000));
        assert_eq!(p(-9_000_000_000, -7), Some(-900_000_000_000));
        assert_eq!(p(12, -9), Some(12));
        assert_eq!(p(1, -10), None);
        assert_eq!(p(i64::MAX / 10, -7), None);
    }
}
