"""`jbod-pipeline`: the analytics jobs (protocol §6) and a generator of sample clusters.

    jbod-pipeline disks|blast-radius|plan|timeline|all --metadata PATH [--telemetry PATH] --out DIR
    jbod-pipeline generate --out DIR [--brokers N --dirs N --partitions N --seed N]
    jbod-pipeline topic-stats --bootstrap-server HOST:PORT --command-config FILE --topic T --out DIR
    jbod-pipeline kafka-jars

`topic-stats` reads a topic of the brokers' Kafka listeners through Spark's own Kafka source
(`kafka_source`: the connector's jars resolved from Maven Central once, `kafka-jars` does only
that); a missing connector, an unknown topic or a refused login is one error line.

`--metadata PATH`: a `jbodctl metadata export` (JSON lines or Parquet), or the controller's data
dir (or its `metadata/` dir) whose log files are read directly (`segments`).

Guarantees: Spark local mode unless `--master` says otherwise; every user mistake (bad flag,
missing input, bad lines with `--strict`, a Spark analysis error on the input) prints one line
`jbod-pipeline: error: ...` on stderr and exits non-zero (2 for usage, 1 otherwise), no traceback.
The last stdout line of a job run is a one-line summary per job. Without a subcommand it prints the
help and exits 0.

PySpark and the rest of the `pipeline` extra are imported only when a job runs: `--help` and
`generate` work with the core install alone, and a job run without the extra (or without Java)
is one error line saying what to install (`runtime`).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from jbod_client import kafka_config
from jbod_client.controller import ClientError, read_token
from jbod_pipeline import errors, kafka_source, paths, planner, runtime, synthetic
from jbod_runtime import console

PROG = "jbod-pipeline"


def _common(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--metadata",
            required=True,
            help="metadata log export (JSON lines or Parquet; file or dir), or the controller's "
            "log files read directly (its data dir or DATA_DIR/metadata)",
        ),
        click.option("--telemetry", default=None, help="agent telemetry JSON lines (file or dir)"),
        click.option("--out", required=True, type=click.Path(path_type=Path), help="output directory"),
        click.option("--master", default="local[*]", show_default=True, help="Spark master URL"),
        click.option(
            "--driver-memory", default=None, help="Spark driver memory, e.g. 4g (local mode: the whole run)"
        ),
        click.option(
            "--shuffle-partitions",
            type=click.IntRange(min=1),
            default=None,
            help="spark.sql.shuffle.partitions",
        ),
        click.option("--strict", is_flag=True, help="fail on any bad input line instead of skipping it"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _plan_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--threshold",
            type=click.FloatRange(min=0, max=1, min_open=True),
            default=planner.DEFAULT_THRESHOLD,
            show_default=True,
            help="utilisation every dir should end under",
        ),
        click.option(
            "--balance-margin",
            type=click.FloatRange(min=0, max=1),
            default=planner.DEFAULT_BALANCE_MARGIN,
            show_default=True,
            help="how far (utilisation points) a dir may sit from its broker's mean",
        ),
        click.option("--no-balance", is_flag=True, help="only the capacity (and drain) goals"),
        click.option("--drain", "drain", multiple=True, help="directory id to empty, repeatable"),
        click.option(
            "--across-brokers",
            is_flag=True,
            help="also move replicas between brokers (reassignments): drains, capacity and usage across the cluster",
        ),
        click.option(
            "--drain-broker",
            "drain_broker",
            type=click.IntRange(min=0),
            multiple=True,
            help="broker id to empty onto the other brokers, repeatable (needs --across-brokers)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=True,
    no_args_is_help=False,
)
@click.pass_context
def app(ctx: click.Context) -> None:
    """JBOD analytics on Spark: per-disk load, blast radius, move plans, incident timeline."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _spark_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """`inputs`, `jobs` and `session`, once PySpark, the rest of the extra and Java are there."""
    try:
        from jbod_pipeline import inputs, jobs, session
    except ModuleNotFoundError as exc:
        missing = runtime.missing_extra(exc)
        if missing is None:
            raise
        raise missing from None
    problem = runtime.java_problem(os.environ, which=shutil.which)
    if problem is not None:
        raise errors.MissingRuntimeError(problem)
    return inputs, jobs, session


def _run(names: list[str] | None, **kw: Any) -> None:
    """Run the jobs `names` (every job if None)."""
    drain_brokers = frozenset(kw.get("drain_broker") or ())
    across_brokers = bool(kw.get("across_brokers", False))
    if drain_brokers and not across_brokers:
        raise click.UsageError("--drain-broker needs --across-brokers (its replicas move to other brokers)")
    inputs, jobs, session = _spark_modules()
    if names is None:
        names = list(jobs.JOBS)
    drain = tuple(kw.get("drain") or ())
    for directory in drain:
        if not inputs.re_fullmatch(inputs.UUID_PATTERN, directory):
            raise click.UsageError(f"--drain: {directory!r} is not a directory id")
    goals = planner.Goals(
        threshold=kw.get("threshold", planner.DEFAULT_THRESHOLD),
        balance_margin=kw.get("balance_margin", planner.DEFAULT_BALANCE_MARGIN),
        drain=frozenset(drain),
        balance=not kw.get("no_balance", False),
        across_brokers=across_brokers,
        drain_brokers=drain_brokers,
    )
    options = jobs.Options(
        metadata=kw["metadata"], telemetry=kw["telemetry"], out=kw["out"], strict=kw["strict"], goals=goals
    )
    inputs.check_exists(options.metadata, what="metadata")
    if options.telemetry is not None:
        inputs.check_exists(options.telemetry, what="telemetry")
    needs = {"disks", "plan"} & set(names)
    if needs and options.telemetry is None:
        raise jobs.JobError(f"{sorted(needs)[0]} needs --telemetry (the agents' disk samples)")
    started = time.monotonic()
    given = [options.metadata] if options.telemetry is None else [options.metadata, options.telemetry]
    spark = session.build(
        master=kw["master"],
        driver_memory=kw["driver_memory"],
        shuffle_partitions=kw["shuffle_partitions"],
        input_bytes=paths.local_bytes(given),
    )
    try:
        outcomes = jobs.execute(spark, options, names, log=lambda m: click.echo(f"{PROG}: {m}", err=True))
    finally:
        spark.stop()
    for outcome in outcomes:
        click.echo(outcome.summary)
    click.echo(
        f"Wrote {', '.join(o.job for o in outcomes)} to {options.out} in {time.monotonic() - started:.1f} s"
    )


@app.command("disks")
@_common
@_plan_options
def disks_command(**kw: Any) -> None:
    """Per broker and dir: replicas, leaders, bytes, utilisation, skew."""
    _run(["disks"], **kw)


@app.command("blast-radius")
@_common
def blast_radius_command(**kw: Any) -> None:
    """Per online dir: partitions that would lose their leader, go under min ISR, or go offline."""
    _run(["blast-radius"], **kw)


@app.command("plan")
@_common
@_plan_options
def plan_command(**kw: Any) -> None:
    """Moves: every dir under --threshold, usage even within each broker (across the cluster with
    --across-brokers), --drain dirs and --drain-broker brokers emptied."""
    _run(["plan"], **kw)


@app.command("timeline")
@_common
def timeline_command(**kw: Any) -> None:
    """Incidents in the metadata log: dirs offline, fencing, leader changes, with durations."""
    _run(["timeline"], **kw)


@app.command("all")
@_common
@_plan_options
def all_command(**kw: Any) -> None:
    """Every job in one run (one replay of the log); needs --telemetry."""
    _run(None, **kw)


@app.command("generate")
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="directory for metadata.jsonl and telemetry.jsonl",
)
@click.option("--brokers", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--dirs", type=click.IntRange(min=1), default=4, show_default=True, help="dirs per broker")
@click.option("--partitions", type=click.IntRange(min=1), default=300, show_default=True)
@click.option("--replication-factor", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--topics", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def generate_command(  # noqa: PLR0913  click command: one parameter per option
    out: Path, brokers: int, dirs: int, partitions: int, replication_factor: int, topics: int, seed: int
) -> None:
    """Write a generated cluster (metadata export and telemetry) to try the jobs on."""
    out.mkdir(parents=True, exist_ok=True)
    spec = synthetic.ClusterSpec(
        brokers=brokers,
        dirs_per_broker=dirs,
        partitions=partitions,
        replication_factor=replication_factor,
        topics=min(topics, partitions),
        skewed_dirs=max(1, brokers * dirs // 10),
        offline_dirs=max(1, brokers * dirs // 50),
        recovered_dirs=brokers * dirs // 100,
    )
    made = synthetic.generate(
        spec, seed=seed, metadata=out / "metadata.jsonl", telemetry=out / "telemetry.jsonl"
    )
    click.echo(
        f"Wrote {made.records} records ({made.partitions} partitions) to {out / 'metadata.jsonl'} and "
        f"{made.samples} samples to {out / 'telemetry.jsonl'}"
    )


def _kafka_security(command_config: Path | None, token_file: Path | None) -> kafka_config.KafkaSecurity:
    """The `--command-config` file's user, else `admin` with the token of `--token-file`."""
    try:
        if command_config is not None:
            try:
                text = command_config.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise errors.PipelineError(
                    f"cannot read --command-config {command_config}: {reason}"
                ) from None
            properties = kafka_config.parse_properties(text)
            return kafka_config.security_from_properties(properties, source=str(command_config))
        if token_file is not None:
            return kafka_config.KafkaSecurity.admin(read_token(token_file))
    except ClientError as exc:  # a bad properties file or token file
        raise errors.PipelineError(str(exc)) from None
    raise click.UsageError(
        "pass --command-config FILE (`jbodctl local client-properties` writes one) "
        "or --token-file FILE (JBOD_TOKEN_FILE) to read as admin"
    )


@app.command("topic-stats")
@click.option(
    "--bootstrap-server",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    required=True,
    help="the brokers' Kafka listeners, HOST:PORT[,...] (default: $KAFKA_BOOTSTRAP_SERVERS)",
)
@click.option(
    "--command-config",
    type=click.Path(path_type=Path),
    default=None,
    help="Kafka client properties (security.protocol, sasl.mechanism, sasl.jaas.config), as Kafka's tools take",
)
@click.option(
    "--token-file",
    envvar="JBOD_TOKEN_FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="without --command-config: read as admin with this token (default: $JBOD_TOKEN_FILE)",
)
@click.option("--topic", required=True, help="the topic to read, from its earliest to its latest offsets")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="output directory")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL")
@click.option("--driver-memory", default=None, help="Spark driver memory, e.g. 4g")
@click.option(
    "--shuffle-partitions", type=click.IntRange(min=1), default=None, help="spark.sql.shuffle.partitions"
)
def topic_stats_command(  # noqa: PLR0913  click command: one parameter per option
    bootstrap_server: str,
    command_config: Path | None,
    token_file: Path | None,
    topic: str,
    out: Path,
    master: str,
    driver_memory: str | None,
    shuffle_partitions: int | None,
) -> None:
    """Read a topic through Spark's Kafka source: records, bytes, offsets per partition, records per key."""
    if not kafka_source.TOPIC_NAME.fullmatch(topic):
        raise click.BadParameter(f"{topic!r} is not a Kafka topic name", param_hint="--topic")
    try:
        bootstrap = kafka_config.parse_bootstrap_servers(bootstrap_server)
    except kafka_config.KafkaConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--bootstrap-server") from None
    security = _kafka_security(command_config, token_file)
    _inputs, jobs, session = _spark_modules()
    started = time.monotonic()
    connector = kafka_source.ensure_jars(kafka_source.installed_spark())
    spark = session.build(
        master=master,
        driver_memory=driver_memory,
        shuffle_partitions=shuffle_partitions,
        extra={"spark.jars": ",".join(str(p) for p in connector.paths())},
    )
    try:
        outcome = jobs.execute_topic_stats(spark, jobs.TopicSource(bootstrap, security, topic), out)
    finally:
        spark.stop()
    click.echo(outcome.summary)
    click.echo(f"Wrote topic_partitions, topic_keys to {out} in {time.monotonic() - started:.1f} s")


@app.command("kafka-jars")
def kafka_jars_command() -> None:
    """Resolve Spark's Kafka source for the installed PySpark from Maven Central into the cache (once)."""
    build = kafka_source.installed_spark()
    resolved = kafka_source.ensure_jars(build)
    if resolved.fetched:
        click.echo(
            f"Resolved {build.connector()} with Maven into {resolved.libs}: {len(resolved.jars)} jars, "
            f"{resolved.mebibytes:.0f} MiB in {resolved.seconds:.1f} s"
        )
    else:
        click.echo(
            f"{build.connector()} current in {resolved.libs} "
            f"({len(resolved.jars)} jars, checked in {resolved.seconds:.2f} s)"
        )


def describe_error(exc: Exception) -> str | None:
    """The pipeline's user errors for the console-script runner: a `PipelineError` or `OSError` on
    one line, a Spark error about the input (unreadable file, bad Parquet) by its first line."""
    if isinstance(exc, errors.PipelineError | OSError):
        return console.one_line(exc)
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def main(argv: list[str] | None = None) -> int:
    return console.run_click(app, argv, prog=PROG, describe=describe_error)


if __name__ == "__main__":
    sys.exit(main())
