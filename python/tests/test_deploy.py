"""The deployment recipes in ``deploy/`` (docs/deploy.md), checked without deploying them.

- ``systemd-analyze verify`` accepts ``deploy/quiver.service`` without a warning about it (a
  copy whose ``ExecStart=`` runs the built binary: verify wants the program to exist);
- ``systemd-sysusers`` makes the unit's user from ``deploy/quiver.sysusers`` (in a temp root);
- the unit's system call filter, as ``systemd-analyze syscall-filter`` expands it, allows every
  call the server was seen to make, the shared-memory plane's among them;
- ``deploy/quiver.toml`` parses, each of its keys, commented-out examples included, is a
  ``quiver serve`` flag, and it agrees with the unit and the image (directories, stop timeout);
- the Containerfile copies files that exist, that ``.dockerignore`` keeps, with a Cargo profile
  that exists.

``scripts/install-os-tools.sh`` installs systemd from Debian's packages when ``systemd-analyze``
is missing (``scripts/test.sh`` runs it too). With ``CI=true`` a machine where it cannot be
installed fails the systemd tests; elsewhere they are skipped, saying why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from server_process import REPO, quiver_bin

tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python 3.11+")

DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "quiver.service"
SYSUSERS = DEPLOY / "quiver.sysusers"
CONFIG = DEPLOY / "quiver.toml"
CONTAINERFILE = DEPLOY / "Containerfile"
DOCKERIGNORE = REPO / ".dockerignore"
INSTALL_SYSTEMD = REPO / "scripts" / "install-os-tools.sh"
CANNOT_INSTALL = 3  # install-os-tools.sh's exit code when systemd cannot be installed here
INSTALL_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 60.0

# The system calls `strace -f` saw a server make while it stored, appended, read (over gRPC and
# over shared memory: memfd_create, fcntl seals, SCM_RIGHTS through sendmsg and recvmsg), queried,
# renamed and deleted tables in a data directory, stopped on SIGTERM, restarted and read them back.
# After a change to what the server does with the system, trace it again (docs/deploy.md).
# fmt: off
SERVER_SYSCALLS = frozenset({
    # the process, its threads and signals
    "execve", "arch_prctl", "set_tid_address", "set_robust_list", "rseq", "prlimit64", "clone3",
    "exit", "exit_group", "gettid", "prctl", "sched_getaffinity", "sigaltstack", "rt_sigaction",
    "rt_sigprocmask", "rt_sigreturn", "futex", "clock_nanosleep", "getrandom",
    # memory (jemalloc, mapped segment files)
    "brk", "mmap", "munmap", "mprotect", "madvise",
    # files: the data directory, a few of /proc and /sys
    "open", "openat", "access", "read", "pread64", "write", "writev", "lseek", "close",
    "newfstatat", "statx", "getdents64", "readlink", "mkdir", "rename", "unlink", "fsync", "flock",
    "chmod", "ioctl",
    # TCP and the event loop
    "socket", "bind", "listen", "accept4", "getsockname", "getpeername", "getsockopt",
    "setsockopt", "recvfrom", "sendto", "shutdown", "epoll_create1", "epoll_ctl", "epoll_wait",
    "eventfd2", "poll",
    # the shared-memory plane: sealed memfds passed over a Unix socket
    "memfd_create", "fcntl", "socketpair", "sendmsg", "recvmsg",
})
# fmt: on


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    """The path of ``systemd-analyze``, installed by ``scripts/install-os-tools.sh`` if missing."""
    found = shutil.which("systemd-analyze")
    if found:
        return found
    done = subprocess.run(
        ["bash", str(INSTALL_SYSTEMD)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if done.returncode == CANNOT_INSTALL and not in_ci():
        pytest.skip(f"systemd-analyze is missing and cannot be installed: {done.stderr.strip()}")
    found = shutil.which("systemd-analyze")
    if done.returncode != 0 or not found:
        pytest.fail(
            f"{INSTALL_SYSTEMD} exited with {done.returncode}:\n{done.stdout}{done.stderr}",
            pytrace=False,
        )
    return found


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def unit_settings(text: str) -> list[tuple[str, str, str]]:
    """A unit file's ``(section, key, value)`` lines in order (keys may repeat)."""
    settings, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.append((section, key.strip(), value.strip()))
    return settings


def unit_values(key: str) -> list[str]:
    return [value for _, k, value in unit_settings(UNIT.read_text()) if k == key]


def unit_value(key: str) -> str:
    values = unit_values(key)
    assert len(values) == 1, f"{UNIT.name}: {key}= set {len(values)} times: {values}"
    return values[0]


def seconds(timespan: str) -> float:
    """A systemd time span such as ``45s``, ``1min 30s`` or ``90`` (seconds), in seconds."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", timespan)
    assert parts, f"not a time span: {timespan!r}"
    return sum(float(n) * units[unit] for n, unit in parts)


def config() -> dict[str, object]:
    with CONFIG.open("rb") as f:
        return tomllib.load(f)


def commented_keys() -> list[str]:
    """The keys of the config's commented-out example settings (``# key = value``)."""
    return re.findall(r"^#\s*([a-z][a-z0-9-]*)\s*=", CONFIG.read_text(), flags=re.MULTILINE)


@cache
def serve_help() -> str:
    binary = quiver_bin()
    if not binary.is_file():
        pytest.fail(f"no quiver binary at {binary}: build it or set QUIVER_BIN", pytrace=False)
    done = run(binary, "serve", "--help")
    assert done.returncode == 0, done.stderr
    return done.stdout


def serve_flags() -> set[str]:
    """The long names of ``quiver serve``'s flags, from its ``--help``."""
    return set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)", serve_help(), re.MULTILINE))


def test_unit_passes_systemd_analyze_verify(systemd_analyze: str, tmp_path: Path) -> None:
    program = unit_value("ExecStart").split()[0]
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(f"ExecStart={program} ", f"ExecStart={quiver_bin()} "))
    assert str(quiver_bin()) in unit.read_text()
    done = run(systemd_analyze, "verify", "--man=no", unit)
    # verify exits 0 on unknown keys and bad values, warning about them: any line about the unit
    # is a failure.
    about_unit = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if str(unit) in line or UNIT.name in line
    ]
    assert done.returncode == 0 and not about_unit, f"{done.stdout}{done.stderr}"


def test_unit_runs_as_the_sysusers_user(systemd_analyze: str, tmp_path: Path) -> None:
    sysusers = shutil.which("systemd-sysusers")
    assert sysusers, "systemd-analyze is installed but systemd-sysusers is not"
    (tmp_path / "etc").mkdir()
    done = run(sysusers, f"--root={tmp_path}", SYSUSERS)
    assert done.returncode == 0, done.stderr
    user, group = unit_value("User"), unit_value("Group")
    passwd = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc/passwd").open()}
    groups = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc/group").open()}
    assert user in passwd and group in groups, (passwd, groups)
    assert passwd[user][3] == groups[group][2], "the user's primary group is the unit's Group="
    assert passwd[user][6].strip() == "/usr/sbin/nologin"
    assert unit_values("DynamicUser") == []


def syscall_groups(systemd_analyze: str) -> dict[str, list[str]]:
    """Each ``@group`` of ``systemd-analyze syscall-filter`` and its members (calls, groups)."""
    done = run(systemd_analyze, "syscall-filter")
    assert done.returncode == 0, done.stderr
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.startswith(" ") and current is not None:
            if not line.strip().startswith("#"):
                current.append(line.strip())
        else:
            current = None
    return groups


def test_syscall_filter_allows_what_the_server_calls(systemd_analyze: str) -> None:
    groups = syscall_groups(systemd_analyze)

    def expand(item: str) -> set[str]:
        if not item.startswith("@"):
            return {item}
        return set().union(*(expand(member) for member in groups[item]))

    filters = unit_values("SystemCallFilter")
    assert filters and not filters[0].startswith("~"), "the first filter line is an allow list"
    allowed: set[str] = set()
    for line in filters:
        items = set().union(*(expand(item) for item in line.lstrip("~").split()))
        allowed = allowed - items if line.startswith("~") else allowed | items
    assert {"memfd_create", "sendmsg", "recvmsg", "fcntl", "socket"} <= SERVER_SYSCALLS
    assert sorted(SERVER_SYSCALLS - allowed) == []
    assert set(unit_value("RestrictAddressFamilies").split()) >= {"AF_INET", "AF_INET6", "AF_UNIX"}


def test_config_keys_are_serve_flags() -> None:
    settings = config()
    flags = serve_flags()
    assert {"listen", "data-dir", "shm-socket"} <= flags, "flags read from --help"
    unknown = sorted((set(settings) | set(commented_keys())) - flags)
    assert unknown == [], f"{CONFIG.name}: not `quiver serve` flags: {unknown}"


def test_config_prints_with_print_config() -> None:
    if "--print-config" not in serve_help():
        pytest.skip("this quiver serve has no --print-config yet")
    done = run(quiver_bin(), "serve", "--config", CONFIG, "--print-config")
    assert done.returncode == 0, done.stderr
    for key in config():
        assert key in done.stdout, f"{key} missing from --print-config:\n{done.stdout}"
    assert config()["listen"] in done.stdout, f"the config's listen not in force:\n{done.stdout}"


def test_config_agrees_with_the_unit() -> None:
    settings = config()
    assert f"--config /etc/{unit_value('ConfigurationDirectory')}/quiver.toml" in unit_value(
        "ExecStart"
    )
    assert settings["data-dir"] == f"/var/lib/{unit_value('StateDirectory')}"
    socket_dir = Path(str(settings["shm-socket"])).parent
    assert socket_dir == Path("/run") / unit_value("RuntimeDirectory")
    assert unit_value("Environment") == f"XDG_RUNTIME_DIR={socket_dir}"
    grace = settings["shutdown-timeout"]
    assert isinstance(grace, int)
    assert seconds(unit_value("TimeoutStopSec")) > grace, "systemd must not kill a graceful stop"
    assert unit_value("KillSignal") == "SIGTERM"
    assert int(unit_value("LimitNOFILE")) >= 65536


def test_containerfile_copies_what_exists() -> None:
    text = CONTAINERFILE.read_text()
    ignored = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    copies = re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.MULTILINE)
    assert copies, "the image copies from the build context"
    for copy in copies:
        *sources, _ = copy.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert source.rstrip("/") not in ignored, f"COPY {source}: excluded by .dockerignore"
    assert "target" in ignored, "the build context would carry target/"
    profile = re.search(r"^ARG PROFILE=(\S+)$", text, flags=re.MULTILINE)
    assert profile, "the Containerfile names its Cargo profile"
    cargo = (REPO / "Cargo.toml").read_text()
    assert profile[1] == "release" or f"[profile.{profile[1]}]" in cargo
    assert f"COPY {CONFIG.relative_to(REPO)} /etc/quiver/quiver.toml" in text
    assert 'ENTRYPOINT ["quiver", "serve", "--config", "/etc/quiver/quiver.toml"]' in text


def test_containerfile_builds_as_the_test_command_does_with_no_protoc() -> None:
    # No container engine runs here (docs/deploy.md): the image's build command is the one
    # scripts/test.sh runs on every run with no protoc reachable, from a clean state of the
    # crate whose build script generates code, and nothing installs protoc.
    text = CONTAINERFILE.read_text()
    script = (REPO / "scripts" / "test.sh").read_text()
    image = re.search(r"cargo build [^\n\\]*--bin quiver", text)
    assert image, "the Containerfile's build stage runs cargo build --bin quiver"
    assert image[0] == 'cargo build --locked --profile "$PROFILE" --bin quiver', image[0]
    assert 'cargo build --locked --profile "$profile" --bin quiver' in script
    assert 'cargo clean --profile "$profile" --package quiver-etcd' in script
    assert "unset PROTOC" in script
    for recipe in (text, script, *(p.read_text() for p in (REPO / "scripts").glob("*.sh"))):
        assert "protobuf-compiler" not in recipe
        assert not re.search(r"apt-get install[^\n]*protoc", recipe)
