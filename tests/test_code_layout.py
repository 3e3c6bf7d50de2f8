"""The product's code is where its names say (issue 21): one meaning per class name, docstrings
that name only modules that exist, and the shared runtime outside the client packages."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = (
    "core",
    "kafka",
    "runtime",
    "client",
    "local",
    "cli",
    "controller",
    "agent",
    "operator",
    "pipeline",
)


def _packages() -> dict[str, Path]:
    """Every product package (`jbod_*`) by name, with its directory."""
    found = {}
    for root in SOURCE_ROOTS:
        for directory in sorted((ROOT / root).glob("jbod_*")):
            if directory.is_dir():
                found[directory.name] = directory
    return found


def _modules(package: Path) -> list[Path]:
    """The modules of `package` and of its subpackages, but the agent's Kafka listener (`kafka/`),
    which this check has never covered (two of its modules define a `PartitionAnswer` each)."""
    return sorted(p for p in package.rglob("*.py") if "kafka" not in p.relative_to(package).parts[:-1])


def _public_classes(package: Path) -> dict[str, list[str]]:
    """Public class names defined at any depth of `package`'s modules → the modules defining them."""
    names: dict[str, list[str]] = defaultdict(list)
    for path in _modules(package):
        module = ".".join((package.name, *path.relative_to(package).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names[node.name].append(module)
    return names


def test_no_two_modules_of_a_package_define_one_class_name() -> None:
    clashes = {
        name: modules
        for package in _packages().values()
        for name, modules in _public_classes(package).items()
        if len(modules) > 1
    }
    assert clashes == {}


def test_no_package_reuses_a_class_name_of_the_core() -> None:
    packages = _packages()
    core = _public_classes(packages["jbod_core"])
    clashes = {
        name: [*core[name], *modules]
        for package_name, package in packages.items()
        if package_name != "jbod_core"
        for name, modules in _public_classes(package).items()
        if name in core
    }
    assert clashes == {}


def test_package_docstrings_name_only_modules_that_exist() -> None:
    """An `__init__.py` (of a package or a subpackage) that lists modules in backquotes lists real
    ones: modules or subpackages of its own package or of a package above it."""
    missing = []
    for package in _packages().values():
        for init in sorted(package.rglob("__init__.py")):
            here = init.parent
            places = [here, *[p for p in here.parents if p.is_relative_to(package)]]
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            for name in re.findall(r"`([a-z_]+)`", doc):
                if name != package.name and not any(
                    (place / f"{name}.py").exists() or (place / name / "__init__.py").exists()
                    for place in places
                ):
                    missing.append(f"{here.relative_to(package.parent)}: `{name}`")
    assert missing == []


def test_each_source_root_holds_the_one_package_of_its_layer() -> None:
    """A source root per layer (issue 30): the folders show the layering `lint-imports` checks."""
    held = {root: sorted(p.name for p in (ROOT / root).glob("jbod_*") if p.is_dir()) for root in SOURCE_ROOTS}
    assert held == {root: [f"jbod_{root}"] for root in SOURCE_ROOTS}


def test_the_client_packages_hold_no_runtime_or_server_code() -> None:
    """Server plumbing and file durability are `jbod_runtime`'s, not the clients'."""
    runtime_modules = {p.stem for p in (ROOT / "runtime" / "jbod_runtime").glob("*.py")}
    for root in ("client", "local", "cli"):
        package = ROOT / root / f"jbod_{root}"
        assert runtime_modules.isdisjoint(p.stem for p in package.glob("*.py")), package.name
