"""Loopback ports for servers that are started later: picked outside the kernel's ephemeral range.

A port taken with `bind(("127.0.0.1", 0))` comes from the ephemeral range
(`net.ipv4.ip_local_port_range`, 32768 to 60999 by default), the same range every outgoing
connection's local port comes from. Between picking such a port and the server binding it, any
client socket on the machine may be given it as its local port, and the server then fails with
"address already in use" (seen in CI: a broker of a local cluster lost its port to a client of a
test running beside it).

Guarantees:
* `free_listen_ports(count, taken=...)` returns `count` distinct ports, none in `taken`, none in
  the ephemeral range when the range leaves room below it (ports 10000 up to its start), each free
  to listen on when returned (bound together with SO_REUSEADDR, as our servers bind, then
  released). Picks are random, so two processes picking at once rarely pick the same port.
* When there is no such room (an unusual `ip_local_port_range`), it falls back to ports the kernel
  hands out, as before.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterable
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST = 10000  # below this: well-known and registered services' usual ports
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
ATTEMPTS = 200


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_listen_ports(count: int, *, taken: Iterable[int] = ()) -> list[int]:
    """`count` distinct loopback ports free to listen on now, outside `taken` and the ephemeral
    range (see the module's guarantees)."""
    avoid = set(taken)
    top = ephemeral_start()
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        attempts = 0
        while len(ports) < count:
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            attempts += 1
            below = top - LOWEST > 10 * count and attempts <= ATTEMPTS
            candidate = random.randrange(LOWEST, top) if below else 0
            if candidate in avoid:
                continue
            try:
                sock.bind((LOOPBACK, candidate))
            except OSError:
                continue
            port: int = sock.getsockname()[1]
            if port in avoid:
                continue
            avoid.add(port)
            ports.append(port)
        return ports


def free_listen_port(*, taken: Iterable[int] = ()) -> int:
    """One port of `free_listen_ports`."""
    return free_listen_ports(1, taken=taken)[0]
