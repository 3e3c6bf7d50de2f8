"""`meta.properties` parse / render (protocol §4.1); the file on disk: `tests/runtime/test_durable_files.py`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import meta_properties
from jbod_core.ids import Uuid
from jbod_core.meta_properties import MetaProperties, MetaPropertiesError

DIR_ID = Uuid(0x1234_5678, 0x9ABC)


def test_render_is_the_documented_file() -> None:
    text = meta_properties.render(MetaProperties(cluster_id="c-1", node_id=3, directory_id=DIR_ID))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["version=1", "cluster.id=c-1", "node.id=3", f"directory.id={DIR_ID}"]
    assert text.endswith("\n")


def test_render_without_directory_id() -> None:
    text = meta_properties.render(MetaProperties(cluster_id="c-1", node_id=3))
    assert "directory.id" not in text
    assert meta_properties.parse(text) == MetaProperties(cluster_id="c-1", node_id=3, directory_id=None)


@given(
    cluster_id=st.text(
        alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1
    ),
    node_id=st.integers(min_value=0, max_value=2**31 - 1),
    directory=st.none() | st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
)
def test_parse_render_round_trip(cluster_id: str, node_id: int, directory: tuple[int, int] | None) -> None:
    props = MetaProperties(
        cluster_id=cluster_id,
        node_id=node_id,
        directory_id=None if directory is None else Uuid(*directory),
    )
    assert meta_properties.parse(meta_properties.render(props)) == props


def test_parse_accepts_java_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "  version = 1\n"
        "cluster.id:abc\n"
        "node.id=7\n"
        f"directory.id = {DIR_ID}  \n"
    )
    assert meta_properties.parse(text) == MetaProperties(cluster_id="abc", node_id=7, directory_id=DIR_ID)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("version=x\ncluster.id=c\nnode.id=1\n", "version"),
        ("version=2\ncluster.id=c\nnode.id=1\n", "version"),
        ("cluster.id=c\nnode.id=1\n", "version"),  # implicit version 0 is not supported
        ("version=1\ncluster.id=c\n", "node.id"),
        ("version=1\ncluster.id=c\nnode.id=one\n", "node.id"),
        ("version=1\nnode.id=1\n", "cluster.id"),
        ("version=1\ncluster.id=\nnode.id=1\n", "cluster.id"),
        ("version=1\ncluster.id=c\nnode.id=1\ndirectory.id=nope\n", "directory.id"),
        ("version=1\ncluster.id=c\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAA+\n", "directory.id"),
    ],
)
def test_parse_errors_name_the_key(text: str, names: str) -> None:
    with pytest.raises(MetaPropertiesError, match=names):
        meta_properties.parse(text)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(MetaPropertiesError, ValueError)
