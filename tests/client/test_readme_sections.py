"""The README's command blocks, run verbatim in a shell against real processes: what a reader
types is what is tested."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jbod_local import supervisor
from jbod_local.layout import DEFAULT_DIR, STATE_FILE

README = Path(__file__).resolve().parents[2] / "README.md"
VENV_BIN = Path(sys.executable).parent


def readme_block(section: str) -> str:
    """The first ```sh block under the README heading `## <section>`."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"no section {section!r} in {README}"
    block = re.search(r"```sh\n(.*?)```", match.group(1), flags=re.S)
    assert block, f"no sh block in section {section!r}"
    return block.group(1)


def run_block(block: str, *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`block` in bash, stopping at the first failing command, with the venv's commands on PATH and
    none of the caller's JBOD_* settings; on timeout every process it started (its own process
    group) is killed before `TimeoutExpired` is raised."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JBOD_")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", COLUMNS="120", BROWSER="true")
    command = ["bash", "-e", "-o", "pipefail", "-c", block]
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def stop_local_cluster(root: Path) -> None:
    if (root / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(root, grace=2, purge=True)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1200)  # Spark local mode: under a minute alone, minutes on a shared 2-core box
def test_analytics_section_runs_verbatim_on_the_local_cluster(tmp_path: Path) -> None:
    block = readme_block("Analytics")
    assert "jbod-pipeline all" in block and '"$JBOD_TELEMETRY_DIR"' in block
    try:
        result = run_block(block, cwd=tmp_path, timeout=1100)
    finally:
        stop_local_cluster(tmp_path / DEFAULT_DIR)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Applied plan:" in result.stderr
    assert (tmp_path / "report" / "report.html").stat().st_size > 0
    assert (tmp_path / "report" / "plan.json").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_using_the_controller_section_runs_verbatim(tmp_path: Path) -> None:
    block = readme_block("Using the controller")
    assert "topics create orders" in block
    (tmp_path / ".venv").symlink_to(VENV_BIN.parent)  # the block's .venv/bin/... paths, from its cwd
    try:
        result = run_block(block, cwd=tmp_path, timeout=240)
    finally:
        stop_local_cluster(tmp_path / DEFAULT_DIR)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Created topic orders" in result.stdout
    assert '"brokers"' in result.stdout or '"clusterId"' in result.stdout, result.stdout
    assert (tmp_path / "metadata.jsonl").stat().st_size > 0
    assert not (tmp_path / DEFAULT_DIR).exists()  # the block cleans up after itself
