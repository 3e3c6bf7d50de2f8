"""What the Spark jobs need installed, checked before a job starts, so that a missing piece is
one line naming what to install rather than an import or Java gateway traceback.

Guarantees:
* Importing this module needs only the standard library (`jbod-pipeline --help` and `generate`
  work with the core install alone).
* `java_problem` mirrors how PySpark's launcher (`spark-class`) finds Java: `$JAVA_HOME/bin/java`
  when `JAVA_HOME` is set, else `java` on `PATH`. It is pure: the environment and the `PATH`
  lookup are parameters.
* `missing_extra` maps an import failure of a module of the `pipeline` extra to the install line;
  any other import failure (a bug) is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Final

from jbod_pipeline import errors

INSTALL: Final = "pip install 'jbod-operator[pipeline]'"
# Top-level modules that only the `pipeline` extra installs (numpy comes with pandas).
EXTRA_MODULES: Final = frozenset({"pyspark", "py4j", "pyarrow", "pandas", "numpy", "matplotlib"})


def missing_extra(exc: ModuleNotFoundError) -> errors.MissingRuntimeError | None:
    """The one-line error for an import of the `pipeline` extra that failed, else None."""
    top = (exc.name or "").partition(".")[0]
    if top not in EXTRA_MODULES:
        return None
    return errors.MissingRuntimeError(
        f"the Spark jobs need the pipeline extra ({top} is not installed): {INSTALL}, and a Java 17 runtime"
    )


def java_problem(environ: Mapping[str, str], *, which: Callable[[str], str | None]) -> str | None:
    """Why PySpark could not start Java with this environment, or None if it can find it."""
    home = environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not (os.path.isfile(java) and os.access(java, os.X_OK)):
            return f"the Spark jobs need a Java 17 runtime: JAVA_HOME={home} has no bin/java"
        return None
    if which("java") is None:
        return "the Spark jobs need a Java 17 runtime: no java on PATH and JAVA_HOME is not set"
    return None
