"""A shell that never ran `eval "$(jbodctl local env)"` (issue 12): the one-line error says so.

Real processes: a local cluster started by `jbodctl local up` in the working directory (its
default `.jbod-local`), and jbodctl run there without the JBOD_* variables, or pointed at a
loopback port that is bound but never listens (connections to it are refused at once)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jbod_local.layout import STATE_FILE, broker_alive, read_layout

JBODCTL = str(Path(sys.executable).parent / "jbodctl")
HINT = 'a local cluster is running here: eval "$(jbodctl local env)"'


def jbodctl(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JBOD_")}
    return subprocess.run(
        [JBODCTL, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, "COLUMNS": "200", **(env or {})},
        timeout=120,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jbodctl: error: "), result.stderr
    return lines[0]


def local_env(cwd: Path) -> dict[str, str]:
    """What `eval "$(jbodctl local env)"` would export."""
    result = jbodctl("local", "env", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"^export (\w+)=(\S+)$", result.stdout, flags=re.MULTILINE))


@pytest.fixture
def dead_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    """A working directory with a local cluster of one broker in `.jbod-local`."""
    up = jbodctl("local", "up", "--brokers", "1", "--disks", "1", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield tmp_path
    finally:
        if (tmp_path / ".jbod-local" / STATE_FILE).exists():
            down = jbodctl("local", "down", "--grace", "5", cwd=tmp_path)
            assert down.returncode == 0, down.stderr


def test_a_forgotten_eval_is_named_in_the_error(cwd: Path, dead_url: str) -> None:
    # Nothing exported at all: the first thing missing is the token.
    no_token = one_line_error(jbodctl("topics", "list", cwd=cwd))
    assert "no token" in no_token and no_token.endswith(HINT), no_token

    # A token file from elsewhere and a URL that refuses: controller and data-plane commands.
    token = cwd / "other.token"
    token.write_text("other\n")
    stale = {"JBOD_TOKEN_FILE": str(token), "JBOD_CONTROLLER_URL": dead_url}
    for args in (("topics", "list"), ("log-dirs",), ("produce", "orders", "--value", "x")):
        refused = one_line_error(jbodctl(*args, cwd=cwd, env=stale))
        assert f"cannot reach the controller at {dead_url}" in refused, refused
        assert refused.endswith(HINT), refused

    # After the eval, the same command works.
    listed = jbodctl("topics", "list", "-o", "json", cwd=cwd, env=local_env(cwd))
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr


def test_a_stopped_local_process_is_named(cwd: Path) -> None:
    env = local_env(cwd)
    layout = read_layout(cwd / ".jbod-local")
    broker_pid = layout.brokers[0].pid
    assert broker_pid is not None
    os.kill(broker_pid, signal.SIGTERM)  # the broker this test's `local up` started
    deadline = time.monotonic() + 30
    while broker_alive(layout.brokers[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    broker_down = one_line_error(jbodctl("log-dirs", cwd=cwd, env=env))
    assert f"cannot reach the Kafka listener at {layout.brokers[0].kafka_address}" in broker_down, broker_down
    assert broker_down.endswith(
        "broker 1 of the local cluster in .jbod-local is not running (start it with: jbodctl local up)"
    ), broker_down
    # librdkafka's clients too: the listener refused the connection, the broker is named.
    kafka = {**env, "KAFKA_BOOTSTRAP_SERVERS": layout.brokers[0].kafka_address}
    produce_down = one_line_error(jbodctl("produce", "orders", "--value", "x", cwd=cwd, env=kafka))
    assert "refused the connection" in produce_down, produce_down
    assert produce_down.endswith(
        "broker 1 of the local cluster in .jbod-local is not running (start it with: jbodctl local up)"
    ), produce_down

    assert jbodctl("local", "down", "--grace", "5", cwd=cwd).returncode == 0
    controller_down = one_line_error(jbodctl("topics", "list", cwd=cwd, env=env))
    assert f"cannot reach the controller at {layout.controller_url}" in controller_down
    assert controller_down.endswith(
        "the local cluster in .jbod-local is not running (start it with: jbodctl local up)"
    ), controller_down


def test_without_a_local_cluster_the_error_says_how_to_set_the_url(tmp_path: Path, dead_url: str) -> None:
    token = tmp_path / "admin.token"
    token.write_text("anything\n")
    for args in (("--controller", dead_url, "topics", "list"), ("--controller", dead_url, "log-dirs")):
        refused = one_line_error(jbodctl(*args, cwd=tmp_path, env={"JBOD_TOKEN_FILE": str(token)}))
        assert f"cannot reach the controller at {dead_url}" in refused, refused
        assert refused.endswith("set the controller's URL with --controller URL or JBOD_CONTROLLER_URL")
        assert "local cluster is running" not in refused
    no_token = one_line_error(jbodctl("topics", "list", cwd=tmp_path))
    assert no_token == "jbodctl: error: no token: pass --token-file FILE or set JBOD_TOKEN_FILE"
