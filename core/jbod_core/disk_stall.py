"""When a log dir stalls: a disk that stops answering, found within `log.dir.stall.timeout.ms`
(issue 35; our extension, docs/decisions.md "Hung disks found within 100 ms").

Each log dir of a broker (and its metadata dir when it has a single log dir) is pulsed: a tiny
write of a block that is already allocated, every half timeout, each path in its own thread. These are the rules that turn the pulses' times into a verdict.

Guarantees:
* `Pulse` is what one path's pulses last did, in the caller's monotonic seconds: when the pulse
  in flight started (None while none is), when a pulse last answered, the start of that answered
  pulse, and since when every pulse has answered within half the timeout (None after a slower
  one, or while one is in flight longer than that).
* `stalls`: a path stalls once its pulse in flight has waited half of `timeout_s` and the path
  has answered nothing for `timeout_s` (a disk that stops answering is found within `timeout_s`:
  the next pulse starts at most half of it after the last answer), **while another path of the
  same broker answered a pulse that started after the unanswered one**: evidence that the process runs and other disks answer. A process
  that was frozen or starved of CPU, or a machine whose every disk is slow at once, is not taken
  for a hung disk; a broker with one path only never finds a stall (the probe timeout still
  takes a hung dir offline). A timeout of 0 turns the detection off.
* `released`: a stalled path is normal again once its pulses have answered within half the
  timeout for `release_s` without a break (it does not flap between stalled and normal).
* `pulse_interval`: the pause between a path's pulses: half the timeout, within [10 ms, 1 s].
* `still_hung`: a dir stalled at some moment is still hung (and may be taken offline after
  `log.dir.stall.offline.ms`) while its pulse has answered nothing since that moment.
* Pure: the caller measures with its injected clock and passes the seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

#: The default of `log.dir.stall.timeout.ms` (100 finds a hung disk within 100 ms on hosts whose
#: threads are never starved that long: docs/decisions.md, "Hung disks found within 100 ms").
DEFAULT_TIMEOUT_MS: Final = 1000
#: The default of `log.dir.stall.offline.ms`: a stall alone never takes a dir offline.
DEFAULT_OFFLINE_MS: Final = -1
#: How long a stalled path's pulses must answer promptly before it is normal again.
RELEASE_S: Final = 10.0
_MIN_INTERVAL_S: Final = 0.01
_MAX_INTERVAL_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Pulse:
    in_flight_since: float | None = None
    answered_at: float | None = None  # None: no pulse answered yet
    answered_started_at: float | None = None  # when the last answered pulse started
    prompt_since: float | None = None


def pulse_interval(timeout_s: float) -> float:
    """Seconds between the end of one pulse and the start of the next."""
    return min(_MAX_INTERVAL_S, max(_MIN_INTERVAL_S, timeout_s / 2))


def answered(pulse: Pulse, *, started: float, now: float, timeout_s: float) -> Pulse:
    """`pulse` after a pulse that started at `started` answered at `now`."""
    prompt = now - started < timeout_s / 2
    since = (pulse.prompt_since if pulse.prompt_since is not None else started) if prompt else None
    return Pulse(in_flight_since=None, answered_at=now, answered_started_at=started, prompt_since=since)


def stalls(pulse: Pulse, peers: Iterable[Pulse], *, now: float, timeout_s: float) -> bool:
    """Does the path of `pulse` stall now (the module's second guarantee)?"""
    if timeout_s <= 0 or pulse.in_flight_since is None or pulse.answered_at is None:
        return False
    if now - pulse.answered_at < timeout_s or now - pulse.in_flight_since < timeout_s / 2:
        return False  # not silent long enough, or the pulse thread itself started late
    started = pulse.in_flight_since
    return any(peer.answered_started_at is not None and peer.answered_started_at > started for peer in peers)


def released(pulse: Pulse, *, now: float, timeout_s: float, release_s: float = RELEASE_S) -> bool:
    """Is a stalled path normal again (the module's third guarantee)?"""
    if timeout_s <= 0:
        return True
    if pulse.in_flight_since is not None and now - pulse.in_flight_since >= timeout_s / 2:
        return False
    return pulse.prompt_since is not None and now - pulse.prompt_since >= release_s


def still_hung(pulse: Pulse, *, stalled_at: float) -> bool:
    """Has the path answered nothing since it was found stalled at `stalled_at`?"""
    return pulse.answered_at is None or pulse.answered_at <= stalled_at


def next_check(pulse: Pulse, *, now: float, timeout_s: float) -> float | None:
    """When the path of `pulse` could stall at the earliest (None: not while nothing is in
    flight); a check then finds it the moment its timeout passes."""
    if timeout_s <= 0 or pulse.in_flight_since is None or pulse.answered_at is None:
        return None
    return max(now, pulse.answered_at + timeout_s, pulse.in_flight_since + timeout_s / 2)
