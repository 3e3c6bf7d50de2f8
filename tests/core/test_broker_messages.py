"""The produce body parser: the hand-checked fast path and the model agree on good and bad input."""

from __future__ import annotations

import base64

import orjson
import pytest
from pydantic import ValidationError

from jbod_core.broker_messages import ProduceRequest, decode_produce_records, parse_produce


def _body(**fields: object) -> bytes:
    base = {"topic": "t", "partition": 0, "acks": -1, "records": [{"key": None, "value": "aGk="}]}
    base.update(fields)
    return orjson.dumps(base)


def test_a_good_body_decodes_like_the_model() -> None:
    records = [
        {"key": base64.b64encode(b"k").decode(), "value": base64.b64encode(b"v" * 100).decode()},
        {"value": ""},
    ]
    body = _body(records=records, timeoutMs=500, extra="ignored")
    call = parse_produce(body)
    model = ProduceRequest.model_validate_json(body)
    assert (call.topic, call.partition, call.acks, call.timeout_ms) == ("t", 0, -1, 500)
    assert call.records == decode_produce_records(model) == [(b"k", b"v" * 100), (None, b"")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_body(acks=2), "acks"),
        (_body(partition="0"), "partition"),
        (_body(partition=True), "partition"),
        (_body(partition=2**31), "partition"),
        (_body(timeoutMs=0), "timeoutMs"),
        (_body(records=[{"key": 1, "value": "aGk="}]), "records[0].key"),
        (_body(records=[{"key": None}]), "records[0].value"),
        (orjson.dumps({"partition": 0, "acks": 1, "records": []}), "topic"),
        (b"{", ""),
        (b"[]", ""),
    ],
)
def test_a_malformed_body_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_produce(body)
    if field:
        locations = [".".join(str(p) for p in e["loc"]) for e in caught.value.errors()]
        assert any(field.split("[", maxsplit=1)[0] in loc for loc in locations), locations


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"value": "not base64!"}], "records[0].value: not base64"),
        ([{"value": "aGk="}, {"key": "%%", "value": "aGk="}], "records[1].key: not base64"),
        ([{"value": "aGk"}], "records[0].value: not base64"),  # bad padding
    ],
)
def test_bad_base64_names_the_record(records: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_produce(_body(records=records))
