"""Input paths as Spark and the driver see them.

Guarantees: `local_path` maps a plain path or a `file:` URI to a local `Path` (percent-escapes
decoded) and any other URI (`hdfs:`, `s3a:`, ...) to None, so that callers touch the local file
system only for local inputs and leave remote ones to Spark. `local_bytes` sums the sizes of local
inputs (None as soon as one is remote), to size the Spark session to the input.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit


def local_path(path: str) -> Path | None:
    """The local file a path or `file:` URI names; None for a remote URI."""
    parts = urlsplit(path)
    if parts.scheme in ("", "file"):
        return Path(unquote(parts.path) if parts.scheme else path)
    return None


def local_bytes(paths: list[str]) -> int | None:
    """The bytes of the local files `paths` name (files under a dir included); None if any is remote."""
    total = 0
    for path in paths:
        local = local_path(path)
        if local is None:
            return None
        files = [local] if local.is_file() else [p for p in local.rglob("*") if p.is_file()]
        total += sum(f.stat().st_size for f in files)
    return total
