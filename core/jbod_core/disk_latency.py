"""When a log dir is slow (a gray failure, issue 35; `log.dir.slow.threshold.ms` is our extension,
docs/decisions.md "Slow disks").

Guarantees:
* `DirLatency` keeps a dir's last `window` write-and-fsync latencies, in seconds: each probe
  round's (a small write, fsync and read back) and each fsync of a log's appends (real work),
  one sample each.
* `DirLatency.slow(threshold_s, slow=...)`: a dir becomes slow once its window is full and the
  window's median is at or above the threshold (one stall among healthy answers is not a slow
  disk); a slow dir is normal again once the median falls below half the threshold (it does not
  flap at the line). A threshold of 0 turns the detection off.
* Pure: the caller measures (with its injected clock) and passes the seconds.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Final

#: How many latencies the median is taken over.
WINDOW: Final = 5
#: The default of `log.dir.slow.threshold.ms`.
DEFAULT_THRESHOLD_MS: Final = 1000


@dataclass
class DirLatency:
    window: int = WINDOW
    samples: deque[float] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=self.window)

    def add(self, seconds: float) -> None:
        self.samples.append(max(0.0, seconds))

    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    def slow(self, threshold_s: float, *, slow: bool) -> bool:
        """Is the dir slow now, given whether it was?"""
        if threshold_s <= 0:
            return False
        median = self.median()
        if median is None:
            return False
        if slow:
            return median >= threshold_s / 2
        return len(self.samples) >= self.window and median >= threshold_s
