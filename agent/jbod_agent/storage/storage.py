"""Log directory identity: `jbod-storage format` and the agent's startup loading (protocol §4.1).

Observe, decide, act: `inspect` reads each dir (I/O), `plan_format` / `plan_load` decide (pure),
`apply_format` / `load` write what was decided.

Guarantees:
* Every empty dir gets its own fresh directory id, never reserved, never equal to another id of
  this broker; `meta.properties` is written atomically.
* A dir formatted for another cluster or node is an error naming the dir and both ids; two dirs
  with the same directory id are an error naming both dirs; a dir already formatted is an error
  without `ignore_formatted`.
* An unreadable dir is reported and skipped by format; at startup an unreadable data dir starts
  offline while an unreadable metadata dir refuses to start; an unformatted dir refuses to start
  unless formatting on start is configured.
"""

from __future__ import annotations

import enum
import errno
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jbod_core import meta_properties
from jbod_core.ids import Uuid, random_uuid
from jbod_core.meta_properties import MetaProperties
from jbod_runtime import durable_files


class StorageError(Exception):
    """A storage problem that stops the command or the agent; one line for the user."""


class DirKind(enum.Enum):
    EMPTY = "empty"  # no meta.properties (the dir may not exist yet)
    FORMATTED = "formatted"
    ERROR = "error"  # unreadable or malformed


@dataclass(frozen=True, slots=True)
class DirState:
    path: Path
    kind: DirKind
    props: MetaProperties | None = None
    error: str | None = None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        name = errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.strerror or exc}{f' ({name})' if name else ''}"
    return str(exc)


def inspect(path: Path) -> DirState:
    """Classify one dir by reading its `meta.properties`."""
    try:
        props = durable_files.read_meta_properties(path)
    except FileNotFoundError:
        if path.exists() and not path.is_dir():
            return DirState(path=path, kind=DirKind.ERROR, error="not a directory")
        return DirState(path=path, kind=DirKind.EMPTY)
    except NotADirectoryError:
        return DirState(path=path, kind=DirKind.ERROR, error="not a directory")
    except (OSError, ValueError) as exc:
        return DirState(path=path, kind=DirKind.ERROR, error=_describe(exc))
    return DirState(path=path, kind=DirKind.FORMATTED, props=props)


def _check_identity(states: Sequence[DirState], *, cluster_id: str | None, node_id: int) -> str:
    """The cluster id all formatted dirs agree on (or `cluster_id`); StorageError naming a mismatch."""
    expected = cluster_id
    owner: Path | None = None
    seen: dict[Uuid, Path] = {}
    for state in states:
        if state.kind is not DirKind.FORMATTED or state.props is None:
            continue
        props = state.props
        if expected is None:
            expected, owner = props.cluster_id, state.path
        if props.cluster_id != expected:
            source = f"{owner}" if owner is not None else "the requested cluster"
            raise StorageError(
                f"{state.path} belongs to cluster {props.cluster_id}, but {source} is cluster {expected}"
            )
        if props.node_id != node_id:
            raise StorageError(f"{state.path} belongs to node {props.node_id}, but this is node {node_id}")
        if props.directory_id is not None:
            if props.directory_id.is_reserved:
                raise StorageError(f"{state.path} has the reserved directory id {props.directory_id}")
            other = seen.get(props.directory_id)
            if other is not None:
                raise StorageError(f"duplicate directory id {props.directory_id} in {other} and {state.path}")
            seen[props.directory_id] = state.path
    if expected is None:
        raise StorageError("no cluster id: no dir is formatted and none was given")
    return expected


# -- format ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FormatPlan:
    writes: tuple[tuple[Path, MetaProperties], ...]
    skipped: tuple[DirState, ...]  # unreadable dirs, reported and left alone
    kept: tuple[Path, ...]  # already formatted dirs (with ignore_formatted)


def plan_format(
    states: Sequence[DirState], *, cluster_id: str, node_id: int, ignore_formatted: bool, rng: random.Random
) -> FormatPlan:
    _check_identity(states, cluster_id=cluster_id, node_id=node_id)
    formatted = [s for s in states if s.kind is DirKind.FORMATTED]
    if formatted and not ignore_formatted:
        raise StorageError(
            f"log directory {formatted[0].path} is already formatted; use --ignore-formatted to keep "
            "formatted directories and format the others"
        )
    empty = [s for s in states if s.kind is DirKind.EMPTY]
    if not empty and not formatted:
        raise StorageError("no usable log directory to format")
    taken: set[Uuid] = {s.props.directory_id for s in formatted if s.props and s.props.directory_id}
    writes = []
    for state in empty:
        directory_id = random_uuid(rng, avoid=taken)
        taken.add(directory_id)
        writes.append(
            (state.path, MetaProperties(cluster_id=cluster_id, node_id=node_id, directory_id=directory_id))
        )
    return FormatPlan(
        writes=tuple(writes),
        skipped=tuple(s for s in states if s.kind is DirKind.ERROR),
        kept=tuple(s.path for s in formatted),
    )


def apply_format(plan: FormatPlan) -> list[tuple[Path, str]]:
    """Write the planned files; returns (path, error) for each dir that could not be written."""
    failures = []
    for path, props in plan.writes:
        try:
            path.mkdir(parents=True, exist_ok=True)
            durable_files.write_meta_properties(path, props)
        except OSError as exc:
            failures.append((path, _describe(exc)))
    return failures


# -- startup loading -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedDir:
    path: Path
    directory_id: Uuid
    device: int  # st_dev at load: the probe checks the path is still the same mount


@dataclass(frozen=True, slots=True)
class LoadedStorage:
    cluster_id: str
    online: tuple[LoadedDir, ...]
    offline: tuple[tuple[Path, str], ...]  # unreadable at startup: (path, reason)
    metadata_dir: LoadedDir
    rewritten: tuple[Path, ...] = field(default=())  # dirs that got a generated directory.id


@dataclass(frozen=True, slots=True)
class LoadPlan:
    cluster_id: str
    data_dirs: tuple[Path, ...]
    offline: tuple[tuple[Path, str], ...]
    writes: tuple[tuple[Path, MetaProperties], ...]  # generated ids and formats on start
    ids: dict[Path, Uuid]


def plan_load(  # noqa: PLR0913  the broker config's storage settings (dirs, node.id, log.dirs.format.on.start, cluster id) and the id generator
    data: Sequence[DirState],
    metadata: DirState,
    *,
    node_id: int,
    format_on_start: bool,
    cluster_id: str | None,
    rng: random.Random,
) -> LoadPlan:
    if metadata.kind is DirKind.ERROR:
        raise StorageError(f"metadata log dir {metadata.path} is unreadable: {metadata.error}")
    states = [*data, metadata]
    unformatted = [s for s in states if s.kind is DirKind.EMPTY]
    if unformatted and not format_on_start:
        raise StorageError(
            f"{unformatted[0].path} is not formatted (no meta.properties); run jbod-storage format "
            "or set log.dirs.format.on.start=true"
        )
    expected = _check_identity(states, cluster_id=cluster_id, node_id=node_id)
    taken = {s.props.directory_id for s in states if s.props and s.props.directory_id}
    writes = []
    ids: dict[Path, Uuid] = {}
    for state in states:
        if state.kind is DirKind.ERROR:
            continue
        if state.props is not None and state.props.directory_id is not None:
            ids[state.path] = state.props.directory_id
            continue
        directory_id = random_uuid(rng, avoid=taken)
        taken.add(directory_id)
        ids[state.path] = directory_id
        writes.append(
            (state.path, MetaProperties(cluster_id=expected, node_id=node_id, directory_id=directory_id))
        )
    offline = tuple((s.path, s.error or "unreadable") for s in data if s.kind is DirKind.ERROR)
    online = tuple(s.path for s in data if s.kind is not DirKind.ERROR)
    if not online:
        raise StorageError("no usable log dir: every dir in log.dirs is unreadable")
    return LoadPlan(cluster_id=expected, data_dirs=online, offline=offline, writes=tuple(writes), ids=ids)


def load(  # noqa: PLR0913  the broker config's storage settings (dirs, node.id, log.dirs.format.on.start, cluster id) and the id generator
    log_dirs: Sequence[Path],
    metadata_dir: Path,
    *,
    node_id: int,
    format_on_start: bool = False,
    cluster_id: str | None = None,
    rng: random.Random | None = None,
) -> LoadedStorage:
    """Inspect, decide and write; `StorageError` when the agent must not start."""
    plan = plan_load(
        [inspect(p) for p in log_dirs],
        inspect(metadata_dir),
        node_id=node_id,
        format_on_start=format_on_start,
        cluster_id=cluster_id,
        rng=rng or random.SystemRandom(),
    )
    offline = list(plan.offline)
    failed: set[Path] = set()
    for path, props in plan.writes:
        try:
            path.mkdir(parents=True, exist_ok=True)
            durable_files.write_meta_properties(path, props)
        except OSError as exc:
            if path == metadata_dir:
                raise StorageError(
                    f"cannot write {path / meta_properties.FILE_NAME}: {_describe(exc)}"
                ) from exc
            offline.append((path, f"cannot write meta.properties: {_describe(exc)}"))
            failed.add(path)
    online = []
    for path in plan.data_dirs:
        if path in failed:
            continue
        try:
            device = os.stat(path).st_dev
        except OSError as exc:
            offline.append((path, _describe(exc)))
            continue
        online.append(LoadedDir(path=path, directory_id=plan.ids[path], device=device))
    if not online:
        raise StorageError("no usable log dir: every dir in log.dirs is unreadable")
    try:
        metadata_device = os.stat(metadata_dir).st_dev
    except OSError as exc:
        raise StorageError(f"metadata log dir {metadata_dir} is unreadable: {_describe(exc)}") from exc
    return LoadedStorage(
        cluster_id=plan.cluster_id,
        online=tuple(online),
        offline=tuple(offline),
        metadata_dir=LoadedDir(
            path=metadata_dir, directory_id=plan.ids[metadata_dir], device=metadata_device
        ),
        rewritten=tuple(path for path, _ in plan.writes if path not in failed),
    )
