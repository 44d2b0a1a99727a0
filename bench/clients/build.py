"""Building the Go and Java clients once, into a cache outside the clone.

The cache is ``$QUIVER_BENCH_CLIENTS_CACHE``, else ``~/.cache/quiver/bench-clients``; each
build is a folder named after a hash of its sources and toolchain, so a second run (or a
second clone) builds nothing until a source changes:

- Go: ``go build`` of ``bench/clients/go`` (its modules from the Go module proxy, into Go's
  own module cache), ``go-HASH/quiver-bench-client``;
- Java: ``mvn dependency:copy-dependencies`` of ``bench/clients/java/pom.xml`` (flight-core,
  flight-sql and arrow-memory-netty with what they need, from Maven Central), then ``javac``
  of ``QuiverBenchClient.java`` against them: ``java-HASH/lib`` and ``java-HASH/classes``;
- JDBC: ``javac`` of ``java/jdbc/JdbcBenchClient.java`` (``java.sql`` only) into
  ``jdbc-HASH/classes``, run with the Flight SQL JDBC driver's jar that
  ``scripts/setup-java.sh`` resolves (run when the jar is missing).

A missing toolchain or a failed build raises :class:`ClientUnavailable`, saying why: the
suite notes it and measures the other clients.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
GO_DIR = HERE / "go"
JAVA_DIR = HERE / "java"
#: Longest a build may take (the first Go build fetches and compiles arrow-go: 75 s on 2 cores).
BUILD_TIMEOUT_S = 1200.0
#: The JVM flags Arrow Java's memory code needs on JDK 16+.
JVM_FLAGS = ("--add-opens=java.base/java.nio=ALL-UNNAMED",)
JAVA_MAIN = "QuiverBenchClient"
JDBC_MAIN = "JdbcBenchClient"
REPO = HERE.parents[1]
SETUP_JAVA = REPO / "scripts" / "setup-java.sh"


class ClientUnavailable(RuntimeError):
    """A client cannot be built here (no toolchain, or its build failed)."""


def cache_dir() -> Path:
    """Return where built clients are kept."""
    found = os.environ.get("QUIVER_BENCH_CLIENTS_CACHE")
    return Path(found) if found else Path.home() / ".cache" / "quiver" / "bench-clients"


def _digest(files: list[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for part in extra:
        h.update(part.encode() + b"\0")
    for path in sorted(files):
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _tool_version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise ClientUnavailable(f"{command[0]} not usable: {e}") from e
    return (done.stdout + done.stderr).strip()


@contextlib.contextmanager
def _locked(name: str) -> Iterator[Path]:
    """Hold the cache's lock for ``name`` (parallel runs build once)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root


def _run(command: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("w") as out:
        try:
            done = subprocess.run(
                command,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=BUILD_TIMEOUT_S,
                env=env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ClientUnavailable(f"{' '.join(command[:2])} failed: {e} (log: {log})") from e
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ClientUnavailable(
            f"{' '.join(command[:2])} exited with {done.returncode}: {' / '.join(tail)} "
            f"(log: {log})"
        )


def go_client() -> list[str]:
    """Return the command of the Go client, building it first when needed."""
    go = shutil.which("go")
    if go is None:
        raise ClientUnavailable("no Go toolchain (go) on PATH")
    sources = [p for p in GO_DIR.iterdir() if p.suffix == ".go" or p.name in ("go.mod", "go.sum")]
    key = _digest(sources, _tool_version([go, "version"]))
    with _locked("go") as root:
        target = root / f"go-{key}" / "quiver-bench-client"
        if not target.exists():
            work = root / f"go-{key}.tmp"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            _run(
                [go, "build", "-trimpath", "-o", str(work / target.name), "."],
                GO_DIR,
                work / "build.log",
            )
            shutil.rmtree(target.parent, ignore_errors=True)
            work.rename(target.parent)
    return [str(target)]


def java_client() -> list[str]:
    """Return the command of the Java client, resolving and compiling it first when needed."""
    java, javac, mvn = shutil.which("java"), shutil.which("javac"), shutil.which("mvn")
    if java is None or javac is None:
        raise ClientUnavailable("no JDK (java, javac) on PATH: scripts/setup-java.sh installs one")
    sources = [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").glob("*.java"))]
    key = _digest(sources, _tool_version([javac, "-version"]))
    with _locked("java") as root:
        built = root / f"java-{key}"
        if not (built / "classes" / f"{JAVA_MAIN}.class").exists():
            if mvn is None:
                raise ClientUnavailable("no Maven (mvn) on PATH: scripts/setup-java.sh installs it")
            work = root / f"java-{key}.tmp"
            shutil.rmtree(work, ignore_errors=True)
            (work / "classes").mkdir(parents=True)
            _run(
                [
                    mvn, "-B", "-q", "-Dstyle.color=never", "--strict-checksums",
                    "-f", str(JAVA_DIR / "pom.xml"),
                    "dependency:copy-dependencies", "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'lib'}",
                ],
                work,
                work / "mvn.log",
            )  # fmt: skip
            _run(
                [
                    javac, "--release", "17", "-encoding", "UTF-8",
                    "-cp", str(work / "lib" / "*"), "-d", str(work / "classes"),
                    *[str(p) for p in sources[1:]],
                ],
                JAVA_DIR,
                work / "javac.log",
            )  # fmt: skip
            shutil.rmtree(built, ignore_errors=True)
            work.rename(built)
    classpath = f"{built / 'classes'}:{built / 'lib' / '*'}"
    return [java, *JVM_FLAGS, "-cp", classpath, JAVA_MAIN]


def jdbc_driver_jar() -> Path:
    """Return the Flight SQL JDBC driver's jar, running ``scripts/setup-java.sh`` if missing."""
    version = (REPO / "java" / "flight-sql-jdbc-driver.version").read_text().strip()
    found = os.environ.get("QUIVER_JAVA_CACHE")
    java_cache = Path(found) if found else Path.home() / ".cache" / "quiver" / "java"
    jar = java_cache / "lib" / f"flight-sql-jdbc-driver-{version}.jar"
    if not jar.is_file():
        with _locked("jdbc") as root:
            _run(["bash", str(SETUP_JAVA)], REPO, root / "setup-java.log")
    if not jar.is_file():
        raise ClientUnavailable(f"{SETUP_JAVA.name} ran but {jar} is missing")
    return jar


def jdbc_client() -> list[str]:
    """Return the command of the JDBC client, compiling it first when needed."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise ClientUnavailable("no JDK (java, javac) on PATH: scripts/setup-java.sh installs one")
    jar = jdbc_driver_jar()
    sources = sorted((JAVA_DIR / "jdbc").glob("*.java"))
    key = _digest(sources, _tool_version([javac, "-version"]))
    with _locked("jdbc") as root:
        built = root / f"jdbc-{key}"
        if not (built / "classes" / f"{JDBC_MAIN}.class").exists():
            work = root / f"jdbc-{key}.tmp"
            shutil.rmtree(work, ignore_errors=True)
            (work / "classes").mkdir(parents=True)
            _run(
                [
                    javac, "--release", "17", "-encoding", "UTF-8", "-d", str(work / "classes"),
                    *[str(p) for p in sources],
                ],
                JAVA_DIR,
                work / "javac.log",
            )  # fmt: skip
            shutil.rmtree(built, ignore_errors=True)
            work.rename(built)
    return [java, *JVM_FLAGS, "-cp", f"{built / 'classes'}:{jar}", JDBC_MAIN]
