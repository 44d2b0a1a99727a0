"""The web console on a cluster: one row per node on Live (its lease, the partition copies
the catalog lists on it, those short of copies), and where each partition's copies live on
a table's page; through the JSON API and in Debian's headless Chromium.

Real etcd and real nodes n1 and n2 (127.0.0.1 and .2), each with ``--http-listen``. With
``QUIVER_TEST_SECURE_CLUSTER`` (scripts/test.sh runs this file so once more) the cluster is
secure as cluster_helpers.py says: the console speaks TLS with the node's certificate and
asks for the client's, and takes the users file's logins; the browser is then set up as an
administrator would set it up for such a site (the CA trusted, the client certificate
imported and chosen by policy: console_helpers.client_certificate_for_chromium).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from cluster_helpers import CLIENT_USER, Cluster, Etcd, wait_until
from console_helpers import (
    Api,
    browser_login,
    by_id,
    chromium,
    client_certificate_for_chromium,
    console_url,
    run_sql,
    shoot,
    status_after_run,
    until,
)
from security_helpers import PASSWORDS, user_add

#: Partitions of the table the tests put; with two replicas, each on both nodes.
PARTITIONS = 4

#: A query that runs for most of an hour unless cancelled (test_console.py's).
LONG_QUERY = "SELECT sum(value) FROM range(1, 1000000000000)"


@pytest.fixture
def consoles(etcd: Etcd, tmp_path: Path) -> Iterator[tuple[Cluster, dict[str, Api]]]:
    """Nodes n1 and n2 (two replicas) with their consoles, logged in as the tests' admin
    on a secure cluster; the table ``rides`` of :data:`PARTITIONS` partitions put."""
    cluster = Cluster(etcd, tmp_path, replicas=2)
    if cluster.secrets is not None:
        done = user_add(cluster.secrets.users, "reader", "read", PASSWORDS["reader"])
        assert done.returncode == 0, done.stderr
    try:
        apis = {node: start_with_console(cluster, node) for node in ("n1", "n2")}
        wait_until("two live nodes", lambda: len(cluster.status()["nodes"]) == 2)  # type: ignore[arg-type]
        rides = pa.table({"id": pa.array(range(40_000), pa.int64())})
        with cluster.client("n1") as client:
            client.put("rides", rides, partitions=PARTITIONS)
        yield cluster, apis
    finally:
        failures = cluster.stop_all()
    assert not failures, failures


def start_with_console(cluster: Cluster, node: str) -> Api:
    """Start ``node`` with its console on its own address; an API client of it."""
    host = f"127.0.0.{int(node[1:])}"
    server = cluster.start(node, "--http-listen", f"{host}:0")
    context = None
    if cluster.secrets is not None:
        pki = cluster.secrets.directory / "pki"
        context = ssl.create_default_context(cafile=str(cluster.secrets.ca))
        context.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    api = Api(console_url(server), context=context)
    if cluster.secrets is None:
        return api.anyone()
    return api.login(CLIENT_USER, PASSWORDS[CLIENT_USER])


def node_rows(api: Api) -> dict[str, dict[str, Any]]:
    """Live's rows of nodes, by node id."""
    nodes = api.get("/api/live").body["nodes"]
    assert isinstance(nodes, list), nodes
    return {row["id"]: row for row in nodes}


def copies(api: Api) -> list[dict[str, bool]]:
    """The copies of each partition of ``rides`` on its page: live or not, by node."""
    reply = api.get("/api/tables/rides")
    assert reply.status == 200 and "placement" in reply.body, (reply.status, reply.body)
    placement = reply.body["placement"]
    return [{c["node"]: c["live"] for c in p["copies"]} for p in placement]


def test_live_lists_each_node_and_a_table_where_its_copies_live(
    consoles: tuple[Cluster, dict[str, Api]],
) -> None:
    cluster, apis = consoles
    for node, api in apis.items():
        rows = node_rows(api)
        assert sorted(rows) == ["n1", "n2"]
        for row in rows.values():
            assert row["this"] == (row["id"] == node)
            assert row["lease"] == "held"
            assert row["location"].endswith(
                f"127.0.0.{int(row['id'][1:])}:{cluster.ports[row['id']]}"
            )
            assert (row["partitions"], row["under_replicated"]) == (PARTITIONS, 0), row
        assert copies(api) == [{"n1": True, "n2": True}] * PARTITIONS
    # n3 joins (moving no copies onto it), and n1 and n2 stop answering: once their leases
    # run out, n3 shows them without one and every partition short of copies, with none
    # live (n3 holds none of them, so nothing can repair them).
    cluster.rebalance(False)
    apis["n3"] = start_with_console(cluster, "n3")
    wait_until("n3 to see three nodes", lambda: len(node_rows(apis["n3"])) == 3)
    assert node_rows(apis["n3"])["n3"] | {"location": ""} == {
        "id": "n3",
        "location": "",
        "this": True,
        "lease": "held",
        "partitions": 0,
        "bytes": 0,
        "under_replicated": 0,
    }
    for node in ("n1", "n2"):
        cluster.pause(node)
    try:
        wait_until(
            "n1 and n2 to lose their leases",
            lambda: [node_rows(apis["n3"])[n]["lease"] for n in ("n1", "n2")] == ["none"] * 2,
        )
        rows = node_rows(apis["n3"])
        assert [rows[n]["location"] for n in ("n1", "n2")] == ["", ""]
        assert [rows[n]["under_replicated"] for n in ("n1", "n2")] == [PARTITIONS] * 2
        assert copies(apis["n3"]) == [{"n1": False, "n2": False}] * PARTITIONS
        # ListFlights still lists the table, its partitions without a location, and a
        # DoGet of one at n3 is NOT_FOUND; GetFlightInfo refuses the table.
        client = cluster.flight_client("n3")
        [info] = [i for i in client.list_flights() if i.descriptor.path == [b"rides"]]
        assert json.loads(info.app_metadata)["unavailable_partitions"] == PARTITIONS
        assert [len(e.locations) for e in info.endpoints] == [0] * PARTITIONS
        with pytest.raises(pa.ArrowKeyError):  # NOT_FOUND: n3 holds no copy
            client.do_get(info.endpoints[0].ticket).read_all()
        with pytest.raises(flight.FlightUnavailableError, match="no live node holds"):
            client.get_flight_info(flight.FlightDescriptor.for_path("rides"))
    finally:
        for node in ("n1", "n2"):
            cluster.resume(node)
    # Back, they hold leases again and nothing is short.
    wait_until(
        "n1 and n2 back with leases",
        lambda: all(
            r["lease"] == "held" and r["under_replicated"] == 0
            for r in node_rows(apis["n3"]).values()
        ),
    )
    assert node_rows(apis["n1"])["n1"]["this"] is True


def test_browser_shows_the_nodes_and_where_copies_live(
    consoles: tuple[Cluster, dict[str, Api]], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    cluster, apis = consoles
    home = tmp_path / "browser-home"
    home.mkdir()
    if cluster.secrets is not None:
        pki = cluster.secrets.directory / "pki"
        client_certificate_for_chromium(
            home, cluster.secrets.ca, pki / "client.pem", pki / "client.key"
        )
    with chromium(tmp_path / "chromium-profile", home=home) as driver:
        base = apis["n1"].base
        if cluster.secrets is not None:
            browser_login(driver, base, CLIENT_USER, PASSWORDS[CLIENT_USER])
        else:
            driver.get(base + "/")
            until(driver, lambda d: by_id(d, "nav").is_displayed(), "the console")
        driver.find_element(By.CSS_SELECTOR, "#nav [data-view=live]").click()
        rows = until(
            driver,
            lambda d: (
                len(found := d.find_elements(By.CSS_SELECTOR, "#live-nodes tbody tr")) == 2
                and found
            ),
            "a row per node on Live",
        )
        cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
        assert [c[0] for c in cells] == ["n1 (this node)", "n2"], cells
        assert all(c[2] == "held" and c[3] == str(PARTITIONS) and c[5] == "0" for c in cells)
        assert "2 of 2 holding a lease" in by_id(driver, "live-cluster-note").text
        driver.execute_script("arguments[0].scrollIntoView()", by_id(driver, "live-cluster"))
        shoot(driver, "cluster-live")
        driver.find_element(By.CSS_SELECTOR, "#nav [data-view=tables]").click()
        until(
            driver,
            lambda d: d.find_elements(By.CSS_SELECTOR, "#tables-list tr[data-name=rides]"),
            "the table",
        )[0].click()
        placement = until(
            driver,
            lambda d: (
                by_id(d, "detail-placement").is_displayed()
                and d.find_elements(By.CSS_SELECTOR, "#placement-table tbody tr")
            ),
            "the partitions' copies",
        )
        assert len(placement) == PARTITIONS
        for row in placement:
            on = [span.text for span in row.find_elements(By.CSS_SELECTOR, "span.copy")]
            assert sorted(on) == ["n1", "n2"], on
        assert "written" in by_id(driver, "detail-summary").text
        driver.execute_script("arguments[0].scrollIntoView()", by_id(driver, "detail-placement"))
        shoot(driver, "cluster-table")
        # A query over every partition, its chart, a long query cancelled.
        run_sql(
            driver,
            "SELECT concat('k', id % 4) AS k, count(*) AS n FROM rides GROUP BY k ORDER BY k",
        )
        assert "4 rows" in status_after_run(driver)
        cells = driver.find_elements(By.CSS_SELECTOR, "#result-table tbody tr:not(.pad)")
        assert [c.text.split()[1:] for c in cells] == [[f"k{k}", "10000"] for k in range(4)]
        by_id(driver, "show-chart").click()
        svg = until(driver, lambda d: d.find_elements(By.ID, "chart-svg"), "the chart")[0]
        assert svg.get_attribute("data-kind") == "bar"
        assert len(svg.find_elements(By.CSS_SELECTOR, "rect")) == 4
        by_id(driver, "show-table").click()
        run_sql(driver, LONG_QUERY)
        until(driver, lambda d: not by_id(d, "cancel").get_attribute("disabled"), "Cancel")
        until(driver, lambda _: apis["n1"].get("/api/queries").body["queries"], "the query")
        by_id(driver, "cancel").click()
        assert status_after_run(driver) == "Cancelled."
        if cluster.secrets is None:
            return
        # A reader may look, not change.
        by_id(driver, "logout").click()
        browser_login(driver, base, "reader")
        run_sql(driver, "DROP TABLE rides")
        text = status_after_run(driver)
        assert "permission denied" in text and "write role" in text, text
        assert [t["name"] for t in apis["n1"].get("/api/tables").body["tables"]] == ["rides"]
