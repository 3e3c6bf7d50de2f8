"""`jbod_runtime.lean_imports`: a server process started through its console script's entry
never loads hypothesis (kio's optional generators) or httpx's command-line client, and the
libraries that would have loaded them still work. Each case runs in a fresh interpreter, as the
console scripts do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
{setup}
import kio.schema.errors, httpx
import jbod_kafka.protocol
print(json.dumps({{
    "loaded": sorted(m for m in ("hypothesis", "rich", "pygments", "click") if sys.modules.get(m)),
    "versions": jbod_kafka.protocol.APIS[18].max_version,
    "client": type(httpx.Client()).__name__,
}}))
"""


def _probe(setup: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_the_optional_imports_are_skipped_and_the_libraries_still_work() -> None:
    pytest.importorskip("hypothesis")  # the dev environment: without the skip it would load
    plain = _probe("")
    assert "hypothesis" in plain["loaded"]  # what the skip is for: kio loads it when installed
    lean = _probe("from jbod_runtime import lean_imports; lean_imports.skip_optional_imports()")
    assert lean["loaded"] == []
    assert lean["versions"] == plain["versions"] and lean["client"] == "Client"


@pytest.mark.parametrize("entry", ["jbod_agent.entry", "jbod_controller.entry"])
def test_the_server_entries_skip_them_before_importing_anything(entry: str) -> None:
    pytest.importorskip("hypothesis")
    code = (
        f"import contextlib, sys, {entry} as entry\n"
        "sys.argv = ['server', '--help']\n"
        "with contextlib.redirect_stdout(None), contextlib.suppress(SystemExit):\n"
        "    entry.main()  # imports the whole server, then argparse prints its help\n"
        "assert 'argparse' in sys.modules and len(sys.modules) > 300, len(sys.modules)\n"
        "print(sorted(m for m in ('hypothesis', 'rich', 'pygments') if sys.modules.get(m)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip() == "[]"
