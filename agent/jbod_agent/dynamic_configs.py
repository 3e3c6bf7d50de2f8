"""What the broker applies of the dynamic broker configs (issues 24 and 32): the replication
throttles, the mover's rate, the cordoned log dirs, the topic defaults under Kafka's names and the
log cleaner's settings, from its replica of the metadata log over its `server.properties`.

Guarantees:
* Kafka's order: the broker's own dynamic value, then the cluster default's, then the static one
  (`static_values`; `levels` for every key), then the default (unthrottled, nothing cordoned;
  `jbod_core.broker_configs.KEYS` for the rest).
* `topic_defaults` is what a topic without its own value of a config gets on this broker (read by
  `jbod_core.topic_configs.resolve`); `cleaner_settings` the log cleaner's settings now.
* `cordoned_dirs` resolves `cordoned.log.dirs` to this broker's dir ids: `*` is every dir, a
  path is the dir configured with it (a trailing slash ignored); a path that is not one of this
  broker's log dirs names nothing here (the cluster default may list paths of other brokers).
* `cordoned_dir_ids` (what the broker reports) adds to them the dirs cordoned for their space
  (`log.dir.cordon.threshold`, `jbod_core.disk_space`) and the full ones.
* `cordoned_paths_error` is the edge check a broker makes before forwarding a change of its own
  `cordoned.log.dirs`: only its controller-free knowledge, its log dir paths.
* Pure reads: no I/O; the image is read as it is now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from jbod_agent.config import BrokerConfig
from jbod_agent.state import AgentState
from jbod_core import broker_configs
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage
from jbod_core.messages import AlterConfigOp


def static_values(config: BrokerConfig) -> dict[str, str]:
    """The dynamic keys `server.properties` sets (a -1 rate is unset)."""
    values: dict[str, str] = {}
    for name, rate in (
        (broker_configs.LEADER_THROTTLED_RATE, config.leader_replication_throttled_rate),
        (broker_configs.FOLLOWER_THROTTLED_RATE, config.follower_replication_throttled_rate),
        (broker_configs.ALTER_LOG_DIRS_RATE, config.replica_move_max_bytes_per_second),
    ):
        if rate >= 0:
            values[name] = str(rate)
    if config.cordoned_log_dirs:
        values[broker_configs.CORDONED_LOG_DIRS] = ",".join(config.cordoned_log_dirs)
    return values


def levels(config: BrokerConfig, image: ClusterImage) -> broker_configs.BrokerLevels:
    """This broker's config levels: its own dynamic values, the cluster default's, and what its
    server.properties gives (a -1 rate there is unset)."""
    given_rates = static_values(config)
    unset = {
        name
        for name in (
            broker_configs.LEADER_THROTTLED_RATE,
            broker_configs.FOLLOWER_THROTTLED_RATE,
            broker_configs.ALTER_LOG_DIRS_RATE,
        )
        if name not in given_rates
    }
    static = {k: v for k, v in config.given_values.items() if k in broker_configs.KEYS and k not in unset}
    return broker_configs.BrokerLevels(
        own=image.broker_configs.get(str(config.node_id), {}),
        cluster_default=image.broker_configs.get(broker_configs.CLUSTER_DEFAULT, {}),
        static=static,
    )


def topic_defaults(config: BrokerConfig, image: ClusterImage) -> dict[str, str]:
    """The default of every topic config on this broker (its broker configs under Kafka's names)."""
    return broker_configs.topic_defaults(levels(config, image))


def cleaner_settings(config: BrokerConfig, image: ClusterImage) -> broker_configs.CleanerSettings:
    """The log cleaner's settings now: dynamic values over server.properties over Kafka's defaults."""
    return broker_configs.cleaner_settings(levels(config, image))


def effective(config: BrokerConfig, image: ClusterImage) -> Mapping[str, str]:
    """The values this broker applies: dynamic (its own, then the cluster default) over static."""
    return {**static_values(config), **broker_configs.effective(image, config.node_id)}


def rate(config: BrokerConfig, image: ClusterImage, name: str) -> int | None:
    """A rate in bytes per second, or None: unthrottled."""
    return broker_configs.rate(effective(config, image), name)


def _normal(path: str) -> str:
    return str(Path(path))


def cordoned_dirs(config: BrokerConfig, image: ClusterImage, dirs: Mapping[Uuid, Path]) -> list[Uuid]:
    """The ids of this broker's dirs that `cordoned.log.dirs` names, sorted."""
    paths = broker_configs.cordoned_paths(effective(config, image))
    if broker_configs.EVERY_DIR in paths:
        return sorted(dirs)
    named = {_normal(p) for p in paths}
    return sorted(d for d, path in dirs.items() if _normal(str(path)) in named)


def cordoned_paths_error(config: BrokerConfig, ops: Iterable[AlterConfigOp]) -> str | None:
    """Why a change of this broker's own `cordoned.log.dirs` names a path it does not have."""
    known = {_normal(str(p)) for p in config.log_dirs}
    for op in ops:
        if op.name != broker_configs.CORDONED_LOG_DIRS or op.op in ("DELETE", "SUBTRACT"):
            continue
        for entry in broker_configs.list_entries(op.value or ""):
            if entry != broker_configs.EVERY_DIR and _normal(entry) not in known:
                return (
                    f"{broker_configs.CORDONED_LOG_DIRS}: {entry} is not one of this broker's log dirs "
                    f"({', '.join(sorted(known))})"
                )
    return None


def cordon_threshold(config: BrokerConfig, image: ClusterImage) -> float:
    """`log.dir.cordon.threshold` now: dynamic over server.properties over the default."""
    return broker_configs.cordon_threshold(levels(config, image))


def slow_threshold_s(config: BrokerConfig, image: ClusterImage) -> float:
    """`log.dir.slow.threshold.ms` now, in seconds (0: detection off)."""
    return broker_configs.disk_millis(levels(config, image), broker_configs.LOG_DIR_SLOW_THRESHOLD_MS) / 1000


def stall_offline_s(config: BrokerConfig, image: ClusterImage) -> float | None:
    """`log.dir.stall.offline.ms` now, in seconds (None: a stall alone never takes a dir offline)."""
    ms = broker_configs.disk_millis(levels(config, image), broker_configs.LOG_DIR_STALL_OFFLINE_MS)
    return None if ms < 0 else ms / 1000


def stall_timeout_s(config: BrokerConfig, image: ClusterImage) -> float:
    """`log.dir.stall.timeout.ms` now, in seconds (0: detection off)."""
    return broker_configs.disk_millis(levels(config, image), broker_configs.LOG_DIR_STALL_TIMEOUT_MS) / 1000


def cordoned_dir_ids(state: AgentState) -> list[Uuid]:
    """This broker's registered dirs that are cordoned now (what registration and heartbeats
    report): those `cordoned.log.dirs` names, and those cordoned for their space or full."""
    registered = set(state.registered_dirs)
    dirs = {d: s.path for d, s in state.dirs.items() if d in registered}
    by_space = {d for d, s in state.dirs.items() if d in registered and s.cordoned_for_space}
    return sorted(set(cordoned_dirs(state.config, state.image, dirs)) | by_space)
