"""Log dir identity at startup and the pure format plan (protocol §4.1, `jbod_agent.storage.storage`).

Covers `storage.load` on real dirs: ids and device ids recorded; duplicate ids refused naming both
dirs (data/data and data/metadata); a missing `directory.id` generated, written atomically and
stable on the next load; an unformatted dir refused naming it unless formatting on start (and then
formatted); another cluster or node refused naming the dir and both ids; a reserved id refused;
damaged `meta.properties` and a regular file as a data dir start offline; a data dir on an ext4
that was shut down (EIO) starts offline while the others are online; the same for the metadata dir
refuses to start; all data dirs unreadable refuses; a format-on-start write that hits EIO takes a
data dir offline and refuses for the metadata dir. `plan_format` ids: fresh, unique, never
reserved, never equal to a kept dir's id, never starting with '-'.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from jbod_agent.storage import storage
from jbod_agent.storage.storage import DirKind, StorageError
from jbod_core import meta_properties
from jbod_core.ids import LOST_DIR, Uuid
from jbod_core.meta_properties import MetaProperties
from tests.agent.support import CLUSTER, NODE, format_dir, read_props, snapshot
from tests.fs import loop_ext4, requires_root


def dirs(tmp_path: Path, count: int = 3) -> tuple[list[Path], Path]:
    return [tmp_path / f"d{i}" for i in range(count)], tmp_path / "meta"


def formatted(tmp_path: Path, count: int = 3) -> tuple[list[Path], Path, dict[Path, Uuid]]:
    data, meta = dirs(tmp_path, count)
    ids: dict[Path, Uuid] = {}
    for path in [*data, meta]:
        directory_id = format_dir(path)
        assert directory_id is not None
        ids[path] = directory_id
    return data, meta, ids


def load(
    data: list[Path], meta: Path, *, format_on_start: bool = False, cluster_id: str | None = None
) -> storage.LoadedStorage:
    return storage.load(
        data, meta, node_id=NODE, format_on_start=format_on_start, cluster_id=cluster_id, rng=random.Random(7)
    )


def test_load_formatted_dirs(tmp_path: Path) -> None:
    data, meta, ids = formatted(tmp_path)
    loaded = load(data, meta)
    assert loaded.cluster_id == CLUSTER
    assert [d.path for d in loaded.online] == data
    assert [d.directory_id for d in loaded.online] == [ids[p] for p in data]
    assert loaded.metadata_dir.path == meta
    assert loaded.metadata_dir.directory_id == ids[meta]
    assert loaded.offline == ()
    assert loaded.rewritten == ()
    for loaded_dir in [*loaded.online, loaded.metadata_dir]:
        assert loaded_dir.device == os.stat(loaded_dir.path).st_dev


def test_load_with_a_matching_configured_cluster_id(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path)
    assert storage.load(data, meta, node_id=NODE, cluster_id=CLUSTER).cluster_id == CLUSTER


@pytest.mark.parametrize("second", ["data", "metadata"])
def test_duplicate_directory_ids_refuse_naming_both(tmp_path: Path, second: str) -> None:
    data, meta = dirs(tmp_path)
    shared = Uuid(0x1234, 0x5678)
    format_dir(data[0], directory_id=shared)
    format_dir(data[1])
    format_dir(data[2], directory_id=shared if second == "data" else None)
    format_dir(meta, directory_id=shared if second == "metadata" else None)
    other = data[2] if second == "data" else meta
    before = snapshot([*data, meta])
    with pytest.raises(StorageError) as info:
        load(data, meta)
    message = str(info.value)
    assert str(data[0]) in message
    assert str(other) in message
    assert str(shared) in message
    assert snapshot([*data, meta]) == before  # refused before anything was rewritten


def test_missing_directory_id_is_generated_and_written(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    kept = {p: format_dir(p) for p in data[:2]}
    format_dir(data[2], with_id=False)
    format_dir(meta, with_id=False)
    loaded = load(data, meta)
    assert set(loaded.rewritten) == {data[2], meta}
    generated = {d.path: d.directory_id for d in [*loaded.online, loaded.metadata_dir]}
    for path in (data[2], meta):
        props = read_props(path)
        assert props == MetaProperties(cluster_id=CLUSTER, node_id=NODE, directory_id=generated[path])
        assert props.directory_id is not None
        assert not props.directory_id.is_reserved
        assert not str(props.directory_id).startswith("-")
        assert not (path / "meta.properties.tmp").exists()
    assert len(set(generated.values())) == 4
    for path, directory_id in kept.items():
        assert generated[path] == directory_id
    # The next start finds the ids on disk and writes nothing.
    again = load(data, meta)
    assert again.rewritten == ()
    assert {d.path: d.directory_id for d in [*again.online, again.metadata_dir]} == generated


class Scripted(random.Random):
    """Yields the given words first (msb, lsb of each id to draw), then random ones."""

    def __init__(self, words: list[int]) -> None:
        super().__init__(0)
        self.words = words

    def getrandbits(self, k: int) -> int:
        return self.words.pop(0) if self.words else super().getrandbits(k)


def test_generated_id_avoids_ids_already_on_disk(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path, 2)
    existing = Uuid(0x11, 0x22)
    format_dir(data[0], directory_id=existing)
    format_dir(data[1], with_id=False)
    format_dir(meta, directory_id=Uuid(0x33, 0x44))
    rng = Scripted([0x11, 0x22, 0, 5, 0x55, 0x66])
    loaded = storage.load(data, meta, node_id=NODE, rng=rng)
    assert loaded.online[1].directory_id == Uuid(0x55, 0x66)


def test_unformatted_dir_refuses_naming_it(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    for path in [data[0], data[2], meta]:
        format_dir(path)
    data[1].mkdir()
    with pytest.raises(StorageError) as info:
        load(data, meta)
    assert str(data[1]) in str(info.value)
    assert "jbod-storage format" in str(info.value)
    assert not (data[1] / "meta.properties").exists()


def test_unformatted_metadata_dir_refuses(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    for path in data:
        format_dir(path)
    with pytest.raises(StorageError) as info:
        load(data, meta)
    assert str(meta) in str(info.value)


def test_nothing_formatted_refuses(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    with pytest.raises(StorageError):
        load(data, meta)
    assert not any(p.exists() for p in [*data, meta])


def test_format_on_start_formats_empty_dirs(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    kept = format_dir(data[0])
    loaded = load(data, meta, format_on_start=True, cluster_id=CLUSTER)
    assert set(loaded.rewritten) == {data[1], data[2], meta}
    ids = [d.directory_id for d in [*loaded.online, loaded.metadata_dir]]
    assert ids[0] == kept
    assert len(set(ids)) == 4
    for path, directory_id in zip([*data, meta], ids, strict=True):
        assert read_props(path) == MetaProperties(cluster_id=CLUSTER, node_id=NODE, directory_id=directory_id)


def test_format_on_start_refuses_a_dir_of_another_cluster(tmp_path: Path) -> None:
    data, meta = dirs(tmp_path)
    format_dir(data[0], cluster_id="other")
    with pytest.raises(StorageError) as info:
        load(data, meta, format_on_start=True, cluster_id=CLUSTER)
    message = str(info.value)
    assert str(data[0]) in message and "other" in message and CLUSTER in message
    assert not any((p / "meta.properties").exists() for p in [*data[1:], meta])


def test_another_cluster_refuses_naming_dir_and_both_ids(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path)
    format_dir(data[1], cluster_id="intruder")
    with pytest.raises(StorageError) as info:
        load(data, meta)
    message = str(info.value)
    assert str(data[1]) in message and "intruder" in message and CLUSTER in message


def test_another_node_refuses_naming_dir_and_both_ids(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path)
    format_dir(meta, node_id=42)
    with pytest.raises(StorageError) as info:
        load(data, meta)
    message = str(info.value)
    assert str(meta) in message and "42" in message and str(NODE) in message


def test_reserved_directory_id_refuses(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path)
    format_dir(data[0], directory_id=LOST_DIR)
    with pytest.raises(StorageError) as info:
        load(data, meta)
    assert str(data[0]) in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        "version=2\ncluster.id=c\nnode.id=1\n",
        "version=1\nnode.id=1\n",
        "version=1\ncluster.id=c\nnode.id=1\ndirectory.id=nope\n",
    ],
)
def test_damaged_meta_properties_data_dir_starts_offline(tmp_path: Path, content: str) -> None:
    data, meta, _ = formatted(tmp_path)
    (data[1] / "meta.properties").write_text(content)
    loaded = load(data, meta)
    assert [d.path for d in loaded.online] == [data[0], data[2]]
    assert [path for path, _ in loaded.offline] == [data[1]]
    assert loaded.offline[0][1]  # a reason is given
    assert (data[1] / "meta.properties").read_text() == content  # left alone


def test_damaged_metadata_dir_refuses(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path)
    (meta / "meta.properties").write_bytes(b"version=1\ncluster.id=\xff\n")
    with pytest.raises(StorageError) as info:
        load(data, meta)
    assert str(meta) in str(info.value)


def test_regular_file_as_data_dir_starts_offline(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path, 2)
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    loaded = load([data[0], plain, data[1]], meta)
    assert [d.path for d in loaded.online] == data
    assert loaded.offline == ((plain, "not a directory"),)


def test_every_data_dir_unreadable_refuses(tmp_path: Path) -> None:
    _, meta, _ = formatted(tmp_path, 0)
    plain = tmp_path / "plain-file"
    plain.write_text("x")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "meta.properties").write_text("version=9\n")
    with pytest.raises(StorageError) as info:
        load([plain, damaged], meta)
    assert "no usable log dir" in str(info.value)


def test_inspect_kinds(tmp_path: Path) -> None:
    format_dir(tmp_path / "ok")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "meta-is-dir").mkdir()
    (tmp_path / "meta-is-dir" / "meta.properties").mkdir()
    assert storage.inspect(tmp_path / "ok").kind is DirKind.FORMATTED
    assert storage.inspect(tmp_path / "empty").kind is DirKind.EMPTY
    assert storage.inspect(tmp_path / "absent").kind is DirKind.EMPTY
    assert storage.inspect(tmp_path / "file").kind is DirKind.ERROR
    assert storage.inspect(tmp_path / "file" / "below").kind is DirKind.ERROR
    assert storage.inspect(tmp_path / "meta-is-dir").kind is DirKind.ERROR


# -- real failing filesystems ------------------------------------------------------------------------


@requires_root
def test_data_dir_on_failed_ext4_starts_offline(tmp_path: Path) -> None:
    data, meta, ids = formatted(tmp_path, 2)
    with loop_ext4(tmp_path / "disk") as disk:
        format_dir(disk.path)
        disk.shutdown()
        loaded = load([data[0], disk.path, data[1]], meta)
        assert [d.path for d in loaded.online] == data
        assert [d.directory_id for d in loaded.online] == [ids[data[0]], ids[data[1]]]
        [(path, reason)] = loaded.offline
        assert path == disk.path
        assert "EIO" in reason
        for loaded_dir in loaded.online:
            assert loaded_dir.device == os.stat(loaded_dir.path).st_dev


@requires_root
def test_device_ids_are_the_mounts(tmp_path: Path) -> None:
    data, meta, _ = formatted(tmp_path, 1)
    with loop_ext4(tmp_path / "disk") as disk:
        format_dir(disk.path)
        loaded = load([data[0], disk.path], meta)
        devices = {d.path: d.device for d in loaded.online}
        assert devices[disk.path] == os.stat(disk.path).st_dev
        assert devices[disk.path] != devices[data[0]]
        assert loaded.metadata_dir.device == os.stat(tmp_path).st_dev


@requires_root
def test_metadata_dir_on_failed_ext4_refuses(tmp_path: Path) -> None:
    data, _, _ = formatted(tmp_path)
    with loop_ext4(tmp_path / "meta-disk") as disk:
        format_dir(disk.path)
        disk.shutdown()
        with pytest.raises(StorageError) as info:
            load(data, disk.path)
        assert str(disk.path) in str(info.value)
        assert "EIO" in str(info.value)


@requires_root
def test_all_data_dirs_on_failed_ext4_refuse(tmp_path: Path) -> None:
    _, meta, _ = formatted(tmp_path, 0)
    with loop_ext4(tmp_path / "a") as first, loop_ext4(tmp_path / "b") as second:
        for disk in (first, second):
            format_dir(disk.path)
            disk.shutdown()
        with pytest.raises(StorageError):
            load([first.path, second.path], meta)


@requires_root
def test_format_on_start_write_failure(tmp_path: Path) -> None:
    """An empty dir on a failed disk reads as empty (cached lookup) but cannot be written."""
    data, meta = dirs(tmp_path, 1)
    with loop_ext4(tmp_path / "disk") as disk:
        disk.shutdown()
        loaded = load([data[0], disk.path], meta, format_on_start=True, cluster_id=CLUSTER)
        assert [d.path for d in loaded.online] == [data[0]]
        [(path, reason)] = loaded.offline
        assert path == disk.path and "cannot write meta.properties" in reason
        assert set(loaded.rewritten) == {data[0], meta}
    with loop_ext4(tmp_path / "meta-disk") as disk:
        disk.shutdown()
        with pytest.raises(StorageError) as info:
            load(data, disk.path, format_on_start=True, cluster_id=CLUSTER)
        assert str(disk.path) in str(info.value)


# -- the pure format plan ------------------------------------------------------------------------


def test_plan_format_ids_are_fresh_and_unique(tmp_path: Path) -> None:
    """Every draw that breaks a rule is drawn again: the kept dir's id, a reserved id, an id whose
    text starts with '-', and the id just given to the first new dir."""
    kept_id = Uuid(0x7, 0x7)
    format_dir(tmp_path / "kept", directory_id=kept_id)
    states = [storage.inspect(tmp_path / "kept")] + [storage.inspect(tmp_path / f"e{i}") for i in range(2)]
    first, second = Uuid(0x51, 0x52), Uuid(0x53, 0x54)
    dash = Uuid(0xF800_0000_0000_0001, 9)
    assert str(dash).startswith("-") and Uuid(0, 5).is_reserved
    draws = [0x7, 0x7, 0, 5, 0xF800_0000_0000_0001, 9, 0x51, 0x52, 0x51, 0x52, 0x53, 0x54]
    plan = storage.plan_format(
        states, cluster_id=CLUSTER, node_id=NODE, ignore_formatted=True, rng=Scripted(draws)
    )
    assert plan.kept == (tmp_path / "kept",)
    assert [props.directory_id for _, props in plan.writes] == [first, second]
    for props in (p for _, p in plan.writes):
        assert props.directory_id is not None and not props.directory_id.is_reserved
        assert not str(props.directory_id).startswith("-")
        assert (props.cluster_id, props.node_id, props.version) == (CLUSTER, NODE, meta_properties.VERSION)
