"""Pure pod-spec semantics the local kubelet needs: env, `$(VAR)` expansion, command lines, volume files.

Nothing here does I/O: objects come in as API-shaped dicts and references are resolved through a
`Lookup` (`lookup(kind, namespace, name)` with kind `ConfigMap`, `Secret` or `ServiceAccountToken`).
A missing non-optional reference raises `MissingRefError` (the kubelet then keeps the pod waiting, as a
real kubelet reports CreateContainerConfigError). Every value handed to a process goes through the
pod's `endpoints.Rewriter` (`value` for args and env, `text` for config files).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

from e2e.endpoints import Rewriter

Obj = Mapping[str, Any]
Lookup = Callable[[str, str, str], Any]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class MissingRefError(Exception):
    """A referenced ConfigMap/Secret (or key) does not exist and is not optional."""


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(s: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined vars are replaced, `$$` escapes, others stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, s)


def field_ref(pod: Obj, path: str, *, for_env: bool) -> str:
    """A downward-API fieldRef value. In env, `status.podIP`/`status.hostIP` are 127.0.0.1 (all pods
    share loopback); in files they are the API's values."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "".join(f'{k}="{v}"\n' for k, v in items)
    if path in ("status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs") and for_env:
        return "127.0.0.1"
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    return str(simple.get(path) or "")


def resource_field_ref(container: Obj | None, ref: Obj) -> str:
    res = (container or {}).get("resources") or {}
    kind, _, name = ref["resource"].partition(".")
    value = (res.get(kind) or {}).get(name) or (res.get("requests") or {}).get(name) or "0"
    return str(value)


def _ref_data(lookup: Lookup, kind: str, namespace: str, ref: Obj) -> dict[str, bytes] | None:
    obj = lookup(kind, namespace, ref["name"])
    if obj is None:
        if ref.get("optional"):
            return None
        raise MissingRefError(f"{kind} {namespace}/{ref['name']} not found")
    out: dict[str, bytes] = {}
    if kind == "Secret":
        for key, b64 in (obj.get("data") or {}).items():
            out[key] = base64.b64decode(b64)
        for key, text in (obj.get("stringData") or {}).items():
            out[key] = text.encode()
    else:
        for key, text in (obj.get("data") or {}).items():
            out[key] = text.encode()
        for key, b64 in (obj.get("binaryData") or {}).items():
            out[key] = base64.b64decode(b64)
    return out


def _key(data: dict[str, bytes] | None, ref: Obj, what: str) -> str | None:
    if data is None:
        return None
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise MissingRefError(f"{what} {ref['name']} has no key {ref['key']}")
    return data[ref["key"]].decode(errors="replace")


def container_env(pod: Obj, container: Obj, *, lookup: Lookup, rewriter: Rewriter) -> dict[str, str]:
    """The container's environment as Kubernetes builds it: envFrom, then env in order (each value
    expanded against the entries before it), every value rewritten for loopback."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if field in src:
                data = _ref_data(lookup, kind, ns, src[field]) or {}
                for key, raw in data.items():
                    if re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", prefix + key):
                        env[prefix + key] = rewriter.value(raw.decode(errors="replace"))
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = rewriter.value(expand(var.get("value", ""), env))
            continue
        src = var["valueFrom"]
        value: str | None
        if "fieldRef" in src:
            value = field_ref(pod, src["fieldRef"]["fieldPath"], for_env=True)
        elif "resourceFieldRef" in src:
            value = resource_field_ref(container, src["resourceFieldRef"])
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            value = _key(_ref_data(lookup, "ConfigMap", ns, ref), ref, "ConfigMap")
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            value = _key(_ref_data(lookup, "Secret", ns, ref), ref, "Secret")
        else:
            value = None
        if value is not None:
            env[name] = rewriter.value(value)
    return env


def command_line(
    container: Obj, env: Mapping[str, str], *, rewriter: Rewriter, entrypoints: Mapping[str, list[str]]
) -> list[str]:
    """`command + args`, `$(VAR)`-expanded and rewritten; with no `command`, the image's entrypoint
    from `entrypoints` (keyed by image repository without tag), else `args` alone."""
    command = list(container.get("command") or [])
    if not command:
        image = str(container.get("image", ""))
        repo = image.split("@", 1)[0]
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rsplit(":", 1)[0]
        command = list(entrypoints.get(repo) or entrypoints.get(repo.rsplit("/", 1)[-1]) or [])
    argv = [*command, *(container.get("args") or [])]
    if not argv:
        raise MissingRefError(
            f"container {container['name']} has no command and image {container.get('image')} "
            "has no known entrypoint"
        )
    return [rewriter.value(expand(a, env)) for a in argv]


Files = dict[str, tuple[bytes, int]]  # relative path -> (content, mode)


def _items(
    data: dict[str, bytes], items: list[Obj] | None, default_mode: int, what: str, optional: bool
) -> Files:
    if not items:
        return {key: (raw, default_mode) for key, raw in data.items()}
    out: Files = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise MissingRefError(f"{what} has no key {item['key']}")
        out[item["path"]] = (data[item["key"]], int(item.get("mode", default_mode)))
    return out


def _rewrite(files: Files, rewriter: Rewriter) -> Files:
    out: Files = {}
    for path, (raw, mode) in files.items():
        try:
            out[path] = (rewriter.text(raw.decode()).encode(), mode)
        except UnicodeDecodeError:
            out[path] = (raw, mode)
    return out


def _downward_files(pod: Obj, items: list[Obj], default_mode: int) -> Files:
    containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
    out: Files = {}
    for item in items:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"], for_env=False)
        else:
            ref = item["resourceFieldRef"]
            value = resource_field_ref(containers.get(ref.get("containerName", "")), ref)
        out[item["path"]] = (value.encode(), int(item.get("mode", default_mode)))
    return out


def volume_files(pod: Obj, volume: Obj, *, lookup: Lookup, rewriter: Rewriter) -> Files | None:
    """The files of a configMap, secret, downwardAPI or projected volume (None for other kinds)."""
    ns = pod["metadata"]["namespace"]
    if "configMap" in volume or "secret" in volume:
        kind, field = ("ConfigMap", "configMap") if "configMap" in volume else ("Secret", "secret")
        src = volume[field]
        ref = {"name": src.get("name") or src.get("secretName"), "optional": src.get("optional", False)}
        data = _ref_data(lookup, kind, ns, ref)
        mode = int(src.get("defaultMode", 0o644))
        files = _items(data or {}, src.get("items"), mode, f"{kind} {ref['name']}", bool(src.get("optional")))
        return _rewrite(files, rewriter)
    if "downwardAPI" in volume:
        src = volume["downwardAPI"]
        return _downward_files(pod, src.get("items") or [], int(src.get("defaultMode", 0o644)))
    if "projected" in volume:
        src = volume["projected"]
        mode = int(src.get("defaultMode", 0o644))
        out: Files = {}
        for source in src.get("sources") or []:
            if "configMap" in source or "secret" in source:
                kind, field = ("ConfigMap", "configMap") if "configMap" in source else ("Secret", "secret")
                s = source[field]
                data = _ref_data(lookup, kind, ns, {"name": s["name"], "optional": s.get("optional", False)})
                out.update(
                    _rewrite(
                        _items(
                            data or {}, s.get("items"), mode, f"{kind} {s['name']}", bool(s.get("optional"))
                        ),
                        rewriter,
                    )
                )
            elif "downwardAPI" in source:
                out.update(_downward_files(pod, source["downwardAPI"].get("items") or [], mode))
            elif "serviceAccountToken" in source:
                s = source["serviceAccountToken"]
                token = lookup(
                    "ServiceAccountToken", ns, (pod.get("spec") or {}).get("serviceAccountName") or "default"
                )
                if token is None:
                    raise MissingRefError("service account token not available")
                out[s["path"]] = (str(token).encode(), mode)
        return out
    return None
