//! Events of the reliable lane, their validation, and the per-batch answer.
//!
//! Sans-I/O: parsing takes text or a `serde_json::Value` and returns values;
//! no clocks, no database. Money and quantities are `rust_decimal::Decimal`
//! parsed from JSON *strings*; a JSON number is rejected, never rounded.

use std::fmt;

use rust_decimal::Decimal;
use serde_json::{Map, Value};

/// Longest accepted identifier (event id, deal id, account, symbol).
pub const MAX_ID_LEN: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Fill,
    Bust,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fill => "FILL",
            Kind::Bust => "BUST",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "FILL" => Some(Kind::Fill),
            "BUST" => Some(Kind::Bust),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Buy => "BUY",
            Side::Sell => "SELL",
        }
    }
    pub fn parse(s: &str) -> Option<Side> {
        match s {
            "BUY" => Some(Side::Buy),
            "SELL" => Some(Side::Sell),
            _ => None,
        }
    }
    /// +1 for BUY, -1 for SELL.
    pub fn sign(self) -> Decimal {
        match self {
            Side::Buy => Decimal::ONE,
            Side::Sell => Decimal::NEGATIVE_ONE,
        }
    }
}

/// A validated FILL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fill {
    pub event_id: String,
    pub deal_id: String,
    pub account: String,
    pub symbol: String,
    pub side: Side,
    /// Strictly positive.
    pub qty: Decimal,
    /// Strictly positive.
    pub price: Decimal,
    /// Execution time, Unix nanoseconds.
    pub exec_time: i64,
}

/// A validated BUST: cancels the FILL with the same `deal_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bust {
    pub event_id: String,
    pub deal_id: String,
    pub account: String,
    pub exec_time: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Fill(Fill),
    Bust(Bust),
}

impl Event {
    pub fn kind(&self) -> Kind {
        match self {
            Event::Fill(_) => Kind::Fill,
            Event::Bust(_) => Kind::Bust,
        }
    }
    pub fn event_id(&self) -> &str {
        match self {
            Event::Fill(f) => &f.event_id,
            Event::Bust(b) => &b.event_id,
        }
    }
    pub fn deal_id(&self) -> &str {
        match self {
            Event::Fill(f) => &f.deal_id,
            Event::Bust(b) => &b.deal_id,
        }
    }
    pub fn account(&self) -> &str {
        match self {
            Event::Fill(f) => &f.account,
            Event::Bust(b) => &b.account,
        }
    }
    /// F2: the key of the deal row this event belongs to, `(account,
    /// deal_id)`: the two sides of one execution may both be the firm's,
    /// under one deal id, so a deal id alone names no row.
    pub fn deal_key(&self) -> (&str, &str) {
        (self.account(), self.deal_id())
    }

    /// F2b: the hash of the event's content, every field of it (kind,
    /// ids, account, and for a FILL symbol, side, quantity and price as
    /// their decimal text, execution time in nanoseconds): hex of the
    /// first 16 bytes of SHA-256 over the fields separated by NUL (no
    /// field can hold a control character). A repeat of an id is a
    /// duplicate only if this is the same.
    pub fn content_hash(&self) -> String {
        hex::encode(self.content_digest())
    }

    /// F2b: [`Event::content_hash`] as its 16 bytes, not their hex text:
    /// what the SQLite store keeps (schema version 6) and compares.
    pub fn content_digest(&self) -> ContentDigest {
        match self {
            Event::Fill(f) => f.content_digest(),
            Event::Bust(b) => b.content_digest(),
        }
    }
}

impl Event {
    /// Whether `other` has exactly this event's fields, decimals with the
    /// same digits and scale (not just the same value: `1.1` and `1.10`
    /// are different content): then the content hashes are the same
    /// without computing them. `false` says nothing; compare
    /// [`Event::content_digest`]s.
    pub fn identical_to(&self, other: &Event) -> bool {
        match (self, other) {
            (Event::Fill(a), Event::Fill(b)) => {
                // Every field named: a field added to `Fill` (and to its
                // hash) must be added here too, or this does not compile.
                let Fill {
                    event_id,
                    deal_id,
                    account,
                    symbol,
                    side,
                    qty,
                    price,
                    exec_time,
                } = a;
                *event_id == b.event_id
                    && *deal_id == b.deal_id
                    && *account == b.account
                    && *symbol == b.symbol
                    && *side == b.side
                    && qty.serialize() == b.qty.serialize()
                    && price.serialize() == b.price.serialize()
                    && *exec_time == b.exec_time
            }
            (Event::Bust(a), Event::Bust(b)) => a == b,
            _ => false,
        }
    }
}

/// F2b: the first 16 bytes of the SHA-256 of an event's fields
/// ([`Event::content_hash`] is their lower-case hex).
pub type ContentDigest = [u8; 16];

/// F2b: SHA-256 over fields each followed by a NUL, fed in place: a
/// decimal or an integer is written into the hasher as its text, with no
/// string of its own.
struct FieldHasher(sha2::Sha256);

impl FieldHasher {
    fn new() -> FieldHasher {
        use sha2::Digest;
        FieldHasher(sha2::Sha256::new())
    }

    fn text(&mut self, field: &str) -> &mut Self {
        use sha2::Digest;
        self.0.update(field.as_bytes());
        self.0.update([0u8]);
        self
    }

    /// A decimal's text as a field (the same bytes as
    /// `&d.to_string()`; [`super::exact::text`]).
    fn decimal(&mut self, d: &rust_decimal::Decimal) -> &mut Self {
        let mut buf = [0u8; 48];
        self.text(super::exact::text(d, &mut buf))
    }

    /// `v`'s `Display` text as a field (the same bytes as `&v.to_string()`).
    fn display(&mut self, v: &dyn std::fmt::Display) -> &mut Self {
        use std::fmt::Write as _;
        struct Feed<'a>(&'a mut sha2::Sha256);
        impl std::fmt::Write for Feed<'_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                sha2::Digest::update(self.0, s.as_bytes());
                Ok(())
            }
        }
        // Writing into a hasher cannot fail.
        let _ = write!(Feed(&mut self.0), "{v}");
        self.text("")
    }

    /// The first 16 bytes of the digest.
    fn finish(&mut self) -> ContentDigest {
        use sha2::Digest;
        let digest = std::mem::take(&mut self.0).finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        out
    }
}

impl Fill {
    /// F2b: see [`Event::content_hash`].
    pub fn content_hash(&self) -> String {
        hex::encode(self.content_digest())
    }

    /// F2b: see [`Event::content_digest`].
    pub fn content_digest(&self) -> ContentDigest {
        FieldHasher::new()
            .text("FILL")
            .text(&self.event_id)
            .text(&self.deal_id)
            .text(&self.account)
            .text(&self.symbol)
            .text(self.side.as_str())
            .decimal(&self.qty)
            .decimal(&self.price)
            .display(&self.exec_time)
            .finish()
    }
}

impl Bust {
    /// F2b: see [`Event::content_hash`].
    pub fn content_hash(&self) -> String {
        hex::encode(self.content_digest())
    }

    /// F2b: see [`Event::content_digest`].
    pub fn content_digest(&self) -> ContentDigest {
        FieldHasher::new()
            .text("BUST")
            .text(&self.event_id)
            .text(&self.deal_id)
            .text(&self.account)
            .display(&self.exec_time)
            .finish()
    }
}

/// An input that failed validation. `kind`/`event_id` are filled in when
/// they could be read, so the answer can name the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub kind: Option<String>,
    pub event_id: Option<String>,
    pub reason: String,
}

/// One input position of a batch: a valid event or the reason it is not.
pub type Parsed = Result<Event, Invalid>;

/// Parse one JSON-lines line.
pub fn parse_line(line: &str) -> Parsed {
    match serde_json::from_str::<Value>(line) {
        Ok(v) => parse_value(&v),
        Err(e) => Err(Invalid {
            kind: None,
            event_id: None,
            reason: format!("malformed JSON: {e}"),
        }),
    }
}

/// Validate one event object.
pub fn parse_value(v: &Value) -> Parsed {
    let Some(obj) = v.as_object() else {
        return Err(Invalid {
            kind: None,
            event_id: None,
            reason: format!("event must be a JSON object, got {}", json_type(v)),
        });
    };
    let kind_raw = obj.get("kind").and_then(Value::as_str).map(str::to_owned);
    let id_raw = obj
        .get("event_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let fail = |reason: String| Invalid {
        kind: kind_raw.clone(),
        event_id: id_raw.clone(),
        reason,
    };
    parse_object(obj).map_err(fail)
}

fn parse_object(obj: &Map<String, Value>) -> Result<Event, String> {
    let kind_s = field_str(obj, "kind")?;
    let kind = Kind::parse(kind_s)
        .ok_or_else(|| format!("unknown kind {kind_s:?} (expected \"FILL\" or \"BUST\")"))?;
    let event_id = field_id(obj, "event_id")?;
    let deal_id = field_id(obj, "deal_id")?;
    let account = field_id(obj, "account")?;
    let exec_time = field_time(obj, "exec_time")?;
    match kind {
        Kind::Bust => Ok(Event::Bust(Bust {
            event_id,
            deal_id,
            account,
            exec_time,
        })),
        Kind::Fill => {
            let symbol = field_id(obj, "symbol")?;
            let side_s = field_str(obj, "side")?;
            let side = Side::parse(side_s)
                .ok_or_else(|| format!("side: {side_s:?} is not \"BUY\" or \"SELL\""))?;
            let qty = field_decimal(obj, "qty")?;
            let price = field_decimal(obj, "price")?;
            Ok(Event::Fill(Fill {
                event_id,
                deal_id,
                account,
                symbol,
                side,
                qty,
                price,
                exec_time,
            }))
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn field_str<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    match obj.get(name) {
        None => Err(format!("{name}: missing")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "{name}: must be a string, got {}",
            json_type(other)
        )),
    }
}

fn field_id(obj: &Map<String, Value>, name: &str) -> Result<String, String> {
    let s = field_str(obj, name)?;
    if s.is_empty() {
        return Err(format!("{name}: empty"));
    }
    if s.len() > MAX_ID_LEN {
        return Err(format!("{name}: longer than {MAX_ID_LEN} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{name}: contains control characters"));
    }
    Ok(s.to_owned())
}

fn field_time(obj: &Map<String, Value>, name: &str) -> Result<i64, String> {
    let s = field_str(obj, name)?;
    parse_rfc3339_ns(s).map_err(|e| format!("{name}: {e}"))
}

/// RFC 3339 timestamp to Unix nanoseconds.
///
/// Exact or refused, like the decimals: more than nine fractional digits
/// (which the parser would truncate) and a leap second `:60` (which it
/// would turn into `:59.999999999`) are errors, never a nearby time.
pub fn parse_rfc3339_ns(s: &str) -> Result<i64, String> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("{s:?} is not an RFC 3339 time ({e})"))?;
    // Parsed, so the text is `YYYY-MM-DD?HH:MM:SS[.frac]<offset>`: the
    // seconds at bytes 17..19, the fraction (if any) from byte 19.
    let b = s.as_bytes();
    if b.get(17..19) == Some(b"60".as_slice()) {
        return Err(format!(
            "{s:?} is a leap second (:60), which has no exact Unix time"
        ));
    }
    if b.get(19) == Some(&b'.') {
        let digits = b[20..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 9 {
            return Err(format!(
                "{s:?} has {digits} fractional digits; at most 9 (nanoseconds)"
            ));
        }
    }
    i64::try_from(t.unix_timestamp_nanos()).map_err(|_| format!("{s:?} is out of range"))
}

/// Unix nanoseconds to RFC 3339 (UTC, `Z`).
pub fn format_rfc3339_ns(ns: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ns as i128)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ns.to_string())
}

fn field_decimal(obj: &Map<String, Value>, name: &str) -> Result<Decimal, String> {
    let s = match obj.get(name) {
        None => return Err(format!("{name}: missing")),
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) => {
            return Err(format!(
                "{name}: must be a decimal string such as \"{n}\", not a JSON number"
            ))
        }
        Some(other) => {
            return Err(format!(
                "{name}: must be a decimal string, got {}",
                json_type(other)
            ))
        }
    };
    let d = parse_decimal(s).map_err(|e| format!("{name}: {e}"))?;
    if d <= Decimal::ZERO {
        return Err(format!("{name}: must be greater than zero, got {s:?}"));
    }
    Ok(d)
}

/// Strict decimal: optional '-', digits, optional '.' and digits. No exponent,
/// no '+', no spaces, no NaN/Infinity; a value that cannot be held exactly
/// (more than 28 significant digits, or out of range) is an error, never
/// rounded (`fills::exact`).
pub fn parse_decimal(s: &str) -> Result<Decimal, String> {
    super::exact::parse(s)
}

/// What happened to one input of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Recorded as processed and its effect applied in the same transaction (F1).
    Applied,
    /// `(kind, event_id)` was already processed (F1/F2).
    Duplicate,
    /// New `(kind, event_id)` but the deal was already filled, or already
    /// busted / a bust already held (F3). Not applied.
    DuplicateByDealId,
    /// A BUST whose FILL has not arrived: stored durably, applied when the
    /// FILL arrives.
    Held,
    /// Not valid, or not applicable; nothing was applied.
    Rejected(String),
    /// F2b: the `(kind, event_id)`, or the `(account, deal_id)`, was
    /// already processed with a different content hash. Rejected with a
    /// reason that starts with `conflict` and names the id; never applied,
    /// never a duplicate.
    Conflict(String),
}

impl Outcome {
    /// Why the event was not applied, for a rejection or a conflict (both
    /// answered `rejected` and dead-lettered by the stream sources).
    pub fn rejection_reason(&self) -> Option<&str> {
        match self {
            Outcome::Rejected(r) | Outcome::Conflict(r) => Some(r),
            _ => None,
        }
    }
}

/// Outcome of one input, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOutcome {
    /// Index of the input in its batch (for files: the caller maps it to a line).
    pub index: usize,
    pub kind: Option<String>,
    pub event_id: Option<String>,
    pub outcome: Outcome,
}

/// Totals over a batch's outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub applied: usize,
    pub duplicate: usize,
    pub rejected: usize,
    pub held: usize,
}

impl Totals {
    pub fn of(outcomes: &[EventOutcome]) -> Totals {
        let mut t = Totals::default();
        for o in outcomes {
            match o.outcome {
                Outcome::Applied => t.applied += 1,
                Outcome::Duplicate | Outcome::DuplicateByDealId => t.duplicate += 1,
                Outcome::Rejected(_) | Outcome::Conflict(_) => t.rejected += 1,
                Outcome::Held => t.held += 1,
            }
        }
        t
    }
    pub fn add(&mut self, o: Totals) {
        self.applied += o.applied;
        self.duplicate += o.duplicate;
        self.rejected += o.rejected;
        self.held += o.held;
    }
}

/// The `200` answer of `POST /v1/fills` (fills.md, K4): every event with its
/// status, and the totals. `held` is its own status and total (not counted
/// in `applied`), so `applied + duplicate + rejected + held = events`.
/// The bytes are deterministic for the same outcomes.
pub fn batch_answer(outcomes: &[EventOutcome]) -> (u16, Vec<u8>) {
    let results: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            let mut m = Map::new();
            m.insert("index".into(), Value::from(o.index));
            m.insert(
                "kind".into(),
                o.kind.clone().map(Value::String).unwrap_or(Value::Null),
            );
            m.insert(
                "event_id".into(),
                o.event_id.clone().map(Value::String).unwrap_or(Value::Null),
            );
            let (status, extra): (&str, Option<(&str, String)>) = match &o.outcome {
                Outcome::Applied => ("applied", None),
                Outcome::Duplicate => ("duplicate", Some(("by", "event_id".into()))),
                Outcome::DuplicateByDealId => ("duplicate", Some(("by", "deal_id".into()))),
                Outcome::Held => (
                    "held",
                    Some((
                        "reason",
                        "bust for a deal not seen yet; applied when its fill arrives".into(),
                    )),
                ),
                Outcome::Rejected(r) | Outcome::Conflict(r) => {
                    ("rejected", Some(("reason", r.clone())))
                }
            };
            m.insert("status".into(), Value::from(status));
            if let Some((k, v)) = extra {
                m.insert(k.into(), Value::String(v));
            }
            Value::Object(m)
        })
        .collect();
    let t = Totals::of(outcomes);
    let body = serde_json::json!({
        "results": results,
        "totals": {
            "applied": t.applied,
            "duplicate": t.duplicate,
            "rejected": t.rejected,
            "held": t.held,
        }
    });
    (200, serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// F2b: stored hashes are compared with new events' hashes, across
    /// versions and stores: the bytes hashed (fields as text, each
    /// followed by a NUL) never change. Expected values: Python's
    /// `hashlib.sha256(b"FILL\0E-1\0…\0").hexdigest()[:32]`.
    #[test]
    fn content_hash_is_stable() {
        let fill = parse_value(&serde_json::json!({"kind":"FILL","event_id":"E-1",
            "deal_id":"D-1","account":"ACC-A","symbol":"EURUSD","side":"BUY","qty":"100",
            "price":"1.10","exec_time":"2026-11-30T08:00:00Z"}))
        .unwrap();
        assert_eq!(fill.content_hash(), "2bf32c71f05acefde7a37887b2a29e3c");
        let bust = parse_value(&serde_json::json!({"kind":"BUST","event_id":"B-1",
            "deal_id":"D-1","account":"ACC-A","exec_time":"2026-11-30T08:00:00Z"}))
        .unwrap();
        assert_eq!(bust.content_hash(), "765e8082cfd0bc90b7128eaaf24bec8d");
    }

    /// `identical_to` only where the hashes are equal: a price of the
    /// same value with another scale is other content (F2b).
    #[test]
    fn identical_means_same_hash() {
        let f = |price: &str| {
            parse_value(&serde_json::json!({"kind":"FILL","event_id":"E-1",
                "deal_id":"D-1","account":"ACC-A","symbol":"EURUSD","side":"BUY",
                "qty":"100","price":price,"exec_time":"2026-11-30T08:00:00Z"}))
            .unwrap()
        };
        let (a, b) = (f("1.1"), f("1.10"));
        assert!(a.identical_to(&a.clone()));
        assert!(!a.identical_to(&b));
        assert_ne!(a.content_digest(), b.content_digest());
        let bust = parse_value(&serde_json::json!({"kind":"BUST","event_id":"E-1",
            "deal_id":"D-1","account":"ACC-A","exec_time":"2026-11-30T08:00:00Z"}))
        .unwrap();
        assert!(bust.identical_to(&bust.clone()));
        assert!(!bust.identical_to(&a));
    }

    fn fill_json() -> Value {
        serde_json::json!({"kind":"FILL","event_id":"E-881","deal_id":"D-1001","account":"ACC-7",
            "symbol":"EURUSD","side":"BUY","qty":"100000","price":"1.08512",
            "exec_time":"2026-11-30T08:00:00.123456Z"})
    }

    fn reason(v: Value) -> String {
        match parse_value(&v) {
            Err(i) => i.reason,
            Ok(e) => panic!("accepted {e:?}"),
        }
    }

    #[test]
    fn parses_spec_examples() {
        let Event::Fill(f) = parse_value(&fill_json()).unwrap() else {
            panic!()
        };
        assert_eq!(f.qty, Decimal::from(100000));
        assert_eq!(f.price, Decimal::from_str("1.08512").unwrap());
        assert_eq!(f.side, Side::Buy);
        assert_eq!(f.exec_time % 1_000_000_000, 123_456_000);
        let b = parse_line(r#"{"kind":"BUST","event_id":"B-17","deal_id":"D-1001","account":"ACC-7","exec_time":"2026-11-30T08:05:00Z"}"#).unwrap();
        assert_eq!(b.kind(), Kind::Bust);
        assert_eq!(b.deal_id(), "D-1001");
    }

    #[test]
    fn rejects_bad_input_with_reasons() {
        let mut v = fill_json();
        v["qty"] = serde_json::json!(100000.5);
        assert!(reason(v).contains("not a JSON number"));
        let mut v = fill_json();
        v["qty"] = "0".into();
        assert!(reason(v).contains("greater than zero"));
        let mut v = fill_json();
        v["qty"] = "-5".into();
        assert!(reason(v).contains("greater than zero"));
        for bad in ["1e5", "abc", "", "1.", ".5", "+1", " 1", "NaN", "1.2.3"] {
            let mut v = fill_json();
            v["price"] = bad.into();
            assert!(reason(v).contains("not a decimal"), "{bad}");
        }
        let mut v = fill_json();
        v["kind"] = "TRADE".into();
        let i = parse_value(&v).unwrap_err();
        assert!(i.reason.contains("unknown kind"));
        assert_eq!(i.event_id.as_deref(), Some("E-881"));
        let mut v = fill_json();
        v["side"] = "buy".into();
        assert!(reason(v).contains("side"));
        let mut v = fill_json();
        v["exec_time"] = "yesterday".into();
        assert!(reason(v).contains("RFC 3339"));
        // Exact or refused: neither truncated nor moved to :59.999999999.
        let mut v = fill_json();
        v["exec_time"] = "2026-11-30T08:00:00.1234567891Z".into();
        assert!(reason(v).contains("at most 9"));
        let mut v = fill_json();
        v["exec_time"] = "2016-12-31T23:59:60Z".into();
        assert!(reason(v).contains("leap second"));
        let mut v = fill_json();
        v["exec_time"] = "2016-12-31T23:59:60.5+00:00".into();
        assert!(reason(v).contains("leap second"));
        let ns = parse_rfc3339_ns("2026-11-30T08:00:00.123456789+01:00").unwrap();
        assert_eq!(ns % 1_000_000_000, 123_456_789);
        assert_eq!(
            parse_rfc3339_ns("2026-11-30T08:00:59.000000000Z").unwrap() % 60_000_000_000,
            59_000_000_000
        );
        let mut v = fill_json();
        v["event_id"] = serde_json::json!(7);
        assert!(reason(v).contains("event_id: must be a string"));
        let mut v = fill_json();
        v.as_object_mut().unwrap().remove("deal_id");
        assert!(reason(v).contains("deal_id: missing"));
        assert!(parse_line("{not json")
            .unwrap_err()
            .reason
            .contains("malformed JSON"));
        assert!(parse_line("[1]")
            .unwrap_err()
            .reason
            .contains("JSON object"));
        let too_many = "1".repeat(40);
        assert!(parse_decimal(&too_many)
            .unwrap_err()
            .contains("significant digits"));
        // Two values rust_decimal alone would round (to 1 and to 0).
        let mut v = fill_json();
        v["qty"] = "1.0000000000000000000000000000000000001".into();
        assert!(reason(v).contains("cannot be held exactly"));
        let mut v = fill_json();
        v["qty"] = "0.00000000000000000000000000001".into();
        assert!(reason(v).contains("cannot be held exactly"));
    }

    #[test]
    fn answer_lists_events_and_totals() {
        let outs = vec![
            EventOutcome {
                index: 0,
                kind: Some("FILL".into()),
                event_id: Some("E1".into()),
                outcome: Outcome::Applied,
            },
            EventOutcome {
                index: 1,
                kind: Some("FILL".into()),
                event_id: Some("E1".into()),
                outcome: Outcome::Duplicate,
            },
            EventOutcome {
                index: 2,
                kind: None,
                event_id: None,
                outcome: Outcome::Rejected("malformed".into()),
            },
            EventOutcome {
                index: 3,
                kind: Some("BUST".into()),
                event_id: Some("B1".into()),
                outcome: Outcome::Held,
            },
        ];
        let (status, body) = batch_answer(&outs);
        assert_eq!(status, 200);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["totals"],
            serde_json::json!({"applied":1,"duplicate":1,"rejected":1,"held":1})
        );
        assert_eq!(v["results"][2]["status"], "rejected");
        assert_eq!(v["results"][2]["reason"], "malformed");
        assert_eq!(v["results"][3]["status"], "held");
        assert_eq!(batch_answer(&outs).1, body);
    }
}
