"""A `jbod-controller` start that fails leaves nothing behind (issue 12, item 3).

Covers: a port already in use is found before anything is written, so a fresh data dir is not
created and no token file (in the data dir or elsewhere, with its parent dirs) appears; an existing
empty data dir stays empty; and a start whose metadata log cannot be recovered removes the token
files and identity it created, leaving the data dir exactly as it was. Every failure is one line
on stderr and a non-zero exit.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.controller.test_cli import assert_one_line_error, base_args, run_controller
from tests.harness import ControllerProcess


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


def _listen(port: int) -> list[str]:
    return ["--listen", f"127.0.0.1:{port}"]


def test_port_in_use_creates_no_data_dir_and_no_token_files(tmp_path: Path, taken_port: int) -> None:
    data_dir = tmp_path / "data"
    tokens = tmp_path / "tokens" / "deep"
    result = run_controller(
        *base_args(data_dir)[:4],
        *_listen(taken_port),
        "--cluster-token-file",
        str(tokens / "cluster.token"),
    )
    assert_one_line_error(result, str(taken_port))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert result.stdout == ""


def test_port_in_use_leaves_an_existing_empty_data_dir_empty(tmp_path: Path, taken_port: int) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    result = run_controller(*base_args(data_dir)[:4], *_listen(taken_port))
    assert_one_line_error(result, str(taken_port))
    assert list(data_dir.iterdir()) == []


def test_unrecoverable_log_removes_the_token_files_it_created(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with ControllerProcess(data_dir=data_dir, cluster_id="cli-cluster"):
        pass
    (data_dir / "admin.token").unlink()
    (data_dir / "cluster.token").unlink()
    payload = orjson.dumps({"offset": 7, "type": "RemoveTopicRecord", "data": {"topicId": "x"}})
    segment = data_dir / "metadata" / f"{0:020d}.log"
    segment.write_bytes(struct.pack(">II", len(payload), zlib.crc32(payload)) + payload)
    before = _tree(data_dir)
    elsewhere = tmp_path / "tokens" / "admin.token"

    result = run_controller(*base_args(data_dir, "cli-cluster"), "--admin-token-file", str(elsewhere))
    assert_one_line_error(result, "offset")
    assert _tree(data_dir) == before
    assert not (tmp_path / "tokens").exists()
