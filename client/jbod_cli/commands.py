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
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from jbod_cli import hints, tables
from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_local.layout import DEFAULT_DIR
from jbod_runtime import console

OUTPUTS = click.Choice(["table", "json"])
T = TypeVar("T")


@dataclass
class Settings:
    """What the root group parsed: where the controller is, the bootstrap brokers, the token file,
    the output format."""

    controller: str
    token_file: Path | None
    output: str
    bootstrap: tuple[str, ...] = ()  # broker URLs the data-plane commands ask for metadata first

    def token(self) -> str:
        if self.token_file is None:
            raise hints.MissingTokenError("no token: pass --token-file FILE or set JBOD_TOKEN_FILE")
        return read_token(self.token_file)

    def client(self) -> ControllerClient:
        return ControllerClient(self.controller, token=self.token())


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


def settings_of(ctx: click.Context, output: str | None) -> Settings:
    """The root group's settings, with a command's own `--output` taking precedence."""
    settings: Settings = ctx.find_object(Settings)  # type: ignore[assignment]
    if output is not None:
        settings.output = output
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
