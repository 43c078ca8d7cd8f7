"""A code-free file format for :class:`LayerChain` objects (the graph cache's files).

A chain is written as JSON of its fields, compressed with zlib, behind a one-line header that
names the cache key the chain belongs to and the sha256 checksum of the compressed body::

    archplace-chain 1\\n
    {"key": "<64 hex digits>", "sha256": "<64 hex digits>", "size": <bytes of the JSON>}\\n
    <zlib-compressed JSON>

Reading a file runs no code from it, unlike :mod:`pickle`: :func:`unpack` checks the header,
the key, the checksum and the size before it decompresses anything (and decompresses no more than
the size the header states, itself capped), then decodes strictly: every field of every
:class:`LayerChain`, :class:`Layer` and :class:`Operator` must be there, no other, each of its
type (an ``int`` field takes no ``bool`` or ``float``; a ``float`` field takes ``int`` or
``float``, kept as it was; an enum field one of its values); the objects' own checks run as
well.  Anything else raises :class:`ChainCodecError`, the one error this module raises.

The graphs of the chain are written once each and referred to by index, so graphs that are one
object before writing (the blocks of a chain share their traced graphs,
:mod:`archplace.workload.layers`) are one object after reading; caches keyed by ``id(graph)`` (the
plan search's bounds and costs) depend on it.  (Operators are written per graph: an operator object
shared by two graphs would be two equal objects after reading; traced chains share none, and
nothing keys by an operator's identity.)  Floats survive exactly (JSON numbers written with
:func:`repr`, which reads back to the same double; NaN and infinities as Python's ``json`` writes
them).

The checksum sits in each file, not in an index of the directory: several searches write the
cache at once, and an index would need a lock (or lose entries to concurrent rewrites) to stay
true, while a file that carries its own key and checksum is checked alone and replaced by one
atomic rename.  The checksum finds a truncated, corrupted or hand-edited file; it is no
signature (whoever can write the file can recompute it), which is why the cache only opens files
that the user owns and that no one else may write (:mod:`archplace.workload.cache`).
"""

from __future__ import annotations

import enum
import hashlib
import json
import zlib
from collections.abc import Callable
from typing import Any

from archplace.base.errors import ConfigError
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase
from archplace.workload.key import CostKey
from archplace.workload.layers import Layer, LayerChain, LayerKind

MAGIC = b"archplace-chain 1\n"
"""First line of every file: the format and its version."""

MAX_HEADER_BYTES = 1024
"""Longest header line read (the JSON of the key, the checksum and the size)."""

MAX_PAYLOAD_BYTES = 256 * 2**20
"""Largest decompressed JSON accepted, bytes (a llama2-7b chain takes about 25 KB)."""


class ChainCodecError(ValueError):
    """A chain file that is malformed, for another key, or fails its checksum."""


def _fail(where: str, wanted: str, value: object, name: str = "") -> Any:
    """Raise :class:`ChainCodecError`: ``where`` (field ``name`` of it, if given) holds ``value``,
    not ``wanted``."""
    shown = repr(value)
    place = f"{where}.{name}" if name else where
    raise ChainCodecError(f"{place}: expected {wanted}, got {shown[:40]}{'...' if len(shown) > 40 else ''}")


Check = Callable[[Any, str, str], Any]
"""A field's check: its JSON value, where it is and its name (for messages) to the value of the
field;
raises :class:`ChainCodecError` on a value of another kind."""


def _int(value: Any, where: str, name: str) -> Any:
    """An ``int`` field: a JSON integer (not ``true``, not ``1.0``)."""
    return value if type(value) is int else _fail(where, "an integer", value, name)


def _float(value: Any, where: str, name: str) -> Any:
    """A ``float`` field: a JSON number, kept as read (an integer stays an ``int``)."""
    return value if type(value) is float or type(value) is int else _fail(where, "a number", value, name)


def _bool(value: Any, where: str, name: str) -> Any:
    """A ``bool`` field: ``true`` or ``false``."""
    return value if type(value) is bool else _fail(where, "true or false", value, name)


def _str(value: Any, where: str, name: str) -> Any:
    """A ``str`` field: a JSON string."""
    return value if type(value) is str else _fail(where, "a string", value, name)


def _ints(value: Any, where: str, name: str) -> Any:
    """A ``tuple[int, ...]`` field: a JSON list of integers."""
    if type(value) is not list or not all(type(v) is int for v in value):
        return _fail(where, "a list of integers", value, name)
    return tuple(value)


def _strs(value: Any, where: str, name: str) -> Any:
    """A ``tuple[str, ...]`` field: a JSON list of strings."""
    if type(value) is not list or not all(type(v) is str for v in value):
        return _fail(where, "a list of strings", value, name)
    return tuple(value)


def _enum(kind: type[enum.StrEnum]) -> Check:
    """The check of a field of the string enum ``kind``: one of its values."""

    def check(value: Any, where: str, name: str) -> Any:
        if type(value) is str:
            try:
                return kind(value)
            except ValueError:
                pass
        return _fail(where, f"one of {[member.value for member in kind]}", value, name)

    return check


Schema = tuple[tuple[str, Check], ...]
"""Fields of a dataclass, in its order, and their checks."""

OPERATOR_FIELDS: Schema = (
    ("id", _int), ("name", _str), ("target", _str), ("kind", _enum(OpKind)), ("phase", _enum(Phase)),
    ("batch", _int), ("m", _int), ("k", _int), ("n", _int), ("elements", _int), ("flop", _float),
    ("bytes_read", _float), ("bytes_written", _float), ("preds", _ints), ("group", _int),
    ("fused_elements", _int), ("fused", _strs), ("causal", _bool), ("skip_masked_blocks", _bool),
    ("dtype_bytes", _int), ("v_dim", _int), ("cp", _int), ("cp_stride", _int), ("ring_bytes", _float),
    ("footprint_bytes", _float),
)
"""The fields of :class:`Operator`, in the order an operator is written (a JSON list of values)."""

GRAPH_FIELDS = ("fwd", "bwd")
"""The fields of :class:`Layer` holding graphs, written as indices into the file's graphs."""

LAYER_FIELDS: Schema = (
    ("name", _str), ("kind", _enum(LayerKind)), ("params", _int), ("fwd", _int), ("bwd", _int),
    ("activation_bytes", _float), ("input_bytes", _float), ("boundary_bytes", _float),
    ("working_bytes", _float), ("selective_activation_bytes", _float), ("selective_ops", _strs),
    ("experts", _int), ("experts_per_token", _int), ("tokens_per_expert", _int),
    ("expert_params", _int), ("routed_tokens", _int), ("ep", _int), ("all_to_all_bytes", _float),
    ("etp", _int), ("expert_tp_bytes", _float), ("padding_fwd_flop", _float), ("padding_bwd_flop", _float),
    ("fp8_activation_saving_bytes", _float), ("selective_fp8_saving_bytes", _float),
)
"""The fields of :class:`Layer` (a layer is written as a JSON object)."""

KEY_FIELDS: Schema = (
    ("tp", _int), ("micro_batch", _int), ("sp", _bool), ("cp", _int), ("ep", _int), ("etp", _int),
)
"""The fields of a chain's :class:`~archplace.workload.key.CostKey` (written as a JSON object)."""


def _key(value: Any, where: str, name: str) -> CostKey:
    """A chain's ``key`` field: a JSON object of :data:`KEY_FIELDS`."""
    return CostKey(**_record(value, KEY_FIELDS, f"{where}.{name}"))


CHAIN_FIELDS: Schema = (
    ("model", _str), ("key", _key), ("seq_len", _int), ("shared_params", _int),
)
"""The fields of :class:`LayerChain` but ``layers`` (written as a JSON object; the key as an
object of its fields)."""


def encode_chain(chain: LayerChain) -> bytes:
    """The JSON (UTF-8) of ``chain``: its fields, its layers, and each distinct graph once.

    Raises:
        ChainCodecError: a field holds a value JSON cannot write (never for a traced chain).
    """
    graphs: list[OpGraph] = []
    index: dict[int, int] = {}
    layers = []
    for layer in chain.layers:
        item = {name: getattr(layer, name) for name, _ in LAYER_FIELDS}
        for name in GRAPH_FIELDS:
            graph = item[name]
            if id(graph) not in index:
                index[id(graph)] = len(graphs)
                graphs.append(graph)
            item[name] = index[id(graph)]
        layers.append(item)
    document = {  # enums are strings and tuples lists in JSON
        "chain": {**{name: getattr(chain, name) for name, _ in CHAIN_FIELDS},
                  "key": chain.key._asdict()},
        "layers": layers,
        "graphs": [[[getattr(op, name) for name, _ in OPERATOR_FIELDS] for op in graph.ops]
                   for graph in graphs],
    }
    try:
        return json.dumps(document, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise ChainCodecError(f"chain {chain.model!r} cannot be written: {exc}") from None


def _record(item: Any, schema: Schema, where: str) -> dict[str, Any]:
    """The fields of a JSON object ``item`` with exactly the fields of ``schema``, checked.

    Raises:
        ChainCodecError: not an object, a field missing or unknown, or a value of another kind.
    """
    if type(item) is not dict:
        return _fail(where, "an object", item)
    names = [name for name, _ in schema]
    if set(item) != set(names):
        raise ChainCodecError(f"{where}: fields {sorted(item)}, expected {sorted(names)}")
    return {name: check(item[name], where, name) for name, check in schema}


def _operator(item: Any, where: str) -> Operator:
    """An operator from its JSON list of values.

    Raises:
        ChainCodecError: not a list of exactly the operator's fields, each of its kind.
    """
    if type(item) is not list or len(item) != len(OPERATOR_FIELDS):
        return _fail(where, f"a list of {len(OPERATOR_FIELDS)} values", item)
    return Operator(**{name: check(value, where, name)
                       for (name, check), value in zip(OPERATOR_FIELDS, item, strict=True)})


def decode_chain(data: bytes) -> LayerChain:
    """The chain :func:`encode_chain` wrote, checked field by field.

    Raises:
        ChainCodecError: ``data`` is not such a document: not JSON, a field missing, unknown or
            of another type, an unknown enum value, a graph index out of range, or values the
            objects' own checks refuse (operators out of order, predecessors that do not precede).
    """
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ChainCodecError(f"not JSON: {exc}") from None
    if type(document) is not dict or set(document) != {"chain", "layers", "graphs"}:
        raise ChainCodecError("expected an object with the fields chain, layers and graphs")
    try:
        return _decode(document)
    except ConfigError as exc:  # the dataclasses' own checks
        raise ChainCodecError(str(exc)) from None


def _decode(document: dict[str, Any]) -> LayerChain:
    """:func:`decode_chain` of a parsed document.

    Raises:
        ChainCodecError, ConfigError: as :func:`decode_chain`.
    """
    graphs_json, layers_json = document["graphs"], document["layers"]
    if type(graphs_json) is not list or type(layers_json) is not list:
        raise ChainCodecError("graphs and layers must be lists")
    graphs = []
    for g, ops in enumerate(graphs_json):
        if type(ops) is not list:
            _fail(f"graphs[{g}]", "a list of operators", ops)
        graphs.append(OpGraph(tuple(_operator(op, f"graphs[{g}][{i}]") for i, op in enumerate(ops))))
    layers = []
    for i, item in enumerate(layers_json):
        values = _record(item, LAYER_FIELDS, f"layers[{i}]")
        for name in GRAPH_FIELDS:
            if not 0 <= values[name] < len(graphs):
                raise ChainCodecError(f"layers[{i}].{name}: graph {values[name]} of {len(graphs)}")
            values[name] = graphs[values[name]]
        layers.append(Layer(**values))
    return LayerChain(**_record(document["chain"], CHAIN_FIELDS, "chain"), layers=tuple(layers))


def pack(key: str, chain: LayerChain) -> bytes:
    """The file of ``chain`` under the cache key ``key``: header, key, checksum, compressed JSON.

    Raises:
        ChainCodecError: as :func:`encode_chain`.
    """
    payload = encode_chain(chain)
    body = zlib.compress(payload, 6)
    header = {"key": key, "sha256": hashlib.sha256(body).hexdigest(), "size": len(payload)}
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body


def unpack(data: bytes, key: str) -> LayerChain:
    """The chain of the file ``data`` written by :func:`pack` under ``key``.

    The header, the key and the checksum are checked before anything is decompressed, and no more
    than the stated size (at most :data:`MAX_PAYLOAD_BYTES`) is decompressed.

    Raises:
        ChainCodecError: another format, a malformed header, another key, a wrong checksum, a
            body that does not decompress to exactly the stated size, or a payload
            :func:`decode_chain` refuses.
    """
    if not data.startswith(MAGIC):
        raise ChainCodecError("not an archplace chain file (or of another version)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER_BYTES)
    if end < 0:
        raise ChainCodecError("no header line")
    try:
        header = json.loads(data[len(MAGIC):end])
    except (ValueError, RecursionError):
        raise ChainCodecError("malformed header") from None
    if type(header) is not dict or set(header) != {"key", "sha256", "size"}:
        raise ChainCodecError("malformed header")
    size = header["size"]
    if type(size) is not int or not 0 < size <= MAX_PAYLOAD_BYTES:
        raise ChainCodecError(f"payload size {size!r} out of range")
    if header["key"] != key:
        raise ChainCodecError("file of another cache key")
    body = data[end + 1:]
    if header["sha256"] != hashlib.sha256(body).hexdigest():
        raise ChainCodecError("checksum mismatch")
    inflate = zlib.decompressobj()
    try:
        payload = inflate.decompress(body, size)
    except zlib.error as exc:
        raise ChainCodecError(f"corrupt body: {exc}") from None
    if len(payload) != size or inflate.unconsumed_tail or not inflate.eof or inflate.unused_data:
        raise ChainCodecError("body does not hold the stated payload")
    return decode_chain(payload)
