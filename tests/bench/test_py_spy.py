"""`bench.py_spy.summary` reads py-spy's collapsed stacks (its `raw` format) as py-spy writes them:
own samples go to the leaf, inclusive samples once per stack however often a function recurs, one
row per function whatever line it was sampled at."""

from __future__ import annotations

from pathlib import Path

from bench import py_spy

RAW = """\
<module> (agent.py:10);run (loop.py:20);write (streams.py:5) 6
<module> (agent.py:10);run (loop.py:21);write (streams.py:7) 2
<module> (agent.py:10);run (loop.py:20);run (loop.py:90);decode (fetch.py:3) 2
not a stack line
"""


def test_self_and_inclusive_shares(tmp_path: Path) -> None:
    path = tmp_path / "run1-produce-123.txt"
    path.write_text(RAW)
    samples, hotspots = py_spy.summary([path, tmp_path / "missing.txt"], top=5)
    assert samples == 10
    rows = {h.function: (h.self_share, h.inclusive_share) for h in hotspots}
    assert rows == {"write (streams.py)": (0.8, 0.8), "decode (fetch.py)": (0.2, 0.2)}
    assert [h.function for h in hotspots] == ["write (streams.py)", "decode (fetch.py)"]
    _, top1 = py_spy.summary([path], top=1)
    assert len(top1) == 1
