"""The `jbod-agent` console script: the broker without the optional imports it never uses
(`jbod_runtime.lean_imports`), then `jbod_agent.cli`."""

from __future__ import annotations

from jbod_runtime import lean_imports


def main() -> int:
    lean_imports.skip_optional_imports()
    from jbod_agent import cli  # after the line above, by design

    return cli.main()
