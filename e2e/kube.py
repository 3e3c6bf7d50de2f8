"""A thin raw-JSON layer over the official `kubernetes` client, and a list+watch cache.

The harness works with plain dicts shaped like the API's JSON (camelCase), not the client's model
classes: every call here passes `_preload_content=False` and decodes the body itself, so it does not
depend on the client's model (de)serialisation. `Reflector` keeps an up-to-date copy of one
resource kind: it lists, then watches from the list's resourceVersion, and lists again after any
watch error (including 410 Gone); `on_change` is called after every change, from its thread.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("e2e.kube")

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def decode(resp: Any) -> Obj:
    """The JSON body of a `_preload_content=False` response."""
    data = resp.data
    return json.loads(data) if data else {}


class Kube:
    """API clients for one kubeconfig, returning raw dicts."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = 64  # one watch per reflector plus every pod worker
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.storage = client.StorageV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """Call a generated API method and return the decoded JSON body."""
        return decode(method(*args, _preload_content=False, **kwargs))

    def get_or_none(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj | None:
        try:
            return self.call(method, *args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def call_ignoring(
        self, statuses: tuple[int, ...], method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Obj | None:
        """`call`, returning None instead of raising for an ApiException whose status is in `statuses`
        (409 for "already exists", 404 for "already gone")."""
        try:
            return self.call(method, *args, **kwargs)
        except ApiException as exc:
            if exc.status in statuses:
                return None
            raise

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]


class Reflector:
    """A list+watch cache of one resource kind (`list_method` is e.g. `core.list_pod_for_all_namespaces`)."""

    def __init__(
        self,
        name: str,
        list_method: Callable[..., Any],
        *,
        on_change: Callable[[str, Obj], None] | None = None,
        watch_timeout_seconds: int = 15,
        **list_kwargs: Any,
    ) -> None:
        self.name = name
        self._list = list_method
        self._kwargs = list_kwargs
        self._on_change = on_change
        self._timeout = watch_timeout_seconds
        self._lock = threading.Lock()
        self._items: dict[Key, Obj] = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)

    def start(self) -> Reflector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._items.get((namespace, name))

    def _notify(self, kind: str, obj: Obj) -> None:
        if self._on_change is not None:
            try:
                self._on_change(kind, obj)
            except Exception:
                log.exception("Reflector %s: on_change failed", self.name)

    def _relist(self) -> str:
        body = decode(self._list(_preload_content=False, **self._kwargs))
        fresh = {key_of(o): o for o in body.get("items") or []}
        with self._lock:
            gone = [o for k, o in self._items.items() if k not in fresh]
            self._items = fresh
        self.synced.set()
        for o in gone:
            self._notify("DELETED", o)
        for o in fresh.values():
            self._notify("SYNC", o)
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self._list,
                    resource_version=rv,
                    timeout_seconds=self._timeout,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                    **self._kwargs,
                ):
                    if self._stop.is_set():
                        break
                    kind, obj = event["type"], event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if kind == "BOOKMARK":
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self._items.pop(key_of(obj), None)
                        else:
                            self._items[key_of(obj)] = obj
                    self._notify(kind, obj)
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("Reflector %s: watch failed (%s); relisting", self.name, exc.status)
                rv = ""
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("Reflector %s: watch broke (%s); relisting", self.name, exc)
                rv = ""
                time.sleep(0.5)
