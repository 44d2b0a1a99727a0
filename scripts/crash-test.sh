#!/usr/bin/env bash
# The full crash test (docs/durability.md): CYCLES rounds (default 100) of random
# puts, appends, deletes and renames from 4 client threads against the real
# server with --data-dir, each ended by SIGKILL at a random moment and checked
# after a restart; once with --fsync always, once with --fsync never.
#
# Usage: scripts/crash-test.sh [CYCLES] [SEED]
# Needs what scripts/test.sh builds: the release binary and the Python venv
# (CARGO_TARGET_DIR, QUIVER_VENV as there).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${QUIVER_VENV:-$repo/.venv}"

cargo build --release --locked --bin quiver
export QUIVER_BIN="$CARGO_TARGET_DIR/release/quiver"
export QUIVER_CRASH_CYCLES="${1:-100}" QUIVER_CRASH_SEED="${2:-0}"
"$venv/bin/python" -m pytest python/tests/test_crash.py -s -q
