"""`jbodctl` groups run without a subcommand print their help and succeed (issue 12); real usage
mistakes stay one line on stderr with exit status 2. Real processes, no cluster needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
JBODCTL = str(BIN / "jbodctl")


def run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JBOD_")}
    return subprocess.run(
        list(command), capture_output=True, text=True, env={**env, "COLUMNS": "80"}, cwd=cwd, timeout=60
    )


@pytest.mark.parametrize(
    ("command", "usage", "listed"),
    [
        ((JBODCTL,), "Usage: jbodctl [OPTIONS] COMMAND", ("topics", "log-dirs", "local")),
        ((JBODCTL, "topics"), "Usage: jbodctl topics [OPTIONS] COMMAND", ("create", "describe")),
        ((JBODCTL, "local"), "Usage: jbodctl local [OPTIONS] COMMAND", ("up", "down", "env")),
        ((JBODCTL, "metadata"), "Usage: jbodctl metadata [OPTIONS] COMMAND", ("export",)),
        ((sys.executable, "-m", "jbod_cli.local_cli"), "Usage: jbodctl local", ("up", "status")),
    ],
)
def test_a_group_without_a_subcommand_prints_its_help(
    tmp_path: Path, command: tuple[str, ...], usage: str, listed: tuple[str, ...]
) -> None:
    result = run(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(usage), result.stdout
    commands = result.stdout.split("Commands:", 1)[1]
    for name in listed:
        assert f"\n  {name} " in commands, commands


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("topics", "frobnicate"), "No such command 'frobnicate'"),
        (("topics", "describe"), "Missing argument 'NAME'"),
        (("--frobnicate",), "No such option '--frobnicate'"),
        (("local", "rotate-certs", "--new-key"), "--new-key goes with --ca"),
        (("local", "rotate-certs", "--ca", "--drop-old-ca"), "go in separate steps"),
    ],
)
def test_a_real_usage_error_stays_one_line_with_status_2(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    result = run(JBODCTL, *args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jbodctl: error: ") and needle in lines[0], result.stderr
