//! quiver's own DoGet data path: Arrow buffers to the socket without copies.
//!
//! The stock path (arrow-flight's `FlightDataEncoder` and tonic's prost codec)
//! copies every body twice on the way out: the IPC writer copies the arrays
//! into one `Vec`, and prost copies the message into tonic's send buffer. Here
//! arrow-ipc's [`arrow::ipc::writer::StreamEncoder`] describes each message as
//! references to the arrays' own buffers ([`frames`]), the gRPC and protobuf
//! framing around them is a few bytes written by hand (`quiver_wire::grpc`, `quiver_wire::body`), and the
//! resulting chain of `Bytes` goes to hyper as the response body, which hands
//! large chunks to the socket as they are.
//!
//! DoPut the other way ([`do_put`]): the received HTTP/2 frames are kept as
//! they arrived and each body is copied once, into 64-byte aligned memory the
//! decoded arrays use as is (tonic would assemble the message, and the IPC
//! decoder would copy the unaligned body again). That memory comes from
//! [`quiver_wire::body_pool`], warm, when a replaced or deleted table freed bodies of the
//! same size.
//!
//! [`DirectLayer`] routes DoGet and DoPut here before tonic sees them; every
//! other RPC passes through.
//!
//! The framing and parsing themselves are in `quiver-wire`, shared with the
//! Python package's Rust client, which reads DoGet and sends DoPut the same way.
//!
//! It also sends the table's schema as stored: arrow-flight 59's encoder
//! rewrites fields on the way (it turns `LargeList` into `List` and drops union
//! nullability).

pub(crate) mod decode;
mod do_get;
mod do_put;
mod message_size;

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tonic::body::Body;
use tower::{Layer, Service};

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use do_put::put_frames;
pub use quiver_wire::http2::{DO_GET_PATH, DO_PUT_PATH};

use crate::QuiverService;
use crate::rpc_log::handle;
use quiver_wire::GrpcBody;
use tonic::Status;

/// Routes DoGet and DoPut to the direct paths of `service`; everything else to
/// the inner service.
///
/// # Caveats
/// Anything that must apply to every RPC (authentication, for one) has to be
/// applied here too: this layer answers before tonic's interceptors run.
#[derive(Debug, Clone)]
pub struct DirectLayer {
    service: QuiverService,
}

impl DirectLayer {
    /// A layer answering DoGet and DoPut from `service`.
    pub fn new(service: QuiverService) -> Self {
        Self { service }
    }
}

impl<S> Layer<S> for DirectLayer {
    type Service = Direct<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Direct {
            inner,
            service: self.service.clone(),
        }
    }
}

/// The service [`DirectLayer`] makes.
#[derive(Debug, Clone)]
pub struct Direct<S> {
    inner: S,
    service: QuiverService,
}

impl<S> Service<http::Request<Body>> for Direct<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let service = self.service.clone();
        match request.uri().path() {
            DO_GET_PATH => Box::pin(async move {
                let response = handle("DoGet", |log| do_get::respond(service, request, log)).await;
                Ok(response.unwrap_or_else(Status::into_http))
            }),
            DO_PUT_PATH => Box::pin(async move {
                let response = handle("DoPut", |log| do_put::respond(service, request, log)).await;
                Ok(response.unwrap_or_else(Status::into_http))
            }),
            _ => Box::pin(self.inner.call(request)),
        }
    }
}

/// A 200 gRPC response streaming `body`.
fn grpc_response(body: GrpcBody) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}
