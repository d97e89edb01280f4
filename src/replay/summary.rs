//! What a replay saw, as readable text or as one JSON object (`--json`):
//! the captures, then each feed's lines, sessions, counters and symbols.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::engine::Replay;
use super::feed::{ReplayFeed, SessionInfo};
use crate::capture::frame::SkipCounts;
use crate::capture::stream::StreamSummary;
use crate::feed::{Mode, SymbolSummary};
use crate::venue::VenueKind;
use crate::wire::{Side, Symbol};

/// The captures' names, as given (several: comma-separated).
fn capture_names(cap: &StreamSummary) -> String {
    let names: Vec<String> = cap
        .files
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    names.join(", ")
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Full => "full",
        Mode::Delta => "delta",
    }
}

fn side_str(s: Option<Side>) -> Option<String> {
    s.map(|s| {
        let mut out = String::new();
        let _ = crate::wire::write_price(&mut out, s.px);
        let _ = write!(out, "@{}", s.qty);
        out
    })
}

fn skipped_json(s: &SkipCounts) -> Value {
    let mut m = Map::new();
    for (name, n) in s.iter() {
        m.insert(name.to_string(), json!(n));
    }
    Value::Object(m)
}

fn symbol_json(s: &SymbolSummary) -> Value {
    json!({
        "seq": s.shown_seq,
        "ticks_lost": s.ticks_lost,
        "suspect": s.suspect.map(|c| c.as_str()),
        "has_quote": s.has_quote,
        "bid": side_str(s.bid),
        "ask": side_str(s.ask),
        "alive_at": s.alive_at,
        "source_ts": s.quote_source_ts,
        "stale_dropped": s.stale_dropped,
        "seq_anomalies": s.seq_anomalies,
        "seq_resyncs": s.seq_resyncs,
        "snapshots_applied": s.snapshots_applied,
        "trading": if s.halted { "halted" } else { "trading" },
    })
}

/// `{"Q": 27217, ...}`: messages applied by type, for venues that count.
/// (cme-mdp3: by template id, `{"32": 9569, ...}`).
fn message_types_json(venue: VenueKind, types: Option<&[u64; 256]>) -> Value {
    let Some(types) = types else {
        return Value::Null;
    };
    let mut m = Map::new();
    for (b, &n) in types.iter().enumerate() {
        if n > 0 {
            m.insert(venue.message_type_label(b as u8), json!(n));
        }
    }
    Value::Object(m)
}

/// The feed's mode for the tickgate protocol, else its venue.
fn feed_kind(f: &ReplayFeed) -> &'static str {
    if f.venue.is_venue_feed() {
        f.venue.name()
    } else {
        mode_name(f.mode)
    }
}

fn session_json(s: &SessionInfo) -> Value {
    json!({
        "id": s.id.to_string(),
        "packets": s.packets,
        "data_packets": s.data_packets,
        "heartbeats": s.heartbeats,
        "end_of_session": s.end_of_session,
        "first_sequence": s.first_sequence,
        "next_sequence": s.next_sequence,
        "first_ts": s.first_ts,
        "last_ts": s.last_ts,
    })
}

/// The `--json` summary: totals over feeds at the top, details per feed.
/// Built whole: for tests and small replays; `replay --json` writes the
/// same bytes with [`write_summary_json`], which never holds the symbols'
/// objects all at once.
pub fn summary_json(cap: &StreamSummary, r: &Replay) -> Value {
    let mut top = summary_head(cap, r);
    let mut symbols = Map::new();
    let mut feeds = Vec::new();
    for f in &r.feeds {
        let mut fsyms = Map::new();
        for (sym, s) in f.feed.symbols() {
            let v = symbol_json(&s);
            symbols.entry(sym.to_string()).or_insert_with(|| v.clone());
            fsyms.insert(sym.to_string(), v);
        }
        let mut fv = feed_head(f);
        fv.insert("symbols".to_string(), Value::Object(fsyms));
        feeds.push(Value::Object(fv));
    }
    top.insert("symbols".to_string(), Value::Object(symbols));
    top.insert("feeds".to_string(), Value::Array(feeds));
    Value::Object(top)
}

/// [`summary_json`] with the `extra` members (e.g. `timing`), written to
/// `w` as it goes: the same bytes as `serde_json::to_writer` of that
/// value, but each symbol's object is made, written and dropped in turn
/// (a channel of 60,000 instruments answers under 120,000 names, twice).
pub fn write_summary_json<W: std::io::Write>(
    w: &mut W,
    cap: &StreamSummary,
    r: &Replay,
    extra: Vec<(String, Value)>,
) -> std::io::Result<()> {
    let mut top = summary_head(cap, r);
    top.extend(extra);
    // Placeholders keep their places in the object's key order.
    top.insert("symbols".to_string(), Value::Null);
    top.insert("feeds".to_string(), Value::Null);
    w.write_all(b"{")?;
    for (i, (k, v)) in top.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b":")?;
        match k.as_str() {
            "symbols" => {
                // Every feed's names, sorted; a name of several feeds
                // shows the first feed's symbol.
                let mut names: Vec<(String, usize, Symbol)> = Vec::new();
                for (fi, f) in r.feeds.iter().enumerate() {
                    names.extend(f.feed.symbols().map(|(sym, _)| (sym.to_string(), fi, sym)));
                }
                names.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                names.dedup_by(|b, a| a.0 == b.0);
                write_symbols(w, names.iter().map(|(n, fi, sym)| (n, &r.feeds[*fi], *sym)))?;
            }
            "feeds" => {
                w.write_all(b"[")?;
                for (fi, f) in r.feeds.iter().enumerate() {
                    if fi > 0 {
                        w.write_all(b",")?;
                    }
                    let mut fv = feed_head(f);
                    fv.insert("symbols".to_string(), Value::Null);
                    w.write_all(b"{")?;
                    for (j, (fk, fval)) in fv.iter().enumerate() {
                        if j > 0 {
                            w.write_all(b",")?;
                        }
                        serde_json::to_writer(&mut *w, fk)?;
                        w.write_all(b":")?;
                        if fk == "symbols" {
                            let mut names: Vec<(String, Symbol)> = f
                                .feed
                                .symbols()
                                .map(|(sym, _)| (sym.to_string(), sym))
                                .collect();
                            names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                            write_symbols(w, names.iter().map(|(n, sym)| (n, f, *sym)))?;
                        } else {
                            serde_json::to_writer(&mut *w, fval)?;
                        }
                    }
                    w.write_all(b"}")?;
                }
                w.write_all(b"]")?;
            }
            _ => serde_json::to_writer(&mut *w, v)?,
        }
    }
    w.write_all(b"}")?;
    Ok(())
}

/// A JSON object of symbols, given in key order, each made and dropped.
fn write_symbols<'a, W: std::io::Write>(
    w: &mut W,
    names: impl Iterator<Item = (&'a String, &'a ReplayFeed, Symbol)>,
) -> std::io::Result<()> {
    w.write_all(b"{")?;
    for (i, (name, f, sym)) in names.enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut *w, name)?;
        w.write_all(b":")?;
        let v = f.feed.symbol_summary(sym).map(|s| symbol_json(&s));
        serde_json::to_writer(&mut *w, &v.unwrap_or(Value::Null))?;
    }
    w.write_all(b"}")
}

/// One feed's members of the summary, but its symbols.
fn feed_head(f: &ReplayFeed) -> Map<String, Value> {
    let c = f.feed.counters();
    let fsessions: Vec<Value> = f.sessions.iter().map(session_json).collect();
    let lines: Vec<Value> = f
        .lines
        .iter()
        .zip(&c.lines)
        .map(|(line, l)| {
            json!({
                "dst": line.dst.to_string(),
                "source": line.source.map(|s| s.to_string()),
                "packets": l.packets,
                "messages": l.messages,
                "duplicate_packets": l.duplicate_packets,
                "invalid_packets": l.invalid_packets,
            })
        })
        .collect();
    let v = json!({
        "name": f.name,
        "mode": mode_name(f.mode),
        "venue": f.venue.name(),
        "lines": lines,
        "packets": c.packets(),
        "messages": c.messages(),
        "invalid_packets": c.invalid_packets,
        "duplicate_packets": c.duplicate_packets(),
        "channel_lost": c.channel_messages_lost,
        "channel_gaps": c.channel_gaps,
        "unknown_messages": c.unknown_messages,
        "invalid_messages": c.invalid_messages,
        "ticks_lost": c.ticks_lost,
        "stale_dropped": c.stale_dropped,
        "seq_anomalies": c.seq_anomalies,
        "seq_resyncs": c.seq_resyncs,
        "snapshots_applied": c.snapshots_applied,
        "snapshots_ignored": c.snapshots_ignored,
        "session_changes": c.session_changes,
        "stale_session_dropped": c.stale_session_dropped,
        "sessions_ended": c.sessions_ended,
        "session_ended": f.feed.session_ended(),
        "symbols_suspect": f.feed.symbols_suspect(),
        "symbols_halted": f.feed.symbols().filter(|(_, s)| s.halted).count(),
        "symbols_quoted": f.feed.symbols().filter(|(_, s)| s.has_quote).count(),
        "unknown_orders": c.unknown_orders,
        "orders_overflow": c.orders_overflow,
        "symbols_overflow": c.symbols_overflow,
        "order_conflicts": c.order_conflicts,
        "locate_conflicts": c.locate_conflicts,
        "live_orders": c.live_orders,
        "book_errors": c.book_errors,
        "instruments_waiting": f.feed.venue_recovery().waiting,
        "recovery_entries_kept": f.feed.venue_recovery().kept_entries,
        "recovery_entries_dropped": f.feed.venue_recovery().kept_dropped,
        "channel_seq_anomalies": c.channel_seq_anomalies,
        "stale_ends_of_session": c.stale_ends_of_session,
        "recovery": recovery_json(f),
        "message_types": message_types_json(f.feed.venue(), f.feed.message_types()),
        "clock_offset_ns": f.feed.clock_offset_ns(),
        "sessions": fsessions,
    });
    match v {
        Value::Object(mut m) => {
            // cboe-pitch (venues.md), beside the others: one json! of
            // them all passes the macro's recursion limit.
            for (k, n) in [
                ("unit_clears", c.unit_clears),
                ("prices_unbookable", c.prices_unbookable),
                ("unsequenced", c.unsequenced),
                ("gap_dropped", c.gap_dropped),
                ("units_not_followed", c.units_not_followed),
            ] {
                m.insert(k.to_string(), json!(n));
            }
            if f.venue == VenueKind::CboePitch {
                // venues.md `cboe-pitch`: per unit, `next`, the session's
                // state and the per-channel counters.
                m.insert("units".to_string(), units_json(f));
            }
            m
        }
        _ => unreachable!("a feed's summary is an object"),
    }
}

/// The summary's top-level members, but `symbols` and `feeds`.
fn summary_head(cap: &StreamSummary, r: &Replay) -> Map<String, Value> {
    let mut totals = [0u64; 9];
    let mut sessions = Vec::new();
    for f in &r.feeds {
        let c = f.feed.counters();
        let vals = [
            c.packets(),
            c.invalid_packets,
            c.duplicate_packets(),
            c.channel_messages_lost,
            c.unknown_messages,
            c.ticks_lost,
            c.stale_dropped,
            c.seq_anomalies,
            f.stale_session_packets,
        ];
        for (t, v) in totals.iter_mut().zip(vals) {
            *t += v;
        }
        sessions.extend(f.sessions.iter().map(session_json));
    }
    let st = &cap.stats;
    let o = &cap.order;
    let binaryfile_json = |b: &crate::capture::stream::BinaryFileSummary| {
        json!({
            "date": b.date.to_string(),
            "session": b.session.to_string(),
            "messages": b.stats.messages,
            "datagrams": b.stats.datagrams,
            "unknown_types": b.stats.unknown_types,
            "first_unknown": b.stats.first_unknown.map(|(m, o, k)| json!({
                "message": m, "offset": o, "type": k,
            })),
            "stamps_backwards": b.stats.backwards,
            "bytes": b.stats.bytes,
        })
    };
    let files: Vec<Value> = cap
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.path.display().to_string(),
                "format": f.format,
                "compression": f.compression.name(),
                "frames": f.stats.frames,
                "datagrams": f.stats.datagrams,
                "filtered_out": f.filtered_out,
                "truncated_tail": f.stats.truncated_tail,
                "sorted_runs": f.runs,
                "out_of_order": f.out_of_order,
                "binaryfile": f.binaryfile.as_ref().map(binaryfile_json),
            })
        })
        .collect();
    let v = json!({
        "capture": capture_names(cap),
        "captures": files,
        "format": cap.format,
        "binaryfile": cap.binaryfile.as_ref().map(binaryfile_json),
        "frames": st.frames,
        "datagrams": st.datagrams,
        "skipped": skipped_json(&st.skipped),
        "skipped_frames": st.skipped.total(),
        "truncated_tail": st.truncated_tail,
        "filtered_out": cap.filtered_out,
        "unmatched": r.unmatched,
        "compression": cap.compression.name(),
        "sorted": cap.was_sorted(),
        "out_of_order": cap.out_of_order,
        "sorted_runs": o.runs,
        "sort": {
            "sources": o.sources,
            "chunked": o.chunked,
            "spilled": o.spill.chunks > 0,
            "spill_chunks": o.spill.chunks,
            "spill_passes": o.spill.passes,
            "spill_bytes": o.spill.bytes_written,
            "memory_bytes": o.memory_bytes,
            "peak_bytes": o.peak_bytes,
        },
        "first_ts": cap.first_ts,
        "last_ts": cap.last_ts,
        "packets": totals[0],
        "invalid_packets": totals[1],
        "duplicate_packets": totals[2],
        "channel_lost": totals[3],
        "unknown_messages": totals[4],
        "ticks_lost": totals[5],
        "stale_dropped": totals[6],
        "seq_anomalies": totals[7],
        "stale_session_packets": totals[8],
        "sessions": sessions,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("the summary is an object"),
    }
}

pub(super) fn ts_str(ts: i64) -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(ts as i128)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| ts.to_string())
}

/// The readable summary: capture, then per feed its lines, sessions,
/// counters and a symbol table.
pub fn summary_text(cap: &StreamSummary, r: &Replay) -> String {
    let st = &cap.stats;
    let mut s = String::new();
    let compression = match cap.compression {
        crate::capture::compress::Compression::None => String::new(),
        c => format!(" ({})", c.name()),
    };
    if let (Some(b), [_]) = (&cap.binaryfile, cap.files.as_slice()) {
        let _ = writeln!(
            s,
            "Nasdaq BinaryFILE {}{compression}: {} of {} (New York), as {} of session {} to {}",
            capture_names(cap),
            crate::text::plural(b.stats.messages, "message"),
            b.date,
            crate::text::plural(b.stats.datagrams, "MoldUDP64 datagram"),
            b.session,
            crate::capture::binaryfile::DESTINATION
        );
        if b.stats.unknown_types > 0 {
            let _ = writeln!(
                s,
                "  {} of a type ITCH 5.0 does not have (passed on)",
                crate::text::plural(b.stats.unknown_types, "message")
            );
        }
    } else {
        let _ = writeln!(
            s,
            "capture {}{compression}: {}, {}, {} skipped",
            capture_names(cap),
            crate::text::plural(st.frames, "frame"),
            crate::text::plural(st.datagrams, "UDP datagram"),
            crate::text::plural(st.skipped.total(), "frame")
        );
    }
    if st.skipped.total() > 0 {
        let parts: Vec<String> = st
            .skipped
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(s, "  skipped: {}", parts.join(", "));
    }
    if st.truncated_tail {
        let _ = writeln!(s, "  the file ends in the middle of a record");
    }
    if let (Some(a), Some(b)) = (cap.first_ts, cap.last_ts) {
        let _ = writeln!(s, "  time {} .. {}", ts_str(a), ts_str(b));
    }
    if cap.filtered_out > 0 {
        let _ = writeln!(s, "  {} datagrams removed by --filter", cap.filtered_out);
    }
    if r.unmatched > 0 {
        let _ = writeln!(s, "  {} datagrams to no configured line", r.unmatched);
    }
    if !cap.was_sorted() {
        let o = &cap.order;
        let _ = writeln!(
            s,
            "  not in time order: {} datagrams stamped earlier than one before them, in {}; replayed in timestamp order{}",
            cap.out_of_order,
            crate::text::plural(o.runs, "sorted run"),
            if o.spill.chunks > 0 {
                format!(
                    " (sorted in {} spilled chunks, {} MiB)",
                    o.spill.chunks,
                    o.spill.bytes_written >> 20
                )
            } else {
                String::new()
            }
        );
    }
    for f in &r.feeds {
        let c = f.feed.counters();
        let _ = writeln!(
            s,
            "\nfeed {} ({}), {} {}",
            f.name,
            feed_kind(f),
            f.lines.len(),
            if f.lines.len() == 1 { "line" } else { "lines" }
        );
        for (line, l) in f.lines.iter().zip(&c.lines) {
            let _ = writeln!(
                s,
                "  line {}{}: {} packets, {} messages, {} duplicate, {} invalid",
                line.dst,
                line.source.map_or(String::new(), |s| format!(" from {s}")),
                l.packets,
                l.messages,
                l.duplicate_packets,
                l.invalid_packets
            );
        }
        for ss in &f.sessions {
            let _ = writeln!(
                s,
                "  session {}: {} packets ({} data, {} heartbeats{}), sequences {}..{}",
                ss.id,
                ss.packets,
                ss.data_packets,
                ss.heartbeats,
                if ss.end_of_session { ", ended" } else { "" },
                ss.first_sequence,
                ss.next_sequence
            );
        }
        let _ = writeln!(
            s,
            "  packets {}, invalid {}, duplicate {}, channel lost {} ({}), unknown messages {}, invalid messages {}",
            c.packets(),
            c.invalid_packets,
            c.duplicate_packets(),
            c.channel_messages_lost,
            crate::text::plural(c.channel_gaps, "gap"),
            c.unknown_messages,
            c.invalid_messages
        );
        let r = &c.recovery;
        if c.channel_seq_anomalies + c.stale_ends_of_session + r.holes_opened > 0 {
            let _ = writeln!(
                s,
                "  channel jumps not believed {}, stale ends of session {}, holes {} ({} filled, {} lost), messages re-requested {}",
                c.channel_seq_anomalies,
                c.stale_ends_of_session,
                r.holes_opened,
                r.holes_filled,
                r.holes_lost,
                r.messages_recovered
            );
        }
        let _ = writeln!(
            s,
            "  ticks lost {}, stale dropped {}, seq anomalies {}, resyncs {}, snapshots applied {} ignored {}, session changes {}, stale-session packets {}{}",
            c.ticks_lost,
            c.stale_dropped,
            c.seq_anomalies,
            c.seq_resyncs,
            c.snapshots_applied,
            c.snapshots_ignored,
            c.session_changes,
            c.stale_session_dropped,
            if f.feed.session_ended() { ", session ended" } else { "" }
        );
        if f.venue == VenueKind::NasdaqItch {
            let _ = writeln!(
                s,
                "  unknown orders {}, orders overflow {}, order conflicts {}, live orders {}",
                c.unknown_orders, c.orders_overflow, c.order_conflicts, c.live_orders
            );
        }
        if f.venue == VenueKind::CboePitch {
            let _ = writeln!(
                s,
                "  unknown orders {}, orders overflow {}, book errors {}, unit clears {}, live orders {}",
                c.unknown_orders, c.orders_overflow, c.book_errors, c.unit_clears, c.live_orders
            );
            let _ = writeln!(
                s,
                "  unsequenced {}, gap-line dropped {}, other units (not followed) {}, prices unbookable {}",
                c.unsequenced, c.gap_dropped, c.units_not_followed, c.prices_unbookable
            );
            for r in f.feed.channel_reports() {
                let session = r.session.map_or("-".to_string(), |s| s.to_string());
                let _ = writeln!(
                    s,
                    "  unit {}: session {session}{}, next {}, channel gaps {} ({} lost), session changes {}, stale-session dropped {}, holes {} (filled {}, lost {})",
                    r.channel,
                    if r.ended { " (ended)" } else { "" },
                    r.next,
                    r.counters.channel_gaps,
                    r.counters.channel_messages_lost,
                    r.counters.session_changes,
                    r.counters.stale_session_dropped,
                    r.holes.opened,
                    r.holes.filled,
                    r.holes.lost,
                );
            }
        }
        if c.symbols_overflow > 0 {
            let _ = writeln!(
                s,
                "  symbols overflow {} (the table of max_symbols was full)",
                c.symbols_overflow
            );
        }
        if f.venue == VenueKind::CmeMdp3 {
            let r = f.feed.venue_recovery();
            let _ = writeln!(
                s,
                "  book errors {}, instruments waiting for a snapshot {}, entries kept {} (dropped {})",
                c.book_errors, r.waiting, r.kept_entries, r.kept_dropped
            );
        }
        if let Some(types) = f.feed.message_types() {
            let parts: Vec<String> = types
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(b, n)| format!("{} {n}", f.feed.venue().message_type_label(b as u8)))
                .collect();
            let _ = writeln!(s, "  message types: {}", parts.join(", "));
        }
        let n = f.feed.symbol_count();
        let halted = f.feed.symbols().filter(|(_, s)| s.halted).count();
        if f.venue.is_venue_feed() {
            let _ = writeln!(
                s,
                "  {} symbols, {} suspect, {} halted",
                n,
                f.feed.symbols_suspect(),
                halted
            );
        } else {
            let _ = writeln!(s, "  {} symbols, {} suspect", n, f.feed.symbols_suspect());
        }
        if n > 0 {
            let mut syms: Vec<_> = f.feed.symbols().collect();
            syms.sort_by_key(|(sym, _)| *sym);
            // As wide as the longest symbol (up to 20 characters).
            let w = syms
                .iter()
                .map(|(sym, _)| sym.to_string().len())
                .max()
                .unwrap_or(0)
                .max(8);
            let _ = writeln!(
                s,
                "  {:<w$} {:>12} {:>20} {:>20} {:>10} {:>8}  suspect",
                "symbol", "seq", "bid", "ask", "ticks_lost", "stale"
            );
            for (sym, sm) in syms {
                let _ = writeln!(
                    s,
                    "  {:<w$} {:>12} {:>20} {:>20} {:>10} {:>8}  {}{}",
                    sym.to_string(),
                    sm.shown_seq.map_or("-".to_string(), |v| v.to_string()),
                    side_str(sm.bid).unwrap_or_else(|| "-".into()),
                    side_str(sm.ask).unwrap_or_else(|| "-".into()),
                    sm.ticks_lost,
                    sm.stale_dropped,
                    sm.suspect.map_or("-", |c| c.as_str()),
                    if sm.halted { "  halted" } else { "" }
                );
            }
        }
    }
    s
}

/// R6's counters of one feed, for `--json`.
/// Each unit of a `cboe-pitch` feed (`Feed::channel_reports`).
fn units_json(f: &ReplayFeed) -> Value {
    let units: Vec<Value> = f
        .feed
        .channel_reports()
        .iter()
        .map(|r| {
            json!({
                "unit": r.channel,
                "session": r.session.map(|s| s.to_string()),
                "next_sequence": r.next,
                "ended": r.ended,
                "channel_lost": r.counters.channel_messages_lost,
                "channel_gaps": r.counters.channel_gaps,
                "session_changes": r.counters.session_changes,
                "stale_session_dropped": r.counters.stale_session_dropped,
                "sessions_ended": r.counters.sessions_ended,
                "holes_opened": r.holes.opened,
                "holes_filled": r.holes.filled,
                "holes_lost": r.holes.lost,
            })
        })
        .collect();
    Value::Array(units)
}

fn recovery_json(f: &ReplayFeed) -> serde_json::Value {
    let c = f.feed.counters();
    json!({
            "holes_opened": c.recovery.holes_opened,
            "holes_filled": c.recovery.holes_filled,
            "holes_lost": c.recovery.holes_lost,
            "hold_overflows": c.recovery.hold_overflows,
            "messages_recovered": c.recovery.messages_recovered,
            "answers_received": c.recovery.answers_received,
            "answers_wrong_session": c.recovery.answers_wrong_session,
            "answers_not_data": c.recovery.answers_not_data,
            "answers_malformed": c.recovery.answers_malformed,
            "conflicts": c.recovery.conflicts,
            "conflict_copies_dropped": c.recovery.conflict_copies_dropped,
            "holes_open_at_end": f.feed.recovering(),
    })
}
