//! Draws the timeline model with plotters: one picture of four panels
//! (verdict per symbol, feed events, packets per second per line, clock
//! offset) and a legend, as SVG (plotters' SVG backend) or PNG (its bitmap
//! backend); the HTML page embeds the SVG with a summary and the legend
//! as HTML tables, nothing loaded from elsewhere.
//!
//! Text: plotters' `ab_glyph` font support with DejaVu Sans compiled into
//! the binary (the `dejavu` crate), so a PNG needs no system font and no
//! fontconfig; the SVG names the font `sans-serif` for the viewer.

use std::fmt::Write as _;
use std::sync::Once;

use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordu32};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::model::{Category, Event, Grid, Row, Timeline, CATEGORY_COUNT, EVENT_COUNT};

/// A bucket's middle (s) and its least and greatest clock offset (ms).
type OffsetPoint = (f64, f64, f64);

/// What the picture says about the replay besides the model.
#[derive(Clone, Debug)]
pub struct Meta {
    pub capture: String,
    /// Symbols the feeds knew at the end (all feeds).
    pub symbols_known: u64,
    /// Lines of all feeds.
    pub lines_total: usize,
    pub datagrams: u64,
}

const WIDTH: u32 = 1400;
const FONT: &str = "sans-serif";

/// The colour of each category (`Category::ALL` order).
pub const CATEGORY_COLOURS: [(u8, u8, u8); CATEGORY_COUNT] = [
    (46, 160, 67),   // ok: green
    (200, 200, 200), // no data: light grey
    (235, 200, 40),  // stale at source: yellow
    (245, 130, 20),  // stale quote: orange
    (128, 60, 175),  // halted: purple
    (110, 175, 235), // recovering: light blue
    (0, 150, 150),   // session change: teal
    (150, 100, 50),  // no snapshot: brown
    (230, 100, 175), // seq anomaly: pink
    (220, 40, 40),   // gap: red
    (140, 0, 0),     // channel gap: dark red
    (50, 50, 50),    // session ended: near black
];

/// The colour of each event kind (`Event::ALL` order).
const EVENT_COLOURS: [(u8, u8, u8); EVENT_COUNT] = [
    (140, 0, 0),
    (220, 40, 40),
    (110, 175, 235),
    (46, 160, 67),
    (245, 130, 20),
    (30, 90, 200),
    (150, 100, 50),
    (0, 150, 150),
    (50, 50, 50),
];

/// What each category means, for the legend.
pub fn meaning(c: Category) -> &'static str {
    match c {
        Category::Ok => "OK: the gate would have answered OK",
        Category::NoData => "no data: the symbol was not known yet, or had no quote",
        Category::StaleAtSource => {
            "stale at source: the quote's source time older than source_max_age_ms"
        }
        Category::StaleQuote => "stale: silent longer than stale_ms",
        Category::Halted => "halted: the venue said the symbol was not trading",
        Category::Recovering => "suspect, recovering: the feed had an open hole",
        Category::SessionChange => "suspect, session change: the provider restarted",
        Category::NoSnapshot => "suspect, no snapshot: joined late, books may miss orders",
        Category::SeqAnomaly => "suspect, seq anomaly: an unbelievable sequence jump",
        Category::Gap => "suspect, gap: the symbol's own sequence had a gap",
        Category::ChannelGap => {
            "suspect, channel gap: messages lost on the channel, not verified since"
        }
        Category::SessionEnded => "suspect, session ended: the provider's session ended",
    }
}

fn rgb(c: (u8, u8, u8)) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

fn colour(c: Category) -> RGBColor {
    rgb(CATEGORY_COLOURS[c as usize])
}

/// `#rrggbb` of a category, as the SVG writes it.
pub fn hex(c: Category) -> String {
    let (r, g, b) = CATEGORY_COLOURS[c as usize];
    format!("#{r:02X}{g:02X}{b:02X}")
}

static FONTS: Once = Once::new();

fn register_fonts() {
    FONTS.call_once(|| {
        // The bytes are DejaVu Sans as shipped: they parse.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the timeline: {e:?}")
}

/// UTC time of day of `ts` (ns), with milliseconds when `fine`.
fn clock_str(ts: i64, fine: bool) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(ts as i128) {
        Ok(t) if fine => format!(
            "{:02}:{:02}:{:02}.{:03}",
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Ok(t) => format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
        Err(_) => ts.to_string(),
    }
}

/// Full UTC date and time of `ts` (ns).
pub fn date_str(ts: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(ts as i128) {
        Ok(t) => format!(
            "{}-{:02}-{:02} {} UTC",
            t.year(),
            t.month() as u8,
            t.day(),
            clock_str(ts, true)
        ),
        Err(_) => ts.to_string(),
    }
}

fn width_str(ns: i64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

fn event_totals(tl: &Timeline) -> [u64; EVENT_COUNT] {
    let mut t = [0u64; EVENT_COUNT];
    for f in &tl.feeds {
        for b in &f.events {
            for (x, y) in t.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
    t
}

/// The sentence of what the picture left out (for stderr too).
pub fn left_out(tl: &Timeline, meta: &Meta) -> String {
    let drawn = tl.drawn();
    let mut s = format!("timeline: {} symbols drawn", drawn.len());
    if tl.chosen() {
        let _ = write!(s, " (chosen with --symbol)");
    } else {
        let _ = write!(s, " (the busiest by updates)");
    }
    let _ = write!(
        s,
        " of {} known to the feeds, {} not drawn",
        meta.symbols_known,
        meta.symbols_known.saturating_sub(drawn.len() as u64)
    );
    let late = drawn.iter().filter(|r| r.since != i64::MIN).count();
    if late > 0 && !tl.chosen() {
        let _ = write!(
            s,
            "; {late} of them tracked only from their first update after the busiest were being counted (earlier: not tracked)"
        );
    }
    if meta.lines_total > tl.lines.len() {
        let _ = write!(
            s,
            "; {} lines beyond the first {} summed as \"other lines\"",
            meta.lines_total - tl.lines.len(),
            tl.lines.len()
        );
    }
    if tl.clamped > 0 {
        let _ = write!(
            s,
            "; {} moments earlier than the one before counted at the later one",
            tl.clamped
        );
    }
    if let Some(g) = tl.grid() {
        let _ = write!(s, "; {} buckets of {}", g.len, width_str(g.width));
    }
    s
}

/// The row's first bucket start in which each category was seen.
fn first_seen(row: &Row, g: &Grid) -> Vec<(Category, i64, usize)> {
    let mut out = Vec::new();
    for c in Category::ALL {
        let mut first = None;
        let mut n = 0;
        for (i, cell) in row.cells.iter().enumerate() {
            if cell.worst() == Some(c) {
                n += 1;
            }
            if first.is_none() && cell.seen(c) {
                first = Some(i);
            }
        }
        if let Some(i) = first {
            out.push((c, g.start(i), n));
        }
    }
    out
}

/// Heights of the panels for this model.
fn layout(tl: &Timeline) -> (u32, u32, u32, u32, u32) {
    let rows = tl.drawn().len().max(1) as u32;
    let verdicts = 70 + 22 * rows;
    let kinds = event_totals(tl).iter().filter(|&&n| n > 0).count().max(1) as u32;
    let events = 90 + 24 * kinds;
    let packets = 230;
    let offset = 230;
    let legend = 24 * (CATEGORY_COUNT as u32).div_ceil(4) + 20;
    (verdicts, events, packets, offset, legend)
}

fn height(tl: &Timeline) -> u32 {
    let (a, b, c, d, e) = layout(tl);
    40 + a + b + c + d + e
}

/// The whole picture on `root`.
/// A chart of one row per label (the first label on top) over the
/// capture's span, its axes drawn.
fn rows_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    labels: &[String],
    label_size: u32,
    span_s: f64,
    xfmt: &dyn Fn(&f64) -> String,
) -> anyhow::Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordu32>>>>
{
    let n = labels.len().max(1) as u32;
    // Room for the longest label (CME names run to 20 characters): about
    // 0.6 em a character, never less than an 8-character symbol takes.
    let longest = labels.iter().map(String::len).max().unwrap_or(0) as u32;
    let label_area = (longest * label_size * 6 / 10 + 30).max(110);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 16).into_font())
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(label_area)
        .build_cartesian_2d(0f64..span_s, (0u32..n).into_segmented())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(12)
        .x_label_formatter(xfmt)
        .y_labels(n as usize)
        .y_label_formatter(&|v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => (n - 1)
                .checked_sub(*i)
                .and_then(|k| labels.get(k as usize))
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        })
        .label_style((FONT, label_size).into_font())
        .draw()
        .map_err(err)?;
    Ok(chart)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    tl: &Timeline,
    meta: &Meta,
) -> anyhow::Result<()> {
    register_fonts();
    root.fill(&WHITE).map_err(err)?;
    let Some(g) = tl.grid().copied() else {
        root.draw(&Text::new(
            "no datagram was replayed: nothing to draw",
            (20, 20),
            (FONT, 18).into_font(),
        ))
        .map_err(err)?;
        return Ok(());
    };
    let span_s = (g.len as f64 * g.width as f64 / 1e9).max(1e-9);
    let fine = span_s < 60.0;
    let xfmt = |x: &f64| clock_str(g.origin + (*x * 1e9) as i64, fine);
    let (hv, he, hp, ho, _) = layout(tl);
    let (title, rest) = root.split_vertically(40);
    title
        .draw(&Text::new(
            format!(
                "{}: {} to {} (UTC), buckets of {}",
                meta.capture,
                date_str(g.origin),
                clock_str(g.end(g.len - 1), true),
                width_str(g.width)
            ),
            (10, 12),
            (FONT, 18).into_font().style(FontStyle::Bold),
        ))
        .map_err(err)?;
    let (verdicts, rest) = rest.split_vertically(hv);
    let (events, rest) = rest.split_vertically(he);
    let (packets, rest) = rest.split_vertically(hp);
    let (offset, legend) = rest.split_vertically(ho);

    // Verdicts: one row per symbol, each bucket its worst verdict.
    let drawn = tl.drawn();
    let n = drawn.len().max(1) as u32;
    let names: Vec<String> = drawn.iter().map(|r| r.symbol.to_string()).collect();
    let mut chart = rows_chart(
        &verdicts,
        "verdict per symbol (worst in each bucket)",
        &names,
        13,
        span_s,
        &xfmt,
    )?;
    let bucket_s = g.width as f64 / 1e9;
    for (k, row) in drawn.iter().enumerate() {
        let y = n - 1 - k as u32;
        // Runs of equal buckets as one rectangle.
        let mut runs: Vec<(usize, usize, Category)> = Vec::new();
        for (i, cell) in row.cells.iter().enumerate() {
            let Some(c) = cell.worst() else { continue };
            match runs.last_mut() {
                Some(last) if last.1 == i && last.2 == c => last.1 = i + 1,
                _ => runs.push((i, i + 1, c)),
            }
        }
        chart
            .draw_series(runs.into_iter().map(|(a, b, c)| {
                Rectangle::new(
                    [
                        (a as f64 * bucket_s, SegmentValue::Exact(y)),
                        (b as f64 * bucket_s, SegmentValue::Exact(y + 1)),
                    ],
                    colour(c).filled(),
                )
            }))
            .map_err(err)?;
    }

    // Events, all feeds: a row per kind that happened.
    let totals = event_totals(tl);
    let kinds: Vec<usize> = (0..EVENT_COUNT).filter(|&k| totals[k] > 0).collect();
    let ne = kinds.len().max(1) as u32;
    let labels: Vec<String> = kinds
        .iter()
        .map(|&k| format!("{} {}", totals[k], Event::ALL[k].name()))
        .collect();
    let mut chart = rows_chart(
        &events,
        if kinds.is_empty() {
            "feed events: none (no gap, hole, re-request, snapshot or session change)"
        } else {
            "feed events (count in the whole capture)"
        },
        &labels,
        12,
        span_s,
        &xfmt,
    )?;
    for (j, &k) in kinds.iter().enumerate() {
        let y = ne - 1 - j as u32;
        let mut per_bucket = vec![0u64; g.len];
        for f in &tl.feeds {
            for (i, b) in f.events.iter().enumerate() {
                if let Some(p) = per_bucket.get_mut(i) {
                    *p += b[k];
                }
            }
        }
        let c = rgb(EVENT_COLOURS[k]);
        chart
            .draw_series(
                per_bucket
                    .iter()
                    .enumerate()
                    .filter(|(_, &v)| v > 0)
                    .map(|(i, _)| {
                        // at least 2 px wide whatever the bucket count
                        let w = bucket_s.max(span_s / 700.0);
                        Rectangle::new(
                            [
                                (i as f64 * bucket_s, SegmentValue::Exact(y)),
                                (i as f64 * bucket_s + w, SegmentValue::Exact(y + 1)),
                            ],
                            c.filled(),
                        )
                    }),
            )
            .map_err(err)?;
    }

    // Packets per second per line.
    let mut series: Vec<(String, &Vec<u64>)> = tl
        .lines
        .iter()
        .map(|l| (l.name.clone(), &l.packets))
        .collect();
    if tl.other_lines.iter().any(|&p| p > 0) {
        series.push(("other lines".to_string(), &tl.other_lines));
    }
    let peak = series
        .iter()
        .flat_map(|(_, v)| v.iter())
        .copied()
        .max()
        .unwrap_or(0) as f64
        / bucket_s;
    let mut chart = ChartBuilder::on(&packets)
        .caption("packets per second per line", (FONT, 16).into_font())
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..span_s, 0f64..(peak * 1.1).max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&xfmt)
        .y_desc("packets/s")
        .label_style((FONT, 12).into_font())
        .draw()
        .map_err(err)?;
    for (i, (name, v)) in series.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                (0..g.len).map(|b| {
                    (
                        (b as f64 + 0.5) * bucket_s,
                        v.get(b).copied().unwrap_or(0) as f64 / bucket_s,
                    )
                }),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FONT, 12).into_font())
            .draw()
            .map_err(err)?;
    }

    // Clock offset per feed: its least and greatest in each bucket.
    let points: Vec<(usize, Vec<OffsetPoint>)> = tl
        .feeds
        .iter()
        .enumerate()
        .map(|(fi, f)| {
            let p = f
                .offset
                .iter()
                .enumerate()
                .filter(|(_, o)| o.0 <= o.1)
                .map(|(b, o)| {
                    (
                        (b as f64 + 0.5) * bucket_s,
                        o.0 as f64 / 1e6,
                        o.1 as f64 / 1e6,
                    )
                })
                .collect();
            (fi, p)
        })
        .collect();
    let (lo, hi) = points
        .iter()
        .flat_map(|(_, p)| p.iter())
        .fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.2))
        });
    let (lo, hi) = if lo > hi { (-1.0, 1.0) } else { (lo, hi) };
    let pad = ((hi - lo) * 0.1).max(0.5);
    let mut chart = ChartBuilder::on(&offset)
        .caption(
            "provider clock offset (capture time minus source time), ms: least and greatest per bucket",
            (FONT, 16).into_font(),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..span_s, (lo - pad)..(hi + pad))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&xfmt)
        .y_desc("ms")
        .label_style((FONT, 12).into_font())
        .draw()
        .map_err(err)?;
    for (fi, p) in &points {
        let c = Palette99::pick(*fi).to_rgba();
        chart
            .draw_series(LineSeries::new(
                p.iter().map(|q| (q.0, q.2)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("{} greatest", tl.feeds[*fi].name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        let c2 = c.mix(0.5);
        chart
            .draw_series(LineSeries::new(
                p.iter().map(|q| (q.0, q.1)),
                c2.stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("{} least", tl.feeds[*fi].name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c2.stroke_width(1)));
    }
    if !points.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FONT, 12).into_font())
            .draw()
            .map_err(err)?;
    }

    // Legend of the verdict colours.
    let cols = 4usize;
    let cw = (WIDTH as i32 - 40) / cols as i32;
    for (i, c) in Category::ALL.iter().enumerate() {
        let x = 20 + (i % cols) as i32 * cw;
        let y = 10 + (i / cols) as i32 * 24;
        legend
            .draw(&Rectangle::new(
                [(x, y), (x + 16, y + 16)],
                colour(*c).filled(),
            ))
            .map_err(err)?;
        legend
            .draw(&Rectangle::new(
                [(x, y), (x + 16, y + 16)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        legend
            .draw(&Text::new(
                c.name().to_string(),
                (x + 22, y + 2),
                (FONT, 13).into_font(),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The picture as an SVG document.
pub fn svg(tl: &Timeline, meta: &Meta) -> anyhow::Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, height(tl))).into_drawing_area();
        draw(&root, tl, meta)?;
    }
    Ok(s)
}

/// The picture as a PNG file's bytes.
pub fn png(tl: &Timeline, meta: &Meta) -> anyhow::Result<Vec<u8>> {
    let (w, h) = (WIDTH, height(tl));
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, tl, meta)?;
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()
        .and_then(|mut wr| wr.write_image_data(&rgb))
        .map_err(|e| anyhow::anyhow!("encoding the timeline as PNG: {e}"))?;
    Ok(out)
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// A self-contained HTML page: summary, legend, the SVG inline, and per
/// symbol where each verdict was first seen.
pub fn html(tl: &Timeline, meta: &Meta) -> anyhow::Result<String> {
    let svg = svg(tl, meta)?;
    // The SVG's own XML declaration does not belong inside HTML.
    let svg = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => &svg[..],
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tickgate timeline: {}</title>\n<style>\n\
body {{ font-family: sans-serif; margin: 16px; color: #222; }}\n\
table {{ border-collapse: collapse; margin: 8px 0 16px; }}\n\
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; font-size: 13px; }}\n\
.sw {{ display: inline-block; width: 14px; height: 14px; border: 1px solid #000; vertical-align: middle; }}\n\
.note {{ color: #733; }}\n\
</style>\n</head>\n<body>\n",
        esc(&meta.capture)
    );
    let _ = write!(
        h,
        "<h1>tickgate replay timeline</h1>\n<table class=\"summary\">\n<tr><th>capture</th><td>{}</td></tr>\n<tr><th>datagrams replayed</th><td>{}</td></tr>\n",
        esc(&meta.capture),
        meta.datagrams
    );
    if let Some(g) = tl.grid() {
        let _ = write!(
            h,
            "<tr><th>time</th><td>{} to {}</td></tr>\n<tr><th>buckets</th><td>{} of {}</td></tr>\n",
            date_str(g.origin),
            date_str(g.end(g.len - 1)),
            g.len,
            width_str(g.width)
        );
    }
    let _ = write!(
        h,
        "<tr><th>symbols</th><td>{} drawn of {} known to the feeds ({} updates counted)</td></tr>\n\
<tr><th>left out</th><td class=\"note\">{}</td></tr>\n</table>\n",
        tl.drawn().len(),
        meta.symbols_known,
        tl.updates,
        esc(&left_out(tl, meta))
    );
    h.push_str("<h2>Legend</h2>\n<table class=\"legend\">\n<tr><th></th><th>reason</th><th>meaning</th></tr>\n");
    for c in Category::ALL {
        let _ = writeln!(
            h,
            "<tr><td><span class=\"sw\" style=\"background:{}\"></span></td><td>{}</td><td>{}</td></tr>",
            hex(c),
            c.name(),
            esc(meaning(c))
        );
    }
    h.push_str(
        "<tr><td><span class=\"sw\" style=\"background:#FFFFFF\"></span></td><td>not tracked</td><td>the symbol was not among those counted then</td></tr>\n</table>\n\
<p>Each bucket shows the worst verdict the gate would have given during it, at the configured thresholds (worst first: session_ended, channel_gap, gap, seq_anomaly, no_snapshot, session_change, recovering, halted, stale_quote, stale_at_source, no_data, ok).</p>\n",
    );
    h.push_str("<div class=\"chart\">\n");
    h.push_str(svg);
    h.push_str("\n</div>\n<h2>Symbols</h2>\n<table class=\"symbols\">\n<tr><th>symbol</th><th>updates</th><th>tracked from</th><th>verdicts seen (first seen, buckets where worst)</th></tr>\n");
    if let Some(g) = tl.grid() {
        for row in tl.drawn() {
            let seen: Vec<String> = first_seen(row, g)
                .into_iter()
                .map(|(c, t, n)| {
                    format!(
                        "<span class=\"sw\" style=\"background:{}\"></span> {} from {} ({})",
                        hex(c),
                        c.name(),
                        clock_str(t, true),
                        n
                    )
                })
                .collect();
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td></tr>",
                esc(&row.symbol.to_string()),
                row.count,
                if row.error > 0 {
                    format!(" (at most {} over)", row.error)
                } else {
                    String::new()
                },
                if row.since == i64::MIN {
                    "the start".to_string()
                } else {
                    clock_str(row.since, true)
                },
                seen.join("<br>")
            );
        }
    }
    h.push_str("</table>\n<h2>Feed events</h2>\n<table class=\"events\">\n<tr><th>feed</th>");
    for e in Event::ALL {
        let _ = write!(h, "<th>{}</th>", e.name());
    }
    h.push_str("</tr>\n");
    for f in &tl.feeds {
        let _ = write!(h, "<tr><td>{}</td>", esc(&f.name));
        for k in 0..EVENT_COUNT {
            let n: u64 = f.events.iter().map(|b| b[k]).sum();
            let _ = write!(h, "<td>{n}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n</body>\n</html>\n");
    Ok(h)
}
