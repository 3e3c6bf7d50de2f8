"""`jbod-storage format` as a real process on real dirs (protocol §4.1, §5).

Covers: every empty dir (including a missing one and `metadata.log.dir`) gets its own fresh
directory id in a `version=1` file written atomically; an already formatted dir without
`--ignore-formatted` is an error naming it and nothing is written; with it, formatted dirs are
byte-for-byte unchanged and empty ones formatted; a dir of another cluster or node, and duplicate
ids among formatted dirs, are errors naming the dirs and ids; unreadable dirs (a regular file, a
damaged file, an ext4 shut down → EIO) are reported and skipped while the others are formatted; a
dir that cannot be written (EIO) fails the command after the others are formatted; no usable dir
is an error; bad configs, bad cluster ids and bad flags. Every error is one `jbod-storage: error:`
line on stderr, a non-zero exit (2 for usage) and no traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jbod_core.ids import Uuid
from tests.agent.support import (
    CLUSTER,
    NODE,
    assert_one_line_error,
    format_dir,
    read_props,
    run_storage,
    snapshot,
    write_config,
)
from tests.fs import loop_ext4, requires_root


def setup_dirs(tmp_path: Path, count: int = 3) -> tuple[list[Path], Path, Path]:
    data = [tmp_path / f"d{i}" for i in range(count)]
    meta = tmp_path / "meta"
    for path in [*data, meta]:
        path.mkdir()
    return data, meta, write_config(tmp_path / "server.properties", data, meta)


def fmt(config: Path, *extra: str, cluster_id: str = CLUSTER) -> subprocess.CompletedProcess[str]:
    return run_storage("format", "--config", str(config), "--cluster-id", cluster_id, *extra)


def assert_formatted(paths: list[Path]) -> list[Uuid]:
    ids = []
    for path in paths:
        raw = (path / "meta.properties").read_text(encoding="utf-8")
        lines = [line for line in raw.splitlines() if line and not line.startswith("#")]
        assert lines[0] == "version=1"
        assert f"cluster.id={CLUSTER}" in lines
        assert f"node.id={NODE}" in lines
        props = read_props(path)
        assert (props.version, props.cluster_id, props.node_id) == (1, CLUSTER, NODE)
        assert props.directory_id is not None
        assert not props.directory_id.is_reserved
        assert not str(props.directory_id).startswith("-")
        assert [p.name for p in path.iterdir()] == ["meta.properties"]  # no temp file left behind
        ids.append(props.directory_id)
    assert len(set(ids)) == len(ids), ids
    return ids


def test_formats_every_empty_dir(tmp_path: Path) -> None:
    data, meta, _ = setup_dirs(tmp_path)
    missing = tmp_path / "not" / "yet" / "there"
    config = write_config(tmp_path / "server.properties", [*data, missing], meta)
    result = fmt(config)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    ids = assert_formatted([*data, missing, meta])
    for path, directory_id in zip([*data, missing, meta], ids, strict=True):
        assert f"Formatted {path} with directory.id {directory_id}" in result.stdout


def test_each_run_draws_new_ids(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    ids = []
    for base in (first, second):
        data, meta, config = setup_dirs(base, 1)
        assert fmt(config).returncode == 0
        ids += assert_formatted([*data, meta])
    assert len(set(ids)) == 4


def test_stale_temp_file_from_a_crash_is_replaced(tmp_path: Path) -> None:
    data, meta, config = setup_dirs(tmp_path, 1)
    (data[0] / "meta.properties.tmp").write_text("version=1\ncluster.id=half-writ")
    assert fmt(config).returncode == 0
    assert_formatted([*data, meta])


def test_already_formatted_without_flag_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    data, meta, config = setup_dirs(tmp_path)
    format_dir(data[1])
    before = snapshot([*data, meta])
    result = fmt(config)
    assert_one_line_error(result, str(data[1]), "already formatted", "--ignore-formatted")
    assert snapshot([*data, meta]) == before
    assert before[data[0]] is None


def test_ignore_formatted_keeps_formatted_dirs_and_formats_the_others(tmp_path: Path) -> None:
    data, meta, config = setup_dirs(tmp_path)
    kept_id = format_dir(data[0])
    format_dir(meta, with_id=False)  # formatted without an id: also kept exactly as it is
    before = snapshot([data[0], meta])
    result = fmt(config, "--ignore-formatted")
    assert result.returncode == 0, result.stderr
    assert snapshot([data[0], meta]) == before
    new_ids = assert_formatted(data[1:])
    assert kept_id not in new_ids
    assert f"Kept formatted log directory {data[0]}" in result.stdout
    # Formatting again keeps everything.
    after = snapshot([*data, meta])
    again = fmt(config, "--ignore-formatted")
    assert again.returncode == 0, again.stderr
    assert "All of the log directories are already formatted." in again.stdout
    assert snapshot([*data, meta]) == after


@pytest.mark.parametrize("flags", [(), ("--ignore-formatted",)])
def test_dir_of_another_cluster(tmp_path: Path, flags: tuple[str, ...]) -> None:
    data, meta, config = setup_dirs(tmp_path)
    format_dir(data[2], cluster_id="someone-else")
    before = snapshot([*data, meta])
    assert_one_line_error(fmt(config, *flags), str(data[2]), "someone-else", CLUSTER)
    assert snapshot([*data, meta]) == before


@pytest.mark.parametrize("flags", [(), ("--ignore-formatted",)])
def test_dir_of_another_node(tmp_path: Path, flags: tuple[str, ...]) -> None:
    data, meta, config = setup_dirs(tmp_path)
    format_dir(meta, node_id=77)
    before = snapshot([*data, meta])
    line = assert_one_line_error(fmt(config, *flags), str(meta), "77")
    assert f"node {NODE}" in line
    assert snapshot([*data, meta]) == before


def test_duplicate_ids_among_formatted_dirs(tmp_path: Path) -> None:
    data, meta, config = setup_dirs(tmp_path)
    shared = Uuid(0x0ABC, 0x0DEF)
    format_dir(data[0], directory_id=shared)
    format_dir(data[2], directory_id=shared)
    before = snapshot([*data, meta])
    assert_one_line_error(fmt(config, "--ignore-formatted"), str(data[0]), str(data[2]), str(shared))
    assert snapshot([*data, meta]) == before


def test_unreadable_dirs_are_reported_and_skipped(tmp_path: Path) -> None:
    data, meta, _ = setup_dirs(tmp_path, 2)
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "meta.properties").write_text("version=1\nnode.id=1\n")  # no cluster.id
    config = write_config(tmp_path / "server.properties", [data[0], plain, damaged, data[1]], meta)
    result = fmt(config)
    assert result.returncode == 0, result.stderr
    assert f"I/O error trying to read log directory {plain}" in result.stdout
    assert f"I/O error trying to read log directory {damaged}" in result.stdout
    assert_formatted([*data, meta])
    assert plain.read_text() == "not a dir"
    assert (damaged / "meta.properties").read_text() == "version=1\nnode.id=1\n"


@requires_root
def test_dir_on_a_failed_ext4_is_reported_and_skipped(tmp_path: Path) -> None:
    data, meta, _ = setup_dirs(tmp_path, 2)
    with loop_ext4(tmp_path / "disk") as disk:
        format_dir(disk.path)
        disk.shutdown()
        config = write_config(tmp_path / "server.properties", [data[0], disk.path, data[1]], meta)
        result = fmt(config)
        assert result.returncode == 0, result.stderr
        [report] = [line for line in result.stdout.splitlines() if str(disk.path) in line]
        assert "I/O error" in report and "EIO" in report
        assert_formatted([*data, meta])


@requires_root
def test_dir_that_cannot_be_written_fails_after_the_others(tmp_path: Path) -> None:
    data, meta, _ = setup_dirs(tmp_path, 2)
    with loop_ext4(tmp_path / "disk") as disk:
        disk.shutdown()  # empty: the lookup still answers "no meta.properties", the write fails
        config = write_config(tmp_path / "server.properties", [data[0], disk.path, data[1]], meta)
        result = fmt(config)
        assert_one_line_error(result, "could not be formatted", code=1)
        assert f"Failed formatting {disk.path}" in result.stdout
        assert_formatted([*data, meta])


def test_no_usable_dir(tmp_path: Path) -> None:
    plain, other = tmp_path / "f1", tmp_path / "f2"
    plain.write_text("x")
    other.write_text("y")
    config = write_config(tmp_path / "server.properties", [plain], other)
    assert_one_line_error(fmt(config), "no usable log directory", code=1)
    assert plain.read_text() == "x" and other.read_text() == "y"


def test_missing_config_file(tmp_path: Path) -> None:
    assert_one_line_error(fmt(tmp_path / "absent.properties"), str(tmp_path / "absent.properties"), code=1)


def test_undecodable_config_file(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(fmt(config), str(config), code=1)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("bogus.key=1\n", "bogus.key"),
        ("log.dir.failure.timeout.ms=0\n", "log.dir.failure.timeout.ms"),
        ("broker.heartbeat.interval.ms=9000\n", "broker.heartbeat.interval.ms"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, extra: str, key: str) -> None:
    data, meta = [tmp_path / "d0"], tmp_path / "meta"
    config = write_config(tmp_path / "server.properties", data, meta, extra=extra)
    line = assert_one_line_error(fmt(config), key, code=1)
    assert line.startswith(f"jbod-storage: error: {key}:")
    assert not data[0].exists() and not meta.exists()


@pytest.mark.parametrize("cluster_id", ["", "   ", "has space", "x" * 65, "abc\nversion=7", "a.b"])
def test_bad_cluster_id(tmp_path: Path, cluster_id: str) -> None:
    data, meta, config = setup_dirs(tmp_path, 1)
    assert_one_line_error(fmt(config, cluster_id=cluster_id), "--cluster-id", code=1)
    assert snapshot([*data, meta]) == {data[0]: None, meta: None}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "command"),
        (["format"], "--config"),
        (["format", "--config", "{config}"], "--cluster-id"),
        (["format", "--cluster-id", "c"], "--config"),
        (["format", "--config", "{config}", "--cluster-id", "c", "--bogus"], "--bogus"),
        (["format", "--config", "{config}", "--cluster-id"], "--cluster-id"),
        (["wipe", "--config", "{config}"], "wipe"),
        (["--ignore-formatted"], ""),
    ],
)
def test_bad_flags_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    data, meta, config = setup_dirs(tmp_path, 1)
    result = run_storage(*(a.replace("{config}", str(config)) for a in args))
    assert_one_line_error(result, needle, code=2)
    assert snapshot([*data, meta]) == {data[0]: None, meta: None}
