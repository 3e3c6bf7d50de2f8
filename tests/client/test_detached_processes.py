"""`jbod_local.processes`: a detached process is known by pid and command line (also while its exec
settles), and when it is gone `exit_report` says how it ended (when this process reaped it) and
what its log last said. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jbod_local.processes import exit_report, process_alive, spawn_detached
from tests.broker.conftest import wait_for

pytestmark = pytest.mark.integration


def _spawn(tmp_path: Path, code: str) -> tuple[int, Path, Path]:
    marker = tmp_path / "marker"
    log = tmp_path / "process.log"
    pid = spawn_detached([sys.executable, "-c", code, str(marker)], log_path=log)
    return pid, marker, log


def test_a_process_killed_without_a_word_is_reported_with_its_signal(tmp_path: Path) -> None:
    go = tmp_path / "go"
    code = (
        f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\nos.kill(os.getpid(), 9)"
    )
    pid, marker, log = _spawn(tmp_path, code)
    assert process_alive(pid, marker)
    go.touch()  # now it kills itself
    wait_for(lambda: not process_alive(pid, marker), what="the process to die")
    assert exit_report(pid, log) == f"(killed by SIGKILL) nothing in {log}"


def test_a_process_that_fails_is_reported_with_its_code_and_last_lines(tmp_path: Path) -> None:
    pid, marker, log = _spawn(tmp_path, "import sys; print('one'); print('two', flush=True); sys.exit(3)")
    wait_for(lambda: not process_alive(pid, marker), what="the process to exit")
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # another child, reaped by subprocess
    assert exit_report(pid, log, lines=1) == "(exit code 3) two"


def test_another_processs_pid_is_not_taken_for_it(tmp_path: Path) -> None:
    pid, marker, log = _spawn(tmp_path, "import time; time.sleep(30)")
    try:
        assert process_alive(pid, marker)
        assert not process_alive(pid, tmp_path / "another-marker")
        assert exit_report(None, log) == f"nothing in {log}"
    finally:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not process_alive(pid, marker), what="the process to die")


def test_a_process_just_started_is_alive_while_its_exec_settles(tmp_path: Path) -> None:
    """Right after the exec, the kernel shows an empty command line for a moment (about one start
    in seven here): the process is alive all the same, never taken for a recycled pid."""
    started = [_spawn(tmp_path, "import time; time.sleep(30)") for _ in range(20)]
    try:
        assert [process_alive(pid, marker) for pid, marker, _log in started] == [True] * 20
    finally:
        for pid, marker, _log in started:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not process_alive(pid, marker), what="the process to die")  # noqa: B023
