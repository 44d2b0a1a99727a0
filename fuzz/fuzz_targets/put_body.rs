//! DoPut's decode path on arbitrary bytes: the request body of one DoPut
//! (gRPC-framed FlightData messages) through the server's own parser, arrow's
//! IPC decoder with validation on, and the store. `PutHarness::run` panics on
//! anything a malformed request must not do; a refusal is fine.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use quiver_flight::fuzzing::PutHarness;

static HARNESS: LazyLock<PutHarness> = LazyLock::new(PutHarness::new);

fuzz_target!(|data: &[u8]| {
    let _ = HARNESS.run(data);
});
