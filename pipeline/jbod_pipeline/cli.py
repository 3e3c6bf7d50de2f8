"""`jbod-pipeline`: the analytics jobs (protocol §6) and a generator of sample clusters.

    jbod-pipeline disks|blast-radius|plan|timeline|all --metadata PATH [--telemetry PATH] --out DIR
    jbod-pipeline generate --out DIR [--brokers N --dirs N --partitions N --seed N]

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

from jbod_pipeline import errors, paths, planner, runtime, synthetic
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
    """Intra-broker moves: every dir under --threshold, usage even within each broker, --drain dirs emptied."""
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
