//! `replay --json` writes its summary as it goes
//! (`replay::summary::write_summary_json`): the very bytes of the whole
//! summary (`summary_json`, with `timing` added) written at once, here for
//! a CME channel of 300 instruments.

use std::net::SocketAddrV4;

use serde_json::{json, Value};
use tickgate::capture::stream::{CaptureStream, StreamOptions};
use tickgate::feed::FeedSettings;
use tickgate::replay::engine::Replay;
use tickgate::replay::summary::{summary_json, write_summary_json};
use tickgate::venue::cme_mdp3::encode::{self, BookEntry};
use tickgate::venue::VenueKind;

#[test]
fn the_summary_written_as_it_goes_is_the_whole_summary() {
    // The capture part of the summary: any capture read whole.
    let path = format!(
        "{}/fixtures/real/cme-mdp3-v5-definitions.pcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut cap = CaptureStream::open_assuming_sorted(&[path.into()], StreamOptions::default())
        .unwrap()
        .expect("one reader fits");
    while cap.next_datagram().is_some() {}
    let sum = cap.summary();

    let line: SocketAddrV4 = "224.0.31.64:14340".parse().unwrap();
    let src: SocketAddrV4 = "10.0.0.1:5000".parse().unwrap();
    let mut r = Replay::single_venue_feed(FeedSettings::for_venue(VenueKind::CmeMdp3), &[line]);
    let t0 = 1_796_112_000_000_000_000i64;
    let mut p = Vec::new();
    for k in 0..30u32 {
        let entries: Vec<BookEntry> = (0..10)
            .map(|i| BookEntry {
                px: Some(10_000_000_000 + i64::from(k)),
                size: Some(1 + k as i32),
                security_id: (k * 10 + i) as i32,
                rpt_seq: 1 + i % 2,
                orders: None,
                level: 1,
                action: 0,
                entry_type: if i % 3 == 0 { b'1' } else { b'0' },
            })
            .collect();
        let t = t0 + i64::from(k) * 1_000;
        encode::start_packet(&mut p, 1 + k, t as u64);
        encode::book(&mut p, t as u64, &entries);
        r.on_datagram(src, line, &p, t);
    }
    let timing = json!({"messages": 5, "wall_ns": 7});
    let mut want: Value = summary_json(&sum, &r);
    let n = want["symbols"].as_object().unwrap().len();
    assert_eq!(n, 300);
    want["timing"] = timing.clone();
    let mut got = Vec::new();
    write_summary_json(&mut got, &sum, &r, vec![("timing".to_string(), timing)]).unwrap();
    assert_eq!(
        String::from_utf8(got).unwrap(),
        serde_json::to_string(&want).unwrap()
    );
}
