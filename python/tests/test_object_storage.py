"""Tables in place in object storage: Parquet, CSV and Arrow IPC files in a real S3
server (SeaweedFS on 127.0.0.1, the ``s3`` fixture), queried where they lie.

What a data team does first: point ``--table`` or ``CREATE EXTERNAL TABLE`` at a bucket,
query it, see new files arrive, and get a clear error, with the right status, when the
credentials, the bucket or the server are wrong. Local files in place are held to the
same promises (a file rewritten or added between two queries is seen by the second).
"""

from __future__ import annotations

import io
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.flight as flight
import pyarrow.fs
import pyarrow.parquet as pq
import pytest

import quiver
from cluster_helpers import NODES, Cluster, Etcd, wait_until
from metrics_helpers import metric, scrape, value
from quiver import _sql, testing
from s3_helpers import ACCESS_KEY, SECRET_KEY, unique_bucket
from security_helpers import make_users
from server_process import Server, quiver_bin, start_server

#: The deadline of the requests made while S3 is down: the object store's retries
#: (quiver_objects::RETRY_TIMEOUT, 15 s) must end them as UNAVAILABLE before it, not
#: the client's deadline as DEADLINE_EXCEEDED.
DEADLINE_S = 40.0


def parquet_bytes(table: pa.Table, **options: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)  # type: ignore[arg-type]
    return sink.getvalue()


def trips(first: int, rows: int) -> pa.Table:
    ids = list(range(first, first + rows))
    return pa.table({"id": ids, "fare": [float(i % 50) for i in ids]})


@pytest.fixture
def start(tmp_path: Path, s3: testing.S3Server) -> Iterator[object]:
    """Start quiver servers that reach ``s3`` through the AWS environment; stopped (and
    required to exit cleanly) at teardown."""
    servers: list[Server] = []

    def run(*flags: str, env: dict[str, str] | None = None) -> Server:
        server = start_server(*flags, log_dir=tmp_path, env={**s3.env(), **(env or {})})
        servers.append(server)
        return server

    yield run
    for server in servers:
        code = server.stop()
        assert code == 0, f"quiver exited with {code}:\n{server.log()[-4000:]}"


def sql(uri: str, query: str) -> pa.Table:
    with quiver.connect(uri) as client:
        return client.sql(query)


def update(uri: str, statement: str) -> int:
    with quiver.connect(uri) as client:
        return client.execute_update(statement)


def read_all(
    client: flight.FlightClient,
    info: flight.FlightInfo,
    options: flight.FlightCallOptions | None = None,
) -> list[pa.Table]:
    return [client.do_get(endpoint.ticket, options).read_all() for endpoint in info.endpoints]


def failure(call: object) -> quiver.QuiverError:
    assert callable(call)
    with pytest.raises(quiver.QuiverError) as raised:
        call()
    return raised.value


def test_a_bucket_prefix_is_a_table_served_in_place(
    s3: testing.S3Server, start: object, tmp_path: Path
) -> None:
    bucket = unique_bucket("trips")
    s3.create_bucket(bucket)
    for part in range(3):
        s3.put_object(bucket, f"trips/part-{part}.parquet", parquet_bytes(trips(part * 1000, 1000)))
    # Not data: skipped when the format is told and when the files are listed.
    s3.put_object(bucket, "trips/_SUCCESS", b"")
    assert callable(start)
    server = start(
        f"--table=trips=s3://{bucket}/trips/",
        f"--table=trips_file=s3://{bucket}/trips/part-1.parquet",
        f"--table=trips_prefix=s3://{bucket}/trips",
        "--metrics-listen=127.0.0.1:0",
    )
    result = sql(server.uri, "SELECT count(*) AS n, sum(id) AS s, max(fare) AS m FROM trips")
    assert result.to_pylist() == [{"n": 3000, "s": sum(range(3000)), "m": 49.0}]
    assert sql(server.uri, "SELECT count(*) AS n FROM trips_file").to_pylist() == [{"n": 1000}]
    assert sql(server.uri, "SELECT count(*) AS n FROM trips_prefix").to_pylist() == [{"n": 3000}]
    # A filter is pushed into the Parquet scan and its rows come back exact.
    rows = sql(server.uri, "SELECT id FROM trips WHERE id BETWEEN 1998 AND 2001 ORDER BY id")
    assert rows.column("id").to_pylist() == [1998, 1999, 2000, 2001]
    # Served over plain Flight too: GetFlightInfo of its name gives an endpoint per group
    # of files, each read by DoGet (any Flight client), and by quiver's client.
    plain = flight.FlightClient(server.uri)
    try:
        info = plain.get_flight_info(flight.FlightDescriptor.for_path("trips"))
        assert len(info.endpoints) >= 2, info
        assert info.schema.names == ["id", "fare"]
        parts = [plain.do_get(e.ticket).read_all() for e in info.endpoints]
        assert sorted(pa.concat_tables(parts).column("id").to_pylist()) == list(range(3000))
        assert plain.get_schema(flight.FlightDescriptor.for_path("trips")).schema == info.schema
    finally:
        plain.close()
    with quiver.connect(server.uri) as client:
        got = client.get("trips")
    assert sorted(got.column("id").to_pylist()) == list(range(3000))
    # Listed as an external table (Flight SQL's GetTables, as ADBC and JDBC browse), and
    # the bytes read are counted per bucket.
    with flight_sql.connect(server.uri.replace("grpc+tcp", "grpc"), autocommit=True) as conn:
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    tables = objects[0]["catalog_db_schemas"][0]["db_schema_tables"]
    kinds = {t["table_name"]: t["table_type"] for t in tables}
    assert kinds == dict.fromkeys(["trips", "trips_file", "trips_prefix"], "EXTERNAL TABLE")
    samples = scrape(server.metrics_url())
    read = value(samples, "quiver_object_store_read_bytes_total", store=f"s3://{bucket}")
    assert read > 0, [k for k in samples if "object_store" in k[0]]
    # No key of the server's in what it logged.
    assert SECRET_KEY not in server.log()


def test_hive_partitions_are_columns_and_pruned(s3: testing.S3Server, start: object) -> None:
    bucket = unique_bucket("events")
    s3.create_bucket(bucket)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        table = pa.table({"n": [1, 2, 3], "what": ["a", "b", day]})
        s3.put_object(bucket, f"events/day={day}/part.parquet", parquet_bytes(table))
    assert callable(start)
    server = start(f"--table=events=s3://{bucket}/events/")
    result = sql(
        server.uri,
        "SELECT day, sum(n) AS n, max(what) AS w FROM events WHERE day >= '2026-01-02' "
        "GROUP BY day ORDER BY day",
    )
    assert result.to_pylist() == [
        {"day": "2026-01-02", "n": 6, "w": "b"},
        {"day": "2026-01-03", "n": 6, "w": "b"},
    ]
    # The scan lists only the partition the filter keeps.
    plan = sql(server.uri, "EXPLAIN SELECT n FROM events WHERE day = '2026-01-02'")
    text = "\n".join(str(v) for v in plan.column("plan").to_pylist())
    assert "day=2026-01-02/part.parquet" in text, text
    assert "day=2026-01-01" not in text and "day=2026-01-03" not in text, text


def test_csv_arrow_and_globs_in_a_bucket(s3: testing.S3Server, start: object) -> None:
    bucket = unique_bucket("files")
    s3.create_bucket(bucket)
    for i in range(2):
        sink = io.BytesIO()
        pacsv.write_csv(pa.table({"city": [f"c{i}"], "pop": [i + 10]}), sink)
        s3.put_object(bucket, f"cities/{i}.csv", sink.getvalue())
    s3.put_object(bucket, "cities/readme.txt", b"not a table")
    sink = io.BytesIO()
    feather.write_feather(pa.table({"k": [1, 2, 3]}), sink, compression="uncompressed")
    s3.put_object(bucket, "ipc/k.arrow", sink.getvalue())
    for name in ("a", "b", "c"):
        s3.put_object(bucket, f"mixed/{name}.parquet", parquet_bytes(pa.table({"x": [1]})))
    assert callable(start)
    server = start(
        f"--table=cities=s3://{bucket}/cities/*.csv",
        f"--table=keys=s3://{bucket}/ipc/",
        f"--table=two=s3://{bucket}/mixed/[ab].parquet",
    )
    assert sql(server.uri, "SELECT sum(pop) AS p FROM cities").to_pylist() == [{"p": 21}]
    assert sql(server.uri, "SELECT sum(k) AS k FROM keys").to_pylist() == [{"k": 6}]
    assert sql(server.uri, "SELECT count(*) AS n FROM two").to_pylist() == [{"n": 2}]


def test_files_that_arrive_change_or_go_are_seen_by_the_next_query(
    s3: testing.S3Server, start: object
) -> None:
    bucket = unique_bucket("lake")
    s3.create_bucket(bucket)
    s3.put_object(bucket, "t/a.parquet", parquet_bytes(trips(0, 100)))
    assert callable(start)
    server = start(f"--table=t=s3://{bucket}/t/")
    count = "SELECT count(*) AS n, sum(id) AS s FROM t"
    assert sql(server.uri, count).to_pylist() == [{"n": 100, "s": sum(range(100))}]
    s3.put_object(bucket, "t/b.parquet", parquet_bytes(trips(100, 50)))
    assert sql(server.uri, count).to_pylist() == [{"n": 150, "s": sum(range(150))}]
    # Rewritten: other rows, other length; the footer read before is not used.
    s3.put_object(bucket, "t/a.parquet", parquet_bytes(trips(1000, 10)))
    expected = sum(range(1000, 1010)) + sum(range(100, 150))
    assert sql(server.uri, count).to_pylist() == [{"n": 60, "s": expected}]
    s3.delete_object(bucket, "t/b.parquet")
    assert sql(server.uri, count).to_pylist() == [{"n": 10, "s": sum(range(1000, 1010))}]


def test_local_files_rewritten_added_or_removed_are_seen(tmp_path: Path, start: object) -> None:
    """The failure the issue found: a file in place rewritten shorter made every later
    query fail ("Out of range of file") until a restart."""
    directory = tmp_path / "local"
    directory.mkdir()
    pq.write_table(trips(0, 10_000), directory / "f1.parquet")
    assert callable(start)
    server = start(f"--table=t={directory}/")
    count = "SELECT count(*) AS n FROM t"
    assert sql(server.uri, count).to_pylist() == [{"n": 10_000}]
    pq.write_table(trips(0, 3), directory / "f1.parquet")
    assert sql(server.uri, count).to_pylist() == [{"n": 3}]
    pq.write_table(trips(0, 4), directory / "f2.parquet")
    assert sql(server.uri, count).to_pylist() == [{"n": 7}]
    (directory / "f1.parquet").unlink()
    assert sql(server.uri, count).to_pylist() == [{"n": 4}]


def test_a_list_ttl_keeps_a_listing_for_that_long(tmp_path: Path, start: object) -> None:
    """``--list-ttl``: the listing is kept, so a file that arrives is seen only once it
    expires (what the default, a listing per query, avoids)."""
    directory = tmp_path / "ttl"
    directory.mkdir()
    pq.write_table(trips(0, 5), directory / "f1.parquet")
    assert callable(start)
    server = start(f"--table=t={directory}/", "--list-ttl=10")
    count = "SELECT count(*) AS n FROM t"
    assert sql(server.uri, count).to_pylist() == [{"n": 5}]
    pq.write_table(trips(0, 6), directory / "f2.parquet")
    assert sql(server.uri, count).to_pylist() == [{"n": 5}], "listed again before the TTL"
    deadline = time.monotonic() + 40
    while sql(server.uri, count).to_pylist() != [{"n": 11}]:
        assert time.monotonic() < deadline, "the new file was never seen"
        time.sleep(0.5)


def test_create_external_table_on_s3_is_an_admins_and_names_no_endpoint(
    s3: testing.S3Server, start: object, tmp_path: Path
) -> None:
    bucket = unique_bucket("ddl")
    s3.create_bucket(bucket)
    s3.put_object(bucket, "t/a.parquet", parquet_bytes(trips(0, 10)))
    (tmp_path / "auth").mkdir()
    users, tokens = make_users(tmp_path / "auth")
    assert callable(start)
    server = start("--users", str(users))
    create = f"CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://{bucket}/t/'"

    def run(token: str, statement: str) -> int:
        with quiver.connect(server.uri, token=token) as client:
            return client.execute_update(statement)

    for role in ("reader", "writer"):
        error = failure(lambda role=role: run(tokens[role], create))
        assert error.code == "PERMISSION_DENIED", error
    # Options that would choose where the server connects, or with which keys: refused
    # before anything is reached (the address is one no test server listens on).
    for options in (
        "OPTIONS ('aws.endpoint' 'http://127.0.0.1:9')",
        f"OPTIONS ('aws.access_key_id' '{ACCESS_KEY}', 'aws.secret_access_key' 'x')",
        "OPTIONS ('aws.allow_http' 'true')",
    ):
        error = failure(lambda options=options: run(tokens["admin"], f"{create} {options}"))
        assert error.code == "PERMISSION_DENIED", error
        assert "server's configuration" in str(error), error
    # A location of a scheme quiver does not read is refused as well.
    error = failure(
        lambda: run(
            tokens["admin"],
            "CREATE EXTERNAL TABLE h STORED AS PARQUET LOCATION 'http://127.0.0.1:9/x.parquet'",
        )
    )
    assert error.code == "PERMISSION_DENIED", error
    assert run(tokens["admin"], create) == 0
    with quiver.connect(server.uri, token=tokens["reader"]) as client:
        assert client.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 10}]


def test_wrong_credentials_and_missing_buckets_or_keys_are_named(
    s3: testing.S3Server, start: object, tmp_path: Path
) -> None:
    bucket = unique_bucket("creds")
    locked = unique_bucket("locked")
    for name in (bucket, locked):
        s3.create_bucket(name)
        s3.put_object(name, "t/a.parquet", parquet_bytes(trips(0, 10)))
    wrong_secret = "not-the-secret-1234"
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {wrong_secret}\n"
    )
    assert callable(start)
    server = start(f"--s3={locked}.credentials-file={credentials}", "--metrics-listen=127.0.0.1:0")
    # Keys the server does not know: PERMISSION_DENIED (S3 answers 403), the bucket named.
    error = failure(
        lambda: update(
            server.uri,
            f"CREATE EXTERNAL TABLE l STORED AS PARQUET LOCATION 's3://{locked}/t/'",
        )
    )
    assert error.code == "PERMISSION_DENIED", error
    assert f"s3://{locked}" in str(error), error
    # A bucket that does not exist, and a key that does not: NOT_FOUND, named.
    missing = unique_bucket("missing")
    error = failure(
        lambda: update(
            server.uri, f"CREATE EXTERNAL TABLE m STORED AS PARQUET LOCATION 's3://{missing}/t/'"
        )
    )
    assert error.code == "NOT_FOUND", error
    assert missing in str(error), error
    error = failure(
        lambda: update(
            server.uri,
            f"CREATE EXTERNAL TABLE k STORED AS PARQUET LOCATION 's3://{bucket}/t/nope.parquet'",
        )
    )
    assert error.code == "NOT_FOUND", error
    assert "nope.parquet" in str(error), error
    # Nothing of either secret in a log line or a metric.
    metrics = "\n".join(f"{k}" for k in scrape(server.metrics_url()))
    for secret in (SECRET_KEY, wrong_secret):
        assert secret not in server.log()
        assert secret not in metrics
    # The server keeps serving: the right bucket still reads.
    update(server.uri, f"CREATE EXTERNAL TABLE ok STORED AS PARQUET LOCATION 's3://{bucket}/t/'")
    assert sql(server.uri, "SELECT count(*) AS n FROM ok").to_pylist() == [{"n": 10}]


def test_a_table_on_a_bucket_the_keys_cannot_read_stops_the_start(
    s3: testing.S3Server, tmp_path: Path
) -> None:
    bucket = unique_bucket("start")
    s3.create_bucket(bucket)
    s3.put_object(bucket, "t/a.parquet", parquet_bytes(trips(0, 10)))
    env = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret-5678"}
    server = start_server(f"--table=t=s3://{bucket}/t/", log_dir=tmp_path, env=env)
    # It binds, then registers its tables; a table it cannot read ends it.
    code = server.process.wait(timeout=60)
    log = server.log()
    assert code != 0, log
    assert f"--table t=s3://{bucket}/t/" in log, log
    assert "403 Forbidden" in log or "privileges" in log, log
    assert "wrong-secret-5678" not in log


def test_s3_stopped_during_a_query_is_unavailable_then_it_recovers(
    s3: testing.S3Server, start: object
) -> None:
    bucket = unique_bucket("down")
    s3.create_bucket(bucket)
    for part in range(4):
        s3.put_object(bucket, f"t/{part}.parquet", parquet_bytes(trips(part * 1000, 1000)))
    assert callable(start)
    # No cache: a read planned while S3 answered must reach it (a cached range would be
    # served without it).
    server = start(f"--table=t=s3://{bucket}/t/", "--cache-size=0")
    query = "SELECT count(*) AS n, sum(id) AS s FROM t"
    expected = [{"n": 4000, "s": sum(range(4000))}]
    with quiver.connect(server.uri) as client:
        client.put("stored", pa.table({"x": [1, 2, 3]}))
    assert sql(server.uri, query).to_pylist() == expected
    plain = flight.FlightClient(server.uri)
    try:
        # Planned (GetFlightInfo) while S3 answers; S3 stops before the DoGet reads it.
        descriptor = flight.FlightDescriptor.for_command(_sql.statement_query(query))
        info = plain.get_flight_info(descriptor)
        s3.stop()
        try:
            # Within the request's deadline: UNAVAILABLE, not DEADLINE_EXCEEDED.
            deadline = flight.FlightCallOptions(timeout=DEADLINE_S)
            with pytest.raises(flight.FlightUnavailableError):
                read_all(plain, info, deadline)
            # Planning a query while S3 is down: UNAVAILABLE too.
            with quiver.connect(server.uri, timeout=DEADLINE_S) as client:
                error = failure(lambda: client.sql(query))
            assert error.code == "UNAVAILABLE", error
            # Other tables are unaffected.
            with quiver.connect(server.uri) as client:
                assert client.get("stored").num_rows == 3
        finally:
            s3.start()
    finally:
        plain.close()
    # The same query, once S3 is back.
    assert sql(server.uri, query).to_pylist() == expected


def test_copy_to_and_export_write_whole_objects_to_s3(
    s3: testing.S3Server, start: object, tmp_path: Path
) -> None:
    bucket = unique_bucket("out")
    s3.create_bucket(bucket)
    assert callable(start)
    server = start()
    batches = [trips(i * 20_000, 20_000) for i in range(5)]
    with quiver.connect(server.uri) as client:
        client.put("stored", pa.concat_tables(batches))
    fs = s3.filesystem()
    small = f"s3://{bucket}/out/small.parquet"
    copied = update(
        server.uri,
        f"COPY (SELECT * FROM stored WHERE id < 100 ORDER BY id) TO '{small}' STORED AS PARQUET",
    )
    assert copied == 100
    read = pq.read_table(f"{bucket}/out/small.parquet", filesystem=fs)
    assert read.column("id").to_pylist() == list(range(100))
    # A query that fails after rows were written: the upload is abandoned, no object.
    bad = f"{bucket}/out/bad.parquet"
    error = failure(
        lambda: update(
            server.uri,
            f"COPY (SELECT 10 / (id - 90000) AS x FROM stored) TO 's3://{bad}' STORED AS PARQUET",
        )
    )
    assert "zero" in str(error).lower(), error
    assert fs.get_file_info(bad).type == pyarrow.fs.FileType.NotFound
    # The server's own files are not COPY's to write.
    local = tmp_path / "x.parquet"
    error = failure(lambda: update(server.uri, f"COPY (SELECT 1) TO '{local}' STORED AS PARQUET"))
    assert error.code == "PERMISSION_DENIED", error
    assert not local.exists()
    # `quiver export`: the same, for a stored table, from the shell.
    exported = f"s3://{bucket}/exports/stored.parquet"
    done = subprocess.run(
        [str(quiver_bin()), "export", "stored", exported, "--server", server.uri],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"exported 'stored' (100000 rows) to {exported}" in done.stdout, done.stdout
    back = pq.read_table(f"{bucket}/exports/stored.parquet", filesystem=fs)
    assert back.num_rows == 100_000
    assert back.sort_by("id").equals(pa.concat_tables(batches).sort_by("id"))


def test_the_cache_serves_repeated_reads_and_never_a_rewritten_objects_old_bytes(
    s3: testing.S3Server, start: object, tmp_path: Path
) -> None:
    bucket = unique_bucket("cache")
    s3.create_bucket(bucket)
    for part in range(3):
        table = trips(part * 5000, 5000)
        s3.put_object(bucket, f"t/{part}.parquet", parquet_bytes(table, compression="none"))
    cache_dir = tmp_path / "cache"
    assert callable(start)
    server = start(
        f"--table=t=s3://{bucket}/t/",
        f"--cache-dir={cache_dir}",
        "--cache-size=64MiB",
        "--metrics-listen=127.0.0.1:0",
    )
    store = f"s3://{bucket}"
    metrics = server.metrics_url()

    def read_bytes() -> tuple[float, float]:
        samples = scrape(metrics)
        return (
            value(samples, "quiver_object_store_read_bytes_total", store=store),
            value(samples, "quiver_object_store_cache_hits_total", store=store),
        )

    query = "SELECT count(*) AS n, sum(id) AS s, sum(fare) AS f FROM t"
    first = sql(server.uri, query).to_pylist()
    assert first[0]["n"] == 15_000
    cold, _ = read_bytes()
    assert cold > 0
    assert any(cache_dir.iterdir()), "nothing cached in --cache-dir"
    # Warm: the same answer, and not one byte more from S3.
    assert sql(server.uri, query).to_pylist() == first
    warm, hits = read_bytes()
    assert warm == cold, (cold, warm)
    assert hits > 0
    # Rewritten with other rows, of the same size (uncompressed, plain: the same bytes
    # per value): the next query reads the new version (its ETag), not the cached
    # ranges of the old one.
    plain = {"compression": "none", "use_dictionary": False}
    old, new = parquet_bytes(trips(0, 5000), **plain), parquet_bytes(trips(100_000, 5000), **plain)
    assert len(old) == len(new), "the test needs a rewrite of the same size"
    s3.put_object(bucket, "t/0.parquet", new)
    again = sql(server.uri, query).to_pylist()
    expected = sum(range(100_000, 105_000)) + sum(range(5000, 15_000))
    assert again[0]["s"] == expected, again
    after, _ = read_bytes()
    assert after > warm, "the new version was not read from S3"


def test_every_cluster_node_reads_a_shared_s3_table(
    s3: testing.S3Server, etcd: Etcd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster each node registers the table and reaches the bucket with its own
    settings (the same here): a query through any node reads files through that node's
    stores (its share of them, and their footers) and gives the same answer. The next
    test checks how the files are split over the nodes."""
    bucket = unique_bucket("shared")
    s3.create_bucket(bucket)
    parts = 12
    for part in range(parts):
        s3.put_object(bucket, f"t/{part:02}.parquet", parquet_bytes(trips(part * 2000, 2000)))
    for key, setting in s3.env().items():
        monkeypatch.setenv(key, setting)
    cluster = Cluster(etcd, tmp_path)
    try:
        # No cache of ranges: every scan reads from S3, so the counters say who scanned.
        flags = (f"--table=t=s3://{bucket}/t/", "--metrics-listen=127.0.0.1:0", "--cache-size=0")
        for node_id in NODES:
            cluster.start(node_id, *flags)
        wait_until("three live nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        query = "SELECT fare, count(*) AS n, sum(id) AS s FROM t GROUP BY fare ORDER BY fare"

        # A node registers its tables once it listens: each answers a count once it has.
        def serves_t(node_id: str) -> bool:
            try:
                with cluster.client(node_id) as client:
                    return client.sql("SELECT count(*) AS n FROM t").num_rows == 1
            except quiver.QuiverError:
                return False

        for node_id in NODES:
            wait_until(f"{node_id} serving t", lambda node_id=node_id: serves_t(node_id))
        expected = parts * 2000
        urls = {node_id: server.metrics_url() for node_id, server in cluster.nodes.items()}
        name = "quiver_object_store_read_bytes_total"
        answers = []
        for node_id in NODES:
            # Each node asked reads the files itself, through its own stores.
            before = metric(urls[node_id], name)
            with cluster.client(node_id) as client:
                answers.append(client.sql(query))
            assert metric(urls[node_id], name) > before, node_id
        assert sum(answers[0].column("n").to_pylist()) == expected
        assert sum(answers[0].column("s").to_pylist()) == sum(range(expected))
        assert all(answer.equals(answers[0]) for answer in answers), answers
        # Served as Flight by any node: one endpoint per group of files, for engines'
        # tasks to read one each.
        with cluster.client("n2") as client:
            assert client.info("t").partitions >= 2, client.info("t")
            got = client.get("t")
        assert got.num_rows == expected
        assert sorted(got.column("id").to_pylist()) == list(range(expected))
    finally:
        failures = cluster.stop_all()
        assert not failures, failures


#: A share of a scan of files in place, as EXPLAIN ANALYZE shows each task's.
SHARE = re.compile(r"InPlaceScanExec: store=\S+, files=(\d+), bytes=\d+, node=(\w+)")


def test_a_cluster_query_splits_a_shared_s3_tables_files_over_the_nodes_serving_it(
    s3: testing.S3Server,
    etcd: Etcd,
    start: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Distributed SQL cuts a table in place's files into one share per node that serves
    the table (its ``--table``), each read by its node through its own stores and cache:
    one query through one node reads from the bucket on every such node, a share each,
    never on a node without the table; the same query again reads nothing more from the
    bucket (each node's cache holds what its share read); objects rewritten meanwhile
    are read as the new versions the planning node listed, on every node. Every answer is
    the single node's."""
    bucket = unique_bucket("split")
    s3.create_bucket(bucket)
    parts = 12
    plain = {"compression": "none", "use_dictionary": False}

    def write_all(first: int, rows: int) -> None:
        for part in range(parts):
            table = trips(first + part * rows, rows)
            s3.put_object(bucket, f"t/{part:02}.parquet", parquet_bytes(table, **plain))

    write_all(0, 2000)
    for key, setting in s3.env().items():
        monkeypatch.setenv(key, setting)
    table_flag = f"--table=t=s3://{bucket}/t/"
    query = "SELECT fare, count(*) AS n, sum(id) AS s FROM t GROUP BY fare ORDER BY fare"
    assert callable(start)
    single = start(table_flag, "--metrics-listen=127.0.0.1:0", "--cache-size=0")
    single_metrics = single.metrics_url()
    store = f"s3://{bucket}"
    read, hits = "quiver_object_store_read_bytes_total", "quiver_object_store_cache_hits_total"
    cluster = Cluster(etcd, tmp_path)
    try:
        common = ("--metrics-listen=127.0.0.1:0", "--cache-size=64MiB")
        # n3 has no table in place at first. (A server prints its metrics address once.)
        urls = {
            "n1": cluster.start("n1", table_flag, *common).metrics_url(),
            "n2": cluster.start("n2", table_flag, *common).metrics_url(),
            "n3": cluster.start("n3", *common).metrics_url(),
        }
        wait_until("three live nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]

        def serves_t(node_id: str) -> bool:
            try:
                with cluster.client(node_id) as client:
                    return client.sql("SELECT count(*) AS n FROM t").num_rows == 1
            except quiver.QuiverError:
                return False

        def reads(metric_name: str) -> dict[str, float]:
            return {node_id: metric(url, metric_name, store=store) for node_id, url in urls.items()}

        def shares() -> list[tuple[str, int]]:
            """The node and files of each share of the query's scan, as run through n1."""
            with cluster.client("n1") as client:
                plan = client.sql(f"EXPLAIN ANALYZE {query}")
            text = "\n".join(str(row) for row in plan.column("plan").to_pylist())
            return [(node, int(files)) for files, node in SHARE.findall(text)]

        def shares_on(nodes: set[str]) -> bool:
            try:
                return {node for node, _ in shares()} == nodes
            except quiver.QuiverError:
                return False

        for node_id in ("n1", "n2"):
            wait_until(f"{node_id} serving t", lambda node_id=node_id: serves_t(node_id))
        expected = sql(single.uri, query)
        assert sum(expected.column("n").to_pylist()) == parts * 2000

        # Split over n1 and n2, the nodes that serve t (each reads its share through its
        # cache, which their own queries above filled); n3, which does not, reads nothing.
        def lookups() -> dict[str, float]:
            hit, missed = reads(hits), reads("quiver_object_store_cache_misses_total")
            return {node_id: hit[node_id] + missed[node_id] for node_id in NODES}

        before = lookups()
        with cluster.client("n1") as client:
            assert client.sql(query).equals(expected)
        after = lookups()
        assert after["n1"] > before["n1"] and after["n2"] > before["n2"], (before, after)
        assert after["n3"] == before["n3"] == 0, (before, after)
        split = shares()
        assert {node for node, _ in split} == {"n1", "n2"}, split
        assert sum(files for _, files in split) == parts, split
        assert reads(read)["n3"] == 0

        # n3 back with the table: a share for each of the three.
        assert cluster.nodes["n3"].stop() == 0
        urls["n3"] = cluster.start("n3", table_flag, *common).metrics_url()
        wait_until("n3 serving t", lambda: serves_t("n3"))
        wait_until("a share on each node", lambda: shares_on({"n1", "n2", "n3"}))

        # Every object rewritten (other rows, other sizes): new versions, read cold.
        write_all(100_000, 2100)
        single_before = metric(single_metrics, read, store=store)
        expected = sql(single.uri, query)
        whole = metric(single_metrics, read, store=store) - single_before
        assert sum(expected.column("s").to_pylist()) == sum(range(100_000, 100_000 + parts * 2100))
        before = reads(read)
        with cluster.client("n1") as client:
            assert client.sql(query).equals(expected)
        after = reads(read)
        # One query through n1 read from the bucket on all three nodes; n2 and n3 read
        # their shares (a third each), not the table.
        for node_id in NODES:
            assert after[node_id] > before[node_id], (node_id, before, after)
        for node_id in ("n2", "n3"):
            assert after[node_id] - before[node_id] < 0.6 * whole, (node_id, whole, before, after)

        # Again: every node reads its share from its own cache, nothing from the bucket.
        hits_before = reads(hits)
        with cluster.client("n1") as client:
            assert client.sql(query).equals(expected)
        assert reads(read) == after, (after, reads(read))
        hits_after = reads(hits)
        for node_id in NODES:
            assert hits_after[node_id] > hits_before[node_id], (node_id, hits_before, hits_after)
        split = shares()
        assert sorted(node for node, _ in split) == list(NODES), split
        assert sum(files for _, files in split) == parts, split
        assert all(files > 0 for _, files in split), split

        # n3 lost: until its lease ends it is in the catalog and may be given a share; the
        # query loses it before its first row, is planned again over n1 and n2, and gives
        # the whole answer.
        cluster.kill("n3")
        for _ in range(3):
            with cluster.client("n1") as client:
                assert client.sql(query).equals(expected)
    finally:
        failures = cluster.stop_all()
        assert not failures, failures
