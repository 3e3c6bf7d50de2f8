"""A token bucket of bytes per second: the replication throttles' quota (issue 24; Kafka's
ReplicationQuotaManager answers "is the quota exceeded?" before, and records the bytes after).

Guarantees:
* The bucket holds at most `burst` tokens (bytes) and gains `rate` per second of the caller's
  clock; `record(n, now)` takes `n` even past zero (the bytes are already moved), and
  `exceeded(now)` is True while the bucket is empty or in debt.
* Hence, if bytes are moved only while `exceeded` is False, the bytes recorded over any interval
  of length T are at most `burst + rate * T + m`, m the largest single `record` (a caller that
  reads at most m bytes at a time).
* `wait_s(now)` is how long until the bucket is no longer exceeded (0 when it is not).
* `set_rate` keeps the tokens (capped at the new burst): a rate change applies at once.
* `refilled(now)`: it holds its whole burst again, so it answers as a new (full) bucket at its
  rate would; its owner may drop it.
* Pure: time is a parameter (monotonic seconds); no clock is read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_BURST_S: Final = 1.0  # the burst: this many seconds at the rate (Kafka's quota window)


@dataclass(slots=True)
class TokenBucket:
    rate: float  # bytes per second, > 0
    burst: float  # the most tokens it holds
    tokens: float
    updated: float  # the clock time `tokens` was computed for

    @classmethod
    def full(cls, rate: float, *, now: float, burst_s: float = DEFAULT_BURST_S) -> TokenBucket:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        burst = rate * burst_s
        return cls(rate=rate, burst=burst, tokens=burst, updated=now)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def set_rate(self, rate: float, *, now: float, burst_s: float = DEFAULT_BURST_S) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self._refill(now)
        self.rate = rate
        self.burst = rate * burst_s
        self.tokens = min(self.tokens, self.burst)

    def exceeded(self, now: float) -> bool:
        self._refill(now)
        return self.tokens <= 0

    def refilled(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst

    def record(self, n: int, now: float) -> None:
        self._refill(now)
        self.tokens -= n

    def wait_s(self, now: float) -> float:
        self._refill(now)
        if self.tokens > 0:
            return 0.0
        return (-self.tokens) / self.rate + 1e-3
