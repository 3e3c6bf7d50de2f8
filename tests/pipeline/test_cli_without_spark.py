"""`jbod-pipeline` as a core-only install sees it: the real console script, run in a subprocess
whose interpreter cannot import PySpark or anything else of the `pipeline` extra, and with no
Java at all. `--help`, no subcommand and `generate` work; a job is one error line saying what to
install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jbod_pipeline import runtime

SCRIPT = Path(sys.executable).parent / "jbod-pipeline"

# A `sitecustomize` on PYTHONPATH that runs before the console script imports anything: a finder
# at the front of sys.meta_path that refuses every module of the pipeline extra, as if not installed.
BLOCKER = f"""
import sys

BLOCKED = {sorted(runtime.EXTRA_MODULES)!r}


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


@pytest.fixture
def core_only(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    env["PYTHONPATH"] = str(site)
    # The blocker really applies to this interpreter: pyspark is installed here but cannot load.
    check = subprocess.run(
        [sys.executable, "-c", "import pyspark"], env=env, capture_output=True, text=True, timeout=60
    )
    assert check.returncode != 0 and "No module named 'pyspark'" in check.stderr, check.stderr
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"the console script is not installed at {SCRIPT}"
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_help_and_generate_work_without_pyspark(core_only: dict[str, str], tmp_path: Path) -> None:
    for args in (["--help"], [], ["all", "--help"], ["timeline", "-h"]):
        done = _cli(args, core_only)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stdout.startswith("Usage: jbod-pipeline") and not done.stderr, (args, done.stderr)
    done = _cli(
        ["generate", "--out", str(tmp_path / "in"), "--brokers", "2", "--partitions", "10"], core_only
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "in" / "metadata.jsonl").read_text().splitlines()[0])


def test_a_job_without_pyspark_is_one_line_naming_the_install(
    core_only: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "m.jsonl").write_text("")
    done = _cli(
        ["timeline", "--metadata", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o")], core_only
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("jbod-pipeline: error: "), done.stderr
    assert "pip install 'jbod-operator[pipeline]'" in done.stderr and "Java 17" in done.stderr
    assert "Traceback" not in done.stderr and not done.stdout


def test_a_job_without_java_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(empty)  # the console script's shebang is absolute; no java anywhere on PATH
    (tmp_path / "m.jsonl").write_text("")
    done = _cli(["timeline", "--metadata", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o")], env)
    assert done.returncode == 1
    assert done.stderr == (
        "jbod-pipeline: error: the Spark jobs need a Java 17 runtime: no java on PATH and JAVA_HOME is not set\n"
    )
    env["JAVA_HOME"] = str(tmp_path)
    done = _cli(["disks", "--metadata", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o")], env)
    assert done.returncode == 1
    assert (
        done.stderr
        == f"jbod-pipeline: error: the Spark jobs need a Java 17 runtime: JAVA_HOME={tmp_path} has no bin/java\n"
    )


def test_java_is_found_as_pysparks_launcher_finds_it(tmp_path: Path) -> None:
    assert runtime.java_problem({}, which=lambda _name: "/usr/bin/java") is None
    assert "no java on PATH" in (runtime.java_problem({}, which=lambda _name: None) or "")
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    assert runtime.java_problem({"JAVA_HOME": str(tmp_path)}, which=lambda _name: None) is None
    assert "has no bin/java" in (
        runtime.java_problem({"JAVA_HOME": str(tmp_path / "x")}, which=lambda _n: "/j") or ""
    )


def test_only_the_extras_modules_become_the_install_line() -> None:
    assert runtime.missing_extra(ModuleNotFoundError("x", name="pyspark.sql")) is not None
    assert runtime.missing_extra(ModuleNotFoundError("x", name="jbod_core")) is None
