//! The TCP connect that the recovery clients share (the Gap Request
//! Proxy, R4c; the image servers, R5 and R5c).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Connects to `address` within `timeout`, refusing a socket connected to
/// itself. With nothing listening at a loopback address whose port lies
/// in the kernel's ephemeral range, a connect can be given that very port
/// as its own and "succeed" by simultaneous open: the client would then
/// read its own Login as the server's answer, and hold the port the
/// server needs once it starts. Such a connection is closed and reported
/// as refused, like any connect that found no listener.
pub fn connect(address: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    refuse_itself(TcpStream::connect_timeout(address, timeout)?, address)
}

fn refuse_itself(tcp: TcpStream, address: &SocketAddr) -> io::Result<TcpStream> {
    if tcp.local_addr()? == tcp.peer_addr()? {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("nothing listens at {address} (the connect reached itself)"),
        ));
    }
    Ok(tcp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Socket, Type};
    use std::net::TcpListener;

    #[test]
    fn a_listener_is_reached() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let tcp = connect(&at, Duration::from_secs(1)).unwrap();
        assert_eq!(tcp.peer_addr().unwrap(), at);
    }

    /// The kernel's self-connect, built by hand: a socket bound to a port
    /// and connected to that same address.
    #[test]
    fn a_socket_connected_to_itself_is_refused() {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&any.into()).unwrap();
        let own = socket.local_addr().unwrap().as_socket().unwrap();
        socket.connect(&own.into()).unwrap();
        let err = refuse_itself(socket.into(), &own).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        assert!(err.to_string().contains("reached itself"), "{err}");
    }
}
