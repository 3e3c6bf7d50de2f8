"""Unit tests of the harness's pure parts: the endpoint rewriting, pod-spec semantics, the toolchain's
staging pins and the atomic volume writer. No cluster, no root."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")  # the harness needs the `kubernetes` client

from e2e import endpoints, podspec, toolchain
from e2e.podworker import write_atomic_dir


def _pod(name: str, ns: str = "ns", *, labels: dict[str, str] | None = None, ports: list[int] = (),
         hostname: str = "", subdomain: str = "", phase: str = "Running", ready: bool = True) -> dict:  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {
            "nodeName": "node-0",
            "hostname": hostname,
            "subdomain": subdomain,
            "containers": [{"name": "c", "ports": [{"containerPort": p, "name": f"p{p}"} for p in ports]}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _svc(name: str, ns: str, selector: dict[str, str], ports: list[dict]) -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": selector, "ports": ports}}


def test_endpoint_map_covers_pod_and_service_dns_forms() -> None:
    alloc = endpoints.PortAllocator()
    broker = _pod("b-0", labels={"app": "b"}, ports=[9092], hostname="b-0", subdomain="brokers")
    web = _pod("web-x", labels={"app": "web"}, ports=[8080])
    for p in (broker, web):
        endpoints.allocate_pod_ports(alloc, p)
    svcs = [_svc("web", "ns", {"app": "web"}, [{"port": 80, "targetPort": "p8080"}])]
    mapping = endpoints.endpoint_map(endpoints.targets([broker, web], svcs, alloc))
    b = f"127.0.0.1:{alloc.lookup('ns', 'b-0', 9092)}"
    w = f"127.0.0.1:{alloc.lookup('ns', 'web-x', 8080)}"
    assert mapping["b-0.brokers.ns.svc:9092"] == b
    assert mapping["b-0.brokers.ns.svc.cluster.local:9092"] == b
    assert mapping["web.ns.svc:80"] == w
    assert mapping["web.ns.svc.cluster.local:80"] == w
    assert mapping["web.ns:80"] == w


def test_service_prefers_ready_pod() -> None:
    alloc = endpoints.PortAllocator()
    a = _pod("a", labels={"app": "x"}, ports=[1], ready=False)
    b = _pod("b", labels={"app": "x"}, ports=[1], ready=True)
    for p in (a, b):
        endpoints.allocate_pod_ports(alloc, p)
    mapping = endpoints.endpoint_map(
        endpoints.targets([a, b], [_svc("x", "ns", {"app": "x"}, [{"port": 1}])], alloc)
    )
    assert mapping["x.ns.svc:1"] == f"127.0.0.1:{alloc.lookup('ns', 'b', 1)}"


def test_rewriter_rewrites_listen_addresses_names_and_ports() -> None:
    alloc = endpoints.PortAllocator()
    broker = _pod("b-0", labels={"app": "b"}, ports=[9092], hostname="b-0", subdomain="brokers")
    own = endpoints.allocate_pod_ports(alloc, broker)
    targets = endpoints.targets(
        [broker], [_svc("ctl", "ns", {"app": "b"}, [{"port": 80, "targetPort": 9092}])], alloc
    )
    r = endpoints.Rewriter(namespace="ns", own_ports=own, all_targets=targets)
    local = f"127.0.0.1:{own[9092]}"
    assert r.text("listeners=http://0.0.0.0:9092") == f"listeners=http://{local}"
    assert r.text("listeners=http://:9092") == f"listeners=http://{local}"
    assert r.text("x=[::]:9092,y") == f"x={local},y"
    assert r.text("voters=http://b-0.brokers.ns.svc:9092/x") == f"voters=http://{local}/x"
    assert r.text("b-0.brokers:9092 ctl:80 ctl.ns.svc.cluster.local:80") == f"{local} {local} {local}"
    assert r.text("notb-0.brokers:9092 ctl:8080") == "notb-0.brokers:9092 ctl:8080"
    assert r.value("9092") == str(own[9092])
    assert r.value("--port=9092") == f"--port={own[9092]}"
    assert r.value("0.0.0.0") == "127.0.0.1"
    assert r.value("9093") == "9093"
    other_ns = endpoints.Rewriter(namespace="other", own_ports={}, all_targets=targets)
    assert other_ns.text("ctl:80") == "ctl:80"
    assert other_ns.text("ctl.ns.svc:80") == local


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert podspec.expand("$(A)-$(B)-$(C)-$$(A)", env) == "1-two-$(C)-$(A)"


def test_container_env_and_command_line() -> None:
    pod = _pod("p-0", ports=[8080])
    pod["spec"]["nodeName"] = "node-1"
    container = {
        "name": "c",
        "command": ["serve", "--listen=0.0.0.0:8080"],
        "args": ["--name=$(POD)", "--secret=$(PASS)"],
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
            {"name": "BOTH", "value": "$(POD)@$(NODE)"},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
        ],
    }
    objects = {
        ("ConfigMap", "cm"): {"data": {"x": "1"}},
        ("Secret", "s"): {"data": {"pw": base64.b64encode(b"hunter2").decode()}},
    }
    lookup = lambda kind, ns, name: objects.get((kind, name))  # noqa: E731
    alloc = endpoints.PortAllocator()
    own = endpoints.allocate_pod_ports(alloc, pod)
    r = endpoints.Rewriter(namespace="ns", own_ports=own, all_targets=[])
    env = podspec.container_env(pod, container, lookup=lookup, rewriter=r)
    assert env == {"CM_x": "1", "POD": "p-0", "NODE": "node-1", "IP": "127.0.0.1", "PASS": "hunter2",
                   "BOTH": "p-0@node-1"}  # fmt: skip
    argv = podspec.command_line(container, env, rewriter=r, entrypoints={})
    assert argv == ["serve", f"--listen=127.0.0.1:{own[8080]}", "--name=p-0", "--secret=hunter2"]
    container["env"].append({"name": "M", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}})
    with pytest.raises(podspec.MissingRefError):
        podspec.container_env(pod, container, lookup=lookup, rewriter=r)


def test_entrypoint_from_image_when_no_command() -> None:
    r = endpoints.Rewriter(namespace="ns", own_ports={}, all_targets=[])
    c = {"name": "agent", "image": "registry.example/jbod/jbod:0.1.0", "args": ["run"]}
    assert podspec.command_line(
        c, {}, rewriter=r, entrypoints={"registry.example/jbod/jbod": ["jbod-agent"]}
    ) == [
        "jbod-agent",
        "run",
    ]
    assert podspec.command_line(c, {}, rewriter=r, entrypoints={"jbod": ["x"]}) == ["x", "run"]


def test_volume_files_items_modes_and_rewrite() -> None:
    pod = _pod("p", ports=[8080])
    vol = {
        "name": "v",
        "configMap": {"name": "cm", "items": [{"key": "a", "path": "dir/a.conf", "mode": 0o600}]},
    }
    lookup = lambda kind, ns, name: {"data": {"a": "listen=0.0.0.0:8080", "b": "x"}}  # noqa: E731
    alloc = endpoints.PortAllocator()
    own = endpoints.allocate_pod_ports(alloc, pod)
    r = endpoints.Rewriter(namespace="ns", own_ports=own, all_targets=[])
    files = podspec.volume_files(pod, vol, lookup=lookup, rewriter=r)
    assert files == {"dir/a.conf": (f"listen=127.0.0.1:{own[8080]}".encode(), 0o600)}


def test_atomic_dir_swaps_data(tmp_path: Path) -> None:
    write_atomic_dir(tmp_path, {"a": (b"1", 0o644), "d/b": (b"2", 0o600)})
    assert (tmp_path / "a").read_text() == "1" and (tmp_path / "d" / "b").read_text() == "2"
    first = (tmp_path / "..data").resolve()
    write_atomic_dir(tmp_path, {"a": (b"1", 0o644), "d/b": (b"2", 0o600)})
    assert (tmp_path / "..data").resolve() == first  # unchanged content: no swap
    write_atomic_dir(tmp_path, {"a": (b"3", 0o644)})
    assert (tmp_path / "a").read_text() == "3"
    assert not (tmp_path / "d").exists()
    assert not first.exists()


def test_staging_replaces_only_required_staging_modules() -> None:
    mod = """module k8s.io/kubernetes
require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tgithub.com/x/y v1.0.0
)
replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
)
"""
    assert toolchain.staging_replaces(mod, "v1.36.3") == {
        "k8s.io/api": "v0.36.3",
        "k8s.io/client-go": "v0.36.3",
    }
