"""Broker sessions of a real controller process (protocol §3.2): expiry fences, restarts refresh.

Covers: an unfenced broker that stops heartbeating is fenced after the session timeout and loses
its leaderships and ISR places; it can come back (same incarnation by heartbeating, or a new
incarnation without DUPLICATE_BROKER_REGISTRATION); after a controller restart every unfenced
broker gets a fresh session, so one whose last heartbeat is older than the timeout is not fenced
at once, while expiry still works for brokers that stay silent.
"""

from __future__ import annotations

import time
from typing import Any

from tests.controller.conftest import Api, Heartbeater, bring_up, random_uuid, uuid_key
from tests.harness import ControllerProcess

SESSION_MS = 1500


def wait_until_fenced(api: Api, broker_id: int, *, timeout: float = 20.0) -> float:
    started = time.monotonic()
    while not api.broker_info(broker_id)["fenced"]:
        assert time.monotonic() - started < timeout, f"broker {broker_id} was never fenced"
        time.sleep(0.05)
    return time.monotonic() - started


def fencing_records(api: Api, broker_id: int, from_offset: int) -> list[dict[str, Any]]:
    records, _ = api.all_records(from_offset)
    return [
        r
        for r in records
        if r["type"] == "BrokerRegistrationChangeRecord"
        and r["data"]["brokerId"] == broker_id
        and r["data"].get("fenced") is True
    ]


def test_silent_broker_is_fenced_and_loses_leadership(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(session_timeout_ms=SESSION_MS)
    api = Api(proc)
    try:
        before_last_heartbeat = time.monotonic()
        brokers = bring_up(api, [1, 2], dirs_per_broker=1)
        api.create_topic("t", replicaAssignment=[[1, 2], [2, 1]])
        start = api.end_offset()
        with Heartbeater(proc, [brokers[2]]) as beats:
            wait_until_fenced(api, 1)
            # Broker 1's last heartbeat came after `before_last_heartbeat`: it cannot have been
            # fenced before a whole session timeout had passed since then.
            assert time.monotonic() - before_last_heartbeat >= SESSION_MS / 1000, "fenced too early"
            assert api.broker_info(2)["fenced"] is False
        assert not beats.errors, beats.errors[:3]
        for part in api.topic("t")["partitions"]:
            assert part["leader"] == 2
            assert part["isr"] == [2]
            assert part["offlineReplicas"] == [1]
        records, _ = api.all_records(start)
        assert [r["type"] for r in records] == [
            "PartitionChangeRecord",
            "PartitionChangeRecord",
            "BrokerRegistrationChangeRecord",
        ]
        assert records[-1]["data"] == {"brokerId": 1, "brokerEpoch": brokers[1].epoch, "fenced": True}
        cluster = api.cluster()
        assert (cluster["fencedBrokers"], cluster["offlinePartitions"]) == (1, 0)

        # The same incarnation heartbeats again: unfenced, and it leads nothing until elected.
        assert api.heartbeat(1, brokers[1].epoch)["isFenced"] is False
        # A broker whose session expired may come back as a new incarnation at once.
        api.heartbeat(1, brokers[1].epoch, wantFence=True)
        epoch = api.register(1, brokers[1].dirs, incarnation=random_uuid())
        assert epoch > brokers[1].epoch
    finally:
        api.close()


def test_new_incarnation_after_silent_expiry_is_accepted(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(session_timeout_ms=SESSION_MS)
    api = Api(proc)
    try:
        brokers = bring_up(api, [1], dirs_per_broker=1)
        api.register(1, brokers[1].dirs, incarnation=random_uuid(), expect=101)
        wait_until_fenced(api, 1)
        epoch = api.register(1, brokers[1].dirs, incarnation=random_uuid())
        assert epoch > brokers[1].epoch
        assert api.heartbeat(1, epoch)["isFenced"] is False
    finally:
        api.close()


def test_restart_gives_unfenced_brokers_a_fresh_session(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(session_timeout_ms=SESSION_MS)
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2], dirs_per_broker=1)
        api.create_topic("t", replicaAssignment=[[1, 2]])
        for broker in brokers.values():
            assert api.heartbeat(broker.broker_id, broker.epoch)["isFenced"] is False
        last_heartbeat = time.monotonic()
        # Crash the controller within the session, and start it again only after the session of
        # the last heartbeat would have expired.
        time.sleep(SESSION_MS / 1000 * 0.5)  # fixed wait: half the session: the crash comes within it
        assert not any(b["fenced"] for b in api.brokers())
        end = api.end_offset()
        proc.kill()
        # fixed wait: until the last heartbeat's session (1.5 s) would have expired, with 20 % margin
        time.sleep(max(0.0, last_heartbeat + SESSION_MS / 1000 * 1.2 - time.monotonic()))
        proc.start()

        assert not any(b["fenced"] for b in api.brokers()), "a restart must not fence brokers at once"
        assert api.end_offset() == end
        with Heartbeater(proc, [brokers[1]]) as beats:
            # Broker 2 stays silent: its fresh session expires, so expiry still works.
            wait_until_fenced(api, 2)
            assert api.broker_info(1)["fenced"] is False
        assert not beats.errors, beats.errors[:3]
        assert fencing_records(api, 1, end) == []
        assert len(fencing_records(api, 2, end)) == 1
        [part] = api.topic("t")["partitions"]
        assert (part["leader"], part["isr"]) == (1, [1])
    finally:
        api.close()


def test_silent_broker_in_controlled_shutdown_is_fenced(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(session_timeout_ms=SESSION_MS)
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2], dirs_per_broker=1)
        api.create_topic("t", replicaAssignment=[[1, 2]])
        with Heartbeater(proc, [brokers[2]]) as beats:
            reply = api.heartbeat(1, brokers[1].epoch, wantShutDown=True)
            assert (reply["isFenced"], reply["shouldShutDown"]) == (False, False)
            assert api.broker_info(1)["inControlledShutdown"] is True
            wait_until_fenced(api, 1)
        assert not beats.errors, beats.errors[:3]
        info = api.broker_info(1)
        assert (info["fenced"], info["inControlledShutdown"]) == (True, False)
        [part] = api.topic("t")["partitions"]
        assert (part["leader"], part["isr"]) == (2, [2])
    finally:
        api.close()


def test_rejected_heartbeats_do_not_refresh_the_session(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(session_timeout_ms=SESSION_MS)
    api = Api(proc)
    try:
        started = time.monotonic()
        brokers = bring_up(api, [1, 2], dirs_per_broker=2)
        b1 = brokers[1]
        end = api.end_offset()
        # Heartbeats naming an unknown dir (57) or a wrong epoch (77) are rejected whole.
        while not api.broker_info(1)["fenced"]:
            assert time.monotonic() - started < 20, "broker 1 was never fenced"
            assert (
                api.heartbeat(1, b1.epoch, offlineLogDirs=[random_uuid()], wantFence=True)["errorCode"] == 57
            )
            assert api.heartbeat(1, b1.epoch + 1)["errorCode"] == 77
            time.sleep(0.1)
        # Only the session expiry wrote anything (no dir went offline, nothing else changed).
        assert time.monotonic() - started >= SESSION_MS / 1000
        records, _ = api.all_records(end)
        assert [r["data"] for r in records if r["data"].get("brokerId") == 1] == [
            {"brokerId": 1, "brokerEpoch": b1.epoch, "fenced": True}
        ]
        assert api.broker_info(1)["logDirs"] == sorted(b1.dirs, key=uuid_key)
    finally:
        api.close()


def test_new_incarnation_right_after_expiry_fences_the_old_one_first(make_controller: Any) -> None:
    """Whether or not the controller noticed the expiry yet, the old incarnation is fenced (with its
    ISR and leader changes) before the new registration, whose epoch is its record's offset."""
    proc: ControllerProcess = make_controller(session_timeout_ms=1000)
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2], dirs_per_broker=1)
        api.create_topic("t", replicaAssignment=[[1, 2]])
        with Heartbeater(proc, [brokers[2]], interval=0.1):
            assert api.heartbeat(1, brokers[1].epoch)["isFenced"] is False
            last = time.monotonic()
            start = api.end_offset()
            # fixed wait: just past broker 1's session (1 s): the registration comes right after its expiry
            time.sleep(max(0.0, last + 1.02 - time.monotonic()))
            epoch = api.register(1, brokers[1].dirs, incarnation=random_uuid())
        records, _ = api.all_records(start)
        registration = next(r for r in records if r["type"] == "RegisterBrokerRecord")
        assert registration["offset"] == epoch
        fenced = [
            r
            for r in records
            if r["type"] == "BrokerRegistrationChangeRecord"
            and r["data"] == {"brokerId": 1, "brokerEpoch": brokers[1].epoch, "fenced": True}
        ]
        assert len(fenced) == 1
        assert fenced[0]["offset"] < epoch
        [part] = api.topic("t")["partitions"]
        assert (part["leader"], part["isr"]) == (2, [2])
        info = api.broker_info(1)
        assert (info["brokerEpoch"], info["fenced"]) == (epoch, True)
    finally:
        api.close()
