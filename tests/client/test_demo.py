"""`jbodctl local demo` with its default parameters, as a real process in an 80-column terminal:
the summary shows the failover figure as a number and keeps the verdict on one line, and the
verdict counts no duplicate (the producer is idempotent)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jbod_cli.demo import VERDICT_OK
from jbod_local import supervisor
from jbod_local.layout import STATE_FILE

JBODCTL = str(Path(sys.executable).parent / "jbodctl")


@pytest.mark.integration
@pytest.mark.slow
def test_default_demo_shows_the_failover_and_a_whole_verdict_in_80_columns(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}
    try:
        result = subprocess.run(
            [JBODCTL, "local", "demo", "--dir", str(root)],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
    finally:
        if (root / STATE_FILE).exists():  # never leave processes behind
            supervisor.down(root, grace=2)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    summary = result.stdout[result.stdout.index("Summary") :].splitlines()
    failover = [line for line in summary if re.match(r"│ failover\s+│", line)]
    assert len(failover) == 1, "\n".join(summary)
    assert re.search(r"│ failover\s+│ \d+\.\d\d s ", failover[0]), failover[0]
    verdict = [line for line in summary if "│ verdict" in line]
    assert len(verdict) == 1 and VERDICT_OK in verdict[0], "\n".join(summary)
    assert re.search(r"duplicates 0 +│$", verdict[0]), verdict[0]
    assert all(len(line) <= 80 for line in summary), "\n".join(summary)
