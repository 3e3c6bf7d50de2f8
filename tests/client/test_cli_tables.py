"""`jbodctl` tables in an 80-column terminal (issue 12): short ids never cut or folded, paths
relative to the directory holding them, errors one line each; `--wide` and `-o json` whole.

Real processes: a local cluster (`jbodctl local up`, 2 brokers with 2 log dirs each) with a topic
and one failed disk, and jbodctl run against it with COLUMNS=80 (rich honours it). The last tests
render `jbod_cli.tables` directly for cases a real cluster does not produce on demand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from jbod_cli import tables
from jbod_local.layout import STATE_FILE

JBODCTL = str(Path(sys.executable).parent / "jbodctl")
ID_CHAR = r"[A-Za-z0-9_-]"


def jbodctl(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JBOD_")}
    result = subprocess.run(
        [JBODCTL, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, "COLUMNS": "80", **(env or {})},
        timeout=120,
    )
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """(working directory holding `.jbod-local`, the environment `jbodctl local env` exports)."""
    cwd = tmp_path_factory.mktemp("tables")
    try:
        jbodctl(cwd, "local", "up", "--brokers", "2", "--disks", "2")
        exports = jbodctl(cwd, "local", "env")
        env = dict(re.findall(r"^export (\w+)=(\S+)$", exports, flags=re.MULTILINE))
        jbodctl(cwd, "topics", "create", "orders", "-p", "3", "-r", "2", env=env)
        jbodctl(cwd, "local", "fail-disk", "2", "1")
        yield cwd, env
    finally:
        if (cwd / ".jbod-local" / STATE_FILE).exists():
            subprocess.run(
                [JBODCTL, "local", "down", "--grace", "5"], cwd=cwd, capture_output=True, timeout=120
            )


def whole_token(text: str, token: str) -> bool:
    """`token` occurs in `text` not as part of a longer id, and not cut with an ellipsis."""
    return re.search(rf"(?<!{ID_CHAR}){re.escape(token)}(?!{ID_CHAR}|…)", text) is not None


def fits(output: str) -> None:
    too_long = [line for line in output.splitlines() if len(line) > 80]
    assert not too_long, "\n".join(too_long)


def test_tables_fit_80_columns_with_short_ids_relative_paths_and_one_line_errors(
    cluster: tuple[Path, dict[str, str]],
) -> None:
    cwd, env = cluster
    brokers: list[dict[str, Any]] = json.loads(jbodctl(cwd, "brokers", "-o", "json", env=env))
    dir_ids = [d for b in brokers for d in (*b["logDirs"], *b["offlineLogDirs"])]
    assert len(dir_ids) == 4 and len(brokers[1]["offlineLogDirs"]) == 1
    topic = json.loads(jbodctl(cwd, "topics", "describe", "orders", "-o", "json", env=env))
    log_dirs: dict[str, list[dict[str, Any]]] = json.loads(jbodctl(cwd, "log-dirs", "-o", "json", env=env))
    failed = next(d for d in log_dirs["2"] if d["state"] == "offline")
    assert failed["path"].endswith("/.jbod-local/broker-2/disk-1") and failed["error"]

    shown = {
        "brokers": jbodctl(cwd, "brokers", env=env),
        "log-dirs": jbodctl(cwd, "log-dirs", env=env),
        "describe": jbodctl(cwd, "topics", "describe", "orders", env=env),
        "list": jbodctl(cwd, "topics", "list", env=env),
    }
    for output in shown.values():
        fits(output)
    for directory in dir_ids:
        for name in ("brokers", "log-dirs"):
            assert whole_token(shown[name], directory[:8]), f"{directory} in {name}:\n{shown[name]}"
            assert directory not in shown[name]
    for directory in {d for p in topic["partitions"] for d in p["directories"]}:
        assert whole_token(shown["describe"], directory[:8]), shown["describe"]
    assert whole_token(shown["list"], topic["topicId"][:8]), shown["list"]

    lines = shown["log-dirs"].splitlines()
    for broker_id in (1, 2):
        assert any(
            line.startswith(f"Broker {broker_id} log dirs in .jbod-local/broker-{broker_id}/")
            for line in lines
        )
    assert sum(1 for line in lines if re.match(r"│ disk-[12] +│", line)) == 4, shown["log-dirs"]
    assert any(line.rstrip() == f"disk-1: {failed['error']}" for line in lines), shown["log-dirs"]


def test_wide_and_json_show_everything_whole(cluster: tuple[Path, dict[str, str]]) -> None:
    cwd, env = cluster
    brokers: list[dict[str, Any]] = json.loads(jbodctl(cwd, "brokers", "-o", "json", env=env))
    dir_ids = [d for b in brokers for d in (*b["logDirs"], *b["offlineLogDirs"])]
    log_dirs: dict[str, list[dict[str, Any]]] = json.loads(jbodctl(cwd, "log-dirs", "-o", "json", env=env))
    assert sorted(d["directoryId"] for dirs in log_dirs.values() for d in dirs) == sorted(dir_ids)
    topic = json.loads(jbodctl(cwd, "topics", "describe", "orders", "-o", "json", env=env))

    wide_brokers = jbodctl(cwd, "brokers", "--wide", env=env)
    wide_log_dirs = jbodctl(cwd, "log-dirs", "--wide", env=env)
    wide_topic = jbodctl(cwd, "topics", "describe", "orders", "--wide", env=env)
    for directory in dir_ids:
        assert whole_token(wide_brokers, directory) and whole_token(wide_log_dirs, directory)
    for directory in {d for p in topic["partitions"] for d in p["directories"]}:
        assert whole_token(wide_topic, directory)
    for dirs in log_dirs.values():
        for d in dirs:
            assert d["path"] in wide_log_dirs
            if d["error"]:
                assert f"{d['path']}: {d['error']}" in wide_log_dirs
    for b in brokers:
        for listener in b["listeners"]:
            assert f"{listener['name']}://{listener['host']}:{listener['port']}" in wide_brokers


def test_short_ids_grow_until_unique_within_the_table() -> None:
    ids = ["abcdefghXXXXXXXXXXXXXX", "abcdefghiYYYYYYYYYYYYY", "zzzzzzzzzzzzzzzzzzzzzz"]
    assert tables.short_ids(ids) == {i: i[:9] for i in ids}
    assert tables.short_ids(ids[2:]) == {ids[2]: "zzzzzzzz"}
    assert tables.short_ids(ids, wide=True) == {i: i for i in ids}
    assert tables.short_ids(["AAAAAAAAAAAAAAAAAAAAAA"]) == {}  # UNASSIGNED is shown by name


def test_a_long_error_is_one_line_cut_with_an_ellipsis() -> None:
    error = "EIO: Input/output error: " + "/var/lib/kafka/data-1/orders-17/" * 5
    dirs = [
        {"path": "/var/lib/kafka/data-0", "directoryId": "ERERERERERERERERERERQQ", "state": "online"},
        {
            "path": "/var/lib/kafka/data-1",
            "directoryId": "IiIiIiIiIiIiIiIiIiIiIg",
            "state": "offline",
            "error": error,
        },
    ]
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(tables.log_dirs_table(3, dirs))
    lines = console.export_text().splitlines()
    fits("\n".join(lines))
    assert lines[0].rstrip() == "Broker 3 log dirs in /var/lib/kafka/"
    assert [line for line in lines if "EIO" in line] == [
        next(line for line in lines if line.startswith("data-1: EIO"))
    ]
    assert next(line for line in lines if "EIO" in line).rstrip().endswith("…")


def test_a_cordoned_dir_says_so_in_its_row() -> None:
    dirs = [
        {"path": "/var/lib/kafka/data-0", "directoryId": "ERERERERERERERERERERQQ", "state": "online"},
        {
            "path": "/var/lib/kafka/data-1",
            "directoryId": "IiIiIiIiIiIiIiIiIiIiIg",
            "state": "online",
            "cordoned": True,
        },
        {
            "path": "/var/lib/kafka/data-2",
            "directoryId": "MzMzMzMzMzMzMzMzMzMzMw",
            "state": "online",
            "cordoned": True,
            "spaceCordoned": True,
        },
    ]
    console = Console(width=100, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(tables.log_dirs_table(3, dirs))
    lines = console.export_text().splitlines()
    assert "cordoned" in next(line for line in lines if "directory id" in line)
    rows = {line.split()[1]: line.split() for line in lines if line.lstrip("│ ").startswith("data-")}
    assert "yes" in rows["data-1"] and "yes" not in rows["data-0"]
    assert "space" in rows["data-2"]  # cordoned for its used space (log.dir.cordon.threshold)


def test_transactions_table_shows_open_transactions_their_lso_lag_and_old_ones() -> None:
    from jbod_cli import transactions_cli
    from jbod_client.open_transactions import OpenTransaction, PartitionTransactions

    now = 10_000_000
    quiet = PartitionTransactions("t", 0, 1, high_watermark=10, last_stable_offset=10)
    held = PartitionTransactions(
        "t",
        1,
        2,
        high_watermark=200,
        last_stable_offset=120,
        open=(
            OpenTransaction(7, 0, 3, start_offset=120, last_timestamp_ms=now - 600_000),
            OpenTransaction(9, 1, 3, start_offset=150, last_timestamp_ms=now - 2_000),
        ),
    )
    failed = PartitionTransactions("t", 2, 3, error="cannot reach the Kafka listener at x:1")
    rows = transactions_cli.shown([quiet, held, failed], everything=False)
    assert rows == [held, failed]  # a partition with nothing open is left out, a failed one kept
    assert held.lso_lag == 80 and quiet.lso_lag == 0 and failed.lso_lag is None
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(transactions_cli.transactions_table(rows, now_ms=now, older_than_ms=60_000))
    text = console.export_text()
    assert "7: 120, 10m00s ago (old)" in text
    assert "9: 150, 2s ago" in text and "9: 150, 2s ago (old)" not in text
    assert " 80 " in text and "x:1" not in text  # the failure goes under the table, not in it
