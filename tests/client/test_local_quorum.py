"""`jbodctl local up --controllers 3`, `local kill-controller`, `local kill-etcd` and failovers with real processes
(3 etcd members, 3 controllers, 3 brokers): nothing produced is lost, no broker is fenced, and
`local down` leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jbod_local import supervisor
from jbod_local.layout import STATE_FILE, read_layout
from tests.client.local_commands import JBODCTL, ok, run, status

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    if (path / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(path, grace=2)


def running(pid: int) -> bool:
    """A live process (a zombie has an empty command line)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def exports(root: Path) -> dict[str, str]:
    """What `eval "$(jbodctl local env)"` would export."""
    return dict(re.findall(r"^export (\w+)=(\S+)$", ok("env", "--dir", str(root)), flags=re.MULTILINE))


def jbodctl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    """`jbodctl ARGS` in a shell that ran `eval "$(jbodctl local env)"`; its stdout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JBOD_")}
    result = subprocess.run(
        [JBODCTL, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**clean, **env, "COLUMNS": "200"},
        timeout=90,
    )
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def brokers(env: dict[str, str]) -> dict[int, dict[str, Any]]:
    views: list[dict[str, Any]] = json.loads(jbodctl(env, "brokers", "-o", "json"))
    return {int(b["brokerId"]): b for b in views}


def roles(data: dict[str, Any]) -> dict[int, str]:
    return {c["nodeId"]: c["state"] for c in data["controllers"]}


def test_up_with_three_controllers_survives_kill_of_the_active_one(root: Path) -> None:
    out = ok("up", "--dir", str(root), "--controllers", "3", "--brokers", "3", "--disks", "1")
    assert "started etcd-0, etcd-1, etcd-2, controller 1, controller 2, controller 3, broker 1" in out
    assert f"jbodctl local kill-controller --dir {root}" in out
    env = exports(root)
    layout = read_layout(root)
    assert env["JBOD_CONTROLLER_URL"] == ",".join(c.url for c in layout.controllers)
    assert len(env["JBOD_CONTROLLER_URL"].split(",")) == 3
    assert env["JBOD_BOOTSTRAP"] == ",".join(b.url for b in layout.brokers)
    for broker in layout.brokers:  # every broker knows every controller
        assert f"controller.url={env['JBOD_CONTROLLER_URL']}\n" in broker.config_path.read_text()

    first = status(root)
    assert sorted(roles(first).values()) == ["active", "standby", "standby"]
    assert first["activeController"] in (1, 2, 3) and roles(first)[first["activeController"]] == "active"
    assert [(e["running"], e["healthy"]) for e in first["etcd"]] == [(True, True)] * 3
    table = ok("status", "--dir", str(root))
    assert len(re.findall(r"controller \d .* active ", table)) == 1
    assert len(re.findall(r"controller \d .* standby ", table)) == 2
    assert len(re.findall(r"etcd-\d .* healthy ", table)) == 3

    jbodctl(env, "topics", "create", "orders", "-p", "3", "-r", "3")
    before = [f"before-{i}" for i in range(30)]
    jbodctl(env, "produce", "orders", stdin="\n".join(before) + "\n")
    assert sorted(jbodctl(env, "consume", "orders", "--timeout", "2").split()) == sorted(before)
    epochs = {b: view["brokerEpoch"] for b, view in brokers(env).items()}
    assert sorted(epochs) == [1, 2, 3]

    killed = first["activeController"]
    killed_pid = next(c["pid"] for c in first["controllers"] if c["nodeId"] == killed)
    out = ok("kill-controller", "--dir", str(root))
    assert f"Killed controller {killed} (the active one) with SIGKILL (pid {killed_pid})" in out
    match = re.search(r"Controller (\d) is active now, ([0-9.]+) s after the kill", out)
    assert match, out
    active = int(match.group(1))
    assert active != killed and float(match.group(2)) < 15
    assert not running(killed_pid)
    after_kill = status(root)
    assert roles(after_kill)[killed] == "down" and roles(after_kill)[active] == "active"
    assert after_kill["activeController"] == active

    # Writes and reads go on through the list of controllers: produce, consume, create a topic.
    after = [f"after-{i}" for i in range(30)]
    jbodctl(env, "produce", "orders", stdin="\n".join(after) + "\n")
    jbodctl(env, "topics", "create", "later", "-p", "2", "-r", "3")
    assert sorted(jbodctl(env, "consume", "orders", "--timeout", "2").split()) == sorted(before + after)
    jbodctl(env, "produce", "later", "-v", "x")
    assert jbodctl(env, "consume", "later", "--timeout", "2").split() == ["x"]
    views = brokers(env)
    assert all(v["fenced"] is False for v in views.values()), views
    assert {b: v["brokerEpoch"] for b, v in views.items()} == epochs  # none had to register again

    # kill -9 of etcd's raft leader: the others elect one, the controllers keep an active one.
    bad = run("kill-etcd", "--dir", str(root), "--member", "etcd-7")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "no etcd member 'etcd-7': the members are etcd-0, etcd-1, etcd-2" in bad.stderr
    out = ok("kill-etcd", "--dir", str(root))
    match = re.search(r"Killed (etcd-\d) \(the raft leader\) with SIGKILL \(pid (\d+)\)", out)
    assert match, out
    member, member_pid = match.group(1), int(match.group(2))
    led = re.search(r"(etcd-\d) leads etcd now, controller (\d) is active, [0-9.]+ s after the kill", out)
    assert led and led.group(1) != member, out
    assert not running(member_pid)
    etcd_now = {e["name"]: (e["running"], e["healthy"]) for e in status(root)["etcd"]}
    assert etcd_now[member] == (False, False) and list(etcd_now.values()).count((True, True)) == 2
    more = [f"more-{i}" for i in range(30)]
    jbodctl(env, "produce", "orders", stdin="\n".join(more) + "\n")
    jbodctl(env, "topics", "create", "after-etcd", "-p", "1", "-r", "3")
    assert sorted(jbodctl(env, "consume", "orders", "--timeout", "2").split()) == sorted(
        before + after + more
    )
    assert all(v["fenced"] is False for v in brokers(env).values())
    again_bad = run("kill-etcd", "--dir", str(root), "--member", member)
    assert again_bad.returncode == 1 and f"{member} is not running" in again_bad.stderr

    # `up` restarts only what was killed (the etcd member, then the controller, on their ports):
    # the member rejoins etcd, the controller as a standby.
    out = ok("up", "--dir", str(root))
    assert f"started {member}, controller {killed};" in out, out
    assert all(e["healthy"] for e in status(root)["etcd"])
    again = status(root)
    assert roles(again) == {n: "active" if n == active else "standby" for n in (1, 2, 3)}
    assert read_layout(root).node(killed).port == layout.node(killed).port

    pids = [
        *(c["pid"] for c in again["controllers"]),
        *(e["pid"] for e in again["etcd"]),
        *(b["pid"] for b in again["brokers"]),
    ]
    assert len(pids) == 9 and all(running(p) for p in pids)
    out = ok("down", "--dir", str(root))
    assert (
        "Stopped broker 1, broker 2, broker 3, controller 1, controller 2, controller 3, "
        "etcd-0, etcd-1, etcd-2" in out
    )
    assert not any(running(p) for p in pids)
    state = json.loads((root / STATE_FILE).read_text())
    assert all(p["pid"] is None for p in (*state["controllers"], *state["etcd"], *state["brokers"]))


def test_controllers_must_be_1_3_or_5(tmp_path: Path) -> None:
    result = run("up", "--dir", str(tmp_path / "cluster"), "--controllers", "2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--controllers" in lines[0] and "1, 3 or 5" in lines[0], result.stderr
    assert not (tmp_path / "cluster").exists()


def test_kill_controller_with_one_controller_says_it_stays_down(root: Path) -> None:
    ok("up", "--dir", str(root), "--brokers", "1", "--disks", "1")
    pid = status(root)["controller"]["pid"]
    out = ok("kill-controller", "--dir", str(root))
    assert f"Killed the controller with SIGKILL (pid {pid})" in out
    assert "one controller: it is down until `jbodctl local up`" in out
    assert not running(pid) and not status(root)["controller"]["running"]
    result = run("kill-controller", "--dir", str(root))
    assert result.returncode == 1 and "the controller is not running" in result.stderr
    assert "started controller;" in ok("up", "--dir", str(root))
    refused = run("kill-etcd", "--dir", str(root))
    assert refused.returncode == 1 and "one controller and no etcd" in refused.stderr
