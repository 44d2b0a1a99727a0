#!/usr/bin/env bash
# Runs the cargo-fuzz target `put_body` (fuzz/: the DoPut decode path on arbitrary
# bytes) for a bounded time on one core, niced, seeded by fuzz/make_seeds.py.
# Needs a nightly toolchain (installed through rustup if missing) and cargo-fuzz
# (installed from crates.io if missing). Not part of scripts/test.sh: CI runs the
# same harness over the seeds and 2400 deterministic mutations in `cargo test`.
#
#   scripts/fuzz.sh [SECONDS]        default 600
# Environment: QUIVER_VENV (a venv with pyarrow, for the seeds), FUZZ_SANITIZER
# (address, or none for a faster uninstrumented-memory run; default none).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
seconds="${1:-600}"
python="${QUIVER_VENV:-$repo/.venv}/bin/python"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
corpus=fuzz/corpus/put_body
"$python" fuzz/make_seeds.py "$corpus"
cd fuzz
nice -n 19 cargo +nightly fuzz run --sanitizer "${FUZZ_SANITIZER:-none}" put_body "$corpus" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=262144 -print_final_stats=1
