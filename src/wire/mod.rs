//! The feed protocol of `wire.md`: MoldUDP64 packets carrying Quote,
//! Heartbeat and Snapshot messages. Pure code: zero-copy decoding (a
//! `Packet` borrows the datagram), no allocation per message, and an
//! encoder for the simulator and the tests.

use std::fmt;

mod encode;
pub use encode::{mold_header_bytes, PacketBuilder};

/// MoldUDP64 header: session (10), sequence (8), count (2).
pub const HEADER_LEN: usize = 20;
/// Quote and Snapshot payload size.
pub const QUOTE_LEN: usize = 58;
/// Heartbeat payload size.
pub const HEARTBEAT_LEN: usize = 26;
/// `count` of a channel heartbeat.
pub const COUNT_HEARTBEAT: u16 = 0;
/// `count` of an end-of-session packet.
pub const COUNT_END_OF_SESSION: u16 = 0xFFFF;

pub const TYPE_QUOTE: u8 = b'Q';
pub const TYPE_HEARTBEAT: u8 = b'H';
pub const TYPE_SNAPSHOT: u8 = b'S';

pub const FLAG_BID: u8 = 1;
pub const FLAG_ASK: u8 = 2;
/// Snapshot only: the provider restarted this symbol's sequence.
pub const FLAG_RESET: u8 = 4;

/// The longest symbol (gate.md: CME's run to 20 bytes; this protocol, IEX
/// and Nasdaq carry at most 8).
pub const SYMBOL_MAX: usize = 20;
/// Bytes of a symbol on this protocol's wire (and IEX's and Nasdaq's).
pub const WIRE_SYMBOL_LEN: usize = 8;
/// Words of a symbol's key (`Symbol::words`).
pub const SYMBOL_WORDS: usize = 3;

/// Up to 20 bytes of ASCII, left-aligned, padded with spaces to 24, held
/// as three big-endian words (`words`): comparing, ordering (byte order)
/// and hashing are word operations, and an 8-byte wire field is one load.
/// On the wire a symbol is the first 8 bytes (`from_wire`, `wire`).
#[derive(Clone, Copy, Eq, PartialOrd, Ord)]
pub struct Symbol([u64; SYMBOL_WORDS]);

/// Word by word, in general-purpose registers. The derived comparison reads
/// the three words as one 16-byte and one 8-byte vector load; a symbol its
/// caller has just written as three words (every decoded name) cannot be
/// forwarded from those stores to a 16-byte load, and each lookup then
/// waits for the stores to reach the cache.
impl PartialEq for Symbol {
    #[inline(always)]
    fn eq(&self, other: &Symbol) -> bool {
        let (a, b) = (self.0, other.0);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2])) == 0
    }
}

/// The words, as `eq` compares them.
impl std::hash::Hash for Symbol {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Eight spaces: the words of padding.
const SPACES: u64 = u64::from_be_bytes([b' '; 8]);

impl Default for Symbol {
    fn default() -> Symbol {
        Symbol([SPACES; SYMBOL_WORDS])
    }
}

impl Symbol {
    /// `None` when longer than 20 bytes, empty, or not printable ASCII
    /// without spaces (such a symbol cannot exist).
    pub fn parse(s: &str) -> Option<Symbol> {
        Symbol::from_token(s.as_bytes())
    }

    /// The bytes of a request token or a venue's name field as a symbol:
    /// `None` when empty, longer than 20 bytes or not printable ASCII.
    #[inline]
    pub fn from_token(b: &[u8]) -> Option<Symbol> {
        if !b.iter().all(|c| c.is_ascii_graphic()) {
            return None;
        }
        Symbol::from_raw(b)
    }

    /// Up to 20 bytes as they are (a request token: any byte a venue's
    /// raw field might hold can be asked for); `None` when empty or longer.
    #[inline]
    pub fn from_raw(b: &[u8]) -> Option<Symbol> {
        if b.is_empty() || b.len() > SYMBOL_MAX {
            return None;
        }
        let mut out = [b' '; 24];
        out[..b.len()].copy_from_slice(b);
        Some(Symbol::from_bytes(&out))
    }

    fn from_bytes(b: &[u8; 24]) -> Symbol {
        Symbol(std::array::from_fn(|i| {
            u64::from_be_bytes(b[8 * i..8 * i + 8].try_into().unwrap())
        }))
    }

    /// An 8-byte wire field as it is (any bytes: a venue's field is kept
    /// raw, so that a damaged name stays distinct and shows escaped).
    #[inline]
    pub fn from_wire(b: [u8; WIRE_SYMBOL_LEN]) -> Symbol {
        Symbol([u64::from_be_bytes(b), SPACES, SPACES])
    }

    /// The 8-byte wire field of a symbol that fits one (the first 8 bytes
    /// otherwise: encoders of 8-byte protocols never get a longer one).
    #[inline]
    pub fn wire(&self) -> [u8; WIRE_SYMBOL_LEN] {
        self.0[0].to_be_bytes()
    }

    /// Whether the symbol fits an 8-byte wire field.
    #[inline]
    pub fn fits_wire(&self) -> bool {
        self.0[1] == SPACES && self.0[2] == SPACES
    }

    /// The key words: the 24 padded bytes as three big-endian u64
    /// (docs/shm-layout.md "Symbol lookup"). The first word alone is an
    /// 8-byte symbol's key of layout version 2.
    #[inline]
    pub fn words(&self) -> [u64; SYMBOL_WORDS] {
        self.0
    }

    /// The symbol of key words (the inverse of `words`).
    pub fn from_words(w: [u64; SYMBOL_WORDS]) -> Symbol {
        Symbol(w)
    }

    /// A 64-bit hash whose top bits depend on every byte (index homes:
    /// take the top bits). The same function as docs/shm-layout.md's.
    #[inline]
    pub fn hash64(&self) -> u64 {
        hash_words(self.0)
    }

    /// The 24 padded bytes.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// The 24 padded bytes and the symbol's length without its padding
    /// (the name is `&bytes[..len]`).
    pub fn trimmed(&self) -> ([u8; 24], usize) {
        let b = self.to_bytes();
        let len = b.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
        (b, len)
    }

    /// The symbol's length without its padding.
    pub fn len(&self) -> usize {
        self.trimmed().1
    }

    /// Whether the symbol is all padding (never for a parsed one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `Symbol::hash64` of key words: the words added, the second and third
/// rotated, then one Fibonacci multiply (its top bits depend on every
/// byte). An 8-byte symbol's padding words add a constant.
#[inline]
pub fn hash_words(w: [u64; SYMBOL_WORDS]) -> u64 {
    w[0].wrapping_add(w[1].rotate_left(21))
        .wrapping_add(w[2].rotate_left(42))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (bytes, len) = self.trimmed();
        for &c in &bytes[..len] {
            if c.is_ascii_graphic() {
                write!(f, "{}", c as char)?;
            } else {
                write!(f, "\\x{c:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Symbol({self})")
    }
}

/// The 10-byte ASCII session id naming the provider's sequence space.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SessionId(pub [u8; 10]);

impl SessionId {
    /// Pads with spaces; `None` when longer than 10 bytes.
    pub fn parse(s: &str) -> Option<SessionId> {
        let b = s.as_bytes();
        if b.len() > 10 {
            return None;
        }
        let mut out = [b' '; 10];
        out[..b.len()].copy_from_slice(b);
        Some(SessionId(out))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &c in &self.0 {
            if c.is_ascii_graphic() || c == b' ' {
                write!(f, "{}", c as char)?;
            } else {
                write!(f, "\\x{c:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

/// One side of a quote: fixed-point price (x 10^9) and quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Side {
    pub px: i64,
    pub qty: u64,
}

/// A Quote (`Q`) or Snapshot (`S`): the same 58-byte layout. Fields are
/// kept raw so that decoding and encoding round-trip byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Quote {
    pub flags: u8,
    pub symbol: Symbol,
    pub seq: u64,
    pub source_ts: u64,
    pub bid_px: i64,
    pub bid_qty: u64,
    pub ask_px: i64,
    pub ask_qty: u64,
}

impl Quote {
    pub fn bid(&self) -> Option<Side> {
        (self.flags & FLAG_BID != 0).then_some(Side {
            px: self.bid_px,
            qty: self.bid_qty,
        })
    }

    pub fn ask(&self) -> Option<Side> {
        (self.flags & FLAG_ASK != 0).then_some(Side {
            px: self.ask_px,
            qty: self.ask_qty,
        })
    }

    /// Snapshot only (bit 2).
    pub fn reset(&self) -> bool {
        self.flags & FLAG_RESET != 0
    }

    /// Builds a quote from optional sides (absent sides are zeros on the wire).
    pub fn new(
        symbol: Symbol,
        seq: u64,
        source_ts: u64,
        bid: Option<Side>,
        ask: Option<Side>,
    ) -> Quote {
        let b = bid.unwrap_or_default();
        let a = ask.unwrap_or_default();
        Quote {
            flags: ((bid.is_some() as u8) * FLAG_BID) | ((ask.is_some() as u8) * FLAG_ASK),
            symbol,
            seq,
            source_ts,
            bid_px: b.px,
            bid_qty: b.qty,
            ask_px: a.px,
            ask_qty: a.qty,
        }
    }

    #[inline(always)]
    fn decode(p: &[u8]) -> Quote {
        Quote {
            flags: p[1],
            symbol: Symbol::from_wire(p[2..10].try_into().unwrap()),
            seq: be_u64(&p[10..]),
            source_ts: be_u64(&p[18..]),
            bid_px: be_u64(&p[26..]) as i64,
            bid_qty: be_u64(&p[34..]),
            ask_px: be_u64(&p[42..]) as i64,
            ask_qty: be_u64(&p[50..]),
        }
    }

    /// The 58-byte payload with the given type byte (`Q` or `S`).
    pub fn encode(&self, kind: u8) -> [u8; QUOTE_LEN] {
        let mut p = [0u8; QUOTE_LEN];
        p[0] = kind;
        p[1] = self.flags;
        p[2..10].copy_from_slice(&self.symbol.wire());
        p[10..18].copy_from_slice(&self.seq.to_be_bytes());
        p[18..26].copy_from_slice(&self.source_ts.to_be_bytes());
        p[26..34].copy_from_slice(&self.bid_px.to_be_bytes());
        p[34..42].copy_from_slice(&self.bid_qty.to_be_bytes());
        p[42..50].copy_from_slice(&self.ask_px.to_be_bytes());
        p[50..58].copy_from_slice(&self.ask_qty.to_be_bytes());
        p
    }
}

/// A per-symbol Heartbeat (`H`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Heartbeat {
    pub flags: u8,
    pub symbol: Symbol,
    pub next_seq: u64,
    pub source_ts: u64,
}

impl Heartbeat {
    #[inline(always)]
    fn decode(p: &[u8]) -> Heartbeat {
        Heartbeat {
            flags: p[1],
            symbol: Symbol::from_wire(p[2..10].try_into().unwrap()),
            next_seq: be_u64(&p[10..]),
            source_ts: be_u64(&p[18..]),
        }
    }

    pub fn encode(&self) -> [u8; HEARTBEAT_LEN] {
        let mut p = [0u8; HEARTBEAT_LEN];
        p[0] = TYPE_HEARTBEAT;
        p[1] = self.flags;
        p[2..10].copy_from_slice(&self.symbol.wire());
        p[10..18].copy_from_slice(&self.next_seq.to_be_bytes());
        p[18..26].copy_from_slice(&self.source_ts.to_be_bytes());
        p
    }
}

/// One decoded message block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Quote(Quote),
    Heartbeat(Heartbeat),
    Snapshot(Quote),
    /// A block of a type this protocol does not know: skipped by its length.
    Unknown {
        kind: u8,
        payload: &'a [u8],
    },
}

impl Message<'_> {
    pub fn symbol(&self) -> Option<Symbol> {
        match self {
            Message::Quote(q) | Message::Snapshot(q) => Some(q.symbol),
            Message::Heartbeat(h) => Some(h.symbol),
            Message::Unknown { .. } => None,
        }
    }

    pub fn source_ts(&self) -> Option<u64> {
        match self {
            Message::Quote(q) | Message::Snapshot(q) => Some(q.source_ts),
            Message::Heartbeat(h) => Some(h.source_ts),
            Message::Unknown { .. } => None,
        }
    }
}

/// Why a datagram is invalid. An invalid datagram is dropped whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Under the 20-byte header.
    ShortHeader { len: usize },
    /// Block `block`'s length field or payload runs past the datagram.
    Truncated { block: u16 },
    /// Bytes left after the last block (or after a heartbeat/end of session).
    TrailingBytes { extra: usize },
    /// A block of length 0 has no type.
    EmptyBlock { block: u16 },
    /// A block of a known type shorter than that type's size.
    ShortBlock { block: u16, kind: u8, len: u16 },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::ShortHeader { len } => write!(
                f,
                "datagram of {len} bytes is shorter than the 20-byte header"
            ),
            WireError::Truncated { block } => {
                write!(f, "block {block} runs past the end of the datagram")
            }
            WireError::TrailingBytes { extra } => write!(f, "{extra} bytes after the last block"),
            WireError::EmptyBlock { block } => write!(f, "block {block} has length 0"),
            WireError::ShortBlock { block, kind, len } => {
                write!(f, "block {block} of type 0x{kind:02x} is {len} bytes, shorter than its type's size")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// What a valid packet is, by its `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketKind {
    /// `count` message blocks.
    Data,
    /// `count = 0`: `sequence` is the next channel sequence number.
    Heartbeat,
    /// `count = 0xFFFF`: the session ended.
    EndOfSession,
}

/// A validated MoldUDP64 packet borrowing its datagram.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    pub session: SessionId,
    pub sequence: u64,
    pub count: u16,
    blocks: &'a [u8],
}

/// The symbol of a datagram's first message block, read in place without
/// validating the datagram (wire.md layout: header, block length, type,
/// flags, symbol; the same offsets as `Packet::parse`). For prefetch hints
/// only (`Feed::prefetch_index`): garbage in gives a useless
/// hint, never a wrong result. Only the first block is looked at: one
/// message per datagram is the common case, and a hint for every block
/// would cost more than it saves on a long packet.
#[inline]
pub fn peek_first_symbol(datagram: &[u8]) -> Option<Symbol> {
    let count = u16::from_be_bytes([*datagram.get(18)?, *datagram.get(19)?]);
    if count == COUNT_HEARTBEAT || count == COUNT_END_OF_SESSION {
        return None;
    }
    let block = datagram.get(HEADER_LEN + 2..HEADER_LEN + 12)?;
    match block[0] {
        TYPE_QUOTE | TYPE_SNAPSHOT | TYPE_HEARTBEAT => {
            Some(Symbol::from_wire(block[2..10].try_into().unwrap()))
        }
        _ => None,
    }
}

/// The size of a tickgate message type (wire.md); 1 for unknown types.
#[inline]
fn tickgate_min_len(kind: u8) -> usize {
    match kind {
        TYPE_QUOTE | TYPE_SNAPSHOT => QUOTE_LEN,
        TYPE_HEARTBEAT => HEARTBEAT_LEN,
        _ => 1,
    }
}

impl<'a> Packet<'a> {
    /// Validates the whole datagram (wire.md "valid") before anything can
    /// be applied: a packet that parses is safe to iterate without checks.
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>, WireError> {
        Packet::parse_with(buf, tickgate_min_len)
    }

    /// The MoldUDP64 framing of wire.md with another message set (e.g.
    /// ITCH 5.0): `min_len(type)` is the size of a known type (a shorter
    /// block makes the datagram invalid), 1 for an unknown one.
    #[inline]
    pub fn parse_with(
        buf: &'a [u8],
        min_len: impl Fn(u8) -> usize,
    ) -> Result<Packet<'a>, WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::ShortHeader { len: buf.len() });
        }
        let session = SessionId(buf[0..10].try_into().unwrap());
        let sequence = be_u64(&buf[10..]);
        let count = u16::from_be_bytes([buf[18], buf[19]]);
        Packet::from_parts(session, sequence, count, &buf[HEADER_LEN..], min_len)
    }

    /// [`Packet::parse_with`] of the datagram made of these header fields
    /// and `blocks` (what follows its 20-byte header), without building
    /// it: the same checks, the same packet.
    #[inline]
    pub fn from_parts(
        session: SessionId,
        sequence: u64,
        count: u16,
        blocks: &'a [u8],
        min_len: impl Fn(u8) -> usize,
    ) -> Result<Packet<'a>, WireError> {
        if count == COUNT_HEARTBEAT || count == COUNT_END_OF_SESSION {
            if !blocks.is_empty() {
                return Err(WireError::TrailingBytes {
                    extra: blocks.len(),
                });
            }
        } else {
            let mut rest = blocks;
            for block in 0..count {
                if rest.len() < 2 {
                    return Err(WireError::Truncated { block });
                }
                let len = u16::from_be_bytes([rest[0], rest[1]]);
                let end = 2 + len as usize;
                if rest.len() < end {
                    return Err(WireError::Truncated { block });
                }
                if len == 0 {
                    return Err(WireError::EmptyBlock { block });
                }
                let kind = rest[2];
                if (len as usize) < min_len(kind) {
                    return Err(WireError::ShortBlock { block, kind, len });
                }
                rest = &rest[end..];
            }
            if !rest.is_empty() {
                return Err(WireError::TrailingBytes { extra: rest.len() });
            }
        }
        Ok(Packet {
            session,
            sequence,
            count,
            blocks,
        })
    }

    /// A packet of a datagram that `parse` or `parse_with` already
    /// accepted, without validating it again (the engine parses once, then
    /// the venue adapter walks the blocks). On a datagram that was not
    /// validated, iterating the blocks may panic.
    #[inline]
    pub fn validated(buf: &'a [u8]) -> Packet<'a> {
        Packet::validated_parts(
            SessionId(buf[0..10].try_into().unwrap()),
            be_u64(&buf[10..]),
            u16::from_be_bytes([buf[18], buf[19]]),
            &buf[HEADER_LEN..],
        )
    }

    /// [`Packet::validated`] of the parts [`Packet::from_parts`] accepted.
    #[inline]
    pub fn validated_parts(
        session: SessionId,
        sequence: u64,
        count: u16,
        blocks: &'a [u8],
    ) -> Packet<'a> {
        Packet {
            session,
            sequence,
            count,
            blocks,
        }
    }

    pub fn kind(&self) -> PacketKind {
        match self.count {
            COUNT_HEARTBEAT => PacketKind::Heartbeat,
            COUNT_END_OF_SESSION => PacketKind::EndOfSession,
            _ => PacketKind::Data,
        }
    }

    /// Number of message blocks (0 for a heartbeat or end of session).
    pub fn message_count(&self) -> u16 {
        match self.kind() {
            PacketKind::Data => self.count,
            _ => 0,
        }
    }

    /// The message blocks in order; block `i` carries channel sequence
    /// `sequence + i`.
    pub fn blocks(&self) -> Blocks<'a> {
        Blocks {
            rest: match self.kind() {
                PacketKind::Data => self.blocks,
                _ => &[],
            },
        }
    }

    /// The decoded messages in order.
    pub fn messages(&self) -> impl Iterator<Item = Message<'a>> + 'a {
        self.blocks().map(decode_block)
    }
}

/// Raw block payloads (a 2-byte length, then the payload): every block
/// of a validated packet; of other bytes, those up to the first block
/// that does not fit.
#[derive(Clone, Debug)]
pub struct Blocks<'a> {
    rest: &'a [u8],
}

impl<'a> Blocks<'a> {
    /// The blocks of `bytes` (message blocks after a MoldUDP64 header),
    /// validated or not.
    pub fn over(bytes: &'a [u8]) -> Blocks<'a> {
        Blocks { rest: bytes }
    }
}

impl<'a> Iterator for Blocks<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, tail) = self.rest.split_first_chunk::<2>()?;
        let len = u16::from_be_bytes(*len) as usize;
        let payload = tail.get(..len)?;
        self.rest = &tail[len..];
        Some(payload)
    }
}

/// Decodes one block payload of a validated packet (its size was checked).
/// Always inlined: returned through memory, a decoded symbol's three
/// word stores would be read back by wider loads that cannot take them
/// from the store buffer (BENCHMARKS.md, "The stall behind it").
#[inline(always)]
pub fn decode_block(payload: &[u8]) -> Message<'_> {
    match payload[0] {
        TYPE_QUOTE => Message::Quote(Quote::decode(payload)),
        TYPE_SNAPSHOT => Message::Snapshot(Quote::decode(payload)),
        TYPE_HEARTBEAT => Message::Heartbeat(Heartbeat::decode(payload)),
        kind => Message::Unknown { kind, payload },
    }
}

/// Provider timestamps are u64 on the wire; beyond `i64::MAX` they are
/// clamped (year 2262: a corrupt value, judged as far in the future).
#[inline]
pub fn ts_i64(ts: u64) -> i64 {
    ts.min(i64::MAX as u64) as i64
}

#[inline]
fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Formats a fixed-point price (x 10^9) as gate.md wants it: exact,
/// no exponent, no trailing zeros (`1.08512`, `100`, `-0.5`). Writes into
/// any `fmt::Write` without allocating.
pub fn write_price<W: fmt::Write>(w: &mut W, px: i64) -> fmt::Result {
    let neg = px < 0;
    let abs = px.unsigned_abs();
    let int = abs / 1_000_000_000;
    let mut frac = abs % 1_000_000_000;
    if neg {
        w.write_char('-')?;
    }
    write!(w, "{int}")?;
    if frac != 0 {
        let mut digits = 9;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        write!(w, ".{frac:0digits$}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(px: i64) -> String {
        let mut s = String::new();
        write_price(&mut s, px).unwrap();
        s
    }

    #[test]
    fn prices_are_exact_decimals() {
        assert_eq!(price(1_085_120_000), "1.08512");
        assert_eq!(price(100_000_000_000), "100");
        assert_eq!(price(-500_000_000), "-0.5");
        assert_eq!(price(0), "0");
        assert_eq!(price(1), "0.000000001");
        assert_eq!(price(-1), "-0.000000001");
        assert_eq!(price(i64::MIN), "-9223372036.854775808");
        assert_eq!(price(i64::MAX), "9223372036.854775807");
    }

    #[test]
    fn symbol_parse_pads_and_rejects() {
        let eur = Symbol::parse("EURUSD").unwrap();
        assert_eq!(eur.wire(), *b"EURUSD  ");
        assert!(eur.fits_wire());
        assert_eq!(eur, Symbol::from_wire(*b"EURUSD  "));
        assert_eq!(eur.to_string(), "EURUSD");
        // The first word is the 8-byte key of layout version 2.
        assert_eq!(eur.words()[0], u64::from_be_bytes(*b"EURUSD  "));
        assert_eq!(eur.words()[1..], [0x2020_2020_2020_2020; 2]);
        let long = Symbol::parse("ESM6-ESU6-ESZ6-ESH7X").unwrap();
        assert_eq!(long.to_string(), "ESM6-ESU6-ESZ6-ESH7X");
        assert!(!long.fits_wire());
        assert_eq!(Symbol::from_words(long.words()), long);
        assert_ne!(
            long.hash64(),
            Symbol::parse("ESM6-ESU6-ESZ6-ESH7Y").unwrap().hash64()
        );
        assert!(Symbol::parse("ESM6-ESU6-ESZ6-ESH7XY").is_none());
        assert!(Symbol::parse("").is_none());
        assert!(Symbol::parse("A B").is_none());
        assert_eq!(Symbol::from_raw(b"A\x01"), Symbol::from_raw(b"A\x01"));
        assert!(Symbol::from_raw(&[b'A'; 21]).is_none());
    }

    /// The word-by-word comparison is byte equality: symbols that differ in
    /// any one byte of any word differ, and equal bytes are equal.
    #[test]
    fn symbol_equality_is_byte_equality() {
        let base = *b"ESM6-ESU6-ESZ6-ESH7X";
        let a = Symbol::from_raw(&base).unwrap();
        assert_eq!(a, Symbol::from_raw(&base).unwrap());
        for i in 0..base.len() {
            let mut b = base;
            b[i] ^= 0x01;
            let b = Symbol::from_raw(&b).unwrap();
            assert_ne!(a, b, "byte {i}");
            assert_eq!(a == b, a.to_bytes() == b.to_bytes());
        }
        // Padding counts: a shorter name is another symbol.
        assert_ne!(a, Symbol::from_raw(&base[..19]).unwrap());
    }

    /// Unvalidated bytes give the blocks that fit, then stop.
    #[test]
    fn blocks_over_any_bytes_stop_at_the_first_that_does_not_fit() {
        let bytes = [0, 2, b'a', b'b', 0, 0, 0, 5, b'x'];
        let got: Vec<&[u8]> = Blocks::over(&bytes).collect();
        assert_eq!(got, [&b"ab"[..], &b""[..]]);
        assert_eq!(Blocks::over(&[0]).count(), 0);
        assert_eq!(Blocks::over(&[]).count(), 0);
    }

    #[test]
    fn header_and_block_errors() {
        assert_eq!(
            Packet::parse(&[0; 19]).unwrap_err(),
            WireError::ShortHeader { len: 19 }
        );
        let mut hb = [b'X'; 20];
        hb[18] = 0;
        hb[19] = 0;
        assert!(Packet::parse(&hb).is_ok());
        let mut with_body = hb.to_vec();
        with_body.push(0);
        assert_eq!(
            Packet::parse(&with_body).unwrap_err(),
            WireError::TrailingBytes { extra: 1 }
        );
        // count 1, block length 3 but only 2 bytes follow
        let mut p = hb.to_vec();
        p[19] = 1;
        p.extend_from_slice(&[0, 3, b'Z', 0]);
        assert_eq!(
            Packet::parse(&p).unwrap_err(),
            WireError::Truncated { block: 0 }
        );
        // a heartbeat block one byte short
        let mut p = hb.to_vec();
        p[19] = 1;
        p.extend_from_slice(&[0, 25]);
        p.extend_from_slice(&[b'H'; 25]);
        assert_eq!(
            Packet::parse(&p).unwrap_err(),
            WireError::ShortBlock {
                block: 0,
                kind: b'H',
                len: 25
            }
        );
    }
}
