"""`jbodctl local ...` run as a real process, for the local-cluster test modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

JBODCTL = str(Path(sys.executable).parent / "jbodctl")


def run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`jbodctl local ARGS` as a real process."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([JBODCTL, "local", *args], capture_output=True, text=True, env=env, timeout=timeout)


def ok(*args: str) -> str:
    """Its stdout; the command must succeed without a traceback."""
    result = run(*args)
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def status(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok("status", "--dir", str(root), "--output", "json"))
    return data
