"""Ports for servers started later: distinct, free, outside `taken` and the ephemeral range."""

from __future__ import annotations

import socket

from jbod_runtime import listen_ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    start = listen_ports.ephemeral_start()
    ports = listen_ports.free_listen_ports(20)
    assert len(set(ports)) == 20
    assert all(listen_ports.LOWEST <= port < start for port in ports)
    for port in ports:
        with socket.create_server((listen_ports.LOOPBACK, port)):
            pass


def test_a_port_held_by_a_listener_or_named_as_taken_is_never_given() -> None:
    held = [socket.create_server((listen_ports.LOOPBACK, port)) for port in listen_ports.free_listen_ports(5)]
    try:
        busy = {sock.getsockname()[1] for sock in held}
        named = set(listen_ports.free_listen_ports(5))
        for _ in range(50):
            assert listen_ports.free_listen_port(taken=named) not in named
        assert not busy & set(listen_ports.free_listen_ports(200, taken=named))
    finally:
        for sock in held:
            sock.close()
