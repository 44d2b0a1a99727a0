//! Connecting to a quiver server (or any Flight server) from the CLI.

use arrow_flight::FlightClient;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use tonic::transport::{Channel, Endpoint};

/// Largest message the CLI accepts from a server: 1 GiB, as the server.
const MAX_MESSAGE_SIZE: usize = 1 << 30;

/// The `http://` URI tonic connects to for a Flight location.
pub(crate) fn http_uri(location: &str) -> Result<String, String> {
    let (scheme, rest) = match location.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("grpc+tcp", location),
    };
    match scheme {
        "grpc" | "grpc+tcp" | "http" => Ok(format!("http://{rest}")),
        "grpc+tls" | "https" => Err(format!(
            "{location}: TLS is not supported by this client yet"
        )),
        other => Err(format!(
            "{location}: unsupported scheme {other:?} (use grpc+tcp://HOST:PORT)"
        )),
    }
}

/// Whether an endpoint location means "the server you asked": none given, or
/// Flight's reuse-connection location.
pub(crate) fn is_same_server(location: &str, server: &str) -> bool {
    location.is_empty()
        || location.starts_with("arrow-flight-reuse-connection:")
        || location == server
}

/// A connected Flight client.
pub(crate) async fn connect(location: &str) -> Result<FlightClient, Box<dyn std::error::Error>> {
    let uri = http_uri(location)?;
    let channel: Channel = Endpoint::from_shared(uri)?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {location}: {e}"))?;
    let inner = FlightServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    Ok(FlightClient::new_from_inner(inner))
}

/// A Flight error as a person should read it: the server's status code and message.
pub(crate) fn describe(e: FlightError) -> String {
    match e {
        FlightError::Tonic(status) => format!("{:?}: {}", status.code(), status.message()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_to_uris() {
        assert_eq!(
            http_uri("grpc+tcp://127.0.0.1:8815").unwrap(),
            "http://127.0.0.1:8815"
        );
        assert_eq!(http_uri("localhost:1").unwrap(), "http://localhost:1");
        assert!(http_uri("grpc+tls://h:1").is_err());
        assert!(http_uri("ftp://h:1").is_err());
    }
}
