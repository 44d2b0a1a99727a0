//! Telling a request stream that ended from one that broke off.
//!
//! tonic's server-side decoder reports a request body that the client cancelled
//! (RST_STREAM CANCEL) as a clean end of stream, exactly like a stream the client
//! finished. For DoPut that difference decides between storing a table and
//! storing nothing, so this layer sits below tonic, watches each request body,
//! and records in the request's extensions whether the transport ended it with
//! an error. Handlers check [`BodyOutcome::broken`] after the stream ends.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

/// Whether a request body broke off; shared between the body and the handler.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyOutcome(Arc<AtomicBool>);

impl BodyOutcome {
    /// True once the transport ended the body with an error (reset, cancel,
    /// connection lost), whatever the layers above made of it.
    pub(crate) fn broken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Wraps every request body in a [`WatchedBody`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchBodyLayer;

impl<S> Layer<S> for WatchBodyLayer {
    type Service = WatchBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WatchBody { inner }
    }
}

/// The service [`WatchBodyLayer`] makes.
#[derive(Debug, Clone)]
pub struct WatchBody<S> {
    inner: S,
}

impl<S> Service<http::Request<tonic::body::Body>> for WatchBody<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let outcome = BodyOutcome::default();
        request.extensions_mut().insert(outcome.clone());
        let request = request.map(|inner| tonic::body::Body::new(WatchedBody { inner, outcome }));
        self.inner.call(request)
    }
}

/// A request body that records, in its [`BodyOutcome`], an error from below.
#[derive(Debug)]
struct WatchedBody {
    inner: tonic::body::Body,
    outcome: BodyOutcome,
}

impl Body for WatchedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            self.outcome.0.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
