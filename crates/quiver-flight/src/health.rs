//! The standard gRPC health protocol (`grpc.health.v1`, served by
//! `tonic-health`) on the Flight port, and the gate that holds every other RPC
//! until the server has started.
//!
//! The server is NOT_SERVING from the moment it accepts connections until its
//! startup work (the `--table` registrations) is done, and again from the
//! moment shutdown begins. RPCs that arrive while it starts wait (bounded by
//! `--request-timeout` and the client's deadline) rather than fail: a client
//! that connects as soon as the port opens, as scripts do, sees no error.
//! Health checks need no credentials: load balancers and Kubernetes probes
//! carry none.

use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_flight::flight_service_server::FlightServiceServer;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::{Layer, Service};

use crate::QuiverService;

/// The path prefix of the health service's RPCs.
pub(crate) const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The services whose health is reported: the server as a whole (`""`) and
/// the Flight service (Flight SQL shares it).
const SERVICES: [&str; 2] = [
    "",
    <FlightServiceServer<QuiverService> as NamedService>::NAME,
];

/// Whether the server serves, as the health service and the gate report it.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    reporter: HealthReporter,
    ready: Arc<watch::Sender<bool>>,
}

impl Readiness {
    /// NOT_SERVING, with the health service that reports it.
    pub(crate) async fn starting() -> (
        Self,
        tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    ) {
        let (reporter, service) = tonic_health::server::health_reporter();
        for name in SERVICES {
            reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        let (ready, _) = watch::channel(false);
        (
            Self {
                reporter,
                ready: Arc::new(ready),
            },
            service,
        )
    }

    /// The gate that holds RPCs other than health checks while starting.
    pub(crate) fn gate(&self) -> StartingLayer {
        StartingLayer {
            ready: self.ready.subscribe(),
        }
    }

    /// Startup is done: SERVING, and the gate opens.
    pub(crate) async fn serving(&self) {
        for name in SERVICES {
            self.reporter
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }
        self.ready.send_replace(true);
    }

    /// Shutdown began: NOT_SERVING. Then the statuses are withdrawn, which
    /// ends open `Watch` streams right after they report NOT_SERVING (they
    /// would otherwise hold graceful shutdown open until its timeout).
    pub(crate) async fn stopping(&mut self) {
        for name in SERVICES {
            self.reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        for name in SERVICES {
            self.reporter.clear_service_status(name).await;
        }
    }
}

/// Holds RPCs other than health checks until the server has started.
#[derive(Debug, Clone)]
pub(crate) struct StartingLayer {
    ready: watch::Receiver<bool>,
}

impl<S> Layer<S> for StartingLayer {
    type Service = Starting<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Starting {
            inner,
            ready: self.ready.clone(),
        }
    }
}

/// The service [`StartingLayer`] makes.
#[derive(Debug, Clone)]
pub(crate) struct Starting<S> {
    inner: S,
    ready: watch::Receiver<bool>,
}

impl<S> Service<http::Request<Body>> for Starting<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if *self.ready.borrow() || request.uri().path().starts_with(HEALTH_PREFIX) {
            return Box::pin(self.inner.call(request));
        }
        // The inner service was made ready for this call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let mut ready = self.ready.clone();
        Box::pin(async move {
            // An error means the server is gone; the call then fails as it may.
            let _ = ready.wait_for(|started| *started).await;
            inner.call(request).await
        })
    }
}
