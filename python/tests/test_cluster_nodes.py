"""Who may do what on a cluster: nodes prove they are nodes, clients meet the roles.

Real etcd and three real nodes on 127.0.0.1-3. A partition's storage name
(``.quiver-part/...``) is no table name to a client: every RPC that takes a table name
refuses it, a DoPut of a partition is taken from nodes only (their calls are signed with
the cluster's secret, which etcd holds), and so is the worker service of distributed SQL.
With ``--users`` on every node, each node holds each client to the same roles as one node
does, while the copies and SQL stages the nodes run for those clients go through.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import quiver
from cluster_helpers import NODES, Cluster, Etcd, quiver_cluster, wait_until
from security_helpers import (
    DATA,
    OTHER_ACTIONS,
    READ_CALLS,
    TABLE,
    WRITE_CALLS,
    bearer,
    do_put,
    expect_code,
    get_sql,
    login,
    make_users,
    refused_with,
    sql_update,
)
from test_cluster_security import serve_fails

#: What starts every ticket quiver issues (crates/quiver-flight/src/ticket.rs).
TICKET_PREFIX = b"\0quiver-ticket-v1:"

#: The worker service of distributed SQL, on every node's Flight port.
WORKER_INFO = "/worker.WorkerService/GetWorkerInfo"


def ids(rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(rows), pa.int64())})


def storage_names(info: flight.FlightInfo) -> list[tuple[str, str]]:
    """(storage name, first location) of each endpoint of a cluster table's FlightInfo."""
    names = []
    for endpoint in info.endpoints:
        ticket = endpoint.ticket.ticket
        assert ticket.startswith(TICKET_PREFIX), ticket
        names.append(
            (json.loads(ticket[len(TICKET_PREFIX) :])["t"], endpoint.locations[0].uri.decode())
        )
    return names


def read_endpoints(uri: str, name: str, options: flight.FlightCallOptions) -> pa.Table:
    """Table ``name`` as any Flight client reads it: FlightInfo from ``uri``, then each
    endpoint from its first location (another node, mostly), with ``options``."""
    with flight.FlightClient(uri) as client:
        info = client.get_flight_info(flight.FlightDescriptor.for_path(name), options)
    parts = []
    for endpoint in info.endpoints:
        with flight.FlightClient(endpoint.locations[0].uri.decode()) as holder:
            parts.append(holder.do_get(endpoint.ticket, options).read_all())
    return pa.concat_tables(parts).sort_by("id")


def forged_node(node: str = "n1") -> flight.FlightCallOptions:
    """A node header signed with a secret that is not the cluster's."""
    header = f"v1 {int(time.time())} {'A' * 43} {node}".encode()
    return flight.FlightCallOptions(headers=[(b"x-quiver-node", header)])


def worker_call(uri: str, metadata: tuple[tuple[str, str], ...] = ()) -> grpc.StatusCode:
    """The status of a call to the worker service at ``uri``, as a client makes it."""
    address = uri.split("://", 1)[1]
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            WORKER_INFO, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        try:
            call(b"", timeout=10, metadata=metadata)
        except grpc.RpcError as error:
            return error.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_no_client_can_name_a_partitions_storage(cluster: Cluster) -> None:
    table = ids(3000)
    with quiver.connect(cluster.uri("n1")) as c:
        c.put("t", table)
        c.put("u", ids(10))
    with flight.FlightClient(cluster.uri("n2")) as client:
        info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
    parts = storage_names(info)
    assert len(parts) == 3 and all(name.startswith(".quiver-part/t#") for name, _ in parts)
    part, holder = parts[0]
    invalid = pa.ArrowInvalid
    with flight.FlightClient(holder) as client:
        # Anything that takes a table name refuses a storage name.
        by_name = {
            "DoPut": do_put(flight.FlightDescriptor.for_path(part), ids(10)),
            "GetFlightInfo": lambda c, o: c.get_flight_info(
                flight.FlightDescriptor.for_path(part), o
            ),
            "delete": lambda c, o: list(c.do_action(flight.Action("delete", part.encode()), o)),
            "rename from": lambda c, o: list(
                c.do_action(
                    flight.Action("rename", json.dumps({"from": part, "to": "x"}).encode()), o
                )
            ),
            "rename to": lambda c, o: list(
                c.do_action(
                    flight.Action(
                        "rename", json.dumps({"from": "u", "to": ".quiver-part/u-2"}).encode()
                    ),
                    o,
                )
            ),
            "publish": lambda c, o: list(
                c.do_action(
                    flight.Action(
                        "publish",
                        json.dumps({"into": "x", "from": [part], "mode": "replace"}).encode(),
                    ),
                    o,
                )
            ),
            "SQL DROP TABLE": sql_update(f'DROP TABLE "{part}"'),
        }
        for call in by_name.values():
            words = "kept for quiver's own storage"
            expect_code(invalid, words, call, client, flight.FlightCallOptions())
        with pytest.raises(invalid, match="not found"):
            get_sql(f'SELECT count(*) FROM "{part}"')(client, flight.FlightCallOptions())
        # The nodes' own DoPut of a partition: refused to a client, even with every role
        # (no --users here), and to a forged node signature.
        node_put = flight.FlightDescriptor.for_command(json.dumps({"partition": part}))
        with pytest.raises(flight.FlightUnauthorizedError, match="node role"):
            do_put(node_put, ids(10))(client, flight.FlightCallOptions())
        with pytest.raises(flight.FlightUnauthenticatedError, match="cluster's secret"):
            do_put(node_put, ids(10))(client, forged_node())
        # GetSchema of a cluster table answers from the catalog on any node.
        assert client.get_schema(flight.FlightDescriptor.for_path("t")).schema == table.schema
        # The partition is listed nowhere, and still read by its ticket.
        assert sorted(i.descriptor.path[0].decode() for i in client.list_flights()) == ["t", "u"]
        assert client.do_get(info.endpoints[0].ticket).read_all().num_rows > 0
    # The worker service answers nodes only.
    for node_id in NODES:
        assert worker_call(cluster.uri(node_id)) == grpc.StatusCode.PERMISSION_DENIED
        forged = (("x-quiver-node", f"v1 {int(time.time())} {'A' * 43} n1"),)
        assert worker_call(cluster.uri(node_id), forged) == grpc.StatusCode.UNAUTHENTICATED
    # Nothing changed: every node reads t whole, both copies of every partition agree.
    for node_id in NODES:
        with quiver.connect(cluster.uri(node_id)) as c:
            assert c.get("t").sort_by("id").equals(table)
            assert c.get("u").num_rows == 10
    status = cluster.status()
    assert status["under_replicated"] == 0


def test_a_cluster_with_users_holds_every_node_to_the_roles(etcd: Etcd, tmp_path: Path) -> None:
    users, api_tokens = make_users(tmp_path)
    secret = tmp_path / "token-secret"
    secret.write_bytes(os.urandom(64))
    cluster = Cluster(etcd, tmp_path)
    try:
        for node_id in NODES:
            cluster.start(node_id, "--users", str(users), "--token-secret-file", str(secret))
        wait_until("three live nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        # A writer's put through n1: its partitions are copied to the other nodes, whose
        # --users takes the copies because n1 signs them as a node.
        writer = bearer(login(cluster.uri("n1"), "writer"))
        with flight.FlightClient(cluster.uri("n1")) as client:
            do_put(flight.FlightDescriptor.for_path(TABLE), DATA)(client, writer)
        assert cluster.status()["under_replicated"] == 0
        # A token from n1's Handshake is good on every node (--token-secret-file).
        reader = bearer(login(cluster.uri("n1"), "reader"))
        refused = {
            "no credentials": flight.FlightCallOptions(),
            "forged token": bearer("qs1.AAAA.BBBB"),
            "forged node": forged_node(),
        }
        for node_id in NODES:
            uri = cluster.uri(node_id)
            with flight.FlightClient(uri) as client:
                for credentials, options in refused.items():
                    for name, call in {**READ_CALLS, **WRITE_CALLS, **OTHER_ACTIONS}.items():
                        try:
                            call(client, options)
                        except Exception as error:
                            if refused_with(error, "unauthenticated"):
                                continue
                            pytest.fail(f"{node_id}: {name} with {credentials}: {error}")
                        pytest.fail(f"{node_id}: {name} with {credentials} was served")
                # Every read call a single node answers a reader, this node answers.
                for name, call in READ_CALLS.items():
                    try:
                        call(client, reader)
                    except flight.FlightError as error:
                        pytest.fail(f"{node_id}: {name} as reader: {error}")
                by_name = client.do_get(flight.Ticket(TABLE.encode()), reader).read_all()
                assert by_name.sort_by("id").equals(DATA)
                for name, call in WRITE_CALLS.items():
                    try:
                        call(client, reader)
                    except Exception as error:
                        if refused_with(error, "permission denied") and "role" in str(error):
                            continue
                        pytest.fail(f"{node_id}: {name} as reader: {error}")
                    pytest.fail(f"{node_id}: {name} as reader was served")
                external = tmp_path / "external.csv"
                external.write_text("a\n1\n")
                create = f"CREATE EXTERNAL TABLE ext STORED AS CSV LOCATION '{external}'"
                with pytest.raises(flight.FlightUnauthorizedError, match="admin role"):
                    sql_update(create)(client, writer)
                # The reader reads through every node: the endpoints lead to the others,
                # and distributed SQL runs its stages there.
                (counted,) = get_sql(f"SELECT count(*) AS n, sum(id) AS s FROM {TABLE}")(
                    client, reader
                )
                assert counted.to_pylist() == [{"n": 100, "s": 4950}]
            assert read_endpoints(uri, TABLE, reader).equals(DATA)
        # The refused calls changed nothing.
        assert read_endpoints(cluster.uri("n3"), TABLE, bearer(api_tokens["admin"])).equals(DATA)
    finally:
        failures = cluster.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_a_cluster_with_users_needs_one_token_secret(etcd: Etcd, tmp_path: Path) -> None:
    users, _ = make_users(tmp_path)
    error = serve_fails(etcd, tmp_path, "--cluster", etcd.url, "--users", str(users))
    assert "--token-secret-file" in error, error


def test_a_cluster_with_tls_between_its_nodes(etcd: Etcd, tmp_path: Path) -> None:
    # The three commands docs/security.md gives: a CA, then a certificate per node.
    pki = tmp_path / "pki"
    quiver_cluster("init-ca", "--dir", str(pki))
    for index, node_id in enumerate(NODES, start=1):
        quiver_cluster(
            "issue-cert", "--dir", str(pki), "--node", node_id, "--host", f"127.0.0.{index}"
        )
    quiver_cluster("issue-cert", "--dir", str(pki), "--node", "client", "--host", "localhost")
    ca = pki / "ca.pem"
    tls = {
        "tls_root_certs": ca.read_bytes(),
        "cert_chain": (pki / "client.pem").read_bytes(),
        "private_key": (pki / "client.key").read_bytes(),
    }
    cluster = Cluster(etcd, tmp_path)
    try:
        for node_id in NODES:
            cluster.start(
                node_id,
                "--tls-cert", str(pki / f"{node_id}.pem"),
                "--tls-key", str(pki / f"{node_id}.key"),
                "--tls-client-ca", str(ca),
                "--cluster-ca", str(ca),
            )  # fmt: skip
        wait_until("three live nodes", lambda: len(cluster.status()["nodes"]) == 3)  # type: ignore[arg-type]
        assert all(cluster.uri(n).startswith("grpc+tls://") for n in NODES)
        table = ids(5000)
        with flight.FlightClient(cluster.uri("n1"), **tls) as client:  # type: ignore[arg-type]
            do_put(flight.FlightDescriptor.for_path("t"), table)(client, flight.FlightCallOptions())
        # Copied over TLS: every partition on two nodes.
        assert cluster.status()["under_replicated"] == 0
        for node_id in NODES:
            with flight.FlightClient(cluster.uri(node_id), **tls) as client:  # type: ignore[arg-type]
                info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
                # Distributed SQL: stages on the other nodes' workers, over TLS.
                (counted,) = get_sql("SELECT count(*) AS n, sum(id) AS s FROM t")(
                    client, flight.FlightCallOptions()
                )
                assert counted.to_pylist() == [{"n": 5000, "s": sum(range(5000))}]
            parts = []
            for endpoint in info.endpoints:
                location = endpoint.locations[0].uri.decode()
                assert location.startswith("grpc+tls://127.0.0."), location
                with flight.FlightClient(location, **tls) as holder:  # type: ignore[arg-type]
                    parts.append(holder.do_get(endpoint.ticket).read_all())
            assert pa.concat_tables(parts).sort_by("id").equals(table)
        # A client without a certificate of the cluster's CA is refused.
        bare = flight.FlightClient(cluster.uri("n2"), tls_root_certs=ca.read_bytes())
        with bare, pytest.raises(flight.FlightUnavailableError):
            bare.get_flight_info(flight.FlightDescriptor.for_path("t"))
    finally:
        failures = cluster.stop_all()
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def test_tls_on_a_cluster_node_needs_the_cluster_ca(etcd: Etcd, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    quiver_cluster("init-ca", "--dir", str(pki))
    quiver_cluster("issue-cert", "--dir", str(pki), "--node", "n9", "--host", "127.0.0.1")
    cert = ("--tls-cert", str(pki / "n9.pem"), "--tls-key", str(pki / "n9.key"))
    error = serve_fails(etcd, tmp_path, "--cluster", etcd.url, *cert)
    assert "--cluster-ca" in error, error
    error = serve_fails(etcd, tmp_path, "--cluster", etcd.url, "--cluster-ca", str(pki / "ca.pem"))
    assert "--tls-cert" in error, error
