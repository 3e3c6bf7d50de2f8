"""Controller metrics (protocol §4.5), on a private registry so tests can run several controllers.

Guarantees: gauges are computed from the image when scraped (never stale); names follow
Prometheus conventions with the `jbod_controller_` prefix and base units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from jbod_core.image import ClusterImage

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _ImageCollector(Collector):
    def __init__(
        self,
        image: Callable[[], ClusterImage],
        end_offset: Callable[[], int],
        active: Callable[[], bool],
        elections: Callable[[], int],
    ) -> None:
        self._image = image
        self._end_offset = end_offset
        self._active = active
        self._elections = elections

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "jbod_controller_active",
            "1 while this controller is the active one (the writer)",
            value=1 if self._active() else 0,
        )
        yield CounterMetricFamily(
            "jbod_controller_elections", "Elections this controller won", value=self._elections()
        )
        image = self._image()
        yield GaugeMetricFamily(
            "jbod_controller_fenced_brokers",
            "Registered brokers that are fenced",
            value=sum(1 for b in image.brokers.values() if b.fenced),
        )
        yield GaugeMetricFamily(
            "jbod_controller_offline_partitions", "Partitions without a leader", value=len(image.leaderless)
        )
        yield GaugeMetricFamily(
            "jbod_controller_metadata_end_offset",
            "Offset the next metadata record will get (committed)",
            value=self._end_offset(),
        )
        yield GaugeMetricFamily(
            "jbod_controller_registered_brokers", "Registered brokers", value=len(image.brokers)
        )
        yield GaugeMetricFamily(
            "jbod_controller_partitions", "Partitions in the image", value=image.partition_count
        )


class ControllerMetrics:
    def __init__(
        self,
        image: Callable[[], ClusterImage],
        end_offset: Callable[[], int],
        *,
        active: Callable[[], bool] = lambda: True,
        elections: Callable[[], int] = lambda: 0,
    ) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "jbod_controller_request_seconds",
            "Time to serve a controller API request",
            ["api"],
            registry=self.registry,
            buckets=_BUCKETS,
        )
        self.registry.register(_ImageCollector(image, end_offset, active, elections))

    def render(self) -> bytes:
        return generate_latest(self.registry)
