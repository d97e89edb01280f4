//! The re-request socket of one feed (recovery.md R4), I/O shell: one UDP
//! socket, non-blocking, from which the feed's requests leave and on which
//! the servers' answers come back. Which request to send and when is the
//! core's (`Feed::poll_request`); this file only moves bytes and checks
//! that an answer's source is a configured server.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};

use anyhow::Context;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Largest answer read; a MoldUDP64 answer fits one Ethernet frame, and a
/// longer datagram is cut (then invalid, counted by the feed).
pub const MAX_ANSWER: usize = 65_536;

pub struct RerequestSocket {
    socket: Socket,
    servers: Vec<SocketAddr>,
    buf: Vec<u8>,
    /// Requests the kernel refused (logged at most once a second).
    pub send_errors: u64,
    last_error_log: i64,
}

/// What one datagram read from the socket is.
pub enum Received<'a> {
    /// From a configured server.
    Answer(&'a [u8]),
    /// From any other address: the caller counts and drops it.
    Foreign,
}

impl RerequestSocket {
    /// Binds an ephemeral port on the wildcard address (the kernel picks
    /// the interface by route to each server).
    pub fn open(servers: &[SocketAddr]) -> anyhow::Result<RerequestSocket> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .context("re-request socket")?;
        socket
            .bind(&SockAddr::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
            .context("binding the re-request socket")?;
        socket
            .set_nonblocking(true)
            .context("re-request socket non-blocking")?;
        Ok(RerequestSocket {
            socket,
            servers: servers.to_vec(),
            buf: vec![0u8; MAX_ANSWER],
            send_errors: 0,
            last_error_log: i64::MIN,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The local address requests leave from (answers come back to it).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("re-request socket has no IP address"))
    }

    /// Sends `request` to server `server` (an index into the configured
    /// list). A failure is counted and logged, never fatal: the core asks
    /// again after its timeout.
    pub fn send(&mut self, server: usize, request: &[u8], now: i64) {
        let Some(addr) = self.servers.get(server) else {
            return;
        };
        if let Err(e) = self.socket.send_to(request, &SockAddr::from(*addr)) {
            self.send_errors += 1;
            if now.saturating_sub(self.last_error_log) >= 1_000_000_000 {
                self.last_error_log = now;
                tracing::warn!(server = %addr, error = %e, "re-request not sent");
            }
        }
    }

    /// Reads one waiting datagram, if any (non-blocking).
    pub fn recv(&mut self) -> io::Result<Option<Received<'_>>> {
        // SAFETY: recv_from writes at most buf.len() bytes into buf, which
        // is initialised memory viewed as MaybeUninit.
        let uninit = unsafe {
            std::slice::from_raw_parts_mut(
                self.buf.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                self.buf.len(),
            )
        };
        let got = loop {
            match self.socket.recv_from(uninit) {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // An ICMP port unreachable from a server that is down is
                // reported on the next read: not fatal, read on.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        };
        let (n, from) = got;
        if from.as_socket().is_some_and(|a| self.servers.contains(&a)) {
            Ok(Some(Received::Answer(&self.buf[..n.min(self.buf.len())])))
        } else {
            Ok(Some(Received::Foreign))
        }
    }
}
