"""The plumbing every `jbodctl` command module shares: the settings the root group parses, the
error a command raises, the common options, output and how jbodctl's errors are described.

`cli` (the root group and most commands), `local_cli` and `apply_plan` import this module, never
each other's internals, so the command modules form no import cycle.

Guarantees:
* `run_main(group, argv, prog=...)` runs a click group through the one console-script runner
  (`jbod_runtime.console.run_main`: a group without a subcommand prints its help and exits 0, a
  usage error is one line `PROG: error: ...` and exit 2, Ctrl-C exits 130, a closed stdout is not
  an error) with jbodctl's own errors: a `CommandError` or `ClientError` is one line and exit 1,
  with what to do next when `jbod_cli.hints` knows (most often `eval "$(jbodctl local env)"`).
  No traceback for a user mistake.
* `Settings.token()` raises `hints.MissingTokenError` (a one-line message) when no token file is set.
* Kafka clients (`kafka_target`) connect to `--bootstrap-server` (or KAFKA_BOOTSTRAP_SERVERS), else
  to the Kafka listeners the brokers registered (read from the cluster metadata: `--bootstrap`
  broker URLs, then the controller), as the user of `--command-config` (a Kafka client properties
  file) or else as `admin` with the token of `--token-file` over SASL/SCRAM-SHA-512. A command's
  own `--bootstrap-server` / `--command-config` take precedence over the root group's.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from jbod_cli import hints, tables
from jbod_client import kafka_config
from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_client.kafka_config import KafkaConfigError, KafkaSecurity, KafkaTarget
from jbod_client.metadata import ClusterMetadata, kafka_address
from jbod_local.layout import DEFAULT_DIR
from jbod_runtime import console

OUTPUTS = click.Choice(["table", "json"])
T = TypeVar("T")


@dataclass
class Settings:
    """What the root group parsed: where the controller is, the bootstrap brokers (HTTP), the
    token file, the output format; the Kafka listeners and client properties of Kafka clients."""

    controller: str
    token_file: Path | None
    output: str
    bootstrap: tuple[str, ...] = ()  # broker URLs the data-plane commands ask for metadata first
    bootstrap_servers: tuple[str, ...] = ()  # Kafka listeners (host:port) of Kafka clients
    command_config: Path | None = None  # Kafka client properties: who Kafka clients log in as
    ca_file: Path | None = None  # PEM CA bundle of https controllers and brokers

    def token(self) -> str:
        if self.token_file is None:
            raise hints.MissingTokenError("no token: pass --token-file FILE or set JBOD_TOKEN_FILE")
        return read_token(self.token_file)

    def client(self) -> ControllerClient:
        return ControllerClient(self.controller, token=self.token(), ca_file=self.ca_file)

    def metadata(self) -> ClusterMetadata:
        """The cluster metadata over HTTP: the `--bootstrap` brokers first, then the controller."""
        return ClusterMetadata(
            self.controller, token=self.token(), bootstrap=self.bootstrap, ca_file=self.ca_file
        )

    def kafka_security(self) -> KafkaSecurity:
        """Who Kafka clients log in as: the `--command-config` file's user, else `admin` (over
        SASL_SSL verified with `--ca-file` when one is given)."""
        if self.command_config is None:
            return KafkaSecurity.admin(self.token(), truststore=self.ca_file)
        path = self.command_config
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise KafkaConfigError(f"cannot read --command-config {path}: {reason}") from exc
        return kafka_config.security_from_properties(kafka_config.parse_properties(text), source=str(path))


async def kafka_bootstrap(
    settings: Settings, security: KafkaSecurity, registered: Sequence[Mapping[str, Any]] | None = None
) -> tuple[str, ...]:
    """`--bootstrap-server`, else every registered broker's Kafka listener of the protocol in use
    (unfenced brokers first), from `registered` or else the cluster metadata."""
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    if registered is None and settings.token_file is None:
        raise hints.MissingTokenError(
            "no Kafka listener to connect to: pass --bootstrap-server HOST:PORT or set "
            "KAFKA_BOOTSTRAP_SERVERS (or a token file, to find the brokers' listeners: JBOD_TOKEN_FILE)"
        )
    if registered is None:
        async with settings.metadata() as metadata:
            registered = await metadata.brokers()
    ordered = sorted(registered, key=lambda b: (bool(b.get("fenced")), int(b["brokerId"])))
    addresses = [a for b in ordered if (a := kafka_address(b, security.protocol)) is not None]
    if not addresses:
        raise CommandError(
            f"no registered broker has a {security.protocol} listener: pass --bootstrap-server HOST:PORT "
            "or set KAFKA_BOOTSTRAP_SERVERS"
        )
    return tuple(addresses)


def kafka_target(settings: Settings) -> KafkaTarget:
    """Where and as whom Kafka clients connect (the module's guarantee)."""
    security = settings.kafka_security()
    return KafkaTarget(run(kafka_bootstrap(settings, security)), security)


class CommandError(Exception):
    """A reply with a non-zero error code, or a user mistake found after parsing."""


def output_option(command: Any) -> Any:
    return click.option("--output", "-o", type=OUTPUTS, default=None, help="table or json")(command)


def wide_option(command: Any) -> Any:
    return click.option(
        "--wide",
        is_flag=True,
        help="show ids, paths and errors whole, even past the terminal's width (by default ids are "
        f"their first {tables.SHORT_ID_LENGTH}+ characters, unique in the table, like git's short hashes)",
    )(command)


def bootstrap_servers(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """Click callback: `--bootstrap-server` as a tuple of `host:port` (empty when not given)."""
    try:
        return kafka_config.parse_bootstrap_servers(value or "")
    except KafkaConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def kafka_options(command: Any) -> Any:
    """`--bootstrap-server` and `--command-config` on a command that runs Kafka clients, where
    Kafka's tools take them (after the command); they override the root group's."""
    command = click.option(
        "--command-config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Kafka client properties (Java syntax, as kafka-*.sh take them): security.protocol, "
        "sasl.mechanism, sasl.jaas.config's username and password (default: admin with the token)",
    )(command)
    return click.option(
        "--bootstrap-server",
        "bootstrap_server",
        default=None,
        callback=bootstrap_servers,
        metavar="HOST:PORT[,...]",
        help="Kafka listeners to bootstrap from (default: the root group's, KAFKA_BOOTSTRAP_SERVERS, "
        "else the listeners the brokers registered)",
    )(command)


def settings_of(
    ctx: click.Context,
    output: str | None,
    *,
    bootstrap_server: tuple[str, ...] = (),
    command_config: Path | None = None,
) -> Settings:
    """The root group's settings, with a command's own `--output`, `--bootstrap-server` and
    `--command-config` taking precedence."""
    settings: Settings = ctx.find_object(Settings)  # type: ignore[assignment]
    if output is not None:
        settings.output = output
    if bootstrap_server:
        settings.bootstrap_servers = bootstrap_server
    if command_config is not None:
        settings.command_config = command_config
    return settings


def emit(settings: Settings, data: Any, render: Any, *, wide: bool = False) -> None:
    """`data` as JSON with `-o json`, else `render` (a rich renderable or text) on the console."""
    if settings.output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        tables.console(wide=wide).print(render)


def check(reply: dict[str, Any], what: str) -> None:
    """Raise a `CommandError` naming `what` when `reply` carries a non-zero errorCode."""
    code = int(reply.get("errorCode", 0))
    if code != 0:
        raise CommandError(f"{what}: {reply.get('errorMessage') or 'failed'} (errorCode {code})")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine to completion."""
    return asyncio.run(coro)


def hint(exc: Exception) -> str | None:
    """What to do next about `exc` (`jbod_cli.hints`), looking for the local cluster where
    `jbodctl local env` would (`JBOD_LOCAL_DIR`, else `./.jbod-local`)."""
    return hints.for_error(
        exc,
        local_dir=Path(os.environ.get("JBOD_LOCAL_DIR") or DEFAULT_DIR),
        cwd=Path.cwd(),
    )


#: jbodctl's user errors, for the console-script runner.
describe_user_error = console.user_errors(ClientError, CommandError, hint=hint)


def run_main(group: click.Group, argv: list[str] | None, *, prog: str) -> int:
    """Run `group` as a console script; the exit status (see the module docstring)."""
    return console.run_click(group, argv, prog=prog, describe=describe_user_error)
