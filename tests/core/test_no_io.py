"""`jbod_core` does no file I/O: the import-linter contract keeps `os`, `pathlib`, `io` … out of it
(`make lint`); this test covers what needs no import — the builtin `open` and `__import__`."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core" / "jbod_core"
_BUILTINS = {"open", "__import__", "exec", "eval", "compile"}


def test_jbod_core_calls_no_builtin_that_reaches_files_or_imports() -> None:
    paths = sorted(CORE.glob("*.py"))
    assert paths, CORE
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Name) and node.id in _BUILTINS:
                found.append(f"{path.name}:{node.lineno} {node.id}")
    assert found == []
