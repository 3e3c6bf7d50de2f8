"""`jbod-pipeline` and `jbodctl metadata export --format parquet` (typed) from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jbod_cli import metadata_parquet
from jbod_pipeline.cli import main as pipeline
from tests.harness import ControllerProcess
from tests.pipeline.conftest import Computed, assert_same_table, jbodctl_export

DIR_A = "ECfE0cOGu8QeL-uJQUw0PA"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jbod-pipeline: error: "), err
    return err


def test_user_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline(["disks", "--metadata", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 1
    assert "does not exist" in _one_line_error(capsys)
    (tmp_path / "m.jsonl").write_text("{}\n")
    assert pipeline(["plan", "--metadata", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o")]) == 1
    assert "plan needs --telemetry" in _one_line_error(capsys)
    args = ["plan", "--metadata", str(tmp_path / "m.jsonl"), "--telemetry", str(tmp_path / "m.jsonl")]
    assert pipeline([*args, "--out", str(tmp_path / "o"), "--drain", "nope"]) == 2
    assert "--drain" in _one_line_error(capsys)
    assert pipeline([*args, "--out", str(tmp_path / "o"), "--threshold", "1.5"]) == 2
    _one_line_error(capsys)
    assert pipeline([*args, "--out", str(tmp_path / "o"), "--drain-broker", "1"]) == 2
    assert "--drain-broker needs --across-brokers" in _one_line_error(capsys)
    for bad in ("-1", "one"):
        assert pipeline([*args, "--out", str(tmp_path / "o"), "--across-brokers", "--drain-broker", bad]) == 2
        assert "--drain-broker" in _one_line_error(capsys)


def test_no_subcommand_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline([]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("Usage: jbod-pipeline") and "Commands:" in out.out and not out.err


def test_generate_writes_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline(["generate", "--out", str(tmp_path), "--brokers", "3", "--partitions", "30"]) == 0
    lines = (tmp_path / "metadata.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["type"] == "RegisterBrokerRecord"
    assert (tmp_path / "telemetry.jsonl").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.timeout(600)  # a whole run in local mode: 200-300 s on 2 busy cores
def test_a_whole_run_writes_every_table_and_the_report(
    compute: Callable[[str], Computed], tmp_path: Path
) -> None:
    """`jbod-pipeline all`, the real command in local mode with the settings it picks itself,
    skips a corrupt line and writes the tables the jobs compute without it, and the report."""
    computed = compute("skewed")
    metadata = tmp_path / "metadata.jsonl"
    metadata.write_text(computed.generated.metadata.read_text() + "this line is corrupt\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jbod_pipeline.cli",
            "all",
            "--master",
            "local[2]",
            "--metadata",
            str(metadata),
            "--telemetry",
            str(computed.generated.telemetry),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "skipped 1 bad line(s)" in done.stderr and "line " in done.stderr
    for table in ("disks", "blast_radius", "plan", "timeline"):
        assert assert_same_table(out / table, computed.out / table) > 0, table
    assert pq.read_table(out / "plan").column_names == [
        "topic",
        "partition",
        "brokerId",
        "fromDirectoryId",
        "toDirectoryId",
        "bytes",
        "toBrokerId",
        "kind",
        "reason",
    ]
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 6 and "<script" not in page
    assert json.loads((out / "input_errors.json").read_text())[0]["badLines"] == 1
    plan = json.loads((out / "plan.json").read_text())
    assert plan["version"] == 1 and plan["moves"] and plan == computed.plan()
    summaries = done.stdout.splitlines()
    assert [line.split(":")[0] for line in summaries[:-1]] == ["disks", "blast-radius", "plan", "timeline"]
    assert summaries[-1].startswith(f"Wrote disks, blast-radius, plan, timeline to {out} in ")


def test_metadata_export_as_parquet(tmp_path: Path, controller: ControllerProcess) -> None:
    with controller.broker() as client:
        reply = client.post(
            "/v1/brokers/register",
            json={
                "brokerId": 1,
                "clusterId": controller.cluster_id,
                "incarnationId": "ws5vRH7U1Xt45RBhcxHYow",
                "logDirs": [DIR_A],
            },
        ).json()
    for out in (tmp_path / "log.parquet", tmp_path / "log.jsonl"):
        jbodctl_export(controller, out)
    # Typed: every record in the columns, none left as JSON text; the same records as the lines.
    assert (
        pq.read_table(tmp_path / "log.parquet").column("data").null_count
        == pq.read_metadata(tmp_path / "log.parquet").num_rows
    )
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    without_nulls = [{**r, "data": {k: v for k, v in r["data"].items() if v is not None}} for r in lines]
    assert metadata_parquet.read(tmp_path / "log.parquet") == without_nulls
    assert lines and lines[0]["type"] == "RegisterBrokerRecord", reply


def test_topic_stats_mistakes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JBOD_TOKEN_FILE", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    args = ["topic-stats", "--topic", "t", "--out", str(tmp_path / "o")]
    assert pipeline(args) == 2
    assert "--bootstrap-server" in _one_line_error(capsys)
    args += ["--bootstrap-server", "127.0.0.1:9092"]
    assert pipeline(args) == 2
    assert "pass --command-config FILE" in _one_line_error(capsys)
    assert pipeline([*args, "--topic", "no/such", "--token-file", "x"]) == 2
    assert "is not a Kafka topic name" in _one_line_error(capsys)
    assert pipeline([*args[:-2], "--bootstrap-server", "http://h:1", "--token-file", "x"]) == 2
    assert "is a URL" in _one_line_error(capsys)
    assert pipeline([*args, "--command-config", str(tmp_path / "missing.properties")]) == 1
    assert "cannot read --command-config" in _one_line_error(capsys)
    # TLS is served (issue 25), but only with PEM stores; refused before any Spark session starts.
    (tmp_path / "tls.properties").write_text(
        "security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=/x.jks\n"
    )
    assert pipeline([*args, "--command-config", str(tmp_path / "tls.properties")]) == 1
    assert "ssl.truststore.type JKS is not supported: only PEM is" in _one_line_error(capsys)


def test_kafka_jars_without_maven_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("JBOD_SPARK_CACHE", str(tmp_path / "cache"))
    assert pipeline(["kafka-jars"]) == 1
    err = _one_line_error(capsys)
    assert "Spark's Kafka source org.apache.spark:spark-sql-kafka-0-10_2.13:" in err
    assert err.rstrip().endswith("is not available: `mvn` is not on PATH (the jars are resolved with Maven)")
