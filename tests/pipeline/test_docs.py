"""docs/pipeline.md's shell examples run on any OS the pipeline supports: no command that exists
only on macOS (`open`) or only on Windows (`start`)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"
ONE_OS_ONLY = {"open": "macOS", "start": "Windows"}


def _commands(markdown: str) -> list[str]:
    """The first word of each command in the ```sh blocks (continuation lines skipped)."""
    words = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", markdown, re.S):
        continued = False
        for line in block.splitlines():
            if not continued and line.strip() and not line.lstrip().startswith("#"):
                for command in re.split(r"&&|\|\||;|\|", line.split(" #")[0].rstrip(" \\")):
                    if command.strip():
                        words.append(shlex.split(command)[0])
            continued = line.rstrip().endswith("\\")
    return words


def test_shell_examples_are_portable() -> None:
    commands = _commands(DOC.read_text(encoding="utf-8"))
    assert "jbod-pipeline" in commands
    assert not [c for c in commands if c in ONE_OS_ONLY], commands
