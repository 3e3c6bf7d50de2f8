"""Shared fixtures: a real controller process per test (see tests/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ControllerProcess


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    with ControllerProcess(data_dir=tmp_path / "controller") as proc:
        yield proc
