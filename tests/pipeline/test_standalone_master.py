"""`jbod-pipeline all` on a real Spark standalone cluster (a master and one worker started from the
installed PySpark's jars, everything bound to 127.0.0.1) writes the same tables and plan as a
local-mode run of the same inputs (the tier's shared session's run of every job, `computed`),
and the run really went through the master (it is among the master's completed applications)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from jbod_runtime import listen_ports
from tests.pipeline.conftest import Computed, Generated, assert_same_table

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPARK_HOME = Path(pyspark.__file__).parent
SCRIPT = Path(sys.executable).parent / "jbod-pipeline"
LOOPBACK = "127.0.0.1"
TABLES = ("disks", "blast_radius", "plan", "timeline")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def _scala_version() -> str:
    """The Scala version of the installed jars (what PySpark's `bin/load-spark-env.sh` exports; the
    worker's launcher needs it to find `SPARK_HOME/jars` for the executors)."""
    core = next((SPARK_HOME / "jars").glob("spark-core_*.jar"))
    return core.name.removeprefix("spark-core_").split("-")[0]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP=LOOPBACK, SPARK_LOCAL_HOSTNAME=LOOPBACK, SPARK_HOME=str(SPARK_HOME))
    env["SPARK_SCALA_VERSION"] = _scala_version()
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@dataclass
class Standalone:
    url: str
    ui: str

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as reply:
            return dict(json.load(reply))


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the process group (the worker's executors are in it too): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    java = _java()
    if java is None:
        pytest.skip("no Java runtime")
    classpath = f"{SPARK_HOME / 'conf'}:{SPARK_HOME / 'jars'}/*"
    settings = tmp_path / "spark-standalone.conf"
    settings.write_text("spark.master.rest.enabled false\nspark.ui.reverseProxy false\n")
    port, ui_port, worker_port, worker_ui_port = listen_ports.free_listen_ports(4)
    logs = tmp_path / "standalone-logs"
    logs.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> None:
        with (logs / f"{name}.log").open("wb") as log:
            started.append(
                subprocess.Popen(
                    [java, "-Xmx512m", "-cp", classpath, *args, "--properties-file", str(settings)],
                    env=_env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, killed whole at teardown
                )
            )

    try:
        launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        )
        cluster = Standalone(url=f"spark://{LOOPBACK}:{port}", ui=f"http://{LOOPBACK}:{ui_port}")
        launch(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            cluster.url,
            "--host",
            LOOPBACK,
            "--port",
            str(worker_port),
            "--webui-port",
            str(worker_ui_port),
            "--cores",
            "1",
            "--memory",
            "1g",
            "--work-dir",
            str(tmp_path / "worker"),
        )
        deadline = time.monotonic() + 180
        while True:
            for process in started:
                assert process.poll() is None, (logs / "master.log").read_text()[-3000:]
            try:
                alive = [w for w in cluster.status().get("workers", []) if w.get("state") == "ALIVE"]
            except OSError:
                alive = []
            if alive:
                break
            assert time.monotonic() < deadline, "the worker did not register with the master in 180 s"
            time.sleep(0.5)
        yield cluster
    finally:
        for process in reversed(started):
            _stop(process)


def _pipeline(master: str, inputs: Generated, out: Path) -> None:
    done = subprocess.run(
        [
            str(SCRIPT),
            "all",
            "--master",
            master,
            "--shuffle-partitions",
            "2",
            "--metadata",
            str(inputs.metadata),
            "--telemetry",
            str(inputs.telemetry),
            "--out",
            str(out),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.timeout(600)  # a whole run on a master, a worker and executors: 200-300 s on 2 busy cores
def test_all_on_a_standalone_master_matches_local_mode(
    standalone: Standalone, compute: Callable[[str], Computed], tmp_path: Path
) -> None:
    local = compute("skewed")
    _pipeline(standalone.url, local.generated, tmp_path / "cluster")
    apps = standalone.status().get("completedapps", [])
    assert any(app.get("name") == "jbod-pipeline" for app in apps), apps
    for table in TABLES:
        assert assert_same_table(tmp_path / "cluster" / table, local.out / table) > 0, table
    assert json.loads((tmp_path / "cluster" / "plan.json").read_text()) == local.plan()
