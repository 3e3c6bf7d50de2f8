"""Garbage-collector policy for a server whose heap is mostly one large, long-lived image: the
controller's metadata image, a broker's hosted partitions and logs.

Guarantees:
* After the caller's big changes (the controller: recovery and every batch that wrote many
  records; a broker: periodically, `FREEZE_INTERVAL_S`) the existing heap is frozen (`gc.freeze`,
  O(1)): later collections scan only objects created since, so a large cluster no longer turns
  every burst of records, or an idle minute, into full-heap scans.
* Generation-0 collections run every 20,000 allocations instead of 700.
* `full_collection` (unfreeze, collect, freeze) reclaims any cyclic garbage that was frozen; the
  service runs it rarely (`FULL_COLLECTION_INTERVAL_S`) and logs how long it took.
"""

from __future__ import annotations

import gc
import time
from typing import Final

FREEZE_AFTER_RECORDS: Final = 2_000
FULL_COLLECTION_INTERVAL_S: Final = 3600.0
FREEZE_INTERVAL_S: Final = 60.0


def configure() -> None:
    gc.set_threshold(20_000, 20, 20)


def freeze() -> None:
    gc.freeze()


def full_collection() -> float:
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - started
