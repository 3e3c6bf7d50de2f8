"""The endpoint map: every pod port and Service port of the cluster as a `127.0.0.1:<port>` address.

All local pods share 127.0.0.1, so each (pod, containerPort) gets its own free local port, stable
for the pod's name (a StatefulSet pod recreated under the same name keeps its ports). From the pods
and Services this module derives:

* the map `{"<host>:<port>": "127.0.0.1:<allocated>"}` for every Kubernetes DNS form of a pod
  (`<hostname>.<subdomain>.<ns>.svc[.cluster.local]`) and of a Service
  (`<svc>.<ns>`, `<svc>.<ns>.svc[.cluster.local]`), Service ports resolved port → targetPort on the
  one backing pod (first Ready, else first Running, else first scheduled, by name);
* `Rewriter`, which rewrites a pod's strings (args, env values, config files) so that
  - its own listen addresses `0.0.0.0:<containerPort>`, `[::]:<containerPort>` and
    `://:<containerPort>` become `127.0.0.1:<allocated>`,
  - DNS names of pods and Services followed by `:<port>` (including the namespace-relative short
    forms `<svc>`, `<hostname>.<subdomain>`, `<svc>.<ns>`) become `127.0.0.1:<allocated>`,
  - in args and env only: a whole value equal to a containerPort (`8080`, `--port=8080`) becomes
    the allocated port, and any other `0.0.0.0` becomes `127.0.0.1` (nothing listens beyond
    loopback).

A host name *without* a port is not rewritten (there is no address to give it). Pure functions
except `PortAllocator.allocate` (binds a socket to find a free port) and `write_map_file`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

LOCALHOST = "127.0.0.1"
CLUSTER_DOMAIN = "cluster.local"

Obj = Mapping[str, Any]


class PortAllocator:
    """Hands out free 127.0.0.1 ports, one per `(namespace, pod name, containerPort)`, never reused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ports: dict[tuple[str, str, int], int] = {}
        self._used: set[int] = set()

    def allocate(self, namespace: str, pod: str, container_port: int) -> int:
        key = (namespace, pod, container_port)
        with self._lock:
            if key in self._ports:
                return self._ports[key]
            while True:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((LOCALHOST, 0))
                    port = int(s.getsockname()[1])
                if port not in self._used:
                    break
            self._used.add(port)
            self._ports[key] = port
            return port

    def lookup(self, namespace: str, pod: str, container_port: int) -> int | None:
        with self._lock:
            return self._ports.get((namespace, pod, container_port))


def container_ports(pod: Obj) -> dict[str, int]:
    """`{port name or str(number): containerPort}` over all containers (and init containers)."""
    out: dict[str, int] = {}
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for p in c.get("ports") or []:
            number = int(p["containerPort"])
            out[str(number)] = number
            if p.get("name"):
                out[p["name"]] = number
    return out


def allocate_pod_ports(alloc: PortAllocator, pod: Obj) -> dict[int, int]:
    """Allocate every containerPort of `pod`; return `{containerPort: local port}`."""
    meta = pod["metadata"]
    return {
        n: alloc.allocate(meta["namespace"], meta["name"], n)
        for n in sorted(set(container_ports(pod).values()))
    }


def _pod_rank(pod: Obj) -> tuple[int, str]:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    running = status.get("phase") == "Running"
    return (0 if ready else 1 if running else 2, pod["metadata"]["name"])


def _selects(selector: Mapping[str, str], pod: Obj) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@dataclasses.dataclass(frozen=True)
class Target:
    """One reachable address: the DNS host names (full and short forms) that lead to it."""

    namespace: str
    full_hosts: tuple[str, ...]  # valid from any namespace
    short_hosts: tuple[str, ...]  # valid only from `namespace`
    port: int  # the port a client names
    local_port: int  # the 127.0.0.1 port it reaches


def _dns_forms(base: str, namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    full = (f"{base}.{namespace}.svc.{CLUSTER_DOMAIN}", f"{base}.{namespace}.svc", f"{base}.{namespace}")
    return full, (base,)


def targets(pods: Iterable[Obj], services: Iterable[Obj], alloc: PortAllocator) -> list[Target]:
    """Every addressable pod and Service port (pods need `hostname` + `subdomain`)."""
    pods = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")
    ]
    out: list[Target] = []
    for pod in pods:
        spec, meta = pod["spec"], pod["metadata"]
        if not (spec.get("hostname") and spec.get("subdomain")):
            continue
        full, short = _dns_forms(f"{spec['hostname']}.{spec['subdomain']}", meta["namespace"])
        for number in sorted(set(container_ports(pod).values())):
            local = alloc.lookup(meta["namespace"], meta["name"], number)
            if local is not None:
                out.append(Target(meta["namespace"], full[:2], (*full[2:], *short), number, local))
    for svc in services:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ns = meta["namespace"]
        selector = spec.get("selector") or {}
        backing = sorted(
            (p for p in pods if p["metadata"]["namespace"] == ns and _selects(selector, p)), key=_pod_rank
        )
        if not backing:
            continue
        pod = backing[0]
        named = container_ports(pod)
        full, short = _dns_forms(meta["name"], ns)
        for sp in spec.get("ports") or []:
            target = sp.get("targetPort", sp["port"])
            target_port = named.get(str(target))
            if target_port is None and str(target).isdigit():
                target_port = int(target)
            if target_port is None:
                continue
            local = alloc.lookup(ns, pod["metadata"]["name"], target_port)
            if local is not None:
                out.append(Target(ns, full, short, int(sp["port"]), local))
    return out


def endpoint_map(all_targets: Iterable[Target]) -> dict[str, str]:
    """`{"<full host>:<port>": "127.0.0.1:<local>"}` (the file the operator reads)."""
    out: dict[str, str] = {}
    for t in all_targets:
        for host in t.full_hosts:
            out.setdefault(f"{host}:{t.port}", f"{LOCALHOST}:{t.local_port}")
    return dict(sorted(out.items()))


def write_map_file(path: Path, mapping: Mapping[str, str]) -> None:
    """Write the map atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(mapping, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


_HOST_CHARS = r"A-Za-z0-9.\-"


class Rewriter:
    """Rewrites one pod's strings; built from the pod's own port map and the cluster's targets."""

    def __init__(
        self, *, namespace: str, own_ports: Mapping[int, int], all_targets: Iterable[Target]
    ) -> None:
        self.own_ports = dict(own_ports)
        names: dict[str, str] = {}
        for t in all_targets:
            hosts = t.full_hosts + (t.short_hosts if t.namespace == namespace else ())
            for host in hosts:
                names.setdefault(f"{host}:{t.port}", f"{LOCALHOST}:{t.local_port}")
        self.names = names
        if names:
            alternatives = "|".join(re.escape(k) for k in sorted(names, key=len, reverse=True))
            self._names_re: re.Pattern[str] | None = re.compile(
                rf"(?<![{_HOST_CHARS}])({alternatives})(?![0-9])"
            )
        else:
            self._names_re = None
        self._listen_re = re.compile(r"(0\.0\.0\.0|\[::\]|(?<=://))\:(\d+)(?![0-9])")

    def _listen(self, m: re.Match[str]) -> str:
        port = int(m.group(2))
        if port in self.own_ports:
            return f"{LOCALHOST}:{self.own_ports[port]}"
        return m.group(0).replace("0.0.0.0", LOCALHOST).replace("[::]", LOCALHOST)

    def text(self, s: str) -> str:
        """Rewrite listen addresses and DNS names in free text (config files)."""
        s = self._listen_re.sub(self._listen, s)
        if self._names_re is not None:
            s = self._names_re.sub(lambda m: self.names[m.group(1)], s)
        return s

    def value(self, s: str) -> str:
        """Rewrite an arg or env value: `text`, then a bare port / `--flag=port`, then `0.0.0.0`."""
        s = self.text(s)
        m = re.fullmatch(r"(-{1,2}[\w.-]+=)?(\d+)", s)
        if m and int(m.group(2)) in self.own_ports:
            return f"{m.group(1) or ''}{self.own_ports[int(m.group(2))]}"
        return re.sub(r"(?<![0-9.])0\.0\.0\.0(?![0-9.])", LOCALHOST, s)
