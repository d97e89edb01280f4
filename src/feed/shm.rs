//! The shared-memory state file's layout (docs/shm-layout.md), sans-I/O:
//! where the header fields and each feed's table lie, writing the header
//! and validating it. The daemon writes the file (`daemon::shm`), clients
//! map it read-only (`client`); both go through this one description.
//!
//! Everything is 64-bit words in the host's byte order (little-endian on
//! every supported host; a byte-swapped file fails the magic check).
//! Header words are written once, before the file gets its name, except
//! `state`, which the daemon changes when it stops or is replaced.

#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::across::{Across, GateRules};
use super::reader::UnitLayout;
use super::table::{stride, TableLayout};
use super::view::{FeedView, SymbolView, FEED_VIEW_WORDS, SYMBOL_VIEW_WORDS};

/// Word 0: `b"TICKGATE"` read as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TICKGATE");
/// Word 1: bumped on any change of this layout.
pub const VERSION: u64 = 5;

/// Header word indexes.
pub const W_MAGIC: usize = 0;
pub const W_VERSION: usize = 1;
pub const W_STATE: usize = 2;
pub const W_GENERATION: usize = 3;
pub const W_FILE_BYTES: usize = 4;
pub const W_FEED_COUNT: usize = 5;
pub const W_HEADER_BYTES: usize = 6;
pub const W_SYMBOL_VIEW_WORDS: usize = 7;
pub const W_FEED_VIEW_WORDS: usize = 8;
pub const W_SYMBOL_STRIDE: usize = 9;
pub const W_FEED_STRIDE: usize = 10;
pub const W_PID: usize = 11;
pub const W_STARTED_NS: usize = 12;
/// `[gate] across`: 0 `all`, 1 `any` (gate.md "One symbol on several feeds").
pub const W_ACROSS: usize = 13;
/// `[gate] crossed_ms` in ns (0: the `crossed` rule is off).
pub const W_CROSSED_NS: usize = 14;
/// Feed descriptors start at this word, `DESC_WORDS` each.
pub const W_FEEDS: usize = 16;
pub const DESC_WORDS: usize = 32;

/// Descriptor word indexes (from the descriptor's first word).
pub const D_NAME: usize = 0;
/// Bytes of a feed name, NUL-padded (8 words).
pub const NAME_BYTES: usize = 64;
pub const D_CAPACITY: usize = 8;
pub const D_BUCKETS: usize = 9;
/// Byte offsets from the start of the file.
pub const D_CELL_AT: usize = 10;
pub const D_TABLE_AT: usize = 11;
pub const D_SLOTS_AT: usize = 12;
pub const D_KEYS_AT: usize = 13;
pub const D_BUCKETS_AT: usize = 14;
pub const D_END_AT: usize = 15;
pub const D_STALE_MS: usize = 16;
pub const D_SOURCE_MAX_AGE_MS: usize = 17;
/// Unit cells (venues.md `cboe-pitch`: 256, unit ids 1-255; 0 for a feed
/// of one channel), and where they and the per-slot unit bytes start
/// (byte offsets; both `end_at` without units).
pub const D_UNITS: usize = 18;
pub const D_UNITS_AT: usize = 19;
pub const D_UNIT_OF_AT: usize = 20;

/// At most this many feeds in one file: the limit of a check over
/// several feeds, one constant for both.
pub use super::across::MAX_FEEDS;
/// Regions start on a page boundary.
const PAGE_WORDS: usize = 4096 / 8;

/// `state`: the daemon is running and writes this file.
pub const STATE_LIVE: u64 = 1;
/// The daemon stopped; nothing writes the file any more.
pub const STATE_STOPPED: u64 = 2;
/// A newer daemon published a new file under the same name.
pub const STATE_RETIRED: u64 = 3;

/// A feed as the file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedSpec {
    pub name: String,
    /// Symbol slots (the feed's `max_symbols`).
    pub capacity: u32,
    /// The feed's configured defaults (informational: each symbol's own
    /// thresholds are in its slot).
    pub stale_ms: u64,
    pub source_max_age_ms: u64,
    /// Unit cells (`reader::units_of`: 256 for `cboe-pitch`, else 0).
    pub units: u32,
}

/// Where one feed's parts lie, in words from the start of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedPlace {
    pub cell_at: usize,
    pub table_at: usize,
    pub table: TableLayout,
    /// The unit region (`UnitLayout`; empty without units).
    pub units_at: usize,
    pub units: UnitLayout,
    pub end_at: usize,
}

/// The whole file: header size, each feed's place, total words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub header_words: usize,
    pub feeds: Vec<FeedPlace>,
    pub words: usize,
}

fn round_page(n: usize) -> usize {
    n.div_ceil(PAGE_WORDS) * PAGE_WORDS
}

/// The layout for feeds of these capacities, without units (at most
/// `MAX_FEEDS`).
pub fn plan(capacities: &[u32]) -> Plan {
    let feeds: Vec<(u32, u32)> = capacities.iter().map(|&c| (c, 0)).collect();
    plan_units(&feeds)
}

/// The layout for feeds of these (capacity, units) (at most `MAX_FEEDS`).
pub fn plan_units(feeds_in: &[(u32, u32)]) -> Plan {
    let header_words = round_page(W_FEEDS + DESC_WORDS * feeds_in.len());
    let cell_words = stride::<FeedView>().div_ceil(8) * 8;
    let mut at = header_words;
    let mut feeds = Vec::with_capacity(feeds_in.len());
    for &(c, u) in feeds_in {
        let table = TableLayout::of::<SymbolView>(c);
        let cell_at = at;
        let table_at = cell_at + cell_words;
        let units_at = table_at + table.words;
        let units = UnitLayout::of(u as usize, table.capacity);
        let end_at = units_at + units.words;
        feeds.push(FeedPlace {
            cell_at,
            table_at,
            table,
            units_at,
            units,
            end_at,
        });
        at = round_page(end_at);
    }
    Plan {
        header_words,
        feeds,
        words: at,
    }
}

/// Why a file is not a state file this build can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    TooShort {
        bytes: usize,
    },
    BadMagic {
        found: u64,
    },
    Version {
        found: u64,
    },
    /// A header word differs from what the layout requires.
    Field {
        field: &'static str,
        found: u64,
        expected: u64,
    },
    TooManyFeeds {
        found: u64,
    },
    BadName {
        feed: usize,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::TooShort { bytes } => {
                write!(f, "{bytes} bytes is too short for a tickgate state file")
            }
            LayoutError::BadMagic { found } if found.swap_bytes() == MAGIC => {
                f.write_str("written with the other byte order")
            }
            LayoutError::BadMagic { found } => {
                write!(f, "not a tickgate state file (magic {found:#018x})")
            }
            LayoutError::Version { found } => write!(
                f,
                "layout version {found}, this build reads version {VERSION} (client and daemon differ)"
            ),
            LayoutError::Field {
                field,
                found,
                expected,
            } => write!(
                f,
                "header field {field} is {found}, the layout requires {expected}"
            ),
            LayoutError::TooManyFeeds { found } => {
                write!(f, "{found} feeds, at most {MAX_FEEDS}")
            }
            LayoutError::BadName { feed } => write!(f, "feed {feed} has an invalid name"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// The header as read by a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub generation: u64,
    pub pid: u64,
    pub started_ns: i64,
    /// The daemon's `[gate]` rules for a symbol on several feeds.
    pub rules: GateRules,
    pub feeds: Vec<FeedSpec>,
    pub plan: Plan,
}

/// The bytes of `name` in `NAME_BYTES`, NUL-padded; `None` when it does
/// not fit (with at least one NUL) or contains a NUL.
pub fn name_words(name: &str) -> Option<[u64; NAME_BYTES / 8]> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= NAME_BYTES || b.contains(&0) {
        return None;
    }
    let mut bytes = [0u8; NAME_BYTES];
    bytes[..b.len()].copy_from_slice(b);
    Some(std::array::from_fn(|i| {
        u64::from_le_bytes(*bytes[i * 8..].first_chunk().expect("8 bytes"))
    }))
}

/// Writes the header of a fresh file laid out by `plan(specs' capacities)`
/// (`words` is the whole file). `state` is written last (Release).
///
/// # Panics
/// When `words` is shorter than the plan or a name does not fit (the
/// daemon checks names first with `name_words`).
pub fn write_header(
    words: &[AtomicU64],
    specs: &[FeedSpec],
    generation: u64,
    pid: u64,
    started_ns: i64,
    rules: &GateRules,
) {
    let caps: Vec<(u32, u32)> = specs.iter().map(|s| (s.capacity, s.units)).collect();
    let p = plan_units(&caps);
    assert!(words.len() >= p.words, "file shorter than its plan");
    let put = |i: usize, v: u64| words[i].store(v, Ordering::Relaxed);
    put(W_MAGIC, MAGIC);
    put(W_VERSION, VERSION);
    put(W_GENERATION, generation);
    put(W_FILE_BYTES, (p.words * 8) as u64);
    put(W_FEED_COUNT, specs.len() as u64);
    put(W_HEADER_BYTES, (p.header_words * 8) as u64);
    put(W_SYMBOL_VIEW_WORDS, SYMBOL_VIEW_WORDS as u64);
    put(W_FEED_VIEW_WORDS, FEED_VIEW_WORDS as u64);
    put(W_SYMBOL_STRIDE, stride::<SymbolView>() as u64);
    put(W_FEED_STRIDE, stride::<FeedView>() as u64);
    put(W_PID, pid);
    put(W_STARTED_NS, started_ns as u64);
    put(W_ACROSS, across_code(rules.across));
    put(W_CROSSED_NS, rules.crossed_ns.max(0) as u64);
    for (i, (s, place)) in specs.iter().zip(&p.feeds).enumerate() {
        let d = W_FEEDS + i * DESC_WORDS;
        let name = name_words(&s.name).expect("feed name checked by the caller");
        for (j, w) in name.iter().enumerate() {
            put(d + D_NAME + j, *w);
        }
        for (field, v) in desc_fields(place) {
            put(d + field, v);
        }
        put(d + D_STALE_MS, s.stale_ms);
        put(d + D_SOURCE_MAX_AGE_MS, s.source_max_age_ms);
    }
    words[W_STATE].store(STATE_LIVE, Ordering::Release);
}

fn across_code(a: Across) -> u64 {
    match a {
        Across::All => 0,
        Across::Any => 1,
    }
}

/// The descriptor words a place determines (byte offsets).
fn desc_fields(p: &FeedPlace) -> [(usize, u64); 11] {
    let b = |w: usize| (w * 8) as u64;
    [
        (D_UNITS, p.units.units as u64),
        (D_UNITS_AT, b(p.units_at)),
        (D_UNIT_OF_AT, b(p.units_at + p.units.unit_of_at)),
        (D_CAPACITY, p.table.capacity as u64),
        (D_BUCKETS, p.table.buckets),
        (D_CELL_AT, b(p.cell_at)),
        (D_TABLE_AT, b(p.table_at)),
        (D_SLOTS_AT, b(p.table_at + p.table.slots_at)),
        (D_KEYS_AT, b(p.table_at + p.table.keys_at)),
        (D_BUCKETS_AT, b(p.table_at + p.table.buckets_at)),
        (D_END_AT, b(p.end_at)),
    ]
}

const DESC_NAMES: [&str; 11] = [
    "units",
    "units_at",
    "unit_of_at",
    "capacity",
    "buckets",
    "cell_at",
    "table_at",
    "slots_at",
    "keys_at",
    "buckets_at",
    "end_at",
];

/// Validates the header of a file of `words` (the whole mapping): every
/// size and offset must be the one this build's layout gives, so that
/// every later access stays inside the file.
pub fn parse_header(words: &[AtomicU64]) -> Result<Header, LayoutError> {
    let get = |i: usize| words[i].load(Ordering::Relaxed);
    if words.len() < W_FEEDS {
        return Err(LayoutError::TooShort {
            bytes: words.len() * 8,
        });
    }
    let magic = words[W_MAGIC].load(Ordering::Acquire);
    if magic != MAGIC {
        return Err(LayoutError::BadMagic { found: magic });
    }
    if get(W_VERSION) != VERSION {
        return Err(LayoutError::Version {
            found: get(W_VERSION),
        });
    }
    let count = get(W_FEED_COUNT);
    if count > MAX_FEEDS as u64 {
        return Err(LayoutError::TooManyFeeds { found: count });
    }
    let count = count as usize;
    let want = |field: &'static str, i: usize, expected: u64| {
        let found = get(i);
        (found == expected).then_some(()).ok_or(LayoutError::Field {
            field,
            found,
            expected,
        })
    };
    want(
        "symbol_view_words",
        W_SYMBOL_VIEW_WORDS,
        SYMBOL_VIEW_WORDS as u64,
    )?;
    want("feed_view_words", W_FEED_VIEW_WORDS, FEED_VIEW_WORDS as u64)?;
    want(
        "symbol_stride",
        W_SYMBOL_STRIDE,
        stride::<SymbolView>() as u64,
    )?;
    want("feed_stride", W_FEED_STRIDE, stride::<FeedView>() as u64)?;
    let desc_end = W_FEEDS + count * DESC_WORDS;
    if words.len() < desc_end {
        return Err(LayoutError::TooShort {
            bytes: words.len() * 8,
        });
    }
    let mut caps = Vec::with_capacity(count);
    for i in 0..count {
        let c = get(W_FEEDS + i * DESC_WORDS + D_CAPACITY);
        if c > (u32::MAX - 1) as u64 {
            return Err(LayoutError::Field {
                field: "capacity",
                found: c,
                expected: (u32::MAX - 1) as u64,
            });
        }
        // 0 or 256 (a unit id is a byte), nothing else.
        let u = get(W_FEEDS + i * DESC_WORDS + D_UNITS);
        if u != 0 && u != 256 {
            return Err(LayoutError::Field {
                field: "units",
                found: u,
                expected: 256,
            });
        }
        caps.push((c as u32, u as u32));
    }
    let p = plan_units(&caps);
    want("header_bytes", W_HEADER_BYTES, (p.header_words * 8) as u64)?;
    want("file_bytes", W_FILE_BYTES, (p.words * 8) as u64)?;
    if words.len() != p.words {
        return Err(LayoutError::Field {
            field: "file size",
            found: (words.len() * 8) as u64,
            expected: (p.words * 8) as u64,
        });
    }
    let mut feeds = Vec::with_capacity(count);
    for (i, place) in p.feeds.iter().enumerate() {
        let d = W_FEEDS + i * DESC_WORDS;
        for ((field, v), name) in desc_fields(place).into_iter().zip(DESC_NAMES) {
            want(name, d + field, v)?;
        }
        let mut bytes = [0u8; NAME_BYTES];
        for j in 0..NAME_BYTES / 8 {
            bytes[j * 8..j * 8 + 8].copy_from_slice(&get(d + D_NAME + j).to_le_bytes());
        }
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
        let name = match std::str::from_utf8(&bytes[..len]) {
            Ok(n) if !n.is_empty() && len < NAME_BYTES => n.to_string(),
            _ => return Err(LayoutError::BadName { feed: i }),
        };
        feeds.push(FeedSpec {
            name,
            capacity: place.table.capacity,
            stale_ms: get(d + D_STALE_MS),
            source_max_age_ms: get(d + D_SOURCE_MAX_AGE_MS),
            units: place.units.units as u32,
        });
    }
    let across = match get(W_ACROSS) {
        0 => Across::All,
        1 => Across::Any,
        found => {
            return Err(LayoutError::Field {
                field: "across",
                found,
                expected: 1,
            })
        }
    };
    let crossed_ns = get(W_CROSSED_NS);
    if crossed_ns > i64::MAX as u64 {
        return Err(LayoutError::Field {
            field: "crossed_ns",
            found: crossed_ns,
            expected: i64::MAX as u64,
        });
    }
    Ok(Header {
        generation: get(W_GENERATION),
        pid: get(W_PID),
        started_ns: get(W_STARTED_NS) as i64,
        rules: GateRules {
            across,
            crossed_ns: crossed_ns as i64,
        },
        feeds,
        plan: p,
    })
}

/// The `state` word (`STATE_*`; anything else: not live).
#[inline]
pub fn state(words: &[AtomicU64]) -> u64 {
    words[W_STATE].load(Ordering::Acquire)
}

/// Sets the `state` word (the daemon: stopped, or retired by a newer one).
pub fn set_state(words: &[AtomicU64], state: u64) {
    words[W_STATE].store(state, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    fn specs() -> Vec<FeedSpec> {
        vec![
            FeedSpec {
                name: "md1".into(),
                capacity: 100,
                stale_ms: 500,
                source_max_age_ms: 2000,
                units: 256,
            },
            FeedSpec {
                name: "iex".into(),
                capacity: 3,
                stale_ms: 1500,
                source_max_age_ms: 2000,
                units: 0,
            },
        ]
    }

    #[test]
    fn header_round_trips_and_regions_do_not_overlap() {
        let p = plan_units(&[(100, 256), (3, 0)]);
        assert_eq!(p.header_words % PAGE_WORDS, 0);
        assert!(p.feeds[0].cell_at >= p.header_words);
        assert!(p.feeds[0].end_at <= p.feeds[1].cell_at);
        assert_eq!(p.feeds[1].cell_at % PAGE_WORDS, 0);
        let w = zeroed(p.words);
        write_header(&w, &specs(), 42, 7, 99, &GateRules::new(Across::Any, 20));
        let h = parse_header(&w).unwrap();
        assert_eq!(h.generation, 42);
        assert_eq!(h.pid, 7);
        assert_eq!(h.rules, GateRules::new(Across::Any, 20));
        assert_eq!(h.feeds, specs());
        assert_eq!(h.plan, p);
        assert_eq!(state(&w), STATE_LIVE);
    }

    #[test]
    fn every_wrong_field_is_refused() {
        let p = plan_units(&[(100, 256), (3, 0)]);
        let w = zeroed(p.words);
        write_header(&w, &specs(), 1, 1, 1, &GateRules::default());
        // Any changed word among the layout fields is an error.
        let layout_words: Vec<usize> = [
            W_MAGIC,
            W_VERSION,
            W_FILE_BYTES,
            W_FEED_COUNT,
            W_HEADER_BYTES,
            W_SYMBOL_VIEW_WORDS,
            W_FEED_VIEW_WORDS,
            W_SYMBOL_STRIDE,
            W_FEED_STRIDE,
        ]
        .into_iter()
        .chain((0..2).flat_map(|f| {
            (D_CAPACITY..=D_END_AT)
                .chain(D_UNITS..=D_UNIT_OF_AT)
                .map(move |d| W_FEEDS + f * DESC_WORDS + d)
        }))
        .collect();
        for i in layout_words {
            let old = w[i].load(Ordering::Relaxed);
            for bad in [old + 1, old.wrapping_sub(1), u64::MAX, 0] {
                if bad == old {
                    continue;
                }
                w[i].store(bad, Ordering::Relaxed);
                assert!(parse_header(&w).is_err(), "word {i} = {bad} accepted");
            }
            w[i].store(old, Ordering::Relaxed);
        }
        assert!(parse_header(&w).is_ok());
        // A file of another size, and a name without its NUL.
        assert!(parse_header(&w[..w.len() - 1]).is_err());
        assert!(parse_header(&w[..3]).is_err());
        for j in 0..8 {
            w[W_FEEDS + D_NAME + j].store(u64::from_le_bytes(*b"xxxxxxxx"), Ordering::Relaxed);
        }
        assert_eq!(parse_header(&w), Err(LayoutError::BadName { feed: 0 }));
    }

    /// The numbers docs/shm-layout.md gives.
    #[test]
    fn the_documented_layout() {
        assert_eq!(MAGIC, 0x4554_4147_4B43_4954);
        assert_eq!(stride::<SymbolView>(), 12);
        assert_eq!(stride::<FeedView>(), 8);
        let up = |n: usize, m: usize| n.div_ceil(m) * m;
        for caps in [
            vec![(1u32, 0u32)],
            vec![(100, 256), (3, 0)],
            vec![(100_001, 0), (0, 256), (7, 256)],
        ] {
            let p = plan_units(&caps);
            assert_eq!(p.header_words * 8, up(8 * (16 + 32 * caps.len()), 4096));
            let mut expect_cell = p.header_words * 8;
            for (f, &(c, units)) in p.feeds.iter().zip(&caps) {
                let c = c as usize;
                let b = (2 * c).next_power_of_two().max(2);
                let (cell, table) = (f.cell_at * 8, f.table_at * 8);
                assert_eq!(cell, expect_cell);
                assert_eq!(table, cell + 64);
                let slots = table + f.table.slots_at * 8;
                let keys = table + f.table.keys_at * 8;
                let buckets = table + f.table.buckets_at * 8;
                assert_eq!(slots, table + 64);
                assert_eq!(keys, slots + up(96 * c, 64));
                assert_eq!(buckets, keys + up(24 * c, 64));
                assert_eq!(f.table.buckets as usize, b);
                let units_at = table + up(buckets - table + 32 * b, 64);
                assert_eq!(f.units_at * 8, units_at);
                // 256 unit cells of 64 bytes, then a byte per slot.
                let unit_of_at = units_at + 64 * units as usize;
                assert_eq!((f.units_at + f.units.unit_of_at) * 8, unit_of_at);
                let end = if units == 0 {
                    units_at
                } else {
                    unit_of_at + up(c, 64)
                };
                assert_eq!(f.end_at * 8, end);
                expect_cell = up(f.end_at * 8, 4096);
            }
            assert_eq!(p.words * 8, expect_cell);
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            LayoutError::BadMagic {
                found: MAGIC.swap_bytes()
            }
            .to_string(),
            "written with the other byte order"
        );
        assert!(LayoutError::Version { found: 9 }
            .to_string()
            .contains("version 9"));
        assert!(name_words(&"x".repeat(63)).is_some());
        assert!(name_words(&"x".repeat(64)).is_none());
        assert!(name_words("").is_none());
    }
}
