"""What a new user of a fresh clone meets before any code runs: the Makefile's venv handling, the
package metadata and what git ignores (issue 12's new-user run). `make -n` prints what a target
would run without running it, so these tests read the real Makefile's decisions."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from e2e import tiers

ROOT = Path(__file__).resolve().parents[1]


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def fresh_venv(tmp_path: Path) -> Path:
    return tmp_path / "venv"


def test_demo_installs_the_core_only(fresh_venv: Path) -> None:
    planned = _make(f"VENV={fresh_venv}", "demo")
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line and " -e " in line]
    assert installs == [f"{fresh_venv}/bin/pip install --quiet -e ."], planned.stdout
    assert f"{fresh_venv}/bin/jbodctl local demo" in planned.stdout


def test_test_adds_the_dev_and_pipeline_extras(fresh_venv: Path) -> None:
    planned = _make(f"VENV={fresh_venv}", "test")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    install = lines.index(f"{fresh_venv}/bin/pip install --quiet -e '.[dev,pipeline]'")
    run = lines.index(f"{fresh_venv}/bin/python -m e2e.tiers --workers 3")
    assert install < run, "the extras are installed before the tests run"
    for check in ("ruff check", "ruff format --check", "mypy", "lint-imports"):
        assert any(check in line for line in lines[install:run]), check
    warm = [n for n, line in enumerate(lines) if line == f"{fresh_venv}/bin/jbod-pipeline kafka-jars"]
    assert warm and install < warm[0] < run, "Spark's Kafka source is resolved before the tests run"


def test_the_tiers_run_all_but_the_kind_tier_on_workers_and_the_kind_tier_in_one_process() -> None:
    assert tiers.first_pass(3) == ["-m", "not e2e", "--numprocesses", "3", "--dist", "loadfile"]
    assert tiers.kind_pass() == ["-m", "e2e"]


def test_the_pipeline_image_installs_the_pinned_pyspark() -> None:
    """Spark's Kafka source must match the Spark that loads it (docs/decisions.md, issue 23)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "pipeline"
    ]
    [pinned] = [r for r in extra if r.startswith("pyspark")]
    assert pinned.startswith("pyspark=="), pinned
    assert f'ARG PYSPARK_REQUIREMENT="{pinned}"' in (ROOT / "Dockerfile").read_text().splitlines()


def test_a_venv_from_an_unsupported_python_is_recreated(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    old = venv / "bin" / "python"
    old.write_text("#!/bin/sh\necho 0\n")  # answers like a Python older than 3.11
    old.chmod(0o755)
    (venv / "bin" / ".installed").touch()
    planned = _make(f"VENV={venv}", "setup")
    assert planned.returncode == 0, planned.stderr
    assert f"{venv} was made by an unsupported or missing Python; recreating it" in planned.stdout
    assert not venv.exists()
    assert f"-m venv {venv}" in planned.stdout


def test_a_too_old_python_is_one_clear_line(tmp_path: Path) -> None:
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.9.2' && exit 0\nexit 1\n")
    fake.chmod(0o755)
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), f"PYTHON={fake}", f"VENV={tmp_path / 'venv'}", "python-check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert f"error: {fake} is Python 3.9.2; jbod-operator needs Python 3.11 or newer" in result.stdout


def test_the_license_is_an_spdx_string() -> None:
    """setuptools deprecates the `license = {text = ...}` table (printed three times per install)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


@pytest.mark.parametrize("path", [".jbod-local/", "metadata.jsonl", "report/", ".venv/"])
def test_what_the_readme_commands_create_is_ignored(path: str) -> None:
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path], check=False, timeout=30
    )
    assert ignored.returncode == 0, f"{path} would show as untracked in git status"


def test_the_modules_started_first_exist() -> None:
    """tests/conftest.py names the longest modules to start them first; a renamed one would
    silently drop back into the queue."""
    from tests import conftest

    paths = [group for group in conftest._FIRST if group.startswith("tests/")]
    assert paths and [p for p in paths if not (ROOT / p).is_file()] == []
