"""`jbodctl local kill-controller` and `kill-etcd`: a crash of one controller, or of one etcd member
under a quorum, to try a quorum's failover (§3.8).

Guarantees of `kill_controller`:
* The controller killed (`kill -9`) is the one given, or the one that says it is active; a user
  mistake (no such node, not running, `--node` with one controller, no single active one) raises
  `LocalClusterError` before anything is killed.
* It returns once the controllers still running agree on an active one (another one if the
  active was killed), with the seconds that took from the kill; at once if none runs any more.
  The killed one stays down until `jbodctl local up` restarts it (it rejoins as a standby).
* cluster.json forgets the killed pid; the command holds the cluster directory's lock.

Guarantees of `kill_etcd`:
* Only a quorum has etcd: with one controller, an unknown member or one not running, it raises
  `LocalClusterError` before anything is killed. The member killed (`kill -9`) is the one named,
  or etcd's raft leader.
* It returns once the members still running have elected a raft leader and the running controllers
  agree on an active one, with the seconds that took from the kill; with `leader` None at once if
  the members left are no majority (etcd has lost its quorum: no controller can write until
  `jbodctl local up` restarts the killed ones). `up` restarts the member, which rejoins etcd.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

from jbod_local import quorum
from jbod_local.layout import exclusive, read_layout, resolve_root, write_layout
from jbod_local.processes import LocalClusterError
from jbod_local.quorum import ControllerNode, EtcdNode


@dataclass(frozen=True)
class ControllerKill:
    node: ControllerNode  # the one killed (with the pid it had)
    was_active: bool
    active: int | None  # the node the other controllers agree is active now (None: no other runs)
    seconds: float | None  # from the kill until they agreed on `active`


def _kill_9(node: ControllerNode | EtcdNode, label: str) -> float:
    """SIGKILL `node`'s process and wait (up to 5 s) until it is gone; when it was sent. A node that
    is not running is refused before anything is killed."""
    if not node.alive() or node.pid is None:
        raise LocalClusterError(f"{label} is not running (start it with: jbodctl local up)")
    killed_at = time.monotonic()
    os.kill(node.pid, signal.SIGKILL)
    while node.alive() and time.monotonic() < killed_at + 5:
        time.sleep(0.01)
    return killed_at


def kill_controller(root: Path, node_id: int | None = None, *, wait: float = 30.0) -> ControllerKill:
    """`kill -9` of a controller (default: the active one), then wait until the running ones agree
    on an active one; `LocalClusterError` if they do not within `wait` seconds."""
    root = read_layout(resolve_root(root)).root
    with exclusive(root):
        layout = read_layout(root)
        token = layout.admin_token()
        states = quorum.controller_states(layout.controllers, token) if layout.quorum else []
        if not layout.quorum:
            if node_id is not None:
                raise LocalClusterError(
                    "the local cluster has one controller, without a node id: drop --node"
                )
            node = layout.controllers[0]
            was_active = True
        elif node_id is None:
            active = [s.node for s in states if s.state == "active"]
            if len(active) != 1:
                shown = ", ".join(f"{s.node.node_id}: {s.state}" for s in states)
                raise LocalClusterError(
                    f"no single controller is active now ({shown}); pick one with --node N"
                )
            node, was_active = active[0], True
        else:
            node = layout.node(node_id)
            was_active = any(s.node.node_id == node_id and s.state == "active" for s in states)
        killed_at = _kill_9(node, node.label)
        layout = layout.with_controller(replace(node, pid=None))
        write_layout(layout)
        others = [c for c in layout.controllers if c.alive()]
        if not others:
            return ControllerKill(node, was_active, None, None)
        agreed = quorum.await_active(
            others, token, other_than=node.node_id if was_active else None, deadline=killed_at + wait
        )
        if agreed is None:
            raise LocalClusterError(
                f"killed {node.label} (pid {node.pid}), but the other controllers did not agree on an "
                f"active one within {wait:.0f} s; see {layout.logs_dir}"
            )
        return ControllerKill(node, was_active, agreed, time.monotonic() - killed_at)


@dataclass(frozen=True)
class EtcdKill:
    node: EtcdNode  # the member killed (with the pid it had)
    was_leader: bool  # etcd's raft leader when it was killed
    leader: str | None  # the raft leader among the members left (None: they are no majority)
    active: int | None  # the controller the running ones agree is active then
    seconds: float | None  # from the kill until both were so


def kill_etcd(root: Path, name: str | None = None, *, wait: float = 30.0) -> EtcdKill:
    """`kill -9` of an etcd member (default: the raft leader), then wait until the others elect a
    leader and the controllers agree on an active one; `LocalClusterError` if not within `wait`."""
    root = read_layout(resolve_root(root)).root
    with exclusive(root):
        layout = read_layout(root)
        if not layout.etcd:
            raise LocalClusterError(
                "the local cluster has one controller and no etcd (for one: jbodctl local up --fresh --controllers 3)"
            )
        members = list(layout.etcd)
        cluster = quorum.etcd_cluster(root, members)
        leader = cluster.leader()
        if name is None:
            if leader is None:
                raise LocalClusterError("etcd has no raft leader now; pick a member with --member NAME")
            index = leader
        else:
            known = [m.name for m in members]
            if name not in known:
                raise LocalClusterError(f"no etcd member {name!r}: the members are {', '.join(known)}")
            index = known.index(name)
        node = members[index]
        killed_at = _kill_9(node, node.name)
        members[index] = replace(node, pid=None)
        layout = replace(layout, etcd=tuple(members))
        write_layout(layout)
        left = [i for i, m in enumerate(members) if m.alive()]
        if len(left) < len(members) // 2 + 1:
            return EtcdKill(node, index == leader, None, None, None)
        deadline = killed_at + wait
        new_leader = cluster.leader()
        while new_leader is None and time.monotonic() < deadline:
            time.sleep(0.05)
            new_leader = cluster.leader()
        controllers = [c for c in layout.controllers if c.alive()]
        agreed = (
            quorum.await_active(controllers, layout.admin_token(), other_than=None, deadline=deadline)
            if controllers and new_leader is not None
            else None
        )
        if new_leader is None or (controllers and agreed is None):
            missing = "a raft leader" if new_leader is None else "an active controller"
            raise LocalClusterError(
                f"killed {node.name} (pid {node.pid}), but there was no {missing} within {wait:.0f} s; "
                f"see {layout.logs_dir}"
            )
        return EtcdKill(node, index == leader, members[new_leader].name, agreed, time.monotonic() - killed_at)
