#!/usr/bin/env bash
# Runs every test of quiver, setting up what they need:
#   0. protoc and etcd from Debian's packages, if missing: the cluster's etcd client
#      needs protoc to build, its tests start etcd (scripts/install-cluster-tools.sh);
#   1. Rust: cargo fmt --check, clippy -D warnings, unit and integration tests, with
#      the `quiver` binary's `cluster` feature on (one feature set for every step, so
#      clippy, the tests and the binary share their build);
#   2. the release `quiver` binary the Python tests start (with the cluster);
#   3. a Python venv with the pinned dependencies (python/requirements-dev.txt
#      and bench/requirements.txt), reused while those pins do not change; the
#      engines of the connectors (PySpark, Dask, Ray) among them, so their
#      tests run once here against real engines (Spark needs the JDK of step 4);
#   4. Java (JDK 17 and Maven from Debian's packages if missing) and Apache Arrow's
#      Flight SQL JDBC driver, for python/tests/test_jdbc.py (scripts/setup-java.sh;
#      cached outside the repository, in ~/.cache/quiver/java);
#   5. PostgreSQL and its ODBC driver from Debian's packages, if missing, for the
#      benchmark harness's sql suite (scripts/install-postgres.sh);
#   6. systemd and tmux from Debian's packages, if missing, for systemd-analyze
#      verify of the unit in deploy/ and for `quiver top` under a terminal
#      (scripts/install-os-tools.sh);
#   7. ruff, mypy on the client package (python/quiver), and pytest against the
#      real server binary: the client's tests (Flight, Flight SQL through ADBC and
#      JDBC, the sqllogictest files) and the benchmark harness's smoke tests (tiny
#      sizes; never the benchmarks); then the client's own tests once more with
#      QUIVER_CORE=0, through pyarrow's Flight client alone (the fallback of the
#      package's Rust core).
#
# Environment:
#   CARGO_TARGET_DIR  where cargo builds (default: ./target)
#   QUIVER_VENV       the Python venv to create or reuse (default: ./.venv)
#   PYTHON            the interpreter for the venv (default: python3)
#   PYTEST_ARGS       extra pytest arguments, e.g. "-k put -x"
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${QUIVER_VENV:-$repo/.venv}"
python="${PYTHON:-python3}"

step() { printf '\n==> %s\n' "$*"; }

command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
command -v "$python" >/dev/null || { echo "$python not found: install Python 3.10 or newer" >&2; exit 1; }

step "protoc and etcd (the cluster's build and tests)"
bash scripts/install-cluster-tools.sh

step "cargo fmt --check"
cargo fmt --all -- --check

features=(--features quiver/cluster)

step "cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets --locked "${features[@]}" -- -D warnings

step "cargo test (unit and integration)"
cargo test --release --workspace --locked "${features[@]}"

step "build the quiver binary"
cargo build --release --locked --bin quiver "${features[@]}"
export QUIVER_BIN="$CARGO_TARGET_DIR/release/quiver"

step "Python venv ($venv)"
stamp="$venv/.quiver-deps"
want="$(cat python/requirements-dev.txt bench/requirements.txt python/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r python/requirements-dev.txt -r bench/requirements.txt
    echo "$want" > "$stamp"
fi
# The package itself is installed afresh every run: it is the code under test. Its
# Rust core (quiver._core, crates/quiver-python) is built by maturin, in the venv, into
# the same target directory as the rest (cargo rebuilds only what changed).
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e python

step "ruff"
"$venv/bin/ruff" check python bench
"$venv/bin/ruff" format --check python bench

step "mypy (the client package ships py.typed)"
"$venv/bin/mypy" --config-file python/pyproject.toml python/quiver

step "Java and the Flight SQL JDBC driver (python/tests/test_jdbc.py)"
bash scripts/setup-java.sh

step "PostgreSQL and psqlODBC (the benchmark harness's sql suite, smoke-tested)"
bash scripts/install-postgres.sh

step "systemd and tmux (python/tests/test_deploy.py, python/tests/test_top.py)"
# Exit 3: they cannot be installed here; the tests then say so (and fail with CI=true).
bash scripts/install-os-tools.sh || [ $? -eq 3 ]

step "pytest"
# shellcheck disable=SC2086
"$venv/bin/python" -m pytest python/tests bench/tests ${PYTEST_ARGS:-}

step "pytest: the client's tests again through pyarrow alone (QUIVER_CORE=0, the fallback)"
# shellcheck disable=SC2086
QUIVER_CORE=0 "$venv/bin/python" -m pytest ${PYTEST_ARGS:-} \
    python/tests/test_client.py python/tests/test_core.py python/tests/test_error_kinds.py \
    python/tests/test_errors.py python/tests/test_flight_put.py python/tests/test_large_batches.py \
    python/tests/test_tls.py python/tests/test_security.py python/tests/test_concurrent_reads.py \
    python/tests/test_sql.py python/tests/test_shm.py
