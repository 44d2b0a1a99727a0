#!/usr/bin/env python3
"""Which crates the client's wheel would compile a second time.

maturin builds quiver-python alone, so cargo resolves the features of its
dependencies for that crate alone; `cargo build`/`cargo test --workspace`
resolve them for the whole workspace. A dependency whose features differ
between the two is compiled twice, and so is every crate above it (libc's
alone is most of the tree). crates/quiver-python/Cargo.toml lists, under
"Features the workspace turns on", what makes the two resolutions the same.

Prints each dependency whose features differ, with the features only one
of the two builds turns on; exits 1 if there is one (`--warn`: prints, exits 0).
Reads `cargo tree` only: nothing is compiled.
"""

from __future__ import annotations

import re
import subprocess
import sys

LINE = re.compile(r"^(\S+ v\S+)(?: \([^)]*\))*(?: \[(.*)\])?$")


def features(*args: str) -> dict[str, set[str]]:
    """Each package of `cargo tree ARGS` with its features."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "--prefix", "none", "-f", "{p} [{f}]", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, set[str]] = {}
    for line in out.splitlines():
        match = LINE.match(line.strip().removesuffix(" (*)"))
        if match:
            names = {f for f in (match.group(2) or "").split(",") if f}
            found.setdefault(match.group(1), set()).update(names)
    return found


def units(*packages: str) -> dict[str, set[str]]:
    """The features of each dependency compiled for the target (what the code links)
    and, apart, of those compiled only for build scripts and procedural macros, where
    cargo resolves features separately (a crate in both is compiled twice)."""
    target = features(*packages, "-e", "normal,no-proc-macro")
    every = features(*packages, "-e", "normal,build")
    host = {f"{package} (host)": names for package, names in every.items() if package not in target}
    return {**target, **host}


def main() -> int:
    warn = "--warn" in sys.argv[1:]
    wheel = units("-p", "quiver-python")
    workspace = units("--workspace")
    differ = {
        package: (sorted(workspace[package] - names), sorted(names - workspace[package]))
        for package, names in wheel.items()
        if package in workspace and workspace[package] != names
    }
    for package, (workspace_only, wheel_only) in sorted(differ.items()):
        print(
            f"{package}: only the workspace's build turns on [{', '.join(workspace_only)}], "
            f"only the wheel's [{', '.join(wheel_only)}]"
        )
    if differ:
        print(
            f"the wheel's build compiles {len(differ)} dependencies (and every crate above "
            "them) a second time: align crates/quiver-python/Cargo.toml's list of the "
            "workspace's features",
            file=sys.stderr,
        )
        return 0 if warn else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
