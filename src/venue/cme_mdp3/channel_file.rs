//! CME's published channel file (`config.xml`, venues.md `cme-mdp3`,
//! Lines): the multicast connections of one channel, as lines of a feed.
//! Pure: the caller reads the file.
//!
//! Each `<channel id="...">` lists `<connection>`s; a connection's
//! `<type feed-type="...">` says what it carries: `I` incremental, `S` the
//! snapshot loop (Market Recovery), `N` the definition loop (Instrument
//! Recovery). TCP replay (`H`) and the Market By Order snapshot (`SMBO`)
//! are not lines of this venue and are skipped.

use std::net::Ipv4Addr;

use crate::venue::LineKind;

/// One multicast connection of a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelLine {
    /// The connection id (`310IA`).
    pub name: String,
    pub group: Ipv4Addr,
    pub port: u16,
    pub kind: LineKind,
}

/// The lines of channel `id` in a channel file's text, in file order.
pub fn channel_lines(xml: &str, id: u32) -> Result<Vec<ChannelLine>, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("not XML: {e}"))?;
    let channels: Vec<roxmltree::Node<'_, '_>> = doc
        .descendants()
        .filter(|n| n.has_tag_name("channel"))
        .collect();
    let wanted = id.to_string();
    let Some(channel) = channels.iter().find(|c| c.attribute("id") == Some(&wanted)) else {
        let mut ids: Vec<&str> = channels.iter().filter_map(|c| c.attribute("id")).collect();
        ids.truncate(12);
        return Err(if ids.is_empty() {
            "no <channel> in the file (is it CME's config.xml?)".to_string()
        } else {
            format!("no channel {id} in the file (it has {}...)", ids.join(", "))
        });
    };
    let mut out = Vec::new();
    for c in channel
        .descendants()
        .filter(|n| n.has_tag_name("connection"))
    {
        let name = c.attribute("id").unwrap_or("?").to_string();
        let child = |tag: &str| {
            c.children()
                .find(|n| n.has_tag_name(tag))
                .and_then(|n| n.text())
                .map(str::trim)
        };
        let feed_type = c
            .children()
            .find(|n| n.has_tag_name("type"))
            .and_then(|n| n.attribute("feed-type"));
        let kind = match feed_type {
            Some("I") => LineKind::Incremental,
            Some("S") => LineKind::Snapshot,
            Some("N") => LineKind::Definition,
            _ => continue,
        };
        if child("protocol").is_some_and(|p| !p.starts_with("UDP")) {
            continue;
        }
        let group: Ipv4Addr = child("ip")
            .ok_or_else(|| format!("connection {name}: no <ip>"))?
            .parse()
            .map_err(|_| format!("connection {name}: <ip> is not an IPv4 address"))?;
        if !group.is_multicast() {
            return Err(format!(
                "connection {name}: {group} is not a multicast address"
            ));
        }
        let port: u16 = child("port")
            .ok_or_else(|| format!("connection {name}: no <port>"))?
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("connection {name}: <port> is not a UDP port"))?;
        out.push(ChannelLine {
            name,
            group,
            port,
            kind,
        });
    }
    if !out.iter().any(|l| l.kind == LineKind::Incremental) {
        return Err(format!("channel {id} has no incremental connection"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(id: &str, ty: &str, proto: &str, ip: &str, port: u16) -> String {
        format!(
            "<connection id=\"{id}\"><type feed-type=\"{ty}\">x</type>\
             <protocol>{proto}</protocol><ip>{ip}</ip><host-ip>10.0.0.1</host-ip>\
             <port>{port}</port><feed>A</feed></connection>"
        )
    }

    fn file() -> String {
        let c310 = [
            connection("310H2A", "H", "TCP/IP", "205.209.220.72", 10000),
            connection("310IA", "I", "UDP/IP", "224.0.31.1", 14310),
            connection("310IB", "I", "UDP/IP", "224.0.32.1", 15310),
            connection("310NA", "N", "UDP/IP", "224.0.31.43", 14310),
            connection("310SA", "S", "UDP/IP", "224.0.31.22", 14310),
            connection("310SAMBO", "SMBO", "UDP/IP", "233.72.75.1", 23310),
        ]
        .concat();
        let c311 = connection("311IA", "I", "UDP/IP", "224.0.31.2", 14311);
        format!(
            "<?xml version=\"1.0\"?><configuration environment=\"PROD\">\
             <channel id=\"310\" label=\"Equity Futures\"><products/><connections>{c310}</connections></channel>\
             <channel id=\"311\"><connections>{c311}</connections></channel></configuration>"
        )
    }

    #[test]
    fn a_channels_udp_connections_by_kind() {
        let lines = channel_lines(&file(), 310).unwrap();
        let got: Vec<(&str, String, LineKind)> = lines
            .iter()
            .map(|l| (l.name.as_str(), format!("{}:{}", l.group, l.port), l.kind))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "310IA",
                    "224.0.31.1:14310".to_string(),
                    LineKind::Incremental
                ),
                (
                    "310IB",
                    "224.0.32.1:15310".to_string(),
                    LineKind::Incremental
                ),
                (
                    "310NA",
                    "224.0.31.43:14310".to_string(),
                    LineKind::Definition
                ),
                ("310SA", "224.0.31.22:14310".to_string(), LineKind::Snapshot),
            ]
        );
        assert_eq!(channel_lines(&file(), 311).unwrap().len(), 1);
    }

    #[test]
    fn what_is_wrong_is_named() {
        let e = channel_lines(&file(), 999).unwrap_err();
        assert!(
            e.contains("no channel 999") && e.contains("310, 311"),
            "{e}"
        );
        assert!(channel_lines("<a>", 310).unwrap_err().contains("not XML"));
        assert!(channel_lines("<configuration/>", 310)
            .unwrap_err()
            .contains("no <channel>"));
        let bad = file().replace("224.0.32.1", "10.1.1.1");
        assert!(channel_lines(&bad, 310)
            .unwrap_err()
            .contains("310IB: 10.1.1.1 is not a multicast address"));
        let no_port = file().replace("<port>15310</port>", "<port>x</port>");
        assert!(channel_lines(&no_port, 310)
            .unwrap_err()
            .contains("310IB: <port>"));
        let only_snapshot = "<configuration><channel id=\"7\"><connections>".to_string()
            + &connection("7SA", "S", "UDP/IP", "224.0.31.9", 1)
            + "</connections></channel></configuration>";
        assert!(channel_lines(&only_snapshot, 7)
            .unwrap_err()
            .contains("no incremental"));
    }
}
