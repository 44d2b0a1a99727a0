//! Time limits on RPCs: a whole-call limit for the short ones, an idle limit
//! for request streams.
//!
//! A naive whole-request timeout would cut a long DoGet or DoPut that is making
//! progress, so quiver bounds two different things:
//!
//! - `--request-timeout`: the time until the server answers an RPC whose
//!   request is one message (GetFlightInfo, GetSchema, DoAction, ListFlights,
//!   ListActions, PollFlightInfo) or until a DoGet starts streaming (opening
//!   the ticket, starting a query). A DoGet's stream itself is not cut: it
//!   moves as fast as the client reads. DoPut, DoExchange and Handshake read
//!   the client's stream before they answer, so they are not timed as a whole.
//! - `--stream-idle-timeout`: the longest the server waits for the next piece
//!   of a request stream it is reading (a DoPut's next message). A client that
//!   keeps sending is never cut; one that goes silent mid-stream is, and the
//!   put stores nothing.
//!
//! Both answer DEADLINE_EXCEEDED (gRPC's code for a time limit, as for
//! `--query-timeout`) with a message naming the flag. They bound Flight's
//! RPCs; other services on the port (health, a cluster node's distributed-SQL
//! workers, whose streams last as long as the query that the asking node
//! bounds with `--query-timeout`) are not limited here.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use tonic::Status;
use tower::{Layer, Service};

use crate::Error;

/// The flag that sets the unary time limit.
pub const REQUEST_TIMEOUT_FLAG: &str = "--request-timeout";
/// The flag that sets the request-stream idle limit.
pub const STREAM_IDLE_TIMEOUT_FLAG: &str = "--stream-idle-timeout";

/// The RPCs the limits apply to: Flight's (Flight SQL's included).
const FLIGHT_SERVICE: &str = "/arrow.flight.protocol.FlightService/";

/// RPC paths whose answer comes after the client's whole stream: never timed
/// as a whole.
const STREAMING_UPLOADS: [&str; 3] = [
    "/arrow.flight.protocol.FlightService/DoPut",
    "/arrow.flight.protocol.FlightService/DoExchange",
    "/arrow.flight.protocol.FlightService/Handshake",
];

/// Applies the time limits of [`crate::server::ServerLimits`] to every RPC.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLayer {
    request: Option<Duration>,
    stream_idle: Option<Duration>,
}

impl TimeoutLayer {
    /// Limits: `request` for answering a one-message request, `stream_idle`
    /// between the pieces of a request stream (`None`: no limit).
    pub fn new(request: Option<Duration>, stream_idle: Option<Duration>) -> Self {
        Self {
            request,
            stream_idle,
        }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeouts<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeouts {
            inner,
            limits: *self,
        }
    }
}

/// The service [`TimeoutLayer`] makes.
#[derive(Debug, Clone)]
pub struct Timeouts<S> {
    inner: S,
    limits: TimeoutLayer,
}

impl<S> Service<http::Request<tonic::body::Body>> for Timeouts<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if !request.uri().path().starts_with(FLIGHT_SERVICE) {
            return Box::pin(self.inner.call(request));
        }
        let whole = self
            .limits
            .request
            .filter(|_| !STREAMING_UPLOADS.contains(&request.uri().path()));
        let request = match self.limits.stream_idle {
            Some(idle) => {
                request.map(|inner| tonic::body::Body::new(IdleLimitedBody::new(inner, idle)))
            }
            None => request,
        };
        let answer = self.inner.call(request);
        match whole {
            None => Box::pin(answer),
            Some(limit) => Box::pin(async move {
                match tokio::time::timeout(limit, answer).await {
                    Ok(answer) => answer,
                    Err(_) => Ok(Status::from(Error::Deadline(format!(
                        "no answer within the {} s limit ({REQUEST_TIMEOUT_FLAG})",
                        limit.as_secs_f64()
                    )))
                    .into_http()),
                }
            }),
        }
    }
}

/// A request body that fails with DEADLINE_EXCEEDED when the server has
/// waited `idle` for its next frame.
#[derive(Debug)]
struct IdleLimitedBody {
    inner: tonic::body::Body,
    idle: Duration,
    /// Running while the server waits for a frame.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl IdleLimitedBody {
    fn new(inner: tonic::body::Body, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            waiting: None,
        }
    }
}

impl Body for IdleLimitedBody {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = None;
            return Poll::Ready(frame);
        }
        let idle = this.idle;
        let timer = this
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.waiting = None;
                Poll::Ready(Some(Err(Error::Idle(format!(
                    "the request stream was idle for {} s, the limit ({STREAM_IDLE_TIMEOUT_FLAG}); \
                     nothing was stored",
                    idle.as_secs_f64()
                ))
                .into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use http_body_util::{BodyExt, StreamBody};

    fn request(rpc: &str, body: tonic::body::Body) -> http::Request<tonic::body::Body> {
        let mut request = http::Request::new(body);
        *request.uri_mut() = format!("/arrow.flight.protocol.FlightService/{rpc}")
            .parse()
            .unwrap();
        request
    }

    #[tokio::test]
    async fn a_slow_answer_is_cut_unless_the_rpc_reads_a_stream() {
        let slow = tower::service_fn(|_: http::Request<tonic::body::Body>| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
        });
        let mut service = TimeoutLayer::new(Some(Duration::from_millis(50)), None).layer(slow);
        let answer = service
            .call(request("GetFlightInfo", tonic::body::Body::empty()))
            .await
            .unwrap();
        let status = Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(
            status.message().contains(REQUEST_TIMEOUT_FLAG),
            "{status:?}"
        );
        let answer = service
            .call(request("DoPut", tonic::body::Body::empty()))
            .await
            .unwrap();
        assert!(Status::from_header_map(answer.headers()).is_none());
        // Another service on the port (a cluster's SQL worker) is not limited here.
        let mut worker = http::Request::new(tonic::body::Body::empty());
        *worker.uri_mut() = "/worker.WorkerService/ExecuteTask".parse().unwrap();
        let answer = service.call(worker).await.unwrap();
        assert!(Status::from_header_map(answer.headers()).is_none());
    }

    #[tokio::test]
    async fn a_stream_is_cut_when_silent_not_when_slow() {
        let idle = Duration::from_millis(300);
        let steady = futures::stream::iter(0..5).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok::<_, Status>(Frame::data(bytes::Bytes::from(vec![i; 4])))
        });
        let mut body = IdleLimitedBody::new(tonic::body::Body::new(StreamBody::new(steady)), idle);
        for _ in 0..5 {
            assert!(body.frame().await.unwrap().is_ok());
        }
        assert!(body.frame().await.is_none(), "the end passes through");
        let silent = futures::stream::pending::<Result<Frame<bytes::Bytes>, Status>>();
        let mut body = IdleLimitedBody::new(tonic::body::Body::new(StreamBody::new(silent)), idle);
        let status = body.frame().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(
            status.message().contains(STREAM_IDLE_TIMEOUT_FLAG),
            "{status:?}"
        );
    }
}
