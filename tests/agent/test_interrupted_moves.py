"""A restart settles what interrupted intra-broker moves left (`reconciler.scan_dirs`).

Covers: a future replica whose current replica lives in another dir (the move was interrupted
before its switch) is dropped, not promoted, so the broker never holds two copies of a replica
(found by the operator's disk drain on kind: a promoted stale copy made the next move's switch
fail with ENOTEMPTY and took the destination dir offline); a future whose current replica is
missing everywhere (a crash between the switch's two renames) is still promoted.
"""

from __future__ import annotations

from pathlib import Path

from jbod_agent.lifecycle import reconciler
from jbod_agent.storage import replicas
from jbod_core.ids import Uuid

TOPIC_ID = Uuid.parse("MsJ1vOxlQ2qNGq1sfVZmAw")
SOURCE = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAQ")
DEST = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAg")


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    source, dest = tmp_path / "d1", tmp_path / "d0"
    source.mkdir()
    dest.mkdir()
    return source, dest


def _future(dest: Path) -> Path:
    future = dest / f"orders-0.{'a' * 32}-future"
    future.mkdir()
    (future / replicas.METADATA_FILE).write_text(f"version=0\ntopic_id={TOPIC_ID}\n")
    return future


def test_a_future_whose_replica_is_in_another_dir_is_dropped(tmp_path: Path) -> None:
    source, dest = _dirs(tmp_path)
    replicas.create(source, topic="orders", partition=0, topic_id=TOPIC_ID)
    future = _future(dest)
    outcomes = dict(reconciler.scan_dirs([(SOURCE, source), (DEST, dest)]))
    assert not future.exists() and not (dest / "orders-0").exists()
    assert (source / "orders-0").is_dir()
    assert outcomes[DEST] == []


def test_a_future_whose_replica_is_gone_everywhere_is_promoted(tmp_path: Path) -> None:
    source, dest = _dirs(tmp_path)
    current = replicas.create(source, topic="orders", partition=0, topic_id=TOPIC_ID)
    current.rename(source / f"orders-0.{'b' * 32}-delete")  # the switch's first rename happened
    _future(dest)
    reconciler.scan_dirs([(SOURCE, source), (DEST, dest)])
    assert (dest / "orders-0").is_dir()
    assert not any(p.name.endswith("-delete") for p in source.iterdir())
