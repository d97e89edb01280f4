//! The capture reader and the frame parser never panic: random bytes,
//! random bytes behind a valid file header, and mutations of real captures
//! give datagrams, skip counts or an error, nothing else.

use std::io::Cursor;

use proptest::prelude::*;
use tickgate::capture::frame::linktype;
use tickgate::capture::{parse_frame, CaptureReader};

fn real(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Reads everything; returns the number of items (datagrams or the error).
fn drain(bytes: Vec<u8>) -> usize {
    let Ok(mut r) = CaptureReader::new(Cursor::new(bytes)) else {
        return 0;
    };
    let mut n = 0;
    while let Some(item) = r.next_ref() {
        n += 1;
        if let Ok(d) = item {
            // touch the payload: its range must be inside the buffer
            std::hint::black_box(d.payload.iter().map(|&b| b as u64).sum::<u64>());
        }
        assert!(n < 1_000_000, "reader does not end");
    }
    let s = r.stats();
    assert!(s.datagrams + s.skipped.total() <= s.frames);
    n
}

const HEADERS: [&[u8]; 6] = [
    &[0xD4, 0xC3, 0xB2, 0xA1],
    &[0xA1, 0xB2, 0xC3, 0xD4],
    &[0x4D, 0x3C, 0xB2, 0xA1],
    &[0xA1, 0xB2, 0x3C, 0x4D],
    &[0x34, 0xCD, 0xB2, 0xA1],
    &[0x0A, 0x0D, 0x0D, 0x0A],
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        drain(bytes);
    }

    #[test]
    fn random_bytes_behind_a_magic(h in 0usize..HEADERS.len(), bom_big in any::<bool>(),
                                   rest in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut bytes = HEADERS[h].to_vec();
        if h == 5 {
            // plausible SHB length and byte-order magic so that the body is reached
            let bom: [u8; 4] = if bom_big { [0x1A, 0x2B, 0x3C, 0x4D] } else { [0x4D, 0x3C, 0x2B, 0x1A] };
            let len: u32 = 28;
            bytes.extend_from_slice(&if bom_big { len.to_be_bytes() } else { len.to_le_bytes() });
            bytes.extend_from_slice(&bom);
        }
        bytes.extend_from_slice(&rest);
        drain(bytes);
    }

    #[test]
    fn mutated_real_captures(file in 0usize..4, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
                             cut in any::<Option<usize>>()) {
        let name = [
            "real/nasdaq-totalview-itch50-moldudp64.pcap",
            "real/nasdaq-ise-moldudp64-heartbeat.pcap",
            "gen/merged3.pcapng",
            "gen/nasdaq.pcapng",
        ][file];
        let mut bytes = real(name);
        for (at, v) in flips {
            let i = at % bytes.len();
            bytes[i] = v;
        }
        if let Some(c) = cut {
            bytes.truncate(c % (bytes.len() + 1));
        }
        drain(bytes);
    }

    #[test]
    fn frame_parser(link in prop_oneof![
                        Just(linktype::ETHERNET), Just(linktype::LINUX_SLL), Just(linktype::LINUX_SLL2),
                        Just(linktype::RAW), Just(linktype::IPV4), Just(linktype::NULL),
                        Just(linktype::LOOP), any::<u32>()],
                    bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(d) = parse_frame(link, &bytes) {
            prop_assert!(d.payload.len() <= bytes.len());
        }
    }

    #[test]
    fn frame_parser_on_ipv4_shaped_bytes(mut bytes in proptest::collection::vec(any::<u8>(), 20..120),
                                          ihl in 5u8..16, proto in prop_oneof![Just(17u8), any::<u8>()]) {
        bytes[0] = 0x40 | ihl;
        bytes[9] = proto;
        let _ = parse_frame(linktype::RAW, &bytes);
    }
}

#[test]
fn real_captures_still_read_cleanly() {
    // the fuzz inputs are derived from these: make sure they are the real thing
    assert_eq!(
        drain(real("real/nasdaq-totalview-itch50-moldudp64.pcap")),
        2
    );
    assert_eq!(drain(real("gen/merged3.pcapng")), 4);
}
