//! UDP payloads of the small real captures, read with pcap-file and
//! etherparse directly (independent of tickgate's own capture reader).

#![allow(dead_code)]

/// UDP payloads of a classic pcap at `path`, in capture order.
pub fn udp_payloads(path: &str) -> Vec<Vec<u8>> {
    let mut reader = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet() {
        let p = p.unwrap();
        let sliced = etherparse::SlicedPacket::from_ethernet(&p.data).unwrap();
        match sliced.transport {
            Some(etherparse::TransportSlice::Udp(udp)) => out.push(udp.payload().to_vec()),
            other => panic!("{path}: not UDP: {other:?}"),
        }
    }
    out
}
