//! How large the FlightData messages of a DoGet may be, by what the client takes.
//!
//! gRPC libraries refuse received messages over 4 MiB unless the application
//! raises the limit: tonic (arrow-rs's Flight client) and grpc-go do. quiver
//! therefore cuts batches into messages of at most `max_flight_data_size`
//! (2 MiB, as arrow-flight's encoder does). Arrow C++'s Flight client (pyarrow,
//! and R and GLib through it) lifts its gRPC library's limit, because servers
//! built on Arrow C++ send each batch whole; for it, quiver cuts at
//! `large_flight_data_size` instead. A batch of 65,536 taxi rows (9.3 MiB) then
//! leaves as one message rather than five, which saves a fifth of the CPU both
//! ends spend on a get (docs/performance.md).
//!
//! The client is recognised by its gRPC library's token in `user-agent`
//! (`grpc-c++/1.x ...`); any other client, or none, gets the small size.

use http::HeaderMap;

/// The `user-agent` token of gRPC's C++ library, which Arrow C++'s Flight client uses.
const GRPC_CPP: &str = "grpc-c++/";

/// Largest FlightData message to send on a DoGet with these request headers.
pub(crate) fn for_request(headers: &HeaderMap, small: usize, large: usize) -> usize {
    let user_agent = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if takes_large_messages(user_agent) {
        large.max(small)
    } else {
        small
    }
}

/// Whether the client that sent `user_agent` takes messages of any size.
fn takes_large_messages(user_agent: &str) -> bool {
    user_agent
        .split_whitespace()
        .any(|token| token.starts_with(GRPC_CPP))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(user_agent: Option<&str>) -> HeaderMap {
        let mut map = HeaderMap::new();
        if let Some(ua) = user_agent {
            map.insert(http::header::USER_AGENT, ua.parse().unwrap());
        }
        map
    }

    #[test]
    fn arrow_cpp_clients_get_large_messages() {
        let small = 2 << 20;
        let large = 64 << 20;
        for ua in [
            "grpc-c++/1.71.0 grpc-c/46.0.0 (linux; chttp2)",
            "myapp/2.0 grpc-c++/1.62.1 grpc-c/39.0.0 (osx; chttp2)",
        ] {
            assert_eq!(for_request(&headers(Some(ua)), small, large), large, "{ua}");
        }
    }

    #[test]
    fn other_clients_get_the_small_size() {
        let small = 2 << 20;
        let large = 64 << 20;
        for ua in [
            Some("tonic/0.14.2"),
            Some("grpc-go/1.75.0"),
            Some("grpc-java-netty/1.73.0"),
            Some("not-grpc-c++/1.0"),
            Some(""),
            None,
        ] {
            assert_eq!(for_request(&headers(ua), small, large), small, "{ua:?}");
        }
    }

    #[test]
    fn the_large_size_never_undercuts_the_small_one() {
        let ua = headers(Some("grpc-c++/1.71.0"));
        assert_eq!(for_request(&ua, 8 << 20, 1 << 20), 8 << 20);
    }
}
