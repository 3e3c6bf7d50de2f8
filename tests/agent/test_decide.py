"""The agent's pure decision: every KIP-112 rule of `jbod_agent.lifecycle.decide`, one snapshot at a time."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jbod_agent.lifecycle.decide import (
    EXIT_CONTROLLER_SAID_SHUTDOWN,
    EXIT_DIR_FAILURE_UNREPORTED,
    EXIT_REGISTRATION_REFUSED,
    EXIT_STORAGE_LOST,
    ActionKind,
    FailedDirView,
    Plan,
    Snapshot,
    decide,
)
from jbod_core.ids import Uuid

A, B = Uuid(0x5001, 0x78), Uuid(0x5002, 0x79)
NOW = 100.0


def snapshot(**changes: Any) -> Snapshot:
    """A registered, unfenced-ready broker that heartbeated 1 s ago, nothing queued."""
    base = Snapshot(
        now=NOW,
        online_dirs=2,
        metadata_dir_error=None,
        failed_dirs=(),
        failure_timeout_ms=30_000,
        registration_refused=None,
        controller_said_shutdown=False,
        registered=True,
        register_in_flight=False,
        next_register_at=0.0,
        heartbeat_in_flight=False,
        last_heartbeat_at=NOW - 1.0,
        heartbeat_interval_ms=2000,
        sent_offline_dirs=frozenset(),
        slow_dirs=frozenset(),
        sent_slow_dirs=frozenset(),
        fenced=False,
        ready_to_unfence=True,
        caught_up=True,
        reconciled_once=True,
        creating=0,
        queued_placements=0,
        placements_in_flight=False,
        placements_due_at=None,
    )
    return dataclasses.replace(base, **changes)


def failed(
    directory: Uuid = A, *, at: float = NOW - 1.0, acknowledged: bool = False, leads: int = 1
) -> FailedDirView:
    return FailedDirView(directory, at, acknowledged, leads)


def only_shutdown(plan: Plan) -> int:
    assert plan.kinds == (ActionKind.SHUT_DOWN,), plan
    code = plan.actions[0].exit_code
    assert code is not None
    return code


def test_a_steady_broker_waits_for_its_next_heartbeat() -> None:
    plan = decide(snapshot())
    assert plan.actions == ()
    assert plan.wake_at == pytest.approx(NOW + 1.0)  # last heartbeat + 2 s interval
    assert plan.reason == "nothing to do"


def test_heartbeat_when_the_interval_passed() -> None:
    plan = decide(snapshot(last_heartbeat_at=NOW - 2.0))
    assert plan.kinds == (ActionKind.HEARTBEAT,)


def test_a_heartbeat_in_flight_is_never_repeated() -> None:
    plan = decide(snapshot(last_heartbeat_at=NOW - 60.0, heartbeat_in_flight=True, failed_dirs=(failed(),)))
    assert ActionKind.HEARTBEAT not in plan.kinds


# -- a dir fails ---------------------------------------------------------------------------------


def test_a_failed_dir_not_yet_sent_triggers_a_heartbeat_at_once() -> None:
    plan = decide(snapshot(failed_dirs=(failed(at=NOW),), last_heartbeat_at=NOW - 0.01))
    assert plan.kinds == (ActionKind.HEARTBEAT,)
    assert str(A) in plan.reason


def test_a_failed_dir_already_sent_waits_for_the_interval_and_the_timeout_deadline() -> None:
    plan = decide(
        snapshot(
            failed_dirs=(failed(at=NOW - 0.5),), sent_offline_dirs=frozenset({A}), last_heartbeat_at=NOW - 0.5
        )
    )
    assert plan.actions == ()
    assert plan.wake_at == pytest.approx(NOW + 1.5)  # the heartbeat comes before the 30 s deadline


def test_unacknowledged_past_the_timeout_while_leading_shuts_down() -> None:
    plan = decide(snapshot(failed_dirs=(failed(at=NOW - 30.0),), sent_offline_dirs=frozenset({A})))
    assert only_shutdown(plan) == EXIT_DIR_FAILURE_UNREPORTED
    assert "within 30000 ms" in plan.reason


def test_unacknowledged_just_before_the_timeout_waits_until_the_deadline() -> None:
    plan = decide(
        snapshot(
            failed_dirs=(failed(at=NOW - 29.9),),
            sent_offline_dirs=frozenset({A}),
            ready_to_unfence=True,
            heartbeat_in_flight=True,
        )
    )
    assert plan.actions == ()
    assert plan.wake_at == pytest.approx(NOW + 0.1)


def test_unacknowledged_past_the_timeout_without_leadership_keeps_running() -> None:
    plan = decide(snapshot(failed_dirs=(failed(at=NOW - 31.0, leads=0),), sent_offline_dirs=frozenset({A})))
    assert ActionKind.SHUT_DOWN not in plan.kinds
    assert plan.wake_at == pytest.approx(NOW + 1.0)  # no past deadline to spin on


def test_acknowledged_failures_never_shut_down() -> None:
    plan = decide(snapshot(failed_dirs=(failed(at=NOW - 300.0, acknowledged=True, leads=5),)))
    assert ActionKind.SHUT_DOWN not in plan.kinds


def test_losing_the_last_data_dir_shuts_down() -> None:
    plan = decide(snapshot(online_dirs=0, failed_dirs=(failed(), failed(B))))
    assert only_shutdown(plan) == EXIT_STORAGE_LOST
    assert "last online log dir" in plan.reason


def test_losing_the_metadata_dir_shuts_down_even_with_healthy_data_dirs() -> None:
    plan = decide(snapshot(metadata_dir_error="the metadata log dir /m failed: EIO"))
    assert only_shutdown(plan) == EXIT_STORAGE_LOST
    assert "/m" in plan.reason


# -- the controller's word -----------------------------------------------------------------------


def test_a_refused_registration_shuts_down() -> None:
    plan = decide(snapshot(registered=False, registration_refused="Expected cluster id a, but got b"))
    assert only_shutdown(plan) == EXIT_REGISTRATION_REFUSED
    assert "Expected cluster id" in plan.reason


def test_should_shut_down_from_the_controller_exits_zero() -> None:
    assert only_shutdown(decide(snapshot(controller_said_shutdown=True))) == EXIT_CONTROLLER_SAID_SHUTDOWN


# -- registration --------------------------------------------------------------------------------


def test_unregistered_registers_after_its_backoff() -> None:
    assert decide(snapshot(registered=False, next_register_at=NOW)).kinds == (ActionKind.REGISTER,)
    waiting = decide(snapshot(registered=False, next_register_at=NOW + 0.4))
    assert waiting.actions == () and waiting.wake_at == pytest.approx(NOW + 0.4)
    assert decide(snapshot(registered=False, register_in_flight=True)).actions == ()


def test_unregistered_neither_heartbeats_nor_sends_placements() -> None:
    plan = decide(
        snapshot(registered=False, register_in_flight=True, placements_due_at=NOW - 1, queued_placements=3)
    )
    assert plan.actions == ()


# -- readiness to be unfenced --------------------------------------------------------------------


NOT_READY = {"ready_to_unfence": False}


@pytest.mark.parametrize(
    "blocker",
    [
        {"caught_up": False},
        {"reconciled_once": False},
        {"creating": 1},
        {"queued_placements": 1},
    ],
)
def test_stays_fenced_until_caught_up_reconciled_and_every_placement_confirmed(
    blocker: dict[str, Any],
) -> None:
    plan = decide(snapshot(**NOT_READY, **blocker, last_heartbeat_at=NOW - 0.05))
    assert ActionKind.READY_TO_UNFENCE not in plan.kinds
    assert plan.wake_at == pytest.approx(NOW + 0.05)  # not ready: heartbeats every 100 ms


def test_ready_once_everything_is_confirmed_and_says_so_at_once() -> None:
    plan = decide(snapshot(**NOT_READY, last_heartbeat_at=NOW - 0.01))
    assert plan.kinds == (ActionKind.READY_TO_UNFENCE, ActionKind.HEARTBEAT)


def test_ready_but_still_fenced_heartbeats_every_100_ms_until_the_controller_unfences() -> None:
    plan = decide(snapshot(fenced=True, last_heartbeat_at=NOW - 0.05))
    assert plan.actions == () and plan.wake_at == pytest.approx(NOW + 0.05)
    assert decide(snapshot(fenced=True, last_heartbeat_at=NOW - 0.1)).kinds == (ActionKind.HEARTBEAT,)


def test_ready_is_for_good() -> None:
    plan = decide(snapshot(ready_to_unfence=True, caught_up=False, creating=5, queued_placements=9))
    assert ActionKind.READY_TO_UNFENCE not in plan.kinds


# -- placements ----------------------------------------------------------------------------------


def test_placements_are_sent_when_due_one_request_at_a_time() -> None:
    due = decide(snapshot(queued_placements=3, placements_due_at=NOW))
    assert ActionKind.SEND_PLACEMENTS in due.kinds
    later = decide(snapshot(queued_placements=3, placements_due_at=NOW + 0.1))
    assert ActionKind.SEND_PLACEMENTS not in later.kinds and later.wake_at == pytest.approx(NOW + 0.1)
    busy = decide(snapshot(queued_placements=3, placements_due_at=NOW, placements_in_flight=True))
    assert ActionKind.SEND_PLACEMENTS not in busy.kinds


def test_shutdown_wins_over_everything_else() -> None:
    plan = decide(
        snapshot(
            online_dirs=0,
            ready_to_unfence=False,
            queued_placements=3,
            placements_due_at=NOW,
            last_heartbeat_at=None,
        )
    )
    assert only_shutdown(plan) == EXIT_STORAGE_LOST


def test_a_dir_newly_slow_or_stalled_is_sent_at_once_and_so_is_its_release() -> None:
    """The controller moves leaderships off a stalled dir at the heartbeat that names it: that
    heartbeat goes at once, not at the interval; so does the one that no longer names it."""
    assert decide(snapshot()).actions == ()
    found = decide(snapshot(slow_dirs=frozenset({A})))
    assert found.kinds == (ActionKind.HEARTBEAT,) and "slow or stalled" in found.reason
    released = decide(snapshot(sent_slow_dirs=frozenset({A})))
    assert released.kinds == (ActionKind.HEARTBEAT,) and "no longer" in released.reason
    assert decide(snapshot(slow_dirs=frozenset({A}), sent_slow_dirs=frozenset({A}))).actions == ()
    assert decide(snapshot(slow_dirs=frozenset({A}), heartbeat_in_flight=True)).actions == ()
