"""The broker agent's decisions (KIP-112 / KIP-858 on the broker side), as one pure function.

`decide(snapshot) -> Plan` looks at what the agent observed and says what to do now and when to
look again. No I/O, no clock reads, no state: the loop (`jbod_agent.lifecycle.agent`) observes, calls
`decide`, and carries the plan out. Guarantees, in the order they are checked:

1. Shut down, and nothing else, when
   * the metadata log dir failed, or the last data dir failed (EXIT_STORAGE_LOST);
   * the controller refused the registration for good (EXIT_REGISTRATION_REFUSED);
   * the controller said to shut down (exit 0);
   * a failed dir was not acknowledged within `log.dir.failure.timeout.ms` of its failure and this
     broker leads a replica in it (EXIT_DIR_FAILURE_UNREPORTED, KIP-112: the controller must move
     leadership away, and it cannot while it does not know).
2. Unregistered: register, no earlier than the backoff after a failed attempt.
3. Registered:
   * ready to be unfenced once caught up with the metadata log, the first reconcile is done and no
     replica is being created or waiting for its placement to be confirmed (then for good, as Kafka
     does: `wantFence` stays false);
   * heartbeat when the interval passed (every 100 ms while fenced, so the controller's
     unfencing is seen at once), at once when a failed dir has not been sent yet, readiness was
     just reached, or the dirs that are slow or stalled are not those the last heartbeat named
     (so the controller moves leaderships off a stalled dir at once);
   * send placements when the queue says a batch is due.
One controller call of each kind is in flight at a time: a call in flight is never repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from jbod_core.ids import Uuid

EXIT_CONTROLLER_SAID_SHUTDOWN = 0
EXIT_DIR_FAILURE_UNREPORTED = 3
EXIT_STORAGE_LOST = 4
EXIT_REGISTRATION_REFUSED = 5

FENCED_HEARTBEAT_INTERVAL = 0.1


class ActionKind(Enum):
    SHUT_DOWN = "shut-down"
    REGISTER = "register"
    READY_TO_UNFENCE = "ready-to-unfence"
    HEARTBEAT = "heartbeat"
    SEND_PLACEMENTS = "send-placements"


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    reason: str
    exit_code: int | None = None  # SHUT_DOWN only


@dataclass(frozen=True, slots=True)
class FailedDirView:
    directory_id: Uuid
    failed_at: float
    acknowledged: bool
    leads: int  # partitions this broker leads with their replica in the dir


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    # storage
    online_dirs: int
    metadata_dir_error: str | None
    failed_dirs: tuple[FailedDirView, ...]
    failure_timeout_ms: int
    # controller's word
    registration_refused: str | None
    controller_said_shutdown: bool
    # lifecycle
    registered: bool
    register_in_flight: bool
    next_register_at: float
    heartbeat_in_flight: bool
    last_heartbeat_at: float | None
    heartbeat_interval_ms: int
    sent_offline_dirs: frozenset[Uuid]  # failed dirs named in a heartbeat already
    slow_dirs: frozenset[Uuid]  # slow or stalled dirs now (what the next heartbeat names)
    sent_slow_dirs: frozenset[Uuid]  # as the last heartbeat named them
    # readiness
    fenced: bool  # as the controller last said
    ready_to_unfence: bool
    caught_up: bool
    reconciled_once: bool
    creating: int
    queued_placements: int
    # placements
    placements_in_flight: bool
    placements_due_at: float | None


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    wake_at: float | None  # decide again by then (None: only when something happens)

    @property
    def kinds(self) -> tuple[ActionKind, ...]:
        return tuple(a.kind for a in self.actions)

    @property
    def reason(self) -> str:
        return "; ".join(a.reason for a in self.actions) or "nothing to do"


def shutdown_reason(s: Snapshot) -> Action | None:
    """The reason to stop now, if there is one (rule 1)."""
    if s.metadata_dir_error is not None:
        return Action(ActionKind.SHUT_DOWN, s.metadata_dir_error, exit_code=EXIT_STORAGE_LOST)
    if s.online_dirs == 0:
        return Action(ActionKind.SHUT_DOWN, "the last online log dir failed", exit_code=EXIT_STORAGE_LOST)
    if s.registration_refused is not None:
        return Action(
            ActionKind.SHUT_DOWN,
            f"the controller refused the registration: {s.registration_refused}",
            exit_code=EXIT_REGISTRATION_REFUSED,
        )
    if s.controller_said_shutdown:
        return Action(
            ActionKind.SHUT_DOWN, "the controller said to shut down", exit_code=EXIT_CONTROLLER_SAID_SHUTDOWN
        )
    timeout = s.failure_timeout_ms / 1000
    for failed in s.failed_dirs:
        if failed.acknowledged or s.now - failed.failed_at < timeout or not failed.leads:
            continue
        return Action(
            ActionKind.SHUT_DOWN,
            f"could not tell the controller that log dir {failed.directory_id} is offline within "
            f"{s.failure_timeout_ms} ms and this broker leads replicas in it",
            exit_code=EXIT_DIR_FAILURE_UNREPORTED,
        )
    return None


def ready_to_unfence(s: Snapshot) -> bool:
    return s.ready_to_unfence or (
        s.caught_up and s.reconciled_once and s.creating == 0 and s.queued_placements == 0
    )


def decide(s: Snapshot) -> Plan:
    stop = shutdown_reason(s)
    if stop is not None:
        return Plan((stop,), wake_at=None)
    deadlines: list[float] = []
    timeout = s.failure_timeout_ms / 1000
    deadlines.extend(
        f.failed_at + timeout for f in s.failed_dirs if not f.acknowledged and f.failed_at + timeout > s.now
    )
    if not s.registered:
        if s.register_in_flight:
            return Plan((), _earliest(deadlines))
        if s.now < s.next_register_at:
            return Plan((), _earliest([*deadlines, s.next_register_at]))
        return Plan((Action(ActionKind.REGISTER, "not registered"),), _earliest(deadlines))
    actions: list[Action] = []
    becomes_ready = not s.ready_to_unfence and ready_to_unfence(s)
    if becomes_ready:
        actions.append(Action(ActionKind.READY_TO_UNFENCE, "caught up and every placement confirmed"))
    for action, due in (_heartbeat(s, becomes_ready=becomes_ready), _placements(s)):
        if action is not None:
            actions.append(action)
        if due is not None:
            deadlines.append(due)
    return Plan(tuple(actions), _earliest(deadlines))


def _heartbeat(s: Snapshot, *, becomes_ready: bool) -> tuple[Action | None, float | None]:
    """(the heartbeat to send now, or None; when the next one is due if not now)."""
    if s.heartbeat_in_flight:
        return None, None
    unsent = [f.directory_id for f in s.failed_dirs if f.directory_id not in s.sent_offline_dirs]
    interval = s.heartbeat_interval_ms / 1000
    if s.fenced or not (s.ready_to_unfence or becomes_ready):
        interval = min(interval, FENCED_HEARTBEAT_INTERVAL)
    due = s.now if s.last_heartbeat_at is None else s.last_heartbeat_at + interval
    if unsent:
        return Action(ActionKind.HEARTBEAT, f"log dir(s) {_names(unsent)} failed"), None
    if becomes_ready:
        return Action(ActionKind.HEARTBEAT, "ready to be unfenced"), None
    if s.slow_dirs != s.sent_slow_dirs:
        return Action(ActionKind.HEARTBEAT, _slow_change(s.slow_dirs, s.sent_slow_dirs)), None
    if s.now >= due:
        return Action(ActionKind.HEARTBEAT, "heartbeat interval"), None
    return None, due


def _slow_change(now: frozenset[Uuid], sent: frozenset[Uuid]) -> str:
    parts = []
    if now - sent:
        parts.append(f"log dir(s) {_names(sorted(now - sent))} slow or stalled")
    if sent - now:
        parts.append(f"log dir(s) {_names(sorted(sent - now))} no longer slow or stalled")
    return "; ".join(parts)


def _placements(s: Snapshot) -> tuple[Action | None, float | None]:
    """(sending the queued placements now, or None; when they are due if not now)."""
    if s.placements_in_flight or s.placements_due_at is None:
        return None, None
    if s.placements_due_at <= s.now:
        return Action(ActionKind.SEND_PLACEMENTS, f"{s.queued_placements} placement(s) queued"), None
    return None, s.placements_due_at


def _earliest(deadlines: list[float]) -> float | None:
    return min(deadlines) if deadlines else None


def _names(dirs: list[Uuid]) -> str:
    return ", ".join(str(d) for d in sorted(dirs))
