//! PITCH 2.x messages of Cboe US equities (venues.md `cboe-pitch`,
//! Messages): types, sizes, field offsets, decoding and encoding. Pure
//! code: decoding reads fixed offsets and allocates nothing; a [`Message`]
//! is `Copy` and holds plain fields.
//!
//! Every message begins with Length u8 (offset 0, the whole message) and
//! Type u8 (offset 1); every type but Time carries Time Offset u32 (ns) at
//! offset 2. Integers are little-endian. "Size" is the length tickgate
//! requires: shorter is invalid, longer is read up to the size (Cboe may
//! lengthen any message).
//!
//! Prices (V4): a **long** price is a u64 with 4 implied decimals (x
//! 100,000 to the 10^-9 fixed point of wire.md), a **short** price a u16
//! with 2 (x 10,000,000). The prices tickgate reads (Add Order, Modify
//! Order) are decoded scaled and must fit an i64; the others are kept raw
//! ([`RawPrice`]). Symbols are 6 bytes (long and short messages) or 8
//! (expanded, Trading Status, Auction, Retail Price Improvement), ASCII,
//! left-aligned, space-padded; a symbol is the field without its trailing
//! spaces, so both widths name the same symbol.

use thiserror::Error;

use crate::wire::Symbol;

pub const TYPE_TIME: u8 = 0x20;
pub const TYPE_UNIT_CLEAR: u8 = 0x97;
pub const TYPE_ADD_LONG: u8 = 0x21;
pub const TYPE_ADD_SHORT: u8 = 0x22;
pub const TYPE_ADD_EXPANDED: u8 = 0x2F;
pub const TYPE_EXECUTED: u8 = 0x23;
pub const TYPE_EXECUTED_AT_PRICE: u8 = 0x24;
pub const TYPE_REDUCE_LONG: u8 = 0x25;
pub const TYPE_REDUCE_SHORT: u8 = 0x26;
pub const TYPE_MODIFY_LONG: u8 = 0x27;
pub const TYPE_MODIFY_SHORT: u8 = 0x28;
pub const TYPE_DELETE: u8 = 0x29;
pub const TYPE_TRADE_LONG: u8 = 0x2A;
pub const TYPE_TRADE_SHORT: u8 = 0x2B;
pub const TYPE_TRADE_EXPANDED: u8 = 0x30;
pub const TYPE_TRADE_BREAK: u8 = 0x2C;
pub const TYPE_TRADING_STATUS: u8 = 0x31;
pub const TYPE_END_OF_SESSION: u8 = 0x2D;
pub const TYPE_AUCTION_UPDATE: u8 = 0x95;
pub const TYPE_AUCTION_SUMMARY: u8 = 0x96;
pub const TYPE_RETAIL_PRICE_IMPROVEMENT: u8 = 0x98;

const SIZE_TIME: usize = 6;
const SIZE_UNIT_CLEAR: usize = 6;
const SIZE_ADD_LONG: usize = 34;
const SIZE_ADD_SHORT: usize = 26;
const SIZE_ADD_EXPANDED: usize = 36;
const SIZE_EXECUTED: usize = 26;
const SIZE_EXECUTED_AT_PRICE: usize = 38;
const SIZE_REDUCE_LONG: usize = 18;
const SIZE_REDUCE_SHORT: usize = 16;
const SIZE_MODIFY_LONG: usize = 27;
const SIZE_MODIFY_SHORT: usize = 19;
const SIZE_DELETE: usize = 14;
const SIZE_TRADE_LONG: usize = 41;
const SIZE_TRADE_SHORT: usize = 33;
const SIZE_TRADE_EXPANDED: usize = 43;
const SIZE_TRADE_BREAK: usize = 14;
const SIZE_TRADING_STATUS: usize = 18;
const SIZE_END_OF_SESSION: usize = 6;
const SIZE_AUCTION_UPDATE: usize = 47;
const SIZE_AUCTION_SUMMARY: usize = 27;
const SIZE_RETAIL_PRICE_IMPROVEMENT: usize = 15;

/// V4: a long price's 4 implied decimals to 10^-9.
pub const LONG_PRICE_SCALE: i64 = 100_000;
/// V4: a short price's 2 implied decimals to 10^-9.
pub const SHORT_PRICE_SCALE: i64 = 10_000_000;

/// The size venues.md gives a message of type `kind`; `None` for a type
/// this venue does not define (skipped by its Length and counted).
#[inline]
pub fn message_size(kind: u8) -> Option<usize> {
    Some(match kind {
        TYPE_TIME => SIZE_TIME,
        TYPE_UNIT_CLEAR => SIZE_UNIT_CLEAR,
        TYPE_ADD_LONG => SIZE_ADD_LONG,
        TYPE_ADD_SHORT => SIZE_ADD_SHORT,
        TYPE_ADD_EXPANDED => SIZE_ADD_EXPANDED,
        TYPE_EXECUTED => SIZE_EXECUTED,
        TYPE_EXECUTED_AT_PRICE => SIZE_EXECUTED_AT_PRICE,
        TYPE_REDUCE_LONG => SIZE_REDUCE_LONG,
        TYPE_REDUCE_SHORT => SIZE_REDUCE_SHORT,
        TYPE_MODIFY_LONG => SIZE_MODIFY_LONG,
        TYPE_MODIFY_SHORT => SIZE_MODIFY_SHORT,
        TYPE_DELETE => SIZE_DELETE,
        TYPE_TRADE_LONG => SIZE_TRADE_LONG,
        TYPE_TRADE_SHORT => SIZE_TRADE_SHORT,
        TYPE_TRADE_EXPANDED => SIZE_TRADE_EXPANDED,
        TYPE_TRADE_BREAK => SIZE_TRADE_BREAK,
        TYPE_TRADING_STATUS => SIZE_TRADING_STATUS,
        TYPE_END_OF_SESSION => SIZE_END_OF_SESSION,
        TYPE_AUCTION_UPDATE => SIZE_AUCTION_UPDATE,
        TYPE_AUCTION_SUMMARY => SIZE_AUCTION_SUMMARY,
        TYPE_RETAIL_PRICE_IMPROVEMENT => SIZE_RETAIL_PRICE_IMPROVEMENT,
        _ => return None,
    })
}

/// Why one message cannot be decoded. Every variant but `UnknownType`
/// makes its datagram invalid (venues.md `cboe-pitch`, Framing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("PITCH message of {len} bytes has no Length and Type")]
    Empty { len: usize },
    #[error("unknown PITCH message type 0x{kind:02x}")]
    UnknownType { kind: u8 },
    #[error("PITCH message type 0x{kind:02x} of {len} bytes is shorter than its size {size}")]
    TooShort { kind: u8, len: usize, size: usize },
    #[error("PITCH message type 0x{kind:02x}: the symbol is not printable characters followed only by spaces")]
    BadSymbol { kind: u8 },
    #[error(
        "PITCH message type 0x{kind:02x}: the price does not fit a 64-bit fixed point once scaled"
    )]
    PriceOverflow { kind: u8 },
}

/// The width of a message family whose types differ only in field sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// u32 quantities, long prices, 6-byte symbols.
    Long,
    /// u16 quantities, short prices, 6-byte symbols.
    Short,
    /// u32 quantities, long prices, 8-byte symbols.
    Expanded,
}

/// A price tickgate does not read (executions, trades, auctions), as on
/// the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawPrice {
    Long(u64),
    Short(u16),
}

impl RawPrice {
    /// In 10^-9 (V4), `None` when it does not fit an i64.
    pub fn scaled(self) -> Option<i64> {
        match self {
            RawPrice::Long(p) => scale_long(p),
            RawPrice::Short(p) => Some(scale_short(p)),
        }
    }
}

/// A long price (4 decimals) in 10^-9: raw 25 ($0.0025) is 2,500,000.
#[inline]
pub fn scale_long(raw: u64) -> Option<i64> {
    i64::try_from(raw).ok()?.checked_mul(LONG_PRICE_SCALE)
}

/// A short price (2 decimals) in 10^-9: raw 2000 ($20.00) is
/// 20,000,000,000. Always fits.
#[inline]
pub fn scale_short(raw: u16) -> i64 {
    raw as i64 * SHORT_PRICE_SCALE
}

/// One decoded message. `offset` is the Time Offset (ns after the unit's
/// last Time). Side bytes are kept as on the wire (`B`, `S`; anything else
/// is a book error the adapter counts, venues.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// 0x20: whole seconds since New York midnight (wall clock).
    Time { seconds: u32 },
    /// 0x97: every order of the unit is removed.
    UnitClear { offset: u32 },
    /// 0x21, 0x22, 0x2F. `price` in 10^-9.
    AddOrder {
        width: Width,
        offset: u32,
        order_id: u64,
        side: u8,
        shares: u32,
        symbol: Symbol,
        price: i64,
        flags: u8,
    },
    /// 0x23.
    OrderExecuted {
        offset: u32,
        order_id: u64,
        shares: u32,
        execution_id: u64,
    },
    /// 0x24: the order's shares become `remaining`.
    ExecutedAtPriceSize {
        offset: u32,
        order_id: u64,
        shares: u32,
        remaining: u32,
        execution_id: u64,
        price: RawPrice,
    },
    /// 0x25 (`Long`) and 0x26 (`Short`).
    ReduceSize {
        width: Width,
        offset: u32,
        order_id: u64,
        shares: u32,
    },
    /// 0x27 (`Long`) and 0x28 (`Short`). `price` in 10^-9.
    ModifyOrder {
        width: Width,
        offset: u32,
        order_id: u64,
        shares: u32,
        price: i64,
        flags: u8,
    },
    /// 0x29.
    DeleteOrder { offset: u32, order_id: u64 },
    /// 0x2A, 0x2B, 0x30: no book change; makes the symbol known.
    Trade {
        width: Width,
        offset: u32,
        order_id: u64,
        side: u8,
        shares: u32,
        symbol: Symbol,
        price: RawPrice,
        execution_id: u64,
    },
    /// 0x2C.
    TradeBreak { offset: u32, execution_id: u64 },
    /// 0x31: trading state (V2).
    TradingStatus {
        offset: u32,
        symbol: Symbol,
        status: u8,
        reg_sho: u8,
    },
    /// 0x2D: C6 for the unit after its packet.
    EndOfSession { offset: u32 },
    /// 0x95: known by size, changes nothing.
    AuctionUpdate {
        offset: u32,
        symbol: Symbol,
        auction_type: u8,
        reference_price: u64,
        buy_shares: u32,
        sell_shares: u32,
        indicative_price: u64,
        auction_only_price: u64,
    },
    /// 0x96: known by size, changes nothing.
    AuctionSummary {
        offset: u32,
        symbol: Symbol,
        auction_type: u8,
        price: u64,
        shares: u32,
    },
    /// 0x98: known by size, changes nothing.
    RetailPriceImprovement {
        offset: u32,
        symbol: Symbol,
        indicator: u8,
    },
}

impl Message {
    /// The wire type byte.
    pub fn kind(&self) -> u8 {
        match *self {
            Message::Time { .. } => TYPE_TIME,
            Message::UnitClear { .. } => TYPE_UNIT_CLEAR,
            Message::AddOrder { width, .. } => match width {
                Width::Long => TYPE_ADD_LONG,
                Width::Short => TYPE_ADD_SHORT,
                Width::Expanded => TYPE_ADD_EXPANDED,
            },
            Message::OrderExecuted { .. } => TYPE_EXECUTED,
            Message::ExecutedAtPriceSize { .. } => TYPE_EXECUTED_AT_PRICE,
            Message::ReduceSize { width, .. } => match width {
                Width::Short => TYPE_REDUCE_SHORT,
                _ => TYPE_REDUCE_LONG,
            },
            Message::ModifyOrder { width, .. } => match width {
                Width::Short => TYPE_MODIFY_SHORT,
                _ => TYPE_MODIFY_LONG,
            },
            Message::DeleteOrder { .. } => TYPE_DELETE,
            Message::Trade { width, .. } => match width {
                Width::Long => TYPE_TRADE_LONG,
                Width::Short => TYPE_TRADE_SHORT,
                Width::Expanded => TYPE_TRADE_EXPANDED,
            },
            Message::TradeBreak { .. } => TYPE_TRADE_BREAK,
            Message::TradingStatus { .. } => TYPE_TRADING_STATUS,
            Message::EndOfSession { .. } => TYPE_END_OF_SESSION,
            Message::AuctionUpdate { .. } => TYPE_AUCTION_UPDATE,
            Message::AuctionSummary { .. } => TYPE_AUCTION_SUMMARY,
            Message::RetailPriceImprovement { .. } => TYPE_RETAIL_PRICE_IMPROVEMENT,
        }
    }

    /// The Time Offset in ns (every type but Time).
    pub fn time_offset(&self) -> Option<u32> {
        Some(match *self {
            Message::Time { .. } => return None,
            Message::UnitClear { offset }
            | Message::AddOrder { offset, .. }
            | Message::OrderExecuted { offset, .. }
            | Message::ExecutedAtPriceSize { offset, .. }
            | Message::ReduceSize { offset, .. }
            | Message::ModifyOrder { offset, .. }
            | Message::DeleteOrder { offset, .. }
            | Message::Trade { offset, .. }
            | Message::TradeBreak { offset, .. }
            | Message::TradingStatus { offset, .. }
            | Message::EndOfSession { offset }
            | Message::AuctionUpdate { offset, .. }
            | Message::AuctionSummary { offset, .. }
            | Message::RetailPriceImprovement { offset, .. } => offset,
        })
    }

    /// The symbol that makes itself known through this message (venues.md:
    /// an Add Order, refused or not, a Trade, a Trading Status; not the
    /// auction and RPI messages).
    pub fn known_symbol(&self) -> Option<Symbol> {
        match *self {
            Message::AddOrder { symbol, .. }
            | Message::Trade { symbol, .. }
            | Message::TradingStatus { symbol, .. } => Some(symbol),
            _ => None,
        }
    }
}

#[inline(always)]
fn u16_at(m: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([m[at], m[at + 1]])
}

#[inline(always)]
fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn u64_at(m: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(m[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether a symbol field is one or more printable characters (0x21-0x7E)
/// followed only by spaces (venues.md, the datagram's validity).
#[inline]
pub fn symbol_field_ok(field: &[u8]) -> bool {
    let end = field.iter().position(|&b| b == b' ').unwrap_or(field.len());
    end > 0
        && field[..end].iter().all(|&b| (0x21..=0x7E).contains(&b))
        && field[end..].iter().all(|&b| b == b' ')
}

/// The symbol of a 6- or 8-byte field as it is (trailing spaces are the
/// padding of `Symbol`, so `AAPL  ` and `AAPL    ` are one symbol).
#[inline(always)]
fn symbol_at<const N: usize>(m: &[u8], at: usize) -> Symbol {
    let mut w = [b' '; 8];
    w[..N].copy_from_slice(&m[at..at + N]);
    Symbol::from_wire(w)
}

/// A symbol tickgate reads: checked, then taken.
#[inline(always)]
fn read_symbol<const N: usize>(kind: u8, m: &[u8], at: usize) -> Result<Symbol, DecodeError> {
    if !symbol_field_ok(&m[at..at + N]) {
        return Err(DecodeError::BadSymbol { kind });
    }
    Ok(symbol_at::<N>(m, at))
}

#[inline(always)]
fn read_long_price(kind: u8, m: &[u8], at: usize) -> Result<i64, DecodeError> {
    scale_long(u64_at(m, at)).ok_or(DecodeError::PriceOverflow { kind })
}

/// The first `N` bytes of `msg`, or the error of a message too short for
/// its type.
#[inline(always)]
fn sized<const N: usize>(kind: u8, msg: &[u8]) -> Result<&[u8; N], DecodeError> {
    msg.first_chunk::<N>().ok_or(DecodeError::TooShort {
        kind,
        len: msg.len(),
        size: N,
    })
}

/// Decodes one message (`msg` is exactly the message: as long as its Length
/// byte says, which the framing checked). This is the one place of the
/// per-message validity rules of venues.md: a known type at least its
/// size, the symbols tickgate reads (Add Order, Trade, Trading Status)
/// printable then spaces, the prices it reads (Add Order, Modify Order)
/// fitting an i64 once scaled. Never panics, on any bytes.
#[inline]
pub fn decode(msg: &[u8]) -> Result<Message, DecodeError> {
    let [_, kind] = *msg
        .first_chunk::<2>()
        .ok_or(DecodeError::Empty { len: msg.len() })?;
    let offset = |m: &[u8]| u32_at(m, 2);
    Ok(match kind {
        TYPE_TIME => Message::Time {
            seconds: u32_at(sized::<SIZE_TIME>(kind, msg)?, 2),
        },
        TYPE_UNIT_CLEAR => Message::UnitClear {
            offset: offset(sized::<SIZE_UNIT_CLEAR>(kind, msg)?),
        },
        TYPE_ADD_LONG => {
            let m = sized::<SIZE_ADD_LONG>(kind, msg)?;
            Message::AddOrder {
                width: Width::Long,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u32_at(m, 15),
                symbol: read_symbol::<6>(kind, m, 19)?,
                price: read_long_price(kind, m, 25)?,
                flags: m[33],
            }
        }
        TYPE_ADD_SHORT => {
            let m = sized::<SIZE_ADD_SHORT>(kind, msg)?;
            Message::AddOrder {
                width: Width::Short,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u16_at(m, 15) as u32,
                symbol: read_symbol::<6>(kind, m, 17)?,
                price: scale_short(u16_at(m, 23)),
                flags: m[25],
            }
        }
        TYPE_ADD_EXPANDED => {
            let m = sized::<SIZE_ADD_EXPANDED>(kind, msg)?;
            Message::AddOrder {
                width: Width::Expanded,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u32_at(m, 15),
                symbol: read_symbol::<8>(kind, m, 19)?,
                price: read_long_price(kind, m, 27)?,
                flags: m[35],
            }
        }
        TYPE_EXECUTED => {
            let m = sized::<SIZE_EXECUTED>(kind, msg)?;
            Message::OrderExecuted {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
                execution_id: u64_at(m, 18),
            }
        }
        TYPE_EXECUTED_AT_PRICE => {
            let m = sized::<SIZE_EXECUTED_AT_PRICE>(kind, msg)?;
            Message::ExecutedAtPriceSize {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
                remaining: u32_at(m, 18),
                execution_id: u64_at(m, 22),
                price: RawPrice::Long(u64_at(m, 30)),
            }
        }
        TYPE_REDUCE_LONG => {
            let m = sized::<SIZE_REDUCE_LONG>(kind, msg)?;
            Message::ReduceSize {
                width: Width::Long,
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
            }
        }
        TYPE_REDUCE_SHORT => {
            let m = sized::<SIZE_REDUCE_SHORT>(kind, msg)?;
            Message::ReduceSize {
                width: Width::Short,
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u16_at(m, 14) as u32,
            }
        }
        TYPE_MODIFY_LONG => {
            let m = sized::<SIZE_MODIFY_LONG>(kind, msg)?;
            Message::ModifyOrder {
                width: Width::Long,
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
                price: read_long_price(kind, m, 18)?,
                flags: m[26],
            }
        }
        TYPE_MODIFY_SHORT => {
            let m = sized::<SIZE_MODIFY_SHORT>(kind, msg)?;
            Message::ModifyOrder {
                width: Width::Short,
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u16_at(m, 14) as u32,
                price: scale_short(u16_at(m, 16)),
                flags: m[18],
            }
        }
        TYPE_DELETE => {
            let m = sized::<SIZE_DELETE>(kind, msg)?;
            Message::DeleteOrder {
                offset: offset(m),
                order_id: u64_at(m, 6),
            }
        }
        TYPE_TRADE_LONG => {
            let m = sized::<SIZE_TRADE_LONG>(kind, msg)?;
            Message::Trade {
                width: Width::Long,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u32_at(m, 15),
                symbol: read_symbol::<6>(kind, m, 19)?,
                price: RawPrice::Long(u64_at(m, 25)),
                execution_id: u64_at(m, 33),
            }
        }
        TYPE_TRADE_SHORT => {
            let m = sized::<SIZE_TRADE_SHORT>(kind, msg)?;
            Message::Trade {
                width: Width::Short,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u16_at(m, 15) as u32,
                symbol: read_symbol::<6>(kind, m, 17)?,
                price: RawPrice::Short(u16_at(m, 23)),
                execution_id: u64_at(m, 25),
            }
        }
        TYPE_TRADE_EXPANDED => {
            let m = sized::<SIZE_TRADE_EXPANDED>(kind, msg)?;
            Message::Trade {
                width: Width::Expanded,
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u32_at(m, 15),
                symbol: read_symbol::<8>(kind, m, 19)?,
                price: RawPrice::Long(u64_at(m, 27)),
                execution_id: u64_at(m, 35),
            }
        }
        TYPE_TRADE_BREAK => {
            let m = sized::<SIZE_TRADE_BREAK>(kind, msg)?;
            Message::TradeBreak {
                offset: offset(m),
                execution_id: u64_at(m, 6),
            }
        }
        TYPE_TRADING_STATUS => {
            let m = sized::<SIZE_TRADING_STATUS>(kind, msg)?;
            Message::TradingStatus {
                offset: offset(m),
                symbol: read_symbol::<8>(kind, m, 6)?,
                status: m[14],
                reg_sho: m[15],
            }
        }
        TYPE_END_OF_SESSION => Message::EndOfSession {
            offset: offset(sized::<SIZE_END_OF_SESSION>(kind, msg)?),
        },
        TYPE_AUCTION_UPDATE => {
            let m = sized::<SIZE_AUCTION_UPDATE>(kind, msg)?;
            Message::AuctionUpdate {
                offset: offset(m),
                symbol: symbol_at::<8>(m, 6),
                auction_type: m[14],
                reference_price: u64_at(m, 15),
                buy_shares: u32_at(m, 23),
                sell_shares: u32_at(m, 27),
                indicative_price: u64_at(m, 31),
                auction_only_price: u64_at(m, 39),
            }
        }
        TYPE_AUCTION_SUMMARY => {
            let m = sized::<SIZE_AUCTION_SUMMARY>(kind, msg)?;
            Message::AuctionSummary {
                offset: offset(m),
                symbol: symbol_at::<8>(m, 6),
                auction_type: m[14],
                price: u64_at(m, 15),
                shares: u32_at(m, 23),
            }
        }
        TYPE_RETAIL_PRICE_IMPROVEMENT => {
            let m = sized::<SIZE_RETAIL_PRICE_IMPROVEMENT>(kind, msg)?;
            Message::RetailPriceImprovement {
                offset: offset(m),
                symbol: symbol_at::<8>(m, 6),
                indicator: m[14],
            }
        }
        _ => return Err(DecodeError::UnknownType { kind }),
    })
}

/// `decode`'s verdict on `msg` without the message: `Ok` exactly when
/// `decode` gives one, its error otherwise. The types most of a day is
/// made of (Time and the book's own) are checked in place (their size,
/// then the symbol and price rules of venues.md that reach them); every
/// other type, and any message these checks refuse, goes through `decode`,
/// which then gives the error.
#[inline]
pub fn validate(msg: &[u8]) -> Result<(), DecodeError> {
    let long_price_ok = |m: &[u8], at: usize| scale_long(u64_at(m, at)).is_some();
    let ok = match msg.first_chunk::<2>() {
        Some(&[_, kind]) => match kind {
            TYPE_TIME => msg.len() >= SIZE_TIME,
            TYPE_ADD_SHORT => msg
                .first_chunk::<SIZE_ADD_SHORT>()
                .is_some_and(|m| symbol_field_ok(&m[17..23])),
            TYPE_ADD_LONG => msg
                .first_chunk::<SIZE_ADD_LONG>()
                .is_some_and(|m| symbol_field_ok(&m[19..25]) && long_price_ok(m, 25)),
            TYPE_EXECUTED => msg.len() >= SIZE_EXECUTED,
            TYPE_REDUCE_LONG => msg.len() >= SIZE_REDUCE_LONG,
            TYPE_REDUCE_SHORT => msg.len() >= SIZE_REDUCE_SHORT,
            TYPE_MODIFY_LONG => msg
                .first_chunk::<SIZE_MODIFY_LONG>()
                .is_some_and(|m| long_price_ok(m, 18)),
            TYPE_MODIFY_SHORT => msg.len() >= SIZE_MODIFY_SHORT,
            TYPE_DELETE => msg.len() >= SIZE_DELETE,
            _ => false,
        },
        None => false,
    };
    if ok {
        Ok(())
    } else {
        decode(msg).map(|_| ())
    }
}

/// The fields the books read of their own messages, as `decode` gives
/// them (`price` in 10^-9; the short forms widened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BookMessage {
    /// Add Order long (0x21) or short (0x22).
    Add {
        offset: u32,
        order_id: u64,
        side: u8,
        shares: u32,
        symbol: Symbol,
        price: i64,
    },
    /// Order Executed (0x23) or Reduce Size (0x25, 0x26): `shares` leave
    /// the order.
    Reduce {
        offset: u32,
        order_id: u64,
        shares: u32,
    },
    /// Modify Order (0x27, 0x28).
    Modify {
        offset: u32,
        order_id: u64,
        shares: u32,
        price: i64,
    },
    /// Delete Order (0x29).
    Delete { offset: u32, order_id: u64 },
}

impl BookMessage {
    /// The Time Offset in ns.
    #[inline(always)]
    pub fn offset(&self) -> u32 {
        match *self {
            BookMessage::Add { offset, .. }
            | BookMessage::Reduce { offset, .. }
            | BookMessage::Modify { offset, .. }
            | BookMessage::Delete { offset, .. } => offset,
        }
    }
}

/// The book's own messages, most of a day, read in place from a message
/// that `decode` accepts (a datagram `Datagram::parse` validated): the
/// same fields as `decode`'s `Message`, without building one. `None` for
/// every other type (`decode` reads those). On a message `decode` refuses
/// it may read a symbol unchecked, never out of bounds.
#[inline(always)]
pub fn book_message(msg: &[u8]) -> Option<BookMessage> {
    let offset = |m: &[u8]| u32_at(m, 2);
    let kind = *msg.get(1)?;
    Some(match kind {
        TYPE_ADD_SHORT => {
            let m = msg.first_chunk::<SIZE_ADD_SHORT>()?;
            BookMessage::Add {
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u16_at(m, 15) as u32,
                symbol: symbol_at::<6>(m, 17),
                price: scale_short(u16_at(m, 23)),
            }
        }
        TYPE_ADD_LONG => {
            let m = msg.first_chunk::<SIZE_ADD_LONG>()?;
            BookMessage::Add {
                offset: offset(m),
                order_id: u64_at(m, 6),
                side: m[14],
                shares: u32_at(m, 15),
                symbol: symbol_at::<6>(m, 19),
                price: scale_long(u64_at(m, 25))?,
            }
        }
        TYPE_EXECUTED => {
            let m = msg.first_chunk::<SIZE_EXECUTED>()?;
            BookMessage::Reduce {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
            }
        }
        TYPE_REDUCE_LONG => {
            let m = msg.first_chunk::<SIZE_REDUCE_LONG>()?;
            BookMessage::Reduce {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
            }
        }
        TYPE_REDUCE_SHORT => {
            let m = msg.first_chunk::<SIZE_REDUCE_SHORT>()?;
            BookMessage::Reduce {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u16_at(m, 14) as u32,
            }
        }
        TYPE_MODIFY_LONG => {
            let m = msg.first_chunk::<SIZE_MODIFY_LONG>()?;
            BookMessage::Modify {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u32_at(m, 14),
                price: scale_long(u64_at(m, 18))?,
            }
        }
        TYPE_MODIFY_SHORT => {
            let m = msg.first_chunk::<SIZE_MODIFY_SHORT>()?;
            BookMessage::Modify {
                offset: offset(m),
                order_id: u64_at(m, 6),
                shares: u16_at(m, 14) as u32,
                price: scale_short(u16_at(m, 16)),
            }
        }
        TYPE_DELETE => {
            let m = msg.first_chunk::<SIZE_DELETE>()?;
            BookMessage::Delete {
                offset: offset(m),
                order_id: u64_at(m, 6),
            }
        }
        _ => return None,
    })
}

/// The order id of a book message (any type whose order id is at 6: Add
/// Order, Order Executed, Reduce Size, Modify Order, Delete Order), read
/// for cache hints only, without validating anything.
#[inline(always)]
pub fn peek_order_id(msg: &[u8]) -> Option<u64> {
    match *msg.get(1)? {
        TYPE_ADD_LONG
        | TYPE_ADD_SHORT
        | TYPE_ADD_EXPANDED
        | TYPE_EXECUTED
        | TYPE_EXECUTED_AT_PRICE
        | TYPE_REDUCE_LONG
        | TYPE_REDUCE_SHORT
        | TYPE_MODIFY_LONG
        | TYPE_MODIFY_SHORT
        | TYPE_DELETE => Some(u64::from_le_bytes(*msg.get(6..14)?.first_chunk::<8>()?)),
        _ => None,
    }
}

/// The symbol field's key word of an Add Order long or short (what
/// `Symbol::from_wire` makes its first word: a 6-byte field padded with
/// spaces), read for cache hints only, without validating anything.
#[inline(always)]
pub fn peek_add_word(msg: &[u8]) -> Option<u64> {
    let at = match *msg.get(1)? {
        TYPE_ADD_SHORT => 17,
        TYPE_ADD_LONG => 19,
        _ => return None,
    };
    let f = msg.get(at..at + 6)?;
    let mut w = [b' '; 8];
    w[..6].copy_from_slice(f);
    Some(u64::from_be_bytes(w))
}

/// Why a message cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("price {price} (10^-9) is not a whole {what} price")]
    Price { price: i64, what: &'static str },
    #[error("{shares} shares do not fit a short message's u16")]
    Shares { shares: u32 },
    #[error("symbol {symbol} does not fit a {width}-byte field")]
    Symbol { symbol: Symbol, width: usize },
}

fn unscale_long(price: i64) -> Result<u64, EncodeError> {
    if price < 0 || price % LONG_PRICE_SCALE != 0 {
        return Err(EncodeError::Price {
            price,
            what: "long",
        });
    }
    Ok((price / LONG_PRICE_SCALE) as u64)
}

fn unscale_short(price: i64) -> Result<u16, EncodeError> {
    if price < 0 || price % SHORT_PRICE_SCALE != 0 {
        return Err(EncodeError::Price {
            price,
            what: "short",
        });
    }
    u16::try_from(price / SHORT_PRICE_SCALE).map_err(|_| EncodeError::Price {
        price,
        what: "short",
    })
}

fn short_shares(shares: u32) -> Result<u16, EncodeError> {
    u16::try_from(shares).map_err(|_| EncodeError::Shares { shares })
}

fn symbol_field<const N: usize>(symbol: Symbol) -> Result<[u8; N], EncodeError> {
    let (bytes, len) = symbol.trimmed();
    if len > N {
        return Err(EncodeError::Symbol { symbol, width: N });
    }
    Ok(bytes[..N].try_into().expect("N <= 24"))
}

/// Appends `msg` to `out`: exactly its type's size, Length set, unused
/// bytes (reserved fields) zero. For the tests and the simulator. On an
/// error `out` is unchanged.
pub fn encode(msg: &Message, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let kind = msg.kind();
    let size = message_size(kind).expect("every Message has a size");
    let mut m = vec![0u8; size];
    m[0] = size as u8;
    m[1] = kind;
    let put = |m: &mut [u8], at: usize, b: &[u8]| m[at..at + b.len()].copy_from_slice(b);
    if let Some(offset) = msg.time_offset() {
        put(&mut m, 2, &offset.to_le_bytes());
    }
    match *msg {
        Message::Time { seconds } => put(&mut m, 2, &seconds.to_le_bytes()),
        Message::UnitClear { .. } | Message::EndOfSession { .. } => {}
        Message::AddOrder {
            width,
            order_id,
            side,
            shares,
            symbol,
            price,
            flags,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            m[14] = side;
            match width {
                Width::Long => {
                    put(&mut m, 15, &shares.to_le_bytes());
                    put(&mut m, 19, &symbol_field::<6>(symbol)?);
                    put(&mut m, 25, &unscale_long(price)?.to_le_bytes());
                    m[33] = flags;
                }
                Width::Short => {
                    put(&mut m, 15, &short_shares(shares)?.to_le_bytes());
                    put(&mut m, 17, &symbol_field::<6>(symbol)?);
                    put(&mut m, 23, &unscale_short(price)?.to_le_bytes());
                    m[25] = flags;
                }
                Width::Expanded => {
                    put(&mut m, 15, &shares.to_le_bytes());
                    put(&mut m, 19, &symbol_field::<8>(symbol)?);
                    put(&mut m, 27, &unscale_long(price)?.to_le_bytes());
                    m[35] = flags;
                }
            }
        }
        Message::OrderExecuted {
            order_id,
            shares,
            execution_id,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            put(&mut m, 14, &shares.to_le_bytes());
            put(&mut m, 18, &execution_id.to_le_bytes());
        }
        Message::ExecutedAtPriceSize {
            order_id,
            shares,
            remaining,
            execution_id,
            price,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            put(&mut m, 14, &shares.to_le_bytes());
            put(&mut m, 18, &remaining.to_le_bytes());
            put(&mut m, 22, &execution_id.to_le_bytes());
            let raw = match price {
                RawPrice::Long(p) => p,
                RawPrice::Short(p) => p as u64 * 100,
            };
            put(&mut m, 30, &raw.to_le_bytes());
        }
        Message::ReduceSize {
            width,
            order_id,
            shares,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            match width {
                Width::Short => put(&mut m, 14, &short_shares(shares)?.to_le_bytes()),
                _ => put(&mut m, 14, &shares.to_le_bytes()),
            }
        }
        Message::ModifyOrder {
            width,
            order_id,
            shares,
            price,
            flags,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            match width {
                Width::Short => {
                    put(&mut m, 14, &short_shares(shares)?.to_le_bytes());
                    put(&mut m, 16, &unscale_short(price)?.to_le_bytes());
                    m[18] = flags;
                }
                _ => {
                    put(&mut m, 14, &shares.to_le_bytes());
                    put(&mut m, 18, &unscale_long(price)?.to_le_bytes());
                    m[26] = flags;
                }
            }
        }
        Message::DeleteOrder { order_id, .. } => put(&mut m, 6, &order_id.to_le_bytes()),
        Message::Trade {
            width,
            order_id,
            side,
            shares,
            symbol,
            price,
            execution_id,
            ..
        } => {
            put(&mut m, 6, &order_id.to_le_bytes());
            m[14] = side;
            let long = |p: RawPrice| match p {
                RawPrice::Long(p) => p,
                RawPrice::Short(p) => p as u64 * 100,
            };
            match width {
                Width::Long => {
                    put(&mut m, 15, &shares.to_le_bytes());
                    put(&mut m, 19, &symbol_field::<6>(symbol)?);
                    put(&mut m, 25, &long(price).to_le_bytes());
                    put(&mut m, 33, &execution_id.to_le_bytes());
                }
                Width::Short => {
                    let RawPrice::Short(p) = price else {
                        return Err(EncodeError::Price {
                            price: price.scaled().unwrap_or(i64::MAX),
                            what: "short",
                        });
                    };
                    put(&mut m, 15, &short_shares(shares)?.to_le_bytes());
                    put(&mut m, 17, &symbol_field::<6>(symbol)?);
                    put(&mut m, 23, &p.to_le_bytes());
                    put(&mut m, 25, &execution_id.to_le_bytes());
                }
                Width::Expanded => {
                    put(&mut m, 15, &shares.to_le_bytes());
                    put(&mut m, 19, &symbol_field::<8>(symbol)?);
                    put(&mut m, 27, &long(price).to_le_bytes());
                    put(&mut m, 35, &execution_id.to_le_bytes());
                }
            }
        }
        Message::TradeBreak { execution_id, .. } => put(&mut m, 6, &execution_id.to_le_bytes()),
        Message::TradingStatus {
            symbol,
            status,
            reg_sho,
            ..
        } => {
            put(&mut m, 6, &symbol_field::<8>(symbol)?);
            m[14] = status;
            m[15] = reg_sho;
        }
        Message::AuctionUpdate {
            symbol,
            auction_type,
            reference_price,
            buy_shares,
            sell_shares,
            indicative_price,
            auction_only_price,
            ..
        } => {
            put(&mut m, 6, &symbol_field::<8>(symbol)?);
            m[14] = auction_type;
            put(&mut m, 15, &reference_price.to_le_bytes());
            put(&mut m, 23, &buy_shares.to_le_bytes());
            put(&mut m, 27, &sell_shares.to_le_bytes());
            put(&mut m, 31, &indicative_price.to_le_bytes());
            put(&mut m, 39, &auction_only_price.to_le_bytes());
        }
        Message::AuctionSummary {
            symbol,
            auction_type,
            price,
            shares,
            ..
        } => {
            put(&mut m, 6, &symbol_field::<8>(symbol)?);
            m[14] = auction_type;
            put(&mut m, 15, &price.to_le_bytes());
            put(&mut m, 23, &shares.to_le_bytes());
        }
        Message::RetailPriceImprovement {
            symbol, indicator, ..
        } => {
            put(&mut m, 6, &symbol_field::<8>(symbol)?);
            m[14] = indicator;
        }
    }
    out.extend_from_slice(&m);
    Ok(())
}

/// `msg` encoded into a new vector.
pub fn encode_to_vec(msg: &Message) -> Result<Vec<u8>, EncodeError> {
    let mut v = Vec::with_capacity(48);
    encode(msg, &mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// venues.md's table: (type, size).
    const ALL: &[(u8, usize)] = &[
        (0x20, 6),
        (0x97, 6),
        (0x21, 34),
        (0x22, 26),
        (0x2F, 36),
        (0x23, 26),
        (0x24, 38),
        (0x25, 18),
        (0x26, 16),
        (0x27, 27),
        (0x28, 19),
        (0x29, 14),
        (0x2A, 41),
        (0x2B, 33),
        (0x30, 43),
        (0x2C, 14),
        (0x31, 18),
        (0x2D, 6),
        (0x95, 47),
        (0x96, 27),
        (0x98, 15),
    ];

    fn sym(s: &str) -> Symbol {
        Symbol::parse(s).unwrap()
    }

    /// A message of `kind` and `size` whose symbol fields (if any) hold
    /// `A` and whose other bytes are `fill`.
    fn filled(kind: u8, size: usize, fill: u8) -> Vec<u8> {
        let mut m = vec![fill; size];
        m[0] = size as u8;
        m[1] = kind;
        let symbol_at = match kind {
            0x21 | 0x2F | 0x2A | 0x30 => {
                Some((19, if kind == 0x21 || kind == 0x2A { 6 } else { 8 }))
            }
            0x22 | 0x2B => Some((17, 6)),
            0x31 | 0x95 | 0x96 | 0x98 => Some((6, 8)),
            _ => None,
        };
        if let Some((at, n)) = symbol_at {
            m[at..at + n].fill(b' ');
            m[at] = b'A';
        }
        // Prices read by tickgate small enough to scale.
        match kind {
            0x21 => m[25..33].copy_from_slice(&7u64.to_le_bytes()),
            0x2F => m[27..35].copy_from_slice(&7u64.to_le_bytes()),
            0x27 => m[18..26].copy_from_slice(&7u64.to_le_bytes()),
            _ => {}
        }
        m
    }

    #[test]
    fn sizes_of_every_type_and_none_for_the_others() {
        for &(k, n) in ALL {
            assert_eq!(message_size(k), Some(n), "type 0x{k:02x}");
        }
        for k in 0..=255u8 {
            if !ALL.iter().any(|&(t, _)| t == k) {
                assert_eq!(message_size(k), None, "type 0x{k:02x}");
                assert_eq!(
                    decode(&[8, k, 0, 0, 0, 0, 0, 0]),
                    Err(DecodeError::UnknownType { kind: k })
                );
            }
        }
        // Symbol Mapping exists only on options feeds: unknown here.
        assert_eq!(message_size(0x2E), None);
    }

    #[test]
    fn every_known_type_decodes_at_its_size_and_longer_but_not_one_byte_shorter() {
        for &(k, n) in ALL {
            let m = filled(k, n, 0);
            let msg = decode(&m).unwrap_or_else(|e| panic!("0x{k:02x}: {e}"));
            assert_eq!(msg.kind(), k);
            let mut longer = filled(k, n + 5, 0);
            longer[n..].fill(0xEE);
            assert_eq!(decode(&longer), Ok(msg), "bytes past the size are ignored");
            assert_eq!(
                decode(&m[..n - 1]),
                Err(DecodeError::TooShort {
                    kind: k,
                    len: n - 1,
                    size: n
                })
            );
            // Encoding the decoded message gives back its bytes.
            assert_eq!(encode_to_vec(&msg).unwrap(), m, "0x{k:02x}");
        }
        assert_eq!(decode(&[6]), Err(DecodeError::Empty { len: 1 }));
    }

    #[test]
    fn fields_at_their_offsets() {
        // Add Order (long) from the real capture: order 0x03689eeae9741007,
        // buy 100 `A` at raw 25 ($0.0025).
        let add = [
            0x22, 0x21, 0xc0, 0x41, 0x5c, 0x29, 0x07, 0x10, 0x74, 0xe9, 0xea, 0x9e, 0x68, 0x03,
            0x42, 0x64, 0x00, 0x00, 0x00, 0x41, 0x20, 0x20, 0x20, 0x20, 0x20, 0x19, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        ];
        assert_eq!(
            decode(&add),
            Ok(Message::AddOrder {
                width: Width::Long,
                offset: 0x295c41c0,
                order_id: 0x0368_9eea_e974_1007,
                side: b'B',
                shares: 100,
                symbol: sym("A"),
                price: 2_500_000,
                flags: 1,
            })
        );
        // Add Order (short): buy 100 `A` at raw 2000 ($20.00).
        let add_short = [
            0x1a, 0x22, 0xf0, 0x52, 0x79, 0x20, 0x01, 0x10, 0x74, 0xe9, 0xea, 0x9e, 0x68, 0x03,
            0x42, 0x64, 0x00, 0x41, 0x20, 0x20, 0x20, 0x20, 0x20, 0xd0, 0x07, 0x01,
        ];
        assert_eq!(
            decode(&add_short),
            Ok(Message::AddOrder {
                width: Width::Short,
                offset: 0x207952f0,
                order_id: 0x0368_9eea_e974_1001,
                side: b'B',
                shares: 100,
                symbol: sym("A"),
                price: 20_000_000_000,
                flags: 1,
            })
        );
        let mut exec = vec![0u8; 38];
        exec[..2].copy_from_slice(&[38, 0x24]);
        exec[2..6].copy_from_slice(&9u32.to_le_bytes());
        exec[6..14].copy_from_slice(&11u64.to_le_bytes());
        exec[14..18].copy_from_slice(&30u32.to_le_bytes());
        exec[18..22].copy_from_slice(&70u32.to_le_bytes());
        exec[22..30].copy_from_slice(&99u64.to_le_bytes());
        exec[30..38].copy_from_slice(&1_901_234u64.to_le_bytes());
        let d = decode(&exec).unwrap();
        assert_eq!(
            d,
            Message::ExecutedAtPriceSize {
                offset: 9,
                order_id: 11,
                shares: 30,
                remaining: 70,
                execution_id: 99,
                price: RawPrice::Long(1_901_234),
            }
        );
        assert_eq!(d.time_offset(), Some(9));
        let mut status = vec![0u8; 18];
        status[..2].copy_from_slice(&[18, 0x31]);
        status[6..14].copy_from_slice(b"ABCDEFGH");
        status[14] = b'H';
        status[15] = b'1';
        let d = decode(&status).unwrap();
        assert_eq!(
            d,
            Message::TradingStatus {
                offset: 0,
                symbol: sym("ABCDEFGH"),
                status: b'H',
                reg_sho: b'1'
            }
        );
        assert_eq!(d.known_symbol(), Some(sym("ABCDEFGH")));
        let time = [6, 0x20, 0x13, 0x29, 0x01, 0x00];
        assert_eq!(decode(&time), Ok(Message::Time { seconds: 76051 }));
        assert_eq!(decode(&time).unwrap().time_offset(), None);
    }

    #[test]
    fn prices_long_and_short_to_the_nano() {
        assert_eq!(scale_long(25), Some(2_500_000));
        assert_eq!(scale_short(2000), 20_000_000_000);
        assert_eq!(scale_short(u16::MAX), 655_350_000_000);
        let max = (i64::MAX / LONG_PRICE_SCALE) as u64;
        assert_eq!(scale_long(max), Some(max as i64 * LONG_PRICE_SCALE));
        assert_eq!(scale_long(max + 1), None);
        assert_eq!(scale_long(u64::MAX), None);
        assert_eq!(RawPrice::Short(2001).scaled(), Some(20_010_000_000));
    }

    #[test]
    fn a_price_that_does_not_fit_i64_is_invalid_in_add_and_modify_only() {
        let too_big = (i64::MAX / LONG_PRICE_SCALE) as u64 + 1;
        for (kind, at) in [(0x21u8, 25usize), (0x2F, 27), (0x27, 18)] {
            let mut m = filled(kind, message_size(kind).unwrap(), 0);
            m[at..at + 8].copy_from_slice(&too_big.to_le_bytes());
            assert_eq!(decode(&m), Err(DecodeError::PriceOverflow { kind }));
            m[at..at + 8].copy_from_slice(&(too_big - 1).to_le_bytes());
            assert!(decode(&m).is_ok());
        }
        // A trade's and an execution's prices are not read: any value.
        for (kind, at) in [(0x2Au8, 25usize), (0x30, 27), (0x24, 30)] {
            let mut m = filled(kind, message_size(kind).unwrap(), 0);
            m[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            assert!(decode(&m).is_ok(), "0x{kind:02x}");
        }
    }

    #[test]
    fn symbols_printable_then_only_spaces() {
        assert!(symbol_field_ok(b"A     "));
        assert!(symbol_field_ok(b"AAPL"));
        assert!(symbol_field_ok(b"BRK.B   "));
        assert!(symbol_field_ok(b"ABCDEFGH"));
        assert!(!symbol_field_ok(b"      "), "empty");
        assert!(!symbol_field_ok(b" AAPL "), "leading space");
        assert!(!symbol_field_ok(b"AA PL "), "a character after a space");
        assert!(!symbol_field_ok(b"AAPL\0\0"), "NUL padding");
        assert!(!symbol_field_ok(b"AAP\x7f  "), "DEL");
        assert!(!symbol_field_ok(b"AAP\x80  "), "not ASCII");
        // In the three kinds tickgate reads: invalid.
        for (kind, at, n) in [
            (0x21u8, 19usize, 6usize),
            (0x22, 17, 6),
            (0x2F, 19, 8),
            (0x2A, 19, 6),
            (0x2B, 17, 6),
            (0x30, 19, 8),
            (0x31, 6, 8),
        ] {
            let mut m = filled(kind, message_size(kind).unwrap(), 0);
            m[at..at + n].fill(b' ');
            assert_eq!(decode(&m), Err(DecodeError::BadSymbol { kind }));
            m[at + 1] = b'X';
            assert_eq!(decode(&m), Err(DecodeError::BadSymbol { kind }));
            m[at] = b'Y';
            assert_eq!(decode(&m).unwrap().known_symbol(), Some(sym("YX")));
        }
        // Auction and RPI symbols are not read: not checked, not known.
        for kind in [0x95u8, 0x96, 0x98] {
            let mut m = filled(kind, message_size(kind).unwrap(), 0);
            m[6..14].fill(0);
            let d = decode(&m).unwrap();
            assert_eq!(d.known_symbol(), None);
        }
    }

    #[test]
    fn six_and_eight_byte_fields_name_the_same_symbol() {
        let add = |width: Width, symbol: &str| Message::AddOrder {
            width,
            offset: 0,
            order_id: 1,
            side: b'B',
            shares: 1,
            symbol: sym(symbol),
            price: 100_000,
            flags: 0,
        };
        let b6 = encode_to_vec(&add(Width::Long, "AAPL")).unwrap();
        assert_eq!(&b6[19..25], b"AAPL  ");
        let b8 = encode_to_vec(&add(Width::Expanded, "AAPL")).unwrap();
        assert_eq!(&b8[19..27], b"AAPL    ");
        assert_eq!(
            decode(&b6).unwrap().known_symbol(),
            decode(&b8).unwrap().known_symbol()
        );
        // Seven characters fit only the expanded messages.
        assert!(matches!(
            encode_to_vec(&add(Width::Long, "ABCDEFG")),
            Err(EncodeError::Symbol { width: 6, .. })
        ));
        let b8 = encode_to_vec(&add(Width::Expanded, "ABCDEFG")).unwrap();
        assert_eq!(decode(&b8).unwrap().known_symbol(), Some(sym("ABCDEFG")));
    }

    #[test]
    fn cboe_current_41_byte_expanded_add_is_read_up_to_its_size() {
        let mut m = filled(0x2F, 41, 0);
        m[36..40].copy_from_slice(b"MPID");
        m[40] = b'C';
        let d = decode(&m).unwrap();
        assert!(matches!(
            d,
            Message::AddOrder {
                width: Width::Expanded,
                ..
            }
        ));
        assert_eq!(decode(&m[..36]), Ok(d));
    }

    #[test]
    fn decode_never_panics_on_any_short_prefix() {
        for &(k, n) in ALL {
            let m = filled(k, n, 0xA5);
            for cut in 0..n {
                let _ = decode(&m[..cut]);
            }
        }
    }

    /// Messages of every type, valid and not: each length up to the size
    /// and past it, each byte of the symbol and price fields changed, an
    /// unknown type, nothing.
    fn variants() -> Vec<Vec<u8>> {
        let mut out = vec![vec![], vec![6], vec![8, 0x2E, 0, 0, 0, 0, 0, 0]];
        for &(k, n) in ALL {
            for fill in [0u8, 0xA5, 0xFF] {
                let m = filled(k, n + 3, fill);
                for cut in 0..=m.len() {
                    out.push(m[..cut].to_vec());
                }
                for at in 2..m.len() {
                    for b in [0u8, b' ', b'a', 0x7F, 0x80, 0xFF] {
                        let mut v = m.clone();
                        v[at] = b;
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn validate_gives_decode_s_verdict() {
        for m in variants() {
            assert_eq!(validate(&m), decode(&m).map(|_| ()), "{m:02x?}");
        }
    }

    /// What `book_message` reads, as `decode` gives it.
    fn as_book(msg: Message) -> Option<BookMessage> {
        Some(match msg {
            Message::AddOrder {
                width: Width::Long | Width::Short,
                offset,
                order_id,
                side,
                shares,
                symbol,
                price,
                ..
            } => BookMessage::Add {
                offset,
                order_id,
                side,
                shares,
                symbol,
                price,
            },
            Message::OrderExecuted {
                offset,
                order_id,
                shares,
                ..
            }
            | Message::ReduceSize {
                offset,
                order_id,
                shares,
                ..
            } => BookMessage::Reduce {
                offset,
                order_id,
                shares,
            },
            Message::ModifyOrder {
                offset,
                order_id,
                shares,
                price,
                ..
            } => BookMessage::Modify {
                offset,
                order_id,
                shares,
                price,
            },
            Message::DeleteOrder { offset, order_id } => BookMessage::Delete { offset, order_id },
            _ => return None,
        })
    }

    #[test]
    fn book_messages_read_in_place_are_what_decode_gives() {
        let mut read = 0;
        for m in variants() {
            let Ok(msg) = decode(&m) else {
                // Never panics on what decode refuses.
                let _ = book_message(&m);
                continue;
            };
            let book = book_message(&m);
            assert_eq!(book, as_book(msg), "{m:02x?}");
            read += book.is_some() as usize;
            if let Some(b) = book {
                assert_eq!(Some(b.offset()), msg.time_offset());
                let id = match b {
                    BookMessage::Add { order_id, .. }
                    | BookMessage::Reduce { order_id, .. }
                    | BookMessage::Modify { order_id, .. }
                    | BookMessage::Delete { order_id, .. } => order_id,
                };
                assert_eq!(peek_order_id(&m), Some(id));
            }
            if let (Some(BookMessage::Add { symbol, .. }), Some(word)) = (book, peek_add_word(&m)) {
                assert_eq!(word, symbol.words()[0]);
            }
        }
        assert!(read > 1000, "{read}");
    }
}
