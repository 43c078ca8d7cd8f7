"""The layer-graph file: reading and validating a YAML/JSON layer DAG with its costs
(``archplace plan --layer-graph``) into a :class:`~archplace.placement.layer_graph.LayerGraph`.
The format is given in :func:`load_layer_graph_file`."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.inputs import read_mapping, syntax_of
from archplace.placement.layer_graph import LayerGraph
from archplace.placement.plan import LayerCost

_REQUIRED = ("name", "fwd_s", "bwd_s", "params", "activation_bytes", "input_bytes", "boundary_bytes",
             "working_bytes", "fwd_flop", "bwd_flop")
_FIELDS = tuple(f.name for f in fields(LayerCost))


def _number(where: str, name: str, value: object, integer: bool) -> float | int:
    if isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        except ValueError:
            raise ConfigError(f"{where}: {name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
    if integer:
        if not float(value).is_integer():
            raise ConfigError(f"{where}: {name} must be an integer, got {value!r}")
        return int(float(value))
    return float(value)


def layer_graph_from_dict(data: object, source: str = "layer graph") -> tuple[LayerGraph, int | None]:
    """A layer graph from its file form (see :func:`load_layer_graph`); also returns the
    optional ``seq_len``.

    Raises:
        ConfigError: one line naming ``source`` and the fault.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with 'layers' and 'edges', got "
                          f"{type(data).__name__}")
    unknown = sorted(set(data) - {"layers", "edges", "seq_len"})
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (expected layers, edges, seq_len)")
    for key in ("layers", "edges"):
        if key not in data:
            raise ConfigError(f"{source}: missing {key!r}")
        if not isinstance(data[key], list):
            raise ConfigError(f"{source}: {key!r} must be a list")
    seq_len: int | None = None
    if data.get("seq_len") is not None:
        seq_len = int(_number(source, "seq_len", data["seq_len"], integer=True))
        if seq_len < 1:
            raise ConfigError(f"{source}: seq_len must be a positive integer, got {seq_len}")
    layers: list[LayerCost] = []
    index: dict[str, int] = {}
    for k, record in enumerate(data["layers"]):
        where = f"{source}: layer {k}"
        if not isinstance(record, Mapping):
            raise ConfigError(f"{where}: expected a mapping of LayerCost fields")
        if "name" in record:
            where = f"{source}: layer {record['name']!r}"
        missing = [name for name in _REQUIRED if name not in record]
        if missing:
            raise ConfigError(f"{where}: missing field {missing[0]!r}")
        extra = sorted(set(record) - set(_FIELDS))
        if extra:
            raise ConfigError(f"{where}: unknown field {extra[0]!r}")
        name = str(record["name"])
        if name in index:
            raise ConfigError(f"{source}: duplicate layer name {name!r}")
        values: dict[str, Any] = {"name": name}
        for key, value in record.items():
            if key == "name" or (key == "selective_activation_bytes" and value is None):
                continue
            values[key] = _number(where, key, value, integer=key == "params")
        try:
            layers.append(LayerCost(**values))
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        index[name] = k
    edges: list[tuple[int, int]] = []
    for edge in data["edges"]:
        if not isinstance(edge, list | tuple) or len(edge) != 2:
            raise ConfigError(f"{source}: an edge must be a [from, to] pair of layer names, got {edge!r}")
        for end in edge:
            if str(end) not in index:
                raise ConfigError(f"{source}: edge {list(edge)!r} names unknown layer {end!r}")
        edges.append((index[str(edge[0])], index[str(edge[1])]))
    try:
        return LayerGraph(tuple(layers), tuple(edges)), seq_len
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_layer_graph_file(path: str | Path) -> tuple[LayerGraph, int | None]:
    """Read a layer graph file; returns the graph and its optional ``seq_len``.

    Format (YAML, or JSON for ``*.json``)::

        seq_len: 2048            # optional: tokens per sample, for tokens/s
        layers:                  # one record per layer, LayerCost fields in SI units,
          - name: text.embed     # per micro-batch and per TP rank
            fwd_s: 1.0e-3
            bwd_s: 2.0e-3
            params: 50000000
            activation_bytes: 1.0e+8
            input_bytes: 1.6e+4
            boundary_bytes: 8.0e+6
            working_bytes: 4.0e+7
            fwd_flop: 1.0e+11
            bwd_flop: 2.0e+11
            # optional: selective_activation_bytes, selective_recompute_s,
            #           tp_comm_fwd_s, tp_comm_bwd_s
        edges:                   # data flow, [from, to] layer names
          - [text.embed, text.block0]

    Raises:
        ConfigError: a file :func:`archplace.base.inputs.read_mapping` refuses (missing, oversized,
            binary, malformed, too deep), a missing or unknown field, a negative
            value, an unknown layer name in an edge, or a cycle (one line, naming the file).
    """
    label = str(path)
    return layer_graph_from_dict(read_mapping(Path(path), "layer graph", syntax=syntax_of(path), label=label),
                                 label)


def load_layer_graph(path: str | Path) -> LayerGraph:
    """The layer graph of a file (see :func:`load_layer_graph_file`)."""
    return load_layer_graph_file(path)[0]
