//! The HTTP/2 response body that carries a stream of gRPC messages (framed by
//! [`quiver_wire::grpc`]) and ends with the status in its trailers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::HeaderMap;
use http_body::{Body, Frame};
use tonic::Status;

/// A gRPC response body: the chunks of a stream of gRPC frames, then the
/// trailers with the status (`grpc-status: 0`, or the error that ended it).
pub(crate) struct GrpcBody {
    frames: BoxStream<'static, Result<Vec<Bytes>, Status>>,
    pending: VecDeque<Bytes>,
    done: bool,
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
    pub(crate) fn new(frames: BoxStream<'static, Result<Vec<Bytes>, Status>>) -> Self {
        Self {
            frames,
            pending: VecDeque::new(),
            done: false,
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
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
                }
                None => {
                    self.done = true;
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&Status::ok(""))))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}
