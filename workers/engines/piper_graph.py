"""A Piper voice's ONNX graph, patched in memory so a batch is exact and repeatable.

Piper's models (VITS, exported by ``piper.train``) draw their noise inside the graph: two
``RandomNormalLike`` nodes, one over the text (the stochastic duration predictor's noise,
``[B, 2, T_text]``) and one over the frames (the latent ``z_p``, ``[B, C, T_frames]``). ONNX
Runtime seeds such a node once per session and its generator advances with every run, so the
same text gives different audio each time, and a row's noise depends on what else shares its
batch. The graph also returns only the padded audio, not where each row ends.

:func:`patch_model` rewrites the serialized ``ModelProto`` (protobuf wire format, by hand: the
``onnx`` package is not a dependency):

* each ``RandomNormalLike`` node becomes ``Slice(noise_k, 0, Shape(like))``, ``noise_k`` a new
  graph input ``[B, C, L]`` that the caller fills from each row's own seed (any ``L`` at least
  the length the graph needs: the slice keeps the prefix);
* the duration tensor (the only ``Ceil`` node's output: frames per phoneme id, ``[B, 1,
  T_text]``, zero on padding) becomes an output, as ``piper.patch_voice_with_alignment``
  does: a row's audio is ``sum(durations) * hop_length`` samples, and the durations give the
  words' times;
* the tensors the noise is shaped like become outputs too, so one probe run tells the noise
  inputs' channel counts (:class:`PatchedModel`).

Nodes are replaced where they stood, so the graph stays in topological order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["NOISE_STARTS", "PatchedModel", "patch_model"]

NOISE_STARTS = "voicelane_noise_starts"
"""The initializer holding the slices' start indices (zeros)."""

_VARINT = 0
_I64 = 1
_LEN = 2
_I32 = 5

# ModelProto / GraphProto / NodeProto / ValueInfoProto / TensorProto field numbers (onnx.proto).
_MODEL_GRAPH = 7
_GRAPH_NODE = 1
_GRAPH_INITIALIZER = 5
_GRAPH_INPUT = 11
_GRAPH_OUTPUT = 12
_NODE_INPUT = 1
_NODE_OUTPUT = 2
_NODE_NAME = 3
_NODE_OP_TYPE = 4
_VALUE_NAME = 1
_VALUE_TYPE = 2
_TYPE_TENSOR = 1
_TENSOR_TYPE_ELEM = 1
_TENSOR_TYPE_SHAPE = 2
_SHAPE_DIM = 1
_DIM_PARAM = 2
_TENSOR_DIMS = 1
_TENSOR_DATA_TYPE = 2
_TENSOR_NAME = 8
_TENSOR_RAW_DATA = 9
_NODE_STRINGS = (_NODE_INPUT, _NODE_OUTPUT, _NODE_OP_TYPE)
_FLOAT = 1
_INT64 = 7
_NOISE_RANK = 3


@dataclass(frozen=True, slots=True)
class PatchedModel:
    """The patched model and the names the engine feeds and reads."""

    model: bytes
    noise_inputs: tuple[str, ...]
    """The new inputs, one per ``RandomNormalLike`` node, in graph order."""
    noise_like: tuple[str, ...]
    """Per noise input, the tensor its noise is shaped like (an output now)."""
    durations: str
    """The output holding each phoneme id's frames ``[B, 1, T_text]``."""


@dataclass(frozen=True, slots=True)
class _Field:
    number: int
    wire_type: int
    start: int
    """Where the field's key starts."""
    body: slice
    """Its payload (length-delimited fields); empty for scalars."""
    end: int


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes, start: int, end: int) -> Iterator[_Field]:
    at = start
    while at < end:
        key_at = at
        key, at = _read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            _, at = _read_varint(data, at)
            yield _Field(number, wire_type, key_at, slice(at, at), at)
        elif wire_type == _LEN:
            length, body = _read_varint(data, at)
            at = body + length
            yield _Field(number, wire_type, key_at, slice(body, at), at)
        elif wire_type in (_I64, _I32):
            at += 8 if wire_type == _I64 else 4
            yield _Field(number, wire_type, key_at, slice(at, at), at)
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} at byte {key_at}")
    if at != end:
        raise ValueError("truncated protobuf message")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def _string(number: int, value: str) -> bytes:
    return _len_field(number, value.encode())


def _node(op_type: str, inputs: list[str], outputs: list[str], name: str) -> bytes:
    return _len_field(
        _GRAPH_NODE,
        b"".join(_string(_NODE_INPUT, name_) for name_ in inputs)
        + b"".join(_string(_NODE_OUTPUT, name_) for name_ in outputs)
        + _string(_NODE_NAME, name)
        + _string(_NODE_OP_TYPE, op_type),
    )


def _float_input(name: str) -> bytes:
    """A graph input: a float tensor of rank 3, every dimension named (dynamic)."""
    dims = b"".join(_len_field(_SHAPE_DIM, _string(_DIM_PARAM, f"{name}_{axis}")) for axis in "bct")
    tensor = _int_field(_TENSOR_TYPE_ELEM, _FLOAT) + _len_field(_TENSOR_TYPE_SHAPE, dims)
    return _len_field(
        _GRAPH_INPUT,
        _string(_VALUE_NAME, name) + _len_field(_VALUE_TYPE, _len_field(_TYPE_TENSOR, tensor)),
    )


def _output(name: str) -> bytes:
    """A graph output known by name only (its type is inferred), as piper's own patch does."""
    return _len_field(_GRAPH_OUTPUT, _string(_VALUE_NAME, name))


def _starts_initializer() -> bytes:
    return _len_field(
        _GRAPH_INITIALIZER,
        _int_field(_TENSOR_DIMS, _NOISE_RANK)
        + _int_field(_TENSOR_DATA_TYPE, _INT64)
        + _string(_TENSOR_NAME, NOISE_STARTS)
        + _len_field(_TENSOR_RAW_DATA, np.zeros(_NOISE_RANK, "<i8").tobytes()),
    )


def _node_parts(data: bytes, node: _Field) -> tuple[str, list[str], list[str]]:
    op_type = ""
    inputs: list[str] = []
    outputs: list[str] = []
    for field in _fields(data, node.body.start, node.body.stop):
        if field.wire_type != _LEN or field.number not in _NODE_STRINGS:
            continue  # the name, attributes, doc string
        text = data[field.body].decode()
        if field.number == _NODE_INPUT:
            inputs.append(text)
        elif field.number == _NODE_OUTPUT:
            outputs.append(text)
        elif field.number == _NODE_OP_TYPE:
            op_type = text
    return op_type, inputs, outputs


def patch_model(model: bytes) -> PatchedModel:
    """The patched model (module docstring); ValueError for a graph that is not a Piper
    VITS export (no ``RandomNormalLike`` node, or not exactly one ``Ceil``)."""
    graphs = [f for f in _fields(model, 0, len(model)) if f.number == _MODEL_GRAPH]
    if len(graphs) != 1:
        raise ValueError("not an ONNX model: no single graph")
    graph = graphs[0]
    pieces: list[bytes] = []
    copied_to = graph.body.start
    noise_inputs: list[str] = []
    noise_like: list[str] = []
    ceil_outputs: list[str] = []
    outputs: set[str] = set()
    for field in _fields(model, graph.body.start, graph.body.stop):
        if field.number == _GRAPH_OUTPUT:
            for part in _fields(model, field.body.start, field.body.stop):
                if part.number == _VALUE_NAME:
                    outputs.add(model[part.body].decode())
        if field.number != _GRAPH_NODE:
            continue
        op_type, inputs, node_outputs = _node_parts(model, field)
        if op_type == "Ceil":
            ceil_outputs.extend(node_outputs)
        elif op_type == "RandomNormalLike":
            name = f"voicelane_noise_{len(noise_inputs)}"
            shape = f"{name}_shape"
            pieces.append(model[copied_to : field.start])
            pieces.append(_node("Shape", [inputs[0]], [shape], f"{name}/Shape"))
            sliced = _node("Slice", [name, NOISE_STARTS, shape], node_outputs, f"{name}/Slice")
            pieces.append(sliced)
            copied_to = field.end
            noise_inputs.append(name)
            noise_like.append(inputs[0])
    if not noise_inputs:
        raise ValueError("no RandomNormalLike node: not a Piper VITS model")
    if len(ceil_outputs) != 1:
        raise ValueError(f"expected one Ceil node (the durations), found {len(ceil_outputs)}")
    pieces.append(model[copied_to : graph.body.stop])
    pieces.append(_starts_initializer())
    pieces.extend(_float_input(name) for name in noise_inputs)
    pieces.extend(_output(name) for name in [*ceil_outputs, *noise_like] if name not in outputs)
    body = b"".join(pieces)
    patched = (
        model[: graph.start]
        + _varint(_MODEL_GRAPH << 3 | _LEN)
        + _varint(len(body))
        + body
        + model[graph.end :]
    )
    return PatchedModel(patched, tuple(noise_inputs), tuple(noise_like), ceil_outputs[0])
