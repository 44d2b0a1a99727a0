#!/usr/bin/env bash
# Runs every test of quiver, setting up what they need:
#   0. etcd, etcdctl and iptables from Debian's packages, if missing, for the cluster's
#      tests (scripts/install-cluster-tools.sh);
#   1. Rust, with no protoc to run (PROTOC unset, the first `protoc` on the PATH one
#      that fails): cargo fmt --check; the release `quiver` binary the Python tests
#      start, built after its code-generating crate (quiver-etcd) is cleaned, so each
#      run proves the build needs cargo alone; then every unit, integration and doc
#      test, compiled in the background (niced) while the Python tests of step 8 run,
#      and run after them. Clippy's lints (-D warnings) run inside those builds,
#      clippy-driver being the workspace's rustc wrapper: the workspace is compiled once
#      for lints, tests and binary, and no dependency is compiled a second time for
#      clippy alone;
#   2. (the binary is built in step 1)
#   3. a Python venv with the pinned dependencies (python/requirements-dev.txt
#      and bench/requirements.txt), reused while those pins do not change; the
#      engines of the connectors (PySpark, Dask, Ray) among them, so their
#      tests run once here against real engines (Spark needs the JDK of step 4);
#      then the client's wheel (maturin, abi3: one wheel for every CPython >= 3.10),
#      built once and installed into the venv, so the tests import what a user
#      installs, not the source tree. The venv, and steps 4 to 7, install in the
#      background while Rust compiles (they wait on the network more than on the CPU);
#   4. Java (JDK 17 and Maven from Debian's packages if missing) and Apache Arrow's
#      Flight SQL JDBC driver, for python/tests/test_jdbc.py (scripts/setup-java.sh;
#      cached outside the repository, in ~/.cache/quiver/java); the JVM Spark connector
#      (java/spark) is built against the venv's PySpark by its tests themselves
#      (scripts/setup-spark-jvm.sh, cached there too);
#   5. PostgreSQL and its ODBC driver from Debian's packages, if missing, for the
#      benchmark harness's sql suite (scripts/install-postgres.sh);
#   6. systemd, tmux and Chromium (with its chromedriver) from Debian's packages, if
#      missing, for the web console's browser tests, systemd-analyze
#      verify of the unit in deploy/ and for `quiver top` under a terminal
#      (scripts/install-os-tools.sh);
#   7. SeaweedFS's `weed`, the real S3 server that the object-storage tests start on
#      127.0.0.1 with a bucket and credentials (python/tests/s3_helpers.py), built
#      with Go from its module at a pinned version (scripts/install-s3-server.sh; a
#      few minutes cold, then cached outside the repository, in ~/.cache/quiver/s3);
#      its path is QUIVER_S3_SERVER_BIN for the tests;
#   8. ruff, mypy on the client package (python/quiver), and pytest against the
#      real server binary: the client's tests (Flight, Flight SQL through ADBC and
#      JDBC, the sqllogictest files) and the benchmark harness's smoke tests (tiny
#      sizes; never the benchmarks); then the cluster's tests once more on a secure
#      cluster (QUIVER_TEST_SECURE_CLUSTER=1: mutual TLS between the nodes, TLS and
#      users for clients, etcd with TLS and its users); then the client's own tests
#      once more with QUIVER_CORE=0, through pyarrow's Flight client alone (the
#      fallback of the package's Rust core).
#
# Environment:
#   CARGO_TARGET_DIR  where cargo builds (default: ./target)
#   QUIVER_VENV       the Python venv to create or reuse (default: ./.venv)
#   PYTHON            the interpreter for the venv (default: python3)
#   QUIVER_S3_CACHE   where scripts/install-s3-server.sh builds weed (default:
#                     ~/.cache/quiver/s3)
#   PYTEST_ARGS       extra pytest arguments, e.g. "-k put -x"
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${QUIVER_VENV:-$repo/.venv}"
python="${PYTHON:-python3}"
# The S3 server of the tests, where scripts/install-s3-server.sh builds it (step 7).
export QUIVER_S3_SERVER_BIN="${QUIVER_S3_CACHE:-$HOME/.cache/quiver/s3}/bin/weed"

# Each step's wall-clock time, printed at the end (docs/performance.md keeps a cold run's).
started=$SECONDS
current="" current_start=$SECONDS
timings=()
end_step() {
    [ -n "$current" ] && timings+=("$(printf '%6d s  %s' $((SECONDS - current_start)) "$current")")
    current=""
}
step() {
    end_step
    current="$*" current_start=$SECONDS
    printf '\n==> %s\n' "$*"
}
report_times() {
    local status=$?
    # Background jobs still running (the run failed before it waited for them), and
    # what they run (cargo, pip, apt-get): killing a job's subshell alone leaves them.
    local job
    for job in $(jobs -p); do
        pkill -P "$job" 2>/dev/null || true
        kill "$job" 2>/dev/null || true
    done
    [ -n "${no_protoc:-}" ] && rm -rf "$no_protoc"
    [ -n "${installs:-}" ] && rm -rf "$installs"
    end_step
    printf '\n==> time per step\n'
    printf '%s\n' "${timings[@]}"
    printf '%6d s  in all (exit %d)\n' $((SECONDS - started)) "$status"
}
trap report_times EXIT

command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
command -v "$python" >/dev/null || { echo "$python not found: install Python 3.10 or newer" >&2; exit 1; }

step "etcd, etcdctl and iptables (the cluster's tests)"
bash scripts/install-cluster-tools.sh

step "cargo fmt --check"
cargo fmt --all -- --check

# What waits on the network more than on the CPU installs while Rust compiles, in two
# background jobs: the Python venv (pip), and Java with the JDBC driver, PostgreSQL,
# systemd and tmux (apt-get, one after another for dpkg's lock), then SeaweedFS's weed
# (go build). Each writes a log; the steps that need them wait for them
# (`await_background`), and a failure ends the run there.
installs="$(mktemp -d)"
install_venv() {
    local stamp="$venv/.quiver-deps" want
    want="$(cat python/requirements-dev.txt bench/requirements.txt python/pyproject.toml | sha256sum | cut -d' ' -f1)"
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet -r python/requirements-dev.txt -r bench/requirements.txt
        echo "$want" > "$stamp"
    else
        echo "reused: its pins did not change"
    fi
}
install_system() {
    # Java and the Flight SQL JDBC driver (python/tests/test_jdbc.py), cached outside
    # the repository.
    bash scripts/setup-java.sh
    # PostgreSQL and psqlODBC (the benchmark harness's sql suite, smoke-tested).
    bash scripts/install-postgres.sh
    # systemd and tmux (test_deploy.py, test_top.py). Exit 3: they cannot be installed
    # here; the tests then say so (and fail with CI=true).
    bash scripts/install-os-tools.sh || [ $? -eq 3 ]
    # SeaweedFS's weed, the S3 server of the object-storage tests (python/tests/
    # s3_helpers.py): built with Go from its module (niced), cached outside the
    # repository at $QUIVER_S3_SERVER_BIN.
    bash scripts/install-s3-server.sh
}
background() {
    local name=$1
    shift
    ( start=$SECONDS; "$@"; echo "$((SECONDS - start))" > "$installs/$name.seconds" ) \
        > "$installs/$name.log" 2>&1 &
    echo $! > "$installs/$name.pid"
}
await_background() {
    local name=$1 what=$2
    step "waiting for $what (made in the background)"
    if ! wait "$(cat "$installs/$name.pid")"; then
        cat "$installs/$name.log" >&2
        echo "$what failed (log above)" >&2
        exit 1
    fi
    cat "$installs/$name.log"
    timings+=("$(printf '%6d s  %s' "$(cat "$installs/$name.seconds")" "$what, in the background")")
}
background venv install_venv
background system install_system

# No protoc from here on: PROTOC unset, and the first `protoc` on the PATH one that only
# fails, so a build step that runs protoc (a system one included) fails the run. The
# build must need cargo alone (issue 34); this makes every run prove it.
unset PROTOC PROTOC_INCLUDE
no_protoc="$(mktemp -d)"
cat > "$no_protoc/protoc" <<'EOF_PROTOC'
#!/bin/sh
echo "protoc was run, and building quiver must not need it (scripts/test.sh)" >&2
exit 1
EOF_PROTOC
chmod +x "$no_protoc/protoc"
export PATH="$no_protoc:$PATH"

# Clippy inside the builds: clippy-driver compiles the workspace's crates (lints and
# code at once), dependencies are built once by rustc, as `cargo clippy` would check
# them a second time. CLIPPY_ARGS is how cargo-clippy hands its flags to the driver.
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$clippy_driver" ] || { echo "clippy not found: rustup component add clippy" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

step "the quiver binary, with no protoc, its generated code made again (clippy -D warnings)"
# The same command as deploy/Containerfile's build stage, with the release profile.
profile=release
cargo clean --profile "$profile" --package quiver-etcd
# --timings: each crate's compile time, in $CARGO_TARGET_DIR/cargo-timings/ (what a cold
# run spends is in docs/performance.md, "Building and testing from cold").
cargo build --locked --profile "$profile" --bin quiver --timings
export QUIVER_BIN="$CARGO_TARGET_DIR/$profile/quiver"
"$QUIVER_BIN" serve --help | grep -q -- '--cluster' \
    || { echo "quiver serve --help lists no --cluster" >&2; exit 1; }

await_background venv "the Python venv ($venv)"

step "the client's wheel (maturin build, abi3), installed into the venv"
# Built afresh every run, into the same target directory as the rest (cargo rebuilds
# only what changed), and installed as a user installs it: the tests import the
# wheel's quiver from site-packages, not python/quiver.
wheels="$CARGO_TARGET_DIR/wheels"
rm -rf "$wheels"
# maturin resolves the crate's features alone: says which dependencies it would compile
# a second time (crates/quiver-python/Cargo.toml lists the workspace's features for it).
"$venv/bin/python" scripts/wheel-features.py --warn
# maturin reads python/pyproject.toml (the crate, the module's name, the features) from
# the directory it runs in.
(cd python && "$venv/bin/maturin" build --quiet --release --locked --out "$wheels")
wheel="$(ls "$wheels"/quiver_client-*-abi3-*.whl)"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"
export QUIVER_WHEEL="$wheel"
(cd / && "$venv/bin/python" -c 'import quiver, quiver._core, sys
assert "site-packages" in quiver.__file__, quiver.__file__
print("quiver", quiver.__version__, "from", quiver.__file__)')

step "ruff"
"$venv/bin/ruff" check python bench
"$venv/bin/ruff" format --check python bench

# The test binaries compile beside the Python tests, which keep about one of the two
# cores busy on average (docs/performance.md, "Cold again, 2026-11-29"): niced, so the
# servers and clients of the Python tests, some of them bound by deadlines, get the CPU
# first. Started after the wheel (one cargo at a time per target directory); the Rust
# tests run once the Python tests are done, on an otherwise idle machine.
background test-build nice -n 19 cargo test --release --workspace --locked --timings --no-run

step "mypy (the client package ships py.typed)"
"$venv/bin/mypy" --config-file python/pyproject.toml python/quiver

await_background system "Java and the JDBC driver, PostgreSQL and psqlODBC, systemd and tmux, SeaweedFS's weed"

step "pytest"
# --durations: the slowest tests, named in the log (what a run spends where).
# shellcheck disable=SC2086
"$venv/bin/python" -m pytest --durations=15 python/tests bench/tests ${PYTEST_ARGS:-}

step "pytest: the cluster tests again on a secure cluster (mTLS between nodes, TLS and users for clients, etcd with TLS and auth)"
# QUIVER_TEST_SECURE_CLUSTER: python/tests/cluster_helpers.py's docstring says what changes.
# shellcheck disable=SC2086
QUIVER_TEST_SECURE_CLUSTER=1 "$venv/bin/python" -m pytest ${PYTEST_ARGS:-} \
    python/tests/test_cluster.py python/tests/test_cluster_faults.py python/tests/test_cluster_sql.py \
    python/tests/test_cluster_console.py

step "pytest: the client's tests again through pyarrow alone (QUIVER_CORE=0, the fallback)"
# shellcheck disable=SC2086
QUIVER_CORE=0 "$venv/bin/python" -m pytest ${PYTEST_ARGS:-} \
    python/tests/test_client.py python/tests/test_core.py python/tests/test_error_kinds.py \
    python/tests/test_errors.py python/tests/test_flight_put.py python/tests/test_large_batches.py \
    python/tests/test_tls.py python/tests/test_security.py python/tests/test_concurrent_reads.py \
    python/tests/test_sql.py python/tests/test_shm.py

await_background test-build "the test binaries (cargo test --no-run, clippy -D warnings)"

step "cargo test: unit, integration and doc tests"
cargo test --release --workspace --locked
