//! CME MDP 3.0 packets written from the same generated field layouts the
//! decoders read (`templates.rs`), for the simulator and the tests: a
//! packet header, then messages of schema version 9 (the version whose
//! templates CME sends today: 46 book, 52 snapshot, 54 definition, 30
//! status, 4 channel reset, 12 heartbeat). Appends to a caller's buffer:
//! nothing allocates once the buffer has grown to a packet.
//!
//! Fields the contract does not read are written as the schema's null
//! (or zero where the type has none), so a packet is valid SBE a CME
//! decoder would read too.

use super::sbe::{FieldSpec, MESSAGE_HEADER_LEN, MSG_SIZE_LEN, PACKET_HEADER_LEN, SCHEMA_ID};
use super::templates as t;

/// The schema version of every message written here.
pub const VERSION: u16 = 9;

/// One book entry of template 46 (`MDIncrementalRefreshBook46`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BookEntry {
    /// Price mantissa x 10^-9 (PRICENULL9); `None` writes null.
    pub px: Option<i64>,
    /// Size; `None` writes null.
    pub size: Option<i32>,
    pub security_id: i32,
    pub rpt_seq: u32,
    pub orders: Option<i32>,
    /// MDPriceLevel, 1 = top.
    pub level: u8,
    /// MDUpdateAction: 0 New, 1 Change, 2 Delete, 3 DeleteThru, 4
    /// DeleteFrom, 5 Overlay.
    pub action: u8,
    /// MDEntryType: `b'0'` bid, `b'1'` offer, `b'E'`/`b'F'` implied,
    /// `b'J'` book reset.
    pub entry_type: u8,
}

/// One level of a snapshot (template 52).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotLevel {
    pub px: i64,
    pub size: i32,
    pub orders: Option<i32>,
    pub level: u8,
    pub entry_type: u8,
}

/// A snapshot of one instrument (template 52).
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    /// LastMsgSeqNumProcessed: the incremental MsgSeqNum it reflects.
    pub last_msg_seq_num: u32,
    /// Instruments in the loop.
    pub tot_num_reports: u32,
    pub security_id: i32,
    pub rpt_seq: u32,
    pub transact_time: u64,
    /// MDSecurityTradingStatus; `None` writes null.
    pub trading_status: Option<u8>,
    pub levels: &'a [SnapshotLevel],
}

/// A futures definition (template 54).
#[derive(Clone, Copy, Debug)]
pub struct Definition<'a> {
    pub tot_num_reports: u32,
    /// SecurityUpdateAction: `b'A'` add, `b'M'` modify, `b'D'` delete.
    pub update_action: u8,
    /// Up to 20 bytes.
    pub symbol: &'a [u8],
    pub security_id: i32,
    /// Up to 6 bytes.
    pub security_group: &'a [u8],
    /// The GBX (book) depth.
    pub depth: i8,
    /// MDSecurityTradingStatus; `None` writes null.
    pub trading_status: Option<u8>,
    pub last_update_time: u64,
}

/// A SecurityStatus (template 30): of one instrument, or with
/// `security_id` `None` of a whole SecurityGroup.
#[derive(Clone, Copy, Debug)]
pub struct SecurityStatus<'a> {
    pub transact_time: u64,
    pub security_group: &'a [u8],
    pub security_id: Option<i32>,
    pub trading_status: u8,
}

/// Starts a packet in `out` (cleared): MsgSeqNum and SendingTime.
pub fn start_packet(out: &mut Vec<u8>, msg_seq_num: u32, sending_time: u64) {
    out.clear();
    out.extend_from_slice(&msg_seq_num.to_le_bytes());
    out.extend_from_slice(&sending_time.to_le_bytes());
    debug_assert_eq!(out.len(), PACKET_HEADER_LEN);
}

/// The blockLength of `table` at `VERSION`.
fn block_length(table: &[(u16, u16)]) -> usize {
    table
        .iter()
        .rev()
        .find(|(v, _)| *v <= VERSION)
        .map(|&(_, len)| len as usize)
        .expect("every template written here exists at version 9")
}

/// Appends MsgSize, the SBE header and a root of `block` bytes (filled
/// with `fill`); returns where the message and its root start.
fn begin(out: &mut Vec<u8>, template: u16, block: usize) -> (usize, usize) {
    let msg = out.len();
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(block as u16).to_le_bytes());
    out.extend_from_slice(&template.to_le_bytes());
    out.extend_from_slice(&SCHEMA_ID.to_le_bytes());
    out.extend_from_slice(&VERSION.to_le_bytes());
    let root = out.len();
    out.resize(root + block, 0);
    (msg, root)
}

/// Writes MsgSize now that the message is whole.
fn end(out: &mut [u8], msg: usize) {
    let size = (out.len() - msg) as u16;
    out[msg..msg + MSG_SIZE_LEN].copy_from_slice(&size.to_le_bytes());
}

/// A `groupSize` header (blockLength u16, numInGroup u8); returns where
/// the entries start.
fn group(out: &mut Vec<u8>, entry_len: u16, count: u8) -> usize {
    out.extend_from_slice(&entry_len.to_le_bytes());
    out.push(count);
    out.len()
}

fn put(out: &mut [u8], at: usize, f: FieldSpec, bytes: &[u8]) {
    debug_assert_eq!(bytes.len(), f.len);
    out[at + f.offset..at + f.end()].copy_from_slice(bytes);
}

/// A char field: the bytes, NUL-padded (longer is cut to the field).
fn put_chars(out: &mut [u8], at: usize, f: FieldSpec, s: &[u8]) {
    let field = &mut out[at + f.offset..at + f.end()];
    field.fill(0);
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s[..n]);
}

const NULL_PRICE9: i64 = i64::MAX;
const NULL_I32: i32 = i32::MAX;
const NULL_U8: u8 = u8::MAX;

/// Template 46: book entries of one or more instruments.
pub fn book(out: &mut Vec<u8>, transact_time: u64, entries: &[BookEntry]) {
    use m::no_md_entries as e;
    use t::md_incremental_refresh_book46 as m;
    let (msg, root) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    put(out, root, m::TRANSACT_TIME, &transact_time.to_le_bytes());
    // MatchEventIndicator: end of event.
    put(out, root, m::MATCH_EVENT_INDICATOR, &[0x80]);
    let len = e::BLOCK_LENGTH as usize;
    let mut at = group(out, e::BLOCK_LENGTH, entries.len() as u8);
    for x in entries {
        out.resize(at + len, 0);
        put(
            out,
            at,
            e::MD_ENTRY_PX,
            &x.px.unwrap_or(NULL_PRICE9).to_le_bytes(),
        );
        put(
            out,
            at,
            e::MD_ENTRY_SIZE,
            &x.size.unwrap_or(NULL_I32).to_le_bytes(),
        );
        put(out, at, e::SECURITY_ID, &x.security_id.to_le_bytes());
        put(out, at, e::RPT_SEQ, &x.rpt_seq.to_le_bytes());
        put(
            out,
            at,
            e::NUMBER_OF_ORDERS,
            &x.orders.unwrap_or(NULL_I32).to_le_bytes(),
        );
        put(out, at, e::MD_PRICE_LEVEL, &[x.level]);
        put(out, at, e::MD_UPDATE_ACTION, &[x.action]);
        put(out, at, e::MD_ENTRY_TYPE, &[x.entry_type]);
        at += len;
    }
    // No order entries (MBO): groupSize8Byte, count 0.
    out.extend_from_slice(&24u16.to_le_bytes());
    out.extend_from_slice(&[0; 5]);
    out.push(0);
    end(out, msg);
}

/// Template 52: one instrument's snapshot.
pub fn snapshot(out: &mut Vec<u8>, s: &Snapshot<'_>) {
    use m::no_md_entries as e;
    use t::snapshot_full_refresh52 as m;
    let (msg, root) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    put(
        out,
        root,
        m::LAST_MSG_SEQ_NUM_PROCESSED,
        &s.last_msg_seq_num.to_le_bytes(),
    );
    put(
        out,
        root,
        m::TOT_NUM_REPORTS,
        &s.tot_num_reports.to_le_bytes(),
    );
    put(out, root, m::SECURITY_ID, &s.security_id.to_le_bytes());
    put(out, root, m::RPT_SEQ, &s.rpt_seq.to_le_bytes());
    put(out, root, m::TRANSACT_TIME, &s.transact_time.to_le_bytes());
    put(
        out,
        root,
        m::LAST_UPDATE_TIME,
        &s.transact_time.to_le_bytes(),
    );
    put(out, root, m::TRADE_DATE, &u16::MAX.to_le_bytes());
    put(
        out,
        root,
        m::MD_SECURITY_TRADING_STATUS,
        &[s.trading_status.unwrap_or(NULL_U8)],
    );
    for f in [
        m::HIGH_LIMIT_PRICE,
        m::LOW_LIMIT_PRICE,
        m::MAX_PRICE_VARIATION,
    ] {
        put(out, root, f, &NULL_PRICE9.to_le_bytes());
    }
    let len = e::BLOCK_LENGTH as usize;
    let mut at = group(out, e::BLOCK_LENGTH, s.levels.len() as u8);
    for x in s.levels {
        out.resize(at + len, 0);
        put(out, at, e::MD_ENTRY_PX, &x.px.to_le_bytes());
        put(out, at, e::MD_ENTRY_SIZE, &x.size.to_le_bytes());
        put(
            out,
            at,
            e::NUMBER_OF_ORDERS,
            &x.orders.unwrap_or(NULL_I32).to_le_bytes(),
        );
        put(out, at, e::MD_PRICE_LEVEL, &[x.level]);
        put(out, at, e::TRADING_REFERENCE_DATE, &u16::MAX.to_le_bytes());
        put(out, at, e::OPEN_CLOSE_SETTL_FLAG, &[NULL_U8]);
        put(out, at, e::MD_ENTRY_TYPE, &[x.entry_type]);
        at += len;
    }
    end(out, msg);
}

/// Template 54: a futures definition with its GBX depth.
pub fn definition(out: &mut Vec<u8>, d: &Definition<'_>) {
    use t::md_instrument_definition_future54 as m;
    let (msg, root) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    put(out, root, m::MATCH_EVENT_INDICATOR, &[0x80]);
    put(
        out,
        root,
        m::TOT_NUM_REPORTS,
        &d.tot_num_reports.to_le_bytes(),
    );
    put(out, root, m::SECURITY_UPDATE_ACTION, &[d.update_action]);
    put(
        out,
        root,
        m::LAST_UPDATE_TIME,
        &d.last_update_time.to_le_bytes(),
    );
    put(
        out,
        root,
        m::MD_SECURITY_TRADING_STATUS,
        &[d.trading_status.unwrap_or(NULL_U8)],
    );
    put_chars(out, root, m::SECURITY_EXCHANGE, b"XCME");
    put_chars(out, root, m::SECURITY_GROUP, d.security_group);
    put_chars(out, root, m::ASSET, d.security_group);
    put_chars(out, root, m::SYMBOL, d.symbol);
    put(out, root, m::SECURITY_ID, &d.security_id.to_le_bytes());
    put_chars(out, root, m::SECURITY_TYPE, b"FUT");
    put_chars(out, root, m::CURRENCY, b"USD");
    put_chars(out, root, m::SETTL_CURRENCY, b"USD");
    // MinPriceIncrement 0.25 and DisplayFactor 1 (PRICE9 / Decimal9).
    put(
        out,
        root,
        m::MIN_PRICE_INCREMENT,
        &250_000_000i64.to_le_bytes(),
    );
    put(
        out,
        root,
        m::DISPLAY_FACTOR,
        &1_000_000_000i64.to_le_bytes(),
    );
    for f in [
        m::TRADING_REFERENCE_PRICE,
        m::HIGH_LIMIT_PRICE,
        m::LOW_LIMIT_PRICE,
        m::MAX_PRICE_VARIATION,
        m::MIN_PRICE_INCREMENT_AMOUNT,
        m::UNIT_OF_MEASURE_QTY,
    ] {
        put(out, root, f, &NULL_PRICE9.to_le_bytes());
    }
    // NoEvents: none; NoMDFeedTypes: GBX at `depth`; NoInstAttrib and
    // NoLotTypeRules: none.
    group(out, m::no_events::BLOCK_LENGTH, 0);
    let len = m::no_md_feed_types::BLOCK_LENGTH as usize;
    let at = group(out, m::no_md_feed_types::BLOCK_LENGTH, 1);
    out.resize(at + len, 0);
    put_chars(out, at, m::no_md_feed_types::MD_FEED_TYPE, b"GBX");
    put(out, at, m::no_md_feed_types::MARKET_DEPTH, &[d.depth as u8]);
    group(out, m::no_inst_attrib::BLOCK_LENGTH, 0);
    group(out, m::no_lot_type_rules::BLOCK_LENGTH, 0);
    end(out, msg);
}

/// Template 30: a trading state change of an instrument or a group.
pub fn security_status(out: &mut Vec<u8>, s: &SecurityStatus<'_>) {
    use t::security_status30 as m;
    let (msg, root) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    put(out, root, m::TRANSACT_TIME, &s.transact_time.to_le_bytes());
    put_chars(out, root, m::SECURITY_GROUP, s.security_group);
    put_chars(out, root, m::ASSET, s.security_group);
    put(
        out,
        root,
        m::SECURITY_ID,
        &s.security_id.unwrap_or(NULL_I32).to_le_bytes(),
    );
    put(out, root, m::TRADE_DATE, &u16::MAX.to_le_bytes());
    put(out, root, m::MATCH_EVENT_INDICATOR, &[0x80]);
    put(out, root, m::SECURITY_TRADING_STATUS, &[s.trading_status]);
    put(out, root, m::HALT_REASON, &[0]);
    put(out, root, m::SECURITY_TRADING_EVENT, &[0]);
    end(out, msg);
}

/// Template 4: the channel resets.
pub fn channel_reset(out: &mut Vec<u8>, transact_time: u64) {
    use t::channel_reset4 as m;
    let (msg, root) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    put(out, root, m::TRANSACT_TIME, &transact_time.to_le_bytes());
    put(out, root, m::MATCH_EVENT_INDICATOR, &[0x80]);
    let len = m::no_md_entries::BLOCK_LENGTH as usize;
    let at = group(out, m::no_md_entries::BLOCK_LENGTH, 1);
    out.resize(at + len, 0);
    // ApplID of the channel (informational).
    put(out, at, m::no_md_entries::APPL_ID, &0i16.to_le_bytes());
    end(out, msg);
}

/// Template 12: a heartbeat (a packet of its own on an idle channel).
pub fn heartbeat(out: &mut Vec<u8>) {
    use t::admin_heartbeat12 as m;
    let (msg, _) = begin(out, m::TEMPLATE_ID, block_length(&m::BLOCK_LENGTHS));
    end(out, msg);
}

/// Bytes of a message of template 46 with `n` entries (for packing a
/// packet to a size).
pub fn book_len(n: usize) -> usize {
    use t::md_incremental_refresh_book46 as m;
    MSG_SIZE_LEN
        + MESSAGE_HEADER_LEN
        + block_length(&m::BLOCK_LENGTHS)
        + 3
        + n * m::no_md_entries::BLOCK_LENGTH as usize
        + 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cme_mdp3::messages::{decode, Body, Item};
    use crate::venue::cme_mdp3::sbe::packet;

    #[test]
    fn every_message_decodes_as_written() {
        let mut out = Vec::new();
        start_packet(&mut out, 7, 1_700_000_000_000_000_000);
        let entry = BookEntry {
            px: Some(4_500_250_000_000),
            size: Some(12),
            security_id: 42,
            rpt_seq: 3,
            orders: Some(2),
            level: 1,
            action: 0,
            entry_type: b'0',
        };
        book(&mut out, 5, &[entry, BookEntry { px: None, ..entry }]);
        assert_eq!(out.len(), PACKET_HEADER_LEN + book_len(2));
        definition(
            &mut out,
            &Definition {
                tot_num_reports: 2,
                update_action: b'A',
                symbol: b"ESM6-ESU6-ESZ6-ESH7X",
                security_id: 42,
                security_group: b"ES",
                depth: 10,
                trading_status: Some(17),
                last_update_time: 1,
            },
        );
        let level = SnapshotLevel {
            px: -4_500_000_000_000,
            size: 3,
            orders: None,
            level: 2,
            entry_type: b'1',
        };
        snapshot(
            &mut out,
            &Snapshot {
                last_msg_seq_num: 6,
                tot_num_reports: 2,
                security_id: 42,
                rpt_seq: 2,
                transact_time: 4,
                trading_status: None,
                levels: &[level],
            },
        );
        security_status(
            &mut out,
            &SecurityStatus {
                transact_time: 9,
                security_group: b"ES",
                security_id: None,
                trading_status: 2,
            },
        );
        channel_reset(&mut out, 10);
        heartbeat(&mut out);

        let (header, messages) = packet(&out).unwrap();
        assert_eq!(
            (header.msg_seq_num, header.sending_time),
            (7, 1_700_000_000_000_000_000)
        );
        let bodies: Vec<Body<'_>> = messages
            .map(|raw| match decode(&raw.unwrap()).unwrap() {
                Item::Known { header, body } => {
                    assert_eq!(header.version, VERSION);
                    body
                }
                Item::Unknown { header } => panic!("unknown {header:?}"),
            })
            .collect();
        assert_eq!(bodies.len(), 6);
        let Body::Incremental {
            transact_time,
            entries,
        } = bodies[0]
        else {
            panic!()
        };
        assert_eq!(transact_time, 5);
        let e: Vec<_> = entries.collect();
        assert_eq!((e[0].security_id, e[0].rpt_seq), (42, 3));
        let b = e[0].book.unwrap();
        assert_eq!(b.price.and_then(|p| p.to_nanos()), Some(4_500_250_000_000));
        assert_eq!(
            (b.size, b.level, b.action, b.entry_type),
            (Some(12), 1, 0, b'0')
        );
        assert_eq!(e[1].book.unwrap().price, None);
        let Body::Definition(d) = bodies[1] else {
            panic!()
        };
        assert_eq!(
            crate::venue::cme_mdp3::messages::trim(d.symbol),
            b"ESM6-ESU6-ESZ6-ESH7X"
        );
        assert_eq!(
            crate::venue::cme_mdp3::messages::trim(d.security_group),
            b"ES"
        );
        assert_eq!(
            (
                d.security_id,
                d.update_action,
                d.trading_status,
                d.tot_num_reports,
                d.gbx_depth
            ),
            (42, b'A', Some(17), Some(2), Some(10))
        );
        let Body::Snapshot(s) = bodies[2] else {
            panic!()
        };
        assert_eq!(
            (
                s.last_msg_seq_num_processed,
                s.tot_num_reports,
                s.security_id,
                s.rpt_seq,
                s.trading_status
            ),
            (6, Some(2), 42, 2, None)
        );
        let l: Vec<_> = s.entries.collect();
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].price.and_then(|p| p.to_nanos()),
            Some(-4_500_000_000_000)
        );
        assert_eq!(
            (l[0].size, l[0].level, l[0].entry_type),
            (Some(3), Some(2), b'1')
        );
        let Body::SecurityStatus(st) = bodies[3] else {
            panic!()
        };
        assert_eq!((st.security_id, st.trading_status), (None, Some(2)));
        assert!(matches!(bodies[4], Body::ChannelReset));
        assert!(matches!(bodies[5], Body::AdminHeartbeat));
    }
}
