"""`jbod_runtime.durable_files`: `meta.properties` read and atomically replaced on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jbod_core import meta_properties
from jbod_core.ids import Uuid
from jbod_core.meta_properties import MetaProperties
from jbod_runtime import durable_files

DIR_ID = Uuid(0x1234_5678, 0x9ABC)


def test_write_then_read(tmp_path: Path) -> None:
    props = MetaProperties(cluster_id="c-1", node_id=3, directory_id=DIR_ID)
    durable_files.write_meta_properties(tmp_path, props)
    path = tmp_path / meta_properties.FILE_NAME
    assert path.read_text(encoding="utf-8") == meta_properties.render(props)
    assert durable_files.read_meta_properties(tmp_path) == props
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]


def test_write_replaces_the_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    durable_files.write_meta_properties(tmp_path, MetaProperties(cluster_id="old", node_id=1))
    new = MetaProperties(cluster_id="new", node_id=2, directory_id=DIR_ID)
    durable_files.write_meta_properties(tmp_path, new)
    assert durable_files.read_meta_properties(tmp_path) == new
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]


def test_failed_rename_removes_the_temp_file(tmp_path: Path) -> None:
    # A non-empty directory where the file should go makes the rename fail.
    blocker = tmp_path / meta_properties.FILE_NAME
    blocker.mkdir()
    (blocker / "x").write_text("x")
    with pytest.raises(OSError):
        durable_files.write_meta_properties(tmp_path, MetaProperties(cluster_id="c", node_id=1))
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]
    assert blocker.is_dir()


def test_read_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        durable_files.read_meta_properties(tmp_path)


def test_replace_atomically_replaces_without_fsync_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"old")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    durable_files.replace_atomically(path, b"new" * 10_000)
    assert path.read_bytes() == b"new" * 10_000
    assert synced == []  # durable only when its writer flushes it
    assert sorted(os.listdir(tmp_path)) == ["leader-epoch-checkpoint"]


def test_replace_atomically_keeps_the_old_file_when_the_rename_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "index"
    blocker.mkdir()
    (blocker / "x").write_text("x")
    with pytest.raises(OSError):
        durable_files.replace_atomically(blocker, b"data")
    assert sorted(os.listdir(tmp_path)) == ["index"] and blocker.is_dir()
