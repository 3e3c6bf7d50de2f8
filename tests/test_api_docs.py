"""docs/api.md stays in step with the code: every route the controller's and the broker's aiohttp
apps register, every error code (with its number) and every topic config (with its range and
default) is listed; and the docs link to it instead of a contract file outside the repository."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web

from jbod_agent.lifecycle.http_api import AgentApi
from jbod_controller.http_api import ControllerApi
from jbod_core import broker_configs
from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import SessionError
from jbod_core.topic_configs import BROKER_SETTINGS, DEFINITIONS

ROOT = Path(__file__).resolve().parents[1]
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def _routes(app: web.Application) -> set[tuple[str, str]]:
    return {
        (r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD" and r.resource
    }


def controller_routes() -> set[tuple[str, str]]:
    # The app's routing table only; no service runs (the handlers are never called).
    api = object.__new__(ControllerApi)
    api.metrics = SimpleNamespace(request_seconds=SimpleNamespace(labels=lambda **_: None))  # type: ignore[assignment]
    return _routes(api.app())


def broker_routes() -> set[tuple[str, str]]:
    api = object.__new__(AgentApi)
    api.config = SimpleNamespace(socket_request_max_bytes=1024**2, message_max_bytes=1024**2)  # type: ignore[assignment]
    return _routes(api.app())


@pytest.mark.parametrize("routes", [controller_routes, broker_routes], ids=["controller", "broker"])
def test_every_route_is_documented(routes: object) -> None:
    found = routes()  # type: ignore[operator]
    assert found
    for method, path in sorted(found):
        assert re.search(rf"`{method} {re.escape(path)}[`?]", API), f"{method} {path} is not in docs/api.md"


def _error_rows() -> dict[int, str]:
    section = API.split("## Error codes", 1)[1].split("\n## ", 1)[0]
    return {
        int(code): name for code, name in re.findall(r"^\| (-?\d+) \| ([A-Z_]+) \|", section, re.MULTILINE)
    }


def test_the_error_table_matches_the_error_codes() -> None:
    expected = {int(c): c.name for c in ErrorCode} | {int(c): c.name for c in SessionError}
    assert _error_rows() == expected


def test_the_topic_config_table_matches_the_definitions() -> None:
    section = API.split("## Topic configs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(
        r"^\| `([a-z0-9.]+)` \| (\w+) \| ([^|]+) \| ([^|]+) \| (yes|stored) \| ([^|]+) \|$",
        section,
        re.MULTILINE,
    )
    assert [r[0] for r in rows] == [d.name for d in DEFINITIONS]
    settings = {s.topic_key: s for s in BROKER_SETTINGS}
    for (name, kind, _rule, default, applied, doc), definition in zip(rows, DEFINITIONS, strict=True):
        assert kind == definition.type
        setting = settings.get(name)
        if setting is not None:
            assert default == f"broker `{setting.broker_key}` ({setting.default})"
        else:
            assert default == (f"`{definition.default}`" if definition.default else "empty")
        assert applied == ("yes" if definition.applied else "stored")
        assert doc.strip() == definition.doc.split(". ")[0].rstrip(".")


def test_the_broker_config_table_lists_the_honoured_keys() -> None:
    section = API.split("## Broker configs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(
        r"^\| `([a-z0-9.]+)` \| (\w+) \| ([^|]+) \| (yes|no) \| ([^|]+) \|$", section, re.MULTILINE
    )
    assert [r[0] for r in rows] == sorted(broker_configs.HONOURED_KEYS)
    for name, kind, default, dynamic, _effect in rows:
        key = broker_configs.KEYS[name]
        assert kind == key.type, name
        assert default.strip() == (
            f"`{key.default}`" if key.default else "empty" if key.default == "" else "none"
        )
        assert (dynamic == "yes") == key.dynamic, name


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "docs/decisions.md"])
def test_docs_link_to_the_api_reference_not_outside_the_repository(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "shared/spec/protocol.md" not in text
    assert "api.md" in text
