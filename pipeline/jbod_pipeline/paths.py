"""Input paths as Spark and the driver see them.

Guarantees: `local_path` maps a plain path or a `file:` URI to a local `Path` (percent-escapes
decoded) and any other URI (`hdfs:`, `s3a:`, ...) to None, so that callers touch the local file
system only for local inputs and leave remote ones to Spark.
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
