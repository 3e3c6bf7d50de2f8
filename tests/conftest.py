"""Shared fixtures: a real controller process per test (see tests/harness.py).

Under pytest-xdist (`make test` runs `pytest --numprocesses 3 --dist loadgroup`) the tests of a
file run on one worker, so a module's shared cluster is started once, and every test of the kind
tier runs on one worker, which builds and owns the one kind cluster `jbod-e2e`. Everything else
uses its own temporary directory and ports picked by the kernel, so it may run beside anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ControllerProcess


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = "kind" if item.get_closest_marker("e2e") is not None else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    with ControllerProcess(data_dir=tmp_path / "controller") as proc:
        yield proc
