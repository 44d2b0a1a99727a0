//! Closing connections without losing the data still on its way to the peer.
//!
//! When a server closes a socket whose receive buffer still holds bytes it has
//! not read (HTTP/2 WINDOW_UPDATEs and PINGs the client sent while the last
//! response streamed out), the kernel answers with RST instead of FIN, and the
//! client's kernel drops whatever response bytes the client had not read yet: a
//! DoGet that the server finished can fail on the client with "connection reset".
//! A [`LingeringStream`] closes the way a careful server does: it sends FIN
//! (`shutdown(SHUT_WR)`), reads and discards until the peer closes too (for at
//! most [`LINGER`]), and only then lets the socket go.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Longest a closed connection waits for the peer's FIN.
pub const LINGER: Duration = Duration::from_secs(2);

/// The closes still lingering, so a server can wait for them before it exits.
#[derive(Debug, Clone, Default)]
pub struct Closes {
    inner: Arc<(AtomicUsize, Notify)>,
}

impl Closes {
    /// Waits until no close is lingering.
    pub async fn wait(&self) {
        loop {
            let notified = self.inner.1.notified();
            if self.inner.0.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    fn begin(&self) -> CloseGuard {
        self.inner.0.fetch_add(1, Ordering::AcqRel);
        CloseGuard(self.clone())
    }
}

struct CloseGuard(Closes);

impl Drop for CloseGuard {
    fn drop(&mut self) {
        if self.0.inner.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.inner.1.notify_waiters();
        }
    }
}

/// A TCP stream that closes gracefully when dropped (see the module docs).
#[derive(Debug)]
pub struct LingeringStream {
    inner: Option<TcpStream>,
    closes: Closes,
}

impl LingeringStream {
    /// Wraps an accepted stream; its close is counted in `closes`.
    pub fn new(stream: TcpStream, closes: Closes) -> Self {
        Self {
            inner: Some(stream),
            closes,
        }
    }

    fn stream(self: Pin<&mut Self>) -> Pin<&mut TcpStream> {
        Pin::new(self.get_mut().inner.as_mut().expect("present until drop"))
    }
}

impl Drop for LingeringStream {
    fn drop(&mut self) {
        let (Some(mut stream), Ok(runtime)) =
            (self.inner.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let guard = self.closes.begin();
        runtime.spawn(async move {
            let _guard = guard;
            if stream.shutdown().await.is_err() {
                return;
            }
            let mut sink = [0u8; 8192];
            let drain = async {
                while let Ok(n) = stream.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER, drain).await;
        });
    }
}

impl AsyncRead for LingeringStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl AsyncWrite for LingeringStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper shuts down the write side when it is done; the drain on drop
        // still reads what the peer sends until it closes.
        self.stream().poll_shutdown(cx)
    }
}

impl Connected for LingeringStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.as_ref().map_or(
            TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
            Connected::connect_info,
        )
    }
}
