#!/usr/bin/env bash
# Runs the benchmark suite and regenerates BENCHMARKS.md:
#   scripts/bench.sh --quick    # under 2 minutes
#   scripts/bench.sh --full     # about 25 minutes
# Builds the release binary, sets up the venv the tests use (plus the harness's
# pins), and installs iperf3 from the system packages when it can, for the
# loopback ceiling. Extra arguments go to `python -m bench` (see bench/README.md).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${QUIVER_VENV:-$repo/.venv}"

if ! command -v iperf3 >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3) >/dev/null 2>&1 \
        || echo "iperf3 could not be installed; the harness's own TCP ceiling still runs" >&2
fi
cargo build --release --locked --bin quiver
if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet -r python/requirements-dev.txt -r bench/requirements.txt
# The shm suite drives the quiver client itself: this checkout's, not another's.
"$venv/bin/python" -m pip install --quiet --no-deps -e python
QUIVER_BIN="$CARGO_TARGET_DIR/release/quiver" exec "$venv/bin/python" -m bench "$@"
