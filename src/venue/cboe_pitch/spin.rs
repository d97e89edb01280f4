//! Cboe's Spin Server as an image service (recovery.md R5c): the
//! [`ImageCodec`] that one spin attempt of one unit talks through
//! (`feed::recovery::image::ImageSession`). Pure: bytes in, bytes out.
//!
//! The conversation, as the codec drives it:
//! 1. the Login of R4c (`session`), the first block sent; Login Response
//!    `A` logs in, any other status fails the attempt;
//! 2. Spin Image Available messages whose sequence `S` is below `n0 - 1`
//!    (`n0`: the unit's first unapplied message when the attempt started)
//!    are skipped; the first with `S ≥ n0 - 1` is answered with a Spin
//!    Request for `S`, written into `out`; never two requests at once;
//! 3. the next Spin Response answers the request, whatever its sequence
//!    field says: `A` starts the spin, `O` waits for the next usable Spin
//!    Image Available, `S` fails the attempt (tickgate runs no other spin
//!    on the connection); a status R5c does not list fails it too. A Spin
//!    Response with no request outstanding is dropped and counted;
//! 4. the spin's PITCH messages (Time, the Add Orders, Trading Status,
//!    any other type) are the image's messages, raw as on the wire (Length
//!    byte first), in order; Spin Image Available during the spin is
//!    ignored;
//! 5. Spin Finished must carry `S`, and the spin's Add Orders must number
//!    the accepted response's order count: the image ends with `next =
//!    S + 1`.
//!
//! The protocol has no logout: the client closes the connection after
//! Spin Finished. A GRP message (Gap Request, Gap Response), a client
//! message from the server, or bytes that do not parse fail the attempt.
//! Where R5c asks something of the driver rather than of the codec (a
//! Login Response `B` not counting for the pace, `spins_without_status`),
//! the codec keeps what the driver needs: [`SpinCodec::login_status`],
//! [`SpinCodec::trading_statuses`].

use super::messages::{TYPE_ADD_EXPANDED, TYPE_ADD_LONG, TYPE_ADD_SHORT, TYPE_TRADING_STATUS};
use super::session::{
    decode_message, encode_block, BlockDecoder, Login, LoginStatus, SessionMessage, SpinStatus,
    HEARTBEAT,
};
use crate::venue::codec::{ImageCodec, ImageError, ImageEvent};

/// Where one spin conversation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpinPhase {
    /// The Login left; no Login Response yet.
    LoggingIn,
    /// Logged in: waiting for a usable Spin Image Available.
    Waiting,
    /// A Spin Request for `sequence` is outstanding.
    Requested { sequence: u32 },
    /// The spin of `sequence` is arriving: `order_count` Add Orders
    /// announced, `adds` seen so far.
    Spinning {
        sequence: u32,
        order_count: u32,
        adds: u32,
    },
    /// Spin Finished was read: the image is whole.
    Finished,
}

/// One spin attempt's codec (one per attempt and unit).
#[derive(Debug)]
pub struct SpinCodec {
    login: Login,
    /// The unit's first unapplied message when the attempt started.
    n0: u64,
    decoder: BlockDecoder,
    /// The block being read (its messages after the header), copied out
    /// of the decoder so that its messages can be handed out one by one.
    block: Vec<u8>,
    /// Where the next message of `block` starts, and how many are left.
    at: usize,
    left: u8,
    phase: SpinPhase,
    login_status: Option<LoginStatus>,
    skipped_images: u64,
    stray_responses: u64,
    ignored: u64,
    out_of_range: u64,
    trading_statuses: u32,
}

impl SpinCodec {
    /// A codec for an attempt that started when the unit's first
    /// unapplied message was `n0` (R5c "How", step 1).
    pub fn new(login: Login, n0: u64) -> SpinCodec {
        SpinCodec {
            login,
            n0,
            decoder: BlockDecoder::new(),
            block: Vec::with_capacity(512),
            at: 0,
            left: 0,
            phase: SpinPhase::LoggingIn,
            login_status: None,
            skipped_images: 0,
            stray_responses: 0,
            ignored: 0,
            out_of_range: 0,
            trading_statuses: 0,
        }
    }

    pub fn phase(&self) -> SpinPhase {
        self.phase
    }

    /// The Login Response's status, once read (R5c: `B` does not count for
    /// the unit's pace).
    pub fn login_status(&self) -> Option<LoginStatus> {
        self.login_status
    }

    /// Spin Image Available messages skipped: too old for `n0`, or read
    /// while a request was outstanding or the spin was running.
    pub fn skipped_images(&self) -> u64 {
        self.skipped_images
    }

    /// Spin Responses read with no request outstanding (R5c step 4:
    /// dropped and counted).
    pub fn stray_responses(&self) -> u64 {
        self.stray_responses
    }

    /// PITCH messages, unknown types and Spin Finished read outside a
    /// spin: they have no place there and are skipped.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Spin Responses `O` (the request is asked again for a later image).
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range
    }

    /// Trading Status messages in the spin (R5c: a spin with none is
    /// counted as `spins_without_status`).
    pub fn trading_statuses(&self) -> u32 {
        self.trading_statuses
    }

    /// R5c step 3: whether an image reflecting the unit up to `s` can be
    /// continued by the held datagrams without a hole (`S ≥ n0 - 1`).
    fn usable(&self, s: u32) -> bool {
        s as u64 + 1 >= self.n0
    }

    /// Makes the decoder's next block current; `false` when none is whole.
    fn next_block(&mut self) -> Result<bool, ImageError> {
        let block = match self.decoder.next_block() {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(false),
            Err(e) => return Err(ImageError::Malformed(format!("Spin Server block: {e}"))),
        };
        self.block.clear();
        self.block.extend_from_slice(block.body);
        self.at = 0;
        self.left = block.header.count;
        Ok(true)
    }
}

impl ImageCodec for SpinCodec {
    /// R5c step 2: the same Login as the GRP's, alone in a block.
    fn login(&mut self, out: &mut Vec<u8>) -> Result<(), ImageError> {
        encode_block(&[SessionMessage::Login(self.login)], out)
            .map_err(|e| ImageError::Closed(format!("sending the login: {e}")))
    }

    /// R5c step 2: a block with Hdr Count 0.
    fn heartbeat(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&HEARTBEAT);
    }

    /// R5c: no logout in the protocol; the client closes the connection.
    fn logout(&mut self, _out: &mut Vec<u8>) {}

    fn push(&mut self, bytes: &[u8]) {
        self.decoder.push(bytes);
    }

    fn next_event(&mut self, out: &mut Vec<u8>) -> Result<Option<ImageEvent<'_>>, ImageError> {
        if self.left == 0 {
            if !self.next_block()? {
                return Ok(None);
            }
            if self.left == 0 {
                // A heartbeat.
                return Ok(Some(ImageEvent::Heard));
            }
        }
        // The block's framing was checked: its messages fill it.
        let start = self.at;
        let len = self.block[start] as usize;
        self.at += len;
        self.left -= 1;
        let msg = decode_message(&self.block[start..start + len])
            .map_err(|e| ImageError::Malformed(format!("Spin Server message: {e}")))?;
        let event = match (msg, self.phase) {
            (SessionMessage::LoginResponse(status), SpinPhase::LoggingIn) => {
                self.login_status = Some(status);
                if status != LoginStatus::Accepted {
                    return Err(ImageError::Rejected(format!(
                        "Login Response {:?} ({status:?})",
                        status.byte() as char
                    )));
                }
                self.phase = SpinPhase::Waiting;
                ImageEvent::LoggedIn { session: None }
            }
            (SessionMessage::LoginResponse(_), _) => {
                return Err(ImageError::Malformed("a second Login Response".into()))
            }
            (_, SpinPhase::LoggingIn) => {
                return Err(ImageError::Malformed(
                    "a message before the Login Response".into(),
                ))
            }
            (SessionMessage::SpinImageAvailable { sequence }, SpinPhase::Waiting)
                if self.usable(sequence) =>
            {
                // R5c step 3: ask for the first image the held datagrams
                // can continue.
                encode_block(&[SessionMessage::SpinRequest { sequence }], out)
                    .expect("one Spin Request always fits a block");
                self.phase = SpinPhase::Requested { sequence };
                ImageEvent::Heard
            }
            (SessionMessage::SpinImageAvailable { .. }, _) => {
                // R5c steps 3 and 4: too old, or a request or spin is
                // under way.
                self.skipped_images += 1;
                ImageEvent::Heard
            }
            (
                SessionMessage::SpinResponse {
                    order_count,
                    status,
                    ..
                },
                SpinPhase::Requested { sequence },
            ) => {
                // R5c step 4: the next response answers the request,
                // whatever its own sequence field says.
                match status {
                    SpinStatus::Accepted => {
                        self.phase = SpinPhase::Spinning {
                            sequence,
                            order_count,
                            adds: 0,
                        };
                    }
                    SpinStatus::OutOfRange => {
                        self.out_of_range += 1;
                        self.phase = SpinPhase::Waiting;
                    }
                    SpinStatus::AlreadyRunning => {
                        return Err(ImageError::RequestRefused(format!(
                            "Spin Response S for {sequence}: a spin is already running on this connection"
                        )))
                    }
                    SpinStatus::Other(b) => {
                        return Err(ImageError::Malformed(format!(
                            "Spin Response status {:?} for {sequence} is not A, O or S",
                            b as char
                        )))
                    }
                }
                ImageEvent::Heard
            }
            (SessionMessage::SpinResponse { .. }, _) => {
                // R5c step 4: no request outstanding.
                self.stray_responses += 1;
                ImageEvent::Heard
            }
            (
                SessionMessage::SpinFinished { sequence: got },
                SpinPhase::Spinning {
                    sequence,
                    order_count,
                    adds,
                },
            ) => {
                // R5c "On Spin Finished": its sequence and the Add Order
                // count must match.
                if got != sequence {
                    return Err(ImageError::Malformed(format!(
                        "Spin Finished {got} for a spin of {sequence}"
                    )));
                }
                if adds != order_count {
                    return Err(ImageError::Malformed(format!(
                        "the spin of {sequence} held {adds} Add Orders, its Spin Response announced {order_count}"
                    )));
                }
                self.phase = SpinPhase::Finished;
                ImageEvent::End {
                    next: sequence as u64 + 1,
                }
            }
            (
                SessionMessage::Pitch(_) | SessionMessage::Unknown { .. },
                SpinPhase::Spinning { .. },
            ) => {
                // R5c step 5: the spin's own messages, raw, in order.
                let kind = self.block[start + 1];
                if let SpinPhase::Spinning { adds, .. } = &mut self.phase {
                    if matches!(kind, TYPE_ADD_LONG | TYPE_ADD_SHORT | TYPE_ADD_EXPANDED) {
                        *adds = adds.saturating_add(1);
                    }
                }
                if kind == TYPE_TRADING_STATUS {
                    self.trading_statuses += 1;
                }
                ImageEvent::Message(&self.block[start..start + len])
            }
            (
                SessionMessage::Pitch(_)
                | SessionMessage::Unknown { .. }
                | SessionMessage::SpinFinished { .. },
                _,
            ) => {
                self.ignored += 1;
                ImageEvent::Heard
            }
            (
                m @ (SessionMessage::GapRequest { .. }
                | SessionMessage::GapResponse { .. }
                | SessionMessage::Login(_)
                | SessionMessage::SpinRequest { .. }),
                _,
            ) => {
                return Err(ImageError::Malformed(format!(
                    "message type 0x{:02x} has no place from a Spin Server",
                    m.kind()
                )))
            }
        };
        Ok(Some(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::cboe_pitch::messages::{Message, Width};
    use crate::wire::Symbol;

    fn login() -> Login {
        Login::new("0023", "BATS", "s1bats").unwrap()
    }

    fn block(msgs: &[SessionMessage]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_block(msgs, &mut out).unwrap();
        out
    }

    fn add(order_id: u64) -> SessionMessage {
        SessionMessage::Pitch(Message::AddOrder {
            width: Width::Short,
            offset: 5,
            order_id,
            side: b'B',
            shares: 100,
            symbol: Symbol::parse("A").unwrap(),
            price: 20_000_000_000,
            flags: 0,
        })
    }

    fn status() -> SessionMessage {
        SessionMessage::Pitch(Message::TradingStatus {
            offset: 5,
            symbol: Symbol::parse("A").unwrap(),
            status: b'T',
            reg_sho: b'0',
        })
    }

    /// Every event of `bytes`, owned; `out` collects what the codec wrote.
    fn events(c: &mut SpinCodec, bytes: &[u8], out: &mut Vec<u8>) -> Result<Vec<Ev>, ImageError> {
        c.push(bytes);
        let mut v = Vec::new();
        while let Some(e) = c.next_event(out)? {
            v.push(match e {
                ImageEvent::Heard => Ev::Heard,
                ImageEvent::LoggedIn { .. } => Ev::LoggedIn,
                ImageEvent::Message(m) => Ev::Message(m.to_vec()),
                ImageEvent::End { next } => Ev::End(next),
            });
        }
        Ok(v)
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Ev {
        Heard,
        LoggedIn,
        Message(Vec<u8>),
        End(u64),
    }

    fn raw(m: SessionMessage) -> Vec<u8> {
        let mut v = Vec::new();
        m.encode(&mut v).unwrap();
        v
    }

    fn available(sequence: u32) -> SessionMessage {
        SessionMessage::SpinImageAvailable { sequence }
    }
    const ACCEPTED: SessionMessage = SessionMessage::LoginResponse(LoginStatus::Accepted);

    fn response(sequence: u32, order_count: u32, status: u8) -> SessionMessage {
        SessionMessage::SpinResponse {
            sequence,
            order_count,
            status: SpinStatus::from_byte(status),
        }
    }

    #[test]
    fn logs_in_asks_for_the_first_usable_image_and_yields_the_spin() {
        let mut c = SpinCodec::new(login(), 100);
        let mut out = Vec::new();
        c.login(&mut out).unwrap();
        assert_eq!(out, block(&[SessionMessage::Login(login())]));
        out.clear();
        c.heartbeat(&mut out);
        assert_eq!(out, HEARTBEAT);
        out.clear();

        // 98 is too old for n0 = 100 (S ≥ n0 - 1 = 99); 99 is asked for.
        let mut server = block(&[ACCEPTED]);
        server.extend(block(&[available(98)]));
        server.extend(block(&[]));
        server.extend(block(&[available(99)]));
        server.extend(block(&[available(120)]));
        let ev = events(&mut c, &server, &mut out).unwrap();
        assert_eq!(
            ev,
            [Ev::LoggedIn, Ev::Heard, Ev::Heard, Ev::Heard, Ev::Heard]
        );
        assert_eq!(
            out,
            block(&[SessionMessage::SpinRequest { sequence: 99 }]),
            "one request, for 99 only"
        );
        assert_eq!(c.phase(), SpinPhase::Requested { sequence: 99 });
        assert_eq!(c.skipped_images(), 2);
        out.clear();

        let time = SessionMessage::Pitch(Message::Time { seconds: 36_000 });
        let mut server = block(&[response(99, 2, b'A')]);
        server.extend(block(&[time, add(1), available(121), status()]));
        server.extend(block(&[
            add(2),
            SessionMessage::SpinFinished { sequence: 99 },
        ]));
        let ev = events(&mut c, &server, &mut out).unwrap();
        assert_eq!(
            ev,
            [
                Ev::Heard,
                Ev::Message(raw(time)),
                Ev::Message(raw(add(1))),
                Ev::Heard,
                Ev::Message(raw(status())),
                Ev::Message(raw(add(2))),
                Ev::End(100),
            ]
        );
        assert!(out.is_empty(), "nothing more is asked");
        assert_eq!(c.phase(), SpinPhase::Finished);
        assert_eq!(c.trading_statuses(), 1);
        assert_eq!(c.skipped_images(), 3, "the image offered during the spin");
        c.logout(&mut out);
        assert!(out.is_empty(), "R5c: no logout");
    }

    #[test]
    fn out_of_range_waits_for_the_next_image_and_a_refusal_may_carry_0() {
        let mut c = SpinCodec::new(login(), 1);
        let mut out = Vec::new();
        let mut server = block(&[ACCEPTED, available(0)]);
        server.extend(block(&[response(0, 0, b'O')]));
        let ev = events(&mut c, &server, &mut out).unwrap();
        assert_eq!(ev, [Ev::LoggedIn, Ev::Heard, Ev::Heard]);
        assert_eq!(out, block(&[SessionMessage::SpinRequest { sequence: 0 }]));
        assert_eq!(c.phase(), SpinPhase::Waiting);
        assert_eq!(c.out_of_range(), 1);
        out.clear();
        // A response with no request outstanding is dropped and counted.
        let mut server = block(&[response(5, 0, b'A')]);
        server.extend(block(&[available(7)]));
        // The answer's own sequence field is 0: it still answers 7.
        server.extend(block(&[response(0, 0, b'A')]));
        server.extend(block(&[SessionMessage::SpinFinished { sequence: 7 }]));
        let ev = events(&mut c, &server, &mut out).unwrap();
        assert_eq!(ev, [Ev::Heard, Ev::Heard, Ev::Heard, Ev::End(8)]);
        assert_eq!(c.stray_responses(), 1);
        assert_eq!(out, block(&[SessionMessage::SpinRequest { sequence: 7 }]));
        assert_eq!(c.trading_statuses(), 0, "a spin without Trading Status");
    }

    fn fails(n0: u64, blocks: &[Vec<SessionMessage>]) -> ImageError {
        let mut c = SpinCodec::new(login(), n0);
        let mut out = Vec::new();
        let mut server = Vec::new();
        for b in blocks {
            server.extend(block(b));
        }
        events(&mut c, &server, &mut out).unwrap_err()
    }

    #[test]
    fn each_failure_of_r5c_is_an_error() {
        let req = vec![ACCEPTED, available(10)];
        let finished = |sequence| vec![SessionMessage::SpinFinished { sequence }];
        // (what, the server's blocks, a refusal of the login or of the
        // request (true) or malformed)
        let cases: Vec<(&str, Vec<Vec<SessionMessage>>, bool)> = vec![
            (
                "login N",
                vec![vec![SessionMessage::LoginResponse(
                    LoginStatus::NotAuthorized,
                )]],
                true,
            ),
            (
                "spin already running",
                vec![req.clone(), vec![response(0, 0, b'S')]],
                true,
            ),
            (
                "undocumented spin status",
                vec![req.clone(), vec![response(10, 0, b'X')]],
                false,
            ),
            (
                "Spin Finished of another sequence",
                vec![req.clone(), vec![response(10, 0, b'A')], finished(11)],
                false,
            ),
            (
                "fewer Add Orders than announced",
                vec![
                    req.clone(),
                    vec![response(10, 2, b'A'), add(1)],
                    finished(10),
                ],
                false,
            ),
            (
                "more Add Orders than announced",
                vec![
                    req.clone(),
                    vec![response(10, 0, b'A'), add(1)],
                    finished(10),
                ],
                false,
            ),
            (
                "a Gap Response on a spin connection",
                vec![
                    vec![ACCEPTED],
                    vec![SessionMessage::GapResponse {
                        unit: 1,
                        sequence: 1,
                        count: 1,
                        status: crate::venue::cboe_pitch::session::GapStatus::Accepted,
                    }],
                ],
                false,
            ),
            (
                "a client's Spin Request from the server",
                vec![
                    vec![ACCEPTED],
                    vec![SessionMessage::SpinRequest { sequence: 3 }],
                ],
                false,
            ),
            (
                "data before the Login Response",
                vec![vec![available(10)]],
                false,
            ),
        ];
        for (what, blocks, refused) in cases {
            let e = fails(10, &blocks);
            let ok = if refused {
                matches!(e, ImageError::Rejected(_) | ImageError::RequestRefused(_))
            } else {
                matches!(e, ImageError::Malformed(_))
            };
            assert!(ok, "{what}: {e:?}");
        }
        // Bytes that do not parse: Hdr Length below 8.
        assert!(
            matches!(
                fails(10, &[req.clone(), vec![response(0, 0, b'S')]]),
                ImageError::RequestRefused(_)
            ),
            "R5c: Spin Response S is a refusal of the request, not of the login"
        );
        let mut c = SpinCodec::new(login(), 1);
        c.push(&[4, 0, 0, 0]);
        assert!(matches!(
            c.next_event(&mut Vec::new()),
            Err(ImageError::Malformed(_))
        ));
    }

    #[test]
    fn a_login_b_is_kept_for_the_pace() {
        let mut c = SpinCodec::new(login(), 1);
        let server = block(&[SessionMessage::LoginResponse(LoginStatus::SessionInUse)]);
        assert!(matches!(
            events(&mut c, &server, &mut Vec::new()),
            Err(ImageError::Rejected(_))
        ));
        assert_eq!(c.login_status(), Some(LoginStatus::SessionInUse));
    }

    #[test]
    fn pitch_outside_a_spin_is_skipped() {
        let mut c = SpinCodec::new(login(), 1);
        let mut out = Vec::new();
        let server = block(&[
            ACCEPTED,
            SessionMessage::Pitch(Message::Time { seconds: 1 }),
            SessionMessage::SpinFinished { sequence: 3 },
        ]);
        let ev = events(&mut c, &server, &mut out).unwrap();
        assert_eq!(ev, [Ev::LoggedIn, Ev::Heard, Ev::Heard]);
        assert_eq!(c.ignored(), 2);
        assert_eq!(c.phase(), SpinPhase::Waiting);
    }

    #[test]
    fn any_split_of_the_server_bytes_gives_the_same_events() {
        let mut server = block(&[ACCEPTED, available(4)]);
        server.extend(block(&[response(4, 1, b'A'), add(9)]));
        server.extend(block(&[SessionMessage::SpinFinished { sequence: 4 }]));
        let mut whole_out = Vec::new();
        let whole = events(&mut SpinCodec::new(login(), 5), &server, &mut whole_out).unwrap();
        assert_eq!(whole.last(), Some(&Ev::End(5)));
        for cut in 0..=server.len() {
            let mut c = SpinCodec::new(login(), 5);
            let mut out = Vec::new();
            let mut got = events(&mut c, &server[..cut], &mut out).unwrap();
            got.extend(events(&mut c, &server[cut..], &mut out).unwrap());
            assert_eq!(got, whole, "cut at {cut}");
            assert_eq!(out, whole_out);
        }
    }
}
