//! Link layer, IPv4 and UDP extraction from one captured frame. Pure code:
//! never panics on any input; whatever is not a whole, unfragmented IPv4
//! UDP datagram is reported with the reason it was skipped.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;

/// Datagram budget of what tickgate writes (simulated lines, a BinaryFILE
/// day's datagrams): fits a 1500-byte Ethernet MTU with room to spare.
pub const MAX_DATAGRAM: usize = 1400;

/// Link types (the pcap `LINKTYPE_*` numbers) this parser understands.
pub mod linktype {
    /// BSD loopback: 4-byte address family in host byte order.
    pub const NULL: u32 = 0;
    pub const ETHERNET: u32 = 1;
    /// Raw IP (DLT_RAW as some systems number it).
    pub const RAW_12: u32 = 12;
    pub const RAW_14: u32 = 14;
    /// Raw IP: the version nibble says IPv4 or IPv6.
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux cooked capture v1 (`tcpdump -i any`).
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: u32 = 276;
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
const IPPROTO_UDP: u8 = 17;
/// More VLAN tags than this is not a real frame.
const MAX_VLAN_TAGS: usize = 8;

/// Why a frame carried no usable IPv4 UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The captured bytes end before a header or the UDP payload does
    /// (snap length too small, or a cut frame).
    Truncated,
    /// Not IP at all (ARP, LLDP, an 802.3 length frame, ...).
    NotIp,
    /// IPv6 (only IPv4 feeds are supported).
    Ipv6,
    /// IPv4 but not UDP (IGMP, TCP, ICMP, ...).
    NotUdp,
    /// An IPv4 fragment (MF set or a non-zero offset): not reassembled.
    Fragment,
    /// Inconsistent headers (bad IP version or header length, UDP length
    /// below 8, IP total length below its header).
    Malformed,
    /// A link type this parser does not know.
    UnsupportedLinkType,
}

impl SkipReason {
    pub const ALL: [SkipReason; 7] = [
        SkipReason::Truncated,
        SkipReason::NotIp,
        SkipReason::Ipv6,
        SkipReason::NotUdp,
        SkipReason::Fragment,
        SkipReason::Malformed,
        SkipReason::UnsupportedLinkType,
    ];

    /// Stable snake_case name (JSON keys, summaries).
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Truncated => "truncated",
            SkipReason::NotIp => "not_ip",
            SkipReason::Ipv6 => "ipv6",
            SkipReason::NotUdp => "not_udp",
            SkipReason::Fragment => "fragment",
            SkipReason::Malformed => "malformed",
            SkipReason::UnsupportedLinkType => "unsupported_link_type",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Frames skipped, per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipCounts {
    pub truncated: u64,
    pub not_ip: u64,
    pub ipv6: u64,
    pub not_udp: u64,
    pub fragment: u64,
    pub malformed: u64,
    pub unsupported_link_type: u64,
}

impl SkipCounts {
    pub fn add(&mut self, reason: SkipReason) {
        *self.slot(reason) += 1;
    }

    pub fn get(&self, reason: SkipReason) -> u64 {
        match reason {
            SkipReason::Truncated => self.truncated,
            SkipReason::NotIp => self.not_ip,
            SkipReason::Ipv6 => self.ipv6,
            SkipReason::NotUdp => self.not_udp,
            SkipReason::Fragment => self.fragment,
            SkipReason::Malformed => self.malformed,
            SkipReason::UnsupportedLinkType => self.unsupported_link_type,
        }
    }

    fn slot(&mut self, reason: SkipReason) -> &mut u64 {
        match reason {
            SkipReason::Truncated => &mut self.truncated,
            SkipReason::NotIp => &mut self.not_ip,
            SkipReason::Ipv6 => &mut self.ipv6,
            SkipReason::NotUdp => &mut self.not_udp,
            SkipReason::Fragment => &mut self.fragment,
            SkipReason::Malformed => &mut self.malformed,
            SkipReason::UnsupportedLinkType => &mut self.unsupported_link_type,
        }
    }

    /// Adds another's counts (several files' totals).
    pub fn add_all(&mut self, other: &SkipCounts) {
        for &r in SkipReason::ALL.iter() {
            *self.slot(r) += other.get(r);
        }
    }

    pub fn total(&self) -> u64 {
        SkipReason::ALL.iter().map(|&r| self.get(r)).sum()
    }

    /// `(name, count)` for every reason, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        SkipReason::ALL.iter().map(|&r| (r.name(), self.get(r)))
    }
}

/// A UDP datagram found in a frame, borrowing the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
}

/// The same, with the payload as a range of the frame (lets a reader keep
/// the frame in its own buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdpSpan {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub payload: Range<usize>,
}

/// Extracts the IPv4 UDP datagram of one frame of link type `link`.
pub fn parse_frame(link: u32, frame: &[u8]) -> Result<UdpDatagram<'_>, SkipReason> {
    let span = udp_span(link, frame)?;
    Ok(UdpDatagram {
        src: span.src,
        dst: span.dst,
        payload: &frame[span.payload],
    })
}

pub(crate) fn udp_span(link: u32, frame: &[u8]) -> Result<UdpSpan, SkipReason> {
    let ip_start = match link {
        linktype::ETHERNET => {
            if frame.len() < 14 {
                return Err(SkipReason::Truncated);
            }
            after_ethertype(frame, 12)?
        }
        linktype::LINUX_SLL => {
            // packet type (2), ARPHRD (2), address length (2), address (8), protocol (2)
            if frame.len() < 16 {
                return Err(SkipReason::Truncated);
            }
            after_ethertype(frame, 14)?
        }
        linktype::LINUX_SLL2 => {
            // protocol (2), reserved (2), ifindex (4), ARPHRD (2), packet type (1),
            // address length (1), address (8)
            if frame.len() < 20 {
                return Err(SkipReason::Truncated);
            }
            match be16(frame, 0) {
                ETHERTYPE_IPV4 => 20,
                ETHERTYPE_IPV6 => return Err(SkipReason::Ipv6),
                _ => return Err(SkipReason::NotIp),
            }
        }
        linktype::RAW | linktype::RAW_12 | linktype::RAW_14 => {
            match frame.first().map(|b| b >> 4) {
                None => return Err(SkipReason::Truncated),
                Some(4) => 0,
                Some(6) => return Err(SkipReason::Ipv6),
                Some(_) => return Err(SkipReason::Malformed),
            }
        }
        linktype::IPV4 => 0,
        linktype::IPV6 => return Err(SkipReason::Ipv6),
        linktype::NULL | linktype::LOOP => {
            if frame.len() < 4 {
                return Err(SkipReason::Truncated);
            }
            let raw: [u8; 4] = [frame[0], frame[1], frame[2], frame[3]];
            // NULL is in the capturing host's byte order: accept either.
            let family = if link == linktype::LOOP {
                u32::from_be_bytes(raw)
            } else {
                let le = u32::from_le_bytes(raw);
                if le < 0x1_0000 {
                    le
                } else {
                    u32::from_be_bytes(raw)
                }
            };
            match family {
                2 => 4,
                // AF_INET6 is 10, 24, 28 or 30 depending on the OS.
                10 | 24 | 28 | 30 => return Err(SkipReason::Ipv6),
                _ => return Err(SkipReason::NotIp),
            }
        }
        _ => return Err(SkipReason::UnsupportedLinkType),
    };
    ipv4_udp(frame, ip_start)
}

/// Follows the ethertype at `at` through any 802.1Q/802.1ad tags; returns
/// where the IPv4 header starts.
fn after_ethertype(frame: &[u8], mut at: usize) -> Result<usize, SkipReason> {
    for _ in 0..=MAX_VLAN_TAGS {
        if frame.len() < at + 2 {
            return Err(SkipReason::Truncated);
        }
        match be16(frame, at) {
            ETHERTYPE_IPV4 => return Ok(at + 2),
            ETHERTYPE_IPV6 => return Err(SkipReason::Ipv6),
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => at += 4, // TCI, then the next type
            _ => return Err(SkipReason::NotIp),
        }
    }
    Err(SkipReason::Malformed)
}

fn ipv4_udp(frame: &[u8], ip: usize) -> Result<UdpSpan, SkipReason> {
    let rest = frame.get(ip..).unwrap_or(&[]);
    if rest.is_empty() {
        return Err(SkipReason::Truncated);
    }
    match rest[0] >> 4 {
        4 => {}
        6 => return Err(SkipReason::Ipv6),
        _ => return Err(SkipReason::Malformed),
    }
    if rest.len() < 20 {
        return Err(SkipReason::Truncated);
    }
    let ihl = ((rest[0] & 0x0F) as usize) * 4;
    if ihl < 20 {
        return Err(SkipReason::Malformed);
    }
    let total = be16(rest, 2) as usize;
    if total < ihl {
        return Err(SkipReason::Malformed);
    }
    let flags_frag = be16(rest, 6);
    // MF set or a non-zero offset; DF alone is fine (and common).
    if flags_frag & 0x2000 != 0 || flags_frag & 0x1FFF != 0 {
        return Err(SkipReason::Fragment);
    }
    if rest[9] != IPPROTO_UDP {
        return Err(SkipReason::NotUdp);
    }
    // Bytes past the IP total length are link padding (short Ethernet frames).
    if rest.len() < total {
        return Err(SkipReason::Truncated);
    }
    let src_ip = Ipv4Addr::new(rest[12], rest[13], rest[14], rest[15]);
    let dst_ip = Ipv4Addr::new(rest[16], rest[17], rest[18], rest[19]);
    let udp = &rest[ihl..total];
    if udp.len() < 8 {
        // the IP total length leaves no room for a UDP header
        return Err(SkipReason::Malformed);
    }
    let src_port = be16(udp, 0);
    let dst_port = be16(udp, 2);
    let udp_len = be16(udp, 4) as usize;
    if udp_len < 8 || udp_len > udp.len() {
        return Err(SkipReason::Malformed);
    }
    let start = ip + ihl + 8;
    Ok(UdpSpan {
        src: SocketAddrV4::new(src_ip, src_port),
        dst: SocketAddrV4::new(dst_ip, dst_port),
        payload: start..start + (udp_len - 8),
    })
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 + UDP, with `tags` VLAN ethertypes before IPv4.
    fn eth_udp(tags: &[u16], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x01, 0x00, 0x5e, 0, 0, 1, 2, 0, 0, 0, 0, 1];
        for &t in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0x00, 0x64]);
        }
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend_from_slice(&ipv4_udp_bytes(payload, 0));
        f
    }

    fn ipv4_udp_bytes(payload: &[u8], flags_frag: u16) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&(total as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 1]);
        ip.extend_from_slice(&flags_frag.to_be_bytes());
        ip.extend_from_slice(&[64, 17, 0, 0, 10, 0, 0, 1, 239, 255, 0, 1]);
        ip.extend_from_slice(&40000u16.to_be_bytes());
        ip.extend_from_slice(&30001u16.to_be_bytes());
        ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.extend_from_slice(payload);
        ip
    }

    #[test]
    fn ethernet_plain_vlan_and_qinq() {
        for tags in [
            &[][..],
            &[ETHERTYPE_VLAN],
            &[ETHERTYPE_QINQ, ETHERTYPE_VLAN],
        ] {
            let f = eth_udp(tags, b"hello");
            let d = parse_frame(linktype::ETHERNET, &f).unwrap();
            assert_eq!(d.payload, b"hello");
            assert_eq!(d.src, "10.0.0.1:40000".parse().unwrap());
            assert_eq!(d.dst, "239.255.0.1:30001".parse().unwrap());
        }
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let mut f = eth_udp(&[], b"x");
        f.resize(60, 0);
        assert_eq!(parse_frame(linktype::ETHERNET, &f).unwrap().payload, b"x");
    }

    #[test]
    fn sll_sll2_raw_null() {
        let ip = ipv4_udp_bytes(b"abc", 0);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.extend_from_slice(&ip);
        assert_eq!(
            parse_frame(linktype::LINUX_SLL, &sll).unwrap().payload,
            b"abc"
        );
        let mut sll2 = ETHERTYPE_IPV4.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(
            parse_frame(linktype::LINUX_SLL2, &sll2).unwrap().payload,
            b"abc"
        );
        assert_eq!(parse_frame(linktype::RAW, &ip).unwrap().payload, b"abc");
        assert_eq!(parse_frame(linktype::IPV4, &ip).unwrap().payload, b"abc");
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        assert_eq!(parse_frame(linktype::NULL, &null).unwrap().payload, b"abc");
    }

    #[test]
    fn skip_reasons() {
        let ip = ipv4_udp_bytes(b"abcdef", 0);
        // fragments: MF, or an offset
        for ff in [0x2000u16, 0x0001, 0x2010] {
            let frag = ipv4_udp_bytes(b"abcdef", ff);
            assert_eq!(parse_frame(linktype::RAW, &frag), Err(SkipReason::Fragment));
        }
        // DF alone is not a fragment
        assert!(parse_frame(linktype::RAW, &ipv4_udp_bytes(b"a", 0x4000)).is_ok());
        // truncated payload
        assert_eq!(
            parse_frame(linktype::RAW, &ip[..ip.len() - 1]),
            Err(SkipReason::Truncated)
        );
        // not UDP
        let mut tcp = ip.clone();
        tcp[9] = 6;
        assert_eq!(parse_frame(linktype::RAW, &tcp), Err(SkipReason::NotUdp));
        // IPv6 by version nibble and by ethertype
        let mut v6 = ip.clone();
        v6[0] = 0x60;
        assert_eq!(parse_frame(linktype::RAW, &v6), Err(SkipReason::Ipv6));
        let mut eth6 = vec![0u8; 12];
        eth6.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        eth6.extend_from_slice(&[0u8; 40]);
        assert_eq!(
            parse_frame(linktype::ETHERNET, &eth6),
            Err(SkipReason::Ipv6)
        );
        // ARP
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&0x0806u16.to_be_bytes());
        arp.extend_from_slice(&[0u8; 28]);
        assert_eq!(
            parse_frame(linktype::ETHERNET, &arp),
            Err(SkipReason::NotIp)
        );
        // UDP length shorter than its header
        let mut bad = ip.clone();
        bad[24] = 0;
        bad[25] = 4;
        assert_eq!(parse_frame(linktype::RAW, &bad), Err(SkipReason::Malformed));
        // header length below 20
        let mut bad = ip.clone();
        bad[0] = 0x44;
        assert_eq!(parse_frame(linktype::RAW, &bad), Err(SkipReason::Malformed));
        assert_eq!(parse_frame(999, &ip), Err(SkipReason::UnsupportedLinkType));
        assert_eq!(
            parse_frame(linktype::ETHERNET, &[1, 2, 3]),
            Err(SkipReason::Truncated)
        );
    }
}
