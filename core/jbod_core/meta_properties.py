"""`meta.properties`: the identity of a log directory (protocol §4.1).

Guarantees:
* `parse` / `render` are pure and round-trip: `parse(render(p)) == p`.
* `parse` accepts Java properties syntax (`#`/`!` comments, `=` or `:` separators, surrounding
  whitespace) and raises `MetaPropertiesError` naming the key for a missing or malformed value.
* Pure: text in, values out. Reading and (atomically) writing the file on disk is
  `jbod_runtime.durable_files` (`read_meta_properties`, `write_meta_properties`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jbod_core.ids import Uuid

FILE_NAME: Final = "meta.properties"
VERSION: Final = 1


class MetaPropertiesError(ValueError):
    """A `meta.properties` file that is missing a field or holds a malformed one."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: Uuid | None = None
    version: int = VERSION


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` lines into a dict (no multi-line continuations or escapes needed here)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            key, value = line, ""
        else:
            key, value = line[:cut].strip(), line[cut + 1 :].strip()
        values[key] = value
    return values


def parse(text: str) -> MetaProperties:
    values = parse_properties(text)
    version_text = values.get("version", "0")
    try:
        version = int(version_text)
    except ValueError as exc:
        raise MetaPropertiesError(f"Invalid meta.properties version string '{version_text}'") from exc
    if version != VERSION:
        raise MetaPropertiesError(f"Unknown meta.properties version number {version}")
    if "node.id" not in values:
        raise MetaPropertiesError("node.id was not found")
    try:
        node_id = int(values["node.id"])
    except ValueError as exc:
        raise MetaPropertiesError("Unable to read node.id as a base-10 number") from exc
    cluster_id = values.get("cluster.id", "")
    if not cluster_id:
        raise MetaPropertiesError("cluster.id was not found")
    directory_id: Uuid | None = None
    if values.get("directory.id"):
        try:
            directory_id = Uuid.parse(values["directory.id"])
        except ValueError as exc:
            raise MetaPropertiesError(f"Unable to read directory.id as a Uuid: {exc}") from exc
    return MetaProperties(cluster_id=cluster_id, node_id=node_id, directory_id=directory_id, version=version)


def render(props: MetaProperties) -> str:
    lines = [
        "#",
        "# Written by jbod-storage; do not edit",
        f"version={props.version}",
        f"cluster.id={props.cluster_id}",
        f"node.id={props.node_id}",
    ]
    if props.directory_id is not None:
        lines.append(f"directory.id={props.directory_id}")
    return "\n".join(lines) + "\n"
