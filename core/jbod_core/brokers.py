"""Broker lifecycle decisions: registration, heartbeats, session expiry, unregistration (§3.1, §3.2).

Every function is pure: it reads the image (and the soft-state sessions) and returns
`(records, reply)`; it never changes either. Time is a parameter.

Guarantees:
* Registration checks run in the contract's order (cluster id 104, live session of another
  incarnation 101, dir list 42) and a rejection returns no records.
* A new incarnation gets the offset of its `RegisterBrokerRecord` as its epoch and starts fenced;
  a previous incarnation that is still unfenced is fenced first. The same incarnation keeps its
  epoch, fencing and controlled-shutdown state, and dirs it reported offline stay offline.
* The heartbeat follows Kafka's state machine with the JBOD gate: a multi-dir broker leaves
  FENCED only when none of its replicas is UNASSIGNED. A heartbeat naming a dir the broker never
  registered is rejected whole (57). Newly offline dirs are handled before the state transition,
  so one heartbeat never elects a replica in a dir it reports offline.
* Cordoned dirs (KIP-1066, extension field `cordonedLogDirs`): a registration carries them in its
  RegisterBrokerRecord (a dir not in the registration's list is refused, 42); a heartbeat that
  names them writes a BrokerRegistrationChangeRecord only when they differ from the
  registration's (a dir the broker never registered is refused whole, 57); a heartbeat without
  the field (an old agent) leaves them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from jbod_core import election, records
from jbod_core.draft import Draft
from jbod_core.errors import ErrorCode
from jbod_core.image import BrokerRegistration, ClusterImage
from jbod_core.messages import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    UnregisterBrokerReply,
)
from jbod_core.sessions import Session, session_alive


class BrokerState(Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled-shutdown"
    SHUTDOWN_NOW = "shutdown-now"


def current_state(reg: BrokerRegistration) -> BrokerState:
    if reg.fenced:
        return BrokerState.FENCED
    if reg.in_controlled_shutdown:
        return BrokerState.CONTROLLED_SHUTDOWN
    return BrokerState.UNFENCED


def _registration_error(code: ErrorCode, message: str) -> tuple[list[records.Record], RegisterBrokerReply]:
    return [], RegisterBrokerReply(error_code=code, error_message=message, broker_epoch=-1)


def register_broker(  # noqa: PLR0913  image, sessions and request, then the cluster id, the time and the session timeout
    image: ClusterImage,
    sessions: Mapping[int, Session],
    request: RegisterBrokerRequest,
    *,
    cluster_id: str,
    now: float,
    session_timeout: float,
) -> tuple[list[records.Record], RegisterBrokerReply]:
    if request.cluster_id != cluster_id:
        return _registration_error(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"Expected cluster id {cluster_id}, but got cluster id {request.cluster_id}",
        )
    existing = image.brokers.get(request.broker_id)
    new_incarnation = existing is None or existing.incarnation_id != request.incarnation_id
    if (
        existing is not None
        and new_incarnation
        and not existing.fenced
        and session_alive(sessions, request.broker_id, now=now, timeout=session_timeout)
    ):
        return _registration_error(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"Broker {request.broker_id} is registered with another incarnation whose session is alive",
        )
    dirs_problem = _dirs_problem(image, request)
    if dirs_problem is not None:
        return _registration_error(ErrorCode.INVALID_REQUEST, dirs_problem)

    draft = Draft(image)
    listeners = tuple(records.Listener(name=x.name, host=x.host, port=x.port) for x in request.listeners)
    if existing is not None and not new_incarnation:
        offline = set(existing.offline_log_dirs)
        online = tuple(d for d in request.log_dirs if d not in offline)
        dropped = [d for d in existing.log_dirs if d not in set(request.log_dirs)]
        if dropped:
            election.handle_offline_dirs(draft, request.broker_id, dropped)
        current = draft.broker(request.broker_id)
        assert current is not None
        draft.append(
            records.RegisterBrokerRecord(
                broker_id=request.broker_id,
                broker_epoch=existing.broker_epoch,
                incarnation_id=request.incarnation_id,
                log_dirs=online,
                has_offline_log_dirs=request.has_offline_log_dirs,
                fenced=current.fenced,
                in_controlled_shutdown=current.in_controlled_shutdown,
                listeners=listeners,
                rack=request.rack,
                offline_log_dirs=current.offline_log_dirs,
                cordoned_log_dirs=tuple(sorted(request.cordoned_log_dirs)),
            )
        )
        if not current.fenced and not current.in_controlled_shutdown:
            # Dirs may have come (back) online: leaderless partitions may now have a leader.
            election.elect_unfenced_broker(draft, request.broker_id)
        return draft.records, RegisterBrokerReply(broker_epoch=existing.broker_epoch)

    if existing is not None and not existing.fenced:
        election.fence_broker(draft, request.broker_id)
    epoch = draft.next_record_offset
    draft.append(
        records.RegisterBrokerRecord(
            broker_id=request.broker_id,
            broker_epoch=epoch,
            incarnation_id=request.incarnation_id,
            log_dirs=tuple(request.log_dirs),
            has_offline_log_dirs=request.has_offline_log_dirs,
            fenced=True,
            in_controlled_shutdown=False,
            listeners=listeners,
            rack=request.rack,
            cordoned_log_dirs=tuple(sorted(request.cordoned_log_dirs)),
        )
    )
    return draft.records, RegisterBrokerReply(broker_epoch=epoch)


def _dirs_problem(image: ClusterImage, request: RegisterBrokerRequest) -> str | None:
    """Why the registration's dir list is invalid (42), or None."""
    if not request.log_dirs:
        return "No directories specified in request"
    for directory in request.log_dirs:
        if directory.is_reserved:
            return f"Reserved directory id {directory} in request"
    if len(set(request.log_dirs)) != len(request.log_dirs):
        return "Duplicate directory id in request"
    for directory in request.log_dirs:
        owner = image.dir_owner.get(directory)
        if owner is not None and owner != request.broker_id:
            return f"Broker {owner} is already registered with directory {directory}"
    for directory in request.cordoned_log_dirs:
        if directory not in request.log_dirs:
            return f"Cordoned directory {directory} is not one of the registered directories"
    return None


def _next_state(
    image: ClusterImage,
    sessions: Mapping[int, Session],
    reg: BrokerRegistration,
    request: BrokerHeartbeatRequest,
    *,
    caught_up: bool,
) -> BrokerState:
    state = current_state(reg)
    if state is BrokerState.FENCED:
        return _next_from_fenced(image, reg, request, caught_up=caught_up)
    if state is BrokerState.UNFENCED:
        return _next_from_unfenced(image, reg, request)
    return _next_from_controlled_shutdown(image, sessions, reg)


def _next_from_fenced(
    image: ClusterImage, reg: BrokerRegistration, request: BrokerHeartbeatRequest, *, caught_up: bool
) -> BrokerState:
    """Unfence a caught-up broker that does not ask to stay fenced (a multi-dir one only once none
    of its replicas is UNASSIGNED: the JBOD gate)."""
    if request.want_shut_down:
        return BrokerState.SHUTDOWN_NOW
    if (
        not request.want_fence
        and caught_up
        and (not reg.is_multi_dir or image.unassigned_count(reg.broker_id) == 0)
    ):
        return BrokerState.UNFENCED
    return BrokerState.FENCED


def _next_from_unfenced(
    image: ClusterImage, reg: BrokerRegistration, request: BrokerHeartbeatRequest
) -> BrokerState:
    """A shutdown waits for leadership to move (controlled shutdown) unless the broker leads nothing."""
    if request.want_fence:
        return BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
    if request.want_shut_down:
        return (
            BrokerState.CONTROLLED_SHUTDOWN
            if image.leader_count(reg.broker_id) > 0
            else BrokerState.SHUTDOWN_NOW
        )
    return BrokerState.UNFENCED


def _next_from_controlled_shutdown(
    image: ClusterImage, sessions: Mapping[int, Session], reg: BrokerRegistration
) -> BrokerState:
    """Finish once it leads nothing and every other active broker has seen the record that
    started the shutdown."""
    if image.leader_count(reg.broker_id) > 0:
        return BrokerState.CONTROLLED_SHUTDOWN
    started = image.controlled_shutdown_offsets.get(reg.broker_id, image.end_offset - 1)
    for other in image.brokers.values():
        if other.broker_id == reg.broker_id or not other.is_active:
            continue
        session = sessions.get(other.broker_id)
        if session is None or session.metadata_offset < started:
            return BrokerState.CONTROLLED_SHUTDOWN
    return BrokerState.SHUTDOWN_NOW


def _unknown_dir(reg: BrokerRegistration, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply | None:
    """LOG_DIR_NOT_FOUND for a dir the heartbeat names (offline, cordoned or slow) that is not
    one of the registration's, else None."""
    known = set(reg.log_dirs) | set(reg.offline_log_dirs)
    for what, dirs in (
        ("Directory", request.offline_log_dirs),
        ("Cordoned directory", request.cordoned_log_dirs or ()),
        ("Slow directory", request.slow_log_dirs or ()),
    ):
        for directory in dirs:
            if directory not in known:
                return BrokerHeartbeatReply(
                    error_code=ErrorCode.LOG_DIR_NOT_FOUND,
                    error_message=f"{what} {directory} is not a registered directory of broker {reg.broker_id}",
                    is_fenced=reg.fenced,
                )
    return None


def broker_heartbeat(
    image: ClusterImage,
    sessions: Mapping[int, Session],
    request: BrokerHeartbeatRequest,
) -> tuple[list[records.Record], BrokerHeartbeatReply]:
    reg = image.brokers.get(request.broker_id)
    if reg is None:
        return [], BrokerHeartbeatReply(
            error_code=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"No broker registration found for broker id {request.broker_id}",
        )
    if reg.broker_epoch != request.broker_epoch:
        return [], BrokerHeartbeatReply(
            error_code=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"Expected broker epoch {reg.broker_epoch}, but got broker epoch {request.broker_epoch}",
        )
    unknown = _unknown_dir(reg, request)
    if unknown is not None:
        return [], unknown
    draft = Draft(image)
    if request.slow_log_dirs is not None:
        slow = tuple(sorted(set(request.slow_log_dirs)))
        if slow != reg.slow_log_dirs:
            election.report_slow_dirs(draft, reg.broker_id, slow)
    if request.cordoned_log_dirs is not None:
        cordoned = tuple(sorted(set(request.cordoned_log_dirs)))
        if cordoned != reg.cordoned_log_dirs:
            draft.append(
                records.BrokerRegistrationChangeRecord(
                    broker_id=reg.broker_id, broker_epoch=reg.broker_epoch, cordoned_log_dirs=cordoned
                )
            )
    online = set(reg.log_dirs)
    newly_offline = sorted({d for d in request.offline_log_dirs if d in online})
    if newly_offline:
        election.handle_offline_dirs(draft, reg.broker_id, newly_offline)
    caught_up = request.current_metadata_offset >= reg.broker_epoch
    state = _next_state(image, sessions, reg, request, caught_up=caught_up)
    previous = current_state(reg)
    if state is BrokerState.UNFENCED and previous is BrokerState.FENCED:
        draft.append(
            records.BrokerRegistrationChangeRecord(
                broker_id=reg.broker_id, broker_epoch=reg.broker_epoch, fenced=False
            )
        )
        election.elect_unfenced_broker(draft, reg.broker_id)
    elif state in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW) and previous is not BrokerState.FENCED:
        election.fence_broker(draft, reg.broker_id)
    elif state is BrokerState.CONTROLLED_SHUTDOWN and previous is BrokerState.UNFENCED:
        draft.append(
            records.BrokerRegistrationChangeRecord(
                broker_id=reg.broker_id, broker_epoch=reg.broker_epoch, in_controlled_shutdown=True
            )
        )
        election.remove_from_partitions(draft, reg.broker_id)
    reply = BrokerHeartbeatReply(
        is_caught_up=caught_up,
        is_fenced=state in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW),
        should_shut_down=state is BrokerState.SHUTDOWN_NOW,
    )
    return draft.records, reply


def expire_sessions(
    image: ClusterImage, sessions: Mapping[int, Session], *, now: float, session_timeout: float
) -> tuple[list[records.Record], list[int]]:
    """Fence every unfenced broker (controlled shutdown included) whose session has expired.

    Returns the records and the ids of the brokers fenced, in id order.
    """
    draft = Draft(image)
    fenced: list[int] = []
    for broker_id in sorted(image.brokers):
        reg = image.brokers[broker_id]
        if reg.fenced or session_alive(sessions, broker_id, now=now, timeout=session_timeout):
            continue
        election.fence_broker(draft, broker_id)
        fenced.append(broker_id)
    return draft.records, fenced


def unregister_broker(
    image: ClusterImage, broker_id: int
) -> tuple[list[records.Record], UnregisterBrokerReply]:
    """Extension (docs/decisions.md): remove a broker's registration, fencing it first."""
    reg = image.brokers.get(broker_id)
    if reg is None:
        return [], UnregisterBrokerReply(
            error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
            error_message=f"Broker {broker_id} is not registered",
        )
    draft = Draft(image)
    if not reg.fenced:
        election.fence_broker(draft, broker_id)
    else:
        election.remove_from_partitions(draft, broker_id)
    draft.append(records.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.broker_epoch))
    return draft.records, UnregisterBrokerReply()
