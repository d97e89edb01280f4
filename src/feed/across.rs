//! One symbol on several feeds (gate.md "One symbol on several feeds"):
//! each feed that knows the symbol is judged on its own
//! (`feed::verdict::judge`), then the answer combines them by the `[gate]`
//! rules (`across`, `crossed_ms`). Pure and allocation-free: the gate
//! socket, the shared-memory client (and the C and Python libraries built
//! on it) and `replay --checks` all answer through `check_across`.

use arrayvec::ArrayVec;

use crate::feed::check::ProtoError;
use crate::feed::reader::Found;
use crate::feed::settings::ms_to_ns;
use crate::feed::verdict::{
    judge, Thresholds, Verdict, R_CROSSED, R_NO_DATA, R_SUSPECT, R_UNKNOWN_SYMBOL,
};
use crate::feed::view::SuspectCause;
use crate::wire::{Side, Symbol};

/// Most feeds a check looks over (the shared state file's limit too).
pub const MAX_FEEDS: usize = 64;

/// `[gate] across`: which of the feeds that know a symbol must be OK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Across {
    /// Every feed with a quote must be OK (the default).
    #[default]
    All,
    /// One OK feed is enough; then only the OK feeds count.
    Any,
}

impl Across {
    pub fn parse(s: &str) -> Option<Across> {
        match s {
            "all" => Some(Across::All),
            "any" => Some(Across::Any),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Across::All => "all",
            Across::Any => "any",
        }
    }
}

/// The `[gate]` rules of an answer over several feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateRules {
    pub across: Across,
    /// `crossed_ms` in ns; 0 switches the `crossed` rule off.
    pub crossed_ns: i64,
}

/// `crossed_ms` when the config does not say.
pub const DEFAULT_CROSSED_MS: u64 = 50;

impl GateRules {
    pub fn new(across: Across, crossed_ms: u64) -> GateRules {
        GateRules {
            across,
            crossed_ns: ms_to_ns(crossed_ms),
        }
    }
}

impl Default for GateRules {
    fn default() -> Self {
        GateRules::new(Across::All, DEFAULT_CROSSED_MS)
    }
}

/// The feeds a check looks a symbol up in, in config order (the order of
/// `feeds=`).
pub trait Feeds {
    /// What a lookup may fail with (memory another process writes).
    type Error;
    fn count(&self) -> usize;
    /// Feed `i`'s name, as `feed=` names it and `feeds=` shows it.
    fn name(&self, i: usize) -> &[u8];
    /// The symbol as feed `i` knows it (`None`: it does not).
    fn find(&self, i: usize, symbol: Symbol) -> Result<Option<Found>, Self::Error>;
}

/// A request's options that bear on the verdict (gate.md "Requests").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub stale_ms: Option<u64>,
    pub source_ms: Option<u64>,
    /// `feed=<name>`, resolved to the feed's index.
    pub feed: Option<usize>,
}

/// One item of `feeds=`: a feed that knows the symbol and its own verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedItem {
    /// The feed's index in config order.
    pub feed: u8,
    /// Its verdict's reasons (`R_*`; 0: OK).
    pub reasons: u8,
}

/// The answer to a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The verdict shown. When several feeds know the symbol, `seq` means
    /// nothing (`seq=-`) and the quote and ages are combined.
    pub verdict: Verdict,
    /// One item per feed that knows the symbol, in config order, when
    /// several do (`feeds=`); empty when one feed or none knows it, or a
    /// request named a feed: the line is then that feed's verdict line.
    pub feeds: ArrayVec<FeedItem, MAX_FEEDS>,
}

impl Answer {
    #[inline]
    pub fn ok(&self) -> bool {
        self.verdict.ok()
    }

    /// Several feeds know the symbol: `seq=-` and `feeds=`.
    #[inline]
    pub fn across(&self) -> bool {
        !self.feeds.is_empty()
    }

    /// This answer made what `checked` says (its earlier content replaced).
    #[inline]
    pub fn set(&mut self, checked: Checked<'_>) {
        match checked {
            Checked::One(v) => {
                self.feeds.clear();
                self.verdict = *v;
            }
            Checked::Several(a) => self.clone_from(a),
        }
    }

    #[inline]
    fn single(verdict: Verdict) -> Answer {
        Answer {
            verdict,
            feeds: ArrayVec::new(),
        }
    }
}

/// An answer not yet written: `REJECT unknown_symbol`, so that one read
/// before `check_across_into` fills it never says OK.
impl Default for Answer {
    #[inline]
    fn default() -> Answer {
        Answer::single(Verdict::only(R_UNKNOWN_SYMBOL))
    }
}

/// Why a check is not answered with a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckError<E> {
    /// Answered `ERR <reason>` (a looser threshold).
    Proto(ProtoError),
    /// A feed's memory could not be read.
    Read(E),
}

/// The configured thresholds with the request's applied: a request may
/// only tighten them (a looser value is `ERR`).
#[inline]
pub fn tighten(
    mut t: Thresholds,
    stale_ms: Option<u64>,
    source_ms: Option<u64>,
) -> Result<Thresholds, ProtoError> {
    if let Some(ms) = stale_ms {
        let ns = ms_to_ns(ms);
        if ns > t.stale_ns {
            return Err(ProtoError::LooserThanConfigured);
        }
        t.stale_ns = ns;
    }
    if let Some(ms) = source_ms {
        let ns = ms_to_ns(ms);
        if ns > t.source_max_age_ns {
            return Err(ProtoError::LooserThanConfigured);
        }
        t.source_max_age_ns = ns;
    }
    Ok(t)
}

/// The verdict of one feed's view with the request's thresholds.
#[inline(always)]
fn feed_verdict(found: &Found, opts: &Options, now: i64) -> Result<Verdict, ProtoError> {
    let (view, feed, t) = found;
    let t = tighten(*t, opts.stale_ms, opts.source_ms)?;
    Ok(judge(Some(view), feed, now, &t))
}

/// The answer to `CHECK <symbol>` with `opts` at `now` over `feeds`
/// (gate.md "One symbol on several feeds"). `symbol` is `None` for a
/// token no feed can know (`unknown_symbol`). `opts.feed` must be an index
/// of `feeds` (the caller answers `ERR unknown feed` otherwise).
#[inline]
pub fn check_across<F: Feeds + ?Sized>(
    feeds: &F,
    symbol: Option<Symbol>,
    opts: &Options,
    rules: &GateRules,
    now: i64,
) -> Result<Answer, CheckError<F::Error>> {
    let mut answer = Answer::default();
    check_across_into(feeds, symbol, opts, rules, now, &mut answer)?;
    Ok(answer)
}

/// `check_across`, written into `out` (its earlier content is replaced).
#[inline]
pub fn check_across_into<F: Feeds + ?Sized>(
    feeds: &F,
    symbol: Option<Symbol>,
    opts: &Options,
    rules: &GateRules,
    now: i64,
    out: &mut Answer,
) -> Result<(), CheckError<F::Error>> {
    check_across_then(feeds, symbol, opts, rules, now, |checked| out.set(checked))
}

/// What a check found, as `check_across_then` hands it over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked<'a> {
    /// No feed or one feed knows the symbol, or the request named a feed:
    /// the answer is this verdict's line, exactly a lone feed's (gate.md:
    /// a symbol known to one feed answers as before).
    One(&'a Verdict),
    /// Several feeds know the symbol: the combined answer (`seq=-`,
    /// `feeds=`).
    Several(&'a Answer),
}

/// `check_across`, handed to `then` where it is made: the hot path's form.
/// A symbol that one feed knows (most) is judged straight from that feed's
/// view, with no combined `Answer` built, filled or copied; the several-feed
/// path is out of line.
#[inline]
pub fn check_across_then<F: Feeds + ?Sized, R>(
    feeds: &F,
    symbol: Option<Symbol>,
    opts: &Options,
    rules: &GateRules,
    now: i64,
    then: impl FnOnce(Checked<'_>) -> R,
) -> Result<R, CheckError<F::Error>> {
    const UNKNOWN: Verdict = Verdict::only(R_UNKNOWN_SYMBOL);
    let Some(symbol) = symbol else {
        return Ok(then(Checked::One(&UNKNOWN)));
    };
    if let Some(i) = opts.feed {
        // `feed=`: that feed alone, as a line for a symbol only it knows.
        return Ok(then(Checked::One(&named(feeds, i, symbol, opts, now)?)));
    }
    // The first feed that knows the symbol; most symbols stop there (one
    // feed knows them). Each lookup is matched where it lies, not moved out
    // of its `Result` (a view copied per feed looked at); the first
    // lookup is inlined here (once for a host of one feed, once in the
    // loop), and the other feeds are looked up out of line.
    let n = feeds.count().min(MAX_FEEDS);
    if n == 1 {
        // A host of one feed: its lookup and verdict with no loop around
        // them, which cost a one-feed check about 15% in time
        // (BENCHMARKS.md, "The one-feed check without the feeds' loop").
        return match feeds.find(0, symbol) {
            Err(e) => Err(CheckError::Read(e)),
            Ok(None) => Ok(then(Checked::One(&UNKNOWN))),
            Ok(Some(ref found)) => {
                let v = feed_verdict(found, opts, now).map_err(CheckError::Proto)?;
                Ok(then(Checked::One(&v)))
            }
        };
    }
    for i in 0..n {
        let got = feeds.find(i, symbol);
        let first = match got {
            Err(e) => return Err(CheckError::Read(e)),
            Ok(None) => continue,
            Ok(Some(ref first)) => first,
        };
        if i + 1 < n {
            if let Some(a) = others(feeds, symbol, opts, rules, now, (i, first))? {
                return Ok(then(Checked::Several(&a)));
            }
        }
        // One feed knows it: exactly that feed's verdict line.
        let v = feed_verdict(first, opts, now).map_err(CheckError::Proto)?;
        return Ok(then(Checked::One(&v)));
    }
    Ok(then(Checked::One(&UNKNOWN)))
}

/// The verdict of feed `i` alone (`feed=`), out of line: the hot path
/// keeps one lookup.
#[inline(never)]
fn named<F: Feeds + ?Sized>(
    feeds: &F,
    i: usize,
    symbol: Symbol,
    opts: &Options,
    now: i64,
) -> Result<Verdict, CheckError<F::Error>> {
    match feeds.find(i, symbol).map_err(CheckError::Read)? {
        None => Ok(Verdict::only(R_UNKNOWN_SYMBOL)),
        Some(found) => feed_verdict(&found, opts, now).map_err(CheckError::Proto),
    }
}

/// The feeds after `first` that know the symbol: `None` when none does,
/// else the answer combined over them all (`several`).
#[inline(never)]
fn others<F: Feeds + ?Sized>(
    feeds: &F,
    symbol: Symbol,
    opts: &Options,
    rules: &GateRules,
    now: i64,
    first: (usize, &Found),
) -> Result<Option<Answer>, CheckError<F::Error>> {
    for j in first.0 + 1..feeds.count().min(MAX_FEEDS) {
        let got = feeds.find(j, symbol);
        match got {
            Err(e) => return Err(CheckError::Read(e)),
            Ok(None) => {}
            Ok(Some(ref second)) => {
                return several(feeds, symbol, opts, rules, now, first, (j, second)).map(Some);
            }
        }
    }
    Ok(None)
}

/// `check_across` once two feeds (`first`, `second`) know the symbol: the
/// feeds after `second` are looked up too, each is judged, and the
/// verdicts combine.
#[inline]
fn several<F: Feeds + ?Sized>(
    feeds: &F,
    symbol: Symbol,
    opts: &Options,
    rules: &GateRules,
    now: i64,
    first: (usize, &Found),
    second: (usize, &Found),
) -> Result<Answer, CheckError<F::Error>> {
    let mut judged: ArrayVec<(u8, Verdict, i64), MAX_FEEDS> = ArrayVec::new();
    judge_into(&mut judged, first.0, first.1, opts, now)?;
    judge_into(&mut judged, second.0, second.1, opts, now)?;
    for j in second.0 + 1..feeds.count().min(MAX_FEEDS) {
        if let Some(found) = feeds.find(j, symbol).map_err(CheckError::Read)? {
            judge_into(&mut judged, j, &found, opts, now)?;
        }
    }
    Ok(combine(&judged, rules, now))
}

/// One feed's verdict appended to `judged`, inlined into `several` (as a
/// closure it stayed a call a feed).
#[inline(always)]
fn judge_into<E>(
    judged: &mut ArrayVec<(u8, Verdict, i64), MAX_FEEDS>,
    i: usize,
    found: &Found,
    opts: &Options,
    now: i64,
) -> Result<(), CheckError<E>> {
    // Every feed's thresholds bound the request: any looser is ERR.
    let v = feed_verdict(found, opts, now).map_err(CheckError::Proto)?;
    judged.push((i as u8, v, found.0.quote_changed_at));
    Ok(())
}

/// Combines the feed verdicts `(feed, verdict, quote_changed_at)` of two or
/// more feeds that know a symbol, in config order.
pub fn combine(judged: &[(u8, Verdict, i64)], rules: &GateRules, now: i64) -> Answer {
    let mut feeds = ArrayVec::new();
    for (i, v, _) in judged {
        feeds.push(FeedItem {
            feed: *i,
            reasons: v.reasons,
        });
    }
    // Which feeds count: a feed without a quote (`no_data`) never; with
    // `any`, only the OK ones when there is one.
    let any_ok = rules.across == Across::Any && judged.iter().any(|(_, v, _)| v.ok());
    let counts = |v: &Verdict| v.has_quote && (!any_ok || v.ok());
    let mut out = Verdict {
        reasons: 0,
        cause: SuspectCause::None,
        has_quote: false,
        seq: 0,
        bid: None,
        ask: None,
        silence_ns: i64::MIN,
        source_age_ns: i64::MIN,
    };
    for (_, v, _) in judged.iter().filter(|(_, v, _)| counts(v)) {
        out.has_quote = true;
        // Reasons: the union; the cause of the first suspect feed.
        out.reasons |= v.reasons;
        if out.cause == SuspectCause::None && v.reasons & R_SUSPECT != 0 {
            out.cause = v.cause;
        }
        // Quote: best bid and offer, sizes at that price summed.
        out.bid = best(out.bid, v.bid, |a, b| a > b);
        out.ask = best(out.ask, v.ask, |a, b| a < b);
        // The stalest view decides.
        out.silence_ns = out.silence_ns.max(v.silence_ns);
        out.source_age_ns = out.source_age_ns.max(v.source_age_ns);
    }
    if !out.has_quote {
        let mut v = judged[0].1;
        v.reasons = R_NO_DATA;
        v.cause = SuspectCause::None;
        v.has_quote = false;
        return Answer { verdict: v, feeds };
    }
    if crossed(judged, &counts, rules, now) {
        out.reasons |= R_CROSSED;
    }
    Answer {
        verdict: out,
        feeds,
    }
}

/// The better of two sides by `better` on price; equal prices add sizes.
#[inline]
fn best(cur: Option<Side>, new: Option<Side>, better: impl Fn(i64, i64) -> bool) -> Option<Side> {
    match (cur, new) {
        (None, n) => n,
        (c, None) => c,
        (Some(c), Some(n)) if n.px == c.px => Some(Side {
            px: c.px,
            qty: c.qty.saturating_add(n.qty),
        }),
        (Some(c), Some(n)) => Some(if better(n.px, c.px) { n } else { c }),
    }
}

/// gate.md `crossed`: one counted feed's bid above another counted feed's
/// offer, neither quote changed within the last `crossed_ns` (a change
/// exactly that long ago is old). A locked market (equal) is not crossed.
fn crossed(
    judged: &[(u8, Verdict, i64)],
    counts: &impl Fn(&Verdict) -> bool,
    rules: &GateRules,
    now: i64,
) -> bool {
    if rules.crossed_ns <= 0 {
        return false;
    }
    let old = |changed: i64| now.saturating_sub(changed) >= rules.crossed_ns;
    for (i, (_, b, b_changed)) in judged.iter().enumerate() {
        let Some(bid) = b.bid.filter(|_| counts(b) && old(*b_changed)) else {
            continue;
        };
        for (j, (_, a, a_changed)) in judged.iter().enumerate() {
            if i == j || !counts(a) || !old(*a_changed) {
                continue;
            }
            if a.ask.is_some_and(|ask| bid.px > ask.px) {
                return true;
            }
        }
    }
    false
}

/// A slice of found views as `Feeds` (no names: `feeds=` shows each
/// feed's position from 0; tests and tools with unnamed feeds).
impl<L: crate::feed::check::SymbolLookup + ?Sized> Feeds for [&L] {
    type Error = std::convert::Infallible;
    fn count(&self) -> usize {
        self.len()
    }
    fn name(&self, i: usize) -> &[u8] {
        POSITION_NAMES.get(i).map_or(b"?", |n| n.as_bytes())
    }
    #[inline]
    fn find(&self, i: usize, symbol: Symbol) -> Result<Option<Found>, Self::Error> {
        Ok(self[i].lookup(symbol))
    }
}

/// Names of unnamed feeds: their position.
const POSITION_NAMES: [&str; 16] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::verdict::{R_HALTED, R_STALE_QUOTE};

    const MS: i64 = 1_000_000;

    fn v(reasons: u8, bid: Option<(i64, u64)>, ask: Option<(i64, u64)>, silence: i64) -> Verdict {
        let side = |s: Option<(i64, u64)>| s.map(|(px, qty)| Side { px, qty });
        Verdict {
            reasons,
            cause: if reasons & R_SUSPECT != 0 {
                SuspectCause::Gap
            } else {
                SuspectCause::None
            },
            has_quote: reasons != R_NO_DATA,
            seq: 7,
            bid: side(bid),
            ask: side(ask),
            silence_ns: silence,
            source_age_ns: silence + 1,
        }
    }

    #[test]
    fn sizes_at_the_best_price_add_up() {
        let rules = GateRules::default();
        let a = combine(
            &[
                (0, v(0, Some((100, 1)), Some((105, 4)), 3), 0),
                (1, v(0, Some((100, 2)), Some((104, 5)), 9), 0),
                (2, v(0, Some((99, 7)), Some((104, 6)), 1), 0),
            ],
            &rules,
            MS,
        );
        assert!(a.ok());
        assert_eq!(a.verdict.bid, Some(Side { px: 100, qty: 3 }));
        assert_eq!(a.verdict.ask, Some(Side { px: 104, qty: 11 }));
        assert_eq!(a.verdict.silence_ns, 9);
        assert_eq!(a.verdict.source_age_ns, 10);
        assert_eq!(a.feeds.len(), 3);
    }

    #[test]
    fn any_counts_only_ok_feeds_when_one_is() {
        let judged = [
            (0, v(R_STALE_QUOTE, Some((110, 1)), None, 900), 0),
            (1, v(0, Some((100, 2)), Some((104, 5)), 9), 0),
        ];
        let all = combine(&judged, &GateRules::new(Across::All, 50), 100 * MS);
        assert_eq!(all.verdict.reasons, R_STALE_QUOTE | R_CROSSED);
        let any = combine(&judged, &GateRules::new(Across::Any, 50), 100 * MS);
        assert!(any.ok());
        assert_eq!(any.verdict.bid, Some(Side { px: 100, qty: 2 }));
        assert_eq!(any.verdict.silence_ns, 9);
        // None OK: every feed with a quote counts, as with `all`.
        let judged = [
            (0, v(R_HALTED, Some((100, 1)), None, 5), 0),
            (1, v(R_SUSPECT, None, Some((104, 5)), 9), 0),
        ];
        let any = combine(&judged, &GateRules::new(Across::Any, 50), MS);
        assert_eq!(any.verdict.reasons, R_HALTED | R_SUSPECT);
        assert_eq!(any.verdict.cause, SuspectCause::Gap);
    }

    #[test]
    fn no_quote_anywhere_is_no_data() {
        let judged = [
            (0, v(R_NO_DATA, None, None, 0), 0),
            (3, v(R_NO_DATA, None, None, 0), 0),
        ];
        let a = combine(&judged, &GateRules::default(), MS);
        assert_eq!(a.verdict.reasons, R_NO_DATA);
        assert!(!a.verdict.has_quote);
        assert_eq!(a.feeds[1].feed, 3);
    }

    #[test]
    fn crossed_needs_both_quotes_old_and_a_strict_cross() {
        let rules = GateRules::new(Across::All, 50);
        let cross = |bid: i64, changed_a: i64, changed_b: i64, now: i64| {
            combine(
                &[
                    (0, v(0, Some((bid, 1)), Some((200, 1)), 0), changed_a),
                    (1, v(0, Some((90, 1)), Some((100, 1)), 0), changed_b),
                ],
                &rules,
                now,
            )
            .verdict
            .reasons
                & R_CROSSED
                != 0
        };
        assert!(cross(101, 0, 0, 50 * MS)); // exactly crossed_ms ago: old
        assert!(!cross(101, 0, 1, 50 * MS)); // one changed within it
        assert!(!cross(101, 1, 0, 50 * MS));
        assert!(!cross(100, 0, 0, 500 * MS)); // locked
        assert!(
            !combine(
                &[
                    (0, v(0, Some((101, 1)), Some((200, 1)), 0), 0),
                    (1, v(0, Some((90, 1)), Some((100, 1)), 0), 0),
                ],
                &GateRules::new(Across::All, 0),
                500 * MS,
            )
            .verdict
            .reasons
                & R_CROSSED
                != 0
        );
        // One feed's own crossed quote is not a cross between venues.
        let own = combine(
            &[
                (0, v(0, Some((101, 1)), Some((100, 1)), 0), 0),
                (1, v(0, None, Some((300, 1)), 0), 0),
            ],
            &rules,
            500 * MS,
        );
        assert_eq!(own.verdict.reasons & R_CROSSED, 0);
    }
}
