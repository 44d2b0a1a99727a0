//! Flight over HTTP/2 below tonic: the paths of the two RPCs quiver answers
//! and makes by hand, the flow-control windows its server and clients use,
//! and the URI a Flight location is reached at.

/// The HTTP/2 path of Flight's DoGet.
pub const DO_GET_PATH: &str = "/arrow.flight.protocol.FlightService/DoGet";

/// The HTTP/2 path of Flight's DoPut.
pub const DO_PUT_PATH: &str = "/arrow.flight.protocol.FlightService/DoPut";

/// HTTP/2 stream window quiver's server offers by default and its clients
/// offer: 16 MiB. With hyper's 1 MiB a peer cannot send one 2 MiB batch
/// without waiting for a WINDOW_UPDATE (1 GiB puts from pyarrow measured +20%,
/// docs/performance.md).
pub const STREAM_WINDOW: u32 = 16 << 20;

/// HTTP/2 connection window quiver's server and clients offer: 64 MiB.
pub const CONNECTION_WINDOW: u32 = 64 << 20;

/// The `http://` or `https://` URI a Flight location (`grpc+tcp://HOST:PORT`,
/// `grpc+tls://...`, or a bare `HOST:PORT`) is connected to.
pub fn http_uri(location: &str) -> Result<String, String> {
    let (scheme, rest) = location.split_once("://").unwrap_or(("grpc+tcp", location));
    match scheme {
        "grpc" | "grpc+tcp" | "http" => Ok(format!("http://{rest}")),
        "grpc+tls" | "https" => Ok(format!("https://{rest}")),
        other => Err(format!(
            "{location}: unsupported scheme {other:?} (use grpc+tcp://HOST:PORT or grpc+tls://HOST:PORT)"
        )),
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
        assert_eq!(http_uri("grpc+tls://h:1").unwrap(), "https://h:1");
        assert!(http_uri("ftp://h:1").is_err());
        assert!(http_uri("grpc+unix:///tmp/s").is_err());
    }
}
