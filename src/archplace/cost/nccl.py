"""Collectives as NCCL runs them: NCCL's own cost model (docs/model.md, Collectives).

NCCL picks, for every collective call, the (algorithm, protocol) pair its tuner predicts to be
fastest, with ``time = latency + bytes / bandwidth`` per pair (``ncclTopoGetAlgoTime`` in
``src/graph/tuning.cc`` of NVIDIA/nccl, commit ``5067397c2676d5aed50042fc39e5c8ee96eb0027``;
every constant in :mod:`archplace.cost.nccl_constants` with its line).  This module rebuilds
that model for a communicator of ``ranks`` GPUs, ``per_node`` on each of ``nodes`` nodes of
NVSwitch-connected GPUs, and returns NCCL's predicted time.

Channels and per-channel bandwidth (the topology search, ``src/graph/search.cc``
``ncclTopoCompute``, reduced to homogeneous NVSwitch nodes):

* one node: the search starts at the fastest speed ``s`` of ``speeds_intra`` no higher than the
  GPU's NVLink bandwidth ``T = links x SMxx_NVLINK_BW`` and packs ``c = min(floor(T / s), 32)``
  ring channels; several nodes: ``speeds_inter`` and the NIC path ``b = min(NIC, PCIe x16)``,
  one or more channels per NIC the communicator's GPUs own (``floor(b / s)`` each), at most
  what NVLink carries (``c s (g-1)/g <= T``);
* ``ncclTopoDupChannels``: when ``s >= 25`` (and, after Ampere, ``s >= 50`` or ``c <= 4``) the
  channels are doubled at half the speed;
* pass 2 raises the speed while the same channel count still fits.

The tree graph is taken as the ring graph (NCCL searches it with at most the ring's channel
count, ``init.cc`` l. 1185).  The NVLS graph (Hopper and later, one node of NVSwitch, the
communicator's ``g`` GPUs as ``g`` channels, ``search.cc`` l. 1127-1140) takes the fastest
``s`` with ``g s <= T``; its inter speed is raised to the first speed >= 2 s (pass 2).

Bus bandwidth per (algorithm, protocol), GB/s (``ncclTopoTuneModel``), with ``c`` channels of
``s`` and the per-channel caps of the generation (``n`` the node-count index 0, 1, 2 for 1, 2,
more nodes):

==================  ===================================================================
ring LL             min(llMax[n], c s / 2)
ring LL128          min(0.92 c s, c ringLL128[n])
ring Simple         c s
tree (all-reduce)   B = min(0.92 c s, c tree[n]);  LL: min(B / 3.8, llMax[n]);
                    LL128: min(B x (7/9 one node, 120/128 else), c treeLL128[n]);  Simple: B
NVLS Simple         c min(s eff (c-1)/c x (2 all-reduce | (g-1)/g otherwise), s_inter)
==================  ===================================================================

and to algorithm bandwidth: x ranks / steps for ring and NVLS (steps = 2(p-1) for all-reduce,
p-1 for all-gather and reduce-scatter), x 1/2 for tree.  NVLS all-gather and reduce-scatter
keep the bus figure (NCCL does not convert it).  Latency, µs:

==========  ===========================================================================
ring        base + (steps - x) l_intra + x l_inter; x = 2(k-1) all-reduce, k-1 others
tree        base + 2 ((g-1) l_intra + floor(log2 k) l_inter)            (all-reduce only)
NVLS        l_intra (25 µs), one node only
==========  ===========================================================================

``l_intra`` is the NVLink per-step latency, raised to NCCL's network overhead per step
(1 µs, x3 for Simple) when there are several nodes; ``l_inter`` the network per-step latency
(the tree's when g = 1).  At run time the tree bandwidth is multiplied by
``treeCorrectionFactor`` for its size, and the ring Simple latency of a multi-node all-reduce
by 1.4 (``ncclTopoGetAlgoTime``).  LL128 is taken as enabled (NCCL enables it when the
GPUs meet over NVLink/NVSwitch and the NICs sit on the GPUs' PCIe switches, as in DGX/HGX
nodes).  Not modelled: CollNet/SHARP switches, NVLS across nodes (NVLSTree), PAT,
and PCIe-only nodes; NCCL's run-time channels, chunks and steps only in the opt-in
:func:`pipelined_time_s` (:mod:`archplace.cost.nccl_pipeline`).

Point to point and all-to-all (NCCL's send/receive: one pair per peer, all at once): a GPU's
peers on its node are reached over NVLink at ``T`` shared among them, the others over the
node's NICs the GPU owns (``nics / per_node`` of the node's NIC bandwidth, at least one NIC's
path shared with the GPUs that share it); each direction finishes when its slower part does,
after one ring Simple step of latency (base + one hop on the slower link).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archplace.base.errors import ConfigError
from archplace.cost import nccl_pipeline
from archplace.cost.nccl_constants import (
    BASE_LATENCY_US,
    GENERATIONS,
    HW_LATENCY_US,
    MAX_NVLS_ARITY,
    MAX_RING_CHANNELS,
    NET_OVERHEAD_US,
    PROTOCOLS,
    TREE_CORRECTION,
    NcclGeneration,
)

GB = 1e9  # NCCL's GB/s are 1e9 bytes per second
KINDS = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True, slots=True)
class Communicator:
    """A NCCL communicator as the tuner sees it.

    Attributes:
        generation: the GPUs' :class:`NcclGeneration`.
        per_node: ranks on each node (g).
        nodes: nodes (k); ranks = g x k.
        nvlink_gbps: T, what NCCL counts for one GPU's NVLinks per direction, GB/s.
        nic_gbps: one NIC's bandwidth per direction, GB/s.
        nics: NICs the communicator's GPUs own on one node (>= 1).
        nvswitch: the node's GPUs meet in an NVSwitch (NVLS needs it).

    Raises:
        ConfigError: a count below 1 or a non-positive bandwidth.
    """

    generation: NcclGeneration
    per_node: int
    nodes: int
    nvlink_gbps: float
    nic_gbps: float
    nics: int
    nvswitch: bool = True

    def __post_init__(self) -> None:
        for name in ("per_node", "nodes", "nics"):
            if getattr(self, name) < 1:
                raise ConfigError(f"nccl communicator: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("nvlink_gbps", "nic_gbps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"nccl communicator: {name} must be positive, got {getattr(self, name)}")

    @property
    def ranks(self) -> int:
        """p = per_node x nodes."""
        return self.per_node * self.nodes

    @property
    def node_index(self) -> int:
        """NCCL's node-count index into the per-channel tables: 0, 1, 2 for 1, 2, more nodes."""
        return min(self.nodes, 3) - 1

    @property
    def nic_path_gbps(self) -> float:
        """b: a NIC's path to its GPU, min(NIC, PCIe x16 of the generation), GB/s."""
        return min(self.nic_gbps, self.generation.pcie_gbps)


@dataclass(frozen=True, slots=True)
class Graph:
    """A searched graph: ``channels`` of ``intra_gbps`` (and ``inter_gbps``) each."""

    channels: int
    intra_gbps: float
    inter_gbps: float


@dataclass(frozen=True, slots=True)
class Choice:
    """One (algorithm, protocol) of the tuner: ``latency_us`` and algorithm ``bandwidth_gbps``."""

    algorithm: str
    protocol: str
    latency_us: float
    bandwidth_gbps: float
    base_us: float = 0.0
    hop_intra_us: float = 0.0
    hop_inter_us: float = 0.0
    inter_steps: int = 0

    def time_s(self, nbytes: float, kind: str, comm: Communicator) -> float:
        """NCCL's predicted seconds for ``nbytes`` (``ncclTopoGetAlgoTime``)."""
        bw = self.bandwidth_gbps
        lat = self.latency_us
        if self.algorithm == "tree" and kind == "all_reduce" and nbytes >= 64:
            index = int(math.floor(math.log2(nbytes / 64)))
            table = TREE_CORRECTION[self.protocol]
            if index < 23:
                bw *= table[index]
        if (self.algorithm == "ring" and self.protocol == "Simple" and comm.nodes > 1
                and kind == "all_reduce"):
            ring = ring_graph(comm)
            if nbytes / (ring.channels * comm.ranks) >= 64:
                lat *= 1.4 if comm.generation.compcap >= 80 else 1.9  # "plateau effect of ring"
        return (lat + nbytes / (1000.0 * bw)) * 1e-6


def _channels_multi(comm: Communicator, speed: float) -> int:
    per_nic = int(comm.nic_path_gbps // speed) if speed > 0 else 0
    count = min(comm.nics * per_nic, MAX_RING_CHANNELS)
    if comm.per_node > 1:
        share = (comm.per_node - 1) / comm.per_node
        count = min(count, int(comm.nvlink_gbps // (speed * share)))
    return count


def _channels_single(comm: Communicator, speed: float) -> int:
    return min(int(comm.nvlink_gbps // speed), MAX_RING_CHANNELS)


def ring_graph(comm: Communicator) -> Graph:
    """The ring graph NCCL's search finds for ``comm`` (module docstring).

    Raises:
        ConfigError: no speed of NCCL's list fits (a link slower than 0.12 GB/s).
    """
    gen = comm.generation
    multi = comm.nodes > 1
    speeds = gen.speeds_inter if multi else gen.speeds_intra
    fits = _channels_multi if multi else _channels_single
    top = comm.nic_path_gbps if multi else comm.nvlink_gbps
    index = next((i for i, s in enumerate(speeds) if s <= top and fits(comm, s) >= 1), None)
    if index is None:
        raise ConfigError(f"nccl: no channel fits the links of {comm}")
    speed = speeds[index]
    channels = fits(comm, speed)
    # ncclTopoDupChannels (search.cc l. 1036)
    if speed >= 25.0 and not (gen.compcap > 80 and speed < 50.0 and channels > 4):
        doubled = min(2 * channels, MAX_RING_CHANNELS)
        speed /= math.ceil(doubled / channels)
        channels = doubled
    # pass 2: raise the speed while the channel count still fits
    index = min(i for i, s in enumerate(speeds) if s <= speed)
    while index > 0 and fits(comm, speeds[index - 1]) >= channels:
        index -= 1
        speed = speeds[index]
    return Graph(channels, speed, speed)


def nvls_graph(comm: Communicator) -> Graph | None:
    """The NVLS graph (one node of NVSwitch-connected Hopper or later GPUs, >= 2 of them), or
    None where NCCL has none."""
    gen = comm.generation
    if gen.nvls_efficiency <= 0 or not comm.nvswitch or comm.nodes > 1 or comm.per_node < 2:
        return None
    channels = min(MAX_NVLS_ARITY, comm.per_node)
    speeds = gen.speeds_intra
    index = next((i for i, s in enumerate(speeds) if s * channels <= comm.nvlink_gbps), None)
    if index is None:
        return None
    speed = speeds[index]
    inter = index
    while inter > 0 and speeds[inter] < 2 * speed:
        inter -= 1
    return Graph(channels, speed, speeds[inter])


def _steps(kind: str, ranks: int) -> int:
    return 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1


def choices(kind: str, comm: Communicator) -> list[Choice]:
    """Every (algorithm, protocol) NCCL's tuner allows for ``kind`` on ``comm``, with its
    latency and algorithm bandwidth (module docstring).

    Raises:
        ConfigError: an unknown kind.
    """
    if kind not in KINDS:
        raise ConfigError(f"nccl: unknown collective {kind!r}; choose from: {', '.join(KINDS)}")
    gen, n, p = comm.generation, comm.node_index, comm.ranks
    steps = _steps(kind, p)
    ring = ring_graph(comm)
    multi = comm.nodes > 1
    out: list[Choice] = []
    ring_bus = ring.channels * ring.intra_gbps
    inter_steps = 0 if not multi else (2 * (comm.nodes - 1) if kind == "all_reduce" else comm.nodes - 1)
    protocols = PROTOCOLS
    for q, proto in enumerate(protocols):
        if proto == "LL":
            bus = min(gen.ll_max_gbps[n], ring_bus * 0.5)
        elif proto == "LL128":
            bus = min(ring_bus * 0.92, ring.channels * gen.ring_ll128_gbps[n])
        else:
            bus = ring_bus
        intra = HW_LATENCY_US["nvlink"]["ring"][q]
        inter = HW_LATENCY_US["net"]["tree" if comm.per_node == 1 else "ring"][q]
        if multi:
            intra = max(intra, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
        latency = BASE_LATENCY_US["ring"][q] + (steps - inter_steps) * intra + inter_steps * inter
        out.append(Choice("ring", proto, latency, bus * p / steps, BASE_LATENCY_US["ring"][q],
                          intra, inter, inter_steps))
    if kind == "all_reduce":
        base = min(ring_bus * 0.92, ring.channels * gen.tree_gbps[n])
        for q, proto in enumerate(protocols):
            if proto == "LL":
                bus = min(base / 3.8, gen.ll_max_gbps[n])
            elif proto == "LL128":
                bus = min(base * (7.0 / 9.0 if not multi else 120.0 / 128.0),
                          ring.channels * gen.tree_ll128_gbps[n])
            else:
                bus = base
            intra = HW_LATENCY_US["nvlink"]["tree"][q]
            inter = HW_LATENCY_US["net"]["tree"][q]
            latency = BASE_LATENCY_US["tree"][q] + 2 * (
                (comm.per_node - 1) * intra + int(math.log2(comm.nodes)) * inter)
            out.append(Choice("tree", proto, latency, bus * 0.5, BASE_LATENCY_US["tree"][q],
                              intra, inter))
    nvls = nvls_graph(comm)
    if nvls is not None:
        per_channel = nvls.intra_gbps * gen.nvls_efficiency * (nvls.channels - 1) / nvls.channels
        per_channel *= 2.0 if kind == "all_reduce" else (comm.per_node - 1) / comm.per_node
        bus = nvls.channels * min(per_channel, nvls.inter_gbps)
        algbw = bus * p / steps if kind == "all_reduce" else bus
        out.append(Choice("nvls", "Simple", HW_LATENCY_US["nvlink"]["nvls"][2], algbw,
                          HW_LATENCY_US["nvlink"]["nvls"][2]))
    return out


def best(kind: str, nbytes: float, comm: Communicator,
         algorithm: str | None = None) -> tuple[float, Choice]:
    """(seconds, choice): the (algorithm, protocol) NCCL's tuner predicts fastest for
    ``nbytes`` and its time (``nbytes``: the all-reduce buffer, all-gather output or
    reduce-scatter input); ``algorithm`` restricts the choice to one algorithm (as
    ``NCCL_ALGO`` does; ring when that one does not apply).

    Raises:
        ConfigError: an unknown kind.
    """
    options = choices(kind, comm)
    if algorithm is not None:
        options = [c for c in options if c.algorithm == algorithm] or \
            [c for c in options if c.algorithm == "ring"]
    timed = [(c.time_s(nbytes, kind, comm), c) for c in options]
    return min(timed, key=lambda pair: pair[0])


def pipelined_time_s(choice: Choice, kind: str, nbytes: float, comm: Communicator) -> float:
    """Seconds of ``choice`` run as NCCL's kernels run it: channels cut for small messages,
    chunks, loops and steps (:mod:`archplace.cost.nccl_pipeline`); NVLS keeps the tuner's
    time."""
    if choice.algorithm == "nvls":
        return choice.time_s(nbytes, kind, comm)
    ring = ring_graph(comm)
    p = comm.ranks
    channels = nccl_pipeline.comm_channels(ring.channels, comm.generation.compcap, comm.nodes,
                                           ring.intra_gbps)
    run = nccl_pipeline.plan(choice.algorithm, choice.protocol, nbytes, channels, comm.nodes,
                             p, ring.channels * ring.intra_gbps)
    base_s = choice.base_us * 1e-6
    if choice.algorithm == "ring":
        steps = _steps(kind, p)
        rate = choice.bandwidth_gbps * GB * steps / p / channels
        inter = min(choice.inter_steps, steps)
        hops = [choice.hop_intra_us * 1e-6] * (steps - inter) + [choice.hop_inter_us * 1e-6] * inter
        return nccl_pipeline.ring_time_s(choice.protocol, run, p, rate, base_s, hops)
    rate = choice.bandwidth_gbps * GB / channels
    depth = 2 * ((comm.per_node - 1) + int(math.log2(comm.nodes)))
    return nccl_pipeline.tree_time_s(choice.protocol, run, rate, base_s,
                                     (choice.latency_us - choice.base_us) * 1e-6, depth)


def collective_time_s(kind: str, nbytes: float, comm: Communicator,
                      algorithm: str | None = None, pipelined: bool = False) -> float:
    """Seconds of one all-reduce, all-gather or reduce-scatter of ``nbytes`` on ``comm`` (0 for
    one rank or no bytes): the (algorithm, protocol) NCCL's tuner picks (:func:`best`;
    ``algorithm`` as there), at the tuner's time or, with ``pipelined``, as its kernels
    pipeline it (:func:`pipelined_time_s`).  The tuner's time is the default: the pipelined
    charge is faster still and further from every measured log (docs/model.md, Collectives).

    Raises:
        ConfigError: an unknown kind or negative bytes.
    """
    if not (math.isfinite(nbytes) and nbytes >= 0):
        raise ConfigError(f"nccl {kind}: bytes must be finite and >= 0, got {nbytes!r}")
    if comm.ranks <= 1 or nbytes == 0:
        if kind not in KINDS:
            raise ConfigError(f"nccl: unknown collective {kind!r}; choose from: {', '.join(KINDS)}")
        return 0.0
    seconds, choice = best(kind, nbytes, comm, algorithm)
    return pipelined_time_s(choice, kind, nbytes, comm) if pipelined else seconds


def bus_bandwidth_gbps(kind: str, nbytes: float, comm: Communicator,
                       pipelined: bool = False) -> float:
    """The bus bandwidth nccl-tests would print for the predicted time (``pipelined`` as in
    :func:`collective_time_s`), GB/s: algbw x 2(p-1)/p for all-reduce, x (p-1)/p for
    all-gather and reduce-scatter (nccl-tests ``doc/PERFORMANCE.md``)."""
    seconds = collective_time_s(kind, nbytes, comm, pipelined=pipelined)
    p = comm.ranks
    factor = 2 * (p - 1) / p if kind == "all_reduce" else (p - 1) / p
    return nbytes / seconds / GB * factor


def exchange_time_s(intra_bytes: float, inter_bytes: float, comm: Communicator,
                    gpus_per_nic: float) -> float:
    """Seconds of concurrent send/receive pairs from one GPU (module docstring): ``intra_bytes``
    to its peers on its node over NVLink, ``inter_bytes`` to those on other nodes over its share
    of the node's NICs (``gpus_per_nic`` GPUs on one NIC; below 1 when a GPU has several)."""
    if intra_bytes <= 0 and inter_bytes <= 0:
        return 0.0
    base = BASE_LATENCY_US["ring"][2]
    times = []
    if intra_bytes > 0:
        latency = base + HW_LATENCY_US["nvlink"]["ring"][2]
        times.append(latency + intra_bytes / (1000.0 * comm.nvlink_gbps))
    if inter_bytes > 0:
        latency = base + HW_LATENCY_US["net"]["ring"][2]
        gbps = comm.nic_path_gbps / gpus_per_nic
        times.append(latency + inter_bytes / (1000.0 * gbps))
    return max(times, default=0.0) * 1e-6


def generation(name: str) -> NcclGeneration:
    """The :class:`NcclGeneration` called ``name``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    try:
        return GENERATIONS[name]
    except KeyError:
        raise ConfigError(f"unknown nccl_generation {name!r}; choose from: "
                          f"{', '.join(GENERATIONS)}") from None
