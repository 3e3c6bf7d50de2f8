"""Tests wait for conditions, not for fixed times (issue 30): every `time.sleep` or `asyncio.sleep`
under tests/ is a poll interval inside a `while` loop, or says why a fixed time is right.

The rule, checked on each module's syntax tree (`fixed_waits`):
* A sleep whose duration is the literal 0 is a yield (to the event loop, to other threads): allowed.
* A sleep inside a `while` loop (the nearest loop around it in its function) with a literal duration
  of at most `POLL_INTERVAL_MAX_S` is a poll interval: allowed. The loop is what waits; the
  shared helpers (`tests.broker.conftest.wait_for`, `e2e.wait.wait_for`) are such loops.
* Every other sleep — outside a loop, in a `for` loop (a fixed number of fixed waits), with a
  longer or a computed duration — is a fixed wait. It must carry a comment starting `# fixed wait:`
  and giving its reason, on one of its lines or in the comment block just above it.
Sleeps are found under any name they are imported as (`import time as t`, `from asyncio import
sleep`).
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
POLL_INTERVAL_MAX_S = 0.5
#: The comment that states why a fixed time is right; some words of reason must follow it.
REASON = re.compile(r"#\s*fixed wait:\s*\S.{8,}")


@dataclass(frozen=True)
class FixedWait:
    line: int
    call: str

    def __str__(self) -> str:
        return f"{self.line}: {self.call}"


def _sleep_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the modules `time` and `asyncio`, names bound to their `sleep` functions)."""
    modules, functions = {"time", "asyncio"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name in ("time", "asyncio") and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
            functions |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    return modules, functions


def _is_sleep(call: ast.Call, modules: set[str], functions: set[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "sleep" and isinstance(func.value, ast.Name) and func.value.id in modules
    return isinstance(func, ast.Name) and func.id in functions


def _literal_seconds(call: ast.Call) -> float | None:
    """The duration if it is a number literal, else None (computed)."""
    if len(call.args) != 1 or call.keywords:
        return None
    arg = call.args[0]
    if (
        isinstance(arg, ast.Constant)
        and isinstance(arg.value, int | float)
        and not isinstance(arg.value, bool)
    ):
        return float(arg.value)
    return None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)
_LOOPS = (ast.While, ast.For, ast.AsyncFor)


def _in_while_loop(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the nearest loop repeating `node`, within its function, is a `while` loop (a loop's
    `else:` block runs once: it does not count)."""
    child, current = node, parents.get(node)
    while current is not None and not isinstance(current, _SCOPES):
        if isinstance(current, _LOOPS) and child not in current.orelse:
            return isinstance(current, ast.While)
        child, current = current, parents.get(current)
    return False


def _comments(source: str) -> tuple[set[int], set[int]]:
    """(lines with a `# fixed wait: <reason>` comment, lines holding a comment and nothing else)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    reasons = {t.start[0] for t in tokens if REASON.match(t.string)}
    return reasons, {t.start[0] for t in tokens if t.line.lstrip().startswith("#")}


def _explained(call: ast.Call, reasons: set[int], comment_lines: set[int]) -> bool:
    """Whether a reason is on one of the call's lines or in the comment block just above it."""
    if reasons & set(range(call.lineno, (call.end_lineno or call.lineno) + 1)):
        return True
    line = call.lineno - 1
    while line in comment_lines:
        if line in reasons:
            return True
        line -= 1
    return False


def fixed_waits(source: str) -> list[FixedWait]:
    """The sleeps of `source` that are fixed waits without a stated reason (the module's rule)."""
    tree = ast.parse(source)
    modules, functions = _sleep_names(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    reasons, comment_lines = _comments(source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not _is_sleep(node, modules, functions):
            continue
        seconds = _literal_seconds(node)
        if seconds == 0:
            continue
        if seconds is not None and seconds <= POLL_INTERVAL_MAX_S and _in_while_loop(node, parents):
            continue
        if _explained(node, reasons, comment_lines):
            continue
        found.append(FixedWait(node.lineno, ast.unparse(node)))
    return sorted(found, key=lambda w: w.line)


def test_no_test_waits_a_fixed_time_without_a_reason() -> None:
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(TESTS.rglob("*.py"))}
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{wait}"
        for path, source in sources.items()
        if "sleep" in source
        for wait in fixed_waits(source)
    ]
    assert offenders == [], (
        "fixed waits: wait for a condition (a log line, a metric, an API's state, a file, a process "
        "exit) with a deadline, or say on the line or the line above why the time is right "
        "('# fixed wait: <reason>'):\n  " + "\n  ".join(offenders)
    )


def test_the_rule_tells_poll_intervals_and_yields_from_fixed_waits() -> None:
    source = textwrap.dedent(
        """
        import asyncio
        import time
        import time as clock
        from asyncio import sleep as nap
        from time import sleep

        def poll(ready):
            while not ready():
                time.sleep(0.05)

        async def tick():
            await asyncio.sleep(0)
            while True:
                await asyncio.sleep(0.5)

        def waits(delay):
            time.sleep(0.3)
            clock.sleep(2)
            sleep(1)
            while True:
                time.sleep(delay)
                time.sleep(0.6)
            for _ in range(3):
                time.sleep(0.1)
            while True:
                for _ in range(3):
                    pass
                else:
                    time.sleep(0.05)
            while True:
                def later():
                    time.sleep(0.1)

        async def more():
            await nap(1)
            await asyncio.sleep(1.5)

        def explained():
            # fixed wait: the throttle must hold the follower back for a second, which
            # a second comment line explains further
            time.sleep(1)
            # fixed wait: a block above, then code between
            pass
            time.sleep(0.2)
            time.sleep(2)  # fixed wait: two probe timeouts, far below the session timeout
            time.sleep(
                3,
            )  # fixed wait: the lease must lapse
            time.sleep(1)  # fixed wait:
        """
    )
    flagged = [w.call for w in fixed_waits(source)]
    assert flagged == [
        "time.sleep(0.3)",
        "clock.sleep(2)",
        "sleep(1)",
        "time.sleep(delay)",
        "time.sleep(0.6)",
        "time.sleep(0.1)",
        "time.sleep(0.1)",
        "nap(1)",
        "asyncio.sleep(1.5)",
        "time.sleep(0.2)",
        "time.sleep(1)",
    ]
