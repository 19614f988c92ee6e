"""The Chakra execution-trace file format (MLCommons Chakra's `et_def.proto`, what ASTRA-sim
reads), read and written without protoc: the messages are built at import time from a
`FileDescriptorProto` written here from the published schema.

Contract: a trace file is a stream of length-prefixed messages, each a varint byte count then
that many bytes: one `GlobalMetadata`, then `Node`s (optionally gzip-compressed as a whole).
`read_trace` returns them, or raises `ScenarioError` naming the file and the message or node
that is wrong (truncated stream, bytes that are not a message); `write_trace` writes the same
layout, so tests build traces with the writer side of the same definitions. `attribute` reads
a node attribute whatever integer or text type the producer chose. Only the fields fabricjax
uses are declared (id, name, type, dependencies, times, inputs/outputs, attributes); others
parse as unknown fields and are ignored.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fabricjax.core.errors import ScenarioError

PACKAGE = "ChakraProtoMsg"
# NodeType and CollectiveCommType values of et_def.proto
NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE",
              4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE",
              8: "STORAGE_NODE", 9: "BATCH_NODE", 10: "CHECKPOINT_NODE"}
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
COLLECTIVE_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER",
                    5: "BROADCAST", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER",
                    8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER"}
MAX_TRACE_BYTES = 2**31    # one rank's file, after decompression
GZIP_MAGIC = b"\x1f\x8b"

_F = descriptor_pb2.FieldDescriptorProto
# AttributeProto's `value` oneof: (field number, name, scalar type) of every scalar member; the
# list members (even numbers 4..32) are messages of `values` of the same type
_ATTR_SCALARS = [
    (3, "double", _F.TYPE_DOUBLE), (5, "float", _F.TYPE_FLOAT), (7, "int32", _F.TYPE_INT32),
    (9, "int64", _F.TYPE_INT64), (11, "uint32", _F.TYPE_UINT32), (13, "uint64", _F.TYPE_UINT64),
    (15, "sint32", _F.TYPE_SINT32), (17, "sint64", _F.TYPE_SINT64),
    (19, "fixed32", _F.TYPE_FIXED32), (21, "fixed64", _F.TYPE_FIXED64),
    (23, "sfixed32", _F.TYPE_SFIXED32), (25, "sfixed64", _F.TYPE_SFIXED64),
    (27, "bool", _F.TYPE_BOOL), (29, "string", _F.TYPE_STRING), (31, "bytes", _F.TYPE_BYTES),
]
INTEGER_KINDS = ("int64", "int32", "uint64", "uint32", "sint64", "sint32", "fixed64",
                 "fixed32", "sfixed64", "sfixed32")


def _field(message, name: str, number: int, kind: int, *, repeated: bool = False,
           type_name: str | None = None, oneof: int | None = None) -> None:
    field = message.field.add(name=name, number=number, type=kind,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name is not None:
        field.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _schema() -> descriptor_pb2.FileDescriptorProto:
    """The subset of et_def.proto fabricjax reads and writes (proto3, package ChakraProtoMsg,
    the same field numbers and types)."""
    proto = descriptor_pb2.FileDescriptorProto(name="fabricjax_et_def.proto", package=PACKAGE,
                                               syntax="proto3")
    for number, kind, scalar in _ATTR_SCALARS:
        lst = proto.message_type.add(name=kind.capitalize() + "List")
        _field(lst, "values", 1, scalar, repeated=True)
    attr = proto.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    for number, kind, scalar in _ATTR_SCALARS:
        _field(attr, f"{kind}_val", number, scalar, oneof=0)
        _field(attr, f"{kind}_list", number + 1, _F.TYPE_MESSAGE,
               type_name=kind.capitalize() + "List", oneof=0)
    meta = proto.message_type.add(name="GlobalMetadata")
    _field(meta, "version", 1, _F.TYPE_STRING)
    _field(meta, "attr", 2, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")
    io = proto.message_type.add(name="IOInfo")
    for number, name in ((1, "values"), (2, "shapes"), (3, "types")):
        _field(io, name, number, _F.TYPE_STRING)
    node_type = proto.enum_type.add(name="NodeType")
    for number, name in NODE_TYPES.items():
        node_type.value.add(name=name, number=number)
    comm_type = proto.enum_type.add(name="CollectiveCommType")
    for number, name in COLLECTIVE_TYPES.items():
        comm_type.value.add(name=name, number=number)
    node = proto.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    node.field.add(name="type", number=3, type=_F.TYPE_ENUM, label=_F.LABEL_OPTIONAL,
                   type_name=f".{PACKAGE}.NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_schema())
Node = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.Node"))
GlobalMetadata = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName(f"{PACKAGE}.GlobalMetadata"))
AttributeProto = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName(f"{PACKAGE}.AttributeProto"))


# --------------------------------------------------------------------------- attributes

def make_attribute(name: str, value: Any, kind: str | None = None):
    """An AttributeProto: bool -> bool_val, int -> int64_val, float -> double_val,
    str -> string_val (or `kind`, e.g. "int32", "uint64")."""
    if kind is None:
        kind = ("bool" if isinstance(value, bool) else "int64" if isinstance(value, int)
                else "double" if isinstance(value, float) else "string")
    return AttributeProto(name=name, **{f"{kind}_val": value})


def attribute(node, name: str) -> Any:
    """The value of `node`'s attribute `name` (the first one), whatever scalar type it was
    written with; None when absent or a list."""
    for attr in node.attr:
        if attr.name == name:
            which = attr.WhichOneof("value")
            if which is None or which.endswith("_list"):
                return None
            return getattr(attr, which)
    return None


def integer_attribute(node, name: str) -> int | None:
    """An attribute that must be an integer: None when absent; a ValueError naming it when it
    holds something else (text that is not a number, a float with a fraction)."""
    value = attribute(node, name)
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise ValueError(f"attribute {name} is a bool; expected an integer")
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"attribute {name} is {value!r}; expected an integer")


# --------------------------------------------------------------------------- the stream

def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_stream(messages) -> bytes:
    """Length-prefixed messages: each a varint byte count, then its bytes."""
    parts = []
    for message in messages:
        body = message.SerializeToString()
        parts += [_encode_varint(len(body)), body]
    return b"".join(parts)


def write_trace(path: str | Path, nodes, metadata=None, *, compress: bool = False) -> None:
    """One rank's trace: `metadata` (default: version "0.0.4") then `nodes`."""
    metadata = metadata if metadata is not None else GlobalMetadata(version="0.0.4")
    data = encode_stream([metadata, *nodes])
    Path(path).write_bytes(gzip.compress(data, mtime=0) if compress else data)


def split_stream(data: bytes, where: str, field: str) -> list[tuple[int, bytes]]:
    """(byte offset, message bytes) of every length-prefixed message in `data`; a
    ScenarioError naming `where` (the file) and the offset when the stream is cut short."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        length, shift = 0, 0
        while True:
            if pos >= end:
                raise ScenarioError(field, f"{where}: truncated: message {len(out)} at byte "
                                    f"{start} ends inside its length prefix")
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= 64:
                raise ScenarioError(field, f"{where}: message {len(out)} at byte {start} has "
                                    "a length prefix longer than 10 bytes; not a Chakra trace")
        if length > end - pos:
            raise ScenarioError(field, f"{where}: truncated: message {len(out)} at byte "
                                f"{start} declares {length:,} bytes but {end - pos:,} remain")
        out.append((start, data[pos:pos + length]))
        pos += length
    return out


def read_bytes(path: Path, where: str, field: str) -> bytes:
    """A trace file's bytes, gunzipped when they start with gzip's magic number."""
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise ScenarioError(field, f"{where}: {size:,} bytes; fabricjax reads traces of up "
                                f"to {MAX_TRACE_BYTES:,} bytes per rank")
        data = path.read_bytes()
    except OSError as err:
        raise ScenarioError(field, f"{where}: cannot read: {err.strerror}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=_Bounded(data)) as handle:
                data = handle.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError) as err:
            raise ScenarioError(field, f"{where}: a damaged gzip stream ({err})") from None
        if len(data) > MAX_TRACE_BYTES:
            raise ScenarioError(field, f"{where}: more than {MAX_TRACE_BYTES:,} bytes once "
                                "decompressed")
    return data


class _Bounded:
    """A read-only file over bytes (gzip.GzipFile wants one)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, size: int = -1) -> bytes:
        stop = len(self.data) if size is None or size < 0 else self.pos + size
        chunk = self.data[self.pos:stop]
        self.pos += len(chunk)
        return chunk


def read_trace(path: str | Path, field: str, where: str | None = None):
    """(GlobalMetadata, [Node, ...]) of one rank's trace file; a ScenarioError naming the file
    (and the message's index and byte offset) when it is not a readable trace."""
    path = Path(path)
    where = where or path.name
    data = read_bytes(path, where, field)
    messages = split_stream(data, where, field)
    if not messages:
        raise ScenarioError(field, f"{where}: empty; a Chakra trace starts with its "
                            "GlobalMetadata")
    metadata = GlobalMetadata()
    nodes = []
    for index, (offset, body) in enumerate(messages):
        message = metadata if index == 0 else Node()
        try:
            message.ParseFromString(body)
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and friends
            what = "GlobalMetadata" if index == 0 else f"node message {index - 1}"
            raise ScenarioError(field, f"{where}: {what} at byte {offset} is not a valid "
                                f"protobuf message ({type(err).__name__})") from None
        if index:
            nodes.append(message)
    return metadata, nodes
