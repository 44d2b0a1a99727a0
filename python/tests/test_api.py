"""The package's public surface: one version, complete ``__all__`` lists."""

from __future__ import annotations

import importlib.metadata
import re

import quiver
from quiver import errors, results, testing
from server_process import REPO


def test_one_version_for_the_package_its_metadata_and_the_server() -> None:
    assert quiver.__version__ == importlib.metadata.version("quiver-client")
    cargo = (REPO / "Cargo.toml").read_text()
    workspace = cargo[cargo.index("[workspace.package]") :]
    match = re.search(r'^version = "([^"]+)"', workspace, re.MULTILINE)
    assert match is not None
    assert quiver.__version__ == match.group(1)


def test_every_name_in_all_exists_and_every_public_class_is_listed() -> None:
    for module in (quiver, errors, results, testing):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)
        classes = {
            name
            for name, value in vars(module).items()
            if isinstance(value, type)
            and value.__module__ == module.__name__
            and not name.startswith("_")
        }
        assert classes <= set(module.__all__), module.__name__
    assert {*results.__all__, "Client"} <= set(quiver.__all__)
