"""Helpers for the agent tests: server.properties text, formatted dirs, the `jbod-storage` binary,
records appended to a partition log as a leader appends a producer's batch."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jbod_core import meta_properties
from jbod_core.ids import Uuid, random_uuid
from jbod_core.meta_properties import MetaProperties
from jbod_kafka import record_batch
from jbod_runtime import durable_files

if TYPE_CHECKING:
    from jbod_agent.storage.partition_log import PartitionLog

STORAGE = shutil.which("jbod-storage", path=str(Path(sys.executable).parent)) or "jbod-storage"
CLUSTER = "agent-test-cluster"
NODE = 1
_RNG = random.Random(858)


def server_properties(
    log_dirs: Sequence[Path], metadata_dir: Path, *, node_id: int = NODE, extra: str = ""
) -> str:
    return (
        f"node.id={node_id}\n"
        f"log.dirs={','.join(str(p) for p in log_dirs)}\n"
        f"metadata.log.dir={metadata_dir}\n"
        "controller.url=http://127.0.0.1:9093\n"
        "cluster.token.file=/etc/jbod/cluster.token\n"
        f"{extra}"
    )


def write_config(
    path: Path, log_dirs: Sequence[Path], metadata_dir: Path, *, node_id: int = NODE, extra: str = ""
) -> Path:
    path.write_text(server_properties(log_dirs, metadata_dir, node_id=node_id, extra=extra), encoding="utf-8")
    return path


def format_dir(
    path: Path,
    *,
    cluster_id: str = CLUSTER,
    node_id: int = NODE,
    directory_id: Uuid | None = None,
    with_id: bool = True,
) -> Uuid | None:
    """Write a meta.properties into `path` (created if missing); returns its directory id."""
    if with_id and directory_id is None:
        directory_id = random_uuid(_RNG)
    path.mkdir(parents=True, exist_ok=True)
    durable_files.write_meta_properties(
        path,
        MetaProperties(
            cluster_id=cluster_id, node_id=node_id, directory_id=directory_id if with_id else None
        ),
    )
    return directory_id if with_id else None


def read_props(path: Path) -> MetaProperties:
    return durable_files.read_meta_properties(path)


def snapshot(paths: Sequence[Path]) -> dict[Path, bytes | None]:
    """The bytes of each dir's meta.properties (None when absent): to prove nothing was written."""
    result: dict[Path, bytes | None] = {}
    for path in paths:
        file = path / meta_properties.FILE_NAME
        result[path] = file.read_bytes() if file.is_file() else None
    return result


def run_storage(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STORAGE, *args], capture_output=True, text=True, timeout=timeout, check=False)


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], *needles: str, code: int | None = None
) -> str:
    assert result.returncode != 0, result
    if code is not None:
        assert result.returncode == code, result
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    [line] = lines
    assert line.startswith("jbod-storage: error:"), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def append_records(
    log: PartitionLog,
    records: Sequence[tuple[bytes | None, bytes]],
    *,
    leader_epoch: int,
    timestamp_ms: int | None = None,
) -> int:
    """`records` appended to `log` as its leader appends a producer's batch of them (one batch,
    checked as Kafka checks it, every record stamped `timestamp_ms`, default the wall clock);
    returns the batch's base offset."""
    stamp = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
    produced = record_batch.check_produced(record_batch.encode_batch(0, -1, stamp, records))
    return log.append_as_leader(produced, leader_epoch=leader_epoch)
