"""`jbodctl topics create -c KEY=VALUE` with a config the controller rejects (errorCode 40): one
line on stderr naming the key, a non-zero exit, and no topic created. Real processes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.client.test_jbodctl import DIRS, register, run
from tests.harness import ControllerProcess

BAD = [
    ("min.insync.replicas", "banana"),
    ("min.insync.replicas", "0"),
    ("min.insync.replicas", "3"),  # above the replication factor 2
    ("retention.ms", "banana"),
    ("retention.ms", "-2"),
    ("retention.bytes", "1.5"),
    ("segment.bytes", "banana"),
    ("segment.bytes", "1"),
    ("cleanup.policy", "compacted"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(
        data_dir=tmp_path_factory.mktemp("cli-configs") / "controller", session_timeout_ms=600_000
    )
    with proc:
        for broker_id, dirs in DIRS.items():
            register(proc, broker_id, dirs)
        yield proc


@pytest.mark.parametrize(("key", "value"), BAD)
def test_a_bad_config_is_one_line_and_non_zero(cluster: ControllerProcess, key: str, value: str) -> None:
    result = run(cluster, "topics", "create", "ok4", "-p", "1", "-r", "2", "-c", f"{key}={value}")
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jbodctl: error:") and "errorCode 40" in lines[0], lines[0]
    assert key in lines[0], lines[0]
    assert json.loads(run(cluster, "-o", "json", "topics", "list").stdout) == []
