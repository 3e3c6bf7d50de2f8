"""Kafka's client quotas (KIP-13, KIP-55, KIP-546, KIP-599): entities, validation, the order in
which a connection's quota is found, DescribeClientQuotas' filters, and the sampled rate whose
excess becomes a throttle time.

Guarantees:
* An entity is a tuple of (entity type, name) pairs sorted by type; a None name is the default
  entity (`<default>`, a null name in the protocol). The entity types are `user`, `client-id`
  and `ip`; `user`, `client-id`, `user`+`client-id` and `ip` alone are the valid combinations.
* `entity_problem` / `op_problem` refuse as Kafka 4.3.1's controller does, each with
  INVALID_REQUEST: an empty entity, an unknown or repeated entity type, `ip` with another
  type, an `ip` name that is not an address; a key the entity cannot take, a non-positive
  value, a fractional value of a whole-number key (`producer_byte_rate`, `consumer_byte_rate`,
  `connection_creation_rate`).
* `alter_client_quotas` answers one result per entry, in order; an entry refused changes
  nothing, the others are written as one `ClientQuotaRecord` per key that changes (a removal of
  a key not set, or a value set again, writes nothing); `validate_only` writes nothing.
* `resolve` finds the quota of a (user, client-id) connection in KIP-55's order: user+client-id,
  user+default client-id, user, default user+client-id, default user+default client-id, default
  user, client-id, default client-id; the first entity that sets the key decides, and its
  level gives the `SensorKey` the connection shares its rate with (all clients of a user share a
  user-level quota; one client-id's connections share a client-level quota).
* `ip_connection_rate` is KIP-612's quota of an address: its own `ip` entity's
  `connection_creation_rate`, else the default `ip` entity's, else None (unlimited).
* `filter_problem` / `matches` are DescribeClientQuotas' filter: each component's entity type
  must be in the entity, matched EXACT (that name), DEFAULT (the default entity) or ANY; strict
  filters also need the entity to have no other type.
* `SampledRate` is Kafka's windowed rate: `window_num` samples of `window_s` seconds; the rate is
  the samples' sum over the time since the oldest kept sample, but never over less than
  `window_num - 1` whole windows; samples older than `window_num` windows are dropped. Its
  `throttle_ms` is how long a client must stay idle for the rate to fall back to the quota,
  `(rate - quota) / quota * window`, bounded by `window_num * window_s`. Once nothing was
  recorded for more than `window_num * window_s` seconds it is `obsolete`: every sample has
  expired, so it measures as a new rate would and its owner may drop it.
* Pure: time is a parameter (monotonic seconds); no clock, no I/O.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple, TypeAlias

from jbod_core import records
from jbod_core.errors import ErrorCode

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"
# The keys of a user / client-id entity, and whether each takes whole numbers only.
CLIENT_KEYS: Final[Mapping[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS: Final[Mapping[str, bool]] = {CONNECTION_CREATION_RATE: True}

# DescribeClientQuotas' match types (Kafka's ClientQuotaFilterComponent).
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_ANY: Final = 2

Entity: TypeAlias = tuple[tuple[str, str | None], ...]
Problem: TypeAlias = tuple[ErrorCode, str]


def entity(components: Iterable[tuple[str, str | None]]) -> Entity:
    """The canonical entity of (type, name) pairs: sorted by type."""
    return tuple(sorted(components, key=lambda c: c[0]))


def describe_entity(value: Entity) -> str:
    """`user=u, client-id=<default>`: how messages and logs name an entity."""
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in value)


def entity_problem(components: Sequence[tuple[str, str | None]]) -> Problem | None:
    """Why an AlterClientQuotas entity cannot be used (module guarantees), or None."""
    if not components:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"
    kinds = [kind for kind, _name in components]
    for kind in kinds:
        if kind not in ENTITY_TYPES:
            return ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}"
    if len(set(kinds)) != len(kinds):
        return ErrorCode.INVALID_REQUEST, "Duplicate entity type in client quota entity"
    if IP in kinds and len(kinds) > 1:
        return (
            ErrorCode.INVALID_REQUEST,
            "Invalid quota entity combination, IP quota should not be used with user or client-id",
        )
    for kind, name in components:
        if kind == IP and name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return ErrorCode.INVALID_REQUEST, f"{name} is not a valid IP or resolvable host."
    return None


def _keys_of(value: Entity) -> Mapping[str, bool]:
    return IP_KEYS if any(kind == IP for kind, _name in value) else CLIENT_KEYS


def op_problem(value: Entity, key: str, number: float | None, *, remove: bool) -> Problem | None:
    """Why one quota op cannot apply to a valid entity (module guarantees), or None."""
    keys = _keys_of(value)
    if key not in keys:
        return ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}"
    if remove:
        return None
    if number is None or not math.isfinite(number) or number <= 0:
        return ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0"
    if keys[key] and number != math.floor(number):
        return ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value."
    return None


# -- AlterClientQuotas -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float | None  # None with `remove`
    remove: bool = False


@dataclass(frozen=True, slots=True)
class AlterEntry:
    entity: tuple[tuple[str, str | None], ...]  # as the request gives it (not yet canonical)
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class AlterResult:
    entity: tuple[tuple[str, str | None], ...]  # as the request gave it
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


def _entry_problem(entry: AlterEntry) -> Problem | None:
    problem = entity_problem(entry.entity)
    if problem is not None:
        return problem
    value = entity(entry.entity)
    keys = [op.key for op in entry.ops]
    if len(set(keys)) != len(keys):
        return ErrorCode.INVALID_REQUEST, "Duplicate quota key in one entity"
    for op in entry.ops:
        problem = op_problem(value, op.key, op.value, remove=op.remove)
        if problem is not None:
            return problem
    return None


def alter_client_quotas(
    quotas: Mapping[Entity, Mapping[str, float]],
    entries: Sequence[AlterEntry],
    *,
    validate_only: bool = False,
) -> tuple[list[records.Record], list[AlterResult]]:
    """AlterClientQuotas against the quotas set (`ClusterImage.client_quotas`)."""
    produced: list[records.Record] = []
    results: list[AlterResult] = []
    pending: dict[Entity, dict[str, float]] = {}  # the effect of earlier entries of this request
    for entry in entries:
        problem = _entry_problem(entry)
        if problem is not None:
            results.append(AlterResult(entry.entity, problem[0], problem[1]))
            continue
        results.append(AlterResult(entry.entity))
        value = entity(entry.entity)
        current = pending.setdefault(value, dict(quotas.get(value, {})))
        for op in entry.ops:
            if op.remove:
                if op.key not in current:
                    continue
                del current[op.key]
                number = 0.0
            else:
                assert op.value is not None  # checked by op_problem
                if current.get(op.key) == op.value:
                    continue
                current[op.key] = number = float(op.value)
            produced.append(
                records.ClientQuotaRecord(entity=value, key=op.key, value=number, remove=op.remove)
            )
    return ([] if validate_only else produced), results


# -- which quota applies (KIP-55) ------------------------------------------------------------


class SensorKey(NamedTuple):
    """Whose rate a request counts toward (Kafka's quota metric tags): "" where the quota's level
    does not name that part."""

    user: str
    client_id: str


@dataclass(frozen=True, slots=True)
class AppliedQuota:
    quota: float  # the bound: bytes/s, percent, or partition mutations/s
    sensor: SensorKey
    entity: Entity  # the entity that set it


def resolve(
    quotas: Mapping[Entity, Mapping[str, float]], key: str, *, user: str, client_id: str
) -> AppliedQuota | None:
    """The quota `key` of a connection of `user` with `client_id` (KIP-55's order), or None."""
    both = SensorKey(user, client_id)
    user_only = SensorKey(user, "")
    client_only = SensorKey("", client_id)
    order: tuple[tuple[Entity, SensorKey], ...] = (
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), user_only),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), user_only),
        (((CLIENT_ID, client_id),), client_only),
        (((CLIENT_ID, None),), client_only),
    )
    for candidate, sensor in order:
        found = quotas.get(candidate)
        if found is not None and key in found:
            return AppliedQuota(found[key], sensor, candidate)
    return None


def ip_connection_rate(quotas: Mapping[Entity, Mapping[str, float]], address: str) -> float | None:
    """The connections per second `address` may open (KIP-612), or None without a quota. Names
    compare as addresses (`::1` and `0:0::1` are one entity)."""
    wanted = _address(address)
    default: float | None = None
    for value, keys in quotas.items():
        if len(value) != 1 or value[0][0] != IP or CONNECTION_CREATION_RATE not in keys:
            continue
        name = value[0][1]
        if name is None:
            default = keys[CONNECTION_CREATION_RATE]
        elif wanted is not None and _address(name) == wanted:
            return keys[CONNECTION_CREATION_RATE]
    return default


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


# -- DescribeClientQuotas --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int  # MATCH_EXACT, MATCH_DEFAULT or MATCH_ANY
    match: str | None = None


def filter_problem(components: Sequence[FilterComponent]) -> Problem | None:
    """Why a DescribeClientQuotas filter cannot be used, or None."""
    kinds = [c.entity_type for c in components]
    for component in components:
        if component.entity_type not in ENTITY_TYPES:
            return ErrorCode.INVALID_REQUEST, f"Custom entity type {component.entity_type} not supported"
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}"
        if component.match_type == MATCH_EXACT and component.match is None:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Entity name of an EXACT {component.entity_type} component must not be null",
            )
    if len(set(kinds)) != len(kinds):
        return ErrorCode.INVALID_REQUEST, "Duplicate entity type in the filter"
    if IP in kinds and len(kinds) > 1:
        return (
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.",
        )
    return None


def matches(value: Entity, components: Sequence[FilterComponent], *, strict: bool) -> bool:
    """Does `value` pass a valid filter?"""
    names = dict(value)
    for component in components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(names) == len(components)


def describe(
    quotas: Mapping[Entity, Mapping[str, float]], components: Sequence[FilterComponent], *, strict: bool
) -> list[tuple[Entity, dict[str, float]]]:
    """The entities a valid filter matches with their quotas, sorted (defaults first)."""
    found = [
        (e, dict(values)) for e, values in quotas.items() if values and matches(e, components, strict=strict)
    ]
    return sorted(found, key=lambda item: [(kind, name is not None, name or "") for kind, name in item[0]])


# -- rates and throttle time -----------------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    start: float
    value: float = 0.0


@dataclass(slots=True)
class SampledRate:
    """Kafka's `Rate` over `window_num` samples of `window_s` seconds (module guarantees)."""

    window_num: int
    window_s: float
    samples: list[_Sample] = field(default_factory=list)
    current: int = 0
    last_record: float = -math.inf  # when `record` last counted something

    def obsolete(self, now: float) -> bool:
        """Nothing recorded for more than the whole sample span: it measures as a new rate."""
        return now - self.last_record > self.window_num * self.window_s

    def _purge(self, now: float) -> None:
        horizon = now - self.window_num * self.window_s
        for sample in self.samples:
            if sample.start < horizon:
                sample.start, sample.value = now, 0.0

    def record(self, value: float, now: float) -> None:
        if not self.samples:
            self.samples.append(_Sample(now))
            self.current = 0
        sample = self.samples[self.current]
        if now - sample.start >= self.window_s:
            self.current = (self.current + 1) % self.window_num
            if self.current == len(self.samples):
                self.samples.append(_Sample(now))
            else:
                self.samples[self.current] = _Sample(now)
            sample = self.samples[self.current]
        sample.value += value
        self.last_record = now

    def unrecord(self, value: float, now: float) -> None:
        """Take back what `record` just counted (a response that was not sent)."""
        self.record(-value, now)

    def window(self, now: float) -> float:
        """The seconds the rate is measured over (at least `window_num - 1` whole windows)."""
        self._purge(now)
        oldest = min((s.start for s in self.samples), default=now)
        elapsed = now - oldest
        whole = int(elapsed // self.window_s)
        if whole < self.window_num - 1:
            elapsed += (self.window_num - 1 - whole) * self.window_s
        return elapsed

    def rate(self, now: float) -> float:
        """Per second, over `window(now)`."""
        elapsed = self.window(now)
        return sum(s.value for s in self.samples) / elapsed

    def throttle_ms(self, quota: float, now: float, *, most_s: float | None = None) -> int:
        """0 within `quota`; else the milliseconds without traffic that bring the rate back, at
        most `most_s` (default: the whole sample span)."""
        rate = self.rate(now)
        if rate <= quota:
            return 0
        ms = (rate - quota) / quota * self.window(now) * 1000
        bound = self.window_num * self.window_s if most_s is None else most_s
        return min(round(ms), round(bound * 1000))
