//! Property tests of the CME MDP 3.0 SBE decoder (venues.md `cme-mdp3`,
//! Framing): arbitrary bytes and mutations of CME's real packets never
//! panic; whole-packet validation and a message-by-message walk (every
//! field of the generated decoders, every entry) agree; and a real packet
//! cut short is valid exactly when the cut falls between two messages.

use std::sync::OnceLock;

use proptest::prelude::*;
use tickgate::capture::CaptureReader;
use tickgate::venue::cme_mdp3::messages::{self, Body, Item};
use tickgate::venue::cme_mdp3::{sbe, templates};

fn real_packets() -> &'static [Vec<u8>] {
    static P: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    P.get_or_init(|| {
        let mut out = Vec::new();
        for name in [
            "cme-mdp3-v5-definitions.pcap",
            "cme-mdp3-v6-incremental-ab.pcapng",
            "cme-mdp3-v8-status-ab.pcapng",
            "cme-mdp3-v9-sample.pcap",
        ] {
            let path = format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"));
            let mut r = CaptureReader::open(path).unwrap();
            // Every packet of the small captures, one in 50 of the large.
            let every = if name.contains("-ab") { 50 } else { 1 };
            let mut i = 0;
            while let Some(d) = r.next_ref() {
                if i % every == 0 {
                    out.push(d.unwrap().payload.to_vec());
                }
                i += 1;
            }
        }
        out
    })
}

/// Validates `d` and walks it message by message; the two must agree.
/// Returns whether it is valid.
fn check(d: &[u8]) -> bool {
    let walk = || -> Result<(u32, u32, bool), sbe::SbeError> {
        let (_, msgs) = sbe::packet(d)?;
        let (mut n, mut unknown, mut heartbeat_only) = (0, 0, true);
        for raw in msgs {
            let raw = raw?;
            n += 1;
            if let Some(Ok(m)) = templates::decode(&raw) {
                let _ = m.fields_present();
            }
            match messages::decode(&raw)? {
                Item::Unknown { .. } => unknown += 1,
                Item::Known { header, body } => {
                    if header.template_id != messages::ADMIN_HEARTBEAT {
                        heartbeat_only = false;
                    }
                    match body {
                        Body::Incremental { entries, .. } => {
                            let count = entries.count();
                            assert_eq!(entries.count(), count);
                        }
                        Body::Snapshot(s) => {
                            let count = s.entries.count();
                            assert_eq!(s.entries.count(), count);
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok((n, unknown, heartbeat_only))
    };
    match (messages::validate(d), walk()) {
        (Ok(s), Ok(w)) => {
            assert_eq!((s.messages, s.unknown, s.heartbeat_only), w);
            true
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            false
        }
        (a, b) => panic!("validate and the walk disagree: {a:?} {b:?}"),
    }
}

/// Where each message of a valid packet ends.
fn boundaries(d: &[u8]) -> Vec<usize> {
    let (_, msgs) = sbe::packet(d).unwrap();
    msgs.map(|m| {
        let m = m.unwrap();
        m.offset + sbe::MIN_MSG_SIZE + m.body.len()
    })
    .collect()
}

#[test]
fn every_real_packet_is_valid() {
    let p = real_packets();
    assert!(p.len() > 300, "{}", p.len());
    for d in p {
        assert!(check(d));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(d in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&d);
    }

    /// A packet header, then arbitrary MsgSize-framed messages with
    /// templates the decoder knows: exercises the decoders past framing.
    #[test]
    fn arbitrary_messages_of_known_templates_never_panic(
        seq in any::<u32>(),
        msgs in proptest::collection::vec(
            (
                proptest::sample::select(templates::TEMPLATE_IDS.to_vec()),
                0u16..16,
                any::<u16>(),
                proptest::collection::vec(any::<u8>(), 0..300),
            ),
            1..4,
        ),
    ) {
        let mut d = seq.to_le_bytes().to_vec();
        d.extend_from_slice(&0u64.to_le_bytes());
        for (template, version, block_length, body) in msgs {
            d.extend_from_slice(&((10 + body.len()) as u16).to_le_bytes());
            for v in [block_length % 300, template, 1, version] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d.extend_from_slice(&body);
        }
        check(&d);
    }

    #[test]
    fn mutated_real_packets_never_panic(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let p = real_packets();
        let mut d = p[which.index(p.len())].clone();
        for (how, at, byte) in edits {
            match how {
                0 => d.truncate(at.index(d.len() + 1)),
                1 if !d.is_empty() => {
                    let i = at.index(d.len());
                    d[i] ^= byte | 1;
                }
                2 => d.insert(at.index(d.len() + 1), byte),
                _ => {
                    // A u16 field (MsgSize, a blockLength, a count) set to
                    // an extreme.
                    if d.len() >= 2 {
                        let i = at.index(d.len() - 1);
                        d[i] = byte;
                        d[i + 1] = if byte & 1 == 0 { 0 } else { 0xff };
                    }
                }
            }
        }
        check(&d);
    }

    /// A real packet cut at `k` is valid exactly when `k` is the end of
    /// one of its messages (a packet needs at least one message).
    #[test]
    fn cut_packets_are_valid_only_between_messages(
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let p = real_packets();
        let d = &p[which.index(p.len())];
        let k = at.index(d.len() + 1);
        let ends = boundaries(d);
        prop_assert_eq!(check(&d[..k]), ends.contains(&k), "cut at {} of {:?}", k, ends);
    }
}
