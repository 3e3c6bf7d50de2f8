"""`bench.tls_throughput --quick`: both clusters run (SASL_PLAINTEXT and SASL_SSL), every record
is acknowledged and consumed back (the benchmark raises otherwise), and the side-by-side table and
the TLS/plaintext ratios are printed with the load average."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.integration
def test_a_quick_run_measures_both_protocols(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.tls_throughput", "--quick", "--results-json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
    figures = {f["name"]: f["measured"] for f in json.loads(out.read_text())}
    assert set(figures) == {
        "produce MB/s, SASL_SSL / SASL_PLAINTEXT",
        "produce broker CPU per MB, SASL_SSL / SASL_PLAINTEXT",
        "consume MB/s, SASL_SSL / SASL_PLAINTEXT",
        "consume broker CPU per MB, SASL_SSL / SASL_PLAINTEXT",
    }
    assert all(value > 0 for value in figures.values()), figures
    assert "SASL_SSL MB/s" in proc.stdout and "load average" in proc.stdout
