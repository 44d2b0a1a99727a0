//! The HTTP/2 body that carries a stream of gRPC messages (framed by
//! [`crate::grpc`]), each message a chain of chunks handed to hyper as they
//! are: a server's response, which ends with the status in its trailers, or a
//! client's request, which an error breaks off (the server then stores
//! nothing of it).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::HeaderMap;
use http_body::{Body, Frame};
use tonic::Status;

/// A gRPC body: the chunks of a stream of gRPC messages. A response's ends
/// with the trailers that carry the status (`grpc-status: 0`, or the error that
/// ended the stream); a request's ends with the stream, and an error fails the
/// body, which resets the HTTP/2 stream.
pub struct GrpcBody {
    frames: BoxStream<'static, Result<Vec<Bytes>, Status>>,
    pending: VecDeque<Bytes>,
    done: bool,
    /// A response (trailers at the end), not a request.
    response: bool,
}

impl std::fmt::Debug for GrpcBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcBody")
            .field("pending", &self.pending.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl GrpcBody {
    /// A server's response body of the messages `frames` yields.
    pub fn response(frames: BoxStream<'static, Result<Vec<Bytes>, Status>>) -> Self {
        Self::new(frames, true)
    }

    /// A client's request body of the messages `frames` yields.
    pub fn request(frames: BoxStream<'static, Result<Vec<Bytes>, Status>>) -> Self {
        Self::new(frames, false)
    }

    fn new(frames: BoxStream<'static, Result<Vec<Bytes>, Status>>, response: bool) -> Self {
        Self {
            frames,
            pending: VecDeque::new(),
            done: false,
            response,
        }
    }
}

fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // The message could not be a header value: send the code and the
        // details alone.
        let _ = Status::with_details(status.code(), "", status.details().to_vec().into())
            .add_header(&mut map);
    }
    map
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match ready!(self.frames.poll_next_unpin(cx)) {
                Some(Ok(chunks)) => self.pending.extend(chunks),
                Some(Err(status)) => {
                    self.done = true;
                    return Poll::Ready(Some(if self.response {
                        Ok(Frame::trailers(trailers(&status)))
                    } else {
                        Err(status)
                    }));
                }
                None => {
                    self.done = true;
                    return Poll::Ready(
                        self.response
                            .then(|| Ok(Frame::trailers(trailers(&Status::ok(""))))),
                    );
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}
