"""The broker pod's node-info init container: `python -m jbod_operator.node_info`.

Reads the Node the pod was scheduled on (`get nodes`, the only permission of the brokers'
ServiceAccount) and writes `listeners.node_properties` of it as a properties file on an emptyDir
the agent reads through `${file:...}` references (`listeners.BrokerListeners.amend`): each
`nodeport` listener's advertised host and the broker's rack. Exits non-zero, naming what is
missing, when the node has no such address or label: the pod does not start rather than
advertise a wrong address.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from jbod_operator import kube, listeners


def _listener(text: str) -> tuple[str, str | None]:
    name, _, preferred = text.partition(":")
    return name, preferred or None


def write(path: Path, values: dict[str, str]) -> None:
    """The properties file, replaced whole (written beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(f"{k}={v}\n" for k, v in sorted(values.items())), encoding="utf-8")
    os.replace(partial, path)


def _read_node(name: str) -> dict[str, Any]:
    kube.load_config()
    node = kube.get("v1", "Node", name, None)
    if node is None:
        raise ValueError(f"node {name} not found")
    return node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jbod_operator.node_info", description=__doc__)
    parser.add_argument("--node", required=True, help="the pod's node (spec.nodeName)")
    parser.add_argument("--out", type=Path, default=Path(listeners.NODE_INFO_FILE))
    parser.add_argument(
        "--listener", action="append", default=[], type=_listener, help="NAME[:preferred address type]"
    )
    parser.add_argument("--rack-label", default=None, help="the node label whose value is broker.rack")
    args = parser.parse_args(argv)
    try:
        values = listeners.node_properties(_read_node(args.node), args.listener, args.rack_label)
    except Exception as exc:  # the init container's whole job: say why and fail
        print(f"node-info: {exc}", file=sys.stderr)
        return 1
    write(args.out, values)
    print(f"node-info: wrote {', '.join(sorted(values)) or 'nothing'} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
