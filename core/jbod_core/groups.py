"""Kafka's classic consumer-group protocol as a pure state machine: one group's membership,
rebalances, assignments and committed offsets, decided the way Kafka 4's group coordinator
decides them (`GroupMetadataManager`, `ClassicGroup`, `OffsetMetadataManager`).

A group moves between Kafka's states (Dead is only shown: a deleted or unknown group is None):

| state               | JoinGroup                                  | SyncGroup                  | Heartbeat        | OffsetCommit          |
|---------------------|--------------------------------------------|----------------------------|------------------|-----------------------|
| Empty               | add the member, rebalance after            | UNKNOWN_MEMBER_ID 25       | UNKNOWN_MEMBER_ID | generation -1 only   |
|                     | `group.initial.rebalance.delay.ms`         |                            |                  | (standalone commits)  |
| PreparingRebalance  | park until every member rejoined or the    | REBALANCE_IN_PROGRESS 27   | REBALANCE_IN_PROGRESS | current generation |
|                     | rebalance timeout passed                   |                            |                  |                       |
| CompletingRebalance | same metadata: the generation again; else  | park; the leader's         | ok               | REBALANCE_IN_PROGRESS |
|                     | rebalance                                  | assignments answer all     |                  |                       |
| Stable              | leader or new metadata: rebalance; else    | the member's assignment    | ok               | current generation    |
|                     | the generation again                       |                            |                  |                       |

Completing a join phase drops the dynamic members that did not rejoin, bumps the generation,
picks the leader (the old one if it rejoined, else the first rejoined member) and the protocol
(every member supports it, the most members' first choice), answers every parked JoinGroup (the
leader gets the members' metadata) and waits for SyncGroup; the leader's SyncGroup stores the
assignments (a `GroupMetadataValue` record) and the group becomes Stable. A JoinGroup v4+ without
a member id gets MEMBER_ID_REQUIRED 79 and an id (KIP-394). A static member (`group.instance.id`)
that rejoins with a new member id replaces its old one: without a rebalance when the group is
Stable and the protocol it would select is unchanged; the old member id is then FENCED_INSTANCE_ID
82. Heartbeat, SyncGroup and OffsetCommit check the member (UNKNOWN_MEMBER_ID 25,
FENCED_INSTANCE_ID 82) and the generation (ILLEGAL_GENERATION 22). A member that sends nothing
for its session timeout is removed (a new member: for `new_member_join_timeout_ms`), unless it
waits in JoinGroup or SyncGroup, as Kafka.

Guarantees:
* Pure: frozen values in and out, no I/O, no clock, no randomness. Time comes in as `Now`
  (a monotonic millisecond clock for deadlines, the wall clock for stored timestamps) and new
  member ids as parameters. Every timer is a deadline in the group (`next_deadline`), fired by
  `tick(group, now)`.
* Every decision returns a `GroupDecision`: the group afterwards (None: no such group), the records to
  write to the group's `__consumer_offsets` partition before anything is answered, the request's
  own answer (None while the request waits: `parked` names the member it waits as) and
  `deliveries`, the answers to waiting JoinGroup/SyncGroup requests, by member id. The group
  afterwards is meant to take effect once the records are written; `GroupLoader` replaying those
  records gives the group's durable part (generation, protocol, leader, members and their
  assignments when Stable or Empty, offsets) — the rest (waiting requests, deadlines) is soft
  state, as Kafka keeps it, and a loaded group starts Stable (or Empty) with fresh sessions.
* Offsets: a commit writes one `OffsetCommitValue` per partition whose offset, leader epoch or
  metadata changed (an unchanged one is answered without a record: the log already holds it);
  DeleteGroups writes a tombstone for every offset and the group; OffsetDelete a tombstone per
  committed partition of a topic no member is subscribed to; `expire_offsets` (Kafka's
  `offsets.retention.minutes`) a tombstone per expired offset, and one for an Empty group left
  with no offset, which it removes. A transaction's pending offsets (`jbod_core.txn_offsets`)
  come in as `pending` partitions: DeleteGroups and OffsetDelete tombstone them too, expiry
  keeps them (and their group), as Kafka.
* A group that never completed a generation and holds no member, pending member or offset is not
  kept (None), so failed joins leave nothing behind.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Generic, TypeAlias, TypeVar

from jbod_core import group_records
from jbod_core.group_records import CoordinatorRecord, GroupMetadataValue, MemberMetadata, OffsetCommitValue

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
CLASSIC_GROUP_TYPE: Final = "classic"

TopicPartition: TypeAlias = tuple[str, int]


class GroupError(enum.IntEnum):
    """Kafka's error codes a group decision answers."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    INVALID_PRODUCER_EPOCH = 47
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_CAN_REBALANCE: Final = frozenset({GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.STABLE})


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker's group settings (Kafka's keys and defaults)."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    new_member_join_timeout_ms: int = 300_000  # Kafka's classicGroupNewMemberJoinTimeoutMs
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes


@dataclass(frozen=True, slots=True)
class Now:
    """The time of a decision: `monotonic_ms` for deadlines, `wall_ms` for stored timestamps."""

    monotonic_ms: int
    wall_ms: int


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    awaiting_join: bool = False  # a JoinGroup of this member is parked
    awaiting_sync: bool = False  # a SyncGroup of this member is parked
    is_new: bool = False  # joined but not yet through a completed join phase
    heartbeat_deadline_ms: int | None = None  # monotonic; None: no session timer running

    def metadata(self, protocol: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        return b""

    @property
    def heartbeat_satisfied(self) -> bool:
        """Kafka's `hasSatisfiedHeartbeat`: a member waiting in a rebalance cannot time out."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class InitialRebalance:
    """The delayed first rebalance of an Empty group (Kafka's tryCompleteInitialRebalanceElseSchedule)."""

    delay_ms: int
    remaining_ms: int
    new_member_added: bool = False


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1  # wall clock of the last transition
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: Mapping[str, Member] = field(default_factory=dict)  # in the order they joined
    pending_members: Mapping[str, int] = field(default_factory=dict)  # KIP-394: id → deadline
    pending_sync: frozenset[str] = frozenset()
    join_deadline_ms: int | None = None
    initial_rebalance: InitialRebalance | None = None
    sync_deadline_ms: int | None = None
    offsets: Mapping[TopicPartition, CommittedOffset] = field(default_factory=dict)

    def static_member_id(self, instance_id: str) -> str | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member.member_id
        return None


# --- Requests and answers ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str  # "": a new member
    instance_id: str | None
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int  # JoinGroup v0: the session timeout
    client_id: str
    client_host: str
    api_version: int  # v4+: a new member needs a member id first; v9+: skip_assignment


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: GroupError
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    error: GroupError
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    generation: int


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str  # "": by instance id (an administrative removal)
    instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveAnswer:
    error: GroupError
    members: tuple[GroupError, ...]  # one per leaving member, in request order


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation: int  # -1: a standalone commit (admin tools, consumers without a group)
    member_id: str
    instance_id: str | None
    offsets: tuple[OffsetToCommit, ...]
    api_version: int  # v9+: an unknown group is GROUP_ID_NOT_FOUND


@dataclass(frozen=True, slots=True)
class OffsetDeleteAnswer:
    error: GroupError
    topics: tuple[tuple[str, tuple[tuple[int, GroupError], ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Delivery:
    """The answer to the parked JoinGroup (a `JoinAnswer`) or SyncGroup (a `SyncAnswer`) of a member."""

    member_id: str
    answer: JoinAnswer | SyncAnswer


A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class GroupDecision(Generic[A]):
    group: Group | None
    records: tuple[CoordinatorRecord, ...] = ()
    answer: A | None = None
    parked: str | None = None  # the member id the request waits as (its answer comes as a Delivery)
    deliveries: tuple[Delivery, ...] = ()


def new_member_id(client_id: str, instance_id: str | None, unique: str) -> str:
    """Kafka's member id: the instance id (static members) or client id, '-', a unique part."""
    return f"{instance_id if instance_id is not None else client_id}-{unique}"


def _validate_member(members: Mapping[str, Member], member_id: str, instance_id: str | None) -> GroupError:
    """Kafka's `validateMember`: the instance id (if any) maps to this member id, which exists."""
    if instance_id is not None:
        existing = next((m.member_id for m in members.values() if m.instance_id == instance_id), None)
        if existing is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if existing != member_id:
            return GroupError.FENCED_INSTANCE_ID
    if member_id not in members:
        return GroupError.UNKNOWN_MEMBER_ID
    return GroupError.NONE


# --- The working copy of one decision --------------------------------------------------------


class _Work:
    """A mutable copy of one group for the length of one decision (never the caller's group),
    with Kafka's `ClassicGroup` operations; `decision()` freezes it again."""

    def __init__(self, group: Group, now: Now, settings: GroupSettings) -> None:
        self.original = group
        self.now = now
        self.settings = settings
        self.state = group.state
        self.previous_state = group.previous_state
        self.state_timestamp_ms = group.state_timestamp_ms
        self.generation = group.generation
        self.protocol_type = group.protocol_type
        self.protocol_name = group.protocol_name
        self.leader_id = group.leader_id
        self.members: dict[str, Member] = dict(group.members)
        self.pending: dict[str, int] = dict(group.pending_members)
        self.pending_sync: set[str] = set(group.pending_sync)
        self.join_deadline_ms = group.join_deadline_ms
        self.initial_rebalance = group.initial_rebalance
        self.sync_deadline_ms = group.sync_deadline_ms
        self.offsets: Mapping[TopicPartition, CommittedOffset] = group.offsets
        self.records: list[CoordinatorRecord] = []
        self.deliveries: list[Delivery] = []

    # -- freezing ---------------------------------------------------------------------------

    def group(self) -> Group | None:
        vacant = (
            self.state is GroupState.EMPTY
            and self.generation == 0
            and not self.members
            and not self.pending
            and not self.offsets
        )
        if vacant:
            return None
        return Group(
            group_id=self.original.group_id,
            state=self.state,
            previous_state=self.previous_state,
            state_timestamp_ms=self.state_timestamp_ms,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            members=self.members,
            pending_members=self.pending,
            pending_sync=frozenset(self.pending_sync),
            join_deadline_ms=self.join_deadline_ms,
            initial_rebalance=self.initial_rebalance,
            sync_deadline_ms=self.sync_deadline_ms,
            offsets=self.offsets,
        )

    def decision(self, answer: A | None, parked: str | None = None) -> GroupDecision[A]:
        return GroupDecision(self.group(), tuple(self.records), answer, parked, tuple(self.deliveries))

    # -- members ----------------------------------------------------------------------------

    def set_member(self, member_id: str, **changes: object) -> Member:
        member = replace(self.members[member_id], **changes)  # type: ignore[arg-type]
        self.members[member_id] = member
        return member

    def static_member_id(self, instance_id: str) -> str | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member.member_id
        return None

    def validate_member(self, member_id: str, instance_id: str | None) -> GroupError:
        return _validate_member(self.members, member_id, instance_id)

    def _support_count(self, name: str) -> int:
        return sum(1 for m in self.members.values() if any(p.name == name for p in m.protocols))

    def supports_protocols(self, protocol_type: str, names: Collection[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        count = len(self.members)
        return self.protocol_type == protocol_type and any(self._support_count(n) == count for n in names)

    def select_protocol(self) -> str:
        """Every member's first choice among the protocols all members support; the most votes win
        (a tie: the protocol voted for first, in member order)."""
        count = len(self.members)
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(p.name for p in member.protocols if self._support_count(p.name) == count)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        """Remove a member; a JoinGroup or SyncGroup it has parked is answered UNKNOWN_MEMBER_ID."""
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.awaiting_join:
                self.deliveries.append(Delivery(member_id, JoinAnswer(GroupError.UNKNOWN_MEMBER_ID, "")))
            if member.awaiting_sync:
                self.deliveries.append(Delivery(member_id, SyncAnswer(GroupError.UNKNOWN_MEMBER_ID)))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending.pop(member_id, None)
        self.pending_sync.discard(member_id)

    def all_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending

    def reschedule_heartbeat(self, member_id: str, timeout_ms: int | None = None) -> None:
        member = self.members[member_id]
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.set_member(member_id, heartbeat_deadline_ms=self.now.monotonic_ms + timeout)

    def transition(self, state: GroupState) -> None:
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = self.now.wall_ms

    def current_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def generation_answer(self, member_id: str, *, leader_view: bool, skip: bool = False) -> JoinAnswer:
        return JoinAnswer(
            GroupError.NONE,
            member_id,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            members=self.current_members() if leader_view else (),
            skip_assignment=skip,
        )

    def metadata_record(self, assignment: Mapping[str, bytes]) -> CoordinatorRecord:
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )
        return group_records.group_metadata(self.original.group_id, value)

    # -- the join phase ---------------------------------------------------------------------

    def add_member(self, request: JoinRequest, member_id: str) -> None:
        member = Member(
            member_id=member_id,
            instance_id=request.instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            awaiting_join=True,
            is_new=True,
            # Parked JoinGroups of new members time out (a client that went away retries).
            heartbeat_deadline_ms=self.now.monotonic_ms + self.settings.new_member_join_timeout_ms,
        )
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self.previous_state is GroupState.EMPTY
            and self.initial_rebalance is not None
        ):
            self.initial_rebalance = replace(self.initial_rebalance, new_member_added=True)
        self.add(member)
        self.maybe_prepare_rebalance_or_complete_join()

    def update_member(self, member_id: str, request: JoinRequest) -> None:
        self.set_member(
            member_id,
            protocols=request.protocols,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            awaiting_join=True,
        )

    def maybe_prepare_rebalance_or_complete_join(self) -> None:
        if self.state in _CAN_REBALANCE:
            self.prepare_rebalance()
        else:
            self.maybe_complete_join_phase()

    def prepare_rebalance(self) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member_id in self.members:
                self.set_member(member_id, assignment=b"")
            self.propagate_assignment(GroupError.REBALANCE_IN_PROGRESS)
        self.pending_sync.clear()
        self.sync_deadline_ms = None
        initial = self.state is GroupState.EMPTY
        if initial:
            delay = self.settings.initial_rebalance_delay_ms
            self.join_deadline_ms = self.now.monotonic_ms + delay
            self.initial_rebalance = InitialRebalance(delay, max(self.rebalance_timeout_ms() - delay, 0))
        self.transition(GroupState.PREPARING_REBALANCE)
        if not initial:
            if self.all_joined():
                self.complete_join()
            else:
                self.join_deadline_ms = self.now.monotonic_ms + self.rebalance_timeout_ms()
                self.initial_rebalance = None

    def maybe_complete_join_phase(self) -> None:
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self.previous_state is not GroupState.EMPTY
            and self.all_joined()
        ):
            self.complete_join()

    def elect_joined_leader(self) -> bool:
        """Kafka's `maybeElectNewJoinedLeader`: keep a leader that rejoined, else the first member
        that did; False when no member rejoined (or there is no leader)."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def complete_join(self) -> None:
        self.join_deadline_ms = None
        self.initial_rebalance = None
        for member in list(self.members.values()):
            if not member.awaiting_join and member.instance_id is None:
                self.remove(member.member_id)
        if not self.elect_joined_leader() and self.members:
            # Nobody rejoined: wait another rebalance timeout for the session timeouts to act.
            self.join_deadline_ms = self.now.monotonic_ms + self.rebalance_timeout_ms()
            return
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY)
        self.pending_sync.clear()
        if self.state is GroupState.EMPTY:
            self.records.append(self.metadata_record({}))
            return
        for member in list(self.members.values()):
            if member.awaiting_join:
                answer = self.generation_answer(
                    member.member_id, leader_view=member.member_id == self.leader_id
                )
                self.deliveries.append(Delivery(member.member_id, answer))
            self.set_member(member.member_id, awaiting_join=False, is_new=False)
            self.reschedule_heartbeat(member.member_id)
            self.pending_sync.add(member.member_id)
        self.sync_deadline_ms = self.now.monotonic_ms + self.rebalance_timeout_ms()

    def try_complete_initial_rebalance(self) -> None:
        initial = self.initial_rebalance
        assert initial is not None
        if initial.new_member_added and initial.remaining_ms != 0:
            delay = min(self.settings.initial_rebalance_delay_ms, initial.remaining_ms)
            self.initial_rebalance = InitialRebalance(delay, max(initial.remaining_ms - initial.delay_ms, 0))
            self.join_deadline_ms = self.now.monotonic_ms + delay
        else:
            self.complete_join()

    # -- the sync phase ---------------------------------------------------------------------

    def propagate_assignment(self, error: GroupError) -> None:
        ok = error is GroupError.NONE
        for member in list(self.members.values()):
            if member.awaiting_sync:
                answer = SyncAnswer(
                    error,
                    self.protocol_type if ok else None,
                    self.protocol_name if ok else None,
                    member.assignment,
                )
                self.deliveries.append(Delivery(member.member_id, answer))
                self.set_member(member.member_id, awaiting_sync=False)
                self.reschedule_heartbeat(member.member_id)

    def remove_pending_sync(self, member_id: str) -> None:
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline_ms = None

    def expire_pending_sync(self) -> None:
        self.sync_deadline_ms = None
        if self.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or not self.pending_sync:
            return
        for member_id in sorted(self.pending_sync):
            self.remove(member_id)
        self.prepare_rebalance()

    # -- sessions ---------------------------------------------------------------------------

    def expire_member(self, member_id: str) -> None:
        member = self.members[member_id]
        if member.heartbeat_satisfied:
            self.set_member(member_id, heartbeat_deadline_ms=None)  # rescheduled when its wait ends
            return
        self.remove(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join()
        elif self.state is GroupState.PREPARING_REBALANCE and self.all_joined():
            self.complete_join()

    def expire_pending_member(self, member_id: str) -> None:
        self.pending.pop(member_id, None)
        if self.state is GroupState.PREPARING_REBALANCE and self.all_joined():
            self.complete_join()

    def due_timers(self) -> list[tuple[int, int, str]]:
        """(deadline, kind, member id) of every timer, earliest first: kind 0 join, 1 sync,
        2 pending member, 3 member session."""
        timers: list[tuple[int, int, str]] = []
        if self.join_deadline_ms is not None:
            timers.append((self.join_deadline_ms, 0, ""))
        if self.sync_deadline_ms is not None:
            timers.append((self.sync_deadline_ms, 1, ""))
        timers.extend((deadline, 2, member_id) for member_id, deadline in self.pending.items())
        timers.extend(
            (m.heartbeat_deadline_ms, 3, m.member_id)
            for m in self.members.values()
            if m.heartbeat_deadline_ms is not None
        )
        return sorted(t for t in timers if t[0] <= self.now.monotonic_ms)

    def fire(self, deadline: int, kind: int, member_id: str) -> None:
        """Fire one timer, if it is still set to `deadline` (an earlier one may have moved it)."""
        if kind == 0 and self.join_deadline_ms == deadline:
            if self.initial_rebalance is not None:
                self.try_complete_initial_rebalance()
            else:
                self.complete_join()
        elif kind == 1 and self.sync_deadline_ms == deadline:
            self.expire_pending_sync()
        elif kind == 2 and self.pending.get(member_id) == deadline:
            self.expire_pending_member(member_id)
        elif (
            kind == 3
            and member_id in self.members
            and self.members[member_id].heartbeat_deadline_ms == deadline
        ):
            self.expire_member(member_id)


# --- Decisions ---------------------------------------------------------------------------------


def join(
    group: Group | None, request: JoinRequest, *, now: Now, member_id: str, settings: GroupSettings
) -> GroupDecision[JoinAnswer]:
    """JoinGroup. `member_id` is the id a new member gets (`new_member_id`)."""
    if not request.group_id:
        return GroupDecision(group, answer=JoinAnswer(GroupError.INVALID_GROUP_ID, request.member_id))
    if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
        return GroupDecision(group, answer=JoinAnswer(GroupError.INVALID_SESSION_TIMEOUT, request.member_id))
    unknown = request.member_id == ""
    if group is None:
        if not unknown:
            return GroupDecision(None, answer=JoinAnswer(GroupError.UNKNOWN_MEMBER_ID, request.member_id))
        group = Group(request.group_id, state_timestamp_ms=now.wall_ms)
    work = _Work(group, now, settings)
    names = [p.name for p in request.protocols]
    if not work.supports_protocols(request.protocol_type, names):
        answer = JoinAnswer(GroupError.INCONSISTENT_GROUP_PROTOCOL, "" if unknown else request.member_id)
        return work.decision(answer)
    if unknown:
        return _join_new(work, request, member_id)
    return _join_existing(work, request)


def _join_new(work: _Work, request: JoinRequest, member_id: str) -> GroupDecision[JoinAnswer]:
    if request.instance_id is not None:
        existing = work.static_member_id(request.instance_id)
        if existing is not None:
            return _replace_static_member(work, request, existing, member_id)
    elif request.api_version >= 4:
        work.pending[member_id] = work.now.monotonic_ms + request.session_timeout_ms
        return work.decision(JoinAnswer(GroupError.MEMBER_ID_REQUIRED, member_id))
    work.add_member(request, member_id)
    return work.decision(None, parked=member_id)


def _join_existing(work: _Work, request: JoinRequest) -> GroupDecision[JoinAnswer]:
    member_id = request.member_id
    if member_id in work.pending and request.instance_id is None:
        work.add_member(request, member_id)
        return work.decision(None, parked=member_id)
    error = work.validate_member(member_id, request.instance_id)
    if error is not GroupError.NONE:
        return work.decision(JoinAnswer(error, member_id))
    member = work.members[member_id]
    unchanged = member.protocols == request.protocols
    state = work.state
    if state is GroupState.COMPLETING_REBALANCE and unchanged:
        # A retry of a JoinGroup whose answer was lost: the same generation again.
        return work.decision(work.generation_answer(member_id, leader_view=member_id == work.leader_id))
    if state is GroupState.STABLE and unchanged and member_id != work.leader_id:
        return work.decision(work.generation_answer(member_id, leader_view=False))
    if state is GroupState.EMPTY:
        return work.decision(JoinAnswer(GroupError.UNKNOWN_MEMBER_ID, member_id))
    # PreparingRebalance; new metadata; or the leader rejoining a Stable group (to rebalance).
    work.update_member(member_id, request)
    work.maybe_prepare_rebalance_or_complete_join()
    return work.decision(None, parked=member_id)


def _replace_static_member(
    work: _Work, request: JoinRequest, old_member_id: str, new_id: str
) -> GroupDecision[JoinAnswer]:
    """A static member rejoining with an unknown member id takes over its instance id's member:
    the old member id is fenced (its parked requests get FENCED_INSTANCE_ID)."""
    old = work.members[old_member_id]
    if old.awaiting_join:
        work.deliveries.append(
            Delivery(old_member_id, JoinAnswer(GroupError.FENCED_INSTANCE_ID, old_member_id))
        )
    if old.awaiting_sync:
        work.deliveries.append(Delivery(old_member_id, SyncAnswer(GroupError.FENCED_INSTANCE_ID)))
    work.pending_sync.discard(old_member_id)
    taking_over = replace(
        old,
        member_id=new_id,
        awaiting_join=False,
        awaiting_sync=False,
        is_new=False,
        heartbeat_deadline_ms=work.now.monotonic_ms + old.session_timeout_ms,
    )
    # In the old member's place: the member order (the leader's view) stays as it was.
    work.members = {
        new_id if m == old_member_id else m: taking_over if m == old_member_id else x
        for m, x in work.members.items()
    }
    if work.leader_id == old_member_id:
        work.leader_id = new_id
    if work.state is GroupState.STABLE:
        selected_before = work.protocol_name
        work.set_member(
            new_id,
            protocols=request.protocols,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
        )
        if work.select_protocol() == selected_before:
            # No rebalance: store the new member id, answer with the current generation.
            assignment = {m.member_id: m.assignment for m in work.members.values()}
            work.records.append(work.metadata_record(assignment))
            is_leader = new_id == work.leader_id
            if request.api_version >= 9:
                answer = work.generation_answer(new_id, leader_view=is_leader, skip=is_leader)
            else:
                answer = work.generation_answer(new_id, leader_view=False)
            return work.decision(answer)
        work.update_member(new_id, request)
        work.maybe_prepare_rebalance_or_complete_join()
        return work.decision(None, parked=new_id)
    work.update_member(new_id, request)
    if work.state is GroupState.COMPLETING_REBALANCE:
        # The leader may already be assigning to the old member id: assign again.
        work.prepare_rebalance()
    else:
        work.maybe_complete_join_phase()
    return work.decision(None, parked=new_id)


def sync(
    group: Group | None, request: SyncRequest, *, now: Now, settings: GroupSettings
) -> GroupDecision[SyncAnswer]:
    """SyncGroup."""
    if not request.group_id:
        return GroupDecision(group, answer=SyncAnswer(GroupError.INVALID_GROUP_ID))
    if group is None or group.state is GroupState.EMPTY:
        return GroupDecision(group, answer=SyncAnswer(GroupError.UNKNOWN_MEMBER_ID))
    work = _Work(group, now, settings)
    error = work.validate_member(request.member_id, request.instance_id)
    if error is GroupError.NONE and request.generation != work.generation:
        error = GroupError.ILLEGAL_GENERATION
    if error is GroupError.NONE and (
        _inconsistent(request.protocol_type, work.protocol_type)
        or _inconsistent(request.protocol_name, work.protocol_name)
    ):
        error = GroupError.INCONSISTENT_GROUP_PROTOCOL
    if error is not GroupError.NONE:
        return work.decision(SyncAnswer(error))
    member_id = request.member_id
    if work.state is GroupState.PREPARING_REBALANCE:
        return work.decision(SyncAnswer(GroupError.REBALANCE_IN_PROGRESS))
    if work.state is GroupState.STABLE:
        work.remove_pending_sync(member_id)
        member = work.members[member_id]
        return work.decision(
            SyncAnswer(GroupError.NONE, work.protocol_type, work.protocol_name, member.assignment)
        )
    # CompletingRebalance: wait for the leader's assignments.
    work.set_member(member_id, awaiting_sync=True)
    work.remove_pending_sync(member_id)
    if member_id == work.leader_id:
        assignment = {m: request.assignments.get(m, b"") for m in work.members}
        work.records.append(work.metadata_record(assignment))
        for m, assigned in assignment.items():
            work.set_member(m, assignment=assigned)
        work.propagate_assignment(GroupError.NONE)
        work.transition(GroupState.STABLE)
    return work.decision(None, parked=member_id)


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    return asked is not None and asked != actual


def heartbeat(
    group: Group | None, request: HeartbeatRequest, *, now: Now, settings: GroupSettings
) -> GroupDecision[GroupError]:
    if not request.group_id:
        return GroupDecision(group, answer=GroupError.INVALID_GROUP_ID)
    if group is None:
        return GroupDecision(None, answer=GroupError.UNKNOWN_MEMBER_ID)
    work = _Work(group, now, settings)
    error = work.validate_member(request.member_id, request.instance_id)
    if error is GroupError.NONE and request.generation != work.generation:
        error = GroupError.ILLEGAL_GENERATION
    if error is not GroupError.NONE:
        return work.decision(error)
    if work.state is GroupState.EMPTY:
        return work.decision(GroupError.UNKNOWN_MEMBER_ID)
    work.reschedule_heartbeat(request.member_id)
    if work.state is GroupState.PREPARING_REBALANCE:
        return work.decision(GroupError.REBALANCE_IN_PROGRESS)
    return work.decision(GroupError.NONE)


def leave(
    group: Group | None, group_id: str, members: Sequence[LeavingMember], *, now: Now, settings: GroupSettings
) -> GroupDecision[LeaveAnswer]:
    """LeaveGroup: one member (v0-2) or several (v3+, by member id or, with an empty member id,
    by instance id)."""
    if not group_id:
        return GroupDecision(group, answer=LeaveAnswer(GroupError.INVALID_GROUP_ID, ()))
    if group is None:
        return GroupDecision(
            None, answer=LeaveAnswer(GroupError.NONE, tuple(GroupError.UNKNOWN_MEMBER_ID for _ in members))
        )
    work = _Work(group, now, settings)
    errors: list[GroupError] = []
    for leaving in members:
        error = GroupError.NONE
        if leaving.member_id == "":
            found = None if leaving.instance_id is None else work.static_member_id(leaving.instance_id)
            if found is None:
                error = GroupError.UNKNOWN_MEMBER_ID
            else:
                work.remove(found)
        elif leaving.member_id in work.pending:
            work.pending.pop(leaving.member_id)
        else:
            error = work.validate_member(leaving.member_id, leaving.instance_id)
            if error is GroupError.NONE:
                work.remove(leaving.member_id)
        errors.append(error)
    if any(e is GroupError.NONE for e in errors):
        if work.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            work.maybe_prepare_rebalance_or_complete_join()
        elif work.state is GroupState.PREPARING_REBALANCE:
            work.maybe_complete_join_phase()
    return work.decision(LeaveAnswer(GroupError.NONE, tuple(errors)))


def tick(group: Group, *, now: Now, settings: GroupSettings) -> GroupDecision[None]:
    """Fire the group's timers due at `now`, earliest first: the join phase's end (or the next
    step of the initial rebalance's delay), the SyncGroup deadline, pending members' and members'
    session timeouts. A timer set anew while firing waits for the next tick."""
    work = _Work(group, now, settings)
    for deadline, kind, member_id in work.due_timers():
        work.fire(deadline, kind, member_id)
    return work.decision(None)


def next_deadline(group: Group) -> int | None:
    """The earliest deadline (monotonic ms) at which `tick` has something to do, or None."""
    deadlines = [d for d in (group.join_deadline_ms, group.sync_deadline_ms) if d is not None]
    deadlines.extend(group.pending_members.values())
    deadlines.extend(
        m.heartbeat_deadline_ms for m in group.members.values() if m.heartbeat_deadline_ms is not None
    )
    return min(deadlines, default=None)


# --- Offsets -----------------------------------------------------------------------------------


def member_generation_error(
    group: Group, member_id: str, instance_id: str | None, generation: int
) -> GroupError:
    """Kafka's member and generation checks of an offset commit (plain or transactional) that
    names a member or a generation: the member's (`_validate_member`), then ILLEGAL_GENERATION."""
    error = _validate_member(group.members, member_id, instance_id)
    if error is not GroupError.NONE:
        return error
    return GroupError.ILLEGAL_GENERATION if generation != group.generation else GroupError.NONE


def _commit_error(group: Group | None, request: CommitRequest) -> GroupError:
    """Kafka's `validateOffsetCommit` of a classic group (the group exists)."""
    if group is None:
        return GroupError.GROUP_ID_NOT_FOUND if request.api_version >= 9 else GroupError.ILLEGAL_GENERATION
    if request.generation < 0 and group.state is GroupState.EMPTY:
        return GroupError.NONE
    if request.generation >= 0 or request.member_id or request.instance_id is not None:
        error = member_generation_error(group, request.member_id, request.instance_id, request.generation)
        if error is not GroupError.NONE:
            return error
    elif group.state is not GroupState.EMPTY:
        return GroupError.UNKNOWN_MEMBER_ID
    if group.state is GroupState.COMPLETING_REBALANCE:
        return GroupError.REBALANCE_IN_PROGRESS
    return GroupError.NONE


def commit(
    group: Group | None, request: CommitRequest, *, now: Now, settings: GroupSettings
) -> GroupDecision[tuple[GroupError, ...]]:
    """OffsetCommit: an error for every partition, or each partition's own (too much metadata)."""
    if not request.group_id:
        return GroupDecision(group, answer=tuple(GroupError.INVALID_GROUP_ID for _ in request.offsets))
    if group is None and request.generation < 0:
        group = Group(request.group_id, state_timestamp_ms=now.wall_ms)  # a standalone ("simple") group
    error = _commit_error(group, request)
    if error is not GroupError.NONE:
        return GroupDecision(group, answer=tuple(error for _ in request.offsets))
    assert group is not None
    work = _Work(group, now, settings)
    if request.member_id in work.members and work.state in (
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
    ):
        work.reschedule_heartbeat(request.member_id)
    offsets = dict(work.offsets)
    errors = []
    for item in request.offsets:
        metadata = item.metadata or ""
        if len(metadata) > settings.offset_metadata_max_bytes:
            errors.append(GroupError.OFFSET_METADATA_TOO_LARGE)
            continue
        errors.append(GroupError.NONE)
        key = (item.topic, item.partition)
        before = offsets.get(key)
        if before is not None and (before.offset, before.leader_epoch, before.metadata) == (
            item.offset,
            item.leader_epoch,
            metadata,
        ):
            continue  # the log already holds this offset
        committed = CommittedOffset(item.offset, item.leader_epoch, metadata, now.wall_ms)
        offsets[key] = committed
        work.records.append(
            group_records.offset_commit(
                request.group_id,
                item.topic,
                item.partition,
                OffsetCommitValue(item.offset, item.leader_epoch, metadata, now.wall_ms),
            )
        )
    work.offsets = offsets
    return work.decision(tuple(errors))


def delete(
    group: Group | None,
    *,
    now: Now,
    settings: GroupSettings,
    pending: Collection[TopicPartition] = frozenset(),
) -> GroupDecision[GroupError]:
    """DeleteGroups of one group: only an Empty group, its offsets, the partitions in `pending`
    (a transaction's offset of them is pending: Kafka tombstones those too) and itself
    tombstoned."""
    if group is None:
        return GroupDecision(None, answer=GroupError.GROUP_ID_NOT_FOUND)
    if group.state is not GroupState.EMPTY:
        return GroupDecision(group, answer=GroupError.NON_EMPTY_GROUP)
    records = [
        group_records.offset_commit(group.group_id, topic, partition, None)
        for topic, partition in (*group.offsets, *sorted(set(pending) - set(group.offsets)))
    ]
    records.append(group_records.group_metadata(group.group_id, None))
    return GroupDecision(None, tuple(records), GroupError.NONE)


def subscribed_topics(group: Group) -> frozenset[str] | None:
    """The topics the members of a `consumer` group subscribe to (their subscriptions for the
    group's protocol, read as ConsumerProtocolSubscription v0's prefix); None when unknown."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    if not group.members:
        return frozenset()
    if group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        parsed = _subscription_topics(member.metadata(group.protocol_name))
        if parsed is None:
            return None
        topics.update(parsed)
    return frozenset(topics)


def _subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (version i16, then [topic string]), or None."""
    if len(metadata) < 6:
        return None
    position = 2
    count = int.from_bytes(metadata[position : position + 4], "big", signed=True)
    position += 4
    if count < 0:
        return None
    topics = []
    for _ in range(count):
        if position + 2 > len(metadata):
            return None
        size = int.from_bytes(metadata[position : position + 2], "big", signed=True)
        position += 2
        if size < 0 or position + size > len(metadata):
            return None
        try:
            topics.append(metadata[position : position + size].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        position += size
    return topics


def _subscribed_to(group: Group, subscribed: frozenset[str] | None, topic: str) -> bool:
    """Kafka's `isSubscribedToTopic`, given `subscribed_topics(group)`: unknown subscriptions
    count as subscribed for `consumer` groups (and for no other)."""
    return topic in subscribed if subscribed is not None else group.protocol_type == CONSUMER_PROTOCOL_TYPE


def delete_offsets(
    group: Group | None,
    topics: Sequence[tuple[str, Sequence[int]]],
    *,
    now: Now,
    settings: GroupSettings,
    pending: Collection[TopicPartition] = frozenset(),
) -> GroupDecision[OffsetDeleteAnswer]:
    """OffsetDelete: the committed offsets of topics the group does not subscribe to (a tombstone
    also for a partition in `pending`, with a transaction's offset pending, as Kafka)."""
    if group is None:
        return GroupDecision(None, answer=OffsetDeleteAnswer(GroupError.GROUP_ID_NOT_FOUND))
    if group.state is not GroupState.EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return GroupDecision(group, answer=OffsetDeleteAnswer(GroupError.NON_EMPTY_GROUP))
    subscribed = subscribed_topics(group)
    work = _Work(group, now, settings)
    offsets = dict(work.offsets)
    answered = []
    for topic, partitions in topics:
        if _subscribed_to(group, subscribed, topic):
            answered.append((topic, tuple((p, GroupError.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions)))
            continue
        for partition in partitions:
            if offsets.pop((topic, partition), None) is not None or (topic, partition) in pending:
                work.records.append(group_records.offset_commit(group.group_id, topic, partition, None))
        answered.append((topic, tuple((p, GroupError.NONE) for p in partitions)))
    work.offsets = offsets
    return work.decision(OffsetDeleteAnswer(GroupError.NONE, tuple(answered)))


def expire_offsets(
    group: Group, *, now: Now, retention_ms: int, pending: Collection[TopicPartition] = frozenset()
) -> GroupDecision[None]:
    """Kafka's expiry of committed offsets (`offsets.retention.minutes`, KIP-211), checked every
    `offsets.retention.check.interval.ms`. Only offsets of topics the group does not subscribe
    to expire, `retention_ms` after their base time:
    * a standalone group (no protocol type: generation -1 commits): each offset's commit time;
    * an Empty group with a protocol type: the time it became Empty (its state timestamp; an
      unknown one, -1, from old records: each offset's commit time); it subscribes to nothing;
    * a Stable `consumer` group whose members' subscriptions are known: each commit time;
    * any other group (a rebalance in progress, unknown subscriptions, another protocol type
      with members) keeps every offset.
    An offset of a partition in `pending` (a transaction's offset of it is pending) does not expire
    yet, as Kafka. Each expired offset gets a tombstone. An Empty group left with no offset (all
    expired, or none committed) and no pending one is removed with a tombstone of its metadata:
    Kafka's "Dead". Nothing to do: no records and the group as it was."""
    subscribed = subscribed_topics(group)
    if group.protocol_type is None or (
        group.state is GroupState.STABLE
        and group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and subscribed is not None
    ):
        state_time = None
    elif group.state is GroupState.EMPTY:
        state_time = group.state_timestamp_ms if group.state_timestamp_ms >= 0 else None
    else:
        return GroupDecision(group)
    kept: dict[TopicPartition, CommittedOffset] = {}
    records: list[CoordinatorRecord] = []
    for (topic, partition), committed in group.offsets.items():
        since = committed.commit_timestamp_ms if state_time is None else state_time
        if (
            _subscribed_to(group, subscribed, topic)
            or now.wall_ms - since < retention_ms
            or (topic, partition) in pending
        ):
            kept[(topic, partition)] = committed
        else:
            records.append(group_records.offset_commit(group.group_id, topic, partition, None))
    if not kept and not pending and group.state is GroupState.EMPTY:
        records.append(group_records.group_metadata(group.group_id, None))
        return GroupDecision(None, tuple(records))
    if not records:
        return GroupDecision(group)
    return GroupDecision(replace(group, offsets=kept), tuple(records))


# --- Reads -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # only while Stable
    assignment: bytes


@dataclass(frozen=True, slots=True)
class Description:
    state: GroupState
    protocol_type: str
    protocol_data: str  # the protocol while Stable, else ""
    members: tuple[DescribedMember, ...]


def describe(group: Group | None) -> Description:
    """DescribeGroups of one group (Kafka's `describeGroups`); an unknown group is Dead."""
    if group is None:
        return Description(GroupState.DEAD, "", "", ())
    stable = group.state is GroupState.STABLE
    return Description(
        group.state,
        group.protocol_type or "",
        (group.protocol_name or "") if stable else "",
        tuple(
            DescribedMember(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment,
            )
            for m in group.members.values()
        ),
    )


def listed(group: Group, *, states: Iterable[str], types: Iterable[str]) -> bool:
    """Whether ListGroups' filters keep `group` (case-insensitive; an empty filter keeps all)."""
    wanted_states = {s.strip().lower() for s in states}
    wanted_types = {t.strip().lower() for t in types}
    return (not wanted_states or group.state.value.lower() in wanted_states) and (
        not wanted_types or CLASSIC_GROUP_TYPE in wanted_types
    )


# --- Loading -----------------------------------------------------------------------------------


class GroupLoader:
    """The groups of one `__consumer_offsets` partition, rebuilt by replaying its records in log
    order: the last GroupMetadataValue of a group (a tombstone removes it), the last
    OffsetCommitValue of each of its partitions (a tombstone removes that offset). A group exists
    once loaded when it has metadata or an offset; it is Stable with its members (each with a
    session from `now`) or Empty without. Replay costs O(1) per record."""

    def __init__(self) -> None:
        self._metadata: dict[str, GroupMetadataValue] = {}
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.records = 0

    def replay(self, record: CoordinatorRecord) -> None:
        self.records += 1
        key = record.key
        if isinstance(key, group_records.GroupMetadataKey):
            if record.value is None:
                self._metadata.pop(key.group, None)
            else:
                assert isinstance(record.value, GroupMetadataValue)
                self._metadata[key.group] = record.value
            return
        if record.value is None:
            offsets = self._offsets.get(key.group)
            if offsets is not None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self._offsets[key.group]
            return
        value = record.value
        assert isinstance(value, OffsetCommitValue)
        self._offsets.setdefault(key.group, {})[(key.topic, key.partition)] = CommittedOffset(
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms
        )

    def groups(self, *, now: Now) -> dict[str, Group]:
        out: dict[str, Group] = {}
        for group_id in sorted(set(self._metadata) | set(self._offsets)):
            offsets = self._offsets.get(group_id, {})
            value = self._metadata.get(group_id)
            out[group_id] = (
                _loaded(group_id, value, offsets, now) if value else Group(group_id, offsets=offsets)
            )
        return out


def _loaded(
    group_id: str, value: GroupMetadataValue, offsets: Mapping[TopicPartition, CommittedOffset], now: Now
) -> Group:
    members = {
        m.member_id: Member(
            member_id=m.member_id,
            instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.session_timeout_ms
            if m.rebalance_timeout_ms == -1
            else m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=(Protocol(value.protocol or "", m.subscription),),
            assignment=m.assignment,
            heartbeat_deadline_ms=now.monotonic_ms + m.session_timeout_ms,
        )
        for m in value.members
    }
    state = GroupState.STABLE if members else GroupState.EMPTY
    return Group(
        group_id,
        state=state,
        previous_state=state,
        state_timestamp_ms=value.current_state_timestamp_ms,
        generation=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader if value.leader in members else next(iter(members), None),
        members=members,
        offsets=offsets,
    )
