//! Noticing that a client left. The HTTP server keeps polling a response body after its
//! client closed the connection, and learns of the departure only when it next writes: a
//! streamed answer waiting for a silent model server would keep the model server's connection
//! (and its generation) alive until then. The acceptor here wraps each connection so that the
//! end of its read side (the client closing, or a failed read) is published, keyed by the
//! client's address; streamed bodies and whole-answer collection end when it is.
//!
//! A client that half-closes its connection (shuts its write side down and keeps reading) is
//! taken as gone for streamed answers; HTTP/1.1 clients do not do this in practice.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use poem::http::uri::Scheme;
use poem::listener::{Acceptor, TcpAcceptor};
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::error::ApiError;

type Registry = Arc<Mutex<HashMap<SocketAddr, watch::Receiver<bool>>>>;

/// The open connections by client address, each with its "closed" signal.
#[derive(Clone, Default)]
pub struct Connections(Registry);

impl Connections {
    /// The signal of the connection from `addr` (none when unknown: never fires).
    pub fn watch(&self, addr: Option<&SocketAddr>) -> ClientWatch {
        let receiver = addr.and_then(|addr| {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(addr)
                .cloned()
        });
        ClientWatch(receiver)
    }
}

/// Whether one request's client is still there.
#[derive(Clone)]
pub struct ClientWatch(Option<watch::Receiver<bool>>);

impl ClientWatch {
    /// Completes when the client's connection closed; never for an unknown connection.
    pub async fn gone(self) {
        match self.0 {
            // An error means the connection itself was dropped: gone as well.
            Some(mut closed) => {
                let _ = closed.wait_for(|closed| *closed).await;
            }
            None => std::future::pending().await,
        }
    }
}

/// Runs `work` for a request unless its client leaves first: then `work` is dropped (with
/// whatever it was waiting for, such as a model server's answer) and the request ends with an
/// error no one reads.
pub async fn unless_client_leaves<T>(
    request: &poem::Request,
    work: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let Some(client) = request.data::<ClientWatch>().cloned() else {
        return work.await;
    };
    tokio::select! {
        result = work => result,
        () = client.gone() => Err(ApiError::Stream("the client closed the connection".to_owned())),
    }
}

/// [`TcpAcceptor`] whose connections publish their closing in [`Connections`].
pub struct WatchedAcceptor {
    inner: TcpAcceptor,
    connections: Connections,
}

impl WatchedAcceptor {
    pub fn new(inner: TcpAcceptor, connections: Connections) -> Self {
        Self { inner, connections }
    }
}

impl Acceptor for WatchedAcceptor {
    type Io = WatchedStream;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> io::Result<(WatchedStream, LocalAddr, RemoteAddr, Scheme)> {
        let (io, local_addr, remote_addr, scheme) = self.inner.accept().await?;
        // Streamed answers are many small writes: under Nagle's algorithm each one after the
        // head waits for the client's delayed ACK (40 ms on Linux). Best effort: a connection
        // that refuses it is still served.
        let _ = io.set_nodelay(true);
        let (closed, receiver) = watch::channel(false);
        let addr = remote_addr.as_socket_addr().copied();
        if let Some(addr) = addr {
            self.connections
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(addr, receiver);
        }
        let stream = WatchedStream {
            io,
            closed,
            addr,
            registry: Arc::clone(&self.connections.0),
        };
        Ok((stream, local_addr, remote_addr, scheme))
    }
}

/// A client connection that reports the end of its read side.
pub struct WatchedStream {
    io: TcpStream,
    closed: watch::Sender<bool>,
    addr: Option<SocketAddr>,
    registry: Registry,
}

impl Drop for WatchedStream {
    fn drop(&mut self) {
        self.closed.send_replace(true);
        if let Some(addr) = self.addr {
            let mut registry = self
                .registry
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // A new connection from the same address may have replaced this one already.
            if registry
                .get(&addr)
                .is_some_and(|receiver| receiver.same_channel(&self.closed.subscribe()))
            {
                registry.remove(&addr);
            }
        }
    }
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        let at_end = matches!(result, Poll::Ready(Ok(()))) && room && buf.filled().len() == before;
        if at_end || matches!(result, Poll::Ready(Err(_))) {
            self.closed.send_replace(true);
        }
        result
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
