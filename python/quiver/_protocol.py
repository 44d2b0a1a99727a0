"""quiver's conventions on top of Arrow Flight, in one place (see docs/protocol.md).

How a table name becomes a descriptor, how put options are encoded, what the
actions are called and what their JSON bodies hold, and what GetFlightInfo's
tickets look like.
"""

from __future__ import annotations

import json
from typing import Literal

import pyarrow as pa
import pyarrow.flight as flight

#: The address :func:`quiver.connect` uses when given none.
DEFAULT_URI = "grpc+tcp://127.0.0.1:8815"

#: The scheme assumed for a bare ``host:port``.
DEFAULT_SCHEME = "grpc+tcp"

#: The location URI Flight uses for "the connection this FlightInfo came from".
REUSE_CONNECTION_URI = "arrow-flight-reuse-connection://?"

#: What every ticket issued by GetFlightInfo starts with.
TICKET_PREFIX = b"\0quiver-ticket-v1:"

#: The put modes the server knows.
PutMode = Literal["replace", "append"]
PUT_MODES: tuple[str, ...] = ("replace", "append")
PutPlace = Literal["spread", "here"]
PUT_PLACES: tuple[str, ...] = ("spread", "here")

#: How the client moves table data (see :func:`quiver.connect`).
Transport = Literal["auto", "shm", "grpc"]

#: The largest ``partitions`` option the server accepts.
MAX_PARTITIONS = 1024

ACTION_DELETE = "delete"
ACTION_RENAME = "rename"
ACTION_PUBLISH = "publish"
ACTION_STATS = "stats"
ACTION_HEALTH = "health"
ACTION_NODES = "nodes"
ACTION_LIST_FUNCTIONS = "list-functions"

#: A JSON object as decoded by :func:`json.loads`.
JsonObject = dict[str, object]


def normalize_uri(uri: str) -> str:
    """Return ``uri`` with a scheme, adding ``grpc+tcp://`` to a bare ``host:port``."""
    uri = uri.strip()
    if "://" not in uri:
        uri = f"{DEFAULT_SCHEME}://{uri}"
    return uri


def descriptor(name: str) -> flight.FlightDescriptor:
    """Return the PATH descriptor naming table ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"a table name is a str, not {type(name).__name__}")
    return flight.FlightDescriptor.for_path(name)


def descriptor_name(desc: flight.FlightDescriptor) -> str:
    """Return the table name a descriptor stands for (PATH segments joined by ``/``)."""
    if desc.descriptor_type == flight.DescriptorType.PATH:
        return "/".join(_text(segment) for segment in desc.path or [])
    return _text(desc.command or b"")


#: The longest request id a put may carry.
MAX_REQUEST_ID = 128


def put_options(
    mode: str, partitions: int | None, request_id: str | None = None, place: str = "spread"
) -> bytes:
    """Encode the options of a DoPut as the JSON the server reads from ``app_metadata``.

    ``place`` is sent only when it is ``"here"``, so a default put reaches servers
    that do not know the option.

    Raises
    ------
    ValueError
        ``mode`` is not a known put mode, ``partitions`` is out of range,
        ``request_id`` is not 1 to 128 printable ASCII characters, or ``place`` is
        neither ``"spread"`` nor ``"here"``.
    """
    if mode not in PUT_MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, PUT_MODES))}, not {mode!r}")
    options: JsonObject = {"mode": mode}
    if partitions is not None:
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise ValueError(f"partitions must be an int, not {type(partitions).__name__}")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}")
        options["partitions"] = partitions
    if request_id is not None:
        text = str(request_id)  # a caller without type checking may pass anything
        valid = text == request_id and 0 < len(text) <= MAX_REQUEST_ID
        if not valid or not all("!" <= ch <= "~" for ch in text):
            raise ValueError(
                f"request_id must be 1 to {MAX_REQUEST_ID} printable ASCII characters "
                f"without spaces, not {request_id!r}"
            )
        options["request"] = request_id
    if place not in PUT_PLACES:
        raise ValueError(f"place must be one of {', '.join(map(repr, PUT_PLACES))}, not {place!r}")
    if place == "here":
        options["place"] = place
    return json.dumps(options, separators=(",", ":")).encode()


def rename_body(old: str, new: str, overwrite: bool) -> bytes:
    """Encode the body of a ``rename`` action."""
    return json.dumps({"from": old, "to": new, "overwrite": bool(overwrite)}).encode()


def publish_body(into: str, sources: list[str], mode: str, partitions: int | None) -> bytes:
    """Encode the body of a ``publish`` action."""
    body: JsonObject = {"into": into, "from": sources, "mode": mode}
    if partitions is not None:
        body["partitions"] = partitions
    return json.dumps(body).encode()


def buffer_bytes(buffer: pa.Buffer | None) -> bytes:
    """Return the bytes of a result's body (``b""`` for none)."""
    return buffer.to_pybytes() if buffer is not None else b""


def json_object(payload: bytes | None) -> JsonObject:
    """Decode a JSON object sent by the server; an empty payload is ``{}``."""
    if not payload:
        return {}
    value = json.loads(bytes(payload))
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object from the server, got {value!r}")
    return value


def json_int(obj: JsonObject, key: str) -> int | None:
    """Return ``obj[key]`` if it is an integer, else ``None``."""
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def json_float(obj: JsonObject, key: str) -> float | None:
    """Return ``obj[key]`` as a float if it is a number, else ``None``."""
    value = obj.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def pinned_ticket(ticket: bytes) -> JsonObject | None:
    """Decode a ticket issued by GetFlightInfo, or return ``None`` for any other ticket."""
    if not ticket.startswith(TICKET_PREFIX):
        return None
    try:
        return json_object(ticket[len(TICKET_PREFIX) :])
    except ValueError:
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
