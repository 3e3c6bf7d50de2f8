"""Run Apache Kafka's own tools and server as a user runs them, from the Kafka jars on Maven Central.

Kafka's `bin/*.sh` scripts are not published to Maven Central, but every main class they start is:
`kafka-topics.sh` is `kafka-run-class.sh org.apache.kafka.tools.TopicCommand "$@"`, and so on
(`SCRIPTS`). This module resolves those jars once and runs each script's main class the way
`bin/kafka-run-class.sh` does, so tests and benchmarks can point Kafka's tools at our brokers and
compare with a real Kafka (`KafkaCluster`).

Guarantees:
* The jars are `org.apache.kafka:kafka-tools`, `org.apache.kafka:kafka_2.13`,
  `org.apache.kafka:connect-file` (Kafka Connect's file connectors) and
  `org.apache.kafka:kafka-streams-examples` (Kafka Streams and its demos) at `KAFKA_VERSION` with
  their runtime dependencies, plus the logging Kafka's own distribution ships (slf4j 2 bound to
  log4j 2, so no tool prints an SLF4J warning), resolved by Maven (`jbod_runtime.maven_jars`, the
  plugin pinned) from the Maven repositories the machine's Maven is set up for (Maven Central)
  into a local repository of their own, `<cache>/m2`, and copied to `<cache>/<version>/libs/`. `<cache>` is
  `$JBOD_KAFKA_CACHE` or `~/.cache/jbod-kafka`.
* The jars count as downloaded only when the marker `<cache>/<version>/jars.json`, written last,
  names the same artifacts and exactly the jars present, each with its size; otherwise the
  directory is removed and resolved again. Concurrent callers are serialised by a lock file.
* A script runs as `kafka-run-class.sh` runs its main class: the same JVM flags and per-script
  heap, the libs directory as the classpath, log4j 2 configured by a file — for the tools WARN and
  above to stderr, as Kafka's `config/tools-log4j2.yaml`.
* `JavaAdmin` runs the single-file Java programs in `e2e/kafka/` against the same jars: the Admin
  calls no script makes (`alterReplicaLogDirs`, `describeReplicaLogDirs`); a failed call is a
  non-zero exit with the exception's message, raised here as `AdminCallError`. `JavaAdmin.run`
  runs any of them, such as `JavaTransactions` (kafka-clients' transactional producer and
  consumers), leaving the exit status to the caller.
* `KafkaCluster` is a real single-node Kafka in KRaft combined mode (broker and controller in one
  process) listening on 127.0.0.1 only, formatted by `kafka-storage.sh` and started by
  `kafka.Kafka` in a directory of its own, which it removes when stopped (`restart()` stops and
  starts it on the same storage). `KafkaNodesCluster` is
  the same with one dedicated controller and several brokers, each its own JVM (a static quorum
  of that one controller), as `bench.kafka_peer` compares with our cluster.

Command line (from the repo root): `python -m e2e.kafka_tools jars | path | scripts`,
`python -m e2e.kafka_tools run kafka-topics.sh --bootstrap-server HOST:PORT --list`,
`python -m e2e.kafka_tools serve [--scram] [--log-dirs N]` (a Kafka until Ctrl-C).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

from jbod_runtime import listen_ports, maven_jars

KAFKA_VERSION = "4.3.1"
SCALA_BINARY_VERSION = "2.13"
# What Kafka's own distribution puts beside its jars for logging (its poms name slf4j-api 1.7.36
# and no binding, so Maven alone would leave the tools without one).
SLF4J_VERSION = "2.0.17"
LOG4J_VERSION = "2.25.4"  # the log4j-core kafka_2.13 4.3.1 depends on

JARS = maven_jars.JarSet(
    (
        maven_jars.Artifact("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
        maven_jars.Artifact("org.apache.kafka", f"kafka_{SCALA_BINARY_VERSION}", KAFKA_VERSION),
        # Kafka Connect's file connectors (the runtime comes with kafka-tools), for Connect tests.
        maven_jars.Artifact("org.apache.kafka", "connect-file", KAFKA_VERSION),
        # Kafka Streams and its examples (WordCountDemo), for Streams tests.
        maven_jars.Artifact("org.apache.kafka", "kafka-streams-examples", KAFKA_VERSION),
        maven_jars.Artifact("org.slf4j", "slf4j-api", SLF4J_VERSION),
        maven_jars.Artifact("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    )
)

JAVA_SOURCES = Path(__file__).resolve().parent / "kafka"

Log = Callable[[str], None]
CommandConfig = Mapping[str, str] | Path | None


DEFAULT_HEAP = ("-Xmx256M",)  # kafka-run-class.sh's KAFKA_HEAP_OPTS when a script sets none


@dataclasses.dataclass(frozen=True)
class Script:
    """One of Kafka's `bin/` scripts: the main class it runs and what it sets before `kafka-run-class.sh`.

    `connects`: it talks to a cluster, taking `--bootstrap-server` and `--command-config`.
    `logging`: `tools` (WARN and above to stderr) or `server` (INFO to stdout).
    `quick`: a short-lived command, run with `QUICK_JVM_OPTS` instead of the server's JIT and GC
    settings (the same output; the perf tests and servers keep Kafka's settings).
    """

    name: str
    main_class: str
    heap: tuple[str, ...] = DEFAULT_HEAP
    connects: bool = True
    logging: Literal["tools", "server"] = "tools"
    quick: bool = True


SCRIPTS: Mapping[str, Script] = {
    s.name: s
    for s in (
        Script("kafka-topics.sh", "org.apache.kafka.tools.TopicCommand"),
        Script("kafka-configs.sh", "kafka.admin.ConfigCommand"),
        Script("kafka-acls.sh", "org.apache.kafka.tools.AclCommand"),
        Script("kafka-transactions.sh", "org.apache.kafka.tools.TransactionsCommand"),
        Script("kafka-log-dirs.sh", "org.apache.kafka.tools.LogDirsCommand"),
        Script("kafka-console-producer.sh", "org.apache.kafka.tools.ConsoleProducer", heap=("-Xmx512M",)),
        Script(
            "kafka-console-consumer.sh", "org.apache.kafka.tools.consumer.ConsoleConsumer", heap=("-Xmx512M",)
        ),
        Script("kafka-get-offsets.sh", "org.apache.kafka.tools.GetOffsetShell"),
        Script("kafka-delete-records.sh", "org.apache.kafka.tools.DeleteRecordsCommand"),
        Script("kafka-reassign-partitions.sh", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
        Script("kafka-leader-election.sh", "org.apache.kafka.tools.LeaderElectionCommand"),
        Script("kafka-consumer-groups.sh", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
        Script(
            "kafka-producer-perf-test.sh",
            "org.apache.kafka.tools.ProducerPerformance",
            heap=("-Xmx512M",),
            quick=False,
        ),
        Script(
            "kafka-consumer-perf-test.sh",
            "org.apache.kafka.tools.ConsumerPerformance",
            heap=("-Xmx512M",),
            quick=False,
        ),
        Script("kafka-storage.sh", "kafka.tools.StorageTool", connects=False),
        Script(
            "connect-distributed.sh",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            heap=("-Xms256M", "-Xmx2G"),
            connects=False,
            logging="server",
            quick=False,
        ),
        Script(
            "kafka-server-start.sh",
            "kafka.Kafka",
            heap=("-Xmx1G", "-Xms1G"),
            connects=False,
            logging="server",
            quick=False,
        ),
    )
}

# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS and KAFKA_JMX_OPTS defaults.
JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
# A command that runs for a second or two spends most of its CPU compiling with C2 and setting
# up G1; the client JIT alone and the serial collector halve that (measured: kafka-topics.sh
# --list, 2.4-4.8 s of CPU -> 1.5-1.7 s) and change nothing the command prints.
QUICK_JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
JMX_OPTS = (
    "-Dcom.sun.management.jmxremote",
    "-Dcom.sun.management.jmxremote.authenticate=false",
    "-Dcom.sun.management.jmxremote.ssl=false",
)

# Kafka's config/tools-log4j2.yaml: tools log WARN and above to stderr.
TOOLS_LOG4J2 = """\
Configuration:
  Properties:
    Property:
      - name: "logPattern"
        value: "[%d] %p %m (%c)%n"
  Appenders:
    Console:
      name: STDERR
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "${logPattern}"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDERR
"""

# The server logs INFO to stdout (KafkaCluster sends it to <work>/logs/server.out); Kafka's own
# config/log4j2.yaml writes the same to rolling files under kafka.logs.dir.
SERVER_LOG4J2 = """\
Configuration:
  Properties:
    Property:
      - name: "logPattern"
        value: "[%d] %p %m (%c)%n"
  Appenders:
    Console:
      name: STDOUT
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "${logPattern}"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: INFO
      - name: state.change.logger
        level: WARN
"""


def cache_root() -> Path:
    """The cache directory: `$JBOD_KAFKA_CACHE` or `~/.cache/jbod-kafka`."""
    override = os.environ.get("JBOD_KAFKA_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "jbod-kafka"


@dataclasses.dataclass(frozen=True)
class KafkaInstall:
    """Kafka's jars of one version in `libs`, beside the log4j configs the scripts are run with."""

    libs: Path

    @classmethod
    def ensure(cls, cache: Path | None = None, *, log: Log = print) -> KafkaInstall:
        return cls(ensure_jars(cache, log=log))

    @property
    def root(self) -> Path:
        return self.libs.parent

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"

    def log4j_config(self, logging: Literal["tools", "server"]) -> Path:
        return self.root / "config" / ("tools-log4j2.yaml" if logging == "tools" else "log4j2.yaml")

    def java_command(
        self, script: str, args: Sequence[str], *, log_dir: Path | None = None, heap: Sequence[str] = ()
    ) -> list[str]:
        """The `java` command line `bin/<script> args` runs (as `kafka-run-class.sh` builds it).

        `log_dir` is `$LOG_DIR` (default `<root>/logs`); a server there also gets the GC log
        `kafka-server-start.sh` asks for (`-loggc`). `heap` replaces the script's heap options.
        """
        spec = SCRIPTS[script]
        logs = log_dir or self.root / "logs"
        gc_log: tuple[str, ...] = ()
        if spec.logging == "server":
            gc_log = (f"-Xlog:gc*:file={logs}/kafkaServer-gc.log:time,tags:filecount=10,filesize=100M",)
        return [
            java(),
            *(heap or spec.heap),
            *(QUICK_JVM_OPTS if spec.quick else JVM_PERFORMANCE_OPTS),
            *gc_log,
            *JMX_OPTS,
            f"-Dkafka.logs.dir={logs}",
            f"-Dlog4j2.configurationFile={self.log4j_config(spec.logging)}",
            "-cp",
            self.classpath,
            spec.main_class,
            *args,
        ]


def java() -> str:
    """`$JAVA_HOME/bin/java` or `java`, as kafka-run-class.sh chooses."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


# --- resolving the jars ---------------------------------------------------------------------------


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def ensure_jars(cache: Path | None = None, *, log: Log = print, maven_repo: Path | None = None) -> Path:
    """Resolve Kafka's jars into `<cache>/<version>/libs/` unless complete there; return that directory.

    Prints one line with its duration. `maven_repo` is Maven's local repository (default
    `<cache>/m2`); a half-finished or foreign `libs/` is removed and resolved again
    (`jbod_runtime.maven_jars`, shared with the pipeline's Spark Kafka source).
    """
    cache = cache or cache_root()
    root = cache / KAFKA_VERSION
    resolved = maven_jars.ensure(JARS, root, maven_repo=maven_repo or cache / "m2")
    with maven_jars.locked(maven_jars.lock_file(root)):
        _write_if_changed(root / "config" / "tools-log4j2.yaml", TOOLS_LOG4J2)
        _write_if_changed(root / "config" / "log4j2.yaml", SERVER_LOG4J2)
    if resolved.fetched:
        log(
            f"Resolved Kafka {KAFKA_VERSION} jars with Maven into {resolved.libs}: {len(resolved.jars)} jars, "
            f"{resolved.mebibytes:.0f} MiB in {resolved.seconds:.1f} s"
        )
    else:
        log(
            f"Kafka {KAFKA_VERSION} jars current in {resolved.libs} "
            f"({len(resolved.jars)} jars, checked in {resolved.seconds:.2f} s)"
        )
    return resolved.libs


_DEFAULT_INSTALL: KafkaInstall | None = None


def default_install() -> KafkaInstall:
    """The install in the default cache, ensured once per process (its line goes to stderr)."""
    global _DEFAULT_INSTALL
    if _DEFAULT_INSTALL is None:
        _DEFAULT_INSTALL = KafkaInstall.ensure(log=lambda line: print(line, file=sys.stderr))
    return _DEFAULT_INSTALL


# --- running the tools ----------------------------------------------------------------------------


@contextlib.contextmanager
def _config_file(config: CommandConfig) -> Iterator[Path | None]:
    """A path for `--command-config`: `config` itself, or a temporary file holding the mapping."""
    if config is None or isinstance(config, Path):
        yield config
        return
    with tempfile.NamedTemporaryFile("w", prefix="kafka-client-", suffix=".properties") as f:
        f.write(_properties(config))
        f.flush()
        yield Path(f.name)


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={value.replace(chr(92), chr(92) * 2)}\n" for key, value in values.items())


def run_tool(  # noqa: PLR0913  the script and its args, then one keyword per run option
    name: str,
    args: Sequence[str],
    *,
    bootstrap: str | None,
    command_config: CommandConfig = None,
    input: str | None = None,
    timeout: float = 120.0,
    install: KafkaInstall | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `bin/<name> [--bootstrap-server B] [--command-config F] args` and capture its output.

    `command_config` is a properties file or a mapping written to one for the run (a client's
    `security.protocol`, `sasl.*`, ...). `input` is the tool's stdin (the console producer's
    records, one a line); without it stdin is empty. A run past `timeout` is killed
    (`subprocess.TimeoutExpired`). The exit status is the caller's to judge.
    """
    spec = SCRIPTS[name]
    if not spec.connects and (bootstrap or command_config is not None):
        raise ValueError(f"{name} takes no --bootstrap-server or --command-config")
    install = install or default_install()
    with _config_file(command_config) as config_path:
        leading = [*(["--bootstrap-server", bootstrap] if bootstrap else [])]
        leading += ["--command-config", str(config_path)] if config_path else []
        return subprocess.run(
            install.java_command(name, [*leading, *args]),
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


# --- the Admin calls no script makes --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, order=True)
class Replica:
    """Kafka's `TopicPartitionReplica`: one partition's replica on one broker."""

    topic: str
    partition: int
    broker: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.broker}"

    @classmethod
    def parse(cls, text: str) -> Replica:
        topic, partition, broker = text.rsplit(":", 2)
        return cls(topic, int(partition), int(broker))


@dataclasses.dataclass(frozen=True)
class ReplicaLogDir:
    """Kafka's `ReplicaLogDirInfo`: where a replica lives, and where it is moving to (if anywhere)."""

    replica: Replica
    current_dir: str | None
    current_offset_lag: int
    future_dir: str | None
    future_offset_lag: int


class AdminCallError(RuntimeError):
    """A `JavaAdmin` program exited non-zero; the message is its stderr (the exception's message)."""

    def __init__(self, program: str, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        super().__init__(f"{program} exited {proc.returncode}: {proc.stderr.strip()}")


@dataclasses.dataclass(frozen=True)
class JavaAdmin:
    """The Java Admin client's calls that no script makes, by the programs in `e2e/kafka/`."""

    bootstrap: str
    command_config: CommandConfig = None
    install: KafkaInstall | None = None

    def run(
        self, program: str, args: Sequence[str], *, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """`java -cp 'libs/*' e2e/kafka/<program>.java --bootstrap-server B [--command-config F] args`."""
        install = self.install or default_install()
        with _config_file(self.command_config) as config_path:
            cmd = [
                java(),
                *DEFAULT_HEAP,
                *QUICK_JVM_OPTS,
                f"-Dlog4j2.configurationFile={install.log4j_config('tools')}",
                "-cp",
                install.classpath,
                str(JAVA_SOURCES / f"{program}.java"),
                "--bootstrap-server",
                self.bootstrap,
                *(["--command-config", str(config_path)] if config_path else []),
                *args,
            ]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, input="")

    def alter_replica_log_dirs(self, moves: Mapping[Replica, str], *, timeout: float = 120.0) -> None:
        """`Admin.alterReplicaLogDirs(moves)`; raises `AdminCallError` if any replica was refused."""
        proc = self.run("AlterReplicaLogDirs", [f"{r}={d}" for r, d in moves.items()], timeout=timeout)
        if proc.returncode != 0:
            raise AdminCallError("AlterReplicaLogDirs", proc)

    def describe_replica_log_dirs(
        self, replicas: Iterable[Replica], *, timeout: float = 120.0
    ) -> dict[Replica, ReplicaLogDir]:
        """`Admin.describeReplicaLogDirs(replicas)`; raises `AdminCallError` when the call failed."""
        proc = self.run("DescribeReplicaLogDirs", [str(r) for r in replicas], timeout=timeout)
        if proc.returncode != 0:
            raise AdminCallError("DescribeReplicaLogDirs", proc)
        found = {}
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            replica = Replica.parse(row["replica"])
            found[replica] = ReplicaLogDir(
                replica=replica,
                current_dir=row["currentReplicaLogDir"],
                current_offset_lag=row["currentReplicaOffsetLag"],
                future_dir=row["futureReplicaLogDir"],
                future_offset_lag=row["futureReplicaOffsetLag"],
            )
        return found


# --- a real Kafka ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScramUser:
    """A SCRAM user the cluster is formatted with (`kafka-storage.sh format --add-scram`)."""

    name: str = "admin"
    password: str = "admin-secret"
    mechanism: str = "SCRAM-SHA-512"

    @property
    def jaas_config(self) -> str:
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.name}" password="{self.password}";'
        )

    def client_config(self) -> dict[str, str]:
        """What a client of the SASL_PLAINTEXT listener sets to log in as this user."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.mechanism,
            "sasl.jaas.config": self.jaas_config,
        }


def server_properties(
    *, node_id: int, port: int, controller_port: int, log_dirs: Sequence[Path], scram: ScramUser | None
) -> dict[str, str]:
    """server.properties of a single combined node (Kafka's config/server.properties, on 127.0.0.1)."""
    listener = "SASL_PLAINTEXT" if scram else "PLAINTEXT"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"{listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"{listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "inter.broker.listener.name": listener,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
        "log.dirs": ",".join(str(d) for d in log_dirs),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return props | _scram_listener(listener, scram)


def _scram_listener(listener: str, scram: ScramUser | None) -> dict[str, str]:
    """A broker's settings for `scram` on `listener`, inter-broker traffic included (none without)."""
    if scram is None:
        return {}
    prefix = f"listener.name.{listener.lower()}.{scram.mechanism.lower()}"
    return {
        "sasl.enabled.mechanisms": scram.mechanism,
        "sasl.mechanism.inter.broker.protocol": scram.mechanism,
        f"{prefix}.sasl.jaas.config": scram.jaas_config,
    }


def random_cluster_id() -> str:
    """A cluster id as `kafka-storage.sh random-uuid` prints one (16 random bytes, base64url),
    never starting with `-` (as Kafka's `Uuid.randomUuid`: `format -t -x...` reads it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _terminate_with_parent() -> Callable[[], None]:
    """A `preexec_fn`: the child gets SIGTERM when the process that started it dies (Linux `prctl`).

    `prctl` is looked up here, in the parent, so the child only makes the one call between fork and
    exec (nothing there takes a lock another thread could hold).
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


# What the node logs once it serves clients: the server started, and the controller unfenced it.
READY_LINES = ("Kafka Server started", "The broker has been unfenced")


def _start_node(  # noqa: PLR0913  the install and the node's config, then its format and launch options
    install: KafkaInstall,
    config: Path,
    *,
    cluster_id: str,
    scram: ScramUser | None,
    heap: Sequence[str],
    standalone: bool,
) -> subprocess.Popen[bytes]:
    """Format a node's storage with `kafka-storage.sh format` (`--standalone` for a combined node
    that is its own quorum; with `scram`, its SCRAM user) and start its JVM (`_launch_node`)."""
    scram_args = (
        ["--add-scram", f"{scram.mechanism}=[name={scram.name},password={scram.password}]"] if scram else []
    )
    standalone_args = ["--standalone"] if standalone else []
    formatted = run_tool(
        "kafka-storage.sh",
        ["format", *standalone_args, "-t", cluster_id, "-c", str(config), *scram_args],
        bootstrap=None,
        install=install,
    )
    if formatted.returncode != 0:
        raise RuntimeError(
            f"kafka-storage.sh format of {config} failed: {formatted.stdout}{formatted.stderr}"
        )
    return _launch_node(install, config, heap=heap)


def _launch_node(install: KafkaInstall, config: Path, *, heap: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start a formatted node's JVM, output to `<config's dir>/logs/server.out` (written anew)."""
    logs = config.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "server.out").open("wb") as out:
        return subprocess.Popen(
            install.java_command("kafka-server-start.sh", [str(config)], log_dir=logs, heap=tuple(heap)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminate_with_parent(),  # noqa: PLW1509  one prctl call, looked up before the fork
        )


def _stop_processes(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM to every process still running, then SIGKILL to those not gone within `timeout`."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serving(server_log: Path, port: int) -> bool:
    """The node logged that it is unfenced and accepts connections on `port`."""
    if not all(line in server_log.read_text(errors="replace") for line in READY_LINES):
        return False
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return True


class _ToolsAgainst:
    """Kafka's tools and Java Admin against a running cluster, logged in as its SCRAM user if any."""

    install: KafkaInstall
    scram: ScramUser | None

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def client_config(self) -> dict[str, str]:
        """The client settings for the broker listener(s) (empty for PLAINTEXT)."""
        return self.scram.client_config() if self.scram else {}

    def run_tool(
        self, name: str, args: Sequence[str], *, input: str | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """`run_tool` against this cluster, logged in as its SCRAM user if it has one."""
        return run_tool(
            name,
            args,
            bootstrap=self.bootstrap,
            command_config=self.client_config or None,
            input=input,
            timeout=timeout,
            install=self.install,
        )

    def admin(self) -> JavaAdmin:
        return JavaAdmin(self.bootstrap, self.client_config or None, self.install)


class KafkaCluster(_ToolsAgainst):
    """A real single-node Apache Kafka (KRaft, broker and controller in one JVM) on 127.0.0.1.

    `start()` formats `log_dir_count` data directories with `kafka-storage.sh format --standalone`
    (with `scram`, the SASL_PLAINTEXT listener's user) and starts `kafka.Kafka` (`properties` added
    to its server.properties), returning once the broker is unfenced; `stop()` sends SIGTERM, kills after `stop_timeout`, and removes the work
    directory unless it was given. Server output: `<work>/logs/server.out`.
    """

    def __init__(  # noqa: PLR0913  the install, then one keyword per node option
        self,
        install: KafkaInstall,
        *,
        log_dir_count: int = 1,
        scram: ScramUser | None = None,
        node_id: int = 1,
        cluster_id: str | None = None,
        work_dir: Path | None = None,
        heap: Sequence[str] = (),
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.install = install
        self.scram = scram
        self.node_id = node_id
        self.properties = dict(properties or {})
        self.cluster_id = cluster_id or random_cluster_id()
        self._given_work_dir = work_dir
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="jbod-kafka-"))
        self.log_dirs = tuple(self.work_dir / "data" / f"d{i}" for i in range(log_dir_count))
        self.heap = tuple(heap)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port, self.controller_port = listen_ports.free_listen_ports(2)
        self.started_in: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def server_log(self) -> Path:
        return self.work_dir / "logs" / "server.out"

    @property
    def pid(self) -> int:
        """The pid of the node's JVM (it changes on `restart`), for CPU and memory readings."""
        if self._proc is None:
            raise RuntimeError("Kafka is not running")
        return self._proc.pid

    def start(self) -> KafkaCluster:
        started = time.monotonic()
        config = self.work_dir / "server.properties"
        props = server_properties(
            node_id=self.node_id,
            port=self.port,
            controller_port=self.controller_port,
            log_dirs=self.log_dirs,
            scram=self.scram,
        )
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        config.write_text(_properties(props | self.properties))
        self._proc = _start_node(
            self.install,
            config,
            cluster_id=self.cluster_id,
            scram=self.scram,
            heap=self.heap,
            standalone=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        assert self._proc is not None
        while not _serving(self.server_log, self.port):
            if self._proc.poll() is not None:
                text = self.server_log.read_text(errors="replace")
                raise RuntimeError(f"Kafka exited with {self._proc.returncode}:\n{text[-4000:]}")
            if time.monotonic() > deadline:
                text = self.server_log.read_text(errors="replace")
                raise TimeoutError(f"Kafka not ready after {self.start_timeout:.0f} s:\n{text[-4000:]}")
            time.sleep(0.2)

    def restart(self) -> KafkaCluster:
        """Stop the node (SIGTERM: a controlled shutdown) and start it again on the same storage,
        returning once it is unfenced again; its partitions' leader epochs move on, as after any
        restart of a single node."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_processes([proc], self.stop_timeout)
        self._proc = _launch_node(self.install, self.work_dir / "server.properties", heap=self.heap)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_processes([proc], self.stop_timeout)
        if self._given_work_dir is None and not os.environ.get("JBOD_KAFKA_KEEP"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def controller_properties(*, node_id: int, controller_port: int, metadata_dir: Path) -> dict[str, str]:
    """server.properties of a dedicated KRaft controller, the only voter of a static quorum."""
    return {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "log.dirs": str(metadata_dir),
    }


def broker_properties(  # noqa: PLR0913  one keyword per node setting
    *,
    node_id: int,
    port: int,
    controller_id: int,
    controller_port: int,
    log_dirs: Sequence[Path],
    scram: ScramUser | None,
) -> dict[str, str]:
    """server.properties of a broker-only node of a cluster with one dedicated controller: Kafka's
    `config/broker.properties` on 127.0.0.1, its listener SASL_PLAINTEXT with `scram` (inter-broker
    traffic too) or PLAINTEXT; replication factors and `min.insync.replicas` are Kafka's defaults."""
    listener = "SASL_PLAINTEXT" if scram else "PLAINTEXT"
    props = {
        "process.roles": "broker",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{controller_id}@127.0.0.1:{controller_port}",
        "listeners": f"{listener}://127.0.0.1:{port}",
        "advertised.listeners": f"{listener}://127.0.0.1:{port}",
        "inter.broker.listener.name": listener,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
        "log.dirs": ",".join(str(d) for d in log_dirs),
        "group.initial.rebalance.delay.ms": "0",
    }
    return props | _scram_listener(listener, scram)


class KafkaNodesCluster(_ToolsAgainst):
    """A real Apache Kafka of one dedicated KRaft controller and `brokers` broker-only nodes, each
    its own JVM started by `kafka.Kafka` with `kafka-server-start.sh`'s options, on 127.0.0.1.

    Node ids: brokers 1..`brokers`, the controller `CONTROLLER_ID`. Every node is formatted by
    `kafka-storage.sh format` (with `scram`, every one with the same SCRAM user, which only the
    controller's bootstrap uses); each broker has `log_dir_count` data directories. `start()`
    returns once every broker logged that it is unfenced and accepts connections; `stop()` sends
    SIGTERM to the brokers, then the controller, kills what is left after `stop_timeout`, and
    removes the work directory unless it was given. `pids` are the JVMs' (broker id → pid), for
    CPU and memory readings. Output: `<work>/<node>/logs/server.out`. `broker_settings` adds
    server.properties keys per broker id (e.g. `broker.rack`).
    """

    CONTROLLER_ID = 100

    def __init__(  # noqa: PLR0913  the install, then one keyword per cluster option
        self,
        install: KafkaInstall,
        *,
        brokers: int = 3,
        log_dir_count: int = 2,
        scram: ScramUser | None = None,
        work_dir: Path | None = None,
        heap: Sequence[str] = (),
        start_timeout: float = 180.0,
        stop_timeout: float = 30.0,
        broker_settings: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        self.install = install
        self.scram = scram
        self.broker_settings = {b: dict(v) for b, v in (broker_settings or {}).items()}
        self.cluster_id = random_cluster_id()
        self._given_work_dir = work_dir
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="jbod-kafka-nodes-"))
        self.broker_ids = tuple(range(1, brokers + 1))
        self.log_dir_count = log_dir_count
        self.heap = tuple(heap)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        *ports, self.controller_port = listen_ports.free_listen_ports(brokers + 1)
        self.ports = dict(zip(self.broker_ids, ports, strict=True))
        self.started_in: float | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[b]}" for b in self.broker_ids)

    @property
    def pids(self) -> dict[int, int]:
        """Broker id → the pid of its JVM (`CONTROLLER_ID` → the controller's)."""
        return {node: proc.pid for node, proc in self._procs.items()}

    def node_dir(self, node_id: int) -> Path:
        return self.work_dir / f"node-{node_id}"

    def log_dirs(self, node_id: int) -> tuple[Path, ...]:
        return tuple(self.node_dir(node_id) / "data" / f"d{i}" for i in range(self.log_dir_count))

    def server_log(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "logs" / "server.out"

    def _properties(self, node_id: int) -> dict[str, str]:
        if node_id == self.CONTROLLER_ID:
            return controller_properties(
                node_id=node_id,
                controller_port=self.controller_port,
                metadata_dir=self.node_dir(node_id) / "metadata",
            )
        return broker_properties(
            node_id=node_id,
            port=self.ports[node_id],
            controller_id=self.CONTROLLER_ID,
            controller_port=self.controller_port,
            log_dirs=self.log_dirs(node_id),
            scram=self.scram,
        ) | self.broker_settings.get(node_id, {})

    def _format_and_start(self, node_id: int) -> None:
        config = self.node_dir(node_id) / "server.properties"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(_properties(self._properties(node_id)))
        self._procs[node_id] = _start_node(
            self.install,
            config,
            cluster_id=self.cluster_id,
            scram=self.scram,
            heap=self.heap,
            standalone=False,
        )

    def start(self) -> KafkaNodesCluster:
        started = time.monotonic()
        try:
            for node in (self.CONTROLLER_ID, *self.broker_ids):
                self._format_and_start(node)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        waiting = set(self.broker_ids)
        while waiting:
            for node, proc in self._procs.items():
                if proc.poll() is not None:
                    text = self.server_log(node).read_text(errors="replace")
                    raise RuntimeError(f"Kafka node {node} exited with {proc.returncode}:\n{text[-4000:]}")
            waiting = {node for node in waiting if not _serving(self.server_log(node), self.ports[node])}
            if waiting and time.monotonic() > deadline:
                node = min(waiting)
                text = self.server_log(node).read_text(errors="replace")
                raise TimeoutError(
                    f"Kafka broker {node} not ready after {self.start_timeout:.0f} s:\n{text[-4000:]}"
                )
            time.sleep(0.2)

    def _stop_nodes(self, nodes: Sequence[int]) -> None:
        _stop_processes([self._procs.pop(n) for n in nodes if n in self._procs], self.stop_timeout)

    def stop(self) -> None:
        self._stop_nodes(self.broker_ids)
        self._stop_nodes((self.CONTROLLER_ID,))
        if self._given_work_dir is None and not os.environ.get("JBOD_KAFKA_KEEP"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaNodesCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kafka_tools", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("jars", help=f"resolve Kafka {KAFKA_VERSION}'s jars into the cache (once)")
    sub.add_parser("path", help="print the libs directory")
    sub.add_parser("scripts", help="print each script's main class")
    run = sub.add_parser(
        "run", help="run a Kafka script's main class: run kafka-topics.sh --bootstrap-server ..."
    )
    run.add_argument("script", choices=sorted(SCRIPTS))
    run.add_argument("args", nargs=argparse.REMAINDER)
    serve = sub.add_parser("serve", help="run a single-node Kafka on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--scram", action="store_true", help="SASL_PLAINTEXT with SCRAM-SHA-512 user admin")
    serve.add_argument("--log-dirs", type=int, default=1)
    args = parser.parse_args(argv)

    def stderr_log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    if args.cmd == "scripts":
        for spec in SCRIPTS.values():
            print(f"{spec.name:28} {spec.main_class}")
        return 0
    try:
        install = KafkaInstall.ensure(log=print if args.cmd == "jars" else stderr_log)
    except maven_jars.ResolutionError as exc:
        print(f"{exc}\n{exc.output}".rstrip(), file=sys.stderr)
        return 1
    if args.cmd == "path":
        print(install.libs)
    elif args.cmd == "run":
        cmd = install.java_command(args.script, args.args)
        os.execvp(cmd[0], cmd)
    elif args.cmd == "serve":
        cluster = KafkaCluster(
            install, log_dir_count=args.log_dirs, scram=ScramUser() if args.scram else None
        )
        with cluster:
            print(f"Kafka {KAFKA_VERSION} started in {cluster.started_in:.1f} s: {cluster.bootstrap}")
            for key, value in cluster.client_config.items():
                print(f"  {key}={value}")
            print(f"  log dirs {', '.join(map(str, cluster.log_dirs))}; log {cluster.server_log}")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
