"""What the web console's tests share: its HTTP API as a small client, and a headless
Chromium driven by Selenium (``quiver serve --http-listen``, docs/console.md)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from quiver.testing import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS
from security_helpers import PASSWORDS
from server_process import Server

#: What ``quiver serve --http-listen`` prints after its banner (and the metrics line).
CONSOLE = "quiver console on "
HTTP_TIMEOUT_S = 60.0

#: The longest a browser test waits for the page to show something.
BROWSER_WAIT_S = 30.0


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


def _cannot(why: str) -> None:
    """Skip a browser test that cannot run here; in CI (``CI=true``), fail it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the console's browser tests need this in CI: {why}", pytrace=False)
    pytest.skip(why)


@contextmanager
def chromium(profile: Path, home: Path | None = None) -> Iterator[Any]:
    """A headless Chromium driven through Debian's chromedriver; quit at the end.
    ``home``: its ``$HOME``, whose NSS database holds its certificates
    (:func:`client_certificate_for_chromium`)."""
    why = browser_missing()
    if why is not None:
        _cannot(why)
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
    env = None if home is None else {**os.environ, "HOME": str(home)}
    driver = webdriver.Chrome(service=Service(str(driver_path), env=env), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


#: Where Debian's Chromium reads the policies an administrator sets.
CHROMIUM_POLICIES = Path("/etc/chromium/policies/managed")

#: The common name of the CA ``quiver cluster init-ca`` makes.
CLUSTER_CA_NAME = "quiver cluster CA"


def client_certificate_for_chromium(home: Path, ca: Path, cert: Path, key: Path) -> None:
    """Set Chromium up, run with ``$HOME`` at ``home``, for servers that check clients'
    certificates, as an administrator would: ``ca`` trusted for servers and ``cert``
    (with ``key``) imported into its NSS database (NSS's certutil and pk12util, Debian's
    libnss3-tools), and a policy (AutoSelectCertificateForUrls, in
    :data:`CHROMIUM_POLICIES`) that has it present that certificate unasked to
    https://127.0.0.1-3 when they ask for one the cluster's CA issued. Without the
    policy, headless Chromium waits on a certificate dialog no one sees."""
    for tool in ("certutil", "pk12util", "openssl"):
        if shutil.which(tool) is None:
            _cannot(f"{tool} is missing: install libnss3-tools (scripts/install-os-tools.sh)")
    try:
        CHROMIUM_POLICIES.mkdir(parents=True, exist_ok=True)
        policy = CHROMIUM_POLICIES / "quiver-tests.json"
        issuer = {"ISSUER": {"CN": CLUSTER_CA_NAME}}
        patterns = [
            json.dumps({"pattern": f"https://127.0.0.{n}", "filter": issuer}) for n in (1, 2, 3)
        ]
        # Every test writes the same policy: tests at once do not disturb each other.
        policy.write_text(json.dumps({"AutoSelectCertificateForUrls": patterns}))
    except OSError as e:
        _cannot(f"cannot set Chromium's policy in {CHROMIUM_POLICIES} (run as root): {e}")
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True, exist_ok=True)
    database = f"sql:{nssdb}"
    p12 = home / "client.p12"
    for command in (
        ["certutil", "-N", "-d", database, "--empty-password"],
        ["certutil", "-A", "-d", database, "-n", "quiver-ca", "-t", "C,,", "-i", str(ca)],
        ["openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key),
         "-out", str(p12), "-passout", "pass:", "-name", "quiver-client"],
        ["pk12util", "-i", str(p12), "-d", database, "-W", ""],
    ):  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{' '.join(command)}: {done.stdout}{done.stderr}"


def shoot(driver: Any, name: str) -> None:
    """Save a PNG of the page into $QUIVER_CONSOLE_SCREENSHOTS, when it is set."""
    directory = os.environ.get("QUIVER_CONSOLE_SCREENSHOTS")
    if not directory:
        return
    path = Path(directory) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    try:
        from PIL import Image
    except ImportError:
        return
    # A palette of 64 colours: a page of flat colours stays legible at a fraction of the size.
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)


def until(
    driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = BROWSER_WAIT_S
) -> Any:
    """Wait, bounded, until ``condition(driver)`` is true; its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, what)


def by_id(driver: Any, element: str) -> Any:
    """The page's element of id ``element``."""
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element)


def browser_login(driver: Any, base: str, user: str, password: str | None = None) -> None:
    """Log in on the page at ``base`` as ``user`` (password: security_helpers')."""
    driver.get(base + "/")
    until(driver, lambda d: by_id(d, "view-login").is_displayed(), "the login form")
    by_id(driver, "login-user").send_keys(user)
    by_id(driver, "login-password").send_keys(password or PASSWORDS[user])
    by_id(driver, "login-submit").click()
    until(driver, lambda d: by_id(d, "nav").is_displayed(), "the console after the login")


def run_sql(driver: Any, sql: str) -> None:
    """Run ``sql`` from the SQL page's editor."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, "#nav [data-view=sql]").click()
    box = by_id(driver, "sql")
    driver.execute_script("arguments[0].value = arguments[1];", box, sql)
    driver.execute_script("document.getElementById('result-table').removeAttribute('data-ms')")
    by_id(driver, "run").click()


def status_after_run(driver: Any) -> str:
    """The SQL page's status line once the statement ended."""
    until(driver, lambda d: not by_id(d, "run").get_attribute("disabled"), "the query to end")
    return str(by_id(driver, "status").text)
