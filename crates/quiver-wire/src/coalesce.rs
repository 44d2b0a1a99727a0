//! Few large socket writes and reads where HTTP/2 makes many small ones.
//!
//! h2 writes each frame it sends with a write of its own and flushes after
//! each: a peer that keeps HTTP/2's default 16 KiB maximum frame (grpc-go,
//! grpc-java, so Go, Java, ADBC and JDBC Flight clients) gets 65,536 `writev`
//! calls per GiB, where gRPC C++ gathers the frames ready to go into writes
//! of hundreds of KiB. And h2 reads into what is left of its frame buffer,
//! 8 KiB at a time when the frames are small: 131,072 `read` calls per GiB
//! sent to it in 16 KiB frames. [`Coalesced`] sits between the connection
//! and the socket and does what gRPC C++ does:
//!
//! - a small write (under [`DIRECT`]: a 16 KiB frame with its 9-byte head,
//!   HEADERS, WINDOW_UPDATE, PING) is copied into a buffer of [`CAPACITY`];
//! - a large one (a frame to a peer that accepts 1 MiB frames) is never
//!   copied: it leaves in one `writev` behind what the buffer holds;
//! - a flush right after new bytes were buffered is put off to the
//!   connection task's next turn (the task is woken, so there is one), when
//!   the frames that became ready meanwhile join it; a flush with nothing new
//!   since the last writes the buffer out. h2 flushes at the end of every
//!   turn of its connection task, so a response waits for at most one turn of
//!   the task, never for more data;
//! - a read first writes out what is gathered: a caller that reads may wait
//!   for the answer to what it wrote, with no flush to follow (a TLS
//!   handshake's flight);
//! - a small read (room for less than [`DIRECT`]) is served from a buffer
//!   filled by one read of up to [`CAPACITY`]; a large one reads the socket
//!   straight into the caller's memory.
//!
//! The buffers are freed once emptied, so an idle connection holds none.
//! Both ends use it: the server under every accepted connection (below TLS,
//! so TLS records gather too), and the clients through [`connect`].

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

/// Bytes a connection gathers before they go out in one write, and reads in
/// one read for small reads: 256 KiB.
pub const CAPACITY: usize = 256 << 10;

/// Writes at least this large (64 KiB) are not copied: they go to the socket
/// in one `writev` behind what is gathered. Reads with room for this much go
/// to the socket directly.
pub const DIRECT: usize = 64 << 10;

/// Most slices one `writev` is given: what is gathered and the caller's.
const MAX_SLICES: usize = 64;

/// A stream whose small writes are gathered into few large ones, and whose
/// small reads are served from few large ones (see the module docs).
#[derive(Debug)]
pub struct Coalesced<T> {
    inner: T,
    /// Bytes accepted from the caller and not written yet, from `written` on.
    buf: Vec<u8>,
    written: usize,
    /// Whether bytes were gathered since the last flush.
    fresh: bool,
    /// Bytes read from the socket and not yet given to the caller.
    read: BytesMut,
}

impl<T> Coalesced<T> {
    /// Wraps `inner`; the buffers are allocated when first needed.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            written: 0,
            fresh: false,
            read: BytesMut::new(),
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn held(&self) -> usize {
        self.buf.len() - self.written
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.written = 0;
    }

    /// Gives the caller what was read ahead, as much as it has room for.
    fn serve(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.read.len().min(buf.remaining());
        buf.put_slice(&self.read[..n]);
        self.read.advance(n);
        if self.read.is_empty() {
            self.read = BytesMut::new();
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes what is gathered until none is left, and frees the buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.held() > 0 {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf = Vec::new();
        self.written = 0;
        self.fresh = false;
        Poll::Ready(Ok(()))
    }

    /// Writes what is gathered and then `bufs`, in one `writev` where the
    /// socket takes it all; returns how much of `bufs` was written.
    fn poll_write_behind(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            let held = self.held();
            if held == 0 {
                return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
            }
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            slices[0] = IoSlice::new(&self.buf[self.written..]);
            let count = 1 + bufs.len().min(MAX_SLICES - 1);
            slices[1..count].copy_from_slice(&bufs[..count - 1]);
            let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, &slices[..count]))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            if n < held {
                self.written += n;
                continue;
            }
            self.clear();
            if n > held {
                return Poll::Ready(Ok(n - held));
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A caller that reads may be waiting for the answer to what it
        // wrote (a TLS handshake's flight, which no later flush follows):
        // what is gathered goes out first.
        if this.held() > 0
            && let Poll::Ready(Err(e)) = this.poll_drain(cx)
        {
            return Poll::Ready(Err(e));
        }
        if !this.read.is_empty() {
            this.serve(buf);
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() >= DIRECT {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        this.read.reserve(CAPACITY);
        ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut this.inner),
            cx,
            &mut this.read
        ))?;
        // Nothing read is the end of the stream, as it is for the caller.
        this.serve(buf);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if total < DIRECT && this.held() + total <= CAPACITY {
            if this.written > 0 {
                this.buf.drain(..this.written);
                this.written = 0;
            }
            if this.buf.capacity() == 0 {
                this.buf.reserve_exact(CAPACITY);
            }
            for b in bufs {
                this.buf.extend_from_slice(b);
            }
            this.fresh = true;
            return Poll::Ready(Ok(total));
        }
        this.poll_write_behind(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.held() > 0 {
            if std::mem::take(&mut this.fresh) {
                // More frames may be ready by the task's next turn: gather
                // them too, and make sure that turn comes.
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for Coalesced<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Connects a client channel to `endpoint` over TCP (`TCP_NODELAY` set), its
/// writes coalesced; TLS, when the endpoint has it, runs above.
pub async fn connect(endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
    endpoint
        .connect_with_connector(tower::service_fn(|uri: Uri| async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri
                .port_u16()
                .unwrap_or(if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                });
            let stream = TcpStream::connect((host, port)).await?;
            stream.set_nodelay(true)?;
            Ok::<_, io::Error>(TokioIo::new(Coalesced::new(stream)))
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    /// A writer that records each write's slices (their addresses and
    /// bytes), takes at most `limit` bytes per write, and is not ready every
    /// `stall`-th call.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<(usize, Vec<u8>)>>,
        limit: Option<usize>,
        stall: Option<usize>,
        calls: usize,
        flushes: usize,
        shut: bool,
    }

    impl Recorder {
        fn bytes(&self) -> Vec<u8> {
            self.writes
                .iter()
                .flatten()
                .flat_map(|(_, b)| b.clone())
                .collect()
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.calls += 1;
            if this.stall.is_some_and(|s| this.calls.is_multiple_of(s)) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let mut room = this.limit.unwrap_or(usize::MAX);
            let mut write = Vec::new();
            for b in bufs {
                let take = b.len().min(room);
                if take == 0 {
                    break;
                }
                write.push((b.as_ptr() as usize, b[..take].to_vec()));
                room -= take;
            }
            let n = write.iter().map(|(_, b)| b.len()).sum();
            this.writes.push(write);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut = true;
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn context() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes::default());
        (wakes.clone(), Waker::from(wakes))
    }

    /// Polls `f` until it is ready, at most 1,000 times.
    fn ready<R>(
        waker: &Waker,
        mut f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> io::Result<R> {
        let mut cx = Context::from_waker(waker);
        for _ in 0..1000 {
            if let Poll::Ready(r) = f(&mut cx) {
                return r;
            }
        }
        panic!("not ready after 1,000 polls");
    }

    /// Writes `frame` as h2 does: the frame's 9-byte head and its payload as
    /// two slices, then a flush.
    fn send_frame(s: &mut Coalesced<Recorder>, waker: &Waker, payload: &[u8]) {
        let head = [0u8; 9];
        let mut done = 0;
        while done < head.len() + payload.len() {
            let slices = if done < head.len() {
                vec![IoSlice::new(&head[done..]), IoSlice::new(payload)]
            } else {
                vec![IoSlice::new(&payload[done - head.len()..])]
            };
            done += ready(waker, |cx| {
                Pin::new(&mut *s).poll_write_vectored(cx, &slices)
            })
            .unwrap();
        }
        ready(waker, |cx| Pin::new(&mut *s).poll_flush(cx)).unwrap();
    }

    #[test]
    fn frames_of_16_kib_leave_in_few_writes() {
        let (wakes, waker) = context();
        let mut s = Coalesced::new(Recorder::default());
        let payload: Vec<u8> = (0..16384u32).map(|i| i as u8).collect();
        for _ in 0..60 {
            send_frame(&mut s, &waker, &payload);
        }
        // 60 frames of 16 KiB + 9 B: every 16th left with the 15 gathered
        // before it, the last 12 wait for a flush that comes with nothing new.
        assert_eq!(s.inner.writes.len(), 3, "{} writes", s.inner.writes.len());
        assert!(
            wakes.0.load(Ordering::Relaxed) >= 1,
            "a put-off flush wakes the task"
        );
        ready(&waker, |cx| Pin::new(&mut s).poll_flush(cx)).unwrap();
        assert_eq!(s.inner.writes.len(), 4);
        let mut expected = Vec::new();
        for _ in 0..60 {
            expected.extend_from_slice(&[0u8; 9]);
            expected.extend_from_slice(&payload);
        }
        assert_eq!(s.inner.bytes(), expected);
        for write in &s.inner.writes[..3] {
            let n: usize = write.iter().map(|(_, b)| b.len()).sum();
            assert!(n > CAPACITY - 16393, "a write of {n} bytes");
        }
    }

    #[test]
    fn a_flush_with_nothing_new_writes_at_once() {
        let (_, waker) = context();
        let mut s = Coalesced::new(Recorder::default());
        let reply = b"a small reply".to_vec();
        ready(&waker, |cx| Pin::new(&mut s).poll_write(cx, &reply)).unwrap();
        ready(&waker, |cx| Pin::new(&mut s).poll_flush(cx)).unwrap();
        assert!(
            s.inner.writes.is_empty(),
            "the first flush after new bytes is put off"
        );
        ready(&waker, |cx| Pin::new(&mut s).poll_flush(cx)).unwrap();
        assert_eq!(s.inner.bytes(), reply);
        assert_eq!(s.inner.flushes, 1);
    }

    #[test]
    fn large_frames_are_not_copied() {
        let (_, waker) = context();
        let mut s = Coalesced::new(Recorder::default());
        let small = vec![1u8; 100];
        let large = vec![2u8; 1 << 20];
        ready(&waker, |cx| Pin::new(&mut s).poll_write(cx, &small)).unwrap();
        let n = ready(&waker, |cx| Pin::new(&mut s).poll_write(cx, &large)).unwrap();
        assert_eq!(n, large.len());
        // One writev: the gathered bytes, then the caller's own memory.
        assert_eq!(s.inner.writes.len(), 1);
        let write = &s.inner.writes[0];
        assert_eq!(write.len(), 2);
        assert_eq!(write[0].1, small);
        assert_eq!(
            write[1].0,
            large.as_ptr() as usize,
            "the large write was copied"
        );
    }

    #[test]
    fn short_and_stalled_writes_lose_nothing() {
        let (_, waker) = context();
        let mut s = Coalesced::new(Recorder {
            limit: Some(10_007),
            stall: Some(3),
            ..Recorder::default()
        });
        let mut expected = Vec::new();
        for i in 0..200u32 {
            // Sizes on both sides of DIRECT, so both paths take turns.
            let payload: Vec<u8> = (0..(i * 997) % (3 * DIRECT as u32))
                .map(|j| (i + j) as u8)
                .collect();
            send_frame(&mut s, &waker, &payload);
            expected.extend_from_slice(&[0u8; 9]);
            expected.extend_from_slice(&payload);
        }
        ready(&waker, |cx| Pin::new(&mut s).poll_shutdown(cx)).unwrap();
        assert!(s.inner.shut);
        assert_eq!(s.inner.bytes(), expected);
    }

    /// A reader of `data` that gives at most `chunk` bytes per read and
    /// records how much room each read had.
    struct Source {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
        rooms: Vec<usize>,
    }

    impl AsyncRead for Source {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            this.rooms.push(buf.remaining());
            let n = (this.data.len() - this.at)
                .min(this.chunk)
                .min(buf.remaining());
            buf.put_slice(&this.data[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Source {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Reads `s` to its end with reads of `room` bytes, returning the bytes.
    fn read_all(s: &mut Coalesced<Source>, waker: &Waker, room: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chunk = vec![0u8; room];
        for _ in 0..100_000 {
            let mut buf = ReadBuf::new(&mut chunk);
            ready(waker, |cx| Pin::new(&mut *s).poll_read(cx, &mut buf)).unwrap();
            if buf.filled().is_empty() {
                return out;
            }
            out.extend_from_slice(buf.filled());
        }
        panic!("no end after 100,000 reads");
    }

    fn source(len: usize) -> Coalesced<Source> {
        Coalesced::new(Source {
            data: (0..len).map(|i| (i % 251) as u8).collect(),
            at: 0,
            chunk: 300 << 10,
            rooms: Vec::new(),
        })
    }

    #[test]
    fn small_reads_are_served_from_few_large_ones() {
        let (_, waker) = context();
        let mut s = source(4 << 20);
        let out = read_all(&mut s, &waker, 8 << 10);
        assert_eq!(out, s.inner.data);
        // 4 MiB in reads of 256 KiB, and the one that finds the end.
        assert_eq!(s.inner.rooms.len(), 17, "{:?}", s.inner.rooms);
        assert!(s.inner.rooms.iter().all(|&room| room >= CAPACITY));
        assert_eq!(s.read.capacity(), 0, "the emptied buffer is freed");
    }

    #[test]
    fn large_reads_go_to_the_socket_directly() {
        let (_, waker) = context();
        let mut s = source(1 << 20);
        let out = read_all(&mut s, &waker, 1 << 20);
        assert_eq!(out, s.inner.data);
        assert_eq!(s.inner.rooms, [1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20]);
    }

    #[test]
    fn reads_of_every_size_in_turn_lose_nothing() {
        let (_, waker) = context();
        let mut s = source(3 << 20);
        let mut out = Vec::new();
        for i in 0..10_000usize {
            let mut chunk = vec![0u8; 1 + (i * 7919) % (2 * DIRECT)];
            let mut buf = ReadBuf::new(&mut chunk);
            ready(&waker, |cx| Pin::new(&mut s).poll_read(cx, &mut buf)).unwrap();
            if buf.filled().is_empty() {
                break;
            }
            out.extend_from_slice(buf.filled());
        }
        assert_eq!(out, s.inner.data);
    }

    /// A socket: writes recorded, reads from a source.
    struct Socket(Recorder, Source);

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().0).poll_flush(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
        }
    }

    impl AsyncRead for Socket {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().1).poll_read(cx, buf)
        }
    }

    #[test]
    fn a_read_writes_what_is_gathered_first() {
        // A TLS handshake writes its flight, flushes once and then only reads.
        let (_, waker) = context();
        let source = Source {
            data: b"ServerHello".to_vec(),
            at: 0,
            chunk: 1 << 20,
            rooms: Vec::new(),
        };
        let mut s = Coalesced::new(Socket(Recorder::default(), source));
        ready(&waker, |cx| Pin::new(&mut s).poll_write(cx, b"ClientHello")).unwrap();
        ready(&waker, |cx| Pin::new(&mut s).poll_flush(cx)).unwrap();
        assert!(s.inner.0.writes.is_empty(), "the flush is put off");
        let mut answer = [0u8; 64];
        let mut buf = ReadBuf::new(&mut answer);
        ready(&waker, |cx| Pin::new(&mut s).poll_read(cx, &mut buf)).unwrap();
        assert_eq!(s.inner.0.bytes(), b"ClientHello");
        assert_eq!(buf.filled(), b"ServerHello");
    }

    #[test]
    fn shutdown_writes_what_is_gathered_first() {
        let (_, waker) = context();
        let mut s = Coalesced::new(Recorder::default());
        ready(&waker, |cx| Pin::new(&mut s).poll_write(cx, b"GOAWAY")).unwrap();
        ready(&waker, |cx| Pin::new(&mut s).poll_shutdown(cx)).unwrap();
        assert_eq!(s.inner.bytes(), b"GOAWAY");
        assert!(s.inner.shut);
    }
}
