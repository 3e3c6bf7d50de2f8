"""A log dir's space: when it is cordoned for being nearly full, and how long until it is full
(issue 35; `log.dir.cordon.threshold` is our extension, docs/decisions.md "Full disks").

Guarantees:
* `used_fraction(total, usable)` is `1 - usable / total` clamped to [0, 1]: the share of the
  volume this broker can no longer write (reserved blocks count as used); 0 while the size is
  unknown (no probe yet).
* `space_cordoned(used, threshold, cordoned=...)`: a dir is cordoned once its used fraction
  reaches `threshold`, and released only when it falls below `threshold - RELEASE_MARGIN`, so a
  dir near the line does not flap between the two with every probe. A threshold of 1 or more
  never cordons (the setting off): a dir is then only ever full, on ENOSPC.
* `FillRate` keeps the (time, usable bytes) samples of the last `window_s` seconds, at most
  `max_samples` of them; `seconds_to_full()` is the least-squares fill rate over them projected
  to zero usable bytes, or None while the dir is not filling (the rate is zero or negative), the
  samples span less than `min_span_s`, or there are fewer than 3. A jump up of usable bytes
  (space freed by retention, DeleteRecords, a grown volume) starts the window again: the old
  rate says nothing about the new space.
* Pure: the caller passes the times (its injected clock) and the probe's byte counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

#: How far below the threshold a cordoned dir must fall before it takes new replicas again.
RELEASE_MARGIN: Final = 0.05
#: The default of `log.dir.cordon.threshold`.
DEFAULT_THRESHOLD: Final = 0.95


def used_fraction(total_bytes: int, usable_bytes: int) -> float:
    if total_bytes <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - usable_bytes / total_bytes))


def space_cordoned(used: float, threshold: float, *, cordoned: bool) -> bool:
    """Is the dir cordoned for its space after a probe that found it `used` full?"""
    if threshold >= 1.0:
        return False
    if cordoned:
        return used >= threshold - RELEASE_MARGIN
    return used >= threshold


@dataclass
class FillRate:
    """A dir's recent usable bytes, for the time left until it is full."""

    window_s: float = 600.0
    min_span_s: float = 5.0
    max_samples: int = 600
    samples: deque[tuple[float, int]] = field(default_factory=deque)

    def add(self, now: float, usable_bytes: int) -> None:
        if self.samples and usable_bytes > self.samples[-1][1]:
            self.samples.clear()  # space came back: a new fill starts from here
        self.samples.append((now, usable_bytes))
        while self.samples and (
            now - self.samples[0][0] > self.window_s or len(self.samples) > self.max_samples
        ):
            self.samples.popleft()

    def bytes_per_second(self) -> float | None:
        """The rate usable bytes fall at (least squares), or None with too few samples."""
        if len(self.samples) < 3 or self.samples[-1][0] - self.samples[0][0] < self.min_span_s:
            return None
        count = len(self.samples)
        mean_t = sum(t for t, _ in self.samples) / count
        mean_u = sum(u for _, u in self.samples) / count
        spread = sum((t - mean_t) ** 2 for t, _ in self.samples)
        if spread <= 0:
            return None
        slope = sum((t - mean_t) * (u - mean_u) for t, u in self.samples) / spread
        return -slope

    def seconds_to_full(self) -> float | None:
        rate = self.bytes_per_second()
        if rate is None or rate <= 0:
            return None
        return self.samples[-1][1] / rate
