"""What the web console's tests share: its HTTP API as a small client, and a headless
Chromium driven by Selenium (``quiver serve --http-listen``, docs/console.md)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from server_process import Server

#: What ``quiver serve --http-listen`` prints after its banner (and the metrics line).
CONSOLE = "quiver console on "
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: The flags Debian's Chromium runs with here, as root, in a container.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,860",
)
HTTP_TIMEOUT_S = 60.0


def console_url(server: Server) -> str:
    """Read the console's URL from the server's stdout (the line after the banner)."""
    assert server.process.stdout is not None
    line = server.process.stdout.readline().decode().strip()
    assert line.startswith(CONSOLE), f"the server printed {line!r}, not its console address"
    return line.removeprefix(CONSOLE).rstrip("/")


@dataclass
class Reply:
    """An HTTP response: its status, headers (names in lower case) and body (JSON decoded
    when it is JSON)."""

    status: int
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


@dataclass
class Api:
    """The console's JSON API at ``base``, as one logged-in user (or anyone)."""

    base: str
    token: str | None = None
    csrf: str | None = None
    context: ssl.SSLContext | None = None
    user: str = ""
    role: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        csrf: bool = True,
        auth: bool = True,
    ) -> Reply:
        """Send one request; never raises for an HTTP error status."""
        sent = dict(self.extra)
        if auth and self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        if method != "GET" and csrf and self.csrf:
            sent["X-Quiver-CSRF"] = self.csrf
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=self.context) as r:
                return _reply(r.status, dict(r.headers), r.read())
        except urllib.error.HTTPError as error:
            return _reply(error.code, dict(error.headers), error.read())

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.call("GET", path, **kwargs)

    def post(self, path: str, body: object = None, **kwargs: Any) -> Reply:
        return self.call("POST", path, body, **kwargs)

    def login(self, user: str, password: str) -> Api:
        """A client logged in as ``user`` (the token and CSRF value the login gave)."""
        reply = self.post("/api/login", {"user": user, "password": password})
        assert reply.status == 200, reply.body
        return Api(
            self.base,
            token=reply.body["token"],
            csrf=reply.body["csrf"],
            context=self.context,
            user=reply.body["user"],
            role=reply.body["role"],
        )

    def login_basic(self, user: str, password: str) -> Reply:
        value = base64.b64encode(f"{user}:{password}".encode()).decode()
        return self.post("/api/login", headers={"Authorization": f"Basic {value}"})

    def anyone(self) -> Api:
        """A client of a server without ``--users``: the CSRF value from the session."""
        reply = self.get("/api/session")
        assert reply.status == 200 and reply.body["auth"] is False, reply.body
        return Api(self.base, csrf=reply.body["csrf"], context=self.context)

    def query(self, sql: str, *, call: dict[str, Any] | None = None, **options: object) -> Reply:
        """POST /api/query; ``options`` go in the body, ``call`` to :meth:`call`."""
        return self.post("/api/query", {"sql": sql, **options}, **(call or {}))


def _reply(status: int, headers: dict[str, str], raw: bytes) -> Reply:
    headers = {k.lower(): v for k, v in headers.items()}
    body: Any = raw
    if headers.get("content-type", "").startswith("application/json"):
        body = json.loads(raw)
    return Reply(status, headers, body, raw)


def put_table(uri: str, name: str, table: pa.Table, token: str | None = None) -> None:
    """DoPut ``table`` as ``name`` through pyarrow's Flight client."""
    options = flight.FlightCallOptions(
        headers=[(b"authorization", f"Bearer {token}".encode())] if token else []
    )
    with flight.FlightClient(uri) as client:
        writer, _ = client.do_put(
            flight.FlightDescriptor.for_path(name), table.schema, options=options
        )
        writer.write_table(table, max_chunksize=65536)
        writer.close()


# -- the browser --------------------------------------------------------------------------------


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for program in (CHROMIUM, CHROMEDRIVER):
        if not program.exists() and shutil.which(program.name) is None:
            return (
                f"{program} is missing: install Debian's chromium and chromium-driver "
                "(scripts/install-os-tools.sh)"
            )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is missing: pip install -r python/requirements-dev.txt"
    return None


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium driven through Debian's chromedriver; quit at the end."""
    why = browser_missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the console's browser tests need a browser in CI: {why}", pytrace=False)
        pytest.skip(why)
    # No statistics, no downloads of drivers: Debian's driver and browser only.
    os.environ["SE_AVOID_STATS"] = "true"
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver_path = CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which("chromedriver")
    driver = webdriver.Chrome(service=Service(str(driver_path)), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
