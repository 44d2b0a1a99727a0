"""quiver: a client for the quiver Arrow Flight table store.

quiver keeps named Arrow tables in a server's memory and serves them over Arrow
Flight. This package wraps :mod:`pyarrow.flight` with quiver's conventions:

>>> import pyarrow as pa, quiver
>>> client = quiver.connect("127.0.0.1:8815")  # doctest: +SKIP
>>> client.put("trips", pa.table({"fare": [7.5, 12.0]}))  # doctest: +SKIP
PutResult(table='trips', version=1, rows=2, bytes=16)
>>> client.get("trips")  # doctest: +SKIP
pyarrow.Table
fare: double
"""

from ._exchange import ExchangeReader
from .client import Client, connect
from .errors import (
    AlreadyExistsError,
    AuthenticationError,
    DeadlineExceededError,
    FunctionError,
    FunctionNotFoundError,
    FunctionTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuiverError,
    ResourceExhaustedError,
    ServerUnavailableError,
    TableNotFoundError,
    UnimplementedError,
    VersionConflictError,
    WorkerDiedError,
)
from .results import ApplyResult, FunctionInfo, PutResult, ServerHealth, ServerStats, TableInfo

#: The package's version, the one place it is written: pyproject.toml reads it, and it
#: is the server's (the Cargo workspace's) version.
__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "ApplyResult",
    "AuthenticationError",
    "Client",
    "DeadlineExceededError",
    "ExchangeReader",
    "FunctionError",
    "FunctionInfo",
    "FunctionNotFoundError",
    "FunctionTimeoutError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "PutResult",
    "QuiverError",
    "ResourceExhaustedError",
    "ServerHealth",
    "ServerStats",
    "ServerUnavailableError",
    "TableInfo",
    "TableNotFoundError",
    "UnimplementedError",
    "VersionConflictError",
    "WorkerDiedError",
    "__version__",
    "connect",
]
