//! DoPut's decode path on arbitrary bytes: the request body of one DoPut
//! (gRPC-framed FlightData messages) through the server's own parser, arrow's
//! IPC decoder with validation on, and the store. `PutHarness::run` panics on
//! anything a malformed request must not do; a refusal is fine.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use quiver_flight::fuzzing::PutHarness;

/// quiver catches the panics arrow-ipc raises on some malformed messages and
/// refuses the put; libFuzzer's panic hook would abort on them first. With a
/// quiet hook, a panic quiver does not catch still reaches libfuzzer-sys, which
/// aborts: that is a finding.
static HARNESS: LazyLock<PutHarness> = LazyLock::new(|| {
    std::panic::set_hook(Box::new(|_| {}));
    PutHarness::new()
});

fuzz_target!(|data: &[u8]| {
    let _ = HARNESS.run(data);
});
