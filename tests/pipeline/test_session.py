"""The Spark settings of a run, sized to its input (`session.settings` is pure: no JVM here)."""

from __future__ import annotations

from pathlib import Path

from jbod_pipeline import session


def test_a_small_local_input_is_sized_for_start_up() -> None:
    conf = session.settings(master="local[2]", input_bytes=200_000)
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.sql.files.minPartitionNum"] == "2"
    assert conf["spark.sql.codegen.wholeStage"] == "false"
    assert "-XX:TieredStopAtLevel=1" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.ui.enabled"] == "false" and conf["spark.sql.adaptive.enabled"] == "true"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"


def test_large_unknown_or_remote_inputs_keep_the_throughput_settings() -> None:
    for input_bytes in (session.SMALL_INPUT_BYTES, None):
        conf = session.settings(master="local[2]", input_bytes=input_bytes)
        assert conf["spark.sql.shuffle.partitions"] == "8"
        assert conf["spark.sql.files.minPartitionNum"] == "8"
        assert "spark.sql.codegen.wholeStage" not in conf
        assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"
    cluster = session.settings(master="spark://127.0.0.1:7077", input_bytes=1000)
    assert "spark.sql.shuffle.partitions" not in cluster and "spark.driver.extraJavaOptions" not in cluster
    # Generated code stays within what HotSpot compiles, local or not.
    assert conf["spark.sql.codegen.hugeMethodLimit"] == cluster["spark.sql.codegen.hugeMethodLimit"] == "8000"
    assert conf["spark.sql.maxPlanStringLength"] == cluster["spark.sql.maxPlanStringLength"] == "100000"
    assert (
        session.settings(master="local[2]", input_bytes=1, shuffle_partitions=5)[
            "spark.sql.shuffle.partitions"
        ]
        == "5"
    )


def test_local_bytes_sums_local_inputs_only(tmp_path: Path) -> None:
    from jbod_pipeline import paths

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 10)
    (tmp_path / "b").write_bytes(b"x" * 5)
    assert paths.local_bytes([str(tmp_path / "d"), str(tmp_path / "b")]) == 15
    assert paths.local_bytes([str(tmp_path / "b"), "s3a://bucket/log"]) is None
