"""Drains and rebalances (`jbod_operator.drain`): pure decisions over one snapshot.

Covers: a scale-down reassigns every replica of the leaving broker by free bytes, in the leaving
replica's position, never twice on one broker, at most N partitions at once and never a partition
already being reassigned; refusals up front (replication factor, space, a fenced broker) change
nothing; a started drain waits instead of refusing; a disk drain moves to the broker's other
online, not-cordoned dirs by free bytes, skipping running moves, and refuses when nothing fits;
`decide` cordons before moving, sets Kafka's throttles while partitions move and clears them
after, lifts its cordons once the drain is over (a removed disk's once the broker runs without
it) or reverted, and survives a restart (its record is JSON); the rebalance fills new brokers to their share.
"""

from __future__ import annotations

from dataclasses import replace

from jbod_operator import drain

GB = 10**9


def log_dir(
    broker_id: int, disk: str, *, free: int = 100 * GB, online: bool = True, cordoned: bool = False
) -> drain.LogDir:
    return drain.LogDir(
        directory_id=f"b{broker_id}-{disk}",
        path=f"/var/lib/jbod/disks/{disk}/log",
        online=online,
        cordoned=cordoned,
        usable_bytes=free,
        total_bytes=0,
    )


def brokers(
    count: int, *, free: dict[int, int] | None = None, fenced: frozenset[int] = frozenset()
) -> dict[int, drain.Broker]:
    free = free or {}
    return {
        b: drain.Broker(
            broker_id=b,
            fenced=b in fenced,
            accepts_new_replicas=b not in fenced,
            dirs=(log_dir(b, "d0", free=free.get(b, 100 * GB)), log_dir(b, "d1", free=free.get(b, 100 * GB))),
        )
        for b in range(count)
    }


def partition(
    topic: str, index: int, replicas: tuple[int, ...], disk: str = "d0", **kw: tuple[int, ...]
) -> drain.Partition:
    return drain.Partition(topic, index, replicas, tuple(f"b{b}-{disk}" for b in replicas), **kw)


def snap(count: int, partitions: list[drain.Partition], *, size: int = GB, **kw: object) -> drain.Snapshot:
    sizes = {(p.topic, p.index, b): size for p in partitions for b in p.replicas}
    return drain.Snapshot(brokers=brokers(count, **kw), partitions=tuple(partitions), sizes=sizes)  # type: ignore[arg-type]


def test_scale_down_replaces_the_leaving_replica_in_its_position_by_free_bytes() -> None:
    s = drain.Snapshot(
        brokers=brokers(4, free={0: 10 * GB, 1: 50 * GB, 2: 80 * GB}),
        partitions=(partition("t", 0, (3, 0, 1)), partition("t", 1, (2, 3, 0))),
        sizes={("t", 0, 3): GB, ("t", 1, 3): GB},
    )
    plan = drain.plan_broker_drain(s, leaving=frozenset({3}), started=False, max_in_flight=5)
    assert plan.refused == ()
    assert [(r.topic, r.partition, r.replicas) for r in plan.start] == [
        ("t", 0, (2, 0, 1)),
        ("t", 1, (2, 1, 0)),
    ]
    assert plan.progress == drain.Progress(replicas=2, bytes=2 * GB, in_flight=0)


def test_scale_down_is_bounded_and_skips_partitions_being_reassigned() -> None:
    parts = [partition("t", i, (3, 0)) for i in range(6)]
    parts[0] = partition("t", 0, (1, 0, 3), adding=(1,), removing=(3,))
    plan = drain.plan_broker_drain(snap(4, parts), leaving=frozenset({3}), started=True, max_in_flight=3)
    assert [r.partition for r in plan.start] == [1, 2]  # 3 in flight at most, one already moving
    assert plan.progress.in_flight == 1
    assert all(len(set(r.replicas)) == len(r.replicas) and 3 not in r.replicas for r in plan.start)


def test_scale_down_below_the_replication_factor_is_refused() -> None:
    s = snap(4, [partition("t", 0, (0, 1, 2)), partition("t", 1, (1, 2, 3))])
    plan = drain.plan_broker_drain(s, leaving=frozenset({2, 3}), started=False, max_in_flight=5)
    assert plan.start == () and plan.refused
    assert "t-0 has 3 replicas" in plan.refused[0] and "only 2" in plan.refused[0]


def test_scale_down_without_room_is_refused_with_needed_and_free() -> None:
    s = snap(3, [partition("t", 0, (2, 0))], size=30 * GB, free={0: 10 * GB, 1: 10 * GB})
    plan = drain.plan_broker_drain(s, leaving=frozenset({2}), started=False, max_in_flight=5)
    assert plan.start == ()
    assert any("no room for partition t-0" in line for line in plan.refused)
    assert any(f"needs {30 * GB} bytes, {40 * GB} bytes free" in line for line in plan.refused)


def test_a_fenced_remaining_broker_refuses_a_drain_that_needs_it() -> None:
    s = snap(3, [partition("t", 0, (0, 2))], fenced=frozenset({1}))
    plan = drain.plan_broker_drain(s, leaving=frozenset({2}), started=False, max_in_flight=5)
    assert plan.refused and "broker 1 is fenced" in plan.refused[0]
    started = drain.plan_broker_drain(s, leaving=frozenset({2}), started=True, max_in_flight=5)
    assert started.refused == () and started.waiting and started.start == ()


def test_disk_drain_moves_to_the_other_dirs_by_free_bytes_and_skips_running_moves() -> None:
    b = drain.Broker(
        broker_id=0,
        fenced=False,
        accepts_new_replicas=True,
        dirs=(
            log_dir(0, "d0"),
            log_dir(0, "d1", free=5 * GB),
            log_dir(0, "d2", free=8 * GB),
            log_dir(0, "d3", cordoned=True),
        ),
    )
    parts = [partition("t", i, (0,)) for i in range(3)]
    s = drain.Snapshot(
        brokers={0: b},
        partitions=tuple(parts),
        sizes={("t", i, 0): 4 * GB for i in range(3)},
        moving=frozenset({("t", 2, 0)}),
    )
    plan = drain.plan_disk_drain(
        s, broker_id=0, paths=frozenset({"/var/lib/jbod/disks/d0/log"}), started=False, max_in_flight=5
    )
    assert plan.refused == ()
    assert [(m.partition, m.directory_id) for m in plan.moves] == [(0, "b0-d2"), (1, "b0-d1")]
    assert plan.progress == drain.Progress(replicas=3, bytes=12 * GB, in_flight=1)


def test_disk_drain_without_room_is_refused() -> None:
    b = drain.Broker(0, False, True, (log_dir(0, "d0"), log_dir(0, "d1", free=GB)))
    s = drain.Snapshot(brokers={0: b}, partitions=(partition("t", 0, (0,)),), sizes={("t", 0, 0): 2 * GB})
    plan = drain.plan_disk_drain(
        s, broker_id=0, paths=frozenset({"/var/lib/jbod/disks/d0/log"}), started=False, max_in_flight=5
    )
    assert plan.moves == () and plan.refused
    assert f"needs {2 * GB} bytes" in plan.refused[0] and f"{GB} bytes free" in plan.refused[0]


def test_decide_cordons_reassigns_and_throttles_then_clears_and_uncordons() -> None:
    wanted = drain.Wanted(leaving=frozenset({3}), max_bytes_per_second=1000)
    s = snap(4, [partition("t", 0, (3, 0, 1))])
    first = drain.decide(s, wanted, drain.Owned(), {})
    assert first.refused == () and first.cordon == {3: ("*",)}
    assert [r.replicas for r in first.reassignments] == [(2, 0, 1)]
    assert first.broker_rates == {0, 1, 2, 3}
    assert first.topic_configs == {
        "t": {drain.LEADER_THROTTLED: "0:0,0:1,0:3", drain.FOLLOWER_THROTTLED: "0:2"}
    }
    assert first.started and first.owned.cordons == {3: frozenset({"*"})}
    # The next reconcile (or a restarted operator, from the recorded JSON) sees it moving.
    owned = drain.Owned.from_json(first.owned.to_json())
    moving = snap(4, [partition("t", 0, (2, 0, 1, 3), adding=(2,), removing=(3,))])
    second = drain.decide(moving, wanted, owned, {"t": dict(first.topic_configs["t"])})  # type: ignore[arg-type]
    assert second.cordon == {} and second.reassignments == () and second.topic_configs == {}
    assert second.started == ()
    # Done: broker 3 hosts nothing; it is deleted (plan.plan_brokers), then the cordon is lifted.
    done = snap(4, [partition("t", 0, (2, 0, 1))])
    configs = {"t": {drain.LEADER_THROTTLED: "x", drain.FOLLOWER_THROTTLED: "y"}}
    third = drain.decide(done, wanted, second.owned, configs)
    assert third.clear_rates == {0, 1, 2, 3}
    assert third.topic_configs == {"t": {drain.LEADER_THROTTLED: None, drain.FOLLOWER_THROTTLED: None}}
    assert third.owned.throttled_brokers == frozenset() and third.owned.cordons == {3: frozenset({"*"})}
    gone = drain.decide(done, drain.Wanted(), third.owned, {})
    assert gone.uncordon == {3: ("*",)} and gone.owned == drain.Owned()


def test_decide_refuses_without_touching_anything() -> None:
    wanted = drain.Wanted(leaving=frozenset({1, 2}))
    actions = drain.decide(snap(3, [partition("t", 0, (0, 1, 2))]), wanted, drain.Owned(), {})
    assert actions.refused and actions.refused[0].startswith("Refused to drain broker(s) 1, 2")
    assert (actions.cordon, actions.reassignments, actions.broker_rates, actions.topic_configs) == (
        {},
        (),
        frozenset(),
        {},
    )
    assert actions.owned == drain.Owned()


def test_decide_disk_drain_and_its_revert() -> None:
    path = "/var/lib/jbod/disks/d1/log"
    wanted = drain.Wanted(disks={0: frozenset({path})})
    s = snap(1, [partition("t", 0, (0,), disk="d1")])
    actions = drain.decide(s, wanted, drain.Owned(), {})
    assert actions.cordon == {0: (path,)}
    assert [(m.broker_id, m.directory_id) for m in actions.moves] == [(0, "b0-d0")]
    assert actions.broker_rates == frozenset()  # intra-broker moves carry their own rate
    spec_paths = frozenset({"/var/lib/jbod/disks/d0/log", path})
    reverted = drain.decide(s, drain.Wanted(spec_paths=spec_paths), actions.owned, {})
    assert reverted.uncordon == {0: (path,)} and reverted.moves == () and reverted.ended


def test_a_removed_disk_stays_cordoned_until_the_broker_runs_without_it() -> None:
    path = "/var/lib/jbod/disks/d1/log"
    owned = drain.Owned(cordons={0: frozenset({path})})
    left_spec = drain.Wanted(spec_paths=frozenset({"/var/lib/jbod/disks/d0/log"}))
    still_mounted = drain.decide(snap(1, [partition("t", 0, (0,))]), left_spec, owned, {})
    assert still_mounted.uncordon == {} and still_mounted.owned == owned
    unknown = drain.Snapshot(brokers={0: drain.Broker(0, False, True, ())}, partitions=())
    assert drain.decide(unknown, left_spec, owned, {}).uncordon == {}
    restarted = drain.Snapshot(brokers={0: drain.Broker(0, False, True, (log_dir(0, "d0"),))}, partitions=())
    lifted = drain.decide(restarted, left_spec, owned, {})
    assert lifted.uncordon == {0: (path,)} and lifted.owned == drain.Owned()


def test_rebalance_fills_a_new_broker_to_its_share() -> None:
    parts = [partition("t", i, ((i % 3), (i + 1) % 3)) for i in range(6)]
    s = snap(4, parts)
    plan = drain.plan_rebalance(s, joining=frozenset({3}), max_in_flight=10)
    assert len(plan.start) == 3  # 12 replicas over 4 brokers
    assert all(3 in r.replicas and len(set(r.replicas)) == 2 for r in plan.start)
    owned = drain.Owned(rebalance=frozenset({3}))
    actions = drain.decide(s, drain.Wanted(), owned, {})
    assert len(actions.reassignments) == 3 and actions.broker_rates
    balanced = [partition("t", i, ((i % 4), (i + 1) % 4)) for i in range(8)]
    over = drain.decide(snap(4, balanced), drain.Wanted(), owned, {})
    assert over.owned.rebalance == frozenset() and over.reassignments == ()


def test_snapshot_from_the_wire_shapes() -> None:
    s = drain.snapshot(
        [
            {
                "brokerId": 0,
                "fenced": False,
                "acceptsNewReplicas": True,
                "cordonedLogDirs": ["a"],
                "offlineLogDirs": [],
            }
        ],
        [
            {
                "name": "t",
                "partitions": [
                    {"partitionIndex": 0, "replicas": [0], "directories": ["a"], "addingReplicas": [0]}
                ],
            }
        ],
        {
            0: [
                {
                    "path": "/x/log",
                    "directoryId": "a",
                    "state": "online",
                    "usableBytes": 10,
                    "totalBytes": 20,
                    "replicas": [
                        {"topic": "t", "partition": 0, "sizeBytes": 7},
                        {"topic": "t", "partition": 0, "future": True},
                    ],
                }
            ]
        },
    )
    assert s.brokers[0].dirs[0].cordoned and s.sizes == {("t", 0, 0): 7} and s.moving == {("t", 0, 0)}
    assert s.partitions[0].reassigning


def test_a_drained_replica_stays_in_its_rack_else_keeps_the_racks_distinct() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c", 6: None}
    free = {0: 90 * GB, 1: 10 * GB, 2: 99 * GB, 3: 20 * GB, 4: 95 * GB, 5: 30 * GB, 6: 100 * GB}
    racked = {b: replace(broker, rack=racks[b]) for b, broker in brokers(7, free=free).items()}
    parts = [partition("t", 0, (1, 2, 4)), partition("t", 1, (3, 5)), partition("t", 2, (0, 2, 4))]
    s = drain.Snapshot(
        brokers=racked,
        partitions=tuple(parts),
        sizes={(p.topic, p.index, b): GB for p in parts for b in p.replicas},
    )
    # Broker 1 (rack a) leaves: broker 0, its rack's other, takes its replica although brokers 2
    # and 6 have more room. Broker 3 (rack b) leaves: 2 takes it.
    plan = drain.plan_broker_drain(s, leaving=frozenset({1, 3}), started=False, max_in_flight=5)
    assert [(r.partition, r.replicas) for r in plan.start] == [(0, (0, 2, 4)), (1, (2, 5))]
    # Both of rack a leave: partition 0's replica goes to the rackless broker 6 (a rack none of
    # its other replicas is in), not to 2 with more room in rack b, which 0 already uses.
    plan = drain.plan_broker_drain(s, leaving=frozenset({0, 1}), started=False, max_in_flight=5)
    moved = {r.partition: r.replicas for r in plan.start}
    assert moved[0] == (6, 2, 4) and moved[2] == (6, 2, 4)
    # On the wire: the controller's registrations name the rack.
    wire = drain.snapshot(
        [{"brokerId": 1, "fenced": False, "rack": "a"}, {"brokerId": 2, "fenced": False}], [], {}
    )
    assert (wire.brokers[1].rack, wire.brokers[2].rack) == ("a", None)


def full_dir(broker_id: int, disk: str, *, used: int, total: int = 100 * GB, **kw: bool) -> drain.LogDir:
    return drain.LogDir(
        directory_id=f"b{broker_id}-{disk}",
        path=f"/var/lib/jbod/disks/{disk}/log",
        online=kw.get("online", True),
        cordoned=kw.get("cordoned", False),
        usable_bytes=total - used,
        total_bytes=total,
        space_cordoned=kw.get("space_cordoned", False),
    )


FULL = "/var/lib/jbod/disks/d0/log"


def test_a_full_disk_that_cannot_grow_moves_its_largest_replicas_to_emptier_dirs() -> None:
    """d0 96 % used: one round moves at least 10 % of it, largest first, to the dir with the most
    room, where room keeps a target at most 76 % used (20 points under d0); d2 is too full to take
    anything, d3 is cordoned."""
    b = drain.Broker(
        0,
        False,
        True,
        (
            full_dir(0, "d0", used=96 * GB, space_cordoned=True),
            full_dir(0, "d1", used=60 * GB),
            full_dir(0, "d2", used=75 * GB),
            full_dir(0, "d3", used=0, cordoned=True),
        ),
    )
    parts = [partition("t", i, (0,)) for i in range(5)]
    sizes = {
        ("t", 0, 0): 20 * GB,
        ("t", 1, 0): 6 * GB,
        ("t", 2, 0): 5 * GB,
        ("t", 3, 0): 4 * GB,
        ("t", 4, 0): 0,
    }
    s = drain.Snapshot(brokers={0: b}, partitions=tuple(parts), sizes=sizes)
    plan = drain.plan_relief(s, broker_id=0, paths=frozenset({FULL}), max_in_flight=5)
    # 20 GB fits nowhere (d1 has room for 16 GB); 6 + 5 GB reach the 10 GB goal, both to d1.
    assert [(m.partition, m.directory_id) for m in plan.moves] == [(1, "b0-d1"), (2, "b0-d1")]
    assert plan.progress == drain.Progress(replicas=2, bytes=11 * GB, in_flight=0)
    # A round under way: nothing more until it is done.
    running = replace(s, moving=frozenset({("t", 1, 0)}))
    assert drain.plan_relief(running, broker_id=0, paths=frozenset({FULL}), max_in_flight=5).moves == ()
    # At most max_in_flight moves.
    assert len(drain.plan_relief(s, broker_id=0, paths=frozenset({FULL}), max_in_flight=1).moves) == 1


def test_a_full_disk_without_an_emptier_dir_waits_and_says_why() -> None:
    b = drain.Broker(
        0,
        False,
        True,
        (full_dir(0, "d0", used=97 * GB, space_cordoned=True), full_dir(0, "d1", used=90 * GB)),
    )
    s = drain.Snapshot(brokers={0: b}, partitions=(partition("t", 0, (0,)),), sizes={("t", 0, 0): GB})
    plan = drain.plan_relief(s, broker_id=0, paths=frozenset({FULL}), max_in_flight=5)
    assert plan.moves == () and "no other dir of the broker has room" in plan.waiting[0]
    empty = replace(s, sizes={("t", 0, 0): 0})
    waits = drain.plan_relief(empty, broker_id=0, paths=frozenset({FULL}), max_in_flight=5).waiting
    assert waits == (f"full dir {FULL} of broker 0: no replica with data to move off it",)
    # A dir the broker no longer cordons for its space is left alone.
    released = drain.Broker(0, False, True, (full_dir(0, "d0", used=97 * GB), full_dir(0, "d1", used=0)))
    calm = drain.plan_relief(
        replace(s, brokers={0: released}), broker_id=0, paths=frozenset({FULL}), max_in_flight=5
    )
    assert calm == drain.DiskDrain()


def test_decide_relieves_full_disks_without_cordons_or_throttles_and_not_draining_ones() -> None:
    b = drain.Broker(
        0,
        False,
        True,
        (full_dir(0, "d0", used=96 * GB, space_cordoned=True), full_dir(0, "d1", used=10 * GB)),
    )
    s = drain.Snapshot(brokers={0: b}, partitions=(partition("t", 0, (0,)),), sizes={("t", 0, 0): 12 * GB})
    actions = drain.decide(s, drain.Wanted(relieve={0: frozenset({FULL})}), drain.Owned(), {})
    assert [(m.partition, m.directory_id) for m in actions.moves] == [(0, "b0-d1")]
    assert actions.cordon == {} and actions.broker_rates == frozenset() and actions.topic_configs == {}
    assert actions.started and "cannot grow" in actions.started[0]
    # The same dir leaving the spec is drained (cordoned, everything moved), not relieved on top.
    draining = drain.decide(
        s, drain.Wanted(disks={0: frozenset({FULL})}, relieve={0: frozenset({FULL})}), drain.Owned(), {}
    )
    assert [m.partition for m in draining.moves] == [0] and draining.cordon == {0: (FULL,)}


def test_a_disk_moved_to_a_new_volume_drains_into_it_only_and_not_before_it_is_online() -> None:
    old, new = "/var/lib/jbod/disks/d0/log", "/var/lib/jbod/disks/d0-m1/log"
    parts = [partition("t", i, (0,)) for i in range(2)]
    sizes = {("t", i, 0): GB for i in range(2)}
    roomy = log_dir(0, "d1", free=500 * GB)  # the emptiest dir, which a plain removal would fill
    waiting = drain.Snapshot(
        brokers={0: drain.Broker(0, False, True, (log_dir(0, "d0"), roomy))},
        partitions=tuple(parts),
        sizes=sizes,
    )
    wanted = drain.Wanted(disks={0: frozenset({old})}, into={0: {old: new}})
    before = drain.decide(waiting, wanted, drain.Owned(), {})
    assert before.cordon == {} and before.moves == () and before.refused == () and before.started == ()
    assert any("d0-m1/log is not online yet" in line for line in before.waiting)
    assert before.replicas_left == 2
    mounted = replace(
        waiting,
        brokers={
            0: drain.Broker(0, False, True, (log_dir(0, "d0"), roomy, log_dir(0, "d0-m1", free=10 * GB)))
        },
    )
    after = drain.decide(mounted, wanted, drain.Owned(), {})
    assert after.cordon == {0: (old,)} and after.started
    assert [(m.partition, m.directory_id) for m in after.moves] == [(0, "b0-d0-m1"), (1, "b0-d0-m1")]


def test_a_disk_that_does_not_fit_its_new_volume_is_refused() -> None:
    old, new = "/var/lib/jbod/disks/d0/log", "/var/lib/jbod/disks/d0-m1/log"
    dirs = (log_dir(0, "d0"), log_dir(0, "d1", free=500 * GB), log_dir(0, "d0-m1", free=GB))
    s = drain.Snapshot(
        brokers={0: drain.Broker(0, False, True, dirs)},
        partitions=(partition("t", 0, (0,)),),
        sizes={("t", 0, 0): 2 * GB},
    )
    plan = drain.plan_disk_drain(
        s, broker_id=0, paths=frozenset({old}), started=False, max_in_flight=5, into={old: new}
    )
    assert plan.moves == () and plan.refused
    assert f"needs {2 * GB} bytes" in plan.refused[0] and "d0-m1/log" in plan.refused[0]
