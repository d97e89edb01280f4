//! SoupBinTCP 4.00 + GLIMPSE 5.0 as the image codec of recovery.md R5
//! (`venue::codec::ImageCodec`): the login, client heartbeats and the
//! Logout Request; the server's packets read into image events (ITCH
//! messages, End of Snapshot `G`). Pure: bytes in, bytes out.

use super::glimpse::{parse_end_of_snapshot, TYPE_END_OF_SNAPSHOT};
use super::soupbin::{Decoder, LoginRequest, Packet};
use crate::venue::codec::{ImageCodec, ImageError, ImageEvent};

/// One GLIMPSE conversation's codec (one per attempt).
#[derive(Debug)]
pub struct GlimpseCodec {
    username: String,
    password: String,
    decoder: Decoder,
}

impl GlimpseCodec {
    pub fn new(username: &str, password: &str) -> GlimpseCodec {
        GlimpseCodec {
            username: username.to_string(),
            password: password.to_string(),
            decoder: Decoder::new(),
        }
    }
}

impl ImageCodec for GlimpseCodec {
    /// R5: the configured username and password, the current session
    /// (blank), sequence 1.
    fn login(&mut self, out: &mut Vec<u8>) -> Result<(), ImageError> {
        let login = LoginRequest::new(&self.username, &self.password, None, 1)
            .map_err(|e| ImageError::Rejected(format!("login: {e}")))?;
        Packet::LoginRequest(login)
            .encode(out)
            .map_err(|e| ImageError::Closed(format!("sending the login: {e}")))
    }

    fn heartbeat(&mut self, out: &mut Vec<u8>) {
        // A packet without payload always encodes.
        let _ = Packet::ClientHeartbeat.encode(out);
    }

    fn logout(&mut self, out: &mut Vec<u8>) {
        let _ = Packet::LogoutRequest.encode(out);
    }

    fn push(&mut self, bytes: &[u8]) {
        self.decoder.push(bytes);
    }

    fn next_event(&mut self, _out: &mut Vec<u8>) -> Result<Option<ImageEvent<'_>>, ImageError> {
        let packet = match self.decoder.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(None),
            Err(e) => return Err(ImageError::Malformed(format!("SoupBinTCP: {e}"))),
        };
        Ok(Some(match packet {
            Packet::LoginAccepted { session, .. } => ImageEvent::LoggedIn {
                session: Some(session),
            },
            Packet::LoginRejected { reason } => {
                return Err(ImageError::Rejected(format!(
                    "Login Rejected, reason {:?}",
                    reason as char
                )))
            }
            Packet::SequencedData(msg) if msg.first() == Some(&TYPE_END_OF_SNAPSHOT) => {
                let next = parse_end_of_snapshot(msg)
                    .map_err(|e| ImageError::Malformed(format!("End of Snapshot: {e}")))?;
                ImageEvent::End { next }
            }
            Packet::SequencedData(msg) => ImageEvent::Message(msg),
            Packet::EndOfSession => {
                return Err(ImageError::Closed(
                    "End of Session before End of Snapshot".into(),
                ))
            }
            Packet::ServerHeartbeat | Packet::Debug(_) => ImageEvent::Heard,
            Packet::LoginRequest(_) | Packet::ClientHeartbeat | Packet::LogoutRequest => {
                return Err(ImageError::Malformed(
                    "a client packet from the server".into(),
                ))
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::nasdaq_itch::glimpse::encode_end_of_snapshot;
    use crate::wire::SessionId;

    fn server(packets: &[Packet<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in packets {
            p.encode(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn reads_a_snapshot_conversation() {
        let mut c = GlimpseCodec::new("user", "secret");
        let mut out = Vec::new();
        c.login(&mut out).unwrap();
        assert_eq!(out[2], b'L');
        let mut g = Vec::new();
        encode_end_of_snapshot(77, &mut g);
        c.push(&server(&[
            Packet::LoginAccepted {
                session: SessionId(*b"SESSION001"),
                sequence: 1,
            },
            Packet::ServerHeartbeat,
            Packet::SequencedData(b"S\x00\x01"),
            Packet::SequencedData(&g),
        ]));
        let mut sink = Vec::new();
        assert_eq!(
            c.next_event(&mut sink).unwrap(),
            Some(ImageEvent::LoggedIn {
                session: Some(SessionId(*b"SESSION001"))
            })
        );
        assert_eq!(c.next_event(&mut sink).unwrap(), Some(ImageEvent::Heard));
        assert_eq!(
            c.next_event(&mut sink).unwrap(),
            Some(ImageEvent::Message(b"S\x00\x01"))
        );
        assert_eq!(
            c.next_event(&mut sink).unwrap(),
            Some(ImageEvent::End { next: 77 })
        );
        assert_eq!(c.next_event(&mut sink).unwrap(), None);
        assert!(sink.is_empty(), "GLIMPSE answers nothing");
    }

    #[test]
    fn refusals_and_bad_packets_are_named() {
        let mut sink = Vec::new();
        let mut c = GlimpseCodec::new("user", "secret");
        c.push(&server(&[Packet::LoginRejected { reason: b'A' }]));
        assert!(matches!(
            c.next_event(&mut sink),
            Err(ImageError::Rejected(_))
        ));
        let mut c = GlimpseCodec::new("user", "secret");
        c.push(&server(&[Packet::EndOfSession]));
        assert!(matches!(
            c.next_event(&mut sink),
            Err(ImageError::Closed(_))
        ));
        let mut c = GlimpseCodec::new("user", "secret");
        c.push(&server(&[Packet::SequencedData(b"G12")]));
        assert!(matches!(
            c.next_event(&mut sink),
            Err(ImageError::Malformed(_))
        ));
        let mut c = GlimpseCodec::new("toolongname", "x");
        assert!(matches!(c.login(&mut sink), Err(ImageError::Rejected(_))));
    }
}
