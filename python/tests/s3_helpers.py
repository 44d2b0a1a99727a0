"""A real S3-compatible server on loopback, for the tests of quiver's object storage.

The server is SeaweedFS's ``weed`` (docs/object-storage.md, "The S3 server of the
tests"), built by ``scripts/install-s3-server.sh`` (the test command runs it):
``$QUIVER_S3_SERVER_BIN``, else ``bin/weed`` in ``$QUIVER_S3_CACHE`` (by default
``~/.cache/quiver/s3``). It runs as :class:`quiver.testing.S3Server`: every listener on
127.0.0.1, a temporary data directory, and authenticated requests only, as the admin
(:data:`ACCESS_KEY`, :data:`SECRET_KEY`) or a read-only identity (:data:`READER_KEY`).

One server serves the whole session (the ``s3`` fixture, conftest.py); each test creates
the buckets it uses, with names of its own (:func:`unique_bucket`). A missing binary
fails the tests that need it, with or without ``CI=true``: they are never skipped.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from quiver import testing

#: The admin's keys: every action, bucket creation included.
ACCESS_KEY, SECRET_KEY = "quiver-test-admin", "quiver-test-admin-secret"

#: The access and secret keys of an identity that may only read and list.
READER_KEY = ("quiver-test-reader", "quiver-test-reader-secret")

#: Seconds the server may take to start (cold, a loaded machine).
START_TIMEOUT_S = 60.0

_buckets = itertools.count()


def s3_server_binary() -> Path:
    """Return the ``weed`` binary, failing the test with how to build it if it is missing."""
    binary = testing.find_s3_server_binary()
    if not binary.is_file():
        where = (
            "QUIVER_S3_SERVER_BIN"
            if os.environ.get("QUIVER_S3_SERVER_BIN")
            else "the default path (no QUIVER_S3_SERVER_BIN)"
        )
        pytest.fail(
            f"the S3 server of the tests (SeaweedFS's weed) is not at {binary}, from {where}: "
            "build it with `bash scripts/install-s3-server.sh` (scripts/test.sh runs it)",
            pytrace=False,
        )
    return binary


def start_s3(directory: Path) -> testing.S3Server:
    """Start an S3 server with its data in ``directory/data``; a failure fails the test.

    Stop it with :meth:`~quiver.testing.S3Server.stop`.
    """
    server = testing.S3Server(
        directory / "data",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        read_only_key=READER_KEY,
        binary=s3_server_binary(),
    )
    try:
        server.start(timeout=START_TIMEOUT_S)
    except testing.ServerStartError as error:
        pytest.fail(str(error), pytrace=False)
    return server


def unique_bucket(prefix: str = "t") -> str:
    """Return a bucket name no other test of this session uses (S3's rules: 3-63
    characters, lower case, digits and hyphens)."""
    return f"{prefix}-{os.getpid()}-{next(_buckets)}"
