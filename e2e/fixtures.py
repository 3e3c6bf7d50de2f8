"""pytest fixtures for e2e tests: the toolchain, one cluster per session, a namespace per test.

* `e2e_toolchain` (session): the built toolchain. If it is not built: with env `JBOD_E2E_REQUIRED`
  set (CI) it is built now (the first cold build takes long), otherwise the test is skipped.
* `e2e_cluster` (session): a started `e2e.cluster.Cluster` (3 nodes, StorageClass `jbod-e2e`,
  provisioner, local kubelet), after removing clusters left by killed runs (`cleanup_stale`);
  stopped and removed at the end of the session. Env
  `JBOD_E2E_KEEP=1` keeps its work directory (logs, volumes) for inspection.
* `e2e_namespace` (function): a fresh namespace `e2e-<random>` (its `default` ServiceAccount
  ready), deleted after the test (without waiting).

Load them with `pytest_plugins = ["e2e.fixtures"]` in the root conftest.py, or re-export them from a
conftest (`from e2e.fixtures import e2e_cluster, e2e_namespace, e2e_toolchain`); re-exports from
several conftests still share one cluster per process.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from e2e import toolchain
from e2e.cluster import Cluster, cleanup_stale


def _toolchain() -> toolchain.Toolchain:
    tc = toolchain.Toolchain.default()
    if tc.is_built():
        return tc
    if not os.environ.get("JBOD_E2E_REQUIRED"):
        pytest.skip(f"e2e toolchain not built (missing {', '.join(tc.missing())}); "
                    "run `python -m e2e.toolchain build` or set JBOD_E2E_REQUIRED=1")  # fmt: skip
    return toolchain.build(tc)


@pytest.fixture(scope="session")
def e2e_toolchain() -> toolchain.Toolchain:
    return _toolchain()


_shared: Cluster | None = None
_users = 0


@pytest.fixture(scope="session")
def e2e_cluster(e2e_toolchain: toolchain.Toolchain) -> Iterator[Cluster]:
    # One cluster per process even when several conftests re-export this fixture (each re-export
    # is its own session fixture to pytest): the last user stops it.
    global _shared, _users
    if os.geteuid() != 0:
        pytest.skip("the e2e kubelet needs root (mount namespaces, loop devices)")
    if _shared is None:
        cleanup_stale(tools=e2e_toolchain)
        _shared = Cluster(tools=e2e_toolchain, keep_workdir=bool(os.environ.get("JBOD_E2E_KEEP"))).start()
    _users += 1
    try:
        yield _shared
    finally:
        _users -= 1
        if _users == 0:
            cluster, _shared = _shared, None
            cluster.stop()


@pytest.fixture
def e2e_namespace(e2e_cluster: Cluster) -> Iterator[str]:
    name = e2e_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    with contextlib.suppress(Exception):
        e2e_cluster.kubectl("delete", "namespace", name, "--wait=false")


def pytest_configure(config: pytest.Config) -> None:
    """Registers the `e2e` marker when this module is loaded as a plugin (`pytest_plugins`)."""
    config.addinivalue_line("markers", "e2e: needs the e2e toolchain and a kwok cluster (root)")
