//! ITCH 5.0 messages (venues.md `nasdaq-itch`): sizes, decoding and
//! encoding. Pure code: decoding reads fixed offsets from the block and
//! allocates nothing; a [`Message`] is `Copy` and holds plain fields.
//!
//! Every message begins with the 11-byte common header: type u8, stock
//! locate u16, tracking number u16, timestamp u48 (ns since New York
//! midnight). Integers are big-endian; prices are u32 with 4 implied
//! decimals (kept raw here, scaled by the adapter, V4).

use crate::wire::Symbol;

/// Length of the common header.
pub const HEADER_LEN: usize = 11;

pub const TYPE_SYSTEM_EVENT: u8 = b'S';
pub const TYPE_STOCK_DIRECTORY: u8 = b'R';
pub const TYPE_TRADING_ACTION: u8 = b'H';
pub const TYPE_REG_SHO: u8 = b'Y';
pub const TYPE_PARTICIPANT_POSITION: u8 = b'L';
pub const TYPE_MWCB_DECLINE: u8 = b'V';
pub const TYPE_MWCB_STATUS: u8 = b'W';
pub const TYPE_IPO_QUOTING: u8 = b'K';
pub const TYPE_LULD_COLLAR: u8 = b'J';
pub const TYPE_OPERATIONAL_HALT: u8 = b'h';
pub const TYPE_ADD: u8 = b'A';
pub const TYPE_ADD_MPID: u8 = b'F';
pub const TYPE_EXECUTED: u8 = b'E';
pub const TYPE_EXECUTED_PRICE: u8 = b'C';
pub const TYPE_CANCEL: u8 = b'X';
pub const TYPE_DELETE: u8 = b'D';
pub const TYPE_REPLACE: u8 = b'U';
pub const TYPE_TRADE: u8 = b'P';
pub const TYPE_CROSS_TRADE: u8 = b'Q';
pub const TYPE_BROKEN_TRADE: u8 = b'B';
pub const TYPE_NOII: u8 = b'I';
pub const TYPE_RPII: u8 = b'N';
pub const TYPE_DLCR: u8 = b'O';

// Sizes of the types `decode` reads fields from: one place for both it and
// `message_size`.
const SIZE_SYSTEM_EVENT: usize = 12;
const SIZE_STOCK_DIRECTORY: usize = 39;
const SIZE_TRADING_ACTION: usize = 25;
const SIZE_OPERATIONAL_HALT: usize = 21;
pub const SIZE_ADD: usize = 36;
pub const SIZE_ADD_MPID: usize = 40;
pub const SIZE_EXECUTED: usize = 31;
pub const SIZE_EXECUTED_PRICE: usize = 36;
pub const SIZE_CANCEL: usize = 23;
pub const SIZE_DELETE: usize = 19;
pub const SIZE_REPLACE: usize = 35;

/// Largest timestamp the u48 field holds.
pub const TIMESTAMP_MAX: u64 = (1 << 48) - 1;

/// The size of a message of type `kind`, `None` for a type ITCH 5.0 does
/// not define. A block of a known type shorter than this makes the
/// datagram invalid; bytes past it are ignored (wire.md).
#[inline]
pub fn message_size(kind: u8) -> Option<usize> {
    // A table: every block of a day is sized by it (by the BinaryFILE
    // reader and by the datagram's validation), where a `match` of 22
    // arms compiles to a jump table and a branch a block.
    match SIZES[kind as usize] {
        0 => None,
        size => Some(size as usize),
    }
}

/// [`message_size`] of each type, 0 for an unknown one.
const SIZES: [u8; 256] = {
    let mut t = [0u8; 256];
    let known: [(u8, usize); 23] = [
        (TYPE_SYSTEM_EVENT, SIZE_SYSTEM_EVENT),
        (TYPE_STOCK_DIRECTORY, SIZE_STOCK_DIRECTORY),
        (TYPE_TRADING_ACTION, SIZE_TRADING_ACTION),
        (b'Y', 20),
        (b'L', 26),
        (b'V', 35),
        (b'W', 12),
        (b'K', 28),
        (b'J', 35),
        (TYPE_OPERATIONAL_HALT, SIZE_OPERATIONAL_HALT),
        (TYPE_ADD, SIZE_ADD),
        (TYPE_ADD_MPID, SIZE_ADD_MPID),
        (TYPE_EXECUTED, SIZE_EXECUTED),
        (TYPE_EXECUTED_PRICE, SIZE_EXECUTED_PRICE),
        (TYPE_CANCEL, SIZE_CANCEL),
        (TYPE_DELETE, SIZE_DELETE),
        (TYPE_REPLACE, SIZE_REPLACE),
        (b'P', 44),
        (b'Q', 40),
        (b'B', 19),
        (b'I', 50),
        (b'N', 20),
        (b'O', 48),
    ];
    let mut i = 0;
    while i < known.len() {
        let (kind, size) = known[i];
        assert!(t[kind as usize] == 0, "a type listed twice");
        assert!(size > 0 && size < 256);
        t[kind as usize] = size as u8;
        i += 1;
    }
    t
};

/// Order side: `B` buy, `S` sell on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn from_byte(b: u8) -> Option<Side> {
        match b {
            b'B' => Some(Side::Buy),
            b'S' => Some(Side::Sell),
            _ => None,
        }
    }

    pub fn to_byte(self) -> u8 {
        match self {
            Side::Buy => b'B',
            Side::Sell => b'S',
        }
    }
}

/// The common header, less the type byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub locate: u16,
    pub tracking: u16,
    /// Nanoseconds since New York midnight (u48 on the wire).
    pub timestamp: u64,
}

/// The execution price of an Order Executed With Price (`C`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecPrice {
    /// `Y`/`N`: whether the execution is printed to the tape.
    pub printable: u8,
    pub price: u32,
}

/// One decoded ITCH 5.0 message. Only the fields the book and the symbol
/// rules use are kept, plus those needed to encode the same message again
/// (attribution, match number, reason); the rest of a message's bytes are
/// written as zeros by [`encode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// `S`: system event code (`O`, `S`, `Q`, `M`, `E`, `C`). No effect on
    /// books; kept apart from `Other` so the simulator can write the code.
    SystemEvent { header: Header, event: u8 },
    /// `R`: names the locate's symbol.
    StockDirectory { header: Header, stock: Symbol },
    /// `A` (attribution `None`) and `F` (attribution `Some`).
    AddOrder {
        header: Header,
        order_ref: u64,
        side: Side,
        shares: u32,
        stock: Symbol,
        price: u32,
        attribution: Option<[u8; 4]>,
    },
    /// An `A` or `F` whose side byte is neither `B` nor `S`. Chosen
    /// semantics: the message is malformed, so the book must not guess a
    /// side and adds nothing; the caller counts it as invalid. The stock is
    /// still decoded because an Add names its locate's symbol (venues.md)
    /// and the caller may choose to honour that.
    AddOrderBadSide {
        header: Header,
        order_ref: u64,
        side: u8,
        shares: u32,
        stock: Symbol,
        price: u32,
        attribution: Option<[u8; 4]>,
    },
    /// `E` (`price` `None`) and `C` (`price` `Some`).
    Executed {
        header: Header,
        order_ref: u64,
        shares: u32,
        match_number: u64,
        price: Option<ExecPrice>,
    },
    /// `X`: cancels part of an order.
    Cancel {
        header: Header,
        order_ref: u64,
        shares: u32,
    },
    /// `D`: removes the order.
    Delete { header: Header, order_ref: u64 },
    /// `U`: removes `original`, adds `new_ref` with its side and locate.
    Replace {
        header: Header,
        original: u64,
        new_ref: u64,
        shares: u32,
        price: u32,
    },
    /// `H`: trading state `H`, `P`, `Q` (halted) or `T` (trading).
    TradingAction {
        header: Header,
        stock: Symbol,
        state: u8,
        reason: [u8; 4],
    },
    /// `h`: action `H` (halted) or `T` (that halt ends).
    OperationalHalt {
        header: Header,
        stock: Symbol,
        market_code: u8,
        action: u8,
    },
    /// Any other ITCH 5.0 type: known by size, changes no book.
    Other { header: Header, kind: u8 },
}

impl Message {
    pub fn header(&self) -> Header {
        match *self {
            Message::SystemEvent { header, .. }
            | Message::StockDirectory { header, .. }
            | Message::AddOrder { header, .. }
            | Message::AddOrderBadSide { header, .. }
            | Message::Executed { header, .. }
            | Message::Cancel { header, .. }
            | Message::Delete { header, .. }
            | Message::Replace { header, .. }
            | Message::TradingAction { header, .. }
            | Message::OperationalHalt { header, .. }
            | Message::Other { header, .. } => header,
        }
    }

    pub fn locate(&self) -> u16 {
        self.header().locate
    }

    pub fn timestamp(&self) -> u64 {
        self.header().timestamp
    }

    /// The wire type byte.
    pub fn kind(&self) -> u8 {
        match *self {
            Message::SystemEvent { .. } => TYPE_SYSTEM_EVENT,
            Message::StockDirectory { .. } => TYPE_STOCK_DIRECTORY,
            Message::AddOrder { attribution, .. }
            | Message::AddOrderBadSide { attribution, .. } => {
                if attribution.is_some() {
                    TYPE_ADD_MPID
                } else {
                    TYPE_ADD
                }
            }
            Message::Executed { price, .. } => {
                if price.is_some() {
                    TYPE_EXECUTED_PRICE
                } else {
                    TYPE_EXECUTED
                }
            }
            Message::Cancel { .. } => TYPE_CANCEL,
            Message::Delete { .. } => TYPE_DELETE,
            Message::Replace { .. } => TYPE_REPLACE,
            Message::TradingAction { .. } => TYPE_TRADING_ACTION,
            Message::OperationalHalt { .. } => TYPE_OPERATIONAL_HALT,
            Message::Other { kind, .. } => kind,
        }
    }

    /// The stock named in the message itself (R, A, F, H, h), which makes
    /// the locate's symbol known.
    pub fn stock(&self) -> Option<Symbol> {
        match *self {
            Message::StockDirectory { stock, .. }
            | Message::AddOrder { stock, .. }
            | Message::AddOrderBadSide { stock, .. }
            | Message::TradingAction { stock, .. }
            | Message::OperationalHalt { stock, .. } => Some(stock),
            _ => None,
        }
    }
}

#[inline]
fn u16_at(m: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([m[at], m[at + 1]])
}

#[inline]
fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(m[at..at + 4].try_into().unwrap())
}

#[inline]
fn u64_at(m: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(m[at..at + 8].try_into().unwrap())
}

#[inline]
fn bytes4_at(m: &[u8], at: usize) -> [u8; 4] {
    m[at..at + 4].try_into().unwrap()
}

#[inline]
fn stock_at(m: &[u8], at: usize) -> Symbol {
    Symbol::from_wire(m[at..at + 8].try_into().unwrap())
}

#[inline]
fn header_of(m: &[u8]) -> Header {
    Header {
        locate: u16_at(m, 1),
        tracking: u16_at(m, 3),
        timestamp: timestamp_of(m.first_chunk().expect("a known type holds the header")),
    }
}

/// Decodes one message block. `None` for an unknown type, and also for a
/// block shorter than its type's size (the framing check should already
/// have made that datagram invalid; this keeps decoding panic-free on any
/// input). Bytes past the type's size are ignored.
#[inline(always)]
pub fn decode(msg: &[u8]) -> Option<Message> {
    let kind = *msg.first()?;
    // Each arm takes a fixed-size array of its type's size: the field
    // offsets are then constants into an array of known length, so no
    // field read needs a bounds check of its own.
    Some(match kind {
        TYPE_SYSTEM_EVENT => {
            let m = msg.first_chunk::<SIZE_SYSTEM_EVENT>()?;
            Message::SystemEvent {
                header: header_of(m),
                event: m[11],
            }
        }
        TYPE_STOCK_DIRECTORY => {
            let m = msg.first_chunk::<SIZE_STOCK_DIRECTORY>()?;
            Message::StockDirectory {
                header: header_of(m),
                stock: stock_at(m, 11),
            }
        }
        TYPE_ADD => add_order(msg.first_chunk::<SIZE_ADD>()?, None),
        TYPE_ADD_MPID => {
            let m = msg.first_chunk::<SIZE_ADD_MPID>()?;
            add_order(m, Some(bytes4_at(m, 36)))
        }
        TYPE_EXECUTED => {
            let m = msg.first_chunk::<SIZE_EXECUTED>()?;
            let (order_ref, shares) = reduce_fields(m.first_chunk().expect("E is longer than X"));
            Message::Executed {
                header: header_of(m),
                order_ref,
                shares,
                match_number: u64_at(m, 23),
                price: None,
            }
        }
        TYPE_EXECUTED_PRICE => {
            let m = msg.first_chunk::<SIZE_EXECUTED_PRICE>()?;
            let (order_ref, shares) = reduce_fields(m.first_chunk().expect("C is longer than X"));
            Message::Executed {
                header: header_of(m),
                order_ref,
                shares,
                match_number: u64_at(m, 23),
                price: Some(ExecPrice {
                    printable: m[31],
                    price: u32_at(m, 32),
                }),
            }
        }
        TYPE_CANCEL => {
            let m = msg.first_chunk::<SIZE_CANCEL>()?;
            let (order_ref, shares) = reduce_fields(m);
            Message::Cancel {
                header: header_of(m),
                order_ref,
                shares,
            }
        }
        TYPE_DELETE => {
            let m = msg.first_chunk::<SIZE_DELETE>()?;
            Message::Delete {
                header: header_of(m),
                order_ref: order_ref_of(m),
            }
        }
        TYPE_REPLACE => {
            let m = msg.first_chunk::<SIZE_REPLACE>()?;
            let (original, new_ref, shares, price) = replace_fields(m);
            Message::Replace {
                header: header_of(m),
                original,
                new_ref,
                shares,
                price,
            }
        }
        TYPE_TRADING_ACTION => {
            let m = msg.first_chunk::<SIZE_TRADING_ACTION>()?;
            Message::TradingAction {
                header: header_of(m),
                stock: stock_at(m, 11),
                state: m[19],
                reason: bytes4_at(m, 21),
            }
        }
        TYPE_OPERATIONAL_HALT => {
            let m = msg.first_chunk::<SIZE_OPERATIONAL_HALT>()?;
            Message::OperationalHalt {
                header: header_of(m),
                stock: stock_at(m, 11),
                market_code: m[19],
                action: m[20],
            }
        }
        _ => Message::Other {
            header: header_of(msg.get(..message_size(kind)?)?),
            kind,
        },
    })
}

/// The fields of an Add Order (`A`, and the first `SIZE_ADD` bytes of an
/// `F`) that the books use; `side` is the raw byte (`B`, `S`, or anything
/// else: a bad side).
#[derive(Clone, Copy, Debug)]
pub struct AddFields {
    pub header: Header,
    pub order_ref: u64,
    pub side: u8,
    pub shares: u32,
    pub stock: Symbol,
    pub price: u32,
}

/// The fields of an Add Order: the one place of their offsets, for
/// `decode` and for the message loop, which reads them straight from the
/// block (a [`Message`] built and then matched is copied through the
/// stack, where a load spanning two of its narrower stores stalls).
#[inline(always)]
pub fn add_fields(m: &[u8; SIZE_ADD]) -> AddFields {
    AddFields {
        header: header_of(m),
        order_ref: u64_at(m, 11),
        side: m[19],
        shares: u32_at(m, 20),
        stock: stock_at(m, 24),
        price: u32_at(m, 32),
    }
}

/// Order reference and shares of an Executed (`E`, `C`) or Cancel (`X`):
/// the same offsets in all three.
#[inline(always)]
pub fn reduce_fields(m: &[u8; SIZE_CANCEL]) -> (u64, u32) {
    (u64_at(m, 11), u32_at(m, 19))
}

/// The order reference of any order message (`E`, `C`, `X`, `D`, and the
/// original of a `U`).
#[inline(always)]
pub fn order_ref_of(m: &[u8; SIZE_DELETE]) -> u64 {
    u64_at(m, 11)
}

/// Original, new reference, shares and price of an Order Replace (`U`).
#[inline(always)]
pub fn replace_fields(m: &[u8; SIZE_REPLACE]) -> (u64, u64, u32, u32) {
    (u64_at(m, 11), u64_at(m, 19), u32_at(m, 27), u32_at(m, 31))
}

/// The timestamp of the common header (`header_of`'s, alone).
#[inline(always)]
pub fn timestamp_of(m: &[u8; HEADER_LEN]) -> u64 {
    let mut ts = [0u8; 8];
    ts[2..].copy_from_slice(&m[5..11]);
    u64::from_be_bytes(ts)
}

/// An Add Order (with or without MPID) of the block `m` (at least
/// `SIZE_ADD` bytes).
#[inline(always)]
fn add_order(m: &[u8], attribution: Option<[u8; 4]>) -> Message {
    let m: &[u8; SIZE_ADD] = m.first_chunk().expect("an add is at least SIZE_ADD bytes");
    let AddFields {
        header,
        order_ref,
        side,
        shares,
        stock,
        price,
    } = add_fields(m);
    match Side::from_byte(side) {
        Some(side) => Message::AddOrder {
            header,
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
        },
        None => Message::AddOrderBadSide {
            header,
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
        },
    }
}

/// Appends `msg` to `out`: exactly `message_size(msg.kind())` bytes, the
/// fields [`Message`] does not keep written as zeros. For the simulator and
/// the tests.
///
/// Panics when the message cannot be written: an `Other` of a type ITCH
/// 5.0 does not define or of a type that has its own variant, or a
/// timestamp over 48 bits.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let kind = msg.kind();
    let size = message_size(kind).expect("encode: not an ITCH 5.0 message type");
    if let Message::Other { .. } = msg {
        assert!(
            !matches!(
                kind,
                b'S' | b'R' | b'A' | b'F' | b'E' | b'C' | b'X' | b'D' | b'U' | b'H' | b'h'
            ),
            "encode: type {:?} has its own variant",
            kind as char
        );
    }
    let h = msg.header();
    assert!(
        h.timestamp <= TIMESTAMP_MAX,
        "encode: timestamp over 48 bits"
    );
    let start = out.len();
    out.resize(start + size, 0);
    let m = &mut out[start..];
    m[0] = kind;
    m[1..3].copy_from_slice(&h.locate.to_be_bytes());
    m[3..5].copy_from_slice(&h.tracking.to_be_bytes());
    m[5..11].copy_from_slice(&h.timestamp.to_be_bytes()[2..]);
    match *msg {
        Message::SystemEvent { event, .. } => m[11] = event,
        Message::StockDirectory { stock, .. } => m[11..19].copy_from_slice(&stock.wire()),
        Message::AddOrder {
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
            ..
        } => write_add(
            m,
            order_ref,
            side.to_byte(),
            shares,
            stock,
            price,
            attribution,
        ),
        Message::AddOrderBadSide {
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
            ..
        } => write_add(m, order_ref, side, shares, stock, price, attribution),
        Message::Executed {
            order_ref,
            shares,
            match_number,
            price,
            ..
        } => {
            m[11..19].copy_from_slice(&order_ref.to_be_bytes());
            m[19..23].copy_from_slice(&shares.to_be_bytes());
            m[23..31].copy_from_slice(&match_number.to_be_bytes());
            if let Some(p) = price {
                m[31] = p.printable;
                m[32..36].copy_from_slice(&p.price.to_be_bytes());
            }
        }
        Message::Cancel {
            order_ref, shares, ..
        } => {
            m[11..19].copy_from_slice(&order_ref.to_be_bytes());
            m[19..23].copy_from_slice(&shares.to_be_bytes());
        }
        Message::Delete { order_ref, .. } => m[11..19].copy_from_slice(&order_ref.to_be_bytes()),
        Message::Replace {
            original,
            new_ref,
            shares,
            price,
            ..
        } => {
            m[11..19].copy_from_slice(&original.to_be_bytes());
            m[19..27].copy_from_slice(&new_ref.to_be_bytes());
            m[27..31].copy_from_slice(&shares.to_be_bytes());
            m[31..35].copy_from_slice(&price.to_be_bytes());
        }
        Message::TradingAction {
            stock,
            state,
            reason,
            ..
        } => {
            m[11..19].copy_from_slice(&stock.wire());
            m[19] = state;
            m[21..25].copy_from_slice(&reason);
        }
        Message::OperationalHalt {
            stock,
            market_code,
            action,
            ..
        } => {
            m[11..19].copy_from_slice(&stock.wire());
            m[19] = market_code;
            m[20] = action;
        }
        Message::Other { .. } => {}
    }
}

fn write_add(
    m: &mut [u8],
    order_ref: u64,
    side: u8,
    shares: u32,
    stock: Symbol,
    price: u32,
    attribution: Option<[u8; 4]>,
) {
    m[11..19].copy_from_slice(&order_ref.to_be_bytes());
    m[19] = side;
    m[20..24].copy_from_slice(&shares.to_be_bytes());
    m[24..32].copy_from_slice(&stock.wire());
    m[32..36].copy_from_slice(&price.to_be_bytes());
    if let Some(a) = attribution {
        m[36..40].copy_from_slice(&a);
    }
}

/// `msg` encoded into a new vector (tests and tools; the simulator reuses
/// a buffer with [`encode`]).
pub fn encode_to_vec(msg: &Message) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    encode(msg, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[(u8, usize)] = &[
        (b'R', 39),
        (b'A', 36),
        (b'F', 40),
        (b'E', 31),
        (b'C', 36),
        (b'X', 23),
        (b'D', 19),
        (b'U', 35),
        (b'H', 25),
        (b'h', 21),
        (b'S', 12),
        (b'Y', 20),
        (b'L', 26),
        (b'V', 35),
        (b'W', 12),
        (b'K', 28),
        (b'J', 35),
        (b'P', 44),
        (b'Q', 40),
        (b'B', 19),
        (b'I', 50),
        (b'N', 20),
        (b'O', 48),
    ];

    fn hdr() -> Header {
        Header {
            locate: 0xBEEF,
            tracking: 0x1234,
            timestamp: 0xA1B2_C3D4_E5F6,
        }
    }

    fn sym(s: &str) -> Symbol {
        Symbol::parse(s).unwrap()
    }

    #[test]
    fn sizes_of_every_type_and_none_for_unknown() {
        for &(k, n) in ALL {
            assert_eq!(message_size(k), Some(n), "type {}", k as char);
        }
        let known: Vec<u8> = ALL.iter().map(|&(k, _)| k).collect();
        for k in 0..=255u8 {
            if !known.contains(&k) {
                assert_eq!(message_size(k), None, "type 0x{k:02x}");
                assert_eq!(decode(&[k; 64]), None);
            }
        }
    }

    #[test]
    fn every_known_type_decodes_at_its_size_and_not_one_byte_shorter() {
        for &(k, n) in ALL {
            let mut b = vec![0u8; n];
            b[0] = k;
            if k == TYPE_ADD || k == TYPE_ADD_MPID {
                b[19] = b'B'; // a valid side
            }
            assert!(decode(&b).is_some(), "type {} at {n} bytes", k as char);
            assert_eq!(
                decode(&b[..n - 1]),
                None,
                "type {} at {} bytes",
                k as char,
                n - 1
            );
        }
    }

    #[test]
    fn header_is_big_endian_at_fixed_offsets() {
        let b = encode_to_vec(&Message::Delete {
            header: hdr(),
            order_ref: 0x0102_0304_0506_0708,
        });
        assert_eq!(
            b,
            [
                b'D', 0xBE, 0xEF, 0x12, 0x34, 0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6, 1, 2, 3, 4, 5, 6,
                7, 8
            ]
        );
    }

    #[test]
    fn add_fields_at_spec_offsets() {
        // Hand-built A: ref 11..19, side 19, shares 20..24, stock 24..32,
        // price 32..36, then 4 extra bytes that must be ignored.
        let mut b = vec![b'A', 0, 7, 0, 1, 0, 0, 0, 0, 0, 9];
        b.extend_from_slice(&42u64.to_be_bytes());
        b.push(b'S');
        b.extend_from_slice(&100u32.to_be_bytes());
        b.extend_from_slice(b"AAPL    ");
        b.extend_from_slice(&1_234_500u32.to_be_bytes());
        b.extend_from_slice(b"xtra");
        assert_eq!(
            decode(&b),
            Some(Message::AddOrder {
                header: Header {
                    locate: 7,
                    tracking: 1,
                    timestamp: 9
                },
                order_ref: 42,
                side: Side::Sell,
                shares: 100,
                stock: sym("AAPL"),
                price: 1_234_500,
                attribution: None,
            })
        );
        // One byte short of its size: not decoded.
        assert_eq!(decode(&b[..35]), None);
        assert_eq!(decode(&[]), None);
    }

    fn samples() -> Vec<Message> {
        let header = hdr();
        let aapl = sym("AAPL");
        vec![
            Message::SystemEvent {
                header,
                event: b'O',
            },
            Message::StockDirectory {
                header,
                stock: sym("ZVZZT"),
            },
            Message::AddOrder {
                header,
                order_ref: u64::MAX - 3,
                side: Side::Buy,
                shares: 300,
                stock: aapl,
                price: 1_912_300,
                attribution: None,
            },
            Message::AddOrder {
                header,
                order_ref: 17,
                side: Side::Sell,
                shares: u32::MAX,
                stock: aapl,
                price: u32::MAX,
                attribution: Some(*b"GSCO"),
            },
            Message::AddOrderBadSide {
                header,
                order_ref: 18,
                side: b'?',
                shares: 5,
                stock: aapl,
                price: 10_000,
                attribution: None,
            },
            Message::AddOrderBadSide {
                header,
                order_ref: 19,
                side: 0,
                shares: 5,
                stock: aapl,
                price: 10_000,
                attribution: Some(*b"MSCO"),
            },
            Message::Executed {
                header,
                order_ref: 17,
                shares: 100,
                match_number: 0xDEAD_BEEF_0000_0001,
                price: None,
            },
            Message::Executed {
                header,
                order_ref: 17,
                shares: 1,
                match_number: 2,
                price: Some(ExecPrice {
                    printable: b'Y',
                    price: 1_912_400,
                }),
            },
            Message::Cancel {
                header,
                order_ref: 99,
                shares: 7,
            },
            Message::Delete {
                header,
                order_ref: 99,
            },
            Message::Replace {
                header,
                original: 99,
                new_ref: 100,
                shares: 50,
                price: 1_000_100,
            },
            Message::TradingAction {
                header,
                stock: aapl,
                state: b'H',
                reason: *b"LUDP",
            },
            Message::OperationalHalt {
                header,
                stock: aapl,
                market_code: b'Q',
                action: b'T',
            },
        ]
    }

    #[test]
    fn every_type_round_trips() {
        let mut msgs = samples();
        // Every type without its own variant, as filler.
        for &(k, _) in ALL {
            if !b"SRAFECXDUHh".contains(&k) {
                msgs.push(Message::Other {
                    header: hdr(),
                    kind: k,
                });
            }
        }
        let mut kinds_seen = Vec::new();
        for m in msgs {
            let b = encode_to_vec(&m);
            assert_eq!(Some(b.len()), message_size(b[0]), "{m:?}");
            assert_eq!(b[0], m.kind());
            assert_eq!(decode(&b), Some(m), "{m:?}");
            // Extra trailing bytes change nothing.
            let mut longer = b.clone();
            longer.extend_from_slice(&[0xFF; 9]);
            assert_eq!(decode(&longer), Some(m));
            assert_eq!(decode(&b[..b.len() - 1]), None);
            kinds_seen.push(b[0]);
        }
        for &(k, _) in ALL {
            assert!(kinds_seen.contains(&k), "type {} not covered", k as char);
        }
    }

    #[test]
    fn encode_appends_to_the_buffer() {
        let mut v = vec![1, 2, 3];
        let m = Message::Delete {
            header: hdr(),
            order_ref: 5,
        };
        encode(&m, &mut v);
        encode(&m, &mut v);
        assert_eq!(v.len(), 3 + 2 * 19);
        assert_eq!(decode(&v[3..]), Some(m));
        assert_eq!(decode(&v[22..]), Some(m));
    }

    #[test]
    fn accessors() {
        let m = Message::Replace {
            header: hdr(),
            original: 1,
            new_ref: 2,
            shares: 3,
            price: 4,
        };
        assert_eq!(m.locate(), 0xBEEF);
        assert_eq!(m.timestamp(), 0xA1B2_C3D4_E5F6);
        assert_eq!(m.stock(), None);
        let h = Message::OperationalHalt {
            header: hdr(),
            stock: sym("MSFT"),
            market_code: b'Q',
            action: b'H',
        };
        assert_eq!(h.stock(), Some(sym("MSFT")));
        assert_eq!(h.kind(), b'h');
    }

    #[test]
    #[should_panic(expected = "own variant")]
    fn other_of_a_decoded_type_is_refused() {
        encode_to_vec(&Message::Other {
            header: hdr(),
            kind: b'A',
        });
    }
}
