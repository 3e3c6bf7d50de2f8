"""How every console script runs its `main`: one mapping from what went wrong to the line the user
reads and the exit status (`jbod-controller`, `jbod-agent`, `jbod-storage`, `jbodctl`,
`jbod-operator`, `jbod-pipeline`).

It is part of `jbod_runtime`, the process runtime every console script shares: it does process
I/O (stderr, the exit status, stdout's file descriptor) that the pure `jbod_core` must not, and it
knows no component, client or CLI.

Guarantees of `run_main(entry, prog=PROG, describe=...)` (`run_click` for a click command):
* A user mistake is one line `PROG: error: MESSAGE` on stderr, never a traceback:
  - a command line the parser refused (click's `UsageError`; `CommandLineError`, raised by
    `ArgumentParser`): exit 2;
  - an exception `describe` turns into a message (the script's own user errors: a bad config,
    an unreachable controller; `user_errors(...)` builds the usual one): exit 1, the message on
    one line (runs of whitespace collapsed), then `; HINT` when the script has a hint;
  - any other click error: exit 1; click's `Abort` that is not Ctrl-C (end of input): `aborted`,
    exit 1.
* A click group run without a subcommand prints its help on stdout and exits 0.
* Ctrl-C exits 130 without a message, whether it reaches here as `KeyboardInterrupt` or as the
  `Abort` click makes of it.
* A `BrokenPipeError` that reaches the runner (the reader of stdout went away) is not an error:
  exit 0, and Python stays quiet at exit. (Inside a click command click meets it first, and exits
  1 without a message.)
* `entry`'s int is the exit status (anything else: 0). `SystemExit` (argparse's `--help`) and
  every exception `describe` does not recognise pass through: an unexpected error is a bug and
  keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import click

#: The one-line message for an exception that is the user's doing; None for a bug.
Describe = Callable[[Exception], str | None]
#: What to do next about an error, appended to its line after `; ` (None: nothing to add).
Hint = Callable[[Exception], str | None]

#: The exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


class CommandLineError(Exception):
    """A command line the parser refused: `PROG: error: MESSAGE`, exit 2."""


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose refusals raise `CommandLineError` for `run_main` to print
    (argparse's own prints its usage block and exits)."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(message)


def one_line(exc: BaseException) -> str:
    """`exc`'s message on one line: every run of whitespace (newlines too) becomes one space."""
    return " ".join(str(exc).split())


def no_user_errors(exc: Exception) -> str | None:
    """The `describe` of a script with no errors of its own beyond click's: every one is a bug."""
    return None


def user_errors(*types: type[Exception], hint: Hint | None = None) -> Describe:
    """The usual `describe`: an exception of one of `types` is its message on one line, followed
    by `; HINT` when `hint` has one for it; any other exception is a bug."""

    def describe(exc: Exception) -> str | None:
        if not isinstance(exc, types):
            return None
        advice = hint(exc) if hint is not None else None
        return f"{one_line(exc)}; {advice}" if advice else one_line(exc)

    return describe


def _error(prog: str, message: str, *, status: int = 1) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run_main(  # noqa: PLR0911  the mapping of the module docstring: a return per case
    entry: Callable[[], object], *, prog: str, describe: Describe = no_user_errors
) -> int:
    """Run `entry` as the console script `prog`; its exit status (see the module docstring)."""
    try:
        result = entry()
    except click.exceptions.NoArgsIsHelpError as exc:
        # A group without a subcommand (`jbodctl`, `jbodctl topics`): its help, not a mistake.
        click.echo(exc.ctx.get_help())
        return 0
    except click.UsageError as exc:
        return _error(prog, exc.format_message(), status=2)
    except CommandLineError as exc:
        return _error(prog, str(exc), status=2)
    except click.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return INTERRUPTED
        return _error(prog, "aborted")
    except click.ClickException as exc:
        return _error(prog, exc.format_message())
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except Exception as exc:
        message = describe(exc)
        if message is None:
            raise
        return _error(prog, message)
    return result if isinstance(result, int) else 0


def run_click(
    command: click.Command, argv: list[str] | None, *, prog: str, describe: Describe = no_user_errors
) -> int:
    """`run_main` for a click command or group, parsing `argv` (None: `sys.argv[1:]`) as `prog`."""
    return run_main(
        lambda: command.main(args=argv, prog_name=prog, standalone_mode=False), prog=prog, describe=describe
    )
