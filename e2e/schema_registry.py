"""Apicurio Registry, a schema registry whose storage is a topic on the brokers (KafkaSQL), run from
the Quarkus application Apicurio publishes on Maven Central.

Apicurio deploys its registry as `io.apicurio:apicurio-registry-app:<version>:tar.gz:all`: the
Quarkus fast-jar layout (`quarkus-app/`'s content: the `-runner.jar`, `lib/`, `app/`), ready for
`java -jar`. Karapace is not on PyPI and Confluent's registry is not on Maven Central.

Guarantees:
* The archive is `REGISTRY_ARTIFACT` at `REGISTRY_VERSION` (3.0.9: the newest whose classes run on
  Java 17, the machine's Java; Apicurio 3.1 and later need Java 21). It is fetched by Maven's
  dependency plugin `GET_PLUGIN` (pinned 2.8: the 3.x goals read the artifact's descriptor, whose
  parent pom `io.apicurio:apicurio-registry:3.0.9` is not on Maven Central, and refuse) from the
  repositories the machine's Maven is set up for (Maven Central), checksums strict, into the local
  repository `<cache>/m2`, unpacked (tar's `data` filter: nothing outside the directory, no
  devices) into `<cache>/<version>/app/`, and the archive then removed from `<cache>/m2`.
  `<cache>` is `$JBOD_REGISTRY_CACHE` or `~/.cache/jbod-registry`.
* The application counts as installed only when the marker `<cache>/<version>/app.json`, written
  last, names the same artifact and plugin and exactly the files present, each with its size;
  otherwise the directory is removed and fetched again. Concurrent callers (threads or processes)
  are serialised by the lock file `<cache>/<version>.lock`. A failure is a
  `maven_jars.ResolutionError` of one line.
* `SchemaRegistry` runs the registry with KafkaSQL storage against `bootstrap`, its Kafka clients
  (producer, consumer, admin) configured with `client_config` (the Java client's settings, e.g.
  SCRAM's `security.protocol`, `sasl.mechanism`, `sasl.jaas.config`): the settings go into
  `<work>/config/application.properties` (Quarkus reads it from the working directory), never onto
  the command line. It listens on 127.0.0.1 only; `start()` returns once `GET /health/ready`
  answers UP (the journal read to its end) and raises with the log's tail if the JVM exits or the
  timeout passes; `stop()` sends SIGTERM, then kills after `stop_timeout`; `restart()` is a new
  JVM on the same port, which rebuilds its state from the journal topic alone (its in-memory
  database starts empty, its consumer group is new).
* The registry creates its topics (`JOURNAL_TOPIC`, `SNAPSHOTS_TOPIC`, `EVENTS_TOPIC`) with one
  partition, replication factor min(3, brokers) and `min.insync.replicas` one below it; by default
  they are created with `cleanup.policy=compact` (`topic_config`; Apicurio's own default would be
  Kafka's `delete` with a 7-day retention, which loses schemas). It uses no transactions (its
  producers are idempotent, acks=all).

Command line (from the repo root): `python -m e2e.schema_registry fetch`,
`python -m e2e.schema_registry serve --bootstrap-server HOST:PORT --command-config admin.properties
[--port N] [--work-dir DIR]` (the registry until Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from e2e.kafka_tools import Log, _terminate_with_parent, java
from jbod_runtime import listen_ports, maven_jars

REGISTRY_VERSION = "3.0.9"
REGISTRY_ARTIFACT = f"io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}:tar.gz:all"
GET_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:2.8"
MARKER = "app.json"
APP = "app"

JOURNAL_TOPIC = "kafkasql-journal"
SNAPSHOTS_TOPIC = "kafkasql-snapshots"
EVENTS_TOPIC = "registry-events"
TOPICS = (JOURNAL_TOPIC, SNAPSHOTS_TOPIC, EVENTS_TOPIC)
#: Topic configs the registry creates its topics with (`apicurio.kafkasql.topic.<key>`).
COMPACTED = {"cleanup.policy": "compact"}
#: Confluent's schema registry API, which Apicurio serves beside its own (`/apis/registry/v3`).
CCOMPAT_PATH = "/apis/ccompat/v7"
#: A small heap, and a JVM that starts fast on a small machine (C1 only, serial GC): a registry for
#: trying things and tests, not one tuned for throughput (about 15 s to ready instead of 20-30 s).
DEFAULT_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def cache_root() -> Path:
    """The cache directory: `$JBOD_REGISTRY_CACHE` or `~/.cache/jbod-registry`."""
    override = os.environ.get("JBOD_REGISTRY_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "jbod-registry"


# --- fetching the application ---------------------------------------------------------------------


def _marker_key() -> dict[str, str]:
    return {"artifact": REGISTRY_ARTIFACT, "plugin": GET_PLUGIN}


def _file_sizes(app: Path) -> dict[str, int]:
    return {str(p.relative_to(app)): p.stat().st_size for p in sorted(app.rglob("*")) if p.is_file()}


def _is_complete(root: Path) -> bool:
    try:
        marker = json.loads((root / MARKER).read_text())
        return bool(marker["key"] == _marker_key() and marker["files"] == _file_sizes(root / APP))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _archive_path(maven_repo: Path) -> Path:
    group, artifact, version, kind, classifier = REGISTRY_ARTIFACT.split(":")
    return maven_repo.joinpath(
        *group.split("."), artifact, version, f"{artifact}-{version}-{classifier}.{kind}"
    )


def _fetch(root: Path, maven_repo: Path, *, timeout: float = 1800) -> None:
    """Fetch the archive with Maven and unpack it into `root/app`, then write the marker."""
    if shutil.which("mvn") is None:
        raise maven_jars.ResolutionError("`mvn` is not on PATH (Apicurio Registry is fetched with Maven)")
    for stale in (root / MARKER, root / APP, root / f"{APP}.partial"):
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    cmd = [
        "mvn",
        "-B",
        "-q",
        "--strict-checksums",
        "-Dstyle.color=never",
        f"-Dmaven.repo.local={maven_repo}",
        f"{GET_PLUGIN}:get",
        f"-Dartifact={REGISTRY_ARTIFACT}",
        "-Dtransitive=false",
    ]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False, timeout=timeout)
    archive = _archive_path(maven_repo)
    if proc.returncode != 0 or not archive.is_file():
        output = proc.stdout + proc.stderr
        raise maven_jars.ResolutionError(
            f"Maven could not fetch {REGISTRY_ARTIFACT}: {maven_jars.maven_error(output)}", output[-6000:]
        )
    partial = root / f"{APP}.partial"
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    archive.unlink()  # unpacked: the cache keeps one copy
    partial.rename(root / APP)
    tmp = root / f"{MARKER}.tmp"
    tmp.write_text(json.dumps({"key": _marker_key(), "files": _file_sizes(root / APP)}, indent=2))
    tmp.replace(root / MARKER)


@dataclass(frozen=True)
class RegistryInstall:
    """Apicurio Registry's Quarkus application in `app` (`java -jar <runner>`)."""

    app: Path

    @classmethod
    def ensure(cls, cache: Path | None = None, *, log: Log = print) -> RegistryInstall:
        """Fetch the application unless complete in the cache (under the lock); log one line with its duration."""
        cache = cache or cache_root()
        root = cache / REGISTRY_VERSION
        started = time.monotonic()
        with maven_jars.locked(maven_jars.lock_file(root)):
            fetched = not _is_complete(root)
            if fetched:
                _fetch(root, cache / "m2")
            files = _file_sizes(root / APP)
        seconds = time.monotonic() - started
        mebibytes = sum(files.values()) / 2**20
        if fetched:
            log(
                f"Fetched Apicurio Registry {REGISTRY_VERSION} with Maven into {root / APP}: "
                f"{len(files)} files, {mebibytes:.0f} MiB in {seconds:.1f} s"
            )
        else:
            log(f"Apicurio Registry {REGISTRY_VERSION} current in {root / APP} (checked in {seconds:.2f} s)")
        return cls(root / APP)

    @property
    def runner(self) -> Path:
        return self.app / f"apicurio-registry-app-{REGISTRY_VERSION}-runner.jar"


# --- running the registry -------------------------------------------------------------------------


def _properties_value(value: str) -> str:
    """`value` for a properties file Quarkus reads: backslashes kept, `${` not taken as an expression."""
    return value.replace("\\", "\\\\").replace("${", "\\\\${")


def registry_settings(
    *, bootstrap: str, client_config: Mapping[str, str], port: int, topic_config: Mapping[str, str]
) -> dict[str, str]:
    """The registry's settings: HTTP on 127.0.0.1:`port`, KafkaSQL storage on `bootstrap`, every
    Kafka client of it with `client_config`, its topics created with `topic_config`."""
    return {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(port),
        "apicurio.storage.kind": "kafkasql",
        "apicurio.kafkasql.bootstrap.servers": bootstrap,
        **{f"apicurio.kafka.common.{key}": value for key, value in client_config.items()},
        **{f"apicurio.kafkasql.topic.{key}": value for key, value in topic_config.items()},
    }


class SchemaRegistry:
    """Apicurio Registry with KafkaSQL storage against a Kafka cluster (the module's guarantees).

    Output: `<work>/registry.out` (appended across restarts).
    """

    def __init__(  # noqa: PLR0913  the install and where it stores, then one keyword per option
        self,
        install: RegistryInstall,
        *,
        bootstrap: str,
        client_config: Mapping[str, str],
        work_dir: Path | None = None,
        topic_config: Mapping[str, str] = COMPACTED,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        port: int | None = None,
        start_timeout: float = 180.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.install = install
        self._given_work_dir = work_dir
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="jbod-registry-"))
        self.port = port or listen_ports.free_listen_port()
        self.settings = registry_settings(
            bootstrap=bootstrap, client_config=client_config, port=self.port, topic_config=topic_config
        )
        self.jvm_options = tuple(jvm_options)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.started_in: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ccompat_url(self) -> str:
        """The base URL of Confluent's schema registry API (`/subjects`, `/config`, `/schemas/ids`)."""
        return self.url + CCOMPAT_PATH

    @property
    def log(self) -> Path:
        return self.work_dir / "registry.out"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def java_command(self) -> list[str]:
        return [
            java(),
            *self.jvm_options,
            f"-Djava.io.tmpdir={self.work_dir / 'tmp'}",
            "-jar",
            str(self.install.runner),
        ]

    def start(self) -> SchemaRegistry:
        started = time.monotonic()
        config = self.work_dir / "config" / "application.properties"
        config.parent.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        config.write_text("".join(f"{k}={_properties_value(v)}\n" for k, v in self.settings.items()))
        config.chmod(0o600)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                self.java_command(),
                cwd=self.work_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_terminate_with_parent(),  # noqa: PLW1509  one prctl call, looked up before the fork
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self

    def ready(self) -> bool:
        """`GET /health/ready` answers 200 with status UP."""
        try:
            answer = httpx.get(f"{self.url}/health/ready", timeout=5, trust_env=False)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and answer.json().get("status") == "UP"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        assert self._proc is not None
        while not self.ready():
            if self._proc.poll() is not None:
                raise RuntimeError(f"the registry exited with {self._proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the registry not ready after {self.start_timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def restart(self) -> SchemaRegistry:
        """A new JVM on the same port and settings: it reads its state back from the journal topic."""
        self._stop_process()
        return self.start()

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        self._stop_process()
        if self._given_work_dir is None and not os.environ.get("JBOD_KAFKA_KEEP"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.schema_registry", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help=f"fetch Apicurio Registry {REGISTRY_VERSION} into the cache (once)")
    serve = sub.add_parser("serve", help="run the registry (KafkaSQL storage) on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    serve.add_argument(
        "--command-config",
        type=Path,
        help="a Kafka client properties file (security.protocol, sasl.mechanism, sasl.jaas.config, ...)",
    )
    serve.add_argument("--port", type=int, help="its HTTP port on 127.0.0.1 (default: a free one)")
    serve.add_argument("--work-dir", type=Path, help="its config and log (default: a temporary directory)")
    args = parser.parse_args(argv)
    try:
        install = RegistryInstall.ensure(log=print)
    except maven_jars.ResolutionError as exc:
        print(f"{exc}\n{exc.output}".rstrip(), file=sys.stderr)
        return 1
    if args.cmd == "serve":
        from jbod_client.kafka_config import parse_properties

        client_config = parse_properties(args.command_config.read_text()) if args.command_config else {}
        registry = SchemaRegistry(
            install,
            bootstrap=args.bootstrap_server,
            client_config=client_config,
            work_dir=args.work_dir,
            port=args.port,
        )
        # Ctrl-C or SIGTERM stops the registry (SIGINT too when started in the background, where
        # the shell ignores it).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with registry:
            print(
                f"Apicurio Registry {REGISTRY_VERSION} ready in {registry.started_in:.1f} s: {registry.url}"
            )
            print(f"  Confluent-compatible API {registry.ccompat_url}; log {registry.log}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
