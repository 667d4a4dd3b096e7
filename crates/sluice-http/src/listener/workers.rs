//! Worker threads: one listening socket per worker on one port
//! (`SO_REUSEPORT`, so the kernel spreads new connections across them),
//! each worker a current-thread runtime that accepts and serves its own
//! connections, so that a request never wakes another thread.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Connections the kernel queues per socket before the server accepts them
/// (tokio's default).
const BACKLOG: i32 = 1_024;

/// The sidecar's listening sockets, bound and not yet served: see [`bind`]
/// and [`crate::serve_workers`].
#[derive(Debug)]
pub struct Listeners {
    pub(crate) sockets: Vec<std::net::TcpListener>,
    addr: SocketAddr,
}

impl Listeners {
    /// The address bound (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many workers will serve them.
    pub fn workers(&self) -> usize {
        self.sockets.len()
    }
}

/// Binds `addr` for `workers` worker threads (at least one). On Linux each
/// worker gets its own socket on the port; elsewhere, where `SO_REUSEPORT`
/// does not spread connections, the workers share one socket.
///
/// A port something else listens on is refused (`AddrInUse`), as a plain
/// bind refuses it: the kernel lets any process of the same user join a
/// port its sockets share with `SO_REUSEPORT`, so a second sidecar started
/// on the first one's port would otherwise take half its connections, each
/// spending the same credentials' limits on its own.
pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Listeners> {
    let workers = workers.max(1);
    let spread = cfg!(target_os = "linux");
    if spread && workers > 1 && addr.port() != 0 {
        // A socket without the option binds only a port nobody holds; it
        // is closed before the workers' sockets take the port.
        drop(socket(addr, false)?);
    }
    let first = socket(addr, spread && workers > 1)?;
    let addr = first.local_addr()?;
    let mut sockets = vec![first];
    for _ in 1..workers {
        let next = if spread {
            socket(addr, true)?
        } else {
            sockets[0].try_clone()?
        };
        sockets.push(next);
    }
    Ok(Listeners { sockets, addr })
}

fn socket(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's `TcpListener::bind` does: a restart need not wait for
    // the last connections' TIME_WAIT.
    socket.set_reuse_address(true)?;
    #[cfg(target_os = "linux")]
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = reuse_port;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_another_server_listens_on_is_refused() {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        for (first, second) in [(2, 2), (2, 1), (1, 2)] {
            let taken = bind(any, first).unwrap();
            let error = bind(taken.local_addr(), second).unwrap_err();
            assert_eq!(
                error.kind(),
                io::ErrorKind::AddrInUse,
                "{first} workers, then {second}"
            );
            assert_eq!(taken.workers(), first);
        }
    }

    #[test]
    fn a_free_port_is_bound_once_per_worker_and_freed_with_them() {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        let listeners = bind(any, 3).unwrap();
        let addr = listeners.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(listeners.workers(), 3);
        for socket in &listeners.sockets {
            assert_eq!(socket.local_addr().unwrap(), addr);
        }
        drop(listeners);
        let again = bind(addr, 2).unwrap();
        assert_eq!(again.local_addr(), addr);
    }
}
