"""Property-based stateful test of the whole pure domain.

A hypothesis `RuleBasedStateMachine` drives random sequences of registrations, heartbeats (with
wantFence, wantShutDown and offline dirs), directory assignments (including LOST and other
brokers' dirs), AlterPartition, reassignments (started, replaced, cancelled, completed by the ISR), topic creation and deletion, session expiry with fake time,
controller restarts (fresh sessions) and unregistration. Every decision's records are replayed
into the image, and after every step the safety invariants of protocol §1 and §3.6 (and the
ones kafka-implementation-notes §10 lists) are checked, plus: replaying the whole log from
scratch, and the image's own snapshot, both give an equal image.

Runs `JBOD_STATEFUL_EXAMPLES` (default 600) sequences of up to `JBOD_STATEFUL_STEPS` (default 50)
steps.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jbod_core import assignments, brokers, isr, reassignment, records, topics
from jbod_core.errors import ErrorCode
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR, Uuid, is_online
from jbod_core.image import ClusterImage, PartitionKey, PartitionRegistration
from jbod_core.messages import (
    AlterPartitionRequest,
    AlterReassignmentsRequest,
    AssignReplicasToDirsRequest,
    CreateTopicRequest,
)
from jbod_core.sessions import Session, session_alive
from tests.core.support import SESSION_TIMEOUT, Cluster, d, incarnation

BROKER_IDS = (1, 2, 3, 4)
HOME_DIRS = 3  # each broker has a pool of dirs it may register
TOPIC_NAMES = ("a", "b", "c")
UNKNOWN_TOPIC = Uuid(0x0DEAD, 0xBEEF)

picks = st.integers(min_value=0, max_value=10_000)


def _home(broker_id: int, index: int) -> Uuid:
    return d(broker_id * 10 + index)


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster()
        self.generation: dict[int, int] = {}
        self.next_fresh = 10_000  # fresh dir ids never used before
        # Per decision: (broker, newly offline dirs) whose effects are checked right after the step.
        self.reported_offline: list[tuple[int, set[Uuid]]] = []

    # -- helpers -----------------------------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self.cluster.image

    def fresh_dir(self) -> Uuid:
        self.next_fresh += 1
        return d(self.next_fresh)

    def partitions(self) -> list[tuple[PartitionKey, PartitionRegistration]]:
        return sorted(self.image.iter_partitions(), key=lambda kv: (kv[0][0], kv[0][1]))

    def apply(self, produced: Sequence[records.Record]) -> None:
        self.cluster.apply(produced)

    def acceptable(self, broker_id: int, directory: Uuid) -> bool:
        reg = self.image.brokers.get(broker_id)
        return (
            reg is not None
            and not reg.fenced
            and not reg.in_controlled_shutdown
            and is_online(directory, reg.log_dirs)
        )

    def unchanged_on_error(self, produced: Sequence[records.Record], error_code: int) -> None:
        if error_code != 0:
            assert produced == [], f"error {error_code} wrote {produced}"

    # -- set-up ------------------------------------------------------------------------------

    @initialize(
        dir_counts=st.lists(st.integers(1, HOME_DIRS), min_size=len(BROKER_IDS), max_size=len(BROKER_IDS)),
        unfence=st.lists(st.booleans(), min_size=len(BROKER_IDS), max_size=len(BROKER_IDS)),
        topic_sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), max_size=2),
        seed=st.integers(0, 2**16),
    )
    def start(
        self, dir_counts: list[int], unfence: list[bool], topic_sizes: list[tuple[int, int]], seed: int
    ) -> None:
        for broker_id, count, up in zip(BROKER_IDS, dir_counts, unfence, strict=True):
            if broker_id == BROKER_IDS[-1] and not up:
                continue  # sometimes one broker starts unregistered
            self.generation[broker_id] = 0
            produced, reply = self.cluster.register(broker_id, [_home(broker_id, i) for i in range(count)])
            assert reply.error_code == 0
            self.apply(produced)
            self.cluster.sessions[broker_id] = Session(last_contact=self.cluster.now)
            if up or broker_id == BROKER_IDS[0]:
                produced, beat = self.cluster.heartbeat(broker_id)
                assert beat.error_code == 0 and not beat.is_fenced
                self.apply(produced)
        active = len(topics.active_brokers(self.image))
        for name, (partitions, factor) in zip(TOPIC_NAMES, topic_sizes, strict=False):
            request = CreateTopicRequest(
                name=name, num_partitions=partitions, replication_factor=min(factor, active)
            )
            produced, created = topics.create_topic(self.image, request, rng=random.Random(seed))
            assert created.error_code == 0
            self.apply(produced)

    # -- broker lifecycle --------------------------------------------------------------------

    @rule(
        broker_id=st.sampled_from(BROKER_IDS),
        new_incarnation=st.booleans(),
        dir_picks=st.lists(st.integers(0, HOME_DIRS - 1), max_size=3),
        extra=st.sampled_from(["none", "none", "none", "foreign", "reserved", "fresh", "duplicate"]),
        other=picks,
    )
    def register(
        self, broker_id: int, new_incarnation: bool, dir_picks: list[int], extra: str, other: int
    ) -> None:
        existing = self.image.brokers.get(broker_id)
        if existing is None or new_incarnation:
            generation = self.generation.get(broker_id, -1) + 1
            dirs = [_home(broker_id, i) for i in dir_picks]
        else:
            generation = self.generation[broker_id]
            # The same incarnation names dirs it registered before (online or offline); "fresh"
            # below adds a dir no partition names. (A re-registration that brings back a dir a
            # leaderless partition names does not elect: §3.1 asks for no election there.)
            registered = sorted(set(existing.log_dirs) | set(existing.offline_log_dirs))
            dirs = [registered[i % len(registered)] for i in dir_picks] if registered else []
        dirs = list(dict.fromkeys(dirs))
        if extra == "foreign":
            owned = sorted(u for u, owner in self.image.dir_owner.items() if owner != broker_id)
            if owned:
                dirs.append(owned[other % len(owned)])
        elif extra == "reserved":
            dirs.append(Uuid(0, other % 100))
        elif extra == "fresh":
            dirs.append(self.fresh_dir())
        elif extra == "duplicate" and dirs:
            dirs.append(dirs[0])
        produced, reply = self.cluster.register(broker_id, dirs, generation=generation)
        self.unchanged_on_error(produced, reply.error_code)

        is_new = existing is None or existing.incarnation_id != incarnation(broker_id, generation)
        alive = session_alive(self.cluster.sessions, broker_id, now=self.cluster.now, timeout=SESSION_TIMEOUT)
        foreign_online = any(self.image.dir_owner.get(u, broker_id) != broker_id for u in dirs)
        if existing is not None and is_new and not existing.fenced and alive:
            expected = ErrorCode.DUPLICATE_BROKER_REGISTRATION
        elif not dirs or any(u.is_reserved for u in dirs) or len(set(dirs)) != len(dirs) or foreign_online:
            expected = ErrorCode.INVALID_REQUEST
        else:
            expected = ErrorCode.NONE
        assert reply.error_code == expected, (reply, dirs)
        if reply.error_code != 0:
            return
        start = self.image.end_offset
        self.apply(produced)
        self.generation[broker_id] = generation
        self.cluster.sessions[broker_id] = Session(last_contact=self.cluster.now)
        reg = self.image.brokers[broker_id]
        register_offset = start + len(produced) - 1
        assert isinstance(self.cluster.log[register_offset], records.RegisterBrokerRecord)
        if is_new:
            assert reply.broker_epoch == reg.broker_epoch == register_offset
            assert reg.fenced and not reg.in_controlled_shutdown
            assert reg.offline_log_dirs == ()
        else:
            assert existing is not None
            assert reply.broker_epoch == reg.broker_epoch == existing.broker_epoch
            assert reg.fenced == existing.fenced
            assert reg.in_controlled_shutdown == existing.in_controlled_shutdown
            assert set(existing.offline_log_dirs) <= set(reg.offline_log_dirs)
            dropped = set(existing.log_dirs) - set(dirs)
            if dropped:
                self.reported_offline.append((broker_id, dropped))

    @rule(
        broker_id=st.sampled_from(BROKER_IDS),
        want_fence=st.booleans(),
        want_shut_down=st.sampled_from([False, False, True]),
        offline_picks=st.lists(picks, max_size=2),
        unknown_offline=st.sampled_from([False, False, False, False, True]),
        lagging=st.sampled_from([False, False, False, True]),
        stale=st.sampled_from([False, False, False, False, True]),
    )
    def heartbeat(
        self,
        broker_id: int,
        want_fence: bool,
        want_shut_down: bool,
        offline_picks: list[int],
        unknown_offline: bool,
        lagging: bool,
        stale: bool,
    ) -> None:
        reg = self.image.brokers.get(broker_id)
        epoch = 0 if reg is None else reg.broker_epoch + (1 if stale else 0)
        registered = [] if reg is None else sorted(set(reg.log_dirs) | set(reg.offline_log_dirs))
        offline = [registered[p % len(registered)] for p in offline_picks] if registered else []
        if unknown_offline:
            offline.append(self.fresh_dir())
        offset = (epoch - 1) if lagging else self.image.end_offset - 1
        produced, reply = self.cluster.heartbeat(
            broker_id,
            epoch=epoch,
            offset=offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
            offline=offline,
        )
        self.unchanged_on_error(produced, reply.error_code)
        if reg is None or stale:
            assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH
            return
        if unknown_offline:
            assert reply.error_code == ErrorCode.LOG_DIR_NOT_FOUND
            return
        assert reply.error_code == 0
        assert reply.is_caught_up == (offset >= reg.broker_epoch)
        self.apply(produced)
        session = self.cluster.sessions.setdefault(broker_id, Session(last_contact=self.cluster.now))
        session.last_contact = self.cluster.now
        session.metadata_offset = offset
        after = self.image.brokers[broker_id]
        assert not set(offline) & set(after.log_dirs)
        assert set(offline) <= set(after.offline_log_dirs)
        newly = set(offline) & set(reg.log_dirs)
        if newly:
            self.reported_offline.append((broker_id, newly))
        else:
            assert all(
                not isinstance(r, records.BrokerRegistrationChangeRecord) or r.log_dirs is None
                for r in produced
            )
        assert reply.is_fenced == after.fenced
        if reply.should_shut_down:
            assert after.fenced and not after.in_controlled_shutdown
        # The state table (kafka-implementation-notes §4.2 plus the JBOD gate).
        if reg.fenced:
            gate_open = not reg.is_multi_dir or self.image.unassigned_count(broker_id) == 0
            unfence = not want_shut_down and not want_fence and offset >= reg.broker_epoch and gate_open
            assert after.fenced == (not unfence)
            assert reply.should_shut_down == want_shut_down
        elif not reg.in_controlled_shutdown:
            if want_fence or want_shut_down:
                assert after.fenced or after.in_controlled_shutdown
            else:
                assert not after.fenced and not after.in_controlled_shutdown
        if after.in_controlled_shutdown:
            assert self.image.leader_count(broker_id) == 0

    @rule(dt=st.floats(min_value=0.0, max_value=2 * SESSION_TIMEOUT, allow_nan=False))
    def advance_time(self, dt: float) -> None:
        """Fake time moves on; expiry is noticed only by `expire_sessions`, as in the controller."""
        self.cluster.now += dt

    @rule()
    def expire_sessions(self) -> None:
        produced, fenced = brokers.expire_sessions(
            self.image, self.cluster.sessions, now=self.cluster.now, session_timeout=SESSION_TIMEOUT
        )
        self.apply(produced)
        assert fenced == sorted(fenced)
        for broker_id in fenced:
            assert self.image.brokers[broker_id].fenced
        for reg in self.image.brokers.values():
            if not reg.fenced:
                assert session_alive(
                    self.cluster.sessions, reg.broker_id, now=self.cluster.now, timeout=SESSION_TIMEOUT
                )

    @rule()
    def controller_restart(self) -> None:
        """Sessions are soft state: a restarted controller gives every unfenced broker a fresh one."""
        self.cluster.sessions = {
            reg.broker_id: Session(last_contact=self.cluster.now)
            for reg in self.image.brokers.values()
            if not reg.fenced
        }
        restarted = self.cluster.replayed_from_scratch()
        assert restarted.canonical() == self.image.canonical()

    @rule(broker_id=st.sampled_from(BROKER_IDS), dice=st.integers(0, 3))
    def unregister(self, broker_id: int, dice: int) -> None:
        if dice:
            return  # rarer than the other rules
        known = broker_id in self.image.brokers
        produced, reply = brokers.unregister_broker(self.image, broker_id)
        self.unchanged_on_error(produced, reply.error_code)
        assert reply.error_code == (0 if known else ErrorCode.BROKER_ID_NOT_REGISTERED)
        self.apply(produced)
        self.cluster.sessions.pop(broker_id, None)
        assert broker_id not in self.image.brokers
        assert broker_id not in self.image.dir_owner.values()

    # -- directories and ISR -----------------------------------------------------------------

    @rule(
        broker_id=st.sampled_from(BROKER_IDS),
        destination=st.sampled_from(
            [
                "own",
                "own",
                "own",
                "own-offline",
                "home",
                "foreign",
                "lost",
                "unassigned",
                "migrating",
                "fresh",
            ]
        ),
        partition_picks=st.lists(picks, min_size=1, max_size=3),
        unknown=st.sampled_from([None, None, None, None, "topic", "index"]),
        choice=picks,
        stale=st.sampled_from([False, False, False, False, False, True]),
    )
    def assign(
        self,
        broker_id: int,
        destination: str,
        partition_picks: list[int],
        unknown: str | None,
        choice: int,
        stale: bool,
    ) -> None:
        reg = self.image.brokers.get(broker_id)
        online = list(reg.log_dirs) if reg else []
        offline = list(reg.offline_log_dirs) if reg else []
        foreign = sorted(u for u, owner in self.image.dir_owner.items() if owner != broker_id)
        pools = {
            "own": online,
            "own-offline": offline,
            "home": [_home(broker_id, i) for i in range(HOME_DIRS)],
            "foreign": foreign,
            "lost": [LOST_DIR],
            "unassigned": [UNASSIGNED_DIR],
            "migrating": [MIGRATING_DIR],
            "fresh": [self.fresh_dir()],
        }
        pool = pools[destination] or [LOST_DIR]
        directory = pool[choice % len(pool)]
        parts = self.partitions()
        entries: list[tuple[Uuid, int]] = [parts[p % len(parts)][0] for p in partition_picks if parts]
        if unknown == "topic":
            entries.append((UNKNOWN_TOPIC, 0))
        elif unknown == "index" and parts:
            entries.append((parts[0][0][0], 999))
        if not entries:
            return
        by_topic: dict[Uuid, list[int]] = {}
        for topic_id, index in entries:
            by_topic.setdefault(topic_id, []).append(index)
        epoch = (reg.broker_epoch if reg else 0) + (1 if stale else 0)
        request = AssignReplicasToDirsRequest.model_validate(
            {
                "brokerId": broker_id,
                "brokerEpoch": epoch,
                "directories": [
                    {
                        "id": str(directory),
                        "topics": [
                            {"topicId": str(t), "partitions": [{"partitionIndex": i} for i in indexes]}
                            for t, indexes in by_topic.items()
                        ],
                    }
                ],
            }
        )
        before = {key: self.image.partition(key) for key in set(entries)}
        produced, reply = assignments.assign_replicas_to_dirs(self.image, request)
        self.unchanged_on_error(produced, reply.error_code)
        if reg is None or stale:
            assert reply.error_code == ErrorCode.STALE_BROKER_EPOCH
            assert reply.directories == []
            return
        assert reply.error_code == 0
        results = [
            (t.topic_id, p.partition_index, p.error_code)
            for t in reply.directories[0].topics
            for p in t.partitions
        ]
        assert [(t, i) for t, i, _ in results] == [(t, i) for t, indexes in by_topic.items() for i in indexes]
        for topic_id, index, code in results:
            part = before[(topic_id, index)]
            if topic_id not in self.image.topics:
                assert code == ErrorCode.UNKNOWN_TOPIC_ID
            elif part is None:
                assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif broker_id not in part.replicas:
                assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                assert code == 0
        self.apply(produced)
        offline_target = not is_online(directory, reg.log_dirs)
        for topic_id, index, code in results:
            if code != 0:
                continue
            part = self.image.partition((topic_id, index))
            assert part is not None
            assert part.directory_of(broker_id) == directory
            if offline_target:
                assert part.leader != broker_id
                assert broker_id not in part.isr or part.isr == (broker_id,)

    @rule(
        partition_pick=picks,
        subset=st.lists(st.booleans(), min_size=4, max_size=4),
        requester=st.sampled_from(["leader", "leader", "leader", "other"]),
        epoch_error=st.sampled_from([None, None, None, None, "leader", "partition"]),
        junk=st.sampled_from([None, None, None, None, None, "drop-leader", "outsider", "duplicate"]),
    )
    def alter_partition(
        self,
        partition_pick: int,
        subset: list[bool],
        requester: str,
        epoch_error: str | None,
        junk: str | None,
    ) -> None:
        parts = self.partitions()
        if not parts:
            return
        key, part = parts[partition_pick % len(parts)]
        if requester == "leader" and part.leader != -1:
            broker_id = part.leader
        else:
            candidates = sorted(b for b in self.image.brokers if b != part.leader)
            if not candidates:
                return
            broker_id = candidates[partition_pick % len(candidates)]
        leader_epoch = part.leader_epoch + (1 if epoch_error == "leader" else 0)
        partition_epoch = part.partition_epoch - (1 if epoch_error == "partition" else 0)
        new_isr = [b for b, keep in zip(part.replicas, subset, strict=False) if keep or b == part.leader]
        if junk == "drop-leader":
            new_isr = [b for b in new_isr if b != part.leader]
        elif junk == "outsider":
            new_isr.append(99)
        elif junk == "duplicate" and new_isr:
            new_isr.append(new_isr[0])
        request = AlterPartitionRequest.model_validate(
            {
                "brokerId": broker_id,
                "brokerEpoch": self.image.brokers[broker_id].broker_epoch,
                "topics": [
                    {
                        "topicId": str(key[0]),
                        "partitions": [
                            {
                                "partitionIndex": key[1],
                                "leaderEpoch": leader_epoch,
                                "partitionEpoch": partition_epoch,
                                "newIsr": new_isr,
                            }
                        ],
                    }
                ],
            }
        )
        produced, reply = isr.alter_partition(self.image, request)
        assert reply.error_code == 0
        [result] = reply.topics[0].partitions
        self.unchanged_on_error(produced, result.error_code)
        if broker_id != part.leader:
            expected = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif epoch_error == "leader":
            expected = ErrorCode.FENCED_LEADER_EPOCH
        elif epoch_error == "partition":
            expected = ErrorCode.INVALID_UPDATE_VERSION
        elif (
            len(set(new_isr)) != len(new_isr)
            or broker_id not in new_isr
            or not set(new_isr) <= set(part.replicas)
        ):
            expected = ErrorCode.INVALID_REQUEST
        elif any(b not in part.isr and not self.acceptable(b, part.directory_of(b)) for b in new_isr):
            expected = ErrorCode.INELIGIBLE_REPLICA
        else:
            expected = ErrorCode.NONE
        assert result.error_code == expected, (result, part, new_isr)
        self.apply(produced)
        after = self.image.partition(key)
        assert after is not None
        if expected == 0 and part.reassigning and set(part.adding_replicas) <= set(new_isr):
            target = part.target_replicas
            if after.reassigning:  # complete waits only while no target replica in the ISR may lead
                assert not any(b in new_isr and self.acceptable(b, part.directory_of(b)) for b in target)
            else:
                assert after.replicas == target
                assert after.isr == tuple(b for b in new_isr if b in target)
                assert after.leader in after.isr
                assert (result.leader, result.partition_epoch) == (after.leader, after.partition_epoch)
                return
        if expected == 0:
            assert after.isr == tuple(new_isr)
            assert (after.leader, after.leader_epoch) == (part.leader, part.leader_epoch)
            assert after.partition_epoch == part.partition_epoch + (0 if tuple(new_isr) == part.isr else 1)
            assert (result.leader, result.leader_epoch, result.partition_epoch, result.isr) == (
                after.leader,
                after.leader_epoch,
                after.partition_epoch,
                list(after.isr),
            )

    @rule(
        partition_pick=picks,
        replicas=st.none()
        | st.lists(st.sampled_from(BROKER_IDS), min_size=1, max_size=3, unique=True)
        | st.lists(st.sampled_from(BROKER_IDS), min_size=1, max_size=3, unique=True)
        | st.lists(st.sampled_from((*BROKER_IDS, 9)), max_size=3),
        allow_rf=st.sampled_from([True, True, True, False]),
    )
    def reassign(self, partition_pick: int, replicas: list[int] | None, allow_rf: bool) -> None:
        target = replicas
        parts = self.partitions()
        if not parts:
            return
        (topic_id, index), part = parts[partition_pick % len(parts)]
        name = self.image.topics[topic_id].name
        request = AlterReassignmentsRequest.model_validate(
            {
                "partitions": [{"topic": name, "partition": index, "replicas": target}],
                "allowReplicationFactorChange": allow_rf,
            }
        )
        produced, reply = reassignment.alter_reassignments(self.image, request)
        [result] = reply.results
        self.unchanged_on_error(produced, result.error_code)
        if target is None and not part.reassigning:
            assert result.error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        elif target is not None and (
            not target or len(set(target)) != len(target) or any(b not in self.image.brokers for b in target)
        ):
            assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        elif target is not None and not allow_rf and len(target) != len(part.original_replicas):
            assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
        self.apply(produced)
        after = self.image.partition((topic_id, index))
        assert after is not None
        if result.error_code != 0:
            assert after == part
            return
        goal = part.original_replicas if target is None else tuple(target)
        if after.reassigning:
            assert after.target_replicas == goal
            assert set(after.adding_replicas) == set(goal) - set(part.original_replicas)
            assert any(b not in after.isr for b in after.adding_replicas) or not any(
                self.acceptable(b, after.directory_of(b)) for b in goal if b in after.isr
            )
        else:
            assert after.replicas == goal or (target is None and set(after.replicas) == set(goal))
        # Brokers that stay replicas keep their dirs.
        for broker_id in set(part.replicas) & set(after.replicas):
            assert after.directory_of(broker_id) == part.directory_of(broker_id)

    # -- topics ------------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(TOPIC_NAMES),
        partitions=st.integers(1, 3),
        factor=st.integers(1, 3),
        manual=st.none()
        | st.none()
        | st.lists(
            st.lists(st.sampled_from(BROKER_IDS), min_size=1, max_size=3, unique=True), min_size=1, max_size=3
        ),
        clamp=st.sampled_from([True, True, True, False]),
        seed=st.integers(0, 2**16),
    )
    def create_topic(
        self, name: str, partitions: int, factor: int, manual: list[list[int]] | None, clamp: bool, seed: int
    ) -> None:
        if clamp:
            factor = max(1, min(factor, len(topics.active_brokers(self.image))))
        if manual is None:
            request = CreateTopicRequest(name=name, num_partitions=partitions, replication_factor=factor)
        else:
            request = CreateTopicRequest(name=name, replica_assignment=manual)
        produced, reply = topics.create_topic(self.image, request, rng=random.Random(seed))
        self.unchanged_on_error(produced, reply.error_code)
        active = topics.active_brokers(self.image)
        if name in self.image.topic_ids_by_name:
            assert reply.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        elif manual is None:
            assert reply.error_code == (0 if factor <= len(active) else ErrorCode.INVALID_REPLICATION_FACTOR)
        else:
            valid = (
                all(len(r) == len(manual[0]) for r in manual)
                and all(len(set(r)) == len(r) for r in manual)
                and all(b in self.image.brokers for r in manual for b in r)
                and all(any(b in active for b in r) for r in manual)
            )
            assert reply.error_code == (0 if valid else ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        if reply.error_code != 0:
            return
        self.apply(produced)
        topic_id = reply.topic_id
        assert topic_id is not None and not topic_id.is_reserved
        for _, part in sorted(self.image.topics[topic_id].partitions.items()):
            assert part.isr == tuple(b for b in part.replicas if b in active)
            assert part.leader == part.isr[0]
            assert (part.leader_epoch, part.partition_epoch) == (0, 0)
            for broker_id, directory in zip(part.replicas, part.directories, strict=True):
                online = self.image.brokers[broker_id].log_dirs
                assert directory == (online[0] if len(online) == 1 else UNASSIGNED_DIR)

    @rule(name=st.sampled_from(TOPIC_NAMES), dice=st.integers(0, 2))
    def delete_topic(self, name: str, dice: int) -> None:
        if dice:
            return  # rarer than the other rules
        exists = name in self.image.topic_ids_by_name
        produced, reply = topics.delete_topic(self.image, name)
        self.unchanged_on_error(produced, reply.error_code)
        assert reply.error_code == (0 if exists else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self.apply(produced)
        assert name not in self.image.topic_ids_by_name

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offline_reports_took_effect(self) -> None:
        """After an offline-dir report (or a re-registration dropping a dir), the broker is in no
        ISR of a partition whose replica sits in one of those dirs, unless it is the last member,
        and leads none of them (kafka-implementation-notes §10, property 2)."""
        for broker_id, dirs in self.reported_offline:
            reg = self.image.brokers.get(broker_id)
            if reg is not None:
                assert not dirs & set(reg.log_dirs)
            for _, part in self.partitions():
                if broker_id in part.replicas and part.directory_of(broker_id) in dirs:
                    assert part.leader != broker_id
                    assert broker_id not in part.isr or part.isr == (broker_id,)
        self.reported_offline.clear()

    @invariant()
    def partitions_are_sound(self) -> None:
        for key, part in self.partitions():
            assert len(part.directories) == len(part.replicas), key
            assert len(set(part.replicas)) == len(part.replicas), key
            assert part.isr, f"empty ISR in {key}"
            assert len(set(part.isr)) == len(part.isr), key
            assert set(part.isr) <= set(part.replicas), key
            adding, removing = set(part.adding_replicas), set(part.removing_replicas)
            assert (adding | removing) <= set(part.replicas) and not adding & removing, key
            assert part.reassigning == (key in self.image.reassigning), key
            if part.leader != records.NO_LEADER:
                # Leader in the ISR, registered, unfenced, not shutting down, its dir online.
                assert part.leader in part.isr, (key, part)
                assert self.acceptable(part.leader, part.directory_of(part.leader)), (key, part)
            else:
                # No leader only when no ISR member could lead (elections are never missed).
                assert not any(self.acceptable(b, part.directory_of(b)) for b in part.isr), (key, part)
            if len(part.isr) > 1:
                # Only the last ISR member may be offline, fenced or shutting down.
                for broker_id in part.isr:
                    assert self.acceptable(broker_id, part.directory_of(broker_id)), (key, part, broker_id)

    @invariant()
    def registrations_are_sound(self) -> None:
        online: list[Uuid] = []
        for reg in self.image.brokers.values():
            assert not set(reg.log_dirs) & set(reg.offline_log_dirs)
            assert not any(u.is_reserved for u in reg.log_dirs)
            assert not (reg.fenced and reg.in_controlled_shutdown)
            online.extend(reg.log_dirs)
        assert len(online) == len(set(online)), "a dir is online in two brokers"

    @invariant()
    def indexes_and_replays_agree(self) -> None:
        self.image.check_indexes()
        assert self.image.end_offset == len(self.cluster.log)
        assert self.cluster.replayed_from_scratch().canonical() == self.image.canonical()
        snapshot = ClusterImage()
        for record in self.image.to_records():
            snapshot.replay(record, self.image.end_offset)
        snapshot.check_indexes()
        assert snapshot.canonical() == self.image.canonical()
        for record in self.cluster.log[-20:]:
            assert records.decode(record.TYPE, record.to_data()) == record


ControllerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("JBOD_STATEFUL_EXAMPLES", "600")),
    stateful_step_count=int(os.environ.get("JBOD_STATEFUL_STEPS", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestControllerStateMachine = ControllerMachine.TestCase
