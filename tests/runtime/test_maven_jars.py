"""Jars from Maven (`jbod_runtime.maven_jars`) without a network: a stand-in `mvn` on PATH copies
the jars the test names into Maven's output directory, as `dependency:copy-dependencies` does, and
records each call. The real Maven runs in tests/kafka_tools/test_harness.py and
tests/pipeline/test_kafka_source_live.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from jbod_runtime import maven_jars

JARS = maven_jars.JarSet((maven_jars.Artifact("org.example", "thing_2.13", "1.2.3"),))

FAKE_MVN = """#!/usr/bin/env python3
import os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_MVN_CALLS"], "a") as calls:
    calls.write(" ".join(args) + "\\n")
if os.environ.get("FAKE_MVN_FAIL"):
    print("[ERROR] Failed to execute goal: Could not find artifact org.example:thing_2.13:jar:1.2.3 in central")
    print("[ERROR] -> [Help 1]")
    sys.exit(1)
out = Path(next(a for a in args if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
out.mkdir(parents=True)
for name in os.environ["FAKE_MVN_JARS"].split(","):
    (out / name).write_bytes(name.encode())
"""


@pytest.fixture
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN)
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MVN_CALLS", str(calls))
    monkeypatch.setenv("FAKE_MVN_JARS", "thing_2.13-1.2.3.jar,dep-4.jar")
    return calls


def test_resolves_once_then_finds_the_jars_current(fake_mvn: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache" / "1.2.3"
    first = maven_jars.ensure(JARS, root, maven_repo=tmp_path / "m2")
    assert first.fetched and first.libs == root / "libs"
    assert first.jars == {"dep-4.jar": 9, "thing_2.13-1.2.3.jar": 20}
    assert [p.name for p in first.paths()] == ["dep-4.jar", "thing_2.13-1.2.3.jar"]
    [call] = fake_mvn.read_text().splitlines()
    assert f"-Dmaven.repo.local={tmp_path / 'm2'}" in call.split()
    assert f"{maven_jars.DEPENDENCY_PLUGIN}:copy-dependencies" in call.split()
    assert "-DincludeScope=runtime" in call.split()
    assert "<artifactId>thing_2.13</artifactId><version>1.2.3</version>" in (root / "pom.xml").read_text()
    marker = json.loads((root / "jars.json").read_text())
    assert marker == {"key": JARS.marker_key(), "jars": first.jars}

    again = maven_jars.ensure(JARS, root, maven_repo=tmp_path / "m2")
    assert not again.fetched and again.jars == first.jars
    assert len(fake_mvn.read_text().splitlines()) == 1


def test_a_missing_jar_or_another_jar_set_is_resolved_again(fake_mvn: Path, tmp_path: Path) -> None:
    root = tmp_path / "1.2.3"
    maven_jars.ensure(JARS, root, maven_repo=tmp_path / "m2")
    (root / "libs" / "dep-4.jar").unlink()  # as if cut off mid-copy
    assert not maven_jars.is_complete(root, JARS)
    assert maven_jars.ensure(JARS, root, maven_repo=tmp_path / "m2").fetched
    other = maven_jars.JarSet((maven_jars.Artifact("org.example", "thing_2.13", "1.2.4"),))
    assert not maven_jars.is_complete(root, other)
    assert len(fake_mvn.read_text().splitlines()) == 2


def test_a_failed_resolution_is_one_line_and_leaves_nothing_current(
    fake_mvn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    root = tmp_path / "1.2.3"
    with pytest.raises(maven_jars.ResolutionError) as caught:
        maven_jars.ensure(JARS, root, maven_repo=tmp_path / "m2")
    assert str(caught.value) == (
        "Maven could not resolve org.example:thing_2.13:1.2.3: Failed to execute goal: "
        "Could not find artifact org.example:thing_2.13:jar:1.2.3 in central"
    )
    assert "[Help 1]" in caught.value.output
    assert not maven_jars.is_complete(root, JARS) and not (root / "libs").exists()


def test_no_maven_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(maven_jars.ResolutionError, match=r"^`mvn` is not on PATH"):
        maven_jars.ensure(JARS, tmp_path / "1.2.3", maven_repo=tmp_path / "m2")
