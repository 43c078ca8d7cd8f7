"""Collective communication time with the alpha-beta model (docs/model.md, Collectives).

A message of ``b`` bytes over a link costs ``alpha + b / beta``: ``alpha`` is the
per-message start-up latency, ``beta`` the bandwidth a device can inject (per
direction, summed over the links it uses).  For a buffer of ``n`` bytes on a group
of ``p`` devices (Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005; Patarasuk and Yuan, JPDC 2009):

=================  =====================================  =======================================
algorithm          all-reduce                             all-gather / reduce-scatter
=================  =====================================  =======================================
ring               2(p-1)·α + 2(p-1)/p · n/β              (p-1)·α + (p-1)/p · n/β
tree               2⌈log2 p⌉·(α + n/β)                    ⌈log2 p⌉·α + (p-1)/p · n/β
                   (binomial reduce, then broadcast)      (recursive doubling / halving)
torus (d dims)     2Σ(p_i-1)·α + 2(p-1)/p · n/β           Σ(p_i-1)·α + (p-1)/p · n/β
=================  =====================================  =======================================

``n`` is the full buffer: the all-reduce buffer, the all-gather OUTPUT, the
reduce-scatter INPUT.  On a torus the group is laid out as a d-dimensional block
``p = p_1·...·p_d`` (factors as equal as possible) and rings run along each
dimension in turn (the dimension-ordered algorithm TPU pods use, Jouppi et al.,
ISCA 2023): the bandwidth term is the ring's, since all 2d links carry traffic,
but only ``Σ(p_i - 1)`` start-ups are paid.  Send/receive of ``n`` bytes between
two devices is ``α + n/β``.

All-to-all (expert-parallel token dispatch and combine): every rank holds a buffer of ``n``
bytes, ``n/p`` for each member, keeps its own share and sends the other ``(p-1)/p`` of it, one
message per peer (the pairwise exchange of Thakur et al. 2005, sec. 4.5, which NCCL runs as p
concurrent send/receive pairs): ``(p-1)·α + (p-1)/p · n/β``, whatever the topology (a torus's
bisection is not modelled).  A group larger than a node is hierarchical, as DeepSeek-V3's
dispatch and combine kernels run it over InfiniBand and NVLink at once (DeepSeek-AI,
"DeepSeek-V3 Technical Report", 2024, sec. 3.2.2): the ``c`` peers on the rank's own node get
``c/p · n`` over the intra-node link while the ``p-1-c`` others get ``(p-1-c)/p · n`` over the
inter-node link at the per-device bandwidth, concurrently, so the time is the slower of
``c·α_intra + c/p · n/β_intra`` and ``(p-1-c)·α_inter + (p-1-c)/p · n/β_inter``, for the
busiest rank (:func:`cluster_all_to_all_time_s`).  The copies are assumed spread uniformly
over the group: DeepSeek-V3's node-limited routing (each token sent to at most 4 nodes, its
copies for one node sent once over InfiniBand, sec. 2.1.2 and 3.2.2) cuts the inter-node
share below that and is not modelled.  ``n`` is the buffer one rank sends (the
routed tokens times hidden size times bytes per element, padded as the capacity factor says).

Which algorithm: on a ``switched`` network the faster of ring and tree; on a ``ring`` the
ring; on ``torus2d``/``torus3d`` the torus algorithm.  The caller picks the link:
:func:`cluster_collective_time_s` takes the intra-node link when the group's span of
consecutive ranks fits in one node, the inter-node link otherwise (``Cluster.link``).

NVIDIA GPUs on a switched cluster (``Cluster.nccl_generation`` set): the cluster functions
(:func:`cluster_collective_time_s`, :func:`cluster_all_to_all_time_s`,
:func:`cluster_send_recv_time_s`) price the group as the NCCL communicator it is
(:func:`nccl_communicator`: ranks per node, nodes, the NICs its GPUs own) with NCCL's own cost
model, :mod:`archplace.cost.nccl`; the alpha-beta formulas above stay for the other
accelerators (TPU tori and rings, the search's designs) and for callers that give a link.
"""

from __future__ import annotations

import functools
import math

from archplace.base.errors import ConfigError
from archplace.cost import nccl
from archplace.hw.cluster import Cluster, Topology

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all")
ALGORITHMS = ("ring", "tree", "torus")

_TORUS_DIMS = {Topology.TORUS_2D: 2, Topology.TORUS_3D: 3}


def collective_kind(target: str) -> str:
    """The collective of an operator target: ``"_c10d_functional.all_reduce.default"`` ->
    ``"all_reduce"``; ``all_gather_into_tensor`` -> ``all_gather``; ``send``/``recv`` ->
    ``send_recv``; ``all_to_all_single`` (or ``alltoall``) -> ``all_to_all``.

    Raises:
        ConfigError: a target that names none of :data:`KINDS`.
    """
    text = target.lower()
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        if kind in text or kind.replace("_", "") in text:
            return kind
    if "send" in text or "recv" in text:
        return "send_recv"
    raise ConfigError(f"unknown collective {target!r}; expected one of: {', '.join(KINDS)}")


@functools.lru_cache(maxsize=4096)
def torus_factors(p: int, dims: int) -> tuple[int, ...]:
    """``p`` as a product of ``dims`` whole factors with the smallest sum (most cube-like),
    largest first: ``torus_factors(64, 3) == (4, 4, 4)``, ``torus_factors(12, 2) == (4, 3)``."""
    if dims <= 1 or p <= 1:
        return (max(p, 1),) + (1,) * max(dims - 1, 0)
    best: tuple[int, ...] | None = None
    for first in range(1, p + 1):
        if p % first:
            continue
        rest = torus_factors(p // first, dims - 1)
        cand = tuple(sorted((first, *rest), reverse=True))
        if best is None or sum(cand) < sum(best):
            best = cand
    assert best is not None
    return best


def _check(kind: str, bytes_: float, group_size: int, latency_s: float, bandwidth: float) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown collective {kind!r}; choose from: {', '.join(KINDS)}")
    if not (math.isfinite(bytes_) and bytes_ >= 0):
        raise ConfigError(f"collective {kind}: bytes must be finite and >= 0, got {bytes_!r}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"collective {kind}: group size must be a whole number >= 1, got {group_size!r}")
    if not (math.isfinite(latency_s) and latency_s >= 0):
        raise ConfigError(f"collective {kind}: latency must be finite and >= 0, got {latency_s!r}")
    if not bandwidth > 0:
        raise ConfigError(f"collective {kind}: bandwidth must be positive, got {bandwidth!r}")


def _time(kind: str, n: float, p: int, alpha: float, beta: float, algorithm: str,
          topology: Topology) -> float:
    both = 2.0 if kind == "all_reduce" else 1.0
    share = (p - 1) / p * n / beta
    if algorithm == "ring":
        return both * ((p - 1) * alpha + share)
    if algorithm == "tree":
        steps = math.ceil(math.log2(p))
        if kind == "all_reduce":
            return 2.0 * steps * (alpha + n / beta)
        return steps * alpha + share
    dims = _TORUS_DIMS.get(topology, 3)
    return both * (sum(f - 1 for f in torus_factors(p, dims)) * alpha + share)


def collective_time_s(
    kind: str,
    bytes_: float,
    group_size: int,
    latency_s: float,
    bandwidth_bytes_per_s: float,
    topology: Topology | str = Topology.SWITCHED,
    *,
    algorithm: str | None = None,
) -> float:
    """Seconds of one collective (formulas and algorithm choice in the module docstring).

    Args:
        kind: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"send_recv"`` or
            ``"all_to_all"``.
        bytes_: the full buffer in bytes (all-gather: its output; reduce-scatter: its input;
            all-to-all: the buffer one rank sends, its own share included).
        group_size: devices taking part; 1 (or 0 bytes) costs nothing.
        latency_s: alpha, the per-message start-up of the link, seconds.
        bandwidth_bytes_per_s: beta, per device and direction.
        topology: a :class:`Topology` or its text (``switched``, ``ring``, ``torus2d``, ``torus3d``).
        algorithm: force ``"ring"``, ``"tree"`` or ``"torus"`` instead of the topology's choice
            (ignored by send/receive and all-to-all, which have one algorithm each).

    Raises:
        ConfigError: an unknown kind, topology or algorithm; negative or non-finite bytes or
            latency; a group size below 1; a non-positive bandwidth.
    """
    _check(kind, bytes_, group_size, latency_s, bandwidth_bytes_per_s)
    try:
        topo = Topology(topology)
    except ValueError:
        choices = ", ".join(t.value for t in Topology)
        raise ConfigError(f"unknown topology {topology!r}; choose from: {choices}") from None
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algorithm!r}; choose from: {', '.join(ALGORITHMS)}")
    if group_size <= 1 or bytes_ == 0:
        return 0.0
    if kind == "send_recv":
        return latency_s + bytes_ / bandwidth_bytes_per_s
    if kind == "all_to_all":
        return _all_to_all(float(bytes_), group_size, group_size - 1, latency_s, bandwidth_bytes_per_s)
    args = (kind, float(bytes_), group_size, latency_s, bandwidth_bytes_per_s)
    if algorithm is not None:
        return _time(*args, algorithm, topo)
    if topo in _TORUS_DIMS:
        return _time(*args, "torus", topo)
    if topo is Topology.RING:
        return _time(*args, "ring", topo)
    return min(_time(*args, "ring", topo), _time(*args, "tree", topo))


def group_span(group_size: int, stride: int = 1) -> int:
    """Consecutive device ranks a group of ``group_size`` ranks ``stride`` apart spans."""
    return stride * (group_size - 1) + 1


def cluster_collective_time_s(
    cluster: Cluster, kind: str, bytes_: float, group_size: int, stride: int = 1,
    *, algorithm: str | None = None,
) -> float:
    """:func:`collective_time_s` on the link of ``cluster`` the group uses
    (:meth:`~archplace.hw.cluster.Cluster.group_link`: the one its span fits in, or the
    inter-node link when groups of consecutive ranks straddle node boundaries).

    Args:
        cluster: devices and links.
        kind, bytes_, group_size, algorithm: as :func:`collective_time_s`.
        stride: rank distance between group members (1 for a TP group of consecutive
            ranks; ``tp`` for a DP group laid out after TP). An all-to-all of consecutive ranks
            is :func:`cluster_all_to_all_time_s`.

    Raises:
        ConfigError: as :func:`collective_time_s`, or a stride below 1.
    """
    if stride < 1:
        raise ConfigError(f"collective {kind}: stride must be >= 1, got {stride}")
    if kind == "all_to_all" and stride == 1:
        return cluster_all_to_all_time_s(cluster, bytes_, group_size)
    alpha, beta = cluster.group_link(group_size, stride)
    comm = nccl_communicator(cluster, group_size, stride)
    if comm is not None and algorithm in (None, "ring", "tree"):
        _check(kind, bytes_, group_size, alpha, beta)
        if group_size <= 1 or bytes_ == 0:
            return 0.0
        if kind == "send_recv":
            return _nccl_exchange(cluster, comm, 0.0 if comm.nodes > 1 else float(bytes_),
                                  float(bytes_) if comm.nodes > 1 else 0.0)
        if kind == "all_to_all":
            n = float(bytes_)
            return _nccl_exchange(cluster, comm, (comm.per_node - 1) / group_size * n,
                                  (group_size - comm.per_node) / group_size * n)
        return nccl.collective_time_s(kind, float(bytes_), comm, algorithm=algorithm)
    return collective_time_s(kind, bytes_, group_size, alpha, beta, cluster.topology,
                             algorithm=algorithm)


def _all_to_all(n: float, p: int, peers: int, alpha: float, beta: float) -> float:
    """Pairwise-exchange time of ``peers`` of the ``p - 1`` messages of ``n / p`` bytes each."""
    return peers * alpha + peers / p * n / beta


def same_node_peers(cluster: Cluster, group_size: int) -> tuple[int, int]:
    """(fewest, most) other members of a rank's group on the rank's own node, over every rank of
    ``cluster`` grouped in aligned blocks of ``group_size`` consecutive ranks (the expert-parallel
    groups of Megatron-Core's expert rank layout etp-ep-edp with etp = 1).

    Raises:
        ConfigError: a group size below 1.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"all_to_all: group size must be a whole number >= 1, got {group_size!r}")
    node = cluster.devices_per_node
    if cluster.devices <= node:
        return group_size - 1, group_size - 1
    period = group_size * node // math.gcd(group_size, node)  # the layout repeats after lcm ranks
    counts = set()
    for start in range(0, period, group_size):
        end = start + group_size
        first_node, last_node = start // node, (end - 1) // node
        for index in range(first_node, last_node + 1):
            counts.add(min(end, (index + 1) * node) - max(start, index * node) - 1)
    return min(counts), max(counts)


def cluster_all_to_all_time_s(cluster: Cluster, bytes_: float, group_size: int) -> float:
    """Seconds of an all-to-all of ``bytes_`` per rank over ``group_size`` consecutive ranks of
    ``cluster`` (module docstring): the intra-node share over the intra-node link and the rest
    over the inter-node link, concurrently, for the rank with the most traffic on each.

    Args:
        cluster: devices and links (sustained bandwidths, :meth:`Cluster.link`).
        bytes_: the buffer one rank sends, its own share included, bytes.
        group_size: ranks in the group (the EP degree); 1 (or 0 bytes) costs nothing.

    Raises:
        ConfigError: negative or non-finite bytes, a group size below 1.
    """
    intra_alpha, intra_beta = cluster.link(1)
    _check("all_to_all", bytes_, group_size, intra_alpha, intra_beta)
    if group_size <= 1 or bytes_ == 0:
        return 0.0
    fewest, most = same_node_peers(cluster, group_size)
    comm = nccl_communicator(cluster, group_size)
    if comm is not None:
        n = float(bytes_)
        return _nccl_exchange(cluster, comm, most / group_size * n,
                              (group_size - 1 - fewest) / group_size * n)
    inter_alpha, inter_beta = cluster.link(cluster.devices_per_node + 1)
    n = float(bytes_)
    intra = _all_to_all(n, group_size, most, intra_alpha, intra_beta)
    inter = _all_to_all(n, group_size, group_size - 1 - fewest, inter_alpha, inter_beta)
    return max(intra, inter)


def cluster_send_recv_time_s(cluster: Cluster, bytes_: float, stride: int) -> float:
    """Seconds of one send/receive of ``bytes_`` between two ranks ``stride`` apart on
    ``cluster``: NCCL's point-to-point (:func:`archplace.cost.nccl.exchange_time_s`) on NVIDIA
    clusters, ``alpha + bytes / beta`` on the link of the pair's span otherwise.

    Raises:
        ConfigError: negative or non-finite bytes, a stride below 1.
    """
    return cluster_collective_time_s(cluster, "send_recv", bytes_, 2, stride)


def _nccl_exchange(cluster: Cluster, comm: nccl.Communicator, intra_bytes: float,
                   inter_bytes: float) -> float:
    return nccl.exchange_time_s(intra_bytes, inter_bytes, comm,
                                cluster.devices_per_node / cluster.node_nics)


def _member_nics(cluster: Cluster, per_node: int, stride: int) -> int:
    """NICs owned by ``per_node`` GPUs ``stride`` apart on one node (at least 1)."""
    node, nics = cluster.devices_per_node, cluster.node_nics
    if nics >= node:
        return per_node * (nics // node)
    local = {(i * stride) % node for i in range(per_node)}
    return max(1, len({i * nics // node for i in local}))


def nccl_communicator(cluster: Cluster, group_size: int, stride: int = 1) -> nccl.Communicator | None:
    """The NCCL communicator of a group of ``group_size`` ranks ``stride`` apart on
    ``cluster``, or None where NCCL's model does not apply (no ``nccl_generation``, or a
    topology other than ``switched``).

    Its layout: the whole group on one node when its span fits (``Cluster.group_link``'s rule
    for groups that straddle nodes gives two nodes of half the group); one rank per node when
    ``stride >= devices_per_node``; otherwise ``devices_per_node // stride`` ranks on each of
    ``ceil(group_size / that)`` nodes.  NVLink: ``links x SMxx_NVLINK_BW`` with ``links`` the
    intra-node bandwidth over the generation's per-link line rate; the NICs the members own
    (``Cluster.node_nics`` spread evenly over the node's devices).
    """
    gen_name = cluster.nccl_generation
    if gen_name is None or cluster.topology is not Topology.SWITCHED or group_size < 1:
        return None
    gen = nccl.generation(gen_name)
    node = cluster.devices_per_node
    straddles = (stride == 1 and cluster.devices > node and 0 < group_size <= node
                 and node % group_size != 0)
    if straddles:
        per_node, nodes = -(-group_size // 2), 2
    elif group_span(group_size, stride) <= node:
        per_node, nodes = group_size, 1
    elif stride >= node:
        per_node, nodes = 1, group_size
    else:
        per_node = max(1, min(group_size, node // stride))
        nodes = -(-group_size // per_node)
    links = max(1, round(cluster.intra_node_bandwidth_bytes_per_s / (gen.nvlink_line_gbps * nccl.GB)))
    return nccl.Communicator(gen, per_node, nodes, links * gen.nvlink_gbps,
                             cluster.nic_bandwidth_bytes_per_s / nccl.GB,
                             _member_nics(cluster, per_node, stride), nvswitch=node > 1)
