"""Type stub of ``quiver._core``, the package's Rust core (crates/quiver-python)."""

from collections.abc import Sequence

import pyarrow as pa

class CallError(Exception):
    """A Flight call failed: ``args`` are ``(code, message, details)``.

    ``code`` is the gRPC status code (a number), ``details`` the server's
    ``grpc-status-details-bin`` trailer (empty if it sent none).
    """

    args: tuple[int, str, bytes]

class StreamStatus:
    """The error that ended a streaming DoGet."""

    def check(self) -> None:
        """Raise the stream's :class:`CallError`, if it failed."""

class Connection:
    """A client's connections: TLS material, headers sent with every call, timeout."""

    def __init__(
        self,
        *,
        tls_root_certs: bytes | None = None,
        cert_chain: bytes | None = None,
        private_key: bytes | None = None,
        override_hostname: str | None = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
        timeout: float | None = None,
        max_message_size: int = ...,
        body_pool_bytes: int = ...,
    ) -> None: ...
    def body_pool(self) -> tuple[int, int]:
        """Freed bodies held for reuse: ``(bytes, regions)``."""
    def locations(self) -> list[str]:
        """Return the locations this client holds an idle connection to, sorted."""
    def get(
        self, endpoints: Sequence[tuple[Sequence[str], bytes]], max_streams: int = 16
    ) -> pa.RecordBatchReader:
        """DoGet every ``(locations, ticket)`` in parallel; their batches in order.

        Each endpoint is read from the first of its locations that can be reached
        before its schema arrives; when none can, the last one's error names them all.
        """
    def get_stream(
        self, locations: Sequence[str], ticket: bytes
    ) -> tuple[pa.RecordBatchReader, StreamStatus]:
        """DoGet of one endpoint as a stream, from the first of its locations that answers."""
    def put(
        self,
        location: str,
        path: Sequence[str],
        data: object,
        app_metadata: bytes,
        max_message_bytes: int,
    ) -> bytes:
        """DoPut of ``data`` (an Arrow C stream); the last PutResult's ``app_metadata``."""

def shm_get(path: str, want: int, free: int | None, ticket: bytes) -> pa.RecordBatchReader:
    """Shared-memory get of ``ticket`` from the Unix socket at ``path``, asked with tag ``want``.

    The batches point into the server's memfds; ``free_data`` (tag ``free``) is sent
    once the last of their buffers is released.
    """
