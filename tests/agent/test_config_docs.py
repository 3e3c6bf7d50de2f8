"""The `server.properties` example of docs/operations.md parses with the real parser, and a value
with an inline comment is refused with a message saying inline comments are not allowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jbod_agent import config
from jbod_agent.config import ConfigError
from jbod_core.meta_properties import parse_properties

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def properties_blocks() -> list[str]:
    blocks = re.findall(r"```properties\n(.*?)```", OPERATIONS.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks, f"no ```properties block in {OPERATIONS}"
    return blocks


@pytest.mark.parametrize("block", properties_blocks())
def test_the_documented_example_parses(block: str) -> None:
    parsed = config.parse_config(block)
    shown = parse_properties(block)
    # The values the example shows (read from the block, not copied from it) ...
    assert parsed.log_dir_probe_interval_ms == int(shown["log.dir.probe.interval.ms"])
    assert parsed.log_dir_failure_timeout_ms == int(shown["log.dir.failure.timeout.ms"])
    assert parsed.log_dirs == tuple(Path(p) for p in shown["log.dirs"].split(","))
    # ... are the ones used: each number it sets, changed, changes the config (the example may
    # show a default, which an ignored key would also give).
    for key, value in shown.items():
        if value.isdigit():
            changed = block.replace(f"{key}={value}\n", f"{key}={int(value) + 1}\n")
            assert config.parse_config(changed) != parsed, f"{key}={value} is not used"


BASE = (
    "node.id=1\nlog.dirs=/data/a\nmetadata.log.dir=/data/meta\ncontroller.url=http://127.0.0.1:9093\n"
    "cluster.token.file=/etc/jbod/cluster.token\n"
)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("log.dir.probe.interval.ms=1000   # disk health probe period", "log.dir.probe.interval.ms"),
        ("log.dirs.format.on.start=true # on first boot", "log.dirs.format.on.start"),
        ("controller.url=http://127.0.0.1:9093 # the controller", "controller.url"),
    ],
)
def test_an_inline_comment_is_named_in_the_error(line: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config.parse_config(BASE + line + "\n")
    message = str(caught.value)
    assert message.startswith(f"{key}: ")
    assert "inline comments are not allowed" in message
    assert "'#' starts a comment only at the beginning of a line" in message


def test_a_bad_value_without_a_hash_gets_no_note() -> None:
    with pytest.raises(ConfigError) as caught:
        config.parse_config(BASE + "log.dir.probe.interval.ms=soon\n")
    assert "inline comments" not in str(caught.value)


def test_a_comment_line_is_still_a_comment() -> None:
    parsed = config.parse_config(BASE + "# log.dir.probe.interval.ms=banana\n  ! also=ignored\n")
    assert parsed.log_dir_probe_interval_ms == 1000  # the default
