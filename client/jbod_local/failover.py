"""`jbodctl local kill-controller`: a crash of one controller, to try a quorum's failover (§3.8).

Guarantees:
* The controller killed (`kill -9`) is the one given, or the one that says it is active; a user
  mistake (no such node, not running, `--node` with one controller, no single active one) raises
  `LocalClusterError` before anything is killed.
* It returns once the controllers still running agree on an active one (another one if the
  active was killed), with the seconds that took from the kill; at once if none runs any more.
  The killed one stays down until `jbodctl local up` restarts it (it rejoins as a standby).
* cluster.json forgets the killed pid; the command holds the cluster directory's lock.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

from jbod_local import quorum
from jbod_local.processes import LocalClusterError
from jbod_local.quorum import ControllerNode
from jbod_local.supervisor import exclusive, read_layout, resolve_root, write_layout


@dataclass(frozen=True)
class ControllerKill:
    node: ControllerNode  # the one killed (with the pid it had)
    was_active: bool
    active: int | None  # the node the other controllers agree is active now (None: no other runs)
    seconds: float | None  # from the kill until they agreed on `active`


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
        if not node.alive() or node.pid is None:
            raise LocalClusterError(f"{node.label} is not running (start it with: jbodctl local up)")
        killed_at = time.monotonic()
        os.kill(node.pid, signal.SIGKILL)
        while node.alive() and time.monotonic() < killed_at + 5:
            time.sleep(0.01)
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
