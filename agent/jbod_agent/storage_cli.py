"""`jbod-storage format`: give every empty log dir (and the metadata dir) a `directory.id` (§4.1);
`jbod-storage convert-logs`: rewrite replicas kept in jbod's legacy record frames as Kafka's
RecordBatch v2 (`log_format`), with the broker stopped.

Guarantees: one line per dir (format) or per converted replica (convert-logs) saying what was
done; any error is one line `jbod-storage: error: ...` on stderr and a non-zero exit (2 for
usage); no traceback.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from jbod_agent.config import CLUSTER_ID_PATTERN, ConfigError, load_config
from jbod_agent.storage import log_format, storage
from jbod_runtime import console

PROG = "jbod-storage"


def build_parser() -> argparse.ArgumentParser:
    parser = console.ArgumentParser(prog=PROG, description="Format JBOD log directories.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=console.ArgumentParser)
    fmt = commands.add_parser(
        "format", help="write meta.properties with a fresh directory.id into every empty dir"
    )
    fmt.add_argument("--config", required=True, type=Path, help="server.properties")
    fmt.add_argument("--cluster-id", required=True, help="the cluster id the dirs belong to")
    fmt.add_argument(
        "--ignore-formatted", action="store_true", help="keep already formatted dirs as they are"
    )
    convert = commands.add_parser(
        "convert-logs",
        help="rewrite replicas in jbod's legacy record format as Kafka's RecordBatch v2 (broker stopped)",
    )
    convert.add_argument("--config", required=True, type=Path, help="server.properties")
    return parser


def convert_logs_command(config_path: Path) -> int:
    config = load_config(config_path)
    total = 0
    for log_dir in config.log_dirs:
        try:
            legacy = log_format.find_legacy(log_dir)
        except OSError as exc:
            print(f"Skipped log directory {log_dir}: {exc.strerror or exc}")
            continue
        for replica in legacy:
            try:
                done = log_format.convert_replica(replica)
            except (OSError, ValueError) as exc:
                raise storage.StorageError(f"cannot convert {replica}: {exc}") from exc
            total += 1
            torn = f"; cut a torn tail of {done.torn_bytes} bytes" if done.torn_bytes else ""
            print(f"Converted {replica}: {done.segments} segment(s), {done.batches} batch(es){torn}")
    if not total:
        print("No replica is in the legacy record format.")
    return 0


def format_command(config_path: Path, cluster_id: str, *, ignore_formatted: bool) -> int:
    config = load_config(config_path)
    paths = sorted({*config.log_dirs, config.metadata_log_dir})
    states = [storage.inspect(p) for p in paths]
    for state in states:
        if state.kind is storage.DirKind.ERROR:
            print(f"I/O error trying to read log directory {state.path}: {state.error}. Ignoring...")
    plan = storage.plan_format(
        states,
        cluster_id=cluster_id,
        node_id=config.node_id,
        ignore_formatted=ignore_formatted,
        rng=random.SystemRandom(),
    )
    for path in plan.kept:
        print(f"Kept formatted log directory {path}")
    if not plan.writes:
        print("All of the log directories are already formatted.")
        return 0
    failures = dict(storage.apply_format(plan))
    for path, props in plan.writes:
        if path in failures:
            print(f"Failed formatting {path}: {failures[path]}")
        else:
            print(f"Formatted {path} with directory.id {props.directory_id}")
    if failures:
        raise storage.StorageError(f"{len(failures)} dir(s) could not be formatted")
    return 0


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "convert-logs":
        return convert_logs_command(args.config)
    if not args.cluster_id.strip():
        raise storage.StorageError("--cluster-id must not be empty")
    if not CLUSTER_ID_PATTERN.fullmatch(args.cluster_id.strip()):
        raise storage.StorageError(
            f"--cluster-id {args.cluster_id!r} is not 1-64 characters of A-Z a-z 0-9 _ -"
        )
    return format_command(args.config, args.cluster_id.strip(), ignore_formatted=args.ignore_formatted)


def main(argv: list[str] | None = None) -> int:
    return console.run_main(
        lambda: _main(argv), prog=PROG, describe=console.user_errors(ConfigError, storage.StorageError)
    )


if __name__ == "__main__":
    sys.exit(main())
