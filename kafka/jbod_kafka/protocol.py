"""Kafka's request and response framing above the socket: which APIs a broker answers, in which
versions, and the codec of request headers, bodies and responses (kio's types, generated from
Kafka's own message schemas).

Guarantees:
* `APIS` is the one table of what a broker advertises: each API from Kafka 4's floor (KIP-896) to
  the newest version kio knows. Produce is advertised from v0 although v0-v2 are refused
  (KAFKA-18659: librdkafka < 2.11.1 compresses only when Produce v0 is listed).
* `parse_request(frame)` decodes one request frame (without its size prefix) into its header
  and body, or raises `RequestError`: `UnknownApiError` (an API key not in `APIS`),
  `UnsupportedVersionError` (a version outside the answered range) or `MalformedRequestError` (bytes that
  do not decode). It never raises anything else. Bytes after the body are ignored, as Kafka
  ignores them. An ApiVersions request of an
  unknown version is parsed as far as its header (as flexible, v2) so it can be answered with
  `api_versions_fallback` (KIP-511), which lists the APIs it is given.
* `encode_response(header, body)` is the size-prefixed response frame: the response header
  version follows the request's flexibility, except ApiVersions, always header v0.
  `encode_request` and `parse_response` are the same codec from a client's side (a broker
  fetching from another as a follower).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import struct
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from kio.index import load_payload_module
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

_SIZE: Final = struct.Struct(">i")
_KEY_VERSION: Final = struct.Struct(">hh")


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str  # kio's schema name
    min_version: int  # the lowest version answered
    max_version: int
    advertised_min: int  # the lowest version listed in ApiVersions


def _api(key: int, name: str, low: int, high: int, *, advertised_min: int | None = None) -> Api:
    return Api(key, name, low, high, low if advertised_min is None else advertised_min)


#: What a broker answers: Kafka 4's floors, and Kafka 4.3.1's maxima (checked against it by
#: tests/kafka_tools/test_api_versions.py).
APIS: Final[dict[int, Api]] = {
    api.key: api
    for api in (
        _api(0, "produce", 3, 13, advertised_min=0),
        _api(1, "fetch", 4, 18),
        _api(2, "list_offsets", 1, 11),
        _api(3, "metadata", 0, 13),
        _api(8, "offset_commit", 2, 10),
        _api(9, "offset_fetch", 1, 10),
        _api(10, "find_coordinator", 0, 6),
        _api(11, "join_group", 0, 9),
        _api(12, "heartbeat", 0, 4),
        _api(13, "leave_group", 0, 5),
        _api(14, "sync_group", 0, 5),
        _api(15, "describe_groups", 0, 6),
        _api(16, "list_groups", 0, 5),
        _api(17, "sasl_handshake", 0, 1),
        _api(18, "api_versions", 0, 4),
        _api(19, "create_topics", 2, 7),
        _api(20, "delete_topics", 1, 6),
        _api(21, "delete_records", 0, 2),
        _api(22, "init_producer_id", 0, 5),  # v6 (KIP-939 two-phase commit): not in Kafka 4.3.1
        _api(23, "offset_for_leader_epoch", 2, 4),
        _api(24, "add_partitions_to_txn", 0, 4),  # v5 (KIP-890 part 2): transaction version 1 only
        _api(25, "add_offsets_to_txn", 0, 4),
        _api(26, "end_txn", 0, 4),  # v5 (KIP-890 part 2): transaction version 1 only
        _api(27, "write_txn_markers", 1, 2),
        _api(28, "txn_offset_commit", 0, 5),
        _api(29, "describe_acls", 1, 3),
        _api(30, "create_acls", 1, 3),
        _api(31, "delete_acls", 1, 3),
        _api(32, "describe_configs", 1, 4),
        _api(33, "alter_configs", 0, 2),
        _api(34, "alter_replica_log_dirs", 1, 2),
        _api(35, "describe_log_dirs", 1, 5),
        _api(36, "sasl_authenticate", 0, 2),
        _api(37, "create_partitions", 0, 3),
        _api(42, "delete_groups", 0, 2),
        _api(43, "elect_leaders", 0, 2),
        _api(44, "incremental_alter_configs", 0, 1),
        _api(45, "alter_partition_reassignments", 0, 1),
        _api(46, "list_partition_reassignments", 0, 0),
        _api(47, "offset_delete", 0, 0),
        _api(48, "describe_client_quotas", 0, 1),
        _api(49, "alter_client_quotas", 0, 1),
        _api(50, "describe_user_scram_credentials", 0, 0),
        _api(51, "alter_user_scram_credentials", 0, 0),
        _api(60, "describe_cluster", 0, 2),
        _api(61, "describe_producers", 0, 0),
        _api(65, "describe_transactions", 0, 0),
        _api(66, "list_transactions", 0, 2),
    )
}

API_VERSIONS_KEY: Final = 18
SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
#: What an unauthenticated connection of a SASL listener may send.
BEFORE_AUTHENTICATION: Final = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})


class RequestError(Exception):
    """A request that cannot be answered with its own response type; `str()` is one line."""

    def __init__(self, message: str, *, api_key: int = -1, api_version: int = -1, correlation_id: int = -1):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnknownApiError(RequestError):
    pass


class UnsupportedVersionError(RequestError):
    pass


class MalformedRequestError(RequestError):
    pass


class MalformedResponseError(ValueError):
    """A response frame that does not decode as the response it answers."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # kio's request dataclass of this API and version


@cache
def _payload(api_key: int, version: int, entity: EntityType) -> Any:
    module = load_payload_module(api_key, version, entity)  # type: ignore[arg-type]
    for name in dir(module):
        value = getattr(module, name)
        if getattr(value, "__type__", None) is entity and getattr(value, "__version__", None) == version:
            return value
    raise LookupError(f"no {entity.name} type for API {api_key} v{version}")  # pragma: no cover


@cache  # keyed by two ints: hashing `EntityType` (an Enum) per request costs more than the lookup
def request_type(api_key: int, version: int) -> Any:
    return _payload(api_key, version, EntityType.request)


@cache
def response_type(api_key: int, version: int) -> Any:
    return _payload(api_key, version, EntityType.response)


@cache
def _reader(entity: type) -> Any:
    return entity_reader(entity)


@cache
def _writer(entity: type) -> Any:
    return entity_writer(entity)


def parse_request(frame: bytes | memoryview) -> Request:
    """Decode one request frame (the module's guarantee): bytes, or a read-only memoryview."""
    if len(frame) < 8:
        raise MalformedRequestError(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, version = _KEY_VERSION.unpack_from(frame)
    api = APIS.get(api_key)
    if api is None:
        raise UnknownApiError(f"unknown API key {api_key}", api_key=api_key, api_version=version)
    if api_key == API_VERSIONS_KEY and version > api.max_version:
        header, _ = _read_header(frame, RequestHeaderV2, api_key, version)
        raise UnsupportedVersionError(
            f"ApiVersions v{version} is not supported",
            api_key=api_key,
            api_version=version,
            correlation_id=header.correlation_id,
        )
    if not api.min_version <= version <= api.max_version:
        raise UnsupportedVersionError(
            f"{api.name} v{version} is not supported (v{api.min_version}-v{api.max_version})",
            api_key=api_key,
            api_version=version,
        )
    body_type = request_type(api_key, version)
    flexible = bool(body_type.__flexible__)
    header, offset = _read_header(frame, RequestHeaderV2 if flexible else RequestHeaderV1, api_key, version)
    try:
        body, _size = _reader(body_type)(frame, offset)
    except Exception as exc:  # kio raises ValueError, IndexError, its own errors...
        raise MalformedRequestError(
            f"{api.name} v{version} body does not decode: {exc}",
            api_key=api_key,
            api_version=version,
            correlation_id=header.correlation_id,
        ) from None
    # Trailing bytes are ignored, as Kafka's own request parsing ignores them: librdkafka 2.16's
    # Metadata v13 for all topics carries three (`01 00 00`) after the body.
    missing = _null_field(body)
    if missing is not None:
        raise MalformedRequestError(
            f"{api.name} v{version}: {missing} is null but not nullable",
            api_key=api_key,
            api_version=version,
            correlation_id=header.correlation_id,
        )
    return Request(
        RequestHeader(api_key, version, int(header.correlation_id), header.client_id, flexible), body
    )


@cache
def _required_fields(entity: type) -> tuple[tuple[str, bool], ...]:
    """(name, holds messages) of the fields of `entity` that may not be null."""
    hints = typing.get_type_hints(entity)
    out = []
    for f in dataclasses.fields(entity):
        hint = hints[f.name]
        args = typing.get_args(hint)
        nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if nullable:  # look inside `X | None` for messages to check as well
            inner = [a for a in args if a is not type(None)]
            hint = inner[0] if len(inner) == 1 else hint
            args = typing.get_args(hint)
        nested = typing.get_origin(hint) is tuple and bool(args) and dataclasses.is_dataclass(args[0])
        nested = nested or (isinstance(hint, type) and dataclasses.is_dataclass(hint))
        if not nullable or nested:
            out.append((f.name, nested))
    return tuple(out)


def _null_field(entity: Any) -> str | None:
    """The first field (as a dotted path) of a decoded message that is null but may not be."""
    entity_type: Any = type(entity)
    for name, nested in _required_fields(entity_type):
        value = getattr(entity, name)
        if value is None:
            if not _is_nullable(entity_type, name):
                return name
            continue
        if nested:
            for item in value if isinstance(value, tuple) else (value,):
                inner = _null_field(item)
                if inner is not None:
                    return f"{name}.{inner}"
    return None


@cache
def _is_nullable(entity: type, name: str) -> bool:
    hint = typing.get_type_hints(entity)[name]
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _read_header(frame: bytes | memoryview, header_type: Any, api_key: int, version: int) -> tuple[Any, int]:
    try:
        header, size = _reader(header_type)(frame, 0)
    except Exception as exc:
        raise MalformedRequestError(
            f"request header does not decode: {exc}", api_key=api_key, api_version=version
        ) from None
    return header, int(size)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response a handler framed itself (size prefix and response header included), as buffers
    to write in order: the hot paths that write their records without copying them
    (`fetch_response`)."""

    pieces: list[bytes | memoryview]


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """The size-prefixed frame of `body` answering `header` (the module's guarantee)."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    correlation_id = i32(header.correlation_id)
    if header.flexible and header.api_key != API_VERSIONS_KEY:
        _writer(ResponseHeaderV1)(buffer, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        _writer(ResponseHeaderV0)(buffer, ResponseHeaderV0(correlation_id=correlation_id))
    body_type: Any = type(body)
    _writer(body_type)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def encode_request(api_key: int, version: int, body: Any, *, correlation_id: int, client_id: str) -> bytes:
    """The size-prefixed frame of a request (a client's side): header v2 for a flexible body, else v1."""
    header_type: Any = RequestHeaderV2 if body.__flexible__ else RequestHeaderV1
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header = header_type(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    _writer(header_type)(buffer, header)
    body_type: Any = type(body)
    _writer(body_type)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def parse_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix (a client's side):
    header v1 for a flexible body (except ApiVersions), else v0. Raises `MalformedResponseError`
    for bytes that do not decode."""
    body_type: Any = response_type(api_key, version)
    flexible = bool(body_type.__flexible__) and api_key != API_VERSIONS_KEY
    header_type: Any = ResponseHeaderV1 if flexible else ResponseHeaderV0
    try:
        header, offset = _reader(header_type)(frame, 0)
        body, _size = _reader(body_type)(frame, offset)
    except Exception as exc:  # kio raises whatever its readers meet on malformed bytes
        raise MalformedResponseError(
            f"an API {api_key} v{version} response that does not decode: {exc}"
        ) from None
    return int(header.correlation_id), body


def api_versions_fallback(correlation_id: int, apis: Iterable[Api]) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and `apis` (the ones answered; KIP-511)."""
    body = ApiVersionsResponseV0(
        error_code=KioErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(
                api_key=i16(a.key), min_version=i16(a.advertised_min), max_version=i16(a.max_version)
            )
            for a in apis
        ),
    )
    header = RequestHeader(API_VERSIONS_KEY, 0, correlation_id, None, flexible=False)
    return encode_response(header, body)


@cache
def _hints(entity: type) -> dict[str, Any]:
    return typing.get_type_hints(entity)


def _convert(hint: Any, value: Any) -> Any:
    """`value` (a plain int, dict, list of dicts...) as the kio type `hint` expects."""
    origin = typing.get_origin(hint)
    converted: Any
    if value is None:
        converted = None
    elif origin is tuple:
        (inner, *_rest) = typing.get_args(hint)
        converted = tuple(_convert(inner, item) for item in value)
    elif origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        converted = _convert(options[0], value) if len(options) == 1 else value
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        converted = build(hint, **value)
    elif isinstance(hint, type) and issubclass(hint, datetime.timedelta) and isinstance(value, int):
        converted = datetime.timedelta(milliseconds=value)
    elif isinstance(hint, type) and issubclass(hint, enum.Enum) and isinstance(value, int):
        converted = hint(value)
    else:
        converted = value
    return converted


def build(entity: type, /, **fields: Any) -> Any:
    """A kio message `entity` from plain values: fields it does not have (in this version) are
    dropped, nested messages may be dicts (or sequences of dicts), durations milliseconds,
    error codes ints. Fields left out take kio's defaults."""
    hints = _hints(entity)
    kwargs = {
        f.name: _convert(hints[f.name], fields[f.name])
        for f in dataclasses.fields(entity)
        if f.name in fields
    }
    return entity(**kwargs)
