"""The layer DAG: :class:`LayerGraph` (layers and data-flow edges), its downsets, the bytes a
stage sends onwards, and the chain on which a DAG plan is scored.

A layer graph is a tuple of :class:`~archplace.placement.plan.LayerCost` and data-flow edges
between them. A *downset* is a set of layers closed under predecessors; a pipeline over the DAG
has as stages the differences of a chain of downsets D_1 c D_2 c ... c D_p = all layers (Piper,
Tarnawski et al., NeurIPS 2021, section 4). Stage j sends to the later stages the cut of D_j: the
outputs of the layers of D_j that have a successor outside D_j, each output sent once
(:func:`cut_bytes`). A DAG plan is scored on its *linearized* chain (:func:`linearize`): the
layers stage by stage, inside a stage in the graph's lexicographically smallest topological
order, the last layer of every stage but the last carrying its downset's cut bytes as
``boundary_bytes``. The dynamic program that chooses the downsets is
:func:`archplace.placement.downset_dp.dag_plan`; the file format is read by
:mod:`archplace.front.layer_graph_file`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import networkx as nx

from archplace.base.errors import ConfigError
from archplace.placement.memory import sequential_sum
from archplace.placement.plan import LayerCost

MAX_DOWNSETS = 200_000
"""Most downsets :func:`downsets` enumerates before giving up (ConfigError)."""


@dataclass(frozen=True, slots=True)
class LayerGraph:
    """A DAG of layers.

    Attributes:
        layers: the layers' costs (per micro-batch and TP rank, SI units); names must be unique.
        edges: data flow as (from, to) layer indices. A chain is ``edges = ((0, 1), (1, 2), ...)``
            (:meth:`chain`). Duplicate edges are dropped.

    Raises:
        ConfigError: no layer, a non-LayerCost layer, duplicate names, an edge that is not a
            pair of layer indices in range, a self loop or a cycle.
    """

    layers: tuple[LayerCost, ...]
    edges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        layers = tuple(self.layers)
        if not layers:
            raise ConfigError("layer graph: at least one layer is needed")
        for layer in layers:
            if not isinstance(layer, LayerCost):
                raise ConfigError(f"layer graph: layers must be LayerCost, got {type(layer).__name__}")
        seen: set[str] = set()
        for layer in layers:
            if layer.name in seen:
                raise ConfigError(f"layer graph: duplicate layer name {layer.name!r}")
            seen.add(layer.name)
        n = len(layers)
        edges: list[tuple[int, int]] = []
        for edge in self.edges:
            try:
                a, b = edge
            except (TypeError, ValueError):
                raise ConfigError(f"layer graph: an edge must be a (from, to) pair, got {edge!r}") from None
            for end in (a, b):
                if isinstance(end, bool) or not isinstance(end, numbers.Integral) or not 0 <= end < n:
                    raise ConfigError(f"layer graph: edge {edge!r} names layer {end!r}, "
                                      f"not an index in 0..{n - 1}")
            if a == b:
                raise ConfigError(f"layer graph: self loop on layer {layers[int(a)].name!r}")
            edges.append((int(a), int(b)))
        unique = tuple(dict.fromkeys(edges))
        graph = nx.DiGraph(unique)
        if not nx.is_directed_acyclic_graph(graph):
            cycle = [layers[a].name for a, _ in nx.find_cycle(graph)]
            raise ConfigError(f"layer graph has a cycle: {' -> '.join([*cycle, cycle[0]])}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "edges", unique)

    @classmethod
    def chain(cls, layers: Sequence[LayerCost]) -> LayerGraph:
        """The chain of ``layers`` (edges i -> i + 1)."""
        return cls(tuple(layers), tuple((i, i + 1) for i in range(len(layers) - 1)))

    @property
    def n(self) -> int:
        """Number of layers."""
        return len(self.layers)

    def digraph(self) -> nx.DiGraph:
        """The graph as a networkx DiGraph on nodes 0..n-1."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.n))
        graph.add_edges_from(self.edges)
        return graph

    def topological_order(self) -> tuple[int, ...]:
        """The lexicographically smallest topological order of the layer indices (pi); the
        identity for a chain or any graph whose indices already follow the data flow."""
        return tuple(nx.lexicographical_topological_sort(self.digraph()))


def predecessor_masks(graph: LayerGraph, order: Sequence[int]) -> tuple[list[int], list[int]]:
    """(predecessors, successors) of every layer as bitmasks over positions in ``order`` (a
    topological order): entry k has bit i set when the layer at position i is a predecessor
    (successor) of the layer at position k."""
    position = {layer: k for k, layer in enumerate(order)}
    preds = [0] * graph.n
    succs = [0] * graph.n
    for a, b in graph.edges:
        preds[position[b]] |= 1 << position[a]
        succs[position[a]] |= 1 << position[b]
    return preds, succs


def downset_masks(graph: LayerGraph, order: Sequence[int], limit: int) -> list[int]:
    """Every downset as a bitmask over positions in ``order`` (a topological order), sorted by
    size, then by mask: each layer in turn is added to every downset found so far that holds
    all its predecessors (those come earlier in ``order``), so every mask is a downset and
    every downset is found once.

    Raises:
        ConfigError: more than ``limit`` downsets.
    """
    preds, _ = predecessor_masks(graph, order)
    masks = [0]
    for k in range(graph.n):
        need = preds[k]
        bit = 1 << k
        masks.extend([mask | bit for mask in masks if mask & need == need])
        if len(masks) > limit:  # the count never shrinks as layers are added
            raise ConfigError(f"layer graph: more than {limit:,} downsets after {k + 1} of "
                              f"{graph.n} layers (too many parallel branches for an exact plan)")
    masks.sort(key=lambda mask: (mask.bit_count(), mask))
    return masks


def downsets(graph: LayerGraph, *, limit: int = MAX_DOWNSETS) -> list[frozenset[int]]:
    """Every downset (set of layer indices closed under predecessors) of ``graph``, the empty
    set and the full set included, sorted by size and then by positions in the topological
    order. A chain of n layers has n + 1 (its prefixes); a diamond 0 -> {1, 2} -> 3 has 6.

    Raises:
        ConfigError: more than ``limit`` downsets.
    """
    order = graph.topological_order()
    return [frozenset(order[k] for k in range(graph.n) if mask >> k & 1)
            for mask in downset_masks(graph, order, limit)]


def cut_bytes(graph: LayerGraph, downset: Iterable[int]) -> float:
    """Bytes a pipeline stage ending with ``downset`` sends onwards per micro-batch: the sum of
    ``boundary_bytes`` of the layers of the downset with at least one successor outside it (each
    output sent once), summed left to right in the topological order.

    Raises:
        ConfigError: ``downset`` is not a downset of ``graph``.
    """
    members = set(downset)
    for a, b in graph.edges:
        if b in members and a not in members:
            raise ConfigError(f"cut_bytes: {sorted(members)} is not a downset (layer "
                              f"{graph.layers[b].name!r} without its predecessor {graph.layers[a].name!r})")
    outside = {a for a, b in graph.edges if a in members and b not in members}
    return sequential_sum(graph.layers[k].boundary_bytes for k in graph.topological_order() if k in outside)


def linearize(graph: LayerGraph, stages: Sequence[Iterable[int]]
              ) -> tuple[list[LayerCost], tuple[tuple[int, int], ...], tuple[tuple[str, ...], ...]]:
    """The chain on which a DAG plan is scored: (layers, stage ranges, layer names per stage).

    Args:
        graph: the layer graph.
        stages: layer indices of every stage, in pipeline order; every prefix union must be a
            downset and together they must cover every layer once.

    Returns:
        The layers stage by stage, inside a stage in topological order (``topological_order``),
        the last layer of every stage but the last with ``boundary_bytes`` = the cut bytes of
        the stages so far (:func:`cut_bytes`); the ``(first, last)`` range of every stage in
        that chain; and the layer names of every stage.

    Raises:
        ConfigError: an empty stage, a layer in two stages or in none, an unknown index, or a
            stage that needs a layer of a later stage.
    """
    order = graph.topological_order()
    rank = {layer: k for k, layer in enumerate(order)}
    placed: set[int] = set()
    chain: list[LayerCost] = []
    ranges: list[tuple[int, int]] = []
    names: list[tuple[str, ...]] = []
    preds: dict[int, list[int]] = {}
    for a, b in graph.edges:
        preds.setdefault(b, []).append(a)
    for j, stage in enumerate(stages):
        members = list(dict.fromkeys(stage))
        if not members:
            raise ConfigError(f"stage {j} is empty")
        for k in members:
            if k not in rank:
                raise ConfigError(f"stage {j}: no layer {k!r} (layers 0..{graph.n - 1})")
            if k in placed:
                raise ConfigError(f"stage {j}: layer {graph.layers[k].name!r} is already in an earlier stage")
        members.sort(key=rank.__getitem__)
        placed.update(members)
        for k in members:
            missing = [a for a in preds.get(k, ()) if a not in placed]
            if missing:
                raise ConfigError(f"stage {j}: layer {graph.layers[k].name!r} needs "
                                  f"{graph.layers[missing[0]].name!r} of a later stage")
        if ranges:  # the previous stage sends the cut of everything placed before this stage
            before = placed.difference(members)
            chain[-1] = replace(chain[-1], boundary_bytes=cut_bytes(graph, before))
        first = len(chain)
        chain.extend(graph.layers[k] for k in members)
        ranges.append((first, len(chain) - 1))
        names.append(tuple(graph.layers[k].name for k in members))
    if not ranges:
        raise ConfigError("a plan needs at least one stage")
    if len(placed) != graph.n:
        left = [graph.layers[k].name for k in order if k not in placed]
        raise ConfigError(f"stages leave {len(left)} layers out, e.g. {left[0]!r}")
    return chain, tuple(ranges), tuple(names)


def check_flop_rates(graph: LayerGraph, peak_flop_per_s: float) -> None:
    """Refuse a layer whose ``fwd_flop`` (``bwd_flop``) could not run in its ``fwd_s``
    (``bwd_s``) at the chip's peak: the plan's MFU would exceed 1 (a profile taken on a faster
    chip than the one planned for, or FLOP counted per TP group instead of per rank).

    Raises:
        ConfigError: naming the layer, its FLOP, its time and the peak.
    """
    for layer in graph.layers:
        for phase, flop, seconds in (("fwd", layer.fwd_flop + layer.padding_fwd_flop, layer.fwd_s),
                                     ("bwd", layer.bwd_flop + layer.padding_bwd_flop, layer.bwd_s)):
            if flop > seconds * peak_flop_per_s * (1 + 1e-9):
                raise ConfigError(
                    f"layer {layer.name!r}: {phase}_flop {flop:.4g} FLOP in {phase}_s {seconds:.4g} s "
                    f"is {flop / seconds if seconds > 0 else math.inf:.4g} FLOP/s, above the chip's "
                    f"peak of {peak_flop_per_s:.4g} FLOP/s (MFU would exceed 1; give FLOP and times "
                    f"per TP rank, measured on this chip)")
