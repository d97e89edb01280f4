//! The systemd notify protocol (`sd_notify(3)`), without libsystemd: one
//! datagram of `KEY=VALUE` lines to the Unix socket named by
//! `$NOTIFY_SOCKET` (a path, or an abstract name written with a leading
//! `@`). Without `$NOTIFY_SOCKET` (not started by systemd) every call is a
//! no-op.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    /// From `$NOTIFY_SOCKET`; disabled when it is unset or empty.
    pub fn from_env() -> io::Result<Notifier> {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(v) if !v.is_empty() => Notifier::to(v.to_str().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not UTF-8")
            })?),
            _ => Ok(Notifier::disabled()),
        }
    }

    /// To the socket `name`: a filesystem path, or `@name` for the
    /// abstract namespace.
    pub fn to(name: &str) -> io::Result<Notifier> {
        let addr = match name.strip_prefix('@') {
            Some(abs) => SocketAddr::from_abstract_name(abs.as_bytes())?,
            None if name.starts_with('/') => SocketAddr::from_pathname(name)?,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("NOTIFY_SOCKET {name:?} is neither an absolute path nor @abstract"),
                ))
            }
        };
        let sock = UnixDatagram::unbound()?;
        Ok(Notifier {
            target: Some((sock, addr)),
        })
    }

    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `state` (newline-separated assignments) as one datagram.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        match &self.target {
            Some((sock, addr)) => sock.send_to_addr(state.as_bytes(), addr).map(|_| ()),
            None => Ok(()),
        }
    }

    /// READY=1 with a human status line.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    pub fn watchdog(&self) -> io::Result<()> {
        self.notify("WATCHDOG=1")
    }

    pub fn stopping(&self) -> io::Result<()> {
        self.notify("STOPPING=1\nSTATUS=stopping")
    }

    /// RELOADING=1 (followed by `ready` once the reload is done). systemd
    /// wants the monotonic time of the reload start with it.
    pub fn reloading(&self) -> io::Result<()> {
        self.notify(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
            monotonic_usec()
        ))
    }

    pub fn status(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("STATUS={}", one_line(status)))
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The watchdog period systemd asks for (`$WATCHDOG_USEC`), when it is
/// meant for this process (`$WATCHDOG_PID` unset or ours).
pub fn watchdog_timeout() -> Option<Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
        if pid.to_str()?.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        n.ready("2 feeds").unwrap();
        n.watchdog().unwrap();
        let mut buf = [0u8; 256];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=2 feeds");
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("tickgate-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        let n = Notifier::to(&format!("@{name}")).unwrap();
        n.stopping().unwrap();
        let mut buf = [0u8; 256];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STOPPING=1\nSTATUS=stopping");
    }

    #[test]
    fn relative_names_are_refused_and_disabled_is_silent() {
        assert!(Notifier::to("relative/sock").is_err());
        let n = Notifier::disabled();
        assert!(!n.is_enabled());
        n.ready("x").unwrap();
    }
}
