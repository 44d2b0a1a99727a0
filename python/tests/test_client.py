"""The quiver client, against the real server."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator

import numpy as np
import pandas as pd
import polars as pl
import polars.testing
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from flight_helpers import get, put, typed_table
from server_process import ServerFactory


def _stats(client: quiver.Client) -> tuple[object, ...]:
    stats = client.stats()
    return stats.tables, stats.rows, stats.bytes, stats.memory_used


def _staged(client: quiver.Client) -> list[str]:
    return [t.name for t in client.list_tables(prefix=".quiver-staging/")]


def test_connect_accepts_host_port(uri: str) -> None:
    host_port = uri.removeprefix("grpc+tcp://")
    with quiver.connect(host_port) as client:
        assert client.uri == uri
        assert client.health().ok
        assert repr(client) == f"Client({uri!r})"


def test_put_get_pyarrow_table(client: quiver.Client) -> None:
    table = typed_table(batches=10, rows=100)
    result = client.put("typed", table)
    assert isinstance(result, quiver.PutResult)
    assert result.table == "typed"
    assert result.rows == table.num_rows
    assert result.bytes > 0
    assert result.version >= 1
    assert client.get("typed").equals(table)


def test_put_record_batch_and_get_reader(client: quiver.Client) -> None:
    batch = typed_table(batches=1, rows=100).to_batches()[0]
    client.put("b", batch)
    reader = client.get_reader("b")
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.read_all().equals(pa.Table.from_batches([batch]))


def test_put_record_batch_reader_streams_and_stages(client: quiver.Client) -> None:
    table = typed_table(batches=20, rows=50)
    consumed = []

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in table.to_batches():
            consumed.append(batch.num_rows)
            yield batch

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    result = client.put("r", reader)
    assert result.table == "r"
    assert result.rows == table.num_rows
    assert len(consumed) == 20
    assert client.get("r").equals(table)
    assert client.info("r").version == result.version
    assert _staged(client) == []
    assert [t.name for t in client.list_tables()] == ["r"]


def test_put_iterable_of_batches_and_c_stream(client: quiver.Client) -> None:
    table = typed_table(batches=4, rows=25)
    client.put("it", iter(table.to_batches()))
    assert client.get("it").equals(table)
    client.put("list", table.to_batches())
    assert client.get("list").equals(table)

    class CStream:
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return table.__arrow_c_stream__(requested_schema)

    client.put("c", CStream())
    assert client.get("c").equals(table)


def test_put_rejects_what_is_not_table_like(client: quiver.Client) -> None:
    with pytest.raises(TypeError, match="cannot put str"):
        client.put("t", "not a table")
    with pytest.raises(ValueError, match="empty iterable"):
        client.put("t", [])
    with pytest.raises(TypeError, match="RecordBatches"):
        client.put("t", [1, 2])
    with pytest.raises(ValueError, match="mode must be one of"):
        client.put("t", pa.table({"a": [1]}), mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partitions"):
        client.put("t", pa.table({"a": [1]}), partitions=0)
    assert client.list_tables() == []


def test_failing_stream_leaves_the_table_as_it_was(client: quiver.Client) -> None:
    table = pa.table({"a": np.arange(10)})
    client.put("t", table)
    before = client.info("t").version

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"a": np.arange(5)})
        yield pa.record_batch({"a": np.arange(5)})
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        client.put("t", failing())
    assert client.get("t").equals(table)
    assert client.info("t").version == before
    assert _staged(client) == []
    with pytest.raises(RuntimeError, match="source broke"):
        client.put("new", failing())
    assert not client.exists("new")
    assert [t.name for t in client.list_tables()] == ["t"]


def test_pandas_round_trip(client: quiver.Client) -> None:
    frame = pd.DataFrame(
        {
            "i": np.arange(1000, dtype=np.int64),
            "f": np.linspace(0, 1, 1000),
            "s": [f"s{i}" if i % 10 else None for i in range(1000)],
            "b": np.arange(1000) % 3 == 0,
            "t": pd.date_range("2024-01-01", periods=1000, freq="min", tz="UTC"),
        },
        index=pd.RangeIndex(1000, 2000),
    )
    result = client.put("pandas", frame)
    assert result.rows == 1000
    back = client.to_pandas("pandas")
    pd.testing.assert_frame_equal(back, frame.reset_index(drop=True))
    pd.testing.assert_frame_equal(client.get("pandas").to_pandas(), back)


def test_polars_round_trip(client: quiver.Client) -> None:
    frame = pl.DataFrame(
        {
            "i": list(range(500)),
            "s": [f"s{i}" if i % 7 else None for i in range(500)],
            "d": [None if i % 5 == 0 else float(i) for i in range(500)],
            # polars sends list columns as large_list.
            "l": [None if i % 6 == 0 else [i, i + 1] for i in range(500)],
            "f": [i / 3 for i in range(500)],
        }
    )
    client.put("polars", frame)
    back = client.to_polars("polars")
    polars.testing.assert_frame_equal(back, frame)
    assert back.equals(frame)
    client.put("lazy", frame.lazy().filter(pl.col("i") < 10))
    polars.testing.assert_frame_equal(client.to_polars("lazy"), frame.head(10))


def test_append(client: quiver.Client) -> None:
    first = pa.table({"a": [1, 2], "b": ["x", "y"]})
    second = pa.table({"a": [3], "b": ["z"]})
    v1 = client.put("t", first)
    v2 = client.put("t", second, mode="append")
    assert v2.rows == 3
    assert v2.version > v1.version
    assert client.get("t").equals(pa.concat_tables([first, second]))
    # An append from a reader (not staged: appends go straight to the table).
    client.put("t", second.to_reader(), mode="append")
    assert client.get("t").column("a").to_pylist() == [1, 2, 3, 3]


def test_append_errors(client: quiver.Client) -> None:
    client.put("t", pa.table({"a": [1]}))
    before = _stats(client)
    with pytest.raises(quiver.InvalidArgumentError, match="schema mismatch") as raised:
        client.put("t", pa.table({"a": ["x"]}), mode="append")
    assert raised.value.code == "INVALID_ARGUMENT"
    assert isinstance(raised.value, ValueError)
    with pytest.raises(quiver.TableNotFoundError, match="table 'missing' not found"):
        client.put("missing", pa.table({"a": [1]}), mode="append")
    assert _stats(client) == before
    assert client.get("t").equals(pa.table({"a": [1]}))


def test_list_info_delete_rename(client: quiver.Client) -> None:
    for name in ["taxi/2024", "taxi/2023", "weather"]:
        client.put(name, pa.table({"n": [1, 2, 3]}))
    assert [t.name for t in client.list_tables()] == ["taxi/2023", "taxi/2024", "weather"]
    assert [t.name for t in client.list_tables("taxi/")] == ["taxi/2023", "taxi/2024"]

    info = client.info("weather")
    assert isinstance(info, quiver.TableInfo)
    assert info.name == "weather"
    assert info.schema.equals(pa.schema([("n", pa.int64())]))
    assert info.num_rows == 3
    assert info.num_bytes > 0
    assert info.partitions == 1
    assert len(info.endpoints) == 1
    assert info.version is not None
    assert client.list_tables("weather") == [info]

    version = client.rename("weather", "climate")
    assert version > info.version
    assert client.info("climate").version == version
    assert not client.exists("weather")
    with pytest.raises(quiver.AlreadyExistsError, match="table 'climate' already exists"):
        client.rename("taxi/2023", "climate")
    client.rename("taxi/2023", "climate", overwrite=True)
    assert [t.name for t in client.list_tables()] == ["climate", "taxi/2024"]

    client.delete("climate")
    assert [t.name for t in client.list_tables()] == ["taxi/2024"]
    with pytest.raises(quiver.TableNotFoundError):
        client.delete("climate")


def test_list_is_a_deprecated_alias_of_list_tables(client: quiver.Client) -> None:
    client.put("taxi/2024", pa.table({"n": [1]}))
    client.put("weather", pa.table({"n": [1]}))
    with pytest.warns(DeprecationWarning, match="use Client.list_tables"):
        listed = client.list("taxi/")
    assert listed == client.list_tables("taxi/")
    assert [t.name for t in listed] == ["taxi/2024"]


def test_stats_and_health(client: quiver.Client) -> None:
    client.put("t", pa.table({"a": np.arange(100)}))
    stats = client.stats()
    assert isinstance(stats, quiver.ServerStats)
    assert (stats.tables, stats.rows, stats.bytes) == (1, 100, 800)
    assert stats.memory_used >= stats.bytes
    assert stats.memory_limit > stats.memory_used
    assert stats.version == quiver.__version__
    assert isinstance(stats.uptime_seconds, float)
    assert stats.uptime_seconds >= 0
    health = client.health()
    assert health == quiver.ServerHealth("ok", health.uptime_seconds)
    assert health.ok
    with pytest.warns(DeprecationWarning, match=r"use \.tables instead"):
        assert stats["tables"] == 1
    with pytest.raises(KeyError):
        stats["nope"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.tables = 2  # type: ignore[misc]


def test_parallel_get_over_four_partitions_keeps_row_order(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "4")
    table = pa.table({"i": np.arange(100_003), "s": pa.array(np.arange(100_003).astype(str))})
    with quiver.connect(server.uri) as client:
        client.put("t", table.to_batches(max_chunksize=7_000))
        info = client.info("t")
        assert info.partitions == 4
        assert len(info.endpoints) == 4
        for workers in [None, 1, 2, 4]:
            assert client.get("t", max_workers=workers).equals(table)
        # Endpoints read from the same connection: no other client was opened.
        assert client._peers == {}


def test_put_partitions_option(start_quiver: ServerFactory) -> None:
    server = start_quiver("--partitions", "2")
    table = pa.table({"a": np.arange(1000)})
    with quiver.connect(server.uri) as client:
        client.put("default", table)
        assert client.info("default").partitions == 2
        client.put("six", table, partitions=6)
        info = client.info("six")
        assert info.partitions == 6
        assert len(info.endpoints) == 6
        assert client.get("six").equals(table)
        client.put("six", table, mode="append")
        assert client.info("six").partitions == 6
        client.put("six", table, mode="append", partitions=3)
        assert len(client.info("six").endpoints) == 3
        # A staged put (from a reader) keeps its partitions through the rename.
        client.put("staged", table.to_reader(), partitions=5)
        assert client.info("staged").partitions == 5


def test_a_put_repeated_with_its_request_id_is_committed_once(client: quiver.Client) -> None:
    table = pa.table({"a": np.arange(10)})
    client.put("t", table)
    first = client.put("t", table, mode="append", request_id="append-1")
    assert client.put("t", table, mode="append", request_id="append-1") == first
    assert client.get("t").num_rows == 20
    assert client.put("t", table, mode="append").rows == 30
    with pytest.raises(quiver.InvalidArgumentError, match="request id 'append-1'"):
        client.put("u", table, request_id="append-1")
    with pytest.raises(ValueError, match="request_id must be"):
        client.put("t", table, request_id="has space")


def test_endpoints_at_another_location_use_their_own_connection(server: object) -> None:
    uri = server.uri  # type: ignore[attr-defined]
    # The server advertises 127.0.0.1; reaching it as "localhost" makes its location differ.
    # (gRPC: over shared memory a get uses no endpoint connections.)
    with quiver.connect(uri.replace("127.0.0.1", "localhost"), transport="grpc") as client:
        table = pa.table({"a": np.arange(10)})
        client.put("t", table)
        assert client.get("t").equals(table)
        if client.data_plane.core is not None:
            # The Rust core read the endpoint at its own location.
            assert uri in client.data_plane.core.locations(), client.data_plane.core.locations()
        else:
            assert list(client._peers) == [uri]


def test_exceptions(client: quiver.Client) -> None:
    with pytest.raises(quiver.TableNotFoundError) as raised:
        client.get("nope")
    error = raised.value
    assert isinstance(error, KeyError)
    assert isinstance(error, quiver.QuiverError)
    assert str(error) == "table 'nope' not found"
    assert error.code == "NOT_FOUND"
    assert isinstance(error.__cause__, pa.ArrowException)
    with pytest.raises(KeyError):
        client.info("nope")
    with pytest.raises(KeyError):
        client.get_reader("nope")
    with pytest.raises(quiver.InvalidArgumentError, match="whitespace"):
        client.get(" nope")
    with pytest.raises(quiver.InvalidArgumentError, match="invalid table name"):
        client.put("", pa.table({"a": [1]}))


def test_resource_exhausted(start_quiver: ServerFactory) -> None:
    server = start_quiver("--max-memory", "1MiB")
    with quiver.connect(server.uri) as client:
        small = pa.table({"a": np.arange(1000)})
        client.put("t", small)
        big = pa.table({"a": np.arange(512 * 1024)})
        with pytest.raises(quiver.ResourceExhaustedError, match="memory limit") as raised:
            client.put("t", big)
        assert raised.value.code == "RESOURCE_EXHAUSTED"
        with pytest.raises(quiver.ResourceExhaustedError):
            client.put("t", big.to_batches(max_chunksize=10_000))
        assert client.get("t").equals(small)
        assert [t.name for t in client.list_tables()] == ["t"]


def test_unavailable_server() -> None:
    with quiver.connect("127.0.0.1:1") as client, pytest.raises(quiver.ServerUnavailableError):
        client.health()


def test_progress_bars(client: quiver.Client, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.table({"a": np.arange(10_000)})
    client.put("t", table, progress=True)
    assert client.get("t", progress=True).equals(table)
    client.put("r", table.to_reader(max_chunksize=1000), progress=True)
    err = capsys.readouterr().err
    assert "put t" in err
    assert "get t" in err
    assert "put r" in err
    assert "10.0k/10.0k" in err


def test_progress_without_tqdm_says_how_to_install(
    client: quiver.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ImportError, match=r"quiver-client\[progress\]"):
        client.put("t", pa.table({"a": [1]}), progress=True)
    assert client.list_tables() == []
    client.put("t", pa.table({"a": [1]}))


def test_get_retries_when_the_table_changes_after_flight_info(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gRPC: its tickets pin the version GetFlightInfo described, and a get retries when it
    # changed. (Over shared memory the ticket holds that version itself: nothing to retry.)
    client = quiver.connect(uri, transport="grpc")
    old = pa.table({"v": [1] * 10})
    new = pa.table({"v": [2] * 20})
    client.put("t", old)
    other = flight.FlightClient(uri)
    real_flight_info = client.data_plane.info
    calls = []

    def flight_info_then_replace(name: str) -> flight.FlightInfo:
        info = real_flight_info(name)
        calls.append(info)
        if len(calls) == 1:
            put(other, "t", new)  # the FlightInfo's tickets now pin a replaced version
        return info

    monkeypatch.setattr(client.data_plane, "info", flight_info_then_replace)
    assert client.get("t").equals(new)
    assert len(calls) == 2
    other.close()


def test_get_gives_up_after_three_retries(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # gRPC: its tickets pin the version GetFlightInfo described, and a get retries when it
    # changed. (Over shared memory the ticket holds that version itself: nothing to retry.)
    client = quiver.connect(uri, transport="grpc")
    client.put("t", pa.table({"v": [0]}))
    other = flight.FlightClient(uri)
    real_flight_info = client.data_plane.info
    calls = []

    def flight_info_then_replace(name: str) -> flight.FlightInfo:
        info = real_flight_info(name)
        calls.append(info)
        put(other, "t", pa.table({"v": [len(calls)]}))
        return info

    monkeypatch.setattr(client.data_plane, "info", flight_info_then_replace)
    with pytest.raises(quiver.VersionConflictError, match="changed since GetFlightInfo") as raised:
        client.get("t")
    assert raised.value.code == "ABORTED"
    assert len(calls) == 4
    assert get(other, "t").column("v").to_pylist() == [4]
    other.close()


def test_client_is_thread_safe(client: quiver.Client) -> None:
    from concurrent.futures import ThreadPoolExecutor

    tables = {f"t{i}": pa.table({"i": np.full(1000, i)}) for i in range(8)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda item: client.put(*item), tables.items()))
        results = dict(zip(tables, pool.map(client.get, tables), strict=True))
    for name, table in tables.items():
        assert results[name].equals(table)
