//! The messages of venues.md `cme-mdp3` as the adapter reads them, over
//! the generated decoders (`templates`): one shape per kind whatever the
//! template and schema version (Book 32/46/64 are one [`BookEntry`]), the
//! fields the contract uses checked to be on the wire, prices kept as the
//! schema's decimals (PRICE: 10^-7, PRICE9: 10^-9). Zero-copy views: an
//! [`Entries`] iterator reads each group entry where it lies.

use super::sbe::{self, Block, Decimal, FieldSpec, Group, MessageHeader, RawMessage, SbeError};
use super::templates::{self as t, Message};

/// Template ids by kind (venues.md `cme-mdp3`).
pub const CHANNEL_RESET: u16 = 4;
pub const ADMIN_HEARTBEAT: u16 = 12;
pub const SECURITY_STATUS: u16 = 30;

/// What kind of incremental entry a template carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Book 32, 46, 64: changes the book.
    Book,
    /// TradeSummary 42, 48, 65.
    Trade,
    /// Volume 37, 66.
    Volume,
    /// SessionStatistics 35, 51, 67.
    SessionStatistics,
    /// DailyStatistics 33, 49.
    DailyStatistics,
    /// LimitsBanding 34, 50.
    LimitsBanding,
}

/// One incremental entry: a message of its instrument (SecurityID) with
/// `seq = RptSeq`; Book entries also say what changes in the book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub security_id: i32,
    pub rpt_seq: u32,
    pub book: Option<BookEntry>,
}

/// A Book entry (MDIncrementalRefreshBook): the change to one price level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BookEntry {
    /// MDEntryPx: `None` when null (i64 max).
    pub price: Option<Decimal>,
    /// MDEntrySize (i32, or u64 in template 64): `None` when null or
    /// negative.
    pub size: Option<u64>,
    /// MDPriceLevel.
    pub level: u8,
    /// MDUpdateAction (`templates::enums::md_update_action`).
    pub action: u8,
    /// MDEntryType (`templates::enums::md_entry_type_book`).
    pub entry_type: u8,
}

/// A size that is not a quantity (a negative i32) reads as no size: a
/// book entry without one cannot apply.
#[inline(always)]
fn qty_i32(v: Option<i32>) -> Option<u64> {
    v.and_then(|q| u64::try_from(q).ok())
}

macro_rules! entries {
    ($($variant:ident($module:ident) => $kind:ident, $book:tt;)*) => {
        /// The entries of an incremental message, in order.
        #[derive(Clone, Copy, Debug)]
        pub enum Entries<'a> {
            $($variant(Group<'a, t::$module::NoMdEntries<'a>>),)*
        }

        impl Entries<'_> {
            /// The kind of the template's entries.
            pub fn kind(&self) -> EntryKind {
                match self {
                    $(Entries::$variant(_) => EntryKind::$kind,)*
                }
            }

            /// How many entries are left.
            pub fn count(&self) -> usize {
                match self {
                    $(Entries::$variant(g) => g.len(),)*
                }
            }
        }

        impl Iterator for Entries<'_> {
            type Item = Entry;

            #[inline]
            fn next(&mut self) -> Option<Entry> {
                match self {
                    $(Entries::$variant(g) => {
                        let e = g.next()?;
                        // Lengths were checked by `decode`: the fields the
                        // contract uses are present.
                        Some(Entry {
                            security_id: e.security_id().unwrap_or(0),
                            rpt_seq: e.rpt_seq().unwrap_or(0),
                            book: entries!(@book $book e),
                        })
                    })*
                }
            }

            fn size_hint(&self) -> (usize, Option<usize>) {
                (self.count(), Some(self.count()))
            }
        }

        /// Checks a decoded message's used root and entry fields and returns
        /// its entries, if it is an incremental message.
        fn entries_of<'a>(raw: &RawMessage<'a>, m: &Message<'a>) -> Result<Option<(u64, Entries<'a>)>, SbeError> {
            Ok(Some(match m {
                $(Message::$variant(m) => {
                    check_len(raw, None, m.root().len(), 1, &[t::$module::TRANSACT_TIME])?;
                    let g = m.no_md_entries();
                    check_len(raw, Some(0), g.stride() as usize, g.count() as usize, entries!(@fields $module $book))?;
                    (m.transact_time().unwrap_or(0), Entries::$variant(g))
                })*
                _ => return Ok(None),
            }))
        }
    };
    (@book none $e:ident) => { None };
    (@book i32 $e:ident) => {
        Some(BookEntry {
            price: $e.md_entry_px(),
            size: qty_i32($e.md_entry_size()),
            level: $e.md_price_level().unwrap_or(0),
            action: $e.md_update_action().unwrap_or(u8::MAX),
            entry_type: $e.md_entry_type().unwrap_or(0),
        })
    };
    (@book u64 $e:ident) => {
        Some(BookEntry {
            price: $e.md_entry_px(),
            size: $e.md_entry_size(),
            level: $e.md_price_level().unwrap_or(0),
            action: $e.md_update_action().unwrap_or(u8::MAX),
            entry_type: $e.md_entry_type().unwrap_or(0),
        })
    };
    (@fields $module:ident none) => {
        &[t::$module::no_md_entries::SECURITY_ID, t::$module::no_md_entries::RPT_SEQ]
    };
    (@fields $module:ident $size:ident) => {
        &[
            t::$module::no_md_entries::SECURITY_ID,
            t::$module::no_md_entries::RPT_SEQ,
            t::$module::no_md_entries::MD_ENTRY_PX,
            t::$module::no_md_entries::MD_ENTRY_SIZE,
            t::$module::no_md_entries::MD_PRICE_LEVEL,
            t::$module::no_md_entries::MD_UPDATE_ACTION,
            t::$module::no_md_entries::MD_ENTRY_TYPE,
        ]
    };
}

entries! {
    MdIncrementalRefreshBook32(md_incremental_refresh_book32) => Book, i32;
    MdIncrementalRefreshBook46(md_incremental_refresh_book46) => Book, i32;
    MdIncrementalRefreshBookLongQty64(md_incremental_refresh_book_long_qty64) => Book, u64;
    MdIncrementalRefreshTradeSummary42(md_incremental_refresh_trade_summary42) => Trade, none;
    MdIncrementalRefreshTradeSummary48(md_incremental_refresh_trade_summary48) => Trade, none;
    MdIncrementalRefreshTradeSummaryLongQty65(md_incremental_refresh_trade_summary_long_qty65) => Trade, none;
    MdIncrementalRefreshVolume37(md_incremental_refresh_volume37) => Volume, none;
    MdIncrementalRefreshVolumeLongQty66(md_incremental_refresh_volume_long_qty66) => Volume, none;
    MdIncrementalRefreshSessionStatistics35(md_incremental_refresh_session_statistics35) => SessionStatistics, none;
    MdIncrementalRefreshSessionStatistics51(md_incremental_refresh_session_statistics51) => SessionStatistics, none;
    MdIncrementalRefreshSessionStatisticsLongQty67(md_incremental_refresh_session_statistics_long_qty67) => SessionStatistics, none;
    MdIncrementalRefreshDailyStatistics33(md_incremental_refresh_daily_statistics33) => DailyStatistics, none;
    MdIncrementalRefreshDailyStatistics49(md_incremental_refresh_daily_statistics49) => DailyStatistics, none;
    MdIncrementalRefreshLimitsBanding34(md_incremental_refresh_limits_banding34) => LimitsBanding, none;
    MdIncrementalRefreshLimitsBanding50(md_incremental_refresh_limits_banding50) => LimitsBanding, none;
}

/// An instrument definition (27, 29, 41; 54-58, 63): what the contract
/// reads of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Definition<'a> {
    pub template_id: u16,
    pub security_id: i32,
    /// `Symbol`, `char[20]` as on the wire (see [`trim`]).
    pub symbol: &'a [u8],
    /// `SecurityGroup`, `char[6]` as on the wire.
    pub security_group: &'a [u8],
    /// SecurityUpdateAction: `A`, `D` or `M`.
    pub update_action: u8,
    /// MDSecurityTradingStatus, `None` when null.
    pub trading_status: Option<u8>,
    /// TotNumReports (the definition loop's size), `None` when null.
    pub tot_num_reports: Option<u32>,
    /// MarketDepth of the feed types group's `GBX` entry, if it has one.
    pub gbx_depth: Option<i8>,
}

/// SecurityStatus (30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecurityStatus<'a> {
    pub transact_time: u64,
    /// `SecurityGroup`, `char[6]` as on the wire.
    pub security_group: &'a [u8],
    /// `None` (null): the status is for the whole SecurityGroup.
    pub security_id: Option<i32>,
    /// SecurityTradingStatus, `None` when null.
    pub trading_status: Option<u8>,
}

/// SnapshotFullRefresh (38, 52, 69): one instrument's whole book.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    pub template_id: u16,
    pub last_msg_seq_num_processed: u32,
    pub tot_num_reports: Option<u32>,
    pub security_id: i32,
    pub rpt_seq: u32,
    pub transact_time: u64,
    /// MDSecurityTradingStatus, `None` when null.
    pub trading_status: Option<u8>,
    pub entries: SnapshotEntries<'a>,
}

/// One entry of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub price: Option<Decimal>,
    pub size: Option<u64>,
    /// MDPriceLevel, `None` when null (entries that are not book levels).
    pub level: Option<u8>,
    /// MDEntryType (`templates::enums::md_entry_type`).
    pub entry_type: u8,
}

/// The entries of a snapshot, in order.
#[derive(Clone, Copy, Debug)]
pub enum SnapshotEntries<'a> {
    V38(Group<'a, t::snapshot_full_refresh38::NoMdEntries<'a>>),
    V52(Group<'a, t::snapshot_full_refresh52::NoMdEntries<'a>>),
    V69(Group<'a, t::snapshot_full_refresh_long_qty69::NoMdEntries<'a>>),
}

impl SnapshotEntries<'_> {
    /// How many entries are left.
    pub fn count(&self) -> usize {
        match self {
            SnapshotEntries::V38(g) => g.len(),
            SnapshotEntries::V52(g) => g.len(),
            SnapshotEntries::V69(g) => g.len(),
        }
    }
}

/// A signed level that is not 1-255 is no book level.
#[inline(always)]
fn level_i8(l: Option<i8>) -> Option<u8> {
    l.and_then(|l| u8::try_from(l).ok())
}

impl Iterator for SnapshotEntries<'_> {
    type Item = SnapshotEntry;

    #[inline]
    fn next(&mut self) -> Option<SnapshotEntry> {
        Some(match self {
            SnapshotEntries::V38(g) => {
                let e = g.next()?;
                SnapshotEntry {
                    price: e.md_entry_px(),
                    size: qty_i32(e.md_entry_size()),
                    level: level_i8(e.md_price_level()),
                    entry_type: e.md_entry_type().unwrap_or(0),
                }
            }
            SnapshotEntries::V52(g) => {
                let e = g.next()?;
                SnapshotEntry {
                    price: e.md_entry_px(),
                    size: qty_i32(e.md_entry_size()),
                    level: level_i8(e.md_price_level()),
                    entry_type: e.md_entry_type().unwrap_or(0),
                }
            }
            SnapshotEntries::V69(g) => {
                let e = g.next()?;
                SnapshotEntry {
                    price: e.md_entry_px(),
                    size: e.md_entry_size(),
                    level: e.md_price_level(),
                    entry_type: e.md_entry_type().unwrap_or(0),
                }
            }
        })
    }
}

/// What a message is to the contract.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    ChannelReset,
    AdminHeartbeat,
    Definition(Definition<'a>),
    SecurityStatus(SecurityStatus<'a>),
    /// Incremental entries, with their message's TransactTime.
    Incremental {
        transact_time: u64,
        entries: Entries<'a>,
    },
    Snapshot(Snapshot<'a>),
}

/// A framed message: decoded, or of a schema or template the decoder does
/// not know (skipped by MsgSize, counted `unknown_messages`).
#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    Known {
        header: MessageHeader,
        body: Body<'a>,
    },
    Unknown {
        header: MessageHeader,
    },
}

fn check_len(
    raw: &RawMessage<'_>,
    group: Option<u8>,
    len: usize,
    count: usize,
    fields: &[FieldSpec],
) -> Result<(), SbeError> {
    let need = sbe::required_len(fields, raw.header.version);
    if count > 0 && len < need {
        return Err(SbeError::ShortBlock {
            offset: raw.offset,
            template_id: raw.header.template_id,
            group,
            len: len as u16,
            need: need as u16,
        });
    }
    Ok(())
}

/// The `GBX` entry's MarketDepth of a definition's feed types.
fn gbx_depth<'a, E>(
    group: Group<'a, E>,
    read: impl Fn(&E) -> (Option<&'a [u8]>, Option<i8>),
) -> Option<i8>
where
    E: From<Block<'a>>,
{
    group
        .map(|e| read(&e))
        .find(|(feed, _)| *feed == Some(b"GBX".as_slice()))
        .and_then(|(_, depth)| depth)
}

macro_rules! definition {
    ($raw:ident, $d:ident, $m:ident) => {{
        let d = $d;
        check_len(
            $raw,
            None,
            d.root().len(),
            1,
            &[
                t::$m::TOT_NUM_REPORTS,
                t::$m::SECURITY_UPDATE_ACTION,
                t::$m::MD_SECURITY_TRADING_STATUS,
                t::$m::SECURITY_GROUP,
                t::$m::SYMBOL,
                t::$m::SECURITY_ID,
            ],
        )?;
        let g = d.no_md_feed_types();
        // The feed types group is the second of every definition.
        check_len(
            $raw,
            Some(1),
            g.stride() as usize,
            g.count() as usize,
            &[
                t::$m::no_md_feed_types::MD_FEED_TYPE,
                t::$m::no_md_feed_types::MARKET_DEPTH,
            ],
        )?;
        Body::Definition(Definition {
            template_id: t::$m::TEMPLATE_ID,
            security_id: d.security_id().unwrap_or(0),
            symbol: d.symbol().unwrap_or(&[]),
            security_group: d.security_group().unwrap_or(&[]),
            update_action: d.security_update_action().unwrap_or(0),
            trading_status: d.md_security_trading_status(),
            tot_num_reports: d.tot_num_reports(),
            gbx_depth: gbx_depth(g, |e| (e.md_feed_type(), e.market_depth())),
        })
    }};
}

macro_rules! snapshot {
    ($raw:ident, $s:ident, $m:ident, $variant:ident) => {{
        let s = $s;
        check_len(
            $raw,
            None,
            s.root().len(),
            1,
            &[
                t::$m::LAST_MSG_SEQ_NUM_PROCESSED,
                t::$m::TOT_NUM_REPORTS,
                t::$m::SECURITY_ID,
                t::$m::RPT_SEQ,
                t::$m::TRANSACT_TIME,
                t::$m::MD_SECURITY_TRADING_STATUS,
            ],
        )?;
        let g = s.no_md_entries();
        check_len(
            $raw,
            Some(0),
            g.stride() as usize,
            g.count() as usize,
            &[
                t::$m::no_md_entries::MD_ENTRY_PX,
                t::$m::no_md_entries::MD_ENTRY_SIZE,
                t::$m::no_md_entries::MD_PRICE_LEVEL,
                t::$m::no_md_entries::MD_ENTRY_TYPE,
            ],
        )?;
        Body::Snapshot(Snapshot {
            template_id: t::$m::TEMPLATE_ID,
            last_msg_seq_num_processed: s.last_msg_seq_num_processed().unwrap_or(0),
            tot_num_reports: s.tot_num_reports(),
            security_id: s.security_id().unwrap_or(0),
            rpt_seq: s.rpt_seq().unwrap_or(0),
            transact_time: s.transact_time().unwrap_or(0),
            trading_status: s.md_security_trading_status(),
            entries: SnapshotEntries::$variant(g),
        })
    }};
}

/// Decodes one framed message. An unknown schema or template is
/// [`Item::Unknown`]; a known one whose root or groups run past it, or
/// whose root or entries are shorter than the fields the contract uses at
/// its version, is an error (the packet is invalid). Fields the contract
/// uses are then present: the `unwrap_or` defaults below are never taken.
#[inline]
pub fn decode<'a>(raw: &RawMessage<'a>) -> Result<Item<'a>, SbeError> {
    let header = raw.header;
    let Some(m) = t::decode(raw) else {
        return Ok(Item::Unknown { header });
    };
    let m = m?;
    if let Some((transact_time, entries)) = entries_of(raw, &m)? {
        return Ok(Item::Known {
            header,
            body: Body::Incremental {
                transact_time,
                entries,
            },
        });
    }
    use t::security_status30 as ss;
    let body = match m {
        // Nothing of their roots is used.
        Message::ChannelReset4(_) => Body::ChannelReset,
        Message::AdminHeartbeat12(_) => Body::AdminHeartbeat,
        Message::SecurityStatus30(s) => {
            check_len(
                raw,
                None,
                s.root().len(),
                1,
                &[
                    ss::TRANSACT_TIME,
                    ss::SECURITY_GROUP,
                    ss::SECURITY_ID,
                    ss::SECURITY_TRADING_STATUS,
                ],
            )?;
            Body::SecurityStatus(SecurityStatus {
                transact_time: s.transact_time().unwrap_or(0),
                security_group: s.security_group().unwrap_or(&[]),
                security_id: s.security_id(),
                trading_status: s.security_trading_status(),
            })
        }
        Message::SnapshotFullRefresh38(s) => snapshot!(raw, s, snapshot_full_refresh38, V38),
        Message::SnapshotFullRefresh52(s) => snapshot!(raw, s, snapshot_full_refresh52, V52),
        Message::SnapshotFullRefreshLongQty69(s) => {
            snapshot!(raw, s, snapshot_full_refresh_long_qty69, V69)
        }
        Message::MdInstrumentDefinitionFuture27(d) => {
            definition!(raw, d, md_instrument_definition_future27)
        }
        Message::MdInstrumentDefinitionSpread29(d) => {
            definition!(raw, d, md_instrument_definition_spread29)
        }
        Message::MdInstrumentDefinitionOption41(d) => {
            definition!(raw, d, md_instrument_definition_option41)
        }
        Message::MdInstrumentDefinitionFuture54(d) => {
            definition!(raw, d, md_instrument_definition_future54)
        }
        Message::MdInstrumentDefinitionOption55(d) => {
            definition!(raw, d, md_instrument_definition_option55)
        }
        Message::MdInstrumentDefinitionSpread56(d) => {
            definition!(raw, d, md_instrument_definition_spread56)
        }
        Message::MdInstrumentDefinitionFixedIncome57(d) => {
            definition!(raw, d, md_instrument_definition_fixed_income57)
        }
        Message::MdInstrumentDefinitionRepo58(d) => {
            definition!(raw, d, md_instrument_definition_repo58)
        }
        Message::MdInstrumentDefinitionFx63(d) => {
            definition!(raw, d, md_instrument_definition_fx63)
        }
        // Every incremental template was taken by `entries_of`.
        _ => return Ok(Item::Unknown { header }),
    };
    Ok(Item::Known { header, body })
}

/// A char field without its trailing NULs and spaces (venues.md: the
/// instrument's `Symbol`).
pub fn trim(chars: &[u8]) -> &[u8] {
    let end = chars
        .iter()
        .rposition(|&c| c != 0 && c != b' ')
        .map_or(0, |i| i + 1);
    &chars[..end]
}

/// What a valid packet holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketSummary {
    pub header: sbe::PacketHeader,
    /// Every framed message, known or not.
    pub messages: u32,
    /// Messages of an unknown schema or template.
    pub unknown: u32,
    /// Whether every known message is an AdminHeartbeat.
    pub heartbeat_only: bool,
}

/// Validates a whole datagram: the packet header, every MsgSize, and every
/// known message's layout and used fields. Nothing is applied before this.
pub fn validate(datagram: &[u8]) -> Result<PacketSummary, SbeError> {
    let (header, msgs) = sbe::packet(datagram)?;
    let mut s = PacketSummary {
        header,
        messages: 0,
        unknown: 0,
        heartbeat_only: true,
    };
    for raw in msgs {
        let raw = raw?;
        s.messages += 1;
        match decode(&raw)? {
            Item::Unknown { .. } => s.unknown += 1,
            Item::Known { header, .. } => {
                if header.template_id != ADMIN_HEARTBEAT {
                    s.heartbeat_only = false;
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message: MsgSize, SBE header, root, then groupSize groups.
    fn msg(
        template: u16,
        schema: u16,
        version: u16,
        root: &[u8],
        groups: &[(u16, &[&[u8]])],
    ) -> Vec<u8> {
        let mut body = root.to_vec();
        for (stride, entries) in groups {
            body.extend_from_slice(&stride.to_le_bytes());
            body.push(entries.len() as u8);
            for e in *entries {
                assert_eq!(e.len(), *stride as usize);
                body.extend_from_slice(e);
            }
        }
        let mut m = ((10 + body.len()) as u16).to_le_bytes().to_vec();
        for v in [root.len() as u16, template, schema, version] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        m.extend_from_slice(&body);
        m
    }

    fn packet(msgs: &[Vec<u8>]) -> Vec<u8> {
        let mut d = 5u32.to_le_bytes().to_vec();
        d.extend_from_slice(&1_000u64.to_le_bytes());
        for m in msgs {
            d.extend_from_slice(m);
        }
        d
    }

    /// A Book 32 entry (schema 6 layout), `len` bytes long: price, size,
    /// SecurityID, RptSeq; level, action, entry type.
    fn book_entry(
        (px, size, id, rpt): (i64, i32, i32, u32),
        (level, action, ty): (u8, u8, u8),
        len: usize,
    ) -> Vec<u8> {
        let mut e = px.to_le_bytes().to_vec();
        e.extend_from_slice(&size.to_le_bytes());
        e.extend_from_slice(&id.to_le_bytes());
        e.extend_from_slice(&rpt.to_le_bytes());
        e.extend_from_slice(&i32::MAX.to_le_bytes());
        e.extend_from_slice(&[level, action, ty]);
        e.resize(len, 0);
        e
    }

    fn root11() -> Vec<u8> {
        let mut r = 77u64.to_le_bytes().to_vec();
        r.extend_from_slice(&[0x80, 0, 0]);
        r
    }

    fn only_item(d: &[u8]) -> Result<Item<'_>, SbeError> {
        let (_, mut msgs) = sbe::packet(d).unwrap();
        let m = msgs.next().unwrap().unwrap();
        decode(&m)
    }

    #[test]
    fn book_entries_with_the_wire_stride() {
        // 40-byte entries: longer than the schema's 32, each read where
        // the wire puts it.
        let a = book_entry((45_002_500_000, 10, 1001, 1), (1, 0, b'0'), 40);
        let b = book_entry((i64::MAX, i32::MAX, 1001, 2), (2, 2, b'1'), 40);
        let d = packet(&[msg(32, 1, 6, &root11(), &[(40, &[&a, &b])])]);
        let Item::Known {
            body:
                Body::Incremental {
                    transact_time,
                    entries,
                },
            ..
        } = only_item(&d).unwrap()
        else {
            panic!()
        };
        assert_eq!(transact_time, 77);
        assert_eq!(entries.kind(), EntryKind::Book);
        let e: Vec<Entry> = entries.collect();
        assert_eq!(e.len(), 2);
        let b0 = e[0].book.unwrap();
        assert_eq!((e[0].security_id, e[0].rpt_seq), (1001, 1));
        assert_eq!(b0.price.unwrap().to_nanos(), Some(4_500_250_000_000));
        assert_eq!(
            (b0.size, b0.level, b0.action, b0.entry_type),
            (Some(10), 1, 0, b'0')
        );
        let b1 = e[1].book.unwrap();
        assert_eq!(e[1].rpt_seq, 2);
        assert_eq!((b1.price, b1.size), (None, None), "nulls");
        // A negative size is no size.
        let neg = book_entry((1, -5, 1, 3), (1, 0, b'0'), 32);
        let d = packet(&[msg(32, 1, 6, &root11(), &[(32, &[&neg])])]);
        let Ok(Item::Known {
            body: Body::Incremental { mut entries, .. },
            ..
        }) = only_item(&d)
        else {
            panic!()
        };
        assert_eq!(entries.next().unwrap().book.unwrap().size, None);
        assert_eq!((b1.level, b1.action, b1.entry_type), (2, 2, b'1'));
    }

    #[test]
    fn entries_or_roots_shorter_than_the_used_fields_are_errors() {
        // MDEntryType ends at byte 27 of a Book entry.
        let short = book_entry((1, 1, 1, 1), (1, 0, b'0'), 26);
        let d = packet(&[msg(32, 1, 6, &root11(), &[(26, &[&short])])]);
        assert_eq!(
            only_item(&d).err(),
            Some(SbeError::ShortBlock {
                offset: 12,
                template_id: 32,
                group: Some(0),
                len: 26,
                need: 27
            })
        );
        assert!(validate(&d).is_err());
        // No entries: nothing is short.
        let d = packet(&[msg(32, 1, 6, &root11(), &[(26, &[])])]);
        assert!(validate(&d).is_ok());
        // TransactTime needs a root of 8 bytes.
        let d = packet(&[msg(32, 1, 6, &root11()[..7], &[(32, &[])])]);
        assert!(matches!(
            only_item(&d),
            Err(SbeError::ShortBlock {
                group: None,
                len: 7,
                need: 8,
                ..
            })
        ));
        // A heartbeat uses nothing of its root.
        let d = packet(&[msg(12, 1, 9, &[], &[])]);
        assert!(matches!(
            only_item(&d),
            Ok(Item::Known {
                body: Body::AdminHeartbeat,
                ..
            })
        ));
    }

    #[test]
    fn unknown_templates_and_schemas_are_skipped_and_counted() {
        let e = book_entry((1, 1, 1, 1), (1, 0, b'0'), 32);
        let d = packet(&[
            msg(47, 1, 9, &[1, 2, 3], &[]),
            msg(32, 2, 6, &[9], &[]),
            msg(32, 1, 6, &root11(), &[(32, &[&e])]),
            msg(12, 1, 9, &[], &[]),
        ]);
        let s = validate(&d).unwrap();
        assert_eq!((s.messages, s.unknown, s.heartbeat_only), (4, 2, false));
        assert_eq!(s.header.msg_seq_num, 5);
        assert_eq!(s.header.sending_time, 1_000);
        let d = packet(&[msg(12, 1, 9, &[], &[]), msg(12, 1, 9, &[], &[])]);
        assert!(validate(&d).unwrap().heartbeat_only);
    }

    #[test]
    fn definitions_give_symbol_group_and_gbx_depth() {
        // A Future 54 root of version 9 (216 bytes).
        let mut root = vec![0u8; 216];
        root[1..5].copy_from_slice(&2u32.to_le_bytes());
        root[5] = b'A';
        root[14] = 17;
        root[23..25].copy_from_slice(b"ES");
        root[35..39].copy_from_slice(b"ESZ6");
        root[55..59].copy_from_slice(&1001i32.to_le_bytes());
        let gbi: &[u8] = b"GBI\x02";
        let gbx: &[u8] = b"GBX\x03";
        // Events, feed types, attributes, lot rules.
        let d = packet(&[msg(
            54,
            1,
            9,
            &root,
            &[(9, &[]), (4, &[gbi, gbx]), (4, &[]), (5, &[])],
        )]);
        let Item::Known {
            body: Body::Definition(def),
            ..
        } = only_item(&d).unwrap()
        else {
            panic!()
        };
        assert_eq!(def.security_id, 1001);
        assert_eq!(trim(def.symbol), b"ESZ6");
        assert_eq!(trim(def.security_group), b"ES");
        assert_eq!(def.update_action, b'A');
        assert_eq!(def.trading_status, Some(17));
        assert_eq!(def.tot_num_reports, Some(2));
        assert_eq!(def.gbx_depth, Some(3));
        // Feed type entries of 3 bytes cannot hold MarketDepth.
        let d = packet(&[msg(
            54,
            1,
            9,
            &root,
            &[(9, &[]), (3, &[b"GBX"]), (4, &[]), (5, &[])],
        )]);
        assert!(matches!(
            only_item(&d),
            Err(SbeError::ShortBlock {
                group: Some(1),
                need: 4,
                ..
            })
        ));
    }

    #[test]
    fn trim_removes_trailing_nuls_and_spaces() {
        assert_eq!(trim(b"ESZ6\0\0 \0"), b"ESZ6");
        assert_eq!(trim(b"ES M6 \0"), b"ES M6");
        assert_eq!(trim(b"\0\0"), b"");
    }
}
