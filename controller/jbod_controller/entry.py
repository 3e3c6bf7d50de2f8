"""The `jbod-controller` console script: the controller without the optional imports it never
uses (`jbod_runtime.lean_imports`), then `jbod_controller.cli`."""

from __future__ import annotations

from jbod_runtime import lean_imports


def main() -> int:
    lean_imports.skip_optional_imports()
    from jbod_controller import cli  # after the line above, by design

    return cli.main()
