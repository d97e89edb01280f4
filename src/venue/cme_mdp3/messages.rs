//! The messages of venues.md `cme-mdp3` as the adapter reads them, over
//! the generated decoders (`templates`): one shape per kind whatever the
//! template and schema version (Book 32/46/64 are one [`BookEntry`]), the
//! fields the contract uses checked to be on the wire, prices kept as the
//! schema's decimals (PRICE: 10^-7, PRICE9: 10^-9). Zero-copy views: an
//! [`Entries`] iterator reads each group entry where it lies.

use super::sbe::{
    self, Block, Decimal, FieldSpec, Group, MessageHeader, RawGroup, RawMessage, SbeError,
};
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

        impl<'a> Entries<'a> {
            /// The entries' group (whatever was iterated) and its version.
            fn group(&self) -> (RawGroup<'a>, u16) {
                match self {
                    $(Entries::$variant(g) => (g.raw(), g.version()),)*
                }
            }

            /// The entries of template `template_id` laid out as `raw`, at
            /// `version` (`None`: not an incremental template).
            #[inline]
            fn of_template(template_id: u16, raw: RawGroup<'a>, version: u16) -> Option<Entries<'a>> {
                Some(match template_id {
                    $(t::$module::TEMPLATE_ID => Entries::$variant(Group::new(raw, version)),)*
                    _ => return None,
                })
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

impl<'a> SnapshotEntries<'a> {
    /// The entries' group (whatever was iterated) and its version.
    fn group(&self) -> (RawGroup<'a>, u16) {
        match self {
            SnapshotEntries::V38(g) => (g.raw(), g.version()),
            SnapshotEntries::V52(g) => (g.raw(), g.version()),
            SnapshotEntries::V69(g) => (g.raw(), g.version()),
        }
    }

    /// The entries of snapshot template `template_id` laid out as `raw`,
    /// at `version`.
    #[inline]
    fn of_template(template_id: u16, raw: RawGroup<'a>, version: u16) -> Option<Self> {
        Some(match template_id {
            t::snapshot_full_refresh38::TEMPLATE_ID => {
                SnapshotEntries::V38(Group::new(raw, version))
            }
            t::snapshot_full_refresh52::TEMPLATE_ID => {
                SnapshotEntries::V52(Group::new(raw, version))
            }
            t::snapshot_full_refresh_long_qty69::TEMPLATE_ID => {
                SnapshotEntries::V69(Group::new(raw, version))
            }
            _ => return None,
        })
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

#[cfg(test)]
thread_local! {
    /// Messages [`decode`] decoded on this thread (unit tests: a packet is
    /// decoded once, the adapter's plan).
    pub(crate) static DECODES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Decodes one framed message. An unknown schema or template is
/// [`Item::Unknown`]; a known one whose root or groups run past it, or
/// whose root or entries are shorter than the fields the contract uses at
/// its version, is an error (the packet is invalid). Fields the contract
/// uses are then present: the `unwrap_or` defaults below are never taken.
#[inline]
pub fn decode<'a>(raw: &RawMessage<'a>) -> Result<Item<'a>, SbeError> {
    #[cfg(test)]
    DECODES.with(|n| n.set(n.get() + 1));
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
    validate_with(datagram, |_| {})
}

/// [`validate`], giving `each` every message as [`decode`] gave it, in
/// order, as it goes (so the messages before an invalid one too: only an
/// `Ok` says the packet is valid).
#[inline]
pub fn validate_with<'a>(
    datagram: &'a [u8],
    mut each: impl FnMut(&Item<'a>),
) -> Result<PacketSummary, SbeError> {
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
        let item = decode(&raw)?;
        each(&item);
        match item {
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

/// Where a part of a datagram lies in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    start: usize,
    len: usize,
}

impl Span {
    /// `part`, a view of `datagram` (empty: anywhere).
    fn of(datagram: &[u8], part: &[u8]) -> Span {
        if part.is_empty() {
            return Span::default();
        }
        // Every view `decode` gives borrows the datagram: `part` lies
        // within it.
        let start = (part.as_ptr() as usize).wrapping_sub(datagram.as_ptr() as usize);
        debug_assert!(start + part.len() <= datagram.len());
        Span {
            start,
            len: part.len(),
        }
    }

    #[inline(always)]
    fn get(self, datagram: &[u8]) -> Option<&[u8]> {
        datagram.get(self.start..self.start.checked_add(self.len)?)
    }
}

/// A repeating group's place in a datagram, its layout and its version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct GroupAt {
    entries: Span,
    stride: u16,
    count: u16,
    version: u16,
}

impl GroupAt {
    fn of(datagram: &[u8], (raw, version): (RawGroup<'_>, u16)) -> GroupAt {
        GroupAt {
            entries: Span::of(datagram, raw.entries()),
            stride: raw.stride(),
            count: raw.count(),
            version,
        }
    }

    #[inline(always)]
    fn get(self, datagram: &[u8]) -> Option<RawGroup<'_>> {
        RawGroup::from_parts(self.entries.get(datagram)?, self.stride, self.count)
    }
}

/// What a [`Step`] holds of its message: [`Body`] with its views of the
/// datagram kept as places (the views themselves left empty).
#[derive(Clone, Copy, Debug)]
enum Planned {
    Unknown,
    ChannelReset,
    AdminHeartbeat,
    Definition {
        d: Definition<'static>,
        symbol: Span,
        security_group: Span,
    },
    SecurityStatus {
        s: SecurityStatus<'static>,
        security_group: Span,
    },
    Incremental {
        transact_time: u64,
        entries: GroupAt,
    },
    Snapshot {
        s: Snapshot<'static>,
        entries: GroupAt,
    },
}

/// One message of a validated packet as [`decode`] gave it, kept without
/// borrowing the datagram: [`Step::item`] gives the same message again
/// from the same datagram without decoding or checking it again (every
/// field it reads was checked by [`validate_with`]). Copy, of a fixed
/// size: a venue keeps a packet's steps in a buffer it reuses.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    header: MessageHeader,
    body: Planned,
}

impl Step {
    /// No message (a buffer's filler).
    pub const NONE: Step = Step {
        header: MessageHeader {
            block_length: 0,
            template_id: 0,
            schema_id: 0,
            version: 0,
        },
        body: Planned::Unknown,
    };

    /// The step of `item`, which [`decode`] gave from `datagram`.
    #[inline]
    pub fn of(datagram: &[u8], item: &Item<'_>) -> Step {
        let (header, body) = match *item {
            Item::Unknown { header } => (header, Planned::Unknown),
            Item::Known { header, ref body } => (
                header,
                match *body {
                    Body::ChannelReset => Planned::ChannelReset,
                    Body::AdminHeartbeat => Planned::AdminHeartbeat,
                    Body::Definition(d) => Planned::Definition {
                        d: Definition {
                            template_id: d.template_id,
                            security_id: d.security_id,
                            symbol: &[],
                            security_group: &[],
                            update_action: d.update_action,
                            trading_status: d.trading_status,
                            tot_num_reports: d.tot_num_reports,
                            gbx_depth: d.gbx_depth,
                        },
                        symbol: Span::of(datagram, d.symbol),
                        security_group: Span::of(datagram, d.security_group),
                    },
                    Body::SecurityStatus(s) => Planned::SecurityStatus {
                        s: SecurityStatus {
                            transact_time: s.transact_time,
                            security_group: &[],
                            security_id: s.security_id,
                            trading_status: s.trading_status,
                        },
                        security_group: Span::of(datagram, s.security_group),
                    },
                    Body::Incremental {
                        transact_time,
                        entries,
                    } => Planned::Incremental {
                        transact_time,
                        entries: GroupAt::of(datagram, entries.group()),
                    },
                    Body::Snapshot(s) => Planned::Snapshot {
                        s: Snapshot {
                            template_id: s.template_id,
                            last_msg_seq_num_processed: s.last_msg_seq_num_processed,
                            tot_num_reports: s.tot_num_reports,
                            security_id: s.security_id,
                            rpt_seq: s.rpt_seq,
                            transact_time: s.transact_time,
                            trading_status: s.trading_status,
                            entries: SnapshotEntries::V38(Group::new(RawGroup::default(), 0)),
                        },
                        entries: GroupAt::of(datagram, s.entries.group()),
                    },
                },
            ),
        };
        Step { header, body }
    }

    /// The message again, as [`decode`] gave it from `datagram` (the very
    /// bytes the step was made from; `None` only if they are not: too
    /// short for it).
    #[inline]
    pub fn item<'a>(&self, datagram: &'a [u8]) -> Option<Item<'a>> {
        let header = self.header;
        let body = match self.body {
            Planned::Unknown => return Some(Item::Unknown { header }),
            Planned::ChannelReset => Body::ChannelReset,
            Planned::AdminHeartbeat => Body::AdminHeartbeat,
            Planned::Definition {
                d,
                symbol,
                security_group,
            } => Body::Definition(Definition {
                symbol: symbol.get(datagram)?,
                security_group: security_group.get(datagram)?,
                ..d
            }),
            Planned::SecurityStatus { s, security_group } => Body::SecurityStatus(SecurityStatus {
                security_group: security_group.get(datagram)?,
                ..s
            }),
            Planned::Incremental {
                transact_time,
                entries,
            } => Body::Incremental {
                transact_time,
                entries: Entries::of_template(
                    header.template_id,
                    entries.get(datagram)?,
                    entries.version,
                )?,
            },
            Planned::Snapshot { s, entries } => Body::Snapshot(Snapshot {
                entries: SnapshotEntries::of_template(
                    header.template_id,
                    entries.get(datagram)?,
                    entries.version,
                )?,
                ..s
            }),
        };
        Some(Item::Known { header, body })
    }
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

    /// A packet of every kind of message: Book 32 of a 40-byte stride,
    /// an unknown template, then the encoder's Book 46, definition,
    /// snapshot, SecurityStatus, ChannelReset and heartbeat.
    fn every_kind() -> Vec<u8> {
        use crate::venue::cme_mdp3::encode as en;
        let a = book_entry((45_002_500_000, 10, 1001, 1), (1, 0, b'0'), 40);
        let b = book_entry((i64::MAX, 7, 1002, 9), (2, 1, b'1'), 40);
        let mut d = packet(&[
            msg(32, 1, 6, &root11(), &[(40, &[&a, &b])]),
            msg(47, 1, 9, &[1, 2, 3], &[]),
        ]);
        let entry = en::BookEntry {
            px: Some(4_500_250_000_000),
            size: Some(12),
            security_id: 42,
            rpt_seq: 3,
            orders: Some(2),
            level: 1,
            action: 0,
            entry_type: b'0',
        };
        en::book(&mut d, 5, &[entry, en::BookEntry { px: None, ..entry }]);
        en::definition(
            &mut d,
            &en::Definition {
                tot_num_reports: 2,
                update_action: b'A',
                symbol: b"ESZ6",
                security_id: 42,
                security_group: b"ES",
                depth: 10,
                trading_status: Some(17),
                last_update_time: 1,
            },
        );
        let level = en::SnapshotLevel {
            px: -4_500_000_000_000,
            size: 3,
            orders: None,
            level: 2,
            entry_type: b'1',
        };
        en::snapshot(
            &mut d,
            &en::Snapshot {
                last_msg_seq_num: 6,
                tot_num_reports: 2,
                security_id: 42,
                rpt_seq: 2,
                transact_time: 4,
                trading_status: None,
                levels: &[level, level],
            },
        );
        en::security_status(
            &mut d,
            &en::SecurityStatus {
                transact_time: 9,
                security_group: b"GE",
                security_id: Some(42),
                trading_status: 2,
            },
        );
        en::channel_reset(&mut d, 10);
        en::heartbeat(&mut d);
        d
    }

    #[test]
    fn steps_give_the_messages_again_as_decoded() {
        let d = every_kind();
        let mut steps = Vec::new();
        let s = validate_with(&d, |item| steps.push(Step::of(&d, item))).unwrap();
        assert_eq!((s.messages, s.unknown), (8, 1));
        let (_, msgs) = sbe::packet(&d).unwrap();
        let decoded: Vec<String> = msgs
            .map(|raw| format!("{:?}", decode(&raw.unwrap()).unwrap()))
            .collect();
        assert_eq!(steps.len(), decoded.len());
        // The same bytes elsewhere (a step keeps places, not addresses).
        let copy = d.clone();
        for (step, want) in steps.iter().zip(&decoded) {
            assert_eq!(&format!("{:?}", step.item(&d).unwrap()), want);
            assert_eq!(&format!("{:?}", step.item(&copy).unwrap()), want);
        }
        // Read through the step, the fields the adapter uses.
        let Some(Item::Known {
            body: Body::Incremental { entries, .. },
            ..
        }) = steps[0].item(&d)
        else {
            panic!()
        };
        let e: Vec<Entry> = entries.collect();
        assert_eq!((e[1].security_id, e[1].rpt_seq), (1002, 9));
        let Some(Item::Known {
            body: Body::Definition(def),
            ..
        }) = steps[3].item(&d)
        else {
            panic!()
        };
        assert_eq!(
            (trim(def.symbol), trim(def.security_group)),
            (&b"ESZ6"[..], &b"ES"[..])
        );
        assert_eq!(def.gbx_depth, Some(10));
        let Some(Item::Known {
            body: Body::Snapshot(snap),
            ..
        }) = steps[4].item(&d)
        else {
            panic!()
        };
        assert_eq!((snap.security_id, snap.entries.count()), (42, 2));
        // Bytes too short for a step's places give nothing.
        assert!(steps[4].item(&d[..d.len() / 2]).is_none());
    }

    #[test]
    fn validation_gives_the_messages_before_an_invalid_one() {
        let mut d = every_kind();
        // The heartbeat's MsgSize past the packet.
        let last = d.len() - 10;
        d[last] = 11;
        let mut n = 0;
        assert!(matches!(
            validate_with(&d, |_| n += 1),
            Err(SbeError::MsgSizePastPacket { .. })
        ));
        assert_eq!(n, 7);
    }

    #[test]
    fn trim_removes_trailing_nuls_and_spaces() {
        assert_eq!(trim(b"ESZ6\0\0 \0"), b"ESZ6");
        assert_eq!(trim(b"ES M6 \0"), b"ES M6");
        assert_eq!(trim(b"\0\0"), b"");
    }
}
