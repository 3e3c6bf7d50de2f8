"""What to do next after `jbodctl` could not reach its cluster: one clause appended to the error line.

The common cause is a shell that never ran `eval "$(jbodctl local env)"`: jbodctl then has no
token, or talks to the default URL while a local cluster listens on another port.

Guarantees:
* `for_error` answers only for a missing token or a connection that could not be made (refused,
  no route) to a controller, a broker's HTTP API or a broker's Kafka listener; any other error
  (timeout, HTTP error, protocol error) gets no hint (None).
* A hint is one line and names a command to run, or the flag and environment variable to set.
* The local cluster is looked for where `jbodctl local env` looks (`local_dir`, from `--dir`'s
  default or `JBOD_LOCAL_DIR`) and is called running only if its controller process is alive.
  Reading it never fails: a damaged or unreadable state counts as no local cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from jbod_client.broker import BrokerUnreachableError
from jbod_client.controller import DEFAULT_URL, ClientError, ControllerUnreachableError
from jbod_client.kafka_errors import KafkaUnreachableError
from jbod_local.layout import (
    STATE_FILE,
    ClusterLayout,
    broker_alive,
    controller_alive,
    read_layout,
    resolve_root,
)
from jbod_local.processes import LocalClusterError

LOCAL_ENV = 'eval "$(jbodctl local env)"'
CONTROLLER_URL_SOURCES = "--controller URL or JBOD_CONTROLLER_URL"


class MissingTokenError(ClientError):
    """No token file was given (neither `--token-file` nor `JBOD_TOKEN_FILE`)."""


@dataclass(frozen=True)
class FailedConnection:
    """A connection that could not be made: to which kind of peer, and its `scheme://host:port`
    (a Kafka listener's: `host:port`)."""

    peer: Literal["controller", "broker"]
    url: str


def failed_connection(exc: BaseException) -> FailedConnection | None:
    """The refused (or unroutable) connection behind `exc`, found along its cause chain: a
    `ControllerUnreachableError` or `BrokerUnreachableError` caused by `httpx.ConnectError`, or a
    `KafkaUnreachableError` of one listener caused by a refused connection (`ConnectionError`)."""
    peer: Literal["controller", "broker"] | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (
            peer is None
            and isinstance(current, KafkaUnreachableError)
            and current.address is not None
            and isinstance(current.__cause__, ConnectionError)
        ):
            return FailedConnection(peer="broker", url=current.address)
        if peer is None and isinstance(current, ControllerUnreachableError):
            peer = "controller"
        elif peer is None and isinstance(current, BrokerUnreachableError):
            peer = "broker"
        elif peer is not None and isinstance(current, httpx.ConnectError):
            try:
                url = current.request.url
            except RuntimeError:  # an error raised without its request
                return None
            return FailedConnection(peer=peer, url=f"{url.scheme}://{url.netloc.decode('ascii')}")
        current = current.__cause__ or current.__context__
    return None


def _shown(path: Path, cwd: Path) -> str:
    """`path` relative to `cwd` when it lies below it (`.jbod-local`), else as it is."""
    relative = os.path.relpath(path, cwd)
    return str(path) if relative.startswith("..") else relative


def _local_layout(local_dir: Path, cwd: Path) -> ClusterLayout | None:
    root = resolve_root(cwd / local_dir)
    if not (root / STATE_FILE).is_file():
        return None
    try:
        return read_layout(root)
    except LocalClusterError:
        return None


def for_error(exc: BaseException, *, local_dir: Path, cwd: Path) -> str | None:
    """One clause saying what to do about `exc`, or None when there is nothing to add.

    * no token, or no connection, while a local cluster runs in `local_dir` (and the URL tried is
      not its own): `a local cluster is running here: eval "$(jbodctl local env)"`;
    * no connection to the local cluster's own controller or broker while that process is down:
      `[broker N of ]the local cluster in DIR is not running (start it with: jbodctl local up)`;
    * no connection to a controller, and no local cluster: the flag and variable that set its URL
      (and the URL tried, unless the error names it).
    """
    missing_token = isinstance(exc, MissingTokenError)
    failed = None if missing_token else failed_connection(exc)
    if not missing_token and failed is None:
        return None
    layout = _local_layout(local_dir, cwd)
    if layout is not None:
        running = controller_alive(layout)
        where = f"the local cluster in {_shown(layout.root, cwd)}"
        own = {
            c.url: (where if c.node_id is None else f"{c.name} of {where}", c.alive())
            for c in layout.controllers
        } | {
            url: (f"broker {b.broker_id} of {where}", broker_alive(b))
            for b in layout.brokers
            for url in (b.url, b.kafka_address)
        }
        if failed is not None and failed.url in own:
            process, alive = own[failed.url]
            return None if alive else f"{process} is not running (start it with: jbodctl local up)"
        if running:
            return f"a local cluster is running here: {LOCAL_ENV}"
    if failed is not None and failed.peer == "controller":
        tried = "" if failed.url in str(exc) else f"tried {failed.url}; "
        default = failed.url == DEFAULT_URL
        if not default:
            return f"{tried}set the controller's URL with {CONTROLLER_URL_SOURCES}"
        return (
            f"{tried}that is the default URL: set another with {CONTROLLER_URL_SOURCES}, "
            "or start a local cluster: jbodctl local up"
        )
    return None
